"""PyTorchRL's on-policy storages (``pytorchrl.agent.storages.on_policy``) over
:class:`~rlstore.buffers.rollout.RolloutBuffer`; the sample keys are in :mod:`.protocols`.

**Layout C.** As in PyTorchRL, the ``data`` tensors are ``(size + 1, N, *shape)``:
``Observation``, ``RecurrentHiddenStates`` and ``Done`` are written at ``step + 1`` from the
sample's ``Next*`` keys (``Done[t + 1]`` ends transition ``t``; ``Done[t]`` says that
``Observation[t]`` starts an episode), slot ``L`` (``L`` transitions stored) holds the bootstrap
state, all other keys are written at ``step``. The estimators run in rlstore's layout A:
``done_A[t] = Done[t + 1]``, ``next_values[t] = Value[t + 1]``. Values are tensors or one-level
dicts of tensors with a leading env axis N.

**Truncation (extension).** PyTorchRL's one done flag made a time limit a termination. A sample
may carry ``NextTruncated`` (N, 1) and ``FinalValue`` (N, 1) = V(final observation), stored at
``step + 1`` as ``Truncated`` / ``FinalValue``: such a done bootstraps from ``FinalValue``
(never from the reset observation) and cuts the trace. Without them every done terminates.
"""

from rlstore.compat.pytorchrl import protocols
from rlstore.compat.pytorchrl.protocols import *  # noqa: F403 (the sample keys and protocols)
from rlstore.compat.pytorchrl.vanilla import GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer

__all__ = ["VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", *protocols.__all__]
