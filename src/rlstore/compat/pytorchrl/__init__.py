"""PyTorchRL's on-policy storages: VanillaOnPolicyBuffer, GAEBuffer, VTraceBuffer.

The originals live in ``pytorchrl.agent.storages.on_policy``; these are facades over
:class:`rlstore.buffers.rollout.RolloutBuffer`, :mod:`rlstore.returns` and
:mod:`rlstore.minibatches`, each in its own module and re-exported here.

**Layout C.** As in PyTorchRL, the ``data`` tensors are ``(size + 1, N, *shape)``.
``Observation``, ``RecurrentHiddenStates`` and ``Done`` are written at ``step + 1`` from the
sample's ``NextObservation`` / ``NextRecurrentHiddenStates`` / ``NextDone``, so ``Done[t + 1]``
is the done flag of transition ``t`` (and ``Done[t]`` says that ``Observation[t]`` starts an
episode); slot ``L`` (``L`` = number of stored transitions) holds the bootstrap state. All other
keys are written at ``step``. Before any estimator runs the flags are converted to rlstore's
transition-aligned layout A: ``done_A[t] = Done[t + 1]``, ``next_values[t] = Value[t + 1]``.

**Truncation (extension).** PyTorchRL has one done flag, so a time-limit truncation was treated
as a termination. A sample may carry two optional extra keys, ``NextTruncated`` (N, 1) and
``FinalValue`` (N, 1) = V(final observation); they appear at ``step + 1`` like ``Done`` under
the keys ``Truncated`` and ``FinalValue``. A done transition whose ``Truncated`` flag is set
bootstraps from ``FinalValue`` (never from the reset observation) and cuts the trace. Without
these keys every done is a termination, as in PyTorchRL.

Values may be tensors or one-level dicts of tensors (dict observations); each has a leading env
axis N (sample keys: :mod:`.protocols`).
"""

from rlstore.compat.pytorchrl import protocols
from rlstore.compat.pytorchrl.protocols import *  # noqa: F403 (the sample keys and protocols)
from rlstore.compat.pytorchrl.vanilla import GAEBuffer, VanillaOnPolicyBuffer, VTraceBuffer

__all__ = ["VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", *protocols.__all__]
