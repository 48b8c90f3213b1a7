"""One exception family for rlstore.

Every error raised at a public boundary is an :class:`RLStoreError` (a ``ValueError``), so
callers can catch library errors with one ``except``. Messages name the argument, what was
expected, and what arrived, e.g. ``rewards: expected shape (128, 8) like values, got (128,)``.
"""

from __future__ import annotations

__all__ = [
    "RLStoreError",
    "SpecError",
    "EmptyBufferError",
    "CapacityError",
    "CheckpointError",
    "ConfigError",
]


class RLStoreError(ValueError):
    """Base class of every error rlstore raises on bad input or bad state."""


class SpecError(RLStoreError):
    """A value does not match its field spec: wrong shape, dtype, missing or extra key, NaN/inf."""


class EmptyBufferError(RLStoreError):
    """Sampling asked for more than the buffer holds (or it holds nothing sampleable yet)."""


class CapacityError(RLStoreError):
    """A capacity or batch size is out of range (capacity <= 0, batch larger than capacity)."""


class CheckpointError(RLStoreError):
    """A checkpoint is missing, truncated, corrupted, or of an unsupported format version."""


class ConfigError(RLStoreError):
    """A configuration is invalid: unknown key, wrong type, conflicting settings."""
