"""``src.buffers.PPOBuffer`` (a Spinning Up style single-env PPO epoch buffer) on RolloutBuffer.

``PPOBuffer(obs_dim, act_dim, size, batch_size, gamma=0.99, lam=0.95, eps=1e-3)`` with
``store(buffer_dict)``, ``finish_path(last_val=0)``, ``sample_batch()``,
``instantiate_from_config(path)``, ``instantiate_from_config_dict(config)`` and ``schema``, plus
the module function ``discount_cumsum(x, discount)``.

A facade over a one-env :class:`~rlstore.buffers.rollout.RolloutBuffer` (``num_steps=size``):
``store`` is ``add``, ``finish_path(last_val)`` is
:meth:`~rlstore.buffers.rollout.RolloutBuffer.truncate_last` (the path end is known only after
its steps were stored), advantages are its :meth:`compute_returns` GAE, and checkpoints are its
``state_dict``.

Example::

    >>> import numpy as np
    >>> buf = PPOBuffer(obs_dim=3, act_dim=2, size=4, batch_size=2, gamma=0.5, lam=1.0)
    >>> for t in range(4):
    ...     step = {"obs": np.zeros(3), "act": np.zeros(2), "rew": 1.0, "val": 0.0, "logp": -0.7}
    ...     buf.store(step)
    >>> buf.finish_path(last_val=0.0)        # the episode terminated: no bootstrap
    >>> batch = buf.sample_batch()
    >>> [round(float(r), 4) for r in batch["ret"]]   # 1 + 0.5 + 0.25 + 0.125, ...
    [1.875, 1.75, 1.5, 1.0]
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import Field, StrictInt

from rlstore import returns as _returns
from rlstore._checks import check_count, real_number
from rlstore._trees import as_tensor, cast_lossless, real_array
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.buffers.rollout_targets import gae_targets
from rlstore.config import StrictModel
from rlstore.errors import (
    CapacityError,
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    RLStoreError,
    SpecError,
)

__all__ = ["PPOBuffer", "PPOBufferConfig", "discount_cumsum"]


def discount_cumsum(x: Any, discount: float) -> np.ndarray:
    """Discounted cumulative sum ``y[k] = sum_{j >= k} discount**(j - k) * x[j]``.

    Args:
        x: 1-D array-like of length T (list, numpy array or CPU tensor) of finite real numbers.
        discount: the discount factor, a finite float (not a string or bool).

    Returns:
        A numpy array of shape (T,) (float64 for integer/list input, else the input float dtype).

    Example: ``discount_cumsum([1, 2, 3], 0.5)`` is ``[2.75, 3.5, 3.0]``
    (3; 2 + 0.5*3 = 3.5; 1 + 0.5*3.5 = 2.75).
    """
    arr = real_array("x", x)
    if arr.ndim != 1:
        raise SpecError(f"x: expected a 1-D sequence of shape (T,), got shape {arr.shape}")
    big = np.finfo(np.float64).max
    discount = real_number("discount", discount, -big, big, expected="a finite float")
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    return np.asarray(_returns.discount_cumsum(arr, discount))


class PPOBufferConfig(StrictModel):
    """The constructor keys of :class:`PPOBuffer` (the original's strictyaml ``Map``)."""

    obs_dim: StrictInt = Field(gt=0, description="observation size, an int")
    act_dim: StrictInt = Field(gt=0, description="action size, an int")
    size: StrictInt = Field(gt=0, description="steps per epoch, an int")
    batch_size: StrictInt = Field(gt=0, description="minibatch size, an int <= size")
    gamma: float = Field(0.99, strict=True, ge=0.0, le=1.0)
    lam: float = Field(0.95, strict=True, ge=0.0, le=1.0)
    eps: float = Field(1e-3, strict=True, ge=0.0)


def _as_float32(value: Any, field: str) -> torch.Tensor:
    """``value`` as a float32 CPU tensor if the conversion is lossless and the values finite;
    bools are not numbers here (``True`` is never stored as 1.0)."""
    t = as_tensor(field, value)
    if t.dtype == torch.bool:
        raise SpecError(f"{field}: expected real numbers, got bool {value!r}")
    return cast_lossless(field, t, torch.float32).cpu()


def _scalar(value: Any, field: str) -> torch.Tensor:
    """A size-1 number, array or tensor as a ``(1,)`` float32 tensor (:func:`_as_float32`)."""
    t = _as_float32(value, field)
    if t.numel() != 1:
        raise SpecError(f"{field}: expected a scalar (size 1), got shape {tuple(t.shape)}")
    return t.reshape(1)


def _as_shape(dim: int | tuple[int, ...], field: str) -> tuple[int, ...]:
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return tuple(check_count(field, d, error=ConfigError) for d in dims)


_NO = torch.zeros(1, dtype=torch.bool)


class PPOBuffer:
    """One epoch of single-env PPO experience with GAE-lambda advantages.

    Mirrors ``src.buffers.PPOBuffer`` (itself Spinning Up's ``PPOBuffer``). Steps are stored
    one at a time with :meth:`store` into a one-env
    :class:`~rlstore.buffers.rollout.RolloutBuffer` (float32 ``obs`` / ``act`` / ``rew`` /
    ``val`` / ``logp``); :meth:`finish_path` closes the current trajectory (episode end or epoch
    cut-off). Over each closed trajectory:

    * ``adv[k] = sum_l (gamma*lam)**l * delta[k+l]`` with ``delta[k] = r[k] + gamma*v[k+1] - v[k]``
      and ``v[path_end] = last_val`` (RolloutBuffer's GAE, the path end a truncation with
      ``final_value = last_val``);
    * ``ret[k] = sum_j gamma**(j-k) r[j] + gamma**(n-k) * last_val``: the discounted
      reward-to-go, the value target of the original and of Spinning Up (the same GAE with
      ``lam = 1`` plus ``val``; it equals ``adv + val`` only for ``lam = 1``).

    ``last_val`` is 0 when the episode terminated and ``V(s_T)`` when it was truncated (time
    limit) or cut off by the epoch end. :meth:`sample_batch` normalizes advantages over the
    stored epoch as ``(adv - mean) / (std + eps)`` with the **population** std (ddof=0, as
    Spinning Up's ``mpi_statistics_scalar``), then resets the buffer.

    Differences from the original (and why):

    * ``store`` rejects a full buffer with :class:`~rlstore.errors.CapacityError` (the original
      uses ``assert``, which vanishes under ``python -O``), and missing/unknown keys, wrong
      shapes and lossy or non-finite values with :class:`~rlstore.errors.SpecError`.
    * ``sample_batch`` refuses steps of a trajectory not closed by ``finish_path`` (their
      advantages would silently be zero) and does not require a full buffer.
    * ``finish_path`` accepts the original's parameter name ``action_obj`` as well as Spinning
      Up's ``last_val`` (giving both is an error).
    * ``batch_size`` is validated (1 <= batch_size <= size) and used by :meth:`minibatches`.
    * ``schema`` is a pydantic model (:class:`PPOBufferConfig`) instead of a strictyaml map;
      ``config()`` / ``state_dict()`` / ``load_state_dict()`` make it checkpointable.
    * The ``*_buf`` attributes are read-only numpy copies (zero past the stored steps; ``adv`` /
      ``ret`` zero past the last closed trajectory), not writable storage.

    Args:
        obs_dim: observation size (int) or shape (tuple of ints).
        act_dim: action size (int) or shape (tuple; ``()`` for scalar discrete actions).
        size: number of steps per epoch (capacity).
        batch_size: minibatch size for :meth:`minibatches`.
        gamma: discount factor in [0, 1].
        lam: GAE lambda in [0, 1].
        eps: added to the advantage std when normalizing, >= 0.
    """

    schema: ClassVar[type[PPOBufferConfig]] = PPOBufferConfig
    _KEYS: ClassVar[tuple[str, ...]] = ("obs", "act", "rew", "val", "logp")

    def __init__(
        self,
        obs_dim: int | tuple[int, ...],
        act_dim: int | tuple[int, ...],
        size: int,
        batch_size: int,
        gamma: float = 0.99,
        lam: float = 0.95,
        eps: float = 1e-3,
    ) -> None:
        self.obs_shape = _as_shape(obs_dim, "obs_dim")
        self.act_shape = () if act_dim in ((), []) else _as_shape(act_dim, "act_dim")
        size = check_count("size", size)
        if check_count("batch_size", batch_size) > size:
            raise CapacityError(
                f"batch_size: expected an int in [1, size={size}], got {batch_size}"
            )
        real_number("eps", eps, 0.0, math.inf)
        self._rb = RolloutBuffer(
            int(size), 1, gamma=gamma, lam=lam, advantage_normalization="none"
        )  # checks gamma and lam
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.max_size, self.batch_size = int(size), int(batch_size)
        self.gamma, self.lam, self.eps = float(gamma), float(lam), float(eps)
        self.path_start_idx = 0

    def __len__(self) -> int:
        """Number of steps stored since the last :meth:`sample_batch`."""
        return self._rb.pos

    @property
    def ptr(self) -> int:
        """The original's write cursor: the number of stored steps."""
        return self._rb.pos

    # ------------------------------------------------------------------ writing
    def store(self, buffer_dict: Mapping[str, Any]) -> None:
        """Append one step of agent-environment interaction.

        Args:
            buffer_dict: exactly the keys ``obs`` (obs_shape, or (1, *obs_shape)), ``act``
                (act_shape, or (1, *act_shape)), ``rew``, ``val`` (V(obs)) and ``logp``
                (log pi(act|obs)); the last three are scalars (any size-1 array/tensor).
                numpy arrays, torch tensors and Python numbers are accepted.

        Raises:
            CapacityError: the buffer already holds ``size`` steps.
            SpecError: a key is missing or unknown, a shape does not match, or a value is not
                finite or not losslessly float32. A rejected step leaves the buffer unchanged.
        """
        if not isinstance(buffer_dict, Mapping):
            raise SpecError(
                f"buffer_dict: expected a dict with keys {self._KEYS}, got {type(buffer_dict)}"
            )
        missing = [k for k in self._KEYS if k not in buffer_dict]
        unknown = [k for k in buffer_dict if k not in self._KEYS]
        if missing or unknown:
            raise SpecError(
                f"buffer_dict: expected exactly the keys {list(self._KEYS)}; "
                f"missing {missing}, unknown {unknown}"
            )
        if len(self) >= self.max_size:
            raise CapacityError(
                f"store: buffer is full (size={self.max_size}); call finish_path() and "
                "sample_batch() before storing more steps"
            )
        obs = self._shaped(buffer_dict["obs"], self.obs_shape, "obs")
        act = self._shaped(buffer_dict["act"], self.act_shape, "act")
        rew, val, logp = (_scalar(buffer_dict[k], k) for k in ("rew", "val", "logp"))
        self._rb.add(obs[None], act[None], logp, val, rew, _NO, _NO)

    @staticmethod
    def _shaped(value: Any, shape: tuple[int, ...], field: str) -> torch.Tensor:
        t = _as_float32(value, field)
        if tuple(t.shape) == (1, *shape):
            t = t[0]
        if tuple(t.shape) != shape:
            raise SpecError(
                f"{field}: expected shape {shape} (or (1, *{shape})), got {tuple(t.shape)}"
            )
        return t

    def finish_path(self, last_val: Any = None, action_obj: Any = None) -> None:
        """Close the current trajectory; its advantages and rewards-to-go bootstrap from it.

        Call it when an episode ends or when the epoch cuts a trajectory off. Calling it with no
        new step since the previous call does nothing.

        Args:
            last_val: 0 if the trajectory ended because the agent reached a terminal state, else
                ``V(s_T)``, the value of the state after the last stored step (time-limit
                truncation or epoch end): the bootstrap for both the advantages and the
                rewards-to-go. A number or a size-1 array/tensor; ``None`` means 0.
            action_obj: the original's name for the same argument (also accepts a mapping with
                key ``"last_val"`` or ``"val"``). Give at most one of the two.

        Raises:
            RLStoreError: both ``last_val`` and ``action_obj`` given.
            SpecError: the value is not a finite scalar representable as float32.
        """
        if last_val is not None and action_obj is not None:
            raise RLStoreError(
                "finish_path: give last_val or action_obj (its original name), not both"
            )
        value = last_val if last_val is not None else action_obj
        if isinstance(value, Mapping):
            keys = [k for k in ("last_val", "val") if k in value]
            if len(keys) != 1:
                raise SpecError(
                    f"action_obj: expected a mapping with one of the keys 'last_val' or 'val', "
                    f"got keys {list(value)}"
                )
            value = value[keys[0]]
        bootstrap = torch.zeros(1) if value is None else _scalar(value, "last_val")
        if len(self) == self.path_start_idx:
            return
        self._rb.truncate_last(bootstrap)
        self.path_start_idx = len(self)

    # ------------------------------------------------------------------ reading
    def _targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(adv, ret)`` of the closed trajectories, each ``(path_start_idx,)`` float32."""
        n = self.path_start_idx
        if n == 0:
            return torch.zeros(0), torch.zeros(0)
        rb, zero = self._rb, torch.zeros(1)
        if not rb.computed:
            rb.compute_returns(zero)  # every closed path ends truncated: zero is not read
        batch = rb.get()
        assert batch.advantages is not None  # noqa: S101 (computed just above)
        ret = gae_targets(batch, zero, gamma=self.gamma, lam=1.0)["returns"]
        return batch.advantages[:n, 0], ret[:n, 0]

    def _column(self, key: str) -> np.ndarray:
        """A read-only zero-padded ``(size, ...)`` numpy copy of one stored field."""
        shapes = {"obs": self.obs_shape, "act": self.act_shape}
        out = np.zeros((self.max_size, *shapes.get(key, ())), dtype=np.float32)
        if key in ("adv", "ret"):
            data = self._targets()[key == "ret"]
        elif len(self):
            name = {"obs": "obs", "act": "actions", "rew": "rewards", "val": "values"}
            data = getattr(self._rb.get(), name.get(key, "logprobs"))[:, 0]
        else:
            data = torch.zeros(0, *out.shape[1:])
        out[: len(data)] = data.numpy()
        out.flags.writeable = False
        return out

    obs_buf = property(lambda self: self._column("obs"))
    act_buf = property(lambda self: self._column("act"))
    rew_buf = property(lambda self: self._column("rew"))
    val_buf = property(lambda self: self._column("val"))
    logp_buf = property(lambda self: self._column("logp"))
    adv_buf = property(lambda self: self._column("adv"))
    ret_buf = property(lambda self: self._column("ret"))

    def sample_batch(self) -> dict[str, torch.Tensor]:
        """Return the stored epoch with normalized advantages, and reset the buffer.

        Returns:
            A dict of float32 CPU tensors with leading axis ``n = len(buf)``: ``obs``
            (n, *obs_shape), ``act`` (n, *act_shape), ``ret`` (n,), ``adv`` (n,) normalized as
            ``(adv - mean) / (std + eps)`` with the population std (ddof=0), ``logp`` (n,) and
            ``val`` (n,). The tensors are copies: later writes do not change them.

        Raises:
            EmptyBufferError: nothing stored.
            RLStoreError: the last trajectory was not closed with :meth:`finish_path`.
        """
        n = len(self)
        if n == 0:
            raise EmptyBufferError("sample_batch: the buffer is empty; store() steps first")
        if self.path_start_idx != n:
            raise RLStoreError(
                f"sample_batch: the last {n - self.path_start_idx} steps belong to an "
                "open trajectory; call finish_path(last_val) first (last_val=V(s_T) if it was "
                "cut off, 0 if it terminated)"
            )
        adv, ret = self._targets()
        adv64 = adv.double()
        adv64 = (adv64 - adv64.mean()) / (adv64.std(correction=0) + self.eps)
        b = self._rb.get()
        batch = {
            "obs": b.obs[:, 0].clone(),  # type: ignore[index]  # a Box obs, never a dict
            "act": b.actions[:, 0].clone(),
            "ret": ret.clone(),
            "adv": adv64.float(),
            "logp": b.logprobs[:, 0].clone(),
            "val": b.values[:, 0].clone(),
        }
        self._rb.reset()
        self.path_start_idx = 0
        return batch

    def minibatches(
        self,
        batch: Mapping[str, torch.Tensor],
        *,
        seed: int | torch.Generator | None = None,
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Split a :meth:`sample_batch` result into shuffled minibatches of ``batch_size``.

        Every step appears exactly once; the last minibatch is smaller when ``batch_size`` does
        not divide the epoch length (so this works on the returned dict, not on the storage).

        Args:
            batch: the dict returned by :meth:`sample_batch`.
            seed: an int or ``torch.Generator`` for the permutation (None: fresh entropy).
        """
        lengths = {k: int(v.shape[0]) for k, v in batch.items()}
        if len(set(lengths.values())) != 1:
            raise SpecError(f"batch: expected tensors with one common length, got {lengths}")
        n = next(iter(lengths.values()))
        gen = seed if isinstance(seed, torch.Generator) else torch.Generator()
        if isinstance(seed, int):
            gen.manual_seed(seed)
        elif seed is None:
            gen.seed()
        perm = torch.randperm(n, generator=gen)
        for start in range(0, n, self.batch_size):
            idx = perm[start : start + self.batch_size]
            yield {k: v[idx] for k, v in batch.items()}

    # ------------------------------------------------------------------ checkpointing
    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments as a JSON-able dict."""
        dims = {k: list(v) if isinstance(v, tuple) else v for k, v in
                (("obs_dim", self.obs_dim), ("act_dim", self.act_dim))}  # fmt: skip
        return {**dims, "size": self.max_size, "batch_size": self.batch_size,
                "gamma": self.gamma, "lam": self.lam, "eps": self.eps}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """The RolloutBuffer state (``"rollout"``) plus the ``path_start_idx`` cursor."""
        return {"rollout": self._rb.state_dict(), "path_start_idx": self.path_start_idx}

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (validated completely before anything changes).

        Raises:
            CheckpointError: a missing key, a storage that does not match this buffer, or
                ``path_start_idx`` out of range.
        """
        if not isinstance(sd, Mapping) or set(sd) != {"rollout", "path_start_idx"}:
            keys = sorted(sd) if isinstance(sd, Mapping) else type(sd).__name__
            raise CheckpointError(
                f"state: expected the keys ['path_start_idx', 'rollout'], got {keys}"
            )
        start, rollout = sd["path_start_idx"], sd["rollout"]
        pos = rollout.get("pos") if isinstance(rollout, Mapping) else None
        ok = isinstance(start, int) and not isinstance(start, bool) and isinstance(pos, int)
        if not ok or not 0 <= start <= pos:
            raise CheckpointError(
                f"path_start_idx: expected an int in [0, rollout pos={pos!r}], got {start!r}"
            )
        raw = rollout.get("data")
        data: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        for key, shape in (("obs", self.obs_shape), ("actions", self.act_shape)):
            want = (self.max_size, 1, *shape)
            got = data.get(key)
            if key in data and (
                not isinstance(got, torch.Tensor)
                or tuple(got.shape) != want
                or got.dtype != torch.float32
            ):
                what = f"{got.dtype} {tuple(got.shape)}" if isinstance(got, torch.Tensor) else got
                raise CheckpointError(f"{key}: expected a float32 tensor {want}, got {what!r}")
        self._rb.load_state_dict(dict(rollout))
        self.path_start_idx = start

    # ------------------------------------------------------------------ config
    @classmethod
    def instantiate_from_config(cls, config_file_location: str | os.PathLike[str]) -> PPOBuffer:
        """Build a buffer from a YAML or JSON file holding the keys of :attr:`schema`.

        Raises:
            ConfigError: the file cannot be read or parsed, or its contents do not match the
                schema (unknown, missing or wrong-typed keys, out-of-range values).
        """
        from rlstore.config import load_config_file

        return cls.instantiate_from_config_dict(load_config_file(config_file_location))

    @classmethod
    def instantiate_from_config_dict(cls, config: Mapping[str, Any]) -> PPOBuffer:
        """Build a buffer from a dict with the keys of :attr:`schema` (:class:`PPOBufferConfig`).

        Required: ``obs_dim``, ``act_dim``, ``size``, ``batch_size`` (int). Optional: ``gamma``,
        ``lam``, ``eps`` (float).

        Raises:
            ConfigError: unknown, missing or wrong-typed keys (all listed in one message), or
                out-of-range values.
        """
        values = cls.schema.validate_mapping(config, cls.__name__)
        try:
            return cls(**values.model_dump())
        except ConfigError:
            raise
        except RLStoreError as exc:  # CapacityError on batch_size > size
            raise ConfigError(str(exc)) from exc
