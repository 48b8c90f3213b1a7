"""online.normalize_obs / normalize_reward: statistics against numpy and a naive loop, frozen
in eval(), saved and restored with checkpoints, config errors, an end-to-end YAML run."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from rlstore.agents.networks import get_agent
from rlstore.agents.ppo import RolloutState, make_vector_env, ppo_runner, run_rollout
from rlstore.agents.ppo_checkpoint import latest_checkpoint, load_saved_checkpoint
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    OnlineTrainConfig,
    TrainConfig,
    load_train_config,
)
from rlstore.agents.sampling import sample_from_agents
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError

GAMMA, CLIP_OBS, CLIP_REWARD = 0.9, 2.5, 1.5
EPS = 1e-8


class NoisyEnv(gym.Env):
    """obs ~ N([5, -3, 0], [1, 10, 100]) (clipping happens at 2.5 std), reward ~ N(1, 2),
    terminates with probability 0.2 and truncates after 6 steps (via TimeLimit)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def _obs(self):
        return (self.np_random.normal(size=3) * [1, 10, 100] + [5, -3, 0]).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        r = float(self.np_random.normal(1.0, 2.0))
        return self._obs(), r, bool(self.np_random.random() < 0.2), False, {}


class Recorder:
    """A trajectory writer keeping the raw stream the rollout saw."""

    def __init__(self) -> None:
        self.obs, self.rewards, self.dones = [], [], []

    def accumulate_trajectory(self, next_obs, reward, terminated, truncated, action, info):
        self.obs.append(np.array(next_obs, np.float64))
        self.rewards.append(np.array(reward, np.float64))
        self.dones.append(np.asarray(terminated | truncated))


