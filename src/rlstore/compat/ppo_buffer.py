"""The documented ``src.buffers.PPOBuffer``: a single-env PPO epoch buffer (Spinning Up style).

``PPOBuffer(obs_dim, act_dim, size, batch_size, gamma=0.99, lam=0.95, eps=1e-3)`` with
``store(buffer_dict)``, ``finish_path(last_val=0)``, ``sample_batch()``,
``instantiate_from_config(path)``, ``instantiate_from_config_dict(config)`` and ``schema``, plus
the module function ``discount_cumsum(x, discount)``.

It is a facade over :mod:`rlstore.returns`: advantages come from :func:`rlstore.returns.gae`,
rewards-to-go from :func:`rlstore.returns.discount_cumsum`. It does not use
:class:`~rlstore.buffers.rollout.RolloutBuffer` because paths have variable length and their end
(and bootstrap value) is only known when ``finish_path`` is called, after the steps were stored.

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
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from rlstore import returns as _returns
from rlstore._checks import real_number
from rlstore._trees import as_tensor, cast_lossless
from rlstore.errors import (
    CapacityError,
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    RLStoreError,
    SpecError,
)

__all__ = ["PPOBuffer", "ConfigSchema", "discount_cumsum"]


def discount_cumsum(x: Any, discount: float) -> np.ndarray:
    """Discounted cumulative sum ``y[k] = sum_{j >= k} discount**(j - k) * x[j]``.

    Args:
        x: 1-D array-like of length T (list, numpy array or CPU tensor), any float dtype.
        discount: the discount factor, a finite float.

    Returns:
        A numpy array of shape (T,) (float64 for integer/list input, else the input float dtype).

    Example: ``discount_cumsum([1, 2, 3], 0.5)`` is ``[2.75, 3.5, 3.0]``
    (3; 2 + 0.5*3 = 3.5; 1 + 0.5*3.5 = 2.75).
    """
    if isinstance(x, torch.Tensor):
        arr = x.detach().cpu().numpy()
    else:
        arr = np.asarray(x)
    if arr.ndim != 1:
        raise SpecError(f"x: expected a 1-D sequence of shape (T,), got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    if not math.isfinite(float(discount)):
        raise ConfigError(f"discount: expected a finite float, got {discount!r}")
    return np.asarray(_returns.discount_cumsum(arr, float(discount)))


@dataclass(frozen=True)
class ConfigSchema:
    """A small typed key schema, the stand-in for the original's strictyaml ``Map``.

    ``required`` and ``optional`` map key names to the expected Python type (``int`` or
    ``float``). ``int`` accepts Python/numpy integers (not ``bool``); ``float`` also accepts
    integers (YAML ``1`` for ``1.0``) but not ``bool`` or strings.
    """

    required: Mapping[str, type]
    optional: Mapping[str, type]

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``config`` and return a plain dict of converted values.

        Raises:
            ConfigError: listing every unknown key, missing key and wrong-typed value at once,
                each with the expected type and what arrived.
        """
        if not isinstance(config, Mapping):
            raise ConfigError(f"config: expected a mapping of keys to values, got {type(config)}")
        problems: list[str] = []
        known = {**self.required, **self.optional}
        for key in config:
            if key not in known:
                problems.append(f"{key!r}: unknown key (allowed: {', '.join(sorted(known))})")
        for key in self.required:
            if key not in config:
                problems.append(f"{key!r}: missing required key ({self.required[key].__name__})")
        out: dict[str, Any] = {}
        for key, expected in known.items():
            if key not in config:
                continue
            value = config[key]
            ok_int = isinstance(value, (int, np.integer)) and not isinstance(
                value, (bool, np.bool_)
            )
            if expected is int and ok_int:
                out[key] = int(value)
            elif expected is float and (ok_int or isinstance(value, (float, np.floating))):
                out[key] = float(value)
            else:
                problems.append(
                    f"{key!r}: expected {expected.__name__}, got {type(value).__name__} {value!r}"
                )
        if problems:
            raise ConfigError("invalid PPOBuffer config: " + "; ".join(problems))
        return out


def _as_float32(value: Any, field: str) -> np.ndarray:
    """``value`` as a float32 array if the conversion is lossless and the values finite.

    Rejected with a :class:`SpecError` naming ``field``: strings, None and other non-numbers,
    complex numbers, NaN / inf, and values that overflow float32 (1e300 is never stored as inf).
    Tensors that require grad are converted detached.
    """
    return cast_lossless(field, as_tensor(field, value), torch.float32).cpu().numpy()


