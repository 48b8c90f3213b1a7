"""PPO's update, apart from its training loop (:mod:`rlstore.agents.ppo`): the learning-rate
schedule :class:`PPOScheduler`, the clipped loss :func:`ppo_loss` (Schulman et al. 2017;
CleanRL's ``ppo.py``) and :func:`ppo_update`, epochs of an agent's minibatches through it.
PPO+D and the seed-004 facade train with the same update. Users import these names from
:mod:`rlstore.agents.ppo`, which re-exports them.
"""

from __future__ import annotations

import math
import sys
from typing import Any, NamedTuple

import torch
from torch import nn

from rlstore._checks import check_count, real_number
from rlstore.agents.networks import PPOAgent
from rlstore.agents.ppo_config import OnlineTrainConfig
from rlstore.errors import ConfigError, SpecError
from rlstore.returns import normalize_advantages

__all__ = ["PPOScheduler", "PPOLoss", "ppo_loss", "ppo_update"]

_MAX = sys.float_info.max


# ----------------------------------------------------------------- learning-rate schedule


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
        # finite reals, no bools (True was a rate of 1.0, inf an inf rate)
        lr0 = real_number(
            "initial_lr", initial_lr, math.ulp(0.0), _MAX, expected="a finite number > 0"
        )
        lr1 = real_number("end_lr", end_lr, 0.0, _MAX, expected="a finite number >= 0")
        self.num_updates = check_count("num_updates", num_updates, error=ConfigError)
        self.optimizer = optimizer
        self.initial_lr, self.end_lr = lr0, lr1
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
        self.num_updates = check_count("num_updates", num_updates, error=ConfigError)
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


# ----------------------------------------------------------------- the clipped loss
#
# Contract (all inputs are 1-D float tensors of the same length B, one entry per transition of a
# minibatch; ``mask`` marks real entries of padded recurrent minibatches):
#
# * ratio ``r = exp(new_logprob - old_logprob)``
# * advantages are normalized per minibatch when ``norm_adv`` by the library's
#   :func:`rlstore.returns.normalize_advantages`: ``(A - mean) / (std + 1e-8)`` with the
#   population std (ddof=0) over the masked entries (padded entries become 0; they are masked
#   out of every mean anyway); skipped when the mask selects no entry.
# * policy loss ``pg = mean(max(-A r, -A clip(r, 1-eps, 1+eps)))``
# * value loss, clipped: ``0.5 mean(max((v - R)^2, (v_old + clip(v - v_old, -eps, eps) - R)^2))``,
#   unclipped: ``0.5 mean((v - R)^2)``
# * total ``pg - ent_coef * mean(entropy) + vf_coef * v_loss`` (with ``ent_coef == 0`` the
#   entropy term is left out of the graph: same value, the backward pass skips the entropy branch)
# * diagnostics: ``approx_kl = mean((r - 1) - log r)`` (k3), ``old_approx_kl = mean(-log r)``,
#   ``clipfrac = mean(|r - 1| > eps)``; all means are over the masked entries.

ADV_EPS = 1e-8


