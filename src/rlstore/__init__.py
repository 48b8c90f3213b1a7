"""rlstore: reinforcement-learning experience storage, return estimators and a PPO trainer.

Importing rlstore has no side effects (no env registration, no warning filters, no threads).
"""

from __future__ import annotations

from rlstore.errors import (
    CapacityError,
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    RLStoreError,
    SpecError,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "RLStoreError",
    "SpecError",
    "EmptyBufferError",
    "CapacityError",
    "CheckpointError",
    "ConfigError",
]
