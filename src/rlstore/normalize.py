"""Running statistics for normalization: observations, rewards, intrinsic (RND) rewards.

* :class:`RunningMeanStd` keeps the mean and (population) variance of everything it has seen,
  updated from whole batches with the parallel-variance formula (Chan et al. 1979), which is
  exact: after ``update(a); update(b)`` the statistics equal those of ``concatenate([a, b])``.
* :class:`DiscountedReturnNormalizer` scales rewards by the running std of their discounted
  running sum, as RND does for intrinsic rewards (Burda et al. 2018, section 2.4; CleanRL
  ``RewardForwardFilter``): per env ``R <- gamma * R + r`` (non-episodic: never reset at episode
  ends), the std of all ``R`` values seen so far, and ``r / (std + eps)`` (no mean subtraction).
  Given ``dones`` the sums restart at episode ends instead (Stable-Baselines3 ``VecNormalize``).

Statistics are float64 numpy arrays on the CPU; inputs may be numpy arrays or torch tensors (any
device) and results come back in the input's type, dtype and device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np
import torch

from rlstore._checks import check_count, check_keys, real_number
from rlstore._trees import as_tensor, check_real, to_numpy
from rlstore.errors import CheckpointError, RLStoreError, SpecError
from rlstore.returns._io import check_flags

__all__ = ["RunningMeanStd", "DiscountedReturnNormalizer"]

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)
_FMAX = float(np.finfo(np.float64).max)


def _as_f64(name: str, x: Any) -> np.ndarray:
    """float64 numpy copy/view of an array-like or tensor (any device) of finite real numbers.

    Raises:
        SpecError: naming ``name``: not numbers (strings, objects, dicts, ragged lists), complex
            values, NaN/inf, a 'meta' tensor.
    """
    if isinstance(x, Mapping):
        raise SpecError(f"{name}: expected an array or tensor, got a dict")
    t = check_real(name, as_tensor(name, x))
    if t.dtype == torch.bool:
        raise SpecError(f"{name}: expected numbers, got dtype {t.dtype}")
    return t.to(device="cpu", dtype=torch.float64).numpy()


def _number(name: str, value: Any, low: float, high: float, expected: str | None = None) -> float:
    """:func:`real_number` raising :class:`SpecError` (the normalizers' error for bad input)."""
    try:
        return real_number(name, value, low, high, expected=expected)
    except RLStoreError as exc:
        raise SpecError(str(exc)) from None


def _checkpoint_array(name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    try:
        a = _as_f64(name, x)
    except RLStoreError as exc:
        raise CheckpointError(str(exc)) from exc
    if a.shape != shape:
        raise CheckpointError(f"{name}: expected shape {shape}, got {a.shape}")
    return a.copy()


def _like(result: np.ndarray, like: Any) -> Any:
    if isinstance(like, torch.Tensor):
        dt = like.dtype if like.is_floating_point() else torch.get_default_dtype()
        return torch.from_numpy(result).to(device=like.device, dtype=dt)
    like = np.asarray(like)
    return result.astype(like.dtype if like.dtype.kind == "f" else np.float64, copy=False)


class RunningMeanStd:
    """Running mean and population variance of samples of shape ``shape``.

    Before the first update ``mean = 0``, ``var = 1`` and ``count = 0`` (so scaling by ``std`` is
    the identity); the first update replaces them with the batch's own statistics.

    Args:
        shape: shape of one sample (``()`` for scalars such as rewards).

    Example:
        >>> rms = RunningMeanStd()
        >>> rms.update(np.array([1.0, 2.0])); rms.update(np.array([3.0, 4.0]))
        >>> float(rms.mean), float(rms.var), rms.count
        (2.5, 1.25, 4)
    """

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        if not isinstance(shape, (tuple, list)):
            raise SpecError(f"shape: expected a tuple of ints, got {shape!r}")
        self.shape = tuple(check_count("shape", s, minimum=0, error=SpecError) for s in shape)
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.var = np.ones(self.shape, dtype=np.float64)
        self.count = 0

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation, ``sqrt(var)``, shape ``shape``."""
        return np.sqrt(self.var)

    def _check_x(self, x: Any) -> np.ndarray:
        a = _as_f64("x", x)
        k = len(self.shape)
        if a.ndim < k or (k and a.shape[a.ndim - k :] != self.shape):
            raise SpecError(
                f"x: expected shape (..., {', '.join(map(str, self.shape))}) "
                f"ending in {self.shape}, got {a.shape}"
            )
        return a

    def update(self, x: Any) -> None:
        """Add a batch ``x`` of shape ``(..., *shape)``; all leading axes are sample axes."""
        a = self._check_x(x)
        flat = a.reshape((-1, *self.shape))
        if flat.shape[0] == 0:
            return
        with np.errstate(over="ignore", invalid="ignore"):
            mean, var = flat.mean(axis=0), flat.var(axis=0)
        if not (np.isfinite(mean).all() and np.isfinite(var).all()):
            raise SpecError(
                f"x: expected values whose variance fits float64, got values in "
                f"[{flat.min()}, {flat.max()}]"
            )
        try:
            self.update_from_moments(mean, var, flat.shape[0])
        except SpecError as exc:
            raise SpecError(f"x: {exc}") from None

    def update_from_moments(self, batch_mean: Any, batch_var: Any, batch_count: int) -> None:
        """Merge a batch given by its mean, population variance and size (parallel formula)."""
        bm = _as_f64("batch_mean", batch_mean)
        bv = _as_f64("batch_var", batch_var)
        if bm.shape != self.shape or bv.shape != self.shape:
            raise SpecError(
                f"batch_mean/batch_var: expected shape {self.shape}, got {bm.shape} and {bv.shape}"
            )
        if (bv < 0).any():
            raise SpecError(f"batch_var: expected values >= 0, got min {bv.min()}")
        n_b = check_count("batch_count", batch_count, error=SpecError)
        n_a = self.count
        if n_a == 0:
            if not np.isfinite(bv).all():
                raise SpecError("batch_var: the batch variance overflows float64")
            self.mean, self.var, self.count = bm.copy(), bv.copy(), n_b
            return
        tot = n_a + n_b
        delta = bm - self.mean
        with np.errstate(over="ignore", invalid="ignore"):
            m2 = self.var * n_a + bv * n_b + delta**2 * (n_a * n_b / tot)
            mean, var = self.mean + delta * (n_b / tot), m2 / tot
        if not (np.isfinite(mean).all() and np.isfinite(var).all()):
            raise SpecError(
                "batch_mean/batch_var: the merged statistics overflow float64 "
                f"(batch mean in [{bm.min()}, {bm.max()}], var up to {bv.max()})"
            )
        self.mean, self.var, self.count = mean, var, tot

    def normalize(self, x: ArrayT, *, clip: float | None = None, eps: float = 1e-8) -> ArrayT:
        """``(x - mean) / sqrt(var + eps)``, optionally clipped to ``[-clip, clip]``; no update."""
        a = self._check_x(x)
        if clip is not None:
            clip = _number("clip", clip, 0.0, np.inf, "a number >= 0 or None")
        eps = _number("eps", eps, 0.0, _FMAX, "a finite number >= 0")
        out = (a - self.mean) / np.sqrt(self.var + eps)
        if clip is not None:
            out = np.clip(out, -clip, clip)
        return _like(out, x)

    def state_dict(self) -> dict[str, Any]:
        """``{"mean": array, "var": array, "count": int}`` (copies)."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": int(self.count)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; raises :class:`CheckpointError` on a shape mismatch."""
        check_keys("sd", sd, ("count", "mean", "var"))
        mean = _checkpoint_array("mean", sd["mean"], self.shape)
        var = _checkpoint_array("var", sd["var"], self.shape)
        try:
            count = check_count("count", sd["count"], minimum=0, error=CheckpointError)
        except CheckpointError:
            # a 0-d integer array (how safetensors gives scalars back) is a count too
            c = sd["count"]
            if not (isinstance(c, np.ndarray) and c.ndim == 0 and c.dtype.kind in "iu"):
                raise
            count = check_count("count", c.item(), minimum=0, error=CheckpointError)
        if (var < 0).any():
            raise CheckpointError(f"var: expected values >= 0, got min {var.min()}")
        self.mean, self.var, self.count = mean, var, count


class DiscountedReturnNormalizer:
    """RND-style reward scaling by the running std of a non-episodic discounted reward sum.

    For each batch of rewards ``(T, N)`` (time-major; a 1-D input is one env, ``(T,)``):

    1. per env, for ``t = 0 .. T-1``: ``R_n <- gamma * R_n + r[t, n]`` (``R`` starts at 0 and
       persists across calls; it is never reset at episode ends);
    2. the ``T * N`` values of ``R`` update a :class:`RunningMeanStd`;
    3. the rewards are returned divided by ``std + eps`` (no mean subtraction).

    Args:
        gamma: discount of the running sum in ``[0, 1]`` (RND: the intrinsic gamma, 0.99).
        eps: added to the std before dividing, ``>= 0``.

    Example:
        >>> norm = DiscountedReturnNormalizer(0.99)
        >>> scaled = norm(np.random.default_rng(0).random((128, 8)))
    """

    def __init__(self, gamma: float, *, eps: float = 1e-8) -> None:
        self.gamma = _number("gamma", gamma, 0.0, 1.0, "a number in [0, 1]")
        self.eps = _number("eps", eps, 0.0, _FMAX, "a finite number >= 0")
        self.rms = RunningMeanStd(())
        self.returns: np.ndarray | None = None  # (N,) running discounted sums

    def _as_2d(self, rewards: Any) -> np.ndarray:
        r = _as_f64("rewards", rewards)
        if r.ndim == 1:
            r = r[:, None]
        if r.ndim != 2:
            raise SpecError(f"rewards: expected shape (T,) or (T, N), got {r.shape}")
        if self.returns is not None and r.shape[1] != self.returns.shape[0]:
            raise SpecError(
                f"rewards: expected {self.returns.shape[0]} env columns like "
                f"earlier calls, got shape {r.shape}"
            )
        return r

    def update(self, rewards: Any, dones: Any = None) -> None:
        """Advance the per-env discounted sums over ``rewards`` and update the running std.

        ``dones`` (bool or 0/1 numbers shaped like ``rewards``, an array or a tensor on any
        device; default: never) makes the sums episodic, as in Stable-Baselines3's
        ``VecNormalize``: ``R_n`` is reset to 0 after a step with ``dones[t, n]`` (that step's
        sum still counts)."""
        r = self._as_2d(rewards)
        T, N = r.shape
        d = None if dones is None else to_numpy("dones", dones)  # tensors on any device
        if d is not None:
            d = d[:, None] if d.ndim == 1 else d
            if d.shape != r.shape:
                raise SpecError(
                    f"dones: expected bool or 0/1 flags of shape {r.shape} like rewards, got "
                    f"{d.dtype} of shape {d.shape}"
                )
            d = check_flags("dones", d)
        ret = np.zeros(N) if self.returns is None else self.returns.copy()
        sums = np.empty_like(r)
        for t in range(T):  # vectorized over envs; T is a rollout length
            ret = self.gamma * ret + r[t]
            sums[t] = ret
            if d is not None:
                ret = np.where(d[t], 0.0, ret)
        self.rms.update(sums)  # raises before anything changes
        self.returns = ret

    def scale(self, rewards: ArrayT) -> ArrayT:
        """``rewards / (std + eps)`` with the current statistics; no update."""
        r = _as_f64("rewards", rewards)
        return _like(r / (float(self.rms.std) + self.eps), rewards)

    def __call__(self, rewards: ArrayT, dones: Any = None) -> ArrayT:
        """:meth:`update` with ``rewards`` (and ``dones``), then :meth:`scale` them (CleanRL's
        order)."""
        self.update(rewards, dones)
        return self.scale(rewards)

    def state_dict(self) -> dict[str, Any]:
        """Nested dict of numpy arrays and JSON scalars (``returns`` is empty before any call)."""
        ret = np.zeros(0) if self.returns is None else self.returns.copy()
        return {"gamma": self.gamma, "eps": self.eps, "returns": ret, "rms": self.rms.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; the gamma must match the constructor's."""
        check_keys("sd", sd, ("eps", "gamma", "returns", "rms"))
        try:
            gamma = real_number("gamma", sd["gamma"], 0.0, 1.0)
            eps = real_number("eps", sd["eps"], 0.0, _FMAX, expected="a finite number >= 0")
        except RLStoreError as exc:
            raise CheckpointError(str(exc)) from exc
        if gamma != self.gamma:
            raise CheckpointError(f"gamma: checkpoint has {gamma}, this normalizer {self.gamma}")
        raw = sd["returns"]
        n = int(np.shape(raw)[0]) if np.ndim(raw) == 1 else -1
        ret = _checkpoint_array("returns", raw, (max(n, 0),) if n >= 0 else ())
        if ret.ndim != 1:
            raise CheckpointError(f"returns: expected shape (N,), got {ret.shape}")
        rms = RunningMeanStd(())
        rms.load_state_dict(sd["rms"])
        self.returns = None if ret.size == 0 else ret
        self.eps, self.rms = eps, rms
