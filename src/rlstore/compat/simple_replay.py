"""The ``src.buffers`` package's ``SimpleReplayBuffer`` over :class:`rlstore.ReplayBuffer`."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from rlstore._checks import check_count, check_keys
from rlstore._trees import to_numpy
from rlstore.compat import _common as C
from rlstore.errors import CapacityError, ConfigError, SpecError

__all__ = ["SimpleReplayBuffer", "SimpleReplayBufferSchema"]

_KEYS = ("obs", "act", "rew", "next_obs", "done")


class SimpleReplayBufferSchema(C.DimsConfig):
    """Config keys of :class:`SimpleReplayBuffer` (its ``schema``)."""


class SimpleReplayBuffer(C.FromConfig):
    """``src.buffers.SimpleReplayBuffer(obs_dim, act_dim, size, batch_size)``, the FIFO buffer
    of SAC agents: ``buffer_dict`` has the keys ``obs``, ``act``, ``rew``, ``next_obs``, ``done``
    (a termination), a leading batch axis for several steps; ``sample_batch()`` draws float32
    tensors uniformly with replacement.

    Differences: bad input is a SpecError naming the key (``buffer_dict['rew']``) and stores
    nothing; ``seed=`` seeds the sampler; ``finish_path`` is a no-op; ``schema`` is a pydantic
    model, config files may be YAML or JSON; it is checkpointable (``config``, ``metadata``,
    ``state_dict``, ``load_state_dict``).
    """

    schema: ClassVar[type[SimpleReplayBufferSchema]] = SimpleReplayBufferSchema

    def __init__(
        self, obs_dim: int, act_dim: int, size: int, batch_size: int, *, seed: int | None = None
    ) -> None:
        dims = {"obs_dim": obs_dim, "act_dim": act_dim, "size": size, "batch_size": batch_size}
        obs_dim, act_dim, size, batch_size = (  # Python or numpy ints, like PPOBuffer's
            check_count(k, v, error=ConfigError) for k, v in dims.items()
        )
        if batch_size > size:
            raise CapacityError(f"batch_size: expected <= size={size}, got {batch_size}")
        self.obs_dim, self.act_dim, self.size, self.batch_size = obs_dim, act_dim, size, batch_size
        self._seed = seed
        self._core = C.transition_core(size, obs_dim, act_dim, seed=seed)

    def store(self, buffer_dict: dict[str, Any]) -> None:
        """Store one timestep, or a batch with a leading axis ``B`` on each key."""
        check_keys("buffer_dict", buffer_dict, _KEYS, SpecError)
        batched = to_numpy("buffer_dict['obs']", buffer_dict["obs"]).ndim == 2
        b = len(buffer_dict["obs"]) if batched else 1
        dims = {"obs": (self.obs_dim,), "act": (self.act_dim,), "next_obs": (self.obs_dim,)}
        d = {k: C.rows(f"buffer_dict[{k!r}]", buffer_dict[k], b, dims.get(k, ()),
                       flags=k == "done", batched=batched) for k in _KEYS}  # fmt: skip
        C.write(self._core, (*d.values(), d["done"] & False))  # never truncated

    def sample_batch(self) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions; EmptyBufferError with fewer stored."""
        return dict(zip(_KEYS, C.sampled(self._core.sample(self.batch_size)), strict=True))

    def finish_path(self, action_obj: Any = None) -> None:
        """Nothing to do for a FIFO replay buffer (kept for the original interface)."""

    def __len__(self) -> int:
        """Number of stored transitions (at most ``size``)."""
        return len(self._core)

    def config(self) -> dict[str, Any]:
        """JSON-able constructor kwargs."""
        return {k: getattr(self, k) for k in self.schema.model_fields} | {"seed": self._seed}

    def metadata(self) -> dict[str, Any]:
        """Config plus the stored count and bytes."""
        return {**self.config(), "stored": len(self), "nbytes": self._core.nbytes}

    def state_dict(self) -> dict[str, Any]:
        """The core buffer's state (contents, cursor, sampler RNG)."""
        return {"core": self._core.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; later samples equal the original's."""
        check_keys("state_dict", sd, ("core",))
        self._core.load_state_dict(sd["core"])
