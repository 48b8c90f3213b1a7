"""Index samplers with injected, checkpointable randomness.

Every sampler takes ``seed: int | np.random.Generator | None`` and exposes its RNG state in
``state_dict()`` so that a restored sampler draws exactly the indices the original would have.

Example:
    >>> s = UniformSampler(seed=0)
    >>> idx = s.sample(10, 4)
    >>> idx.shape, idx.dtype
    ((4,), dtype('int64'))
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlstore.errors import CheckpointError, ConfigError, EmptyBufferError
from rlstore.specs import check_count

__all__ = ["UniformSampler", "make_rng", "rng_state", "set_rng_state"]


def make_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A numpy Generator from a seed, an existing Generator (used as is, shared) or None."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, (int, np.integer)):
        return np.random.default_rng(seed)
    raise ConfigError(f"seed: expected int, numpy Generator or None, got {type(seed).__name__}")


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """JSON-able copy of a Generator's bit-generator state (Python ints may exceed 64 bits)."""
    return copy.deepcopy(dict(rng.bit_generator.state))


def set_rng_state(rng: np.random.Generator, state: Mapping[str, Any]) -> np.random.Generator:
    """Return a Generator in ``state``: ``rng`` itself when its bit generator matches the
    state's type, otherwise a new Generator of the right bit-generator class.

    Raises:
        CheckpointError: unknown bit generator or malformed state.
    """
    name = state.get("bit_generator") if isinstance(state, Mapping) else None
    try:
        if type(rng.bit_generator).__name__ != name:
            rng = np.random.Generator(getattr(np.random, str(name))())
        rng.bit_generator.state = copy.deepcopy(dict(state))
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(f"rng_state: cannot restore bit generator state {state!r}") from exc
    return rng


class UniformSampler:
    """Uniform sampling of indices with replacement.

    Args:
        seed: ``int``, ``np.random.Generator`` (shared, not copied) or ``None`` (fresh entropy).
    """

    def __init__(self, seed: int | np.random.Generator | None = None):
        self.rng = make_rng(seed)

    def sample(self, valid_count_or_mask: int | np.ndarray, batch_size: int) -> np.ndarray:
        """Draw ``batch_size`` indices uniformly with replacement.

        Args:
            valid_count_or_mask: ``n`` (indices drawn from ``[0, n)``) or a boolean mask
                (indices drawn among its True positions, flat order).
            batch_size: number of indices (> 0).

        Returns:
            ``np.ndarray`` int64 of shape ``(batch_size,)``.

        Raises:
            CapacityError: ``batch_size <= 0``.
            EmptyBufferError: nothing valid to sample from.
        """
        check_count("batch_size", batch_size)  # ints only: not True, 2.5 or "4"
        if isinstance(valid_count_or_mask, np.ndarray) and valid_count_or_mask.dtype == bool:
            valid = np.flatnonzero(valid_count_or_mask)
            if valid.size == 0:
                raise EmptyBufferError("sample: no valid index to sample from (mask all False)")
            return valid[self.rng.integers(0, valid.size, int(batch_size))]
        n = int(valid_count_or_mask)
        if n <= 0:
            raise EmptyBufferError("sample: buffer is empty")
        return self.rng.integers(0, n, int(batch_size))

    def state_dict(self) -> dict[str, Any]:
        """``{"rng": bit-generator state}`` (JSON-able)."""
        return {"rng": rng_state(self.rng)}

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore the RNG state saved by :meth:`state_dict`."""
        if "rng" not in sd:
            raise CheckpointError("sampler state: missing key 'rng'")
        self.rng = set_rng_state(self.rng, sd["rng"])
