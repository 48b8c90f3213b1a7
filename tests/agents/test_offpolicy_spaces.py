"""Unusual action spaces. DQN, Ape-X and IMPALA on ``Discrete(n, start != 0)``: the env gets
``start + index``, the networks and the losses work on the index. SAC on Box bounds other than
``[-1, 1]``: its losses are Stable-Baselines3's, in actions rescaled to ``[-1, 1]``."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from _helpers import register_test_env

from rlstore.agents.apex import ApexConfig, ApexPolicy, _batch, initial_priorities
from rlstore.agents.dqn import DQNTrainConfig, train_dqn
from rlstore.agents.impala import ImpalaConfig, ImpalaPolicy, vtrace_update
from rlstore.agents.sac import (
    SACAgent,
    SACConfig,
    SACTrainConfig,
    make_optimizers,
    sac_update,
    train_sac,
)
from rlstore.buffers.replay import ReplayBatch
from rlstore.buffers.rollout import RolloutBuffer

START = -1


class StartEnv(gym.Env[np.ndarray, np.int64]):
    """Actions ``Discrete(3, start=-1)``, checked; reward (a Python int) 1 for action 1, else 0;
    obs = [t / 10, 0]; truncated after 10 steps by the registration's time limit."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(3, start=START)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, int, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} outside {self.action_space}")
        self.t += 1
        return np.array([self.t / 10, 0.0], np.float32), int(action == 1), False, False, {}


START_ID = register_test_env("rlstore-test/DiscreteStart-v0", StartEnv, max_episode_steps=10)


def test_dqn_steps_the_env_with_start_plus_index_and_stores_the_index() -> None:
    cfg = DQNTrainConfig.from_dict({
        "run": {"seed": 0, "track": False, "eval_interval": 200, "eval_episodes": 1},
        "environment": {"env_id": START_ID},
        "dqn": {"total_timesteps": 400, "learning_starts": 100, "train_freq": 4,
                "gradient_steps": 1, "batch_size": 8, "buffer_size": 500, "hidden_sizes": [8]},
    })  # fmt: skip
    agent, stats = train_dqn(cfg)  # the env refuses actions outside Discrete(3, start=-1)
    assert len(stats.evaluations) == 2 and len(stats.episode_returns) == 40
    obs = torch.zeros(5, 2)
    q = agent(obs)
    assert int(agent.act(obs[0].numpy())) == int(q[0].argmax()) + START
    actions, _ = agent.predict(obs, None, train_mode=False)  # velora's warm steps envs with them
    assert torch.equal(actions, q.argmax(1) + START)


def _vec(n: int, start: int) -> SimpleNamespace:
    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    return SimpleNamespace(single_observation_space=box,
                           single_action_space=gym.spaces.Discrete(n, start=start))  # fmt: skip


