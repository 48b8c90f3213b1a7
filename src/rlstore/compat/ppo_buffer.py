"""``src.buffers.PPOBuffer`` (Spinning Up's PPO epoch buffer) over :class:`RolloutBuffer`."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from pydantic import Field

from rlstore import errors as E
from rlstore import returns as _returns
from rlstore._checks import check_count, check_keys, real_number
from rlstore._trees import real_array
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.buffers.rollout_targets import gae_targets
from rlstore.compat._common import DimsConfig, FromConfig, rows

__all__ = ["PPOBuffer", "PPOBufferConfig", "discount_cumsum"]


def discount_cumsum(x: Any, discount: float) -> np.ndarray:
    """``y[k] = sum_{j >= k} discount**(j - k) * x[j]`` over a 1-D ``x`` of finite reals (float64
    for integer input): ``discount_cumsum([1, 2, 3], 0.5)`` is ``[2.75, 3.5, 3.0]``."""
    arr = real_array("x", x)
    if arr.ndim != 1:
        raise E.SpecError(f"x: expected a 1-D sequence of shape (T,), got shape {arr.shape}")
    big = np.finfo(np.float64).max
    discount = real_number("discount", discount, -big, big, expected="a finite float")
    arr = arr if arr.dtype.kind == "f" else arr.astype(np.float64)
    return np.asarray(_returns.discount_cumsum(arr, discount))


class PPOBufferConfig(DimsConfig):
    """The constructor keys of :class:`PPOBuffer` (the original's strictyaml ``Map``)."""

    gamma: float = Field(0.99, strict=True, ge=0.0, le=1.0)
    lam: float = Field(0.95, strict=True, ge=0.0, le=1.0)
    eps: float = Field(1e-3, strict=True, ge=0.0)


_NO = torch.zeros(1, dtype=torch.bool)
_NAMES = {"obs": "obs", "act": "actions", "rew": "rewards", "val": "values", "logp": "logprobs"}


def _shape(name: str, dim: Any) -> tuple[int, ...]:
    dims = dim if isinstance(dim, tuple | list) else (dim,)
    return tuple(check_count(name, d, error=E.ConfigError) for d in dims)


class PPOBuffer(FromConfig):
    """``src.buffers.PPOBuffer(obs_dim, act_dim, size, batch_size, gamma, lam, eps)`` (Spinning
    Up's PPO epoch buffer: ``store``, ``finish_path``, ``sample_batch``, ``schema``,
    ``instantiate_from_config[_dict]``) over a one-env :class:`RolloutBuffer`:
    ``finish_path(last_val)`` closes a trajectory with ``truncate_last``; ``adv`` is GAE
    bootstrapped with ``last_val`` (0 after a termination, else ``V(s_T)``), ``ret`` the
    bootstrapped reward-to-go; :meth:`sample_batch` normalizes ``adv`` with the population std
    (``(adv - mean) / (std + eps)``) and resets the buffer.

    Differs: ``store`` raises CapacityError when full (the original ``assert``\\ s) and SpecError
    naming the key on bad keys, shapes, lossy or non-finite values, storing nothing;
    ``sample_batch`` refuses an open trajectory and does not need a full buffer; ``finish_path``
    takes the original's ``action_obj`` (a value, or a mapping with ``"last_val"`` or ``"val"``)
    or ``last_val``, not both; ``batch_size`` (``<= size``) is used by :meth:`minibatches`;
    ``obs_dim`` / ``act_dim`` may be shapes (``()``: scalars); the ``*_buf`` attributes are
    read-only zero-padded numpy copies; it is checkpointable (``config`` / ``state_dict``).
    """

    schema: ClassVar[type[PPOBufferConfig]] = PPOBufferConfig
    _KEYS: ClassVar[tuple[str, ...]] = ("obs", "act", "rew", "val", "logp")

    def __init__(self, obs_dim: int | tuple[int, ...], act_dim: int | tuple[int, ...], size: int,
                 batch_size: int, gamma: float = 0.99, lam: float = 0.95,
                 eps: float = 1e-3) -> None:  # fmt: skip
        self.obs_shape, self.act_shape = _shape("obs_dim", obs_dim), _shape("act_dim", act_dim)
        if check_count("batch_size", batch_size) > check_count("size", size):
            raise E.CapacityError(
                f"batch_size: expected an int in [1, size={size}], got {batch_size}"
            )
        real_number("eps", eps, 0.0, math.inf)
        self._rb = RolloutBuffer(size, 1, gamma=gamma, lam=lam, advantage_normalization="none")
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.max_size, self.batch_size = int(size), int(batch_size)
        self.gamma, self.lam, self.eps = float(gamma), float(lam), float(eps)
        self.path_start_idx = 0

    def __len__(self) -> int:
        """Number of steps stored since the last :meth:`sample_batch`."""
        return self._rb.pos

    ptr = property(__len__, doc="The original's write cursor: the number of stored steps.")

    def store(self, buffer_dict: Mapping[str, Any]) -> None:
        """Append one step: exactly ``obs`` (obs_shape, or ``(1, *obs_shape)``), ``act``,
        scalars ``rew``, ``val`` (V(obs)) and ``logp``; arrays, tensors or numbers."""
        check_keys("buffer_dict", buffer_dict, self._KEYS, E.SpecError)
        if len(self) >= self.max_size:
            raise E.CapacityError(f"store: buffer is full (size={self.max_size}); call "
                                  "finish_path() and sample_batch() first")  # fmt: skip
        shapes = (self.obs_shape, self.act_shape, (), (), ())
        obs, act, rew, val, logp = (torch.from_numpy(rows(k, buffer_dict[k], 1, s, batched=False))
                                    for k, s in zip(self._KEYS, shapes, strict=True))  # fmt: skip
        self._rb.add(obs, act, logp, val, rew, _NO, _NO)

    def finish_path(self, last_val: Any = None, action_obj: Any = None) -> None:
        """Close the current trajectory (no-op without new steps); ``last_val`` (or
        ``action_obj``) is 0 / None after a termination, else ``V(s_T)``, a finite scalar."""
        if last_val is not None and action_obj is not None:
            raise E.RLStoreError("finish_path: give last_val or action_obj (its original name), "
                                 "not both")  # fmt: skip
        value = last_val if last_val is not None else action_obj
        if isinstance(value, Mapping):
            if len(keys := [k for k in ("last_val", "val") if k in value]) != 1:
                raise E.SpecError("action_obj: expected a mapping with one of the keys 'last_val' "
                                  f"or 'val', got keys {list(value)}")  # fmt: skip
            value = value[keys[0]]
        bootstrap = rows("last_val", 0.0 if value is None else value, 1, (), batched=False)
        if len(self) > self.path_start_idx:
            self._rb.truncate_last(torch.from_numpy(bootstrap))
            self.path_start_idx = len(self)

    def _targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(adv, ret)`` of the closed trajectories, each ``(path_start_idx,)`` float32."""
        n, rb, zero = self.path_start_idx, self._rb, torch.zeros(1)
        if n == 0:
            return torch.zeros(0), torch.zeros(0)
        if not rb.computed:
            rb.compute_returns(zero)  # every closed path ends truncated: zero is not read
        batch = rb.get()
        ret = gae_targets(batch, zero, gamma=self.gamma, lam=1.0)["returns"]
        return batch.advantages[:n, 0], ret[:n, 0]  # type: ignore[index]

    def _column(self, key: str) -> np.ndarray:
        """A read-only zero-padded ``(size, ...)`` numpy copy of one stored field."""
        shape = {"obs": self.obs_shape, "act": self.act_shape}.get(key, ())
        out = np.zeros((self.max_size, *shape), dtype=np.float32)
        if key in ("adv", "ret"):
            data: Any = self._targets()[key == "ret"]
        else:
            data = getattr(self._rb.get(), _NAMES[key])[:, 0] if len(self) else out[:0]
        out[: len(data)] = np.asarray(data)
        out.flags.writeable = False
        return out

    obs_buf, act_buf, rew_buf, val_buf, logp_buf, adv_buf, ret_buf = (
        property(lambda self, k=k: self._column(k))  # type: ignore[misc]
        for k in (*_NAMES, "adv", "ret")
    )

    def sample_batch(self) -> dict[str, torch.Tensor]:
        """The stored epoch as new float32 tensors ``obs``, ``act``, ``ret``, ``adv``
        (normalized), ``logp``, ``val`` (leading axis ``len(buf)``); resets the buffer.
        EmptyBufferError: nothing stored; RLStoreError: an open trajectory."""
        n = len(self)
        if n == 0:
            raise E.EmptyBufferError("sample_batch: the buffer is empty; store() steps first")
        if self.path_start_idx != n:
            raise E.RLStoreError(f"sample_batch: the last {n - self.path_start_idx} steps belong "
                                 "to an open trajectory; call finish_path(last_val) first "
                                 "(V(s_T) if it was cut off, 0 if it terminated)")  # fmt: skip
        (adv, ret), b = self._targets(), self._rb.get()
        adv = _returns.normalize_advantages(adv.double(), eps=self.eps).float()
        cols = {k: getattr(b, _NAMES[k])[:, 0].clone() for k in ("obs", "act", "logp", "val")}
        batch = {"obs": cols["obs"], "act": cols["act"], "ret": ret.clone(), "adv": adv,
                 "logp": cols["logp"], "val": cols["val"]}  # fmt: skip
        self._rb.reset()
        self.path_start_idx = 0
        return batch

    def minibatches(
        self, batch: Mapping[str, torch.Tensor], *, seed: int | torch.Generator | None = None
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Shuffled ``batch_size`` minibatches of a :meth:`sample_batch` result, each step once
        (the last one smaller if needed); ``seed``: an int or ``torch.Generator``."""
        lengths = {k: int(v.shape[0]) for k, v in batch.items()}
        if len(set(lengths.values())) != 1:
            raise E.SpecError(f"batch: expected tensors with one common length, got {lengths}")
        gen = seed if isinstance(seed, torch.Generator) else torch.Generator()
        if isinstance(seed, int):
            gen.manual_seed(seed)
        elif seed is None:
            gen.seed()
        perm = torch.randperm(next(iter(lengths.values())), generator=gen)
        for idx in perm.split(self.batch_size):
            yield {k: v[idx] for k, v in batch.items()}

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
        """Restore :meth:`state_dict` output, all or nothing (CheckpointError otherwise)."""
        check_keys("state", sd, ("path_start_idx", "rollout"))
        start, rollout = sd["path_start_idx"], sd["rollout"]
        rollout = rollout if isinstance(rollout, Mapping) else {}
        pos, data = rollout.get("pos"), rollout.get("data")
        if type(start) is not int or not isinstance(pos, int) or not 0 <= start <= pos:
            raise E.CheckpointError(f"path_start_idx: expected an int in [0, rollout pos={pos!r}], "
                                    f"got {start!r}")  # fmt: skip
        for key, shape in (("obs", self.obs_shape), ("actions", self.act_shape)):
            got = data.get(key) if isinstance(data, Mapping) else None
            want = (self.max_size, 1, *shape)  # the RolloutBuffer checks them only once filled
            if got is not None and not (isinstance(got, torch.Tensor) and got.dtype == torch.float32
                                        and tuple(got.shape) == want):  # fmt: skip
                what = f"{got.dtype} {tuple(got.shape)}" if isinstance(got, torch.Tensor) else got
                raise E.CheckpointError(f"{key}: expected a float32 tensor {want}, got {what!r}")
        self._rb.load_state_dict(dict(rollout))
        self.path_start_idx = start
