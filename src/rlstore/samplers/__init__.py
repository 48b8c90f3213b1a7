"""Index samplers with injected, checkpointable randomness.

Every sampler takes ``seed: int | np.random.Generator | None`` and exposes its RNG state in
``state_dict()`` so that a restored sampler draws exactly the indices the original would have.

* :class:`UniformSampler`: uniform indices with replacement.
* :class:`PrioritizedSampler`: proportional prioritized replay (Schaul et al. 2016) over a
  vectorized float64 :class:`SumTree`.
* :func:`make_rng`, :func:`rng_state`, :func:`set_rng_state`: the one RNG-state convention.

Example:
    >>> s = UniformSampler(seed=0)
    >>> idx = s.sample(10, 4)
    >>> idx.shape, idx.dtype
    ((4,), dtype('int64'))
"""

from __future__ import annotations

from rlstore.samplers._rng import BIT_GENERATORS, make_rng, rng_state, set_rng_state
from rlstore.samplers.prioritized import LinearSchedule, PrioritizedSample, PrioritizedSampler
from rlstore.samplers.sum_tree import SumTree
from rlstore.samplers.uniform import UniformSampler

__all__ = [
    "BIT_GENERATORS",
    "LinearSchedule",
    "PrioritizedSample",
    "PrioritizedSampler",
    "SumTree",
    "UniformSampler",
    "make_rng",
    "rng_state",
    "set_rng_state",
]
