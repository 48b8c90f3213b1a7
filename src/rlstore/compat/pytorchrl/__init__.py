"""PyTorchRL's storages (:mod:`.vanilla`: the on-policy ones, layout C, the truncation extension;
``PPODBuffer``, ``MBReplayBuffer``) and its interface (:mod:`.protocols`: the sample keys and the
Actor / Algorithm protocols, which those two modules import)."""

from rlstore.compat.model_based import MBReplayBuffer
from rlstore.compat.ppod import PPODBuffer
from rlstore.compat.pytorchrl import protocols
from rlstore.compat.pytorchrl.protocols import *  # noqa: F403 (the sample keys and protocols)
from rlstore.compat.pytorchrl.vanilla import GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer

__all__ = ["VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", "PPODBuffer", "MBReplayBuffer",
           *protocols.__all__]  # fmt: skip
