"""Uniform sampling of transition ids with replacement, with checkpointable randomness.

Samplers work on **ids**: the ``k``-th item ever written has id ``k``, and a buffer tells its
sampler which ids are live with :meth:`UniformSampler.on_write` (a window ``[lo, hi)`` that only
moves forward). Ids are never reused, so an id below ``lo`` names an item that was overwritten.

Example:
    >>> s = UniformSampler(seed=0)
    >>> s.on_write(0, 10)
    >>> batch = s.sample(4)
    >>> batch.indices.dtype, batch.weights.tolist()
    (dtype('int64'), [1.0, 1.0, 1.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from rlstore._checks import check_count
from rlstore._trees import to_numpy
from rlstore.errors import CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.samplers._rng import make_rng, rng_state, set_rng_state

__all__ = ["SampledIds", "UniformSampler", "check_ids", "check_window"]


class SampledIds(NamedTuple):
    """A drawn batch: ``indices (B,)`` int64 ids, ``weights (B,)`` float32 importance weights."""

    indices: np.ndarray
    weights: np.ndarray


def check_ids(name: str, ids: Any, high: int | None = None) -> np.ndarray:
    """``ids`` (an array, a tensor on any device, a list: ``[]`` too) as a 1-D int64 array of
    integers (no floats or bools), in ``[0, high)`` when ``high`` is given (else the caller
    checks the range).

    Raises:
        SpecError: naming ``name``: not 1-D, not integers, a value out of range.
    """
    arr = to_numpy(name, ids)
    if arr.ndim == 1 and arr.size == 0:  # ``[]`` reads as float64
        return np.zeros(0, np.int64)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise SpecError(
            f"{name}: expected a 1-D integer array, got {arr.dtype} of shape {arr.shape}"
        )
    if arr.dtype.kind == "u" and int(arr.max()) > np.iinfo(np.int64).max:  # would wrap
        raise SpecError(f"{name}: expected values in [0, 2**63), got {int(arr.max())}")
    if high is not None and (int(arr.min()) < 0 or int(arr.max()) >= high):
        bad = arr[(arr < 0) | (arr >= high)][0]
        raise SpecError(f"{name}: expected values in [0, {high}), got {bad}")
    return arr.astype(np.int64, copy=False)


def check_window(lo: Any, hi: Any, old: tuple[int, int], capacity: int | None) -> tuple[int, int]:
    """The new live window ``[lo, hi)``: ints, moving forward, at most ``capacity`` ids."""
    ok = all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in (lo, hi))
    if not ok or not (old[0] <= lo <= hi and old[1] <= hi):
        raise SpecError(f"lo, hi: expected ints with {old[0]} <= lo <= hi, hi >= {old[1]}, "
                        f"got {lo!r}, {hi!r}")  # fmt: skip
    if capacity is not None and hi - lo > capacity:
        raise SpecError(f"lo, hi: expected at most capacity={capacity} live ids, got {hi - lo}")
    return int(lo), int(hi)


class UniformSampler:
    """Uniform sampling of the live ids with replacement; unit weights.

    Args:
        seed: ``int``, ``np.random.Generator`` (shared, not copied) or ``None`` (fresh entropy).
    """

    def __init__(self, seed: int | np.random.Generator | None = None):
        self.rng = make_rng(seed)
        self.lo = self.hi = 0

    def bind(self, capacity: int) -> None:
        """Nothing to allocate (the prioritized sampler sizes its tree here)."""

    def config(self) -> dict[str, Any]:
        """JSON-able description: ``{"kind": "uniform"}``."""
        return {"kind": "uniform"}

    def on_write(self, lo: int, hi: int) -> None:
        """The live ids are now ``[lo, hi)`` (any window: nothing is kept per id, so a sampler
        may also be handed to a new buffer)."""
        if type(lo) is not int or type(hi) is not int or not 0 <= lo <= hi:
            lo, hi = check_window(lo, hi, (0, 0), None)
        self.lo, self.hi = lo, hi

    def sample(self, batch_size: int, beta: float | None = None) -> SampledIds:
        """Draw ``batch_size`` live ids uniformly with replacement (``beta`` is ignored).

        Raises:
            CapacityError: ``batch_size`` not an int >= 1.
            EmptyBufferError: no live id.
        """
        b = check_count("batch_size", batch_size)  # ints only: not True, 2.5 or "4"
        if self.hi == self.lo:
            raise EmptyBufferError("sample: no live id (the buffer is empty)")
        ids = self.rng.integers(0, self.hi - self.lo, b)
        if self.lo:
            ids += self.lo
        return SampledIds(ids, np.ones(b, np.float32))

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Refused: uniform sampling has no priorities."""
        raise ConfigError(
            "update_priorities: this buffer samples uniformly; build it with "
            "sampler=PrioritizedSampler(...) to use priorities"
        )

    def state_dict(self) -> dict[str, Any]:
        """``{"rng": bit-generator state}`` (JSON-able); the window comes from the buffer."""
        return {"rng": rng_state(self.rng)}

    def load_state_dict(
        self, sd: Mapping[str, Any], *, window: tuple[int, int] = (0, 0), where: str = "sampler"
    ) -> None:
        """Restore the RNG state saved by :meth:`state_dict` and set the live ``window``
        (checked whole first; a rejected state leaves the sampler unchanged).

        Raises:
            CheckpointError: ``sd`` is not ``{"rng": state}`` or the state is malformed.
        """
        if not isinstance(sd, Mapping) or set(sd) != {"rng"}:
            got = sorted(map(str, sd)) if isinstance(sd, Mapping) else type(sd).__name__
            raise CheckpointError(f"{where}: expected the key 'rng', got {got}")
        self.rng = set_rng_state(self.rng, sd["rng"], where=f"{where}.rng")
        self.lo, self.hi = window
