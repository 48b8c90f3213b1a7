"""The ``src.buffers`` package's ``SimpleReplayBuffer`` (a FIFO replay buffer for SAC agents) as
a facade over :class:`rlstore.ReplayBuffer`.

Its documented API: ``SimpleReplayBuffer(obs_dim, act_dim, size, batch_size)`` with
``store(buffer_dict)``, ``sample_batch()``, ``finish_path(action_obj=None)``, the classmethods
``instantiate_from_config(path)`` / ``instantiate_from_config_dict(config)`` and a ``schema``
class attribute listing the four integer config keys. What the documentation leaves open, and
where rlstore differs:

* ``buffer_dict`` keys are those of Spinning Up's SAC ``store(obs, act, rew, next_obs, done)``:
  ``obs`` ``(obs_dim,)``, ``act`` ``(act_dim,)``, ``rew`` scalar, ``next_obs`` ``(obs_dim,)``,
  ``done`` bool (a termination: no bootstrap). Arrays, tensors and Python numbers are accepted;
  a leading batch axis stores several timesteps at once. Bad input is a
  :class:`~rlstore.errors.SpecError` naming the key, and stores nothing.
* ``sample_batch()`` returns a dict with the same five keys: float32 torch tensors ``obs``
  ``(batch_size, obs_dim)``, ``act`` ``(batch_size, act_dim)``, ``rew``, ``next_obs``, ``done``
  ``(batch_size,)`` (``done`` as 0.0/1.0), drawn uniformly with replacement (``seed=``, an
  rlstore addition, seeds the sampler).
* ``finish_path`` is a no-op: its documentation is copied from ``PPOBuffer``, and a FIFO replay
  buffer has no per-trajectory computation.
* ``schema`` is a pydantic model (the original's is a strictyaml ``Map``) that rejects unknown
  keys and non-integers with a :class:`~rlstore.errors.ConfigError` naming the key; config
  files may be YAML or JSON.

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
from typing import Any, ClassVar

import torch

from rlstore._trees import to_numpy
from rlstore.compat._replay import rows, sampled, transition_core, write
from rlstore.config import PositiveInt, StrictModel, load_config_file
from rlstore.errors import CapacityError, CheckpointError, SpecError

__all__ = ["SimpleReplayBuffer", "SimpleReplayBufferSchema"]

_KEYS = ("obs", "act", "rew", "next_obs", "done")


class SimpleReplayBufferSchema(StrictModel):
    """Config keys of :class:`SimpleReplayBuffer` (its ``schema``)."""

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
        cfg = SimpleReplayBufferSchema(obs_dim=obs_dim, act_dim=act_dim, size=size,
                                       batch_size=batch_size)  # fmt: skip
        if cfg.batch_size > cfg.size:
            raise CapacityError(f"batch_size: expected <= size={cfg.size}, got {cfg.batch_size}")
        self.obs_dim, self.act_dim, self.size, self.batch_size = obs_dim, act_dim, size, batch_size
        self._seed = seed
        self._core = transition_core(size, obs_dim, act_dim, seed=seed)

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
        return cls(**cls.schema.validate_mapping(config, cls.__name__).model_dump())

    def store(self, buffer_dict: dict[str, Any]) -> None:
        """Store one timestep ``{"obs": (obs_dim,), "act": (act_dim,), "rew": (), "next_obs":
        (obs_dim,), "done": ()}``, or a batch with a leading axis ``B`` on each.

        Raises:
            SpecError: naming the key (``buffer_dict['rew']``): missing/extra keys, shapes that
                do not match, NaN/inf, non-numbers, ``done`` other than bools or exact 0/1;
                nothing is stored then.
        """
        if not isinstance(buffer_dict, dict) or sorted(buffer_dict) != sorted(_KEYS):
            got = sorted(buffer_dict) if isinstance(buffer_dict, dict) else type(buffer_dict)
            raise SpecError(f"buffer_dict: expected keys {sorted(_KEYS)}, got {got}")
        obs = to_numpy("buffer_dict['obs']", buffer_dict["obs"])
        batched = obs.ndim == 2
        b = obs.shape[0] if batched else 1
        dims = {"obs": (self.obs_dim,), "act": (self.act_dim,), "rew": (),
                "next_obs": (self.obs_dim,), "done": ()}  # fmt: skip
        d = {k: rows(f"buffer_dict[{k!r}]", buffer_dict[k], b, dims[k], flags=k == "done",
                     batched=batched) for k in _KEYS}  # fmt: skip
        write(self._core, (*(d[k] for k in _KEYS), d["done"] & False))  # never truncated

    def sample_batch(self) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement (module doc: the dict).

        Raises:
            EmptyBufferError: fewer than ``batch_size`` transitions stored.
        """
        return dict(zip(_KEYS, sampled(self._core.sample(self.batch_size)), strict=True))

    def finish_path(self, action_obj: Any = None) -> None:
        """End of a trajectory: nothing to do for a FIFO replay buffer (kept for the original
        interface, which shares it with ``PPOBuffer``)."""
        return None

    def __len__(self) -> int:
        """Number of stored transitions (at most ``size``)."""
        return len(self._core)

    def config(self) -> dict[str, Any]:
        """JSON-able constructor kwargs."""
        keys = ("obs_dim", "act_dim", "size", "batch_size")
        return {**{k: getattr(self, k) for k in keys}, "seed": self._seed}

    def metadata(self) -> dict[str, Any]:
        """Config plus the stored count and bytes."""
        return {**self.config(), "stored": len(self), "nbytes": self._core.nbytes}

    def state_dict(self) -> dict[str, Any]:
        """The core buffer's state (contents, cursor, sampler RNG)."""
        return {"core": self._core.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; later samples equal the original's."""
        if not isinstance(sd, dict) or "core" not in sd:
            raise CheckpointError("state_dict: expected a dict with key 'core'")
        self._core.load_state_dict(sd["core"])
