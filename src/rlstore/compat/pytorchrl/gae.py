"""PyTorchRL's storage with GAE(gamma, lambda) returns: GAEBuffer."""

from __future__ import annotations

from typing import Any

import torch

from rlstore._checks import real_number
from rlstore.compat.pytorchrl.protocols import Actor, Algorithm
from rlstore.compat.pytorchrl.vanilla import VanillaOnPolicyBuffer

__all__ = ["GAEBuffer"]


class GAEBuffer(VanillaOnPolicyBuffer):
    """PyTorchRL's ``GAEBuffer``: GAE(gamma, lambda) returns, via rlstore.returns.gae.

    ``ExternalReturn = A + Value`` (the TD(lambda) target) with
    ``delta_t = r_t + gamma*(1 - term_t)*next_value_t - V_t`` and
    ``A_t = delta_t + gamma*lambda*(1 - done_t)*A_{t+1}`` in layout A (see the module doc for the
    layout-C conversion and the truncation channel). Everything else as in
    :class:`VanillaOnPolicyBuffer`.

    Args:
        size, device, actor, algorithm, envs: as in :class:`VanillaOnPolicyBuffer`.
        gae_lambda: GAE lambda in [0, 1].
    """

    def __init__(
        self,
        size: int,
        device: str | torch.device,
        actor: Actor,
        algorithm: Algorithm,
        envs: Any,
        gae_lambda: float = 0.95,
    ) -> None:
        self.gae_lambda = real_number("gae_lambda", gae_lambda, 0.0, 1.0)  # no bools, strings
        super().__init__(size, device, actor, algorithm, envs)

    @property
    def _lam(self) -> float:  # type: ignore[override]
        return self.gae_lambda
