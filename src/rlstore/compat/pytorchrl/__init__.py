"""PyTorchRL's storages (:mod:`.vanilla`: the on-policy ones, layout C, the truncation extension;
``PPODBuffer`` and ``MBReplayBuffer``, resolved on first use as their modules import this one)
and its interface (:mod:`.protocols`: the sample keys, the Actor / Algorithm protocols)."""

from typing import Any

from rlstore.compat.pytorchrl import protocols
from rlstore.compat.pytorchrl.protocols import *  # noqa: F403 (the sample keys and protocols)
from rlstore.compat.pytorchrl.vanilla import GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer

__all__ = ["VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", "PPODBuffer", "MBReplayBuffer",  # noqa: F405 (__getattr__)
           *protocols.__all__]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in ("PPODBuffer", "MBReplayBuffer"):
        import rlstore.compat

        return getattr(rlstore.compat, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
