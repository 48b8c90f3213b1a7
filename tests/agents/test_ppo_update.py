""":func:`rlstore.agents.ppo_update.ppo_update` against a hand-written CleanRL-style twin on a
fixed rollout: the same minibatches (a copy of the buffer draws the same shuffles), the loss
written out from the formulas (Categorical log-probs and entropy from the logits, advantages
normalized per minibatch with the population std, clipped surrogate, clipped value loss,
entropy bonus), global grad-norm clip, Adam, the approx-KL early stop after an epoch."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from rlstore.agents.networks import FCAgent
from rlstore.agents.ppo import (
    EnvironmentConfig,
    OnlineTrainConfig,
    RolloutState,
    RunConfig,
    build_learner,
    make_vector_env,
    ppo_update,
    run_rollout,
)
from rlstore.agents.ppo_config import train_config_from_parts


def _twin(agent: FCAgent, buffer, oc: OnlineTrainConfig, opt: torch.optim.Optimizer) -> int:
    eps = oc.clip_coef
    for epoch in range(oc.update_epochs):
        for mb in buffer.minibatches(num_minibatches=oc.num_minibatches, num_epochs=1):
            logits = agent.actor(mb.obs)
            value = agent.critic(mb.obs).squeeze(-1)
            logsm = torch.log_softmax(logits, -1)
            logp = logsm.gather(-1, mb.actions.long()[:, None]).squeeze(-1)
            entropy = -(logsm.exp() * logsm).sum(-1)
            a = mb.advantages
            a = (a - a.mean()) / (a.std(unbiased=False) + 1e-8)
            logratio = logp - mb.logprobs
            ratio = logratio.exp()
            pg = torch.max(-a * ratio, -a * ratio.clamp(1 - eps, 1 + eps)).mean()
            v_clip = mb.values + (value - mb.values).clamp(-eps, eps)
            v_loss = 0.5 * torch.max((value - mb.returns) ** 2, (v_clip - mb.returns) ** 2).mean()
            loss = pg - oc.ent_coef * entropy.mean() + oc.vf_coef * v_loss
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), oc.max_grad_norm)
            opt.step()
            approx_kl = ((ratio - 1) - logratio).mean()
        if oc.target_kl is not None and approx_kl > oc.target_kl:
            return epoch + 1
    return oc.update_epochs


@pytest.mark.parametrize("target_kl", [None, 1e-4])
def test_ppo_update_equals_a_hand_written_twin(target_kl: float | None) -> None:
    oc = OnlineTrainConfig(num_envs=2, num_steps=32, num_minibatches=4, update_epochs=3,
                           learning_rate=3e-3, max_grad_norm=0.3, target_kl=target_kl)  # fmt: skip
    cfg = train_config_from_parts(RunConfig(track=False, seed=0), oc,
                                  EnvironmentConfig(env_id="CartPole-v1"), None)  # fmt: skip
    envs = make_vector_env(cfg.environment, 2)
    agent, optimizer, scheduler, buffer = build_learner(cfg, envs)
    run_rollout(agent, buffer, oc.num_steps, envs, RolloutState.start(agent, envs, 0))
    envs.close()
    twin, twin_buffer = copy.deepcopy(agent), copy.deepcopy(buffer)
    twin_opt = torch.optim.Adam(twin.parameters(), lr=3e-3, eps=oc.adam_eps)
    epochs = _twin(twin, twin_buffer, oc, twin_opt)
    stats = ppo_update(agent, buffer, oc, optimizer, scheduler)
    assert stats["epochs"] == epochs and stats["lr"] == 3e-3
    assert (epochs < 3) == (target_kl is not None)  # the early stop is exercised
    for (name, p), q in zip(agent.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=name)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(3e-3 * (1 - 1 / oc.num_updates))
