"""Uniform sampling of indices with replacement, with checkpointable randomness.

Example:
    >>> s = UniformSampler(seed=0)
    >>> idx = s.sample(10, 4)
    >>> idx.shape, idx.dtype
    ((4,), dtype('int64'))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlstore._checks import check_count
from rlstore.errors import CheckpointError, EmptyBufferError
from rlstore.samplers._rng import make_rng, rng_state, set_rng_state

__all__ = ["UniformSampler"]


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
        """Restore the RNG state saved by :meth:`state_dict` (checked whole first; a rejected
        state leaves the sampler unchanged).

        Raises:
            CheckpointError: ``sd`` is not ``{"rng": state}`` or the state is malformed.
        """
        if not isinstance(sd, Mapping) or set(sd) != {"rng"}:
            got = sorted(map(str, sd)) if isinstance(sd, Mapping) else type(sd).__name__
            raise CheckpointError(f"sampler: expected the key 'rng', got {got}")
        self.rng = set_rng_state(self.rng, sd["rng"], where="sampler.rng")
