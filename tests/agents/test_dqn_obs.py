"""DQN on every observation space PPO's preprocessor takes (pixel images: test_encoders.py)
(rlstore.agents.dqn with rlstore.agents.obs): Discrete (one-hot), MiniGrid dicts, Box vectors;
raw observations in the replay, preprocessed ones into the Q-network; exact resume; the error
for a space DQN does not take."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstore.agents.dqn import DQNAgent, DQNConfig, DQNTrainConfig, EnvInfo, runner, train_dqn
from rlstore.checkpoint import load, load_state, save_state
from rlstore.errors import CheckpointError, ConfigError

pytest.importorskip("minigrid")

# env id, environment extras, what the replay stores: {key: (shape, dtype)} ("" for a plain array)
ENVS = {
    # Discrete(48) observations, no time limit of its own
    "CliffWalking-v1": ({"max_steps": 50}, {"": ((), np.int64)}),
    # Dict(direction: Discrete(4), image: Box(0, 255, (7, 7, 3), uint8), mission: text)
    "MiniGrid-Empty-5x5-v0": ({}, {"direction": ((), np.int64), "image": ((7, 7, 3), np.uint8)}),
    "CartPole-v1": ({}, {"": ((4,), np.float32)}),
    # Tuple(Discrete(32), Discrete(11), Discrete(2)), read as a dict with keys "0", "1", "2"
    "Blackjack-v1": ({}, {str(i): ((), np.int64) for i in range(3)}),
}


def _cfg(env_id: str, run: dict[str, Any] | None = None, **dqn: Any) -> DQNTrainConfig:
    base = {"total_timesteps": 300, "learning_starts": 64, "batch_size": 16, "train_freq": 50,
            "gradient_steps": 4, "hidden_sizes": [32], "num_checkpoints": 1}  # fmt: skip
    return DQNTrainConfig.from_dict(
        {
            "run": {"track": False, "seed": 3, "eval_episodes": 0, **(run or {})},
            "environment": {"env_id": env_id, **ENVS[env_id][0]},
            "dqn": {**base, **dqn},
        }
    )


@pytest.mark.parametrize("env_id", list(ENVS))
def test_dqn_steps_and_updates_storing_raw_observations(tmp_path: Path, env_id: str) -> None:
    # before: "environment: DQN needs Box observations" for the Discrete and Dict spaces
    agent, stats = train_dqn(_cfg(env_id, num_envs=2), run_dir=tmp_path)
    # 3 periods of 2 x 50 env steps, each ending past learning_starts: 3 x 4 gradient steps
    assert stats.global_step == 300 and stats.num_updates == 3 * 4
    pairs = zip(agent.q.parameters(), agent.target.parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)  # the online net learned
    buf = load(tmp_path / "checkpoints" / "checkpoint_0000", prefix="buffer_")
    sample = buf.sample(8)
    stored = sample.obs if isinstance(sample.obs, dict) else {"": sample.obs}
    want = ENVS[env_id][1]
    assert set(stored) == set(want)  # MiniGrid's mission text is not stored
    for key, (shape, dtype) in want.items():
        assert tuple(stored[key].shape) == (8, *shape)
        assert stored[key].dtype == torch.from_numpy(np.zeros(0, dtype)).dtype


def _hook(agent: DQNAgent) -> list[torch.Tensor]:
    seen: list[torch.Tensor] = []
    agent.q.register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
    return seen


def test_q_network_reads_the_one_hot_of_a_discrete_observation() -> None:
    space = gym.spaces.Discrete(5, start=2)
    agent = DQNAgent(EnvInfo(None, space, gym.spaces.Discrete(3)), DQNConfig(hidden_sizes=[8]))
    seen = _hook(agent)
    agent(np.array([4, 2]))
    agent.act(np.int64(6))
    want = torch.tensor([[0.0, 0, 1, 0, 0], [1, 0, 0, 0, 0]])  # obs - start = 2, 0
    assert torch.equal(seen[0], want)
    assert torch.equal(seen[1], torch.tensor([[0.0, 0, 0, 0, 1]]))  # 6 - 2 = 4, batch of one
    assert agent.q.body[0].in_features == 5


def test_q_network_reads_the_minigrid_encoding_of_a_dict_observation() -> None:
    space = gym.spaces.Dict(
        {"direction": gym.spaces.Discrete(4), "image": gym.spaces.Box(0, 255, (2, 2, 3), np.uint8)}
    )
    agent = DQNAgent(EnvInfo(None, space, gym.spaces.Discrete(3)), DQNConfig(hidden_sizes=[8]))
    seen = _hook(agent)
    image = np.arange(12, dtype=np.uint8).reshape(1, 2, 2, 3)  # values 0..11
    obs = {"direction": np.array([3]), "image": image, "mission": ("go",)}
    torch.manual_seed(0)
    agent.explore(obs, 0.0)  # greedy: the Q-network runs
    # the image flattened (H, W, C order) and divided by 10, then the one-hot direction 3
    want = torch.tensor([[i / 10 for i in range(12)] + [0.0, 0.0, 0.0, 1.0]])
    torch.testing.assert_close(seen[0], want, rtol=0, atol=1e-7)
    assert agent.q.body[0].in_features == 16


@pytest.mark.parametrize(
    ("space", "match"),
    [
        (gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3))),
         r"cannot take.*Tuple\(Discrete\(2\), Discrete\(3\)\)"),
        (gym.spaces.Dict({"a": gym.spaces.Dict({"b": gym.spaces.Discrete(2)})}),
         r"cannot take.*nested Dict"),
    ],
)  # fmt: skip
def test_a_space_dqn_does_not_take_is_named_in_the_error(space: gym.Space, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DQNAgent(EnvInfo(None, space, gym.spaces.Discrete(2)), DQNConfig(hidden_sizes=[8]))


@pytest.mark.parametrize("env_id", ["CliffWalking-v1", "MiniGrid-Empty-5x5-v0", "Blackjack-v1"])
def test_resume_continues_a_non_box_run_exactly(tmp_path: Path, env_id: str) -> None:
    cfg = _cfg(env_id, {"eval_interval": 200, "eval_episodes": 1}, num_envs=2,
               num_checkpoints=2, total_timesteps=400)  # fmt: skip
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    agent_a, stats_a = runner(cfg, run_dir=a_dir, resume=False)
    shutil.copytree(a_dir, b_dir)
    shutil.rmtree(b_dir / "checkpoints" / "checkpoint_0001")  # resume from the middle
    agent_b, stats_b = runner(cfg, run_dir=b_dir, resume=True)
    sd_a, sd_b = agent_a.state_dict(), agent_b.state_dict()
    assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)
    assert stats_b.episode_returns == stats_a.episode_returns
    assert stats_b.evaluations == stats_a.evaluations and len(stats_a.evaluations) == 2
    drop = ("sps",)
    assert [{k: v for k, v in u.items() if k not in drop} for u in stats_b.updates] == [
        {k: v for k, v in u.items() if k not in drop} for u in stats_a.updates
    ]


@pytest.mark.parametrize(
    ("obs", "match"),
    [
        (np.array([99, 0]), r"obs: obs: expected values in \[0, 47\]"),  # Discrete(48)
        (np.array([1.0, 0.0]), r"obs: expected arrays.*int64"),
        (np.array([1, 0, 0]), r"obs: expected arrays.*\(2,\)"),
        ({"x": np.array([1, 0])}, r"obs: expected arrays"),
    ],
)
def test_resume_refuses_a_crafted_observation(tmp_path: Path, obs: Any, match: str) -> None:
    cfg = _cfg("CliffWalking-v1", num_envs=2)
    train_dqn(cfg, run_dir=tmp_path)
    folder = tmp_path / "checkpoints" / "checkpoint_0000"
    sd = load_state(folder, prefix="dqn_")
    sd["obs"] = obs
    save_state(folder, sd, prefix="dqn_")  # a consistent (checksummed) but wrong state
    with pytest.raises(CheckpointError, match=match):
        train_dqn(cfg, run_dir=tmp_path, resume=True)


@pytest.mark.parametrize(
    ("env_id", "max_steps", "changed"),
    [("CliffWalking-v1", 200, {"exploration_final_eps": 0.01}),
     ("Taxi-v4", None, {"total_timesteps": 200_000, "exploration_fraction": 0.5,
                        "exploration_final_eps": 0.01})],
)  # fmt: skip
def test_non_box_env_gets_its_config_cartpoles_settings_but_named_ones(
    env_id: str, max_steps: int | None, changed: dict[str, Any]
) -> None:
    """``rlstore train --algo dqn --env CliffWalking-v1`` used CartPole's config without a time
    limit: CliffWalking-v1 has none, and a greedy evaluation that misses the goal for 48 steps
    cycles forever (deterministic policy, deterministic 48-state env); Taxi-v4 stayed at -200 (no
    delivery) for CartPole's 50k steps."""
    import argparse

    from rlstore.agents import dqn
    from rlstore.agents.train_cli import add_arguments, build_config, default_config

    path, fallback = default_config("dqn", dqn, env_id, None)
    assert path.name == f"dqn_{env_id}.yaml" and not fallback
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(p.parse_args(["--algo", "dqn", "--env", env_id]))
    assert cfg.environment.env_id == env_id and cfg.environment.max_steps == max_steps
    cartpole = dqn.load_config(path.parent / dqn.DEFAULT_CONFIGS["CartPole-v1"]).dqn.to_dict()
    assert cfg.dqn.to_dict() == {**cartpole, **changed}