class PPOLoss(NamedTuple):
    """Output of :func:`ppo_loss`: the differentiable total and its parts (0-d tensors)."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    v_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    old_approx_kl: torch.Tensor
    clipfrac: torch.Tensor


def _check(name: str, t: torch.Tensor, n: int) -> None:
    if not isinstance(t, torch.Tensor) or t.ndim != 1 or t.shape[0] != n:
        got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise SpecError(
            f"{name}: expected a 1-D tensor of shape ({n},) like new_logprob, got {got}"
        )


def _masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_coef: float = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
    clip_vloss: bool = True,
    norm_adv: bool = True,
    mask: torch.Tensor | None = None,
) -> PPOLoss:
    """PPO loss of one minibatch (the contract above).

    Args:
        new_logprob: ``(B,)`` log pi_theta(a|s) under the current parameters (differentiable).
        old_logprob: ``(B,)`` log-probabilities recorded at rollout time.
        advantages: ``(B,)`` GAE advantages (un-normalized; normalized here if ``norm_adv``).
        new_values: ``(B,)`` V_theta(s) (differentiable).
        old_values: ``(B,)`` values recorded at rollout time.
        returns: ``(B,)`` value targets ``A + V_old``.
        entropy: ``(B,)`` policy entropy at each state (differentiable).
        clip_coef: ratio clip epsilon (also the value clip range).
        vf_coef: value loss weight. ent_coef: entropy bonus weight.
        clip_vloss: clip the value loss. norm_adv: normalize advantages per minibatch
            (:func:`rlstore.returns.normalize_advantages`, population std, over the mask).
        mask: optional ``(B,)`` 0/1 tensor; means run over entries with mask 1.

    Returns:
        :class:`PPOLoss`; ``loss`` is what to backpropagate, the diagnostics are 0-d tensors.
    """
    n = new_logprob.shape[0] if isinstance(new_logprob, torch.Tensor) else -1
    for name, t in (
        ("new_logprob", new_logprob),
        ("old_logprob", old_logprob),
        ("advantages", advantages),
        ("new_values", new_values),
        ("old_values", old_values),
        ("returns", returns),
        ("entropy", entropy),
    ):
        _check(name, t, n)
    coef = "a finite number >= 0"
    clip_coef = real_number("clip_coef", clip_coef, 0.0, _MAX, expected=coef)
    vf_coef = real_number("vf_coef", vf_coef, 0.0, _MAX, expected=coef)
    ent_coef = real_number("ent_coef", ent_coef, 0.0, _MAX, expected=coef)
    m = None
    if mask is not None:
        _check("mask", mask, n)
        m = mask.to(new_logprob.dtype)
        if not bool(((m == 0) | (m == 1)).all()):
            raise SpecError(f"mask: expected 0/1 entries, got values {m.unique().tolist()[:8]}")
    if norm_adv and (m is None or bool(m.any())):
        advantages = normalize_advantages(advantages, mask=m, eps=ADV_EPS)
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    neg_adv = -advantages
    pg_loss = _masked_mean(
        torch.max(neg_adv * ratio, neg_adv * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)),
        m,
    )
    v_unclipped = (new_values - returns) ** 2
    if clip_vloss:
        v_clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
        v_loss = 0.5 * _masked_mean(torch.max(v_unclipped, (v_clipped - returns) ** 2), m)
    else:
        v_loss = 0.5 * _masked_mean(v_unclipped, m)
    ent = _masked_mean(entropy, m)
    if ent_coef == 0.0:
        # pg - 0 * ent == pg exactly and the entropy branch would only add exact zeros to the
        # gradient: keep it out of ``loss`` so backward skips it (``ent`` stays differentiable)
        loss = pg_loss + vf_coef * v_loss
    else:
        loss = pg_loss - ent_coef * ent + vf_coef * v_loss
    # diagnostics on detached tensors (no graph, no grad-mode switch)
    lr_d, r1 = logratio.detach(), ratio.detach() - 1.0
    approx_kl = _masked_mean(r1 - lr_d, m)
    old_approx_kl = _masked_mean(-lr_d, m)
    clipfrac = _masked_mean((r1.abs() > clip_coef).to(ratio.dtype), m)
    return PPOLoss(loss, pg_loss, v_loss, ent, approx_kl, old_approx_kl, clipfrac)


# ----------------------------------------------------------------- the update


def ppo_update(
    agent: PPOAgent,
    memory: Any,
    args: OnlineTrainConfig,
    optimizer: torch.optim.Optimizer,
    scheduler: PPOScheduler | None,
) -> dict[str, float]:
    """One PPO update of ``agent`` on the rollout in ``memory`` (returns already computed).

    ``args.update_epochs`` epochs of the agent's minibatches (``agent.minibatches``: flat
    shuffled steps, or sequences for the recurrent agents); per minibatch the clipped loss of
    :func:`ppo_loss` on ``agent._evaluate``'s outputs, backprop, global grad-norm clip at
    ``args.max_grad_norm``, Adam step. An epoch that ends with approx-KL above
    ``args.target_kl`` stops the update. With ``args.anneal_clip`` the clip range of update
    ``u`` (``u = scheduler.n_step_calls``) is ``clip_coef * (1 - u / num_updates)``. The
    scheduler steps once at the end.

    Returns:
        Means over the minibatches of ``loss, pg_loss, v_loss, entropy, approx_kl,
        old_approx_kl, clipfrac`` plus ``explained_variance``, ``lr`` and ``clip_coef`` (used),
        ``epochs`` (run) and ``grad_steps``.
    """
    sums: dict[str, float] = {}
    clip = args.clip_coef
    if args.anneal_clip and scheduler is not None:
        clip *= 1.0 - min(scheduler.n_step_calls, scheduler.num_updates) / scheduler.num_updates
    grad_steps, epochs_run = 0, 0
    lr = float(optimizer.param_groups[0]["lr"])
    for _epoch in range(args.update_epochs):
        epochs_run += 1
        for mb in agent.minibatches(memory, args):
            params, new_values, mask = agent._evaluate(mb)
            dist = agent.distribution(params)
            out = ppo_loss(
                _flat(dist.log_prob(mb.actions)),
                _flat(mb.logprobs),
                _flat(mb.advantages),
                _flat(new_values),
                _flat(mb.values),
                _flat(mb.returns),
                _flat(dist.entropy()),
                clip_coef=clip,
                vf_coef=args.vf_coef,
                ent_coef=args.ent_coef,
                clip_vloss=args.clip_vloss,
                norm_adv=args.norm_adv,
                mask=None if mask is None else _flat(mask).to(torch.float32),
            )
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            grad_steps += 1
            for k, v in out._asdict().items():
                sums[k] = sums.get(k, 0.0) + float(v.detach())
        if args.target_kl is not None and float(out.approx_kl) > args.target_kl:
            break
    if scheduler is not None:
        scheduler.step()
    stats = {k: v / max(grad_steps, 1) for k, v in sums.items()}
    stats.update(lr=lr, clip_coef=clip, epochs=float(epochs_run), grad_steps=float(grad_steps))
    stats["explained_variance"] = _explained_variance(memory)
    return stats


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1)


def _explained_variance(memory: Any) -> float:
    batch = memory.get() if hasattr(memory, "get") else None
    if batch is None or batch.returns is None:
        return float("nan")
    y, v = batch.returns.reshape(-1), batch.values.reshape(-1)
    var_y = float(y.var()) if y.numel() > 1 else 0.0
    return float("nan") if var_y == 0 else 1.0 - float((y - v).var()) / var_y