def _rollout(n_envs=3, steps=40, **switches):
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(NoisyEnv(), 6) for _ in range(n_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    oc = OnlineTrainConfig(num_envs=n_envs, num_steps=steps, num_minibatches=1, gamma=GAMMA,
                           clip_obs=CLIP_OBS, clip_reward=CLIP_REWARD, **switches)  # fmt: skip
    torch.manual_seed(0)
    agent = get_agent(None, envs, EnvironmentConfig(), oc)
    buffer = RolloutBuffer(steps, n_envs, gamma=GAMMA, seed=0)
    first = np.array(envs.reset(seed=0)[0], np.float64)  # what the start's reset gives again
    state = RolloutState.start(agent, envs, seed=0)
    rec = Recorder()
    run_rollout(agent, buffer, steps, envs, state, rec)
    envs.close()
    return agent, buffer, state, first, rec


def test_observation_statistics_equal_numpy_over_the_stream() -> None:
    agent, buffer, state, first, rec = _rollout(normalize_obs=True)
    stream = np.concatenate([first[None], np.stack(rec.obs)])  # (1 + T, N, 3), float32 values
    rms = agent.normalizer.obs_rms
    flat = stream.reshape(-1, 3)
    assert rms.count == len(flat)
    np.testing.assert_allclose(rms.mean, flat.mean(0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(rms.var, flat.var(0), rtol=1e-10)
    # stored obs[t] = obs seen at step t, normalized by the statistics of the stream up to it
    stored = buffer.get().obs.numpy()
    for t in range(stored.shape[0]):
        seen = stream[: t + 1].reshape(-1, 3)
        want = np.clip((stream[t] - seen.mean(0)) / np.sqrt(seen.var(0) + EPS), -2.5, 2.5)
        np.testing.assert_allclose(stored[t], want, rtol=1e-5, atol=1e-5)
    assert np.abs(stored).max() == pytest.approx(CLIP_OBS)  # clipping happened
    # rewards untouched when only observations are normalized
    np.testing.assert_allclose(buffer.get().rewards.numpy(), np.stack(rec.rewards), rtol=1e-6)


def test_reward_scaling_equals_a_naive_discounted_return_loop() -> None:
    agent, buffer, state, first, rec = _rollout(normalize_reward=True)
    R, seen, want = np.zeros(3), [], []
    for r, d in zip(rec.rewards, rec.dones, strict=True):
        R = GAMMA * R + r  # SB3 VecNormalize: update the return, its std, scale, reset at dones
        seen.extend(R)
        want.append(np.clip(r / (np.std(seen) + EPS), -CLIP_REWARD, CLIP_REWARD))
        R[d] = 0.0
    np.testing.assert_allclose(buffer.get().rewards.numpy(), np.array(want), rtol=1e-5, atol=1e-6)
    assert np.stack(rec.dones).any() and np.abs(np.array(want)).max() == CLIP_REWARD
    # observations untouched; episode statistics are on raw rewards
    np.testing.assert_allclose(buffer.get().obs.numpy()[1:], np.stack(rec.obs)[:-1], rtol=1e-6)
    total = sum(state.episode_returns) + state.episode_return.sum()
    assert total == pytest.approx(np.stack(rec.rewards).sum(), rel=1e-12)


def test_statistics_are_frozen_in_eval_mode_and_sampling(tmp_path) -> None:
    agent, *_ = _rollout(normalize_obs=True, normalize_reward=True)
    before = agent.normalizer.state_dict()
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(NoisyEnv(), 6) for _ in range(3)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    state = RolloutState.start(agent.eval(), envs, seed=1)
    run_rollout(agent, RolloutBuffer(10, 3, seed=0), 10, envs, state)
    envs.close()
    agent.train()
    _assert_same_state(agent.normalizer.state_dict(), before)


def _assert_same_state(a, b) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            _assert_same_state(a[k], b[k])
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    else:
        assert a == b


def _yaml_config(tmp_path, **online) -> TrainConfig:
    cfg = {
        "run": {"exp_name": "norm", "runs_dir": str(tmp_path), "seed": 2, "track": False},
        "environment": {"env_id": "Pendulum-v1", "max_steps": 25},
        "online": {"total_timesteps": 3 * 64, "num_envs": 4, "num_steps": 16,
                   "num_minibatches": 2, "update_epochs": 1, "num_checkpoints": 1,
                   "normalize_obs": True, "normalize_reward": True, **online},
    }  # fmt: skip
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    return load_train_config(tmp_path / "cfg.yaml")


def test_yaml_run_with_both_switches_saves_frozen_statistics(tmp_path) -> None:
    cfg = _yaml_config(tmp_path, clip_obs=5.0)
    assert cfg.online.normalize_obs and cfg.online.clip_obs == 5.0
    agent, stats = ppo_runner(cfg.run, cfg.environment, cfg.online)
    assert stats.global_step == 3 * 64 and np.isfinite(stats.updates[-1]["loss"])
    assert agent.normalizer.obs_rms.count == 4 + 3 * 64  # reset observations + every step
    assert min(stats.episode_returns) < -10 * CLIP_REWARD  # raw Pendulum returns, not scaled
    # the checkpoint restores the statistics exactly; sampling leaves them as they are
    loaded = load_saved_checkpoint(latest_checkpoint(tmp_path / "norm" / "checkpoints"), 2)
    saved = agent.normalizer.state_dict()
    _assert_same_state(loaded.normalizer.state_dict(), saved)
    sample_from_agents([loaded], rollout_length=30, num_envs=2, environment_config=cfg.environment)
    _assert_same_state(loaded.normalizer.state_dict(), saved)


def test_config_keys_and_observation_spaces() -> None:
    with pytest.raises(ConfigError, match="normalize_observations"):
        OnlineTrainConfig.from_dict({"normalize_observations": True})
    with pytest.raises(ConfigError, match="clip_obs"):
        OnlineTrainConfig.from_dict({"clip_obs": 0})
    defaults = OnlineTrainConfig()
    assert not defaults.normalize_obs and not defaults.normalize_reward
    envs = make_vector_env(EnvironmentConfig(env_id="FrozenLake-v1"), 1)  # Discrete obs
    try:
        oc = OnlineTrainConfig(normalize_obs=True)
        with pytest.raises(ConfigError, match="normalize_obs: expected a Box"):
            get_agent(None, envs, EnvironmentConfig(env_id="FrozenLake-v1"), oc)
        agent = get_agent(None, envs, EnvironmentConfig(env_id="FrozenLake-v1"),
                          OnlineTrainConfig(normalize_reward=True))  # fmt: skip
        assert agent.normalizer.obs_rms is None and agent.normalizer.reward_norm is not None
    finally:
        envs.close()
