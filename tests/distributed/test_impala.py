"""IMPALA learner step (no Ray): the V-trace targets of a constructed fragment pair against the
reference estimator, and the loss of the first gradient step against a hand-written one."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstore.agents.impala import ImpalaConfig, ImpalaPolicy, ImpalaTrainConfig, vtrace_update
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError
from rlstore.returns.reference import vtrace_reference

T, N = 6, 2


def _fragment(rng: np.random.Generator, obs_dim: int = 4) -> dict:
    obs = rng.normal(size=(T, N, obs_dim)).astype(np.float32)
    nxt = np.concatenate([obs[1:], rng.normal(size=(1, N, obs_dim)).astype(np.float32)])
    term = np.zeros((T, N), bool)
    trunc = np.zeros((T, N), bool)
    term[2, 0] = True  # episode ends inside the fragment: successor is a final observation
    trunc[3, 1] = True  # time limit: bootstraps from V(final obs)
    nxt[2, 0] = rng.normal(size=obs_dim)
    nxt[3, 1] = rng.normal(size=obs_dim)
    return {
        "obs": obs,
        "action": rng.integers(0, 2, size=(T, N)),
        "reward": rng.normal(size=(T, N)).astype(np.float32),
        "next_obs": nxt,
        "terminated": term,
        "truncated": trunc,
        "logp": np.log(rng.uniform(0.2, 0.8, size=(T, N))).astype(np.float32),
        "last_obs": nxt[-1].copy(),
        "version": 0,
    }


def test_vtrace_update_matches_the_reference_estimator() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    envs = gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync")
    agent = ImpalaPolicy(0, envs, hidden_size=8).agent
    envs.close()
    frags = [_fragment(rng), _fragment(rng)]
    ic = ImpalaConfig(gamma=0.9, rho_bar=1.0, c_bar=0.8, pg_rho_bar=1.5, vtrace_lambda=0.95,
                      ent_coef=0.01, vf_coef=0.5)  # fmt: skip
    cat = {k: np.concatenate([f[k] for f in frags], axis=1) for k in frags[0] if k != "version"}
    cat["last_obs"] = np.concatenate([f["last_obs"] for f in frags])
    with torch.no_grad():  # the reference: the pre-update networks, next values by hand
        x = torch.as_tensor(cat["obs"])
        logits, values = agent.actor(x), agent.critic(x).squeeze(-1)
        dist = torch.distributions.Categorical(logits=logits)
        target_logp = dist.log_prob(torch.as_tensor(cat["action"])).numpy()
        v = values.numpy()
        v_next_obs = agent.critic(torch.as_tensor(cat["next_obs"])).squeeze(-1).numpy()
        v_last = agent.critic(torch.as_tensor(cat["last_obs"])).squeeze(-1).numpy()
        entropy = dist.entropy().mean().item()
    nv = np.concatenate([v[1:], v_last[None]])
    nv[cat["truncated"]] = v_next_obs[cat["truncated"]]  # V(final obs), not V(reset obs)
    vs, pg = vtrace_reference(
        cat["logp"], target_logp, cat["reward"], v, nv, cat["terminated"], cat["truncated"],
        gamma=0.9, lam=0.95, rho_bar=1.0, c_bar=0.8, pg_rho_bar=1.5,
    )  # fmt: skip
    optimizer = torch.optim.SGD(agent.parameters(), lr=0.1)
    buffer = RolloutBuffer(T, 2 * N, gamma=0.9, advantage_normalization="none")
    before = [p.detach().clone() for p in agent.parameters()]
    row = vtrace_update(agent, optimizer, buffer, frags, ic)
    got = buffer.get()
    np.testing.assert_allclose(got.returns.numpy(), vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.advantages.numpy(), pg, rtol=1e-5, atol=1e-5)
    # the first (only) gradient step's losses, from the pre-update networks
    pg_loss = -(pg * target_logp).mean()
    v_loss = 0.5 * ((vs - v) ** 2).mean()
    assert row["pg_loss"] == pytest.approx(pg_loss, rel=1e-4, abs=1e-6)
    assert row["v_loss"] == pytest.approx(v_loss, rel=1e-4, abs=1e-6)
    assert row["entropy"] == pytest.approx(entropy, rel=1e-5)
    assert row["loss"] == pytest.approx(pg_loss + 0.5 * v_loss - 0.01 * entropy, rel=1e-4)
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.parameters(), strict=True))


def test_impala_policy_records_behaviour_logp_and_version() -> None:
    envs = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    policy = ImpalaPolicy(0, envs, hidden_size=8)
    obs, _ = envs.reset(seed=0)
    envs.close()
    action, extra = policy.act(obs)
    with torch.no_grad():
        logits = policy.agent.actor(torch.as_tensor(obs))
    expected = torch.distributions.Categorical(logits=logits).log_prob(torch.as_tensor(action))
    np.testing.assert_allclose(extra["logp"], expected.numpy(), rtol=1e-6)
    out = policy.finish({"obs": obs[None]}, obs)
    assert out["version"] == -1 and out["last_obs"].shape == obs.shape


def test_num_minibatches_must_divide_a_batch_before_the_run_starts() -> None:
    # 16 * 2 * 3 = 96 steps per batch: 5 minibatches refused at config time (it was the first
    # update's error, after Ray and the collectors had started)
    base = {"fragment_length": 16, "fragments_per_batch": 2, "num_envs": 3}
    assert ImpalaTrainConfig.from_dict({"impala": {**base, "num_minibatches": 6}})
    with pytest.raises(ConfigError, match=r"impala.num_minibatches: expected a divisor of the 96"):
        ImpalaTrainConfig.from_dict({"impala": {**base, "num_minibatches": 5}})
