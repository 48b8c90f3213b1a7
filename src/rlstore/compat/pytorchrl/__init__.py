"""PyTorchRL's on-policy storages (:mod:`.vanilla`: layout C, the truncation extension) and its
interface (:mod:`.protocols`: the sample keys, the Actor / Algorithm protocols)."""

from rlstore.compat.pytorchrl import protocols
from rlstore.compat.pytorchrl.protocols import *  # noqa: F403 (the sample keys and protocols)
from rlstore.compat.pytorchrl.vanilla import GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer

__all__ = ["VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", *protocols.__all__]
