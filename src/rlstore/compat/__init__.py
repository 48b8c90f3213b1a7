"""Five other RL libraries' storage classes and sample records with their documented
signatures, as thin facades over rlstore's core: velora's buffers (``VeloraReplayBuffer``),
PyTorchRL's storages, DecisionTransformerInterpretability's ``src.buffers``, ``src.ppo.memory``
(the rest of ``src.ppo``, whose package exports nothing itself: :mod:`rlstore.compat.src_ppo`)."""

from __future__ import annotations

from rlstore.compat.ppo_buffer import PPOBuffer, discount_cumsum
from rlstore.compat.pytorchrl import (
    GAEBuffer,
    MBReplayBuffer,
    PPODBuffer,
    VanillaOnPolicyBuffer,
    VTraceBuffer,
)
from rlstore.compat.simple_replay import SimpleReplayBuffer
from rlstore.compat.src_ppo_memory import Memory, compute_advantages_vectorized, shift_rows
from rlstore.compat.velora import BatchExperience, BufferBase
from rlstore.compat.velora import ReplayBuffer as VeloraReplayBuffer
from rlstore.minibatches import Minibatch, TrajectoryMinibatch  # src.ppo.memory's records

__all__ = [
    "SimpleReplayBuffer", "PPOBuffer", "discount_cumsum", "VeloraReplayBuffer", "BufferBase",
    "BatchExperience", "VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", "PPODBuffer",
    "MBReplayBuffer", "Memory", "Minibatch", "TrajectoryMinibatch",
    "compute_advantages_vectorized", "shift_rows",
]  # fmt: skip
