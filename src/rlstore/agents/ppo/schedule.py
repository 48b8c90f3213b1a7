"""Linear learning-rate decay for PPO (DecisionTransformerInterpretability's ``PPOScheduler``)."""

from __future__ import annotations

from typing import Any

import torch

from rlstore.errors import ConfigError

__all__ = ["PPOScheduler"]


class PPOScheduler:
    """Linear learning-rate decay attached to an optimizer.

    The optimizer's learning rate is ``initial_lr`` before the first :meth:`step`; after ``k``
    calls it is ``initial_lr - (initial_lr - end_lr) * min(k, num_updates) / num_updates``, so it
    reaches ``end_lr`` after ``num_updates`` calls and stays there. Call :meth:`step` once after
    each PPO update, so update ``u`` (0-based) trains with ``lr(u)``.

    Args:
        optimizer: the optimizer whose param groups get the learning rate.
        initial_lr: learning rate of the first update, > 0.
        end_lr: learning rate after ``num_updates`` steps, >= 0.
        num_updates: number of steps of the decay, >= 1.

    Example::

        >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        >>> s = PPOScheduler(opt, 1.0, 0.0, 4); s.step(); opt.param_groups[0]["lr"]
        0.75
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, initial_lr: float, end_lr: float, num_updates: int
    ) -> None:
        if not initial_lr > 0:
            raise ConfigError(f"initial_lr: expected > 0, got {initial_lr}")
        if not end_lr >= 0:
            raise ConfigError(f"end_lr: expected >= 0, got {end_lr}")
        if isinstance(num_updates, bool) or not isinstance(num_updates, int) or num_updates < 1:
            raise ConfigError(f"num_updates: expected an int >= 1, got {num_updates!r}")
        self.optimizer = optimizer
        self.initial_lr = float(initial_lr)
        self.end_lr = float(end_lr)
        self.num_updates = num_updates
        self.n_step_calls = 0
        self._apply()

    @property
    def lr(self) -> float:
        """The learning rate the next update uses."""
        frac = min(self.n_step_calls, self.num_updates) / self.num_updates
        return self.initial_lr - (self.initial_lr - self.end_lr) * frac

    def _apply(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr

    def step(self) -> None:
        """Advance the decay by one update and write the new rate into the optimizer."""
        self.n_step_calls += 1
        self._apply()

    def replan(self, num_updates: int) -> None:
        """Define the decay over ``num_updates`` updates in all (a run whose budget is extended
        on resume): the next update uses ``lr(n_step_calls)`` of the new plan, so the rate
        continues as if the run had been planned with the new budget from the start."""
        if isinstance(num_updates, bool) or not isinstance(num_updates, int) or num_updates < 1:
            raise ConfigError(f"num_updates: expected an int >= 1, got {num_updates!r}")
        self.num_updates = num_updates
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: the settings and the number of steps taken."""
        return {
            "initial_lr": self.initial_lr,
            "end_lr": self.end_lr,
            "num_updates": self.num_updates,
            "n_step_calls": self.n_step_calls,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output and re-apply the learning rate."""
        self.initial_lr = float(state["initial_lr"])
        self.end_lr = float(state["end_lr"])
        self.num_updates = int(state["num_updates"])
        self.n_step_calls = int(state["n_step_calls"])
        self._apply()
