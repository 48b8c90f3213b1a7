"""PPO on every action space it takes: Discrete with a start, MultiDiscrete (with starts),
Box of shape (1,) and (n,) with asymmetric bounds; envs that refuse any action outside their
space, for the FC, LSTM and Transformer agents, in training, evaluation and sampling."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstore.agents.networks import FCAgent
from rlstore.agents.ppo import (
    EnvironmentConfig,
    LSTMModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TransformerModelConfig,
    evaluate_agent,
    train_ppo,
)
from rlstore.agents.sampling import sample_from_agents
from rlstore.errors import ConfigError

SPACES: dict[str, gym.Space] = {
    "discrete": gym.spaces.Discrete(3, start=-1),
    "multidiscrete": gym.spaces.MultiDiscrete([2, 3], start=[1, -2]),
    "box1": gym.spaces.Box(np.float32(-0.5), np.float32(2.0), (1,), np.float32),
    "boxn": gym.spaces.Box(np.array([-0.5, 0, -3], np.float32), np.array([2, 1, -1], np.float32)),
}


class _Checked(gym.Env):
    """Raises on an action outside its space; reward: the sum of the action; 5-step episodes."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)

    def __init__(self, kind: str) -> None:
        self.action_space = SPACES[kind]

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = np.asarray(action)
        if not self.action_space.contains(a if a.ndim else a.item()):
            raise ValueError(f"action {action!r} outside {self.action_space}")
        self.t += 1
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, float(np.sum(a)), self.t >= 5, False, {}


for _kind in SPACES:
    gym.register(f"rlstore-test/Checked-{_kind}-v0", entry_point=_Checked, kwargs={"kind": _kind})

MODELS = [None, LSTMModelConfig(recurrence=4), TransformerModelConfig(n_ctx=3)]


@pytest.mark.parametrize("kind", list(SPACES))
@pytest.mark.parametrize("model", MODELS, ids=["fc", "lstm", "transformer"])
def test_every_action_space_trains_evaluates_and_samples_inside_the_space(kind, model) -> None:
    env = EnvironmentConfig(env_id=f"rlstore-test/Checked-{kind}-v0")
    online = OnlineTrainConfig(total_timesteps=64, num_envs=2, num_steps=16, num_minibatches=2)
    agent, _ = train_ppo(RunConfig(track=False, seed=0), online, env, model)
    assert len(evaluate_agent(agent, env, 2, 0)) == 2
    for method in ("basic", "greedy"):
        (tr,) = sample_from_agents([agent], 8, None, 2, method)
        space = SPACES[kind]
        assert tr.actions.shape == (8, 2, *space.shape)
        assert all(space.contains(a if a.ndim else a.item()) for a in tr.actions.reshape(16, -1)
                   .squeeze(-1 if kind == "discrete" else ()))  # fmt: skip


def _agent(space: gym.Space) -> FCAgent:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    envs.single_action_space = space  # only the spaces are read
    return FCAgent(envs)


def test_multidiscrete_log_prob_entropy_and_greedy_are_those_of_independent_categoricals() -> None:
    agent = _agent(gym.spaces.MultiDiscrete([2, 3], start=[1, -2]))
    assert agent.action_dim == 5 and agent.action_nvec == (2, 3)
    logits = torch.tensor([[0.0, 1.0, 2.0, 0.5, -1.0], [3.0, -2.0, 0.0, 0.0, 4.0]])
    action = torch.tensor([[1, 0], [0, 2]])
    dist = agent.distribution(logits)
    p1, p2 = logits[:, :2].softmax(-1), logits[:, 2:].softmax(-1)
    want = p1[[0, 1], action[:, 0]].log() + p2[[0, 1], action[:, 1]].log()
    torch.testing.assert_close(dist.log_prob(action), want)
    ent = -(p1 * p1.log()).sum(-1) - (p2 * p2.log()).sum(-1)
    torch.testing.assert_close(dist.entropy(), ent)
    assert agent.greedy(logits).tolist() == [[1, 0], [0, 2]]
    assert dist.sample().shape == (2, 2)
    assert agent.env_action(torch.tensor([[1, 0], [0, 2]])).tolist() == [[2, -2], [1, 0]]


def test_unsupported_action_spaces_are_refused_naming_the_space() -> None:
    for space in (gym.spaces.MultiBinary(3), gym.spaces.MultiDiscrete([[2, 2], [2, 2]]),
                  gym.spaces.Box(-1, 1, (2, 2))):  # fmt: skip
        with pytest.raises(ConfigError, match="single_action_space: expected Discrete, a 1-D"):
            _agent(space)


class _Bandit(gym.Env):
    """Context c in {0, 1} (one-hot); MultiDiscrete([2, 3]) action earns 1 per sub-action
    equal to (c, 2c)."""

    observation_space = gym.spaces.Box(0, 1, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([2, 3])

    def _obs(self) -> np.ndarray:
        self.c = int(self.np_random.integers(2))
        return np.eye(2, dtype=np.float32)[self.c]

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = float(action[0] == self.c) + float(action[1] == 2 * self.c)
        return self._obs(), reward, True, False, {}


gym.register("rlstore-test/MultiBandit-v0", entry_point=_Bandit)


def test_multidiscrete_contextual_bandit_is_learned() -> None:
    online = OnlineTrainConfig(total_timesteps=3072, num_envs=4, num_steps=64, learning_rate=3e-3,
                               ent_coef=0.0, decay_lr=False)  # fmt: skip
    env = EnvironmentConfig(env_id="rlstore-test/MultiBandit-v0")
    agent, _ = train_ppo(RunConfig(track=False, seed=0), online, env)
    with torch.no_grad():
        params = agent.actor(torch.eye(2))
        p = agent.distribution(params).log_prob(torch.tensor([[0, 0], [1, 2]])).exp()
    assert agent.greedy(params).tolist() == [[0, 0], [1, 2]]
    assert p.min() > 0.8, p
