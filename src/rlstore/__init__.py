"""rlstore: reinforcement-learning experience storage, return estimators and a PPO trainer.

Importing rlstore has no side effects (no env registration, no warning filters, no threads).

Main entry points::

    from rlstore import ReplayBuffer, RolloutBuffer, gae, vtrace, checkpoint
"""

from __future__ import annotations

import importlib.metadata

from rlstore import checkpoint
from rlstore.buffers.demos import Demo, DemoMixer, DemoStore
from rlstore.buffers.model_based import ModelBasedReplay
from rlstore.buffers.nstep import NStepBatch, NStepReplay
from rlstore.buffers.replay import ReplayBatch, ReplayBuffer
from rlstore.buffers.rollout import IntrinsicConfig, RolloutBatch, RolloutBuffer
from rlstore.buffers.sequence import SequenceBatch, SequenceReplay
from rlstore.config import build_buffer, load_config_file
from rlstore.errors import (
    CapacityError,
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    RLStoreError,
    SpecError,
)
from rlstore.minibatches import Minibatch, TrajectoryMinibatch
from rlstore.normalize import DiscountedReturnNormalizer, RunningMeanStd
from rlstore.returns import discount_cumsum, gae, normalize_advantages, nstep, td_lambda, vtrace
from rlstore.specs import FieldSpec
from rlstore.vector import AutoresetMode, TransitionAdapter


def _package_version() -> str:
    """The installed distribution's version (``pyproject.toml`` is the only place it is written);
    ``"0+unknown"`` when rlstore runs from a source tree that was never installed."""
    try:
        return importlib.metadata.version("rlstore")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _package_version()

__all__ = [
    "__version__",
    # buffers
    "ReplayBuffer",
    "ReplayBatch",
    "RolloutBuffer",
    "RolloutBatch",
    "IntrinsicConfig",
    "Minibatch",
    "TrajectoryMinibatch",
    "Demo",
    "DemoStore",
    "DemoMixer",
    "ModelBasedReplay",
    "NStepReplay",
    "NStepBatch",
    "SequenceReplay",
    "SequenceBatch",
    "FieldSpec",
    "AutoresetMode",
    "TransitionAdapter",
    # estimators
    "discount_cumsum",
    "gae",
    "td_lambda",
    "vtrace",
    "nstep",
    "normalize_advantages",
    "RunningMeanStd",
    "DiscountedReturnNormalizer",
    # persistence and config
    "checkpoint",
    "build_buffer",
    "load_config_file",
    # errors
    "RLStoreError",
    "SpecError",
    "EmptyBufferError",
    "CapacityError",
    "CheckpointError",
    "ConfigError",
]
