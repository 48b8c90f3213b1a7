"""PyTorchRL's on-policy storages: VanillaOnPolicyBuffer, GAEBuffer, VTraceBuffer.

The originals live in ``pytorchrl.agent.storages.on_policy``.

Modules: :mod:`.protocols` (sample keys, ``Actor`` / ``Algorithm``), :mod:`.vanilla`
(:class:`VanillaOnPolicyBuffer`: storage, returns, minibatches), :mod:`.gae`
(:class:`GAEBuffer`), :mod:`.vtrace` (:class:`VTraceBuffer`), :mod:`._layout` (layout-C
helpers). Every name is re-exported here.

Facades over rlstore's core: returns come from :func:`rlstore.returns.gae` /
:func:`rlstore.returns.vtrace`, advantage normalization from
:func:`rlstore.returns.normalize_advantages`, minibatch index plans from
:mod:`rlstore.minibatches`, intrinsic-reward scaling from
:class:`rlstore.normalize.DiscountedReturnNormalizer`.

**Layout C.** As in PyTorchRL, every tensor is ``(size + 1, N, *shape)``. ``Observation``,
``RecurrentHiddenStates`` and ``Done`` are written at ``step + 1`` from the sample's
``NextObservation`` / ``NextRecurrentHiddenStates`` / ``NextDone``, so ``Done[t + 1]`` is the
done flag of transition ``t`` (and ``Done[t]`` says that ``Observation[t]`` starts an episode);
slot ``L`` (``L`` = number of stored transitions) holds the bootstrap state. All other keys are
written at ``step``. Before any estimator runs the flags are converted to rlstore's
transition-aligned layout A: ``done_A[t] = Done[t + 1]``, ``next_values[t] = Value[t + 1]``.

**Truncation (extension).** PyTorchRL has one done flag, so a time-limit truncation was treated
as a termination. A sample may carry two optional extra keys, ``NextTruncated`` (N, 1) and
``FinalValue`` (N, 1) = V(final observation); they are stored at ``step + 1`` like ``Done``
under the keys ``Truncated`` and ``FinalValue``. A done transition whose ``Truncated`` flag is
set bootstraps from ``FinalValue`` (never from the reset observation) and cuts the trace.
Without these keys every done is a termination, as in PyTorchRL.

Sample keys (PyTorchRL's ``prl.*`` constants): ``Observation``, ``NextObservation``,
``RecurrentHiddenStates``/``NextRecurrentHiddenStates`` (recurrent actors), ``Done``,
``NextDone``, ``Action``, ``Reward``, ``Value``, ``LogProbability`` and, for intrinsic-reward
algorithms, ``IntrinsicReward`` and ``IntrinsicValue``. Values may be tensors or one-level dicts
of tensors (dict observations); each has a leading env axis N.
"""

from rlstore.compat.pytorchrl.gae import GAEBuffer
from rlstore.compat.pytorchrl.protocols import (
    ACT,
    ADV,
    DONE,
    DONE2,
    FVAL,
    IADV,
    IRET,
    IREW,
    IVAL,
    LOGP,
    OBS,
    OBS2,
    RET,
    REW,
    RHS,
    RHS2,
    TRUNC,
    TRUNC2,
    VAL,
    Actor,
    Algorithm,
    OnPolicyDataKeys,
)
from rlstore.compat.pytorchrl.vanilla import VanillaOnPolicyBuffer
from rlstore.compat.pytorchrl.vtrace import VTraceBuffer

__all__ = [
    "Actor", "Algorithm", "VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", "OnPolicyDataKeys",
    "OBS", "OBS2", "RHS", "RHS2", "DONE", "DONE2", "ACT", "REW", "IREW", "RET", "IRET", "VAL",
    "IVAL", "LOGP", "ADV", "IADV", "TRUNC", "TRUNC2", "FVAL",
]  # fmt: skip
