"""PyTorchRL's interface: the sample keys (``prl.*`` constants, plus rlstore's truncation
extension ``NextTruncated`` / ``FinalValue``) and the Actor / Algorithm protocols."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "Actor", "Algorithm", "OnPolicyDataKeys", "SHIFTED", "OBS", "OBS2", "RHS", "RHS2", "DONE",
    "DONE2", "ACT", "REW", "IREW", "RET", "IRET", "VAL", "IVAL", "LOGP", "ADV", "IADV", "TRUNC",
    "TRUNC2", "FVAL",
]  # fmt: skip

OBS, OBS2 = "Observation", "NextObservation"
RHS, RHS2 = "RecurrentHiddenStates", "NextRecurrentHiddenStates"
DONE, DONE2 = "Done", "NextDone"
ACT, REW, IREW = "Action", "Reward", "IntrinsicReward"
RET, IRET, VAL, IVAL = "ExternalReturn", "IntrinsicReturn", "Value", "IntrinsicValue"
LOGP, ADV, IADV = "LogProbability", "Advantage", "IntrinsicAdvantage"
TRUNC, TRUNC2, FVAL = "Truncated", "NextTruncated", "FinalValue"

OnPolicyDataKeys = (OBS, RHS, DONE, ACT, REW, IREW, RET, IRET, VAL, IVAL, LOGP, ADV, IADV)
SHIFTED = {OBS: OBS2, RHS: RHS2, DONE: DONE2, TRUNC: TRUNC2}  # stored at step + 1 from Next*


@runtime_checkable
class Actor(Protocol):
    """PyTorchRL's actor-critic as the buffers use it: batches have a leading axis ``B``; a
    recurrent actor gets whole env columns flattened time-major (``B = L * E``), ``rhs`` of their
    first step (``E`` rows) and ``done`` marking the steps that start an episode."""

    is_recurrent: bool

    def get_value(self, obs: Any, rhs: Any, done: torch.Tensor) -> Mapping[str, Any]:
        """``{"value_net1": (B, 1) tensor, ...}`` (``"ivalue_net1"`` with an intrinsic critic)."""
        ...

    def evaluate_actions(
        self, obs: Any, rhs: Any, done: torch.Tensor, action: torch.Tensor
    ) -> tuple[Any, ...]:
        """``(logp (B, 1), entropy, ...)`` of ``action`` under the current policy (VTraceBuffer)."""
        ...


@runtime_checkable
class Algorithm(Protocol):
    """PyTorchRL's algorithm as the buffers read it: ``gamma``; optional ``gamma_intrinsic``
    (the intrinsic stream) and ``num_mini_batch`` (VTraceBuffer's re-evaluation, default 1)."""

    gamma: float
