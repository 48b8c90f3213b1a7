"""Training targets of a stored rollout: GAE (with an optional intrinsic stream) and V-trace.

Pure functions over a :class:`~rlstore.minibatches.RolloutBatch` of ``P`` stored steps (every
field ``(P, N, ...)``, transition-aligned, see :mod:`rlstore.returns`);
:class:`rlstore.buffers.rollout.RolloutBuffer` validates its inputs, calls them and keeps the
returned tensors as its ``advantages`` / ``returns``.

``next_values[t]`` is V of the true successor of step ``t`` (docs/architecture.md):
``values[t + 1]``, ``final_values[t]`` when step ``t`` was truncated and not terminated, and the
bootstrap ``last_value`` at ``t = P - 1``.

Intrinsic stream (RND, Burda et al. 2018), enabled by an :class:`IntrinsicConfig`: intrinsic
rewards are divided by the running std of their per-env discounted sum (the caller's
:class:`rlstore.normalize.DiscountedReturnNormalizer`, no mean subtraction), the intrinsic GAE
ignores ``terminated`` / ``truncated`` (non-episodic) and bootstraps from ``int_values[t+1]``
and ``last_int_value``, and the training advantage is ``ext_coef * A_ext + int_coef * A_int``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from rlstore._checks import real_number
from rlstore._trees import as_tensor, tree_map
from rlstore.errors import ConfigError, SpecError
from rlstore.minibatches import Hidden, Obs, RolloutBatch
from rlstore.returns import gae, vtrace

__all__ = ["IntrinsicConfig", "successor_values", "gae_targets", "vtrace_targets"]

_FMAX = sys.float_info.max


@dataclass(frozen=True)
class IntrinsicConfig:
    """Settings of the RND-style intrinsic reward stream.

    Attributes:
        int_gamma: discount of the intrinsic (non-episodic) return, in [0, 1].
        ext_coef: weight of the extrinsic advantage in the combined advantage.
        int_coef: weight of the intrinsic advantage.
        int_lam: GAE lambda of the intrinsic stream (None: the buffer's ``lam``).
        normalize_rewards: divide intrinsic rewards by the running std of their discounted sum.
    """

    int_gamma: float = 0.99
    ext_coef: float = 2.0
    int_coef: float = 1.0
    int_lam: float | None = None
    normalize_rewards: bool = True

    def __post_init__(self) -> None:
        # kept as Python floats: a numpy scalar or 0-d tensor made config() unsaveable
        ranges = {"int_gamma": (0.0, 1.0), "int_lam": (0.0, 1.0)}
        for name in ("int_gamma", "ext_coef", "int_coef", "int_lam"):
            value = getattr(self, name)
            if value is None and name == "int_lam":
                continue
            low, high = ranges.get(name, (-_FMAX, _FMAX))  # finite coefs: inf made advantages inf
            expected = None if name in ranges else "a finite number"
            object.__setattr__(self, name, real_number(name, value, low, high, expected=expected))
        if not isinstance(self.normalize_rewards, bool):
            raise ConfigError(f"normalize_rewards: expected a bool, got {self.normalize_rewards!r}")


def successor_values(
    values: torch.Tensor, last_value: torch.Tensor, batch: RolloutBatch | None = None
) -> torch.Tensor:
    """``(P, N)`` V of the true successor of each step.

    Args:
        values: ``(P, N)`` float ``V(obs[t])``, t in [0, P).
        last_value: ``(N,)`` ``V(next_obs)`` after step ``P - 1``.
        batch: the rollout whose ``terminated`` / ``truncated`` / ``final_values`` (each
            ``(P, N)``) make truncated steps bootstrap from ``V(final_obs)``; None for a
            non-episodic stream (plain shift).
    """
    nxt = torch.cat([values[1:], last_value[None]], dim=0)
    if batch is not None:
        boot = batch.truncated & ~batch.terminated
        nxt = torch.where(boot, batch.final_values, nxt)
    return nxt


def gae_targets(
    batch: RolloutBatch,
    last_value: torch.Tensor,
    *,
    gamma: float,
    lam: float,
    intrinsic: IntrinsicConfig | None = None,
    last_int_value: torch.Tensor | None = None,
    int_reward_normalizer: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """GAE advantages and TD(lambda) returns of ``batch`` (:func:`rlstore.returns.gae`).

    Args:
        batch: ``P`` stored steps of ``N`` envs.
        last_value: ``(N,)`` float32 bootstrap ``V(next_obs)`` (ignored where the last step
            terminated, replaced by ``final_values`` where it was truncated).
        gamma, lam: discount and GAE lambda of the extrinsic stream, in [0, 1].
        intrinsic: settings of the intrinsic stream, or None (then ``batch.int_rewards`` /
            ``batch.int_values`` are not read).
        last_int_value: ``(N,)`` intrinsic ``V_int(next_obs)``; required with ``intrinsic``.
        int_reward_normalizer: called once on the ``(P, N)`` intrinsic rewards when
            ``intrinsic.normalize_rewards`` (stateful: it updates its running statistics).

    Returns:
        ``{"advantages", "returns"}`` each ``(P, N)`` float32; with ``intrinsic`` also
        ``"int_advantages"`` / ``"int_returns"``, and ``"advantages"`` is the combined
        ``ext_coef * A_ext + int_coef * A_int``.
    """
    v, term, trunc = batch.values, batch.terminated, batch.truncated
    nv = successor_values(v, last_value, batch)
    adv, ret = gae(batch.rewards, v, nv, term, trunc, gamma=gamma, lam=lam)
    results = {"advantages": adv, "returns": ret}
    if intrinsic is None:
        return results
    if last_int_value is None or batch.int_values is None or batch.int_rewards is None:
        raise SpecError("last_int_value: expected (N,) V_int(next_obs) with an intrinsic stream")
    iv, ir = batch.int_values, batch.int_rewards
    if intrinsic.normalize_rewards and int_reward_normalizer is not None:
        ir = int_reward_normalizer(ir)  # RND: divide by the running std of the discounted sum
    never = torch.zeros_like(term)  # non-episodic: no termination, no trace cut
    lam_i = lam if intrinsic.int_lam is None else intrinsic.int_lam
    nv_i = successor_values(iv, last_int_value)
    int_adv, int_ret = gae(ir, iv, nv_i, never, never, gamma=intrinsic.int_gamma, lam=lam_i)
    return results | {
        "int_advantages": int_adv,
        "int_returns": int_ret,
        "advantages": intrinsic.ext_coef * adv + intrinsic.int_coef * int_adv,
    }


def _evaluated(out: Any, shape: tuple[int, int], device: torch.device) -> list[torch.Tensor]:
    """The ``(target_logp, values)`` returned by ``evaluate``, checked: ``shape``, finite."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise SpecError(f"evaluate: expected (target_logp, values), got {type(out).__name__}")
    checked = []
    for name, x in zip(("target_logp", "values"), out, strict=True):
        t = as_tensor(f"evaluate: {name}", x, device).float()
        if tuple(t.shape) != shape:
            raise SpecError(f"evaluate: {name} expected shape {shape}, got {tuple(t.shape)}")
        if not bool(torch.isfinite(t).all()):
            raise SpecError(f"evaluate: {name} expected finite values, got NaN/inf")
        checked.append(t)
    return checked


def vtrace_targets(
    batch: RolloutBatch,
    evaluate: Callable[[Obs, torch.Tensor, Hidden | None], tuple[Any, Any]],
    last_value: torch.Tensor,
    *,
    gamma: float,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
) -> dict[str, torch.Tensor]:
    """V-trace targets (IMPALA section 4) of ``batch`` under the learner's current networks.

    Every value comes from the current critic: ``V(obs[t])`` from ``evaluate`` on the stored
    steps, and ``V(final_obs)`` of truncated-and-not-terminated steps from a second call of
    ``evaluate`` on their stored final observations, shaped ``(K, 1, ...)`` (K such steps, one
    column), with the actions and hidden states stored for those steps (the recurrent state
    *after* a step is not stored; the one before it is passed). Its ``target_logp`` output is
    not used. The rollout-time ``final_values`` are not used.

    Args:
        batch: ``P`` stored steps of ``N`` envs; ``logprobs`` are the behaviour log-probs;
            ``final_obs`` must be given (``final_obs_given``) for every truncated-and-not-
            terminated step.
        evaluate: ``evaluate(obs, actions, hidden)`` -> ``(target_logp, values)``, each
            ``(P, N)`` (``(K, 1)`` for the final observations), run under ``torch.no_grad()``.
        last_value: ``(N,)`` float32 current-critic ``V(next_obs)`` after step ``P - 1``.
        gamma: discount in [0, 1]; lam: trace lambda (IMPALA uses 1.0).
        rho_bar, c_bar, pg_rho_bar: importance-weight clipping thresholds
            (:func:`rlstore.returns.vtrace`).

    Returns:
        ``{"advantages": pg_advantages, "returns": vs}``, each ``(P, N)``.

    Raises:
        SpecError: a truncated step has no stored ``final_obs`` (checked before ``evaluate`` is
            called), or ``evaluate`` returned something other than two finite arrays of the
            expected shape.
    """
    P, N = batch.num_steps, batch.num_envs
    device = batch.rewards.device
    boot = batch.truncated & ~batch.terminated
    given = batch.final_obs_given
    if bool(boot.any()):
        lacking = boot if given is None or batch.final_obs is None else boot & ~given
        if bool(lacking.any()):
            where = torch.nonzero(lacking).tolist()[:5]
            raise SpecError(
                "final_obs: compute_vtrace re-evaluates V(final_obs) of truncated steps with the "
                f"current critic, but steps (t, env) {where} were truncated without "
                "add(..., final_obs=...); pass final_obs when adding truncated steps"
            )
    with torch.no_grad():
        tl, v = _evaluated(evaluate(batch.obs, batch.actions, batch.hidden), (P, N), device)
        final_values = torch.zeros_like(v)
        if bool(boot.any()):
            idx = torch.nonzero(boot, as_tuple=True)
            K = int(idx[0].numel())
            fo = tree_map(lambda x: x[idx][:, None], batch.final_obs)
            acts = batch.actions[idx][:, None]
            hid = (
                None if batch.hidden is None else tree_map(lambda h: h[idx][:, None], batch.hidden)
            )
            _, fv = _evaluated(evaluate(fo, acts, hid), (K, 1), device)
            final_values[idx] = fv[:, 0]
    nv = successor_values(v, last_value, replace(batch, final_values=final_values))
    vs, pg = vtrace(
        batch.logprobs,
        tl,
        batch.rewards,
        v,
        nv,
        batch.terminated,
        batch.truncated,
        gamma=gamma,
        lam=lam,
        rho_bar=rho_bar,
        c_bar=c_bar,
        pg_rho_bar=pg_rho_bar,
    )
    return {"advantages": pg, "returns": vs}
