"""Ape-X pieces without Ray: per-collector exploration rates and initial priorities."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstore.agents.apex import (
    ApexConfig,
    ApexPolicy,
    ApexTrainConfig,
    collector_epsilon,
    initial_priorities,
    make_replay,
)
from rlstore.errors import ConfigError


def test_collector_epsilons_follow_apex() -> None:
    # eps_i = 0.4 ** (1 + 7 i / (K - 1)): K = 8 gives 0.4, 0.4**2, ..., 0.4**8
    eps = [collector_epsilon(i, 8, 0.4, 7.0) for i in range(8)]
    np.testing.assert_allclose(eps, 0.4 ** np.arange(1, 9), rtol=1e-12)
    assert collector_epsilon(0, 1, 0.4, 7.0) == pytest.approx(0.4)  # one collector: eps_base
    assert collector_epsilon(1, 2, 0.4, 7.0) == pytest.approx(0.4**8)


def _loop_priorities(agent, frag, n, gamma) -> np.ndarray:
    """|G - Q(s, a)| by plain loops: the window stops at an episode end or the fragment end,
    bootstraps with gamma**m * Q_target(s', argmax Q(s', .)) unless the episode terminated."""
    T, N = frag["reward"].shape
    out = np.zeros((T, N))
    with torch.no_grad():
        for e in range(N):
            for t in range(T):
                g, m = 0.0, 0
                for k in range(n):
                    j = t + k
                    if j >= T:
                        break
                    g += gamma**k * frag["reward"][j, e]
                    m = k + 1
                    if frag["terminated"][j, e] or frag["truncated"][j, e]:
                        break
                last = t + m - 1
                if not frag["terminated"][last, e]:
                    s2 = torch.as_tensor(frag["next_obs"][last, e])[None]
                    a2 = agent.q(s2).argmax(1)
                    g += gamma**m * float(agent.target(s2)[0, a2])
                s = torch.as_tensor(frag["obs"][t, e])[None]
                q = float(agent.q(s)[0, frag["action"][t, e]])
                out[t, e] = abs(g - q)
    return out


def test_initial_priorities_are_nstep_td_errors() -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    envs = gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync")
    ac = ApexConfig(hidden_sizes=[16], n_step=3, gamma=0.9, num_collectors=4)
    policy = ApexPolicy(3, envs, ac)
    envs.close()
    with torch.no_grad():  # a target net unlike the online one
        for p in policy.agent.target.parameters():
            p.add_(0.1 * torch.randn_like(p))
    T, N = 7, 3
    term, trunc = np.zeros((T, N), bool), np.zeros((T, N), bool)
    term[2, 0], trunc[4, 1], term[6, 2] = True, True, True
    frag = {
        "obs": rng.normal(size=(T, N, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(T, N, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size=(T, N)),
        "reward": rng.normal(size=(T, N)).astype(np.float32),
        "terminated": term,
        "truncated": trunc,
    }
    got = policy.finish(frag, frag["next_obs"][-1])["priorities"]
    assert got.shape == (T, N)
    np.testing.assert_allclose(got, _loop_priorities(policy.agent, frag, 3, 0.9), rtol=1e-5,
                               atol=1e-5)  # fmt: skip
    np.testing.assert_allclose(got, initial_priorities(policy.agent, frag, ac))
    assert policy.epsilon == pytest.approx(0.4**8)


def test_learning_starts_beyond_the_replay_capacity_is_refused() -> None:
    # 2 shards of 1001 // 2 = 500 transitions: the learner would wait for 1001 forever
    base = {"buffer_size": 1001, "num_shards": 2, "batch_size": 32}
    assert ApexTrainConfig.from_dict({"apex": {**base, "learning_starts": 1000}})
    with pytest.raises(ConfigError, match=r"apex.learning_starts: expected <= the replay's 1000"):
        ApexTrainConfig.from_dict({"apex": {**base, "learning_starts": 1001}})
    assert make_replay(ApexConfig(**base), 0, 1).buffer.capacity == 500