def _fragment(rng: np.random.Generator, T: int, N: int, n: int) -> dict[str, Any]:
    term, trunc = np.zeros((T, N), bool), np.zeros((T, N), bool)
    term[2, 0], trunc[4, 1] = True, True
    return {
        "obs": rng.normal(size=(T, N, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(T, N, 4)).astype(np.float32),
        "action": rng.integers(0, n, size=(T, N)),
        "reward": rng.normal(size=(T, N)).astype(np.float32),
        "terminated": term,
        "truncated": trunc,
        "logp": np.log(rng.uniform(0.2, 0.8, size=(T, N))).astype(np.float32),
        "last_obs": rng.normal(size=(N, 4)).astype(np.float32),
        "version": 0,
    }


def _shifted(frag: dict[str, Any], start: int) -> dict[str, Any]:
    """The same fragment as a collector of a ``start``-offset env records it (env actions)."""
    return {**frag, "action": frag["action"] + start}


@pytest.mark.parametrize("start", [-1, 5])
def test_apex_acts_in_the_env_space_and_learns_on_the_index(start: int) -> None:
    torch.manual_seed(0)
    ac = ApexConfig(hidden_sizes=[16], n_step=2, gamma=0.9, num_collectors=2, eps_base=0.5)
    ref, policy = ApexPolicy(0, _vec(3, 0), ac), ApexPolicy(0, _vec(3, start), ac)
    policy.agent.load_state_dict(ref.agent.state_dict())
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    actions, _ = policy.act(obs)
    assert set(actions.tolist()) == {start, start + 1, start + 2}
    frag = _fragment(np.random.default_rng(1), 5, 3, 3)
    np.testing.assert_array_equal(initial_priorities(policy.agent, _shifted(frag, start), ac),
                                  initial_priorities(ref.agent, frag, ac))  # fmt: skip
    shard = SimpleNamespace(obs=frag["obs"][0], action=frag["action"][0] + start,
                            reward=frag["reward"][0], next_obs=frag["next_obs"][0],
                            discount=np.ones(3), terminated=np.zeros(3, bool),
                            truncated=np.zeros(3, bool), weights=np.ones(3))  # fmt: skip
    batch = _batch(shard, torch.device("cpu"), policy.agent.action_start)
    assert torch.equal(batch.action, torch.as_tensor(frag["action"][0]))


@pytest.mark.parametrize("start", [-1, 5])
def test_impala_vtrace_update_takes_env_actions_of_a_start_offset_space(start: int) -> None:
    torch.manual_seed(0)
    ref, agent = ImpalaPolicy(0, _vec(3, 0), 8).agent, ImpalaPolicy(0, _vec(3, start), 8).agent
    agent.load_state_dict(ref.state_dict())
    rng = np.random.default_rng(0)
    frags = [_fragment(rng, 6, 2, 3), _fragment(rng, 6, 2, 3)]
    ic = ImpalaConfig(gamma=0.9, c_bar=0.8, pg_rho_bar=1.5, vtrace_lambda=0.95)
    rows = []
    for a, fs in ((ref, frags), (agent, [_shifted(f, start) for f in frags])):
        optimizer = torch.optim.SGD(a.parameters(), lr=0.1)
        rows.append(vtrace_update(a, optimizer, RolloutBuffer(6, 4, gamma=0.9), fs, ic))
    assert rows[1] == pytest.approx(rows[0], rel=1e-4, abs=1e-6)  # minibatch order: rounding
    for p, q in zip(agent.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ SAC on asymmetric bounds


def _sb3_sac_losses(
    agent: SACAgent, batch: ReplayBatch, gamma: float, low: np.ndarray, high: np.ndarray
) -> dict[str, float]:
    """Stable-Baselines3's SAC losses (alpha, critic) written out independently in float64:
    replay actions rescaled to [-1, 1], log-probs of the tanh-squashed action in [-1, 1],
    target entropy -|A|; the Gaussian noise drawn in sac_update's order (actor on obs, then on
    next_obs) from torch's global RNG."""
    lo, hi = torch.as_tensor(low).double(), torch.as_tensor(high).double()
    a = agent.actor.double()
    c, ct = agent.critic.double(), agent.critic_target.double()

    def pi(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = a(obs.double())
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean.float()).double()
        normal = torch.distributions.Normal(mean, std)
        return torch.tanh(u), (normal.log_prob(u) - torch.log(1 - torch.tanh(u) ** 2)).sum(-1)

    with torch.no_grad():
        _, logp = pi(batch.obs)  # type: ignore[arg-type]
        log_alpha = agent.log_alpha.double()
        alpha_loss = -(log_alpha * (logp + agent.target_entropy)).mean()
        assert agent.target_entropy == -float(len(low))
        next_a, next_logp = pi(batch.next_obs)  # type: ignore[arg-type]
        next_obs = batch.next_obs.double()  # type: ignore[union-attr]
        next_q = ct(next_obs, next_a).min(0).values - log_alpha.exp() * next_logp
        y = batch.reward.double() + gamma * (~batch.terminated).double() * next_q
        scaled = 2.0 * (batch.action.double() - lo) / (hi - lo) - 1.0  # SB3's scale_action
        q = c(batch.obs.double(), scaled)  # type: ignore[union-attr]
        critic_loss = 0.5 * sum(((qk - y) ** 2).mean() for qk in q)
    return {"alpha_loss": float(alpha_loss), "critic_loss": float(critic_loss),
            "entropy": float(-logp.mean())}  # fmt: skip


@pytest.mark.parametrize(("low", "high"), [([0.0], [10.0]), ([-0.05, 2.0], [0.05, 3.0])])
def test_sac_losses_match_sb3_formulas_on_bounds_other_than_unit(low: list, high: list) -> None:
    torch.manual_seed(0)
    low_, high_ = np.array(low, np.float32), np.array(high, np.float32)
    obs_space = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
    act_space = gym.spaces.Box(low_, high_, dtype=np.float32)
    cfg = SACConfig(hidden_sizes=[16, 16], init_ent_coef=0.3)
    agent = SACAgent(obs_space, act_space, cfg, "Pendulum-v1")
    with torch.no_grad():  # target critics unlike the online ones
        for p in agent.critic_target.parameters():
            p.add_(0.1 * torch.randn_like(p))
    B, A = 32, len(low)
    u = torch.rand(B, A)
    batch = ReplayBatch(
        obs=torch.randn(B, 3), action=torch.as_tensor(low_) + u * torch.as_tensor(high_ - low_),
        reward=torch.randn(B), next_obs=torch.randn(B, 3), terminated=torch.rand(B) < 0.3,
        truncated=torch.zeros(B, dtype=torch.bool), extras={}, indices=np.arange(B),
        weights=torch.ones(B),
    )  # fmt: skip
    twin = copy.deepcopy(agent)
    torch.manual_seed(1)
    got = sac_update(agent, batch, make_optimizers(agent, cfg), cfg)
    torch.manual_seed(1)
    want = _sb3_sac_losses(twin, batch, cfg.gamma, low_, high_)
    for key, value in want.items():
        assert float(got[key]) == pytest.approx(value, rel=1e-4, abs=1e-5), key


class IntObsEnv(gym.Env[np.ndarray, np.ndarray]):
    """Integer Box observations ``[t, 1]``, actions ``Box(2, 4, (1,))`` (checked), reward a
    Python int; truncated after 10 steps by the registration's time limit."""

    observation_space = gym.spaces.Box(0, 100, (2,), np.int64)
    action_space = gym.spaces.Box(2.0, 4.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0, 1]), {}

    def step(self, action: Any) -> tuple[np.ndarray, int, bool, bool, dict]:
        if not self.action_space.contains(np.asarray(action, np.float32)):
            raise ValueError(f"action {action!r} outside {self.action_space}")
        self.t += 1
        return np.array([self.t, 1]), int(action[0] > 3.0), False, False, {}


INT_OBS_ID = register_test_env("rlstore-test/SACIntObs-v0", IntObsEnv, max_episode_steps=10)


def test_sac_trains_on_integer_observations() -> None:
    cfg = SACTrainConfig.from_dict({
        "run": {"seed": 0, "track": False, "eval_interval": 100, "eval_episodes": 1},
        "environment": {"env_id": INT_OBS_ID},
        "sac": {"total_timesteps": 100, "learning_starts": 20, "batch_size": 8,
                "buffer_size": 100, "hidden_sizes": [8]},
    })  # fmt: skip
    _, stats = train_sac(cfg)  # the replay keeps int64 observations; the networks read floats
    assert stats.num_updates == 100 - 20 and len(stats.episode_returns) == 10


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sac_actions_stay_inside_bounds_where_tanh_saturates(dtype: type) -> None:
    # bias + scale * tanh(u) at tanh(u) = +-1 rounds outside [low, high] for many float bounds
    rng = np.random.default_rng(0)
    low = rng.uniform(-10, 10, size=64)
    high = low + rng.uniform(1e-3, 10, size=64)
    space = gym.spaces.Box(low.astype(dtype), high.astype(dtype), dtype=dtype)
    obs_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    agent = SACAgent(obs_space, space, SACConfig(hidden_sizes=[4]), "Pendulum-v1")
    for sign in (1.0, -1.0):
        with torch.no_grad():
            agent.actor.mean.bias.fill_(sign * 50.0)  # tanh(mean) == +-1 in float32
            agent.actor.log_std.bias.fill_(-20.0)
        for deterministic in (True, False):
            action = agent.act(np.zeros((3, 2), np.float32), deterministic=deterministic)
            assert action.dtype == dtype
            assert all(space.contains(a) for a in action), (sign, deterministic)
