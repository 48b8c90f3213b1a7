"""Samplers of transition ids with injected, checkpointable randomness.

A buffer tells its sampler which ids are live (``on_write(lo, hi)``: the ``k``-th transition
ever written has id ``k``), draws ``sample(batch_size, beta) -> SampledIds(indices, weights)``,
and forwards ``update_priorities(indices, priorities)``; ``state_dict`` / ``load_state_dict``
save everything, so that a restored sampler draws exactly the ids the original would have.

* :class:`UniformSampler`: uniform ids with replacement, unit weights.
* :class:`PrioritizedSampler`: proportional prioritized replay (Schaul et al. 2016) over a
  vectorized float64 :class:`SumTree`.
* :func:`make_rng`, :func:`rng_state`, :func:`set_rng_state`: the one RNG-state convention.

Example:
    >>> s = UniformSampler(seed=0)
    >>> s.on_write(0, 10)
    >>> s.sample(4).indices.shape
    (4,)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from rlstore.errors import ConfigError
from rlstore.samplers._rng import BIT_GENERATORS, make_rng, rng_state, set_rng_state
from rlstore.samplers.prioritized import LinearSchedule, PrioritizedSampler
from rlstore.samplers.sum_tree import SumTree
from rlstore.samplers.uniform import SampledIds, UniformSampler

__all__ = [
    "BIT_GENERATORS",
    "LinearSchedule",
    "PrioritizedSampler",
    "SampledIds",
    "Sampler",
    "SumTree",
    "UniformSampler",
    "make_rng",
    "make_sampler",
    "rng_state",
    "set_rng_state",
]


class Sampler(Protocol):
    """What a buffer needs from a sampler (ids and windows: see :mod:`.uniform`)."""

    rng: np.random.Generator

    def bind(self, capacity: int) -> None: ...
    def config(self) -> dict[str, Any]: ...
    def on_write(self, lo: int, hi: int) -> None: ...
    def sample(self, batch_size: int, beta: float | None = None) -> SampledIds: ...
    def update_priorities(self, indices: Any, priorities: Any) -> None: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, sd: Mapping[str, Any], *, window: tuple[int, int]) -> None: ...


def make_sampler(value: Any, seed: int | np.random.Generator | None) -> Sampler:
    """A sampler from a sampler object (used as is), its :meth:`config` dict, or ``None``
    (uniform); ``seed`` seeds the samplers built here.

    Raises:
        ConfigError: anything else, or a malformed config.
    """
    if value is None:
        return UniformSampler(seed)
    if isinstance(value, (UniformSampler, PrioritizedSampler)):
        return value
    if isinstance(value, Mapping) and value.get("kind") == "uniform" and len(value) == 1:
        return UniformSampler(seed)
    if isinstance(value, Mapping) and value.get("kind") == "prioritized":
        kw = {k: v for k, v in value.items() if k != "kind"}
        try:
            if isinstance(kw.get("beta"), Mapping):
                kw["beta"] = LinearSchedule(**kw["beta"])
            return PrioritizedSampler(**kw, seed=seed)
        except TypeError as exc:
            raise ConfigError(f"sampler: malformed prioritized config {dict(value)!r}") from exc
    raise ConfigError(
        f"sampler: expected a UniformSampler, a PrioritizedSampler or its config() dict, got "
        f"{value!r}"
    )
