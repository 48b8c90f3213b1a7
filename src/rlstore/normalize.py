"""Running statistics for normalization: observations, rewards, intrinsic (RND) rewards.

* :class:`RunningMeanStd` keeps the mean and (population) variance of everything it has seen,
  updated from whole batches with the parallel-variance formula (Chan et al. 1979), which is
  exact: after ``update(a); update(b)`` the statistics equal those of ``concatenate([a, b])``.
* :class:`DiscountedReturnNormalizer` scales rewards by the running std of their discounted
  running sum, as RND does for intrinsic rewards (Burda et al. 2018, section 2.4; CleanRL
  ``RewardForwardFilter``): per env ``R <- gamma * R + r`` (non-episodic: never reset at episode
  ends), the std of all ``R`` values seen so far, and ``r / (std + eps)`` (no mean subtraction).

Statistics are float64 numpy arrays on the CPU; inputs may be numpy arrays or torch tensors (any
device) and results come back in the input's type, dtype and device.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import torch

from rlstore.errors import CheckpointError, SpecError

__all__ = ["RunningMeanStd", "DiscountedReturnNormalizer"]

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


def _as_f64(x: Any) -> np.ndarray:
    """float64 numpy copy/view of an array-like or tensor (any device)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().to(device="cpu", dtype=torch.float64).numpy()
    return np.asarray(x, dtype=np.float64)


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
        self.shape = tuple(int(s) for s in shape)
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.var = np.ones(self.shape, dtype=np.float64)
        self.count = 0

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation, ``sqrt(var)``, shape ``shape``."""
        return np.sqrt(self.var)

    def update(self, x: Any) -> None:
        """Add a batch ``x`` of shape ``(..., *shape)``; all leading axes are sample axes."""
        a = _as_f64(x)
        k = len(self.shape)
        if a.ndim < k or (k and a.shape[a.ndim - k :] != self.shape):
            raise SpecError(
                f"x: expected shape (..., {', '.join(map(str, self.shape))}) "
                f"ending in {self.shape}, got {a.shape}"
            )
        flat = a.reshape((-1, *self.shape))
        if flat.shape[0] == 0:
            return
        self.update_from_moments(flat.mean(axis=0), flat.var(axis=0), flat.shape[0])

    def update_from_moments(self, batch_mean: Any, batch_var: Any, batch_count: int) -> None:
        """Merge a batch given by its mean, population variance and size (parallel formula)."""
        bm = _as_f64(batch_mean)
        bv = _as_f64(batch_var)
        if bm.shape != self.shape or bv.shape != self.shape:
            raise SpecError(
                f"batch_mean/batch_var: expected shape {self.shape}, got {bm.shape} and {bv.shape}"
            )
        if int(batch_count) < 1:
            raise SpecError(f"batch_count: expected an int >= 1, got {batch_count!r}")
        n_a, n_b = self.count, int(batch_count)
        if n_a == 0:
            self.mean, self.var, self.count = bm.copy(), bv.copy(), n_b
            return
        tot = n_a + n_b
        delta = bm - self.mean
        m2 = self.var * n_a + bv * n_b + delta**2 * (n_a * n_b / tot)
        self.mean = self.mean + delta * (n_b / tot)
        self.var = m2 / tot
        self.count = tot

    def normalize(self, x: ArrayT, *, clip: float | None = None, eps: float = 1e-8) -> ArrayT:
        """``(x - mean) / sqrt(var + eps)``, optionally clipped to ``[-clip, clip]``; no update."""
        a = _as_f64(x)
        out = (a - self.mean) / np.sqrt(self.var + eps)
        if clip is not None:
            out = np.clip(out, -clip, clip)
        return _like(out, x)

    def state_dict(self) -> dict[str, Any]:
        """``{"mean": array, "var": array, "count": int}`` (copies)."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": int(self.count)}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; raises :class:`CheckpointError` on a shape mismatch."""
        mean = np.asarray(sd["mean"], dtype=np.float64)
        var = np.asarray(sd["var"], dtype=np.float64)
        if mean.shape != self.shape or var.shape != self.shape:
            raise CheckpointError(
                f"RunningMeanStd: expected mean/var of shape {self.shape}, "
                f"got {mean.shape} and {var.shape}"
            )
        self.mean, self.var, self.count = mean.copy(), var.copy(), int(sd["count"])


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
        if not 0.0 <= float(gamma) <= 1.0:
            raise SpecError(f"gamma: expected a number in [0, 1], got {gamma!r}")
        if not float(eps) >= 0.0:
            raise SpecError(f"eps: expected a number >= 0, got {eps!r}")
        self.gamma = float(gamma)
        self.eps = float(eps)
        self.rms = RunningMeanStd(())
        self.returns: np.ndarray | None = None  # (N,) running discounted sums

    def _as_2d(self, rewards: Any) -> np.ndarray:
        r = _as_f64(rewards)
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

    def update(self, rewards: Any) -> None:
        """Advance the per-env discounted sums over ``rewards`` and update the running std."""
        r = self._as_2d(rewards)
        T, N = r.shape
        ret = np.zeros(N) if self.returns is None else self.returns.copy()
        sums = np.empty_like(r)
        for t in range(T):  # vectorized over envs; T is a rollout length
            ret = self.gamma * ret + r[t]
            sums[t] = ret
        self.returns = ret
        self.rms.update(sums)

    def scale(self, rewards: ArrayT) -> ArrayT:
        """``rewards / (std + eps)`` with the current statistics; no update."""
        r = _as_f64(rewards)
        return _like(r / (float(self.rms.std) + self.eps), rewards)

    def __call__(self, rewards: ArrayT) -> ArrayT:
        """:meth:`update` with ``rewards``, then :meth:`scale` them (CleanRL's order)."""
        self.update(rewards)
        return self.scale(rewards)

    def state_dict(self) -> dict[str, Any]:
        """Nested dict of numpy arrays and JSON scalars (``returns`` is empty before any call)."""
        ret = np.zeros(0) if self.returns is None else self.returns.copy()
        return {"gamma": self.gamma, "eps": self.eps, "returns": ret, "rms": self.rms.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; the gamma must match the constructor's."""
        if float(sd["gamma"]) != self.gamma:
            raise CheckpointError(
                f"gamma: checkpoint has {sd['gamma']}, this normalizer {self.gamma}"
            )
        ret = np.asarray(sd["returns"], dtype=np.float64)
        self.returns = None if ret.size == 0 else ret.copy()
        self.eps = float(sd["eps"])
        self.rms.load_state_dict(sd["rms"])
