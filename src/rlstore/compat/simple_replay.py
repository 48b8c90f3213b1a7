"""``SimpleReplayBuffer`` (seed 000: a FIFO replay buffer for SAC agents) over rlstore's core.

The seed documents ``SimpleReplayBuffer(obs_dim, act_dim, size, batch_size)`` with
``store(buffer_dict)``, ``sample_batch()``, ``finish_path(action_obj=None)``, the classmethods
``instantiate_from_config(path)`` / ``instantiate_from_config_dict(config)`` and a ``schema``
class attribute listing the four integer config keys.

Decisions the seed leaves open (documented here, tested in ``tests/compat``):

* ``buffer_dict`` keys are the argument names of the SAC replay buffer this class descends from
  (Spinning Up's ``store(obs, act, rew, next_obs, done)``): ``obs`` ``(obs_dim,)``, ``act``
  ``(act_dim,)``, ``rew`` scalar, ``next_obs`` ``(obs_dim,)``, ``done`` bool. Arrays, tensors and
  Python numbers are accepted; a leading batch axis stores several timesteps at once. Missing or
  extra keys are a :class:`~rlstore.errors.SpecError`. ``done`` is a termination (no bootstrap).
* ``sample_batch()`` returns a dict with the same five keys: float32 torch tensors ``obs``
  ``(batch_size, obs_dim)``, ``act`` ``(batch_size, act_dim)``, ``rew``, ``next_obs``, ``done``
  ``(batch_size,)`` (``done`` as 0.0/1.0), drawn uniformly with replacement.
* ``finish_path`` is a no-op: its seed docstring is copied from ``PPOBuffer``; a FIFO replay
  buffer has no per-trajectory computation, and next observations are stored per step.
* ``schema`` is a pydantic model (the seed's is a strictyaml ``Map``); it rejects unknown keys
  and non-integers with a :class:`~rlstore.errors.ConfigError` naming the key. Config files
  may be YAML or JSON.

Example:
    >>> import numpy as np
    >>> buf = SimpleReplayBuffer(obs_dim=3, act_dim=2, size=100, batch_size=4, seed=0)
    >>> for _ in range(10):
    ...     buf.store({"obs": np.zeros(3), "act": np.ones(2), "rew": 1.0,
    ...                "next_obs": np.zeros(3), "done": False})
    >>> {k: tuple(v.shape) for k, v in buf.sample_batch().items()}["act"]
    (4, 2)
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, cast

import numpy as np
import torch

from rlstore._trees import to_numpy
from rlstore.buffers.replay import ReplayBuffer
from rlstore.config import PositiveInt, StrictModel, load_config_file
from rlstore.errors import CapacityError, ConfigError, SpecError
from rlstore.specs import FieldSpec, as_flags, cast_to_spec

__all__ = ["SimpleReplayBuffer", "SimpleReplayBufferSchema"]

_KEYS = ("obs", "act", "rew", "next_obs", "done")


class SimpleReplayBufferSchema(StrictModel):
    """Config keys of :class:`SimpleReplayBuffer` (the seed's ``schema``)."""

    obs_dim: PositiveInt
    """Observation dimension, > 0."""
    act_dim: PositiveInt
    """Action dimension, > 0."""
    size: PositiveInt
    """Buffer size: transitions kept (FIFO), > 0."""
    batch_size: PositiveInt
    """Transitions returned by ``sample_batch()``, 0 < batch_size <= size."""


class SimpleReplayBuffer:
    """A simple FIFO experience replay buffer for SAC agents.

    Args:
        obs_dim: observation dimension.
        act_dim: action dimension.
        size: buffer size (transitions kept).
        batch_size: batch size of :meth:`sample_batch` (``<= size``).
        seed: sampler seed (rlstore addition; ``None`` draws OS entropy).
    """

    schema: ClassVar[type[SimpleReplayBufferSchema]] = SimpleReplayBufferSchema

    def __init__(
        self, obs_dim: int, act_dim: int, size: int, batch_size: int, *, seed: int | None = None
    ) -> None:
        cfg = self._validate({"obs_dim": obs_dim, "act_dim": act_dim, "size": size,
                              "batch_size": batch_size})  # fmt: skip
        if cfg.batch_size > cfg.size:
            raise CapacityError(f"batch_size: expected <= size={cfg.size}, got {cfg.batch_size}")
        self.obs_dim, self.act_dim = cfg.obs_dim, cfg.act_dim
        self.size, self.batch_size = cfg.size, cfg.batch_size
        self._seed = seed
        specs = {
            "obs": FieldSpec("obs", (self.obs_dim,), np.dtype(np.float32)),
            "action": FieldSpec("action", (self.act_dim,), np.dtype(np.float32)),
            "reward": FieldSpec("reward", (), np.dtype(np.float32)),
            "terminated": FieldSpec("terminated", (), np.dtype(np.bool_)),
            "truncated": FieldSpec("truncated", (), np.dtype(np.bool_)),
        }
        self._core = ReplayBuffer(self.size, specs=specs, seed=seed)

    @classmethod
    def _validate(cls, config: Any) -> SimpleReplayBufferSchema:
        if not isinstance(config, dict):
            raise ConfigError(f"config: expected a dict, got {type(config).__name__}")
        return cls.schema.validate_mapping(config, cls.__name__)

    # ------------------------------------------------------------------ config
    @classmethod
    def instantiate_from_config(cls, config_file_location: str | os.PathLike[str]) -> Any:
        """Initialize the class from a YAML or JSON config file holding :attr:`schema` keys.

        Raises:
            ConfigError: (a ``ValueError``) the file is missing, does not parse, or does not
                match the schema.
        """
        return cls.instantiate_from_config_dict(load_config_file(config_file_location))

    @classmethod
    def instantiate_from_config_dict(cls, config: dict[str, Any]) -> Any:
        """Initialize the class from a config dictionary with the :attr:`schema` keys."""
        cfg = cls._validate(config)
        return cls(cfg.obs_dim, cfg.act_dim, cfg.size, cfg.batch_size)

    # ------------------------------------------------------------------ data
    def store(self, buffer_dict: dict[str, Any]) -> None:
        """Store one timestep (or a batch with a leading axis) from ``buffer_dict``.

        Args:
            buffer_dict: ``{"obs": (obs_dim,), "act": (act_dim,), "rew": (), "next_obs":
                (obs_dim,), "done": ()}``, or each with a leading batch axis ``B``.

        Raises:
            SpecError: naming the key (``buffer_dict['rew']``): missing/extra keys, shapes that
                do not match, NaN/inf, non-numbers, ``done`` other than bools or exact 0/1;
                nothing is stored then.
        """
        if not isinstance(buffer_dict, dict):
            raise SpecError(f"buffer_dict: expected a dict, got {type(buffer_dict).__name__}")
        if sorted(buffer_dict) != sorted(_KEYS):
            raise SpecError(
                f"buffer_dict: expected keys {sorted(_KEYS)}, got {sorted(buffer_dict)}"
            )
        d = {k: to_numpy(f"buffer_dict[{k!r}]", buffer_dict[k]) for k in _KEYS}
        obs = d["obs"]
        batched = obs.ndim == 2
        b = obs.shape[0] if batched else 1
        want = {"obs": (self.obs_dim,), "act": (self.act_dim,), "rew": (), "next_obs":
                (self.obs_dim,), "done": ()}  # fmt: skip
        for k, shape in want.items():
            full = (b, *shape) if batched else shape
            a, name = d[k], f"buffer_dict[{k!r}]"
            if k == "act" and a.shape != full and a.size == int(np.prod(full)):
                a = a.reshape(full)  # a scalar action when act_dim == 1
            if a.shape != full:
                raise SpecError(f"{name}: expected shape {full}, got {a.shape}")
            a = a.reshape((b, *shape))
            if k == "done":  # bools or exact 0/1 (0.5, 2, NaN, "False" are refused)
                d[k] = as_flags(name, a)[:, None]
            else:  # finite numbers, lossless casts only (no complex, str, 1e300 -> inf)
                spec = FieldSpec(name, shape, np.dtype(np.float32))
                d[k] = cast_to_spec(name, a, spec, (b,), allow_nonfinite=False)[:, None]
        done = d["done"]
        args = (d["obs"], d["act"], d["rew"], d["next_obs"], done, np.zeros_like(done))
        if b == 1:  # one row of the single env column
            self._core.add(*(a[0] for a in args))
        elif b > 1:
            self._core.extend(*args)

    def sample_batch(self) -> dict[str, torch.Tensor]:
        """Sample ``batch_size`` transitions uniformly with replacement.

        Returns:
            ``{"obs", "act", "rew", "next_obs", "done"}`` float32 tensors, leading axis
            ``batch_size``.

        Raises:
            EmptyBufferError: fewer than ``batch_size`` transitions stored.
        """
        b = self._core.sample(self.batch_size)
        return {
            "obs": cast(torch.Tensor, b.obs),  # array observations: never a dict here
            "act": b.action,
            "rew": b.reward,
            "next_obs": cast(torch.Tensor, b.next_obs),
            "done": b.terminated.to(torch.float32),
        }

    def finish_path(self, action_obj: Any = None) -> None:
        """End of a trajectory: nothing to do for a FIFO replay buffer (kept for the seed's
        interface, which shares it with ``PPOBuffer``)."""
        return None

    def __len__(self) -> int:
        """Number of stored transitions (at most ``size``)."""
        return len(self._core)

    # ------------------------------------------------------------------ checkpointing
    def config(self) -> dict[str, Any]:
        """JSON-able constructor kwargs."""
        return {
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "size": self.size,
            "batch_size": self.batch_size,
            "seed": self._seed,
        }

    def metadata(self) -> dict[str, Any]:
        """Config plus the stored count and bytes."""
        return {**self.config(), "stored": len(self), "nbytes": self._core.nbytes}

    def state_dict(self) -> dict[str, Any]:
        """The core buffer's state (contents, cursor, sampler RNG)."""
        return {"core": self._core.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; later samples equal the original's."""
        from rlstore.errors import CheckpointError

        if "core" not in sd:
            raise CheckpointError("state_dict: missing key 'core'")
        self._core.load_state_dict(sd["core"])