def _as_shape(dim: int | tuple[int, ...], field: str) -> tuple[int, ...]:
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
        if dim < 1:
            raise ConfigError(f"{field}: expected a positive int, got {dim}")
        return (int(dim),)
    if isinstance(dim, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1 for d in dim
    ):
        return tuple(int(d) for d in dim)
    raise ConfigError(f"{field}: expected a positive int or a tuple of positive ints, got {dim!r}")


class PPOBuffer:
    """A buffer of one epoch of single-env PPO experience with GAE-lambda advantages.

    Storage is preallocated: ``obs`` (size, *obs_shape) float32, ``act`` (size, *act_shape)
    float32, ``rew``/``val``/``logp``/``adv``/``ret`` (size,) float32. Steps are stored one at a
    time with :meth:`store`; :meth:`finish_path` closes the current trajectory (episode end or
    epoch cut-off) and computes, over the steps since the previous ``finish_path``:

    * ``adv[k] = sum_l (gamma*lam)**l * delta[k+l]`` with ``delta[k] = r[k] + gamma*v[k+1] - v[k]``
      and ``v[path_end] = last_val``, via :func:`rlstore.returns.gae` (the step before
      ``finish_path`` bootstraps from ``last_val``);
    * ``ret[k] = sum_j gamma**(j-k) r[j] + gamma**(n-k) * last_val``: the discounted
      reward-to-go, the value target of ``src.buffers.PPOBuffer`` and of Spinning Up (it equals
      ``adv + val`` only for ``lam = 1``).

    ``last_val`` is 0 when the episode terminated and ``V(s_T)`` when it was truncated (time
    limit) or cut off by the epoch end: truncation is therefore handled correctly through this
    argument; the buffer never folds anything into the stored rewards.

    :meth:`sample_batch` normalizes advantages over the stored epoch as
    ``(adv - mean) / (std + eps)`` with the **population** std (ddof=0, as Spinning Up's
    ``mpi_statistics_scalar``) and the constructor's ``eps`` (default 1e-3), then resets the
    pointers.

    Decisions where ``src.buffers.PPOBuffer`` / Spinning Up were loose:

    * ``store`` rejects a full buffer with :class:`~rlstore.errors.CapacityError` (Spinning Up
      uses ``assert``, which vanishes under ``python -O``), and rejects missing/unknown keys
      and wrong shapes with :class:`~rlstore.errors.SpecError`.
    * ``sample_batch`` refuses to return steps of a trajectory that was not closed by
      ``finish_path`` (their advantages would silently be zero) and does not require the buffer
      to be full: it returns the ``len(buf)`` stored steps.
    * ``finish_path`` accepts the original's parameter name ``action_obj`` as well as Spinning Up's
      ``last_val`` (giving both is an error).
    * ``batch_size`` is validated (1 <= batch_size <= size) and used by :meth:`minibatches`
      to split a sampled epoch; the original ``sample_batch`` returns the whole epoch.
    * ``config()`` / ``state_dict()`` / ``load_state_dict()`` make it checkpointable with
      :func:`rlstore.checkpoint.save` (an open trajectory resumes exactly).

    Args:
        obs_dim: observation size (int) or shape (tuple of ints).
        act_dim: action size (int) or shape (tuple; ``()`` for scalar discrete actions).
        size: number of steps per epoch (capacity).
        batch_size: minibatch size for :meth:`minibatches`.
        gamma: discount factor in [0, 1].
        lam: GAE lambda in [0, 1].
        eps: added to the advantage std when normalizing, >= 0.
    """

    schema: ClassVar[ConfigSchema] = ConfigSchema(
        required={"obs_dim": int, "act_dim": int, "size": int, "batch_size": int},
        optional={"gamma": float, "lam": float, "eps": float},
    )
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
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
            raise CapacityError(f"size: expected a positive int, got {size!r}")
        if (
            not isinstance(batch_size, (int, np.integer))
            or isinstance(batch_size, bool)
            or not 1 <= batch_size <= size
        ):
            raise CapacityError(
                f"batch_size: expected an int in [1, size={size}], got {batch_size!r}"
            )
        for name, value, low, high in (
            ("gamma", gamma, 0.0, 1.0),
            ("lam", lam, 0.0, 1.0),
            ("eps", eps, 0.0, math.inf),
        ):
            real_number(name, value, low, high)
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.max_size, self.batch_size = int(size), int(batch_size)
        self.gamma, self.lam, self.eps = float(gamma), float(lam), float(eps)
        self.obs_buf = np.zeros((self.max_size, *self.obs_shape), dtype=np.float32)
        self.act_buf = np.zeros((self.max_size, *self.act_shape), dtype=np.float32)
        self.rew_buf = np.zeros(self.max_size, dtype=np.float32)
        self.val_buf = np.zeros(self.max_size, dtype=np.float32)
        self.logp_buf = np.zeros(self.max_size, dtype=np.float32)
        self.adv_buf = np.zeros(self.max_size, dtype=np.float32)
        self.ret_buf = np.zeros(self.max_size, dtype=np.float32)
        self.ptr, self.path_start_idx = 0, 0

    def __len__(self) -> int:
        """Number of steps stored since the last :meth:`sample_batch`."""
        return self.ptr

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
            SpecError: a key is missing or unknown, a shape does not match, or a scalar is not
                finite. A rejected step leaves the buffer unchanged.
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
        if self.ptr >= self.max_size:
            raise CapacityError(
                f"store: buffer is full (size={self.max_size}); call finish_path() and "
                "sample_batch() before storing more steps"
            )
        obs = self._shaped(buffer_dict["obs"], self.obs_shape, "obs")
        act = self._shaped(buffer_dict["act"], self.act_shape, "act")
        scalars = {}
        for key in ("rew", "val", "logp"):
            arr = _as_float32(buffer_dict[key], key)
            if arr.size != 1:
                raise SpecError(f"{key}: expected a scalar (size 1), got shape {arr.shape}")
            scalars[key] = arr.reshape(())
        self.obs_buf[self.ptr] = obs
        self.act_buf[self.ptr] = act
        self.rew_buf[self.ptr] = scalars["rew"]
        self.val_buf[self.ptr] = scalars["val"]
        self.logp_buf[self.ptr] = scalars["logp"]
        self.ptr += 1

    @staticmethod
    def _shaped(value: Any, shape: tuple[int, ...], field: str) -> np.ndarray:
        arr = _as_float32(value, field)
        if arr.shape == (1, *shape):
            arr = arr[0]
        if arr.shape != shape:
            raise SpecError(f"{field}: expected shape {shape} (or (1, *{shape})), got {arr.shape}")
        return arr

    def finish_path(self, last_val: Any = None, action_obj: Any = None) -> None:
        """Close the current trajectory and compute its advantages and rewards-to-go.

        Call it when an episode ends or when the epoch cuts a trajectory off. Calling it with no
        new step since the previous call does nothing.

        Args:
            last_val: 0 if the trajectory ended because the agent reached a terminal state, else
                ``V(s_T)``, the value of the state after the last stored step (time-limit
                truncation or epoch end): the bootstrap for both the advantages and the
                rewards-to-go. A number or a size-1 array/tensor; ``None`` means 0.
            action_obj: the original's name for the same argument (also accepts a mapping with key
                ``"last_val"`` or ``"val"``). Give at most one of the two.

        Raises:
            RLStoreError: both ``last_val`` and ``action_obj`` given.
            SpecError: the value is not a finite scalar.
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
        bootstrap = 0.0
        if value is not None:
            arr = cast_lossless("last_val", as_tensor("last_val", value), torch.float64)
            if arr.numel() != 1:
                raise SpecError(
                    f"last_val: expected a scalar (size 1), got shape {tuple(arr.shape)}"
                )
            bootstrap = float(arr.reshape(()))
        path = slice(self.path_start_idx, self.ptr)
        n = self.ptr - self.path_start_idx
        if n == 0:
            return
        rews = self.rew_buf[path].astype(np.float64)
        vals = self.val_buf[path].astype(np.float64)
        next_vals = np.append(vals[1:], bootstrap)
        no_flags = np.zeros(n, dtype=bool)  # the path end bootstraps from last_val (0 if died)
        adv, _ = _returns.gae(
            rews, vals, next_vals, no_flags, no_flags, gamma=self.gamma, lam=self.lam
        )
        self.adv_buf[path] = np.asarray(adv)
        self.ret_buf[path] = discount_cumsum(np.append(rews, bootstrap), self.gamma)[:-1]
        self.path_start_idx = self.ptr

    # ------------------------------------------------------------------ reading
    def sample_batch(self) -> dict[str, torch.Tensor]:
        """Return the stored epoch with normalized advantages, and reset the pointers.

        Returns:
            A dict of float32 CPU tensors with leading axis ``n = len(buf)``: ``obs``
            (n, *obs_shape), ``act`` (n, *act_shape), ``ret`` (n,), ``adv`` (n,) normalized as
            ``(adv - mean) / (std + eps)`` with the population std (ddof=0), ``logp`` (n,) and
            ``val`` (n,). The tensors are copies: later writes do not change them.

        Raises:
            EmptyBufferError: nothing stored.
            RLStoreError: the last trajectory was not closed with :meth:`finish_path`.
        """
        n = self.ptr
        if n == 0:
            raise EmptyBufferError("sample_batch: the buffer is empty; store() steps first")
        if self.path_start_idx != self.ptr:
            raise RLStoreError(
                f"sample_batch: the last {self.ptr - self.path_start_idx} steps belong to an "
                "open trajectory; call finish_path(last_val) first (last_val=V(s_T) if it was "
                "cut off, 0 if it terminated)"
            )
        adv = self.adv_buf[:n].astype(np.float64)
        adv = (adv - adv.mean()) / (adv.std(ddof=0) + self.eps)
        batch = {
            "obs": torch.tensor(self.obs_buf[:n]),
            "act": torch.tensor(self.act_buf[:n]),
            "ret": torch.tensor(self.ret_buf[:n]),
            "adv": torch.tensor(adv, dtype=torch.float32),
            "logp": torch.tensor(self.logp_buf[:n]),
            "val": torch.tensor(self.val_buf[:n]),
        }
        self.ptr, self.path_start_idx = 0, 0
        return batch

    def minibatches(
        self,
        batch: Mapping[str, torch.Tensor],
        *,
        seed: int | torch.Generator | None = None,
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Split a :meth:`sample_batch` result into shuffled minibatches of ``batch_size``.

        Every step appears exactly once; the last minibatch is smaller when ``batch_size`` does
        not divide the epoch length.

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
    _ARRAYS: ClassVar[tuple[str, ...]] = ("obs", "act", "rew", "val", "logp", "adv", "ret")

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments as a JSON-able dict."""
        dims = {k: list(v) if isinstance(v, tuple) else v for k, v in
                (("obs_dim", self.obs_dim), ("act_dim", self.act_dim))}  # fmt: skip
        return {**dims, "size": self.max_size, "batch_size": self.batch_size,
                "gamma": self.gamma, "lam": self.lam, "eps": self.eps}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """Copies of the storage arrays plus the ``ptr`` / ``path_start_idx`` cursors."""
        arrays = {k: getattr(self, f"{k}_buf").copy() for k in self._ARRAYS}
        return {**arrays, "ptr": self.ptr, "path_start_idx": self.path_start_idx}

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (validated completely before anything changes).

        Raises:
            CheckpointError: a missing key, a shape that does not match this buffer, or
                cursors out of range.
        """
        arrays = {}
        for k in self._ARRAYS:
            want = getattr(self, f"{k}_buf")
            arr = np.asarray(sd[k]) if k in sd else None
            if arr is None or arr.shape != want.shape:
                got = "missing" if arr is None else f"shape {arr.shape}"
                raise CheckpointError(f"{k}: expected shape {want.shape}, got {got}")
            arrays[k] = arr.astype(want.dtype)
        ptr, start = int(sd.get("ptr", -1)), int(sd.get("path_start_idx", -1))
        if not 0 <= start <= ptr <= self.max_size:
            raise CheckpointError(
                f"ptr/path_start_idx: expected 0 <= path_start_idx <= ptr <= {self.max_size}, "
                f"got {start} and {ptr}"
            )
        for k, arr in arrays.items():
            getattr(self, f"{k}_buf")[...] = arr
        self.ptr, self.path_start_idx = ptr, start

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
        """Build a buffer from a dict with the keys of :attr:`schema`.

        Required: ``obs_dim``, ``act_dim``, ``size``, ``batch_size`` (int). Optional: ``gamma``,
        ``lam``, ``eps`` (float).

        Raises:
            ConfigError: unknown, missing or wrong-typed keys (all listed in one message), or
                out-of-range values.
        """
        values = cls.schema.validate(config)
        try:
            return cls(**values)
        except ConfigError:
            raise
        except RLStoreError as exc:  # CapacityError on size/batch_size
            raise ConfigError(str(exc)) from exc
