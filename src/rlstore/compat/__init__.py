"""Five other RL libraries' classes with their documented signatures, as thin facades over
rlstore's core: velora's buffers, PyTorchRL's storages, DecisionTransformerInterpretability's
``src.ppo`` (:mod:`rlstore.compat.src_ppo`) and ``src.buffers`` (``PPOBuffer``,
``SimpleReplayBuffer``). velora's ``ReplayBuffer`` is ``VeloraReplayBuffer`` here."""

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

__all__ = [
    "SimpleReplayBuffer",
    "PPOBuffer",
    "discount_cumsum",
    "VeloraReplayBuffer",
    "BufferBase",
    "BatchExperience",
    "VanillaOnPolicyBuffer",
    "GAEBuffer",
    "VTraceBuffer",
    "PPODBuffer",
    "MBReplayBuffer",
    "Memory",
    "compute_advantages_vectorized",
    "shift_rows",
]
