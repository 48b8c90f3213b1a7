"""PPO+D trainer (rlstore.agents.ppod): demo steps in the rollout, the demo folders, exact
resume with the demo pools, the CLI, and the KeyDoor learning check (PPO+D solves it from the
single shipped demo, plain PPO with the same budget and settings does not)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _checkpoint_helpers import state_equal

import rlstore.envs  # noqa: F401  (registers rlstore/KeyDoor-v0)
from rlstore.agents.envs import make_vector_env
from rlstore.agents.networks import get_agent
from rlstore.agents.ppo import train_ppo
from rlstore.agents.ppod import (
    DEFAULT_CONFIGS,
    DemoRollout,
    PPODTrainConfig,
    human_demos,
    load_config,
    runner,
    train_ppod,
)
from rlstore.agents.rollout import RolloutState, run_rollout
from rlstore.buffers.demo_files import load_npz_demo, save_npz_demo
from rlstore.buffers.demos import Demo, DemoStore
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.checkpoint import load_state
from rlstore.envs.keydoor import DEMO_FILE, KEYDOOR_ID, optimal_actions
from rlstore.errors import CheckpointError, ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "rlstore" / "configs"


def _cfg(**ppod: Any) -> PPODTrainConfig:
    return PPODTrainConfig.from_dict(
        {
            "run": {"track": False, "seed": 2, "eval_episodes": 1},
            "environment": {"env_id": KEYDOOR_ID, "max_steps": 30},
            "online": {
                "total_timesteps": 1024,
                "num_envs": 2,
                "num_steps": 64,
                "num_checkpoints": 0,
            },  # fmt: skip
            "ppod": {"rho": 0.4, "phi": 0.3, "capacity": 6, **ppod},
        }
    )


def test_demo_steps_store_the_demo_action_reward_and_logp_zero() -> None:
    cfg = _cfg(rho=1.0, phi=0.0)
    envs = make_vector_env(cfg.environment, 2)
    agent = get_agent(None, envs, cfg.environment, cfg.online)
    store = DemoStore(4, rho=1.0, phi=0.0, seed=0)
    store.add_initial(human_demos(cfg)[0])
    obs, _ = envs.reset(seed=0)
    state = RolloutState.start(agent, envs, 0)
    mix = DemoRollout(store, agent, envs, obs, cfg.ppod, None)
    buffer = RolloutBuffer(64, 2, gamma=0.99, lam=0.95, seed=0)
    run_rollout(agent, buffer, 64, envs, state, mix=mix)
    envs.close()
    b = buffer.get()
    # the first episode of each slot is a real one (ended by the 30-step limit or the goal);
    # from then on rho = 1: every step replays the 24-step demo
    demo = optimal_actions()
    for i in range(2):
        start = int(np.flatnonzero(b.truncated[:, i].numpy() | b.terminated[:, i].numpy())[0]) + 1
        rows = slice(start, start + len(demo))
        assert b.actions[rows, i].tolist() == demo
        assert torch.all(b.logprobs[rows, i] == 0)
        assert b.rewards[rows, i].tolist() == [0.0] * 23 + [1.0]
        assert b.terminated[start + len(demo) - 1, i] and not b.terminated[start:, i][:23].any()
        assert torch.all(b.logprobs[:start, i] < 0)  # the agent's own steps
    assert state.episode_returns == [0.0, 0.0]  # demo replays count in no episode statistic


def test_human_demos_default_folder_and_frame_skip(tmp_path: Path) -> None:
    assert len(human_demos(_cfg())) == 1
    with pytest.raises(ConfigError, match="FrameSkip 1 differs"):
        human_demos(_cfg(frame_skip=2))
    with pytest.raises(ConfigError, match="ppod.demos_dir: expected .npz demos"):
        human_demos(_cfg(demos_dir=str(tmp_path)))
    with pytest.raises(ConfigError, match="ppod.demos_dir: expected a folder .*no such folder"):
        human_demos(_cfg(demos_dir=str(tmp_path / "nope")))
    other = PPODTrainConfig.from_dict({"environment": {"env_id": "CartPole-v1"}})
    with pytest.raises(ConfigError, match="ppod.demos_dir: expected a folder"):
        human_demos(other)


def test_supplementary_demos_are_added_once_and_top_demos_saved(tmp_path: Path) -> None:
    sup, target = tmp_path / "sup", tmp_path / "out"
    sup.mkdir()
    cfg = _cfg(supplementary_demos_dir=str(sup), target_demos_dir=str(target))
    envs = make_vector_env(cfg.environment, 2)
    agent = get_agent(None, envs, cfg.environment, cfg.online)
    store = DemoStore(4, rho=0.5, phi=0.0, seed=0)
    store.add_initial(human_demos(cfg)[0])
    mix = DemoRollout(store, agent, envs, envs.reset(seed=0)[0], cfg.ppod, target)
    envs.close()
    assert mix.poll_supplementary() == 0 and mix.save_demos() == []  # human demos: not saved
    shutil.copy(DEMO_FILE, sup / "a.npz")
    assert mix.poll_supplementary() == 1 and mix.poll_supplementary() == 0
    assert [d.human for d in store.reward_demos] == [True, False]
    (saved,) = mix.save_demos()
    assert saved == target / "reward_demo_000.npz"
    assert load_npz_demo(saved).actions.tolist() == optimal_actions()


def test_resume_continues_the_run_exactly_demo_pools_included(tmp_path: Path) -> None:
    sup = tmp_path / "sup"
    sup.mkdir()
    demo = load_npz_demo(DEMO_FILE)
    save_npz_demo(sup / "short.npz", demo.observations[:5], demo.actions[:5], demo.rewards[:5])
    cfg = _cfg(supplementary_demos_dir=str(sup), save_demos_every=2)
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(update={"num_checkpoints": 4})})
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    agent_a, stats_a = runner(cfg, run_dir=a_dir, resume=False)
    assert {"config.yaml", "learning_curve.png", "checkpoints"} <= {p.name for p in a_dir.iterdir()}
    assert load_config(a_dir / "config.yaml") == cfg
    mid = a_dir / "checkpoints" / "checkpoint_0001"
    sd_mid = load_state(mid, prefix="ppod_")
    assert sd_mid["mixer"]["replaying"].any()  # a replay in progress is carried over
    assert sd_mid["store"]["num_value"] > 0 and sd_mid["seen"] == ["short.npz"]
    shutil.copytree(a_dir, b_dir)
    for k in (2, 3):
        shutil.rmtree(b_dir / "checkpoints" / f"checkpoint_000{k}")  # resume from the middle
    agent_b, stats_b = runner(cfg, run_dir=b_dir, resume=True)
    sd_a, sd_b = agent_a.state_dict(), agent_b.state_dict()
    assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)
    assert stats_b.episode_returns == stats_a.episode_returns
    assert stats_b.episode_end_steps == stats_a.episode_end_steps
    drop = ("sps",)
    assert [{k: v for k, v in u.items() if k not in drop} for u in stats_b.updates] == [
        {k: v for k, v in u.items() if k not in drop} for u in stats_a.updates
    ]
    last_a = load_state(a_dir / "checkpoints" / "checkpoint_0003", prefix="ppod_")
    last_b = load_state(b_dir / "checkpoints" / "checkpoint_0003", prefix="ppod_")
    assert state_equal(last_a, last_b)
    assert sorted(p.name for p in (b_dir / "demos").iterdir()) == sorted(
        p.name for p in (a_dir / "demos").iterdir()
    )


def test_resume_refuses_another_ppod_config(tmp_path: Path) -> None:
    cfg = _cfg()
    cfg = cfg.model_copy(update={"online": cfg.online.model_copy(update={"num_checkpoints": 1})})
    train_ppod(cfg, run_dir=tmp_path)
    other = cfg.model_copy(update={"ppod": cfg.ppod.model_copy(update={"rho": 0.2})})
    with pytest.raises(CheckpointError, match="ppod: a resumed run keeps its config"):
        train_ppod(other, run_dir=tmp_path, resume=True)
    with pytest.raises(ConfigError, match="resume"):
        train_ppod(cfg, run_dir=tmp_path / "empty", resume=True)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return subprocess.run(
        [sys.executable, "-m", "rlstore.cli", "train", *args], cwd=cwd, capture_output=True,
        text=True, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}, timeout=300,
    )  # fmt: skip


def test_cli_trains_ppod_from_the_packaged_config_and_refuses_demos_elsewhere(
    tmp_path: Path,
) -> None:
    assert next(iter(DEFAULT_CONFIGS)) == KEYDOOR_ID  # the fallback of other envs
    assert load_config(CONFIGS / DEFAULT_CONFIGS[KEYDOOR_ID]).environment.env_id == KEYDOOR_ID
    demos = tmp_path / "demos"
    demos.mkdir()
    shutil.copy(DEMO_FILE, demos / "human.npz")
    out = _cli("--algo", "ppod", "--env", KEYDOOR_ID, "--agent", "fc", "--demos", str(demos),
               "--total-steps", "1024", "--no-progress", "--no-tensorboard",
               "--set", "online.num_checkpoints=1", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    run = tmp_path / "runs" / "rlstore_KeyDoor-v0-fc-s1"
    cfg = load_config(run / "config.yaml")
    assert cfg.ppod.demos_dir == str(demos) and cfg.ppod.rho == 0.3  # the packaged config's
    resumed = _cli("--resume", str(run), "--total-steps", "2048", "--no-progress",
                   "--no-tensorboard", cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "env steps       2048" in resumed.stdout
    for algo in ("ppo", "dqn"):
        bad = _cli("--algo", algo, "--demos", str(demos), cwd=tmp_path)
        assert bad.returncode == 2
        assert f"--demos: not an option of --algo {algo}" in bad.stderr


def test_cli_trains_ppod_on_mountaincar_from_a_scripted_demo_with_its_packaged_config(
    tmp_path: Path,
) -> None:
    # before ppod_fc_MountainCar-v0.yaml: KeyDoor's config (raw observations), which stays at
    # -200 on MountainCar with and without demos, with a fallback warning
    import gymnasium as gym

    env = gym.make("MountainCar-v0")
    obs_t, _ = env.reset(seed=0)
    obs, act, rew, done = [obs_t], [], [], False
    while not done:  # push in the direction of the velocity: reaches the flag
        act.append(2 if obs[-1][1] >= 0 else 0)
        o, r, terminated, truncated, _ = env.step(act[-1])
        obs.append(o), rew.append(r)
        done = terminated or truncated
    assert terminated and -130 < sum(rew) < -100
    demos = tmp_path / "demos"
    demos.mkdir()
    save_npz_demo(demos / "scripted.npz", np.array(obs), np.array(act), np.array(rew))
    out = _cli("--algo", "ppod", "--env", "MountainCar-v0", "--demos", str(demos), "--total-steps",
               "512", "--no-progress", "--no-tensorboard", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "no packaged ppod config" not in out.stderr
    cfg = load_config(tmp_path / "runs" / "MountainCar-v0-fc-s1" / "config.yaml")
    assert cfg.online.normalize_obs and (cfg.ppod.rho, cfg.ppod.phi) == (0.3, 0.0)
    assert cfg == load_config(CONFIGS / DEFAULT_CONFIGS["MountainCar-v0"]).model_copy(
        update={"ppod": cfg.ppod, "online": cfg.online, "run": cfg.run}
    )


# ----------------------------------------------------------------- learning (KeyDoor)


def _keydoor(seed: int) -> PPODTrainConfig:
    cfg = load_config(CONFIGS / DEFAULT_CONFIGS[KEYDOOR_ID])
    run = cfg.run.model_copy(update={"seed": seed, "track": False})
    online = cfg.online.model_copy(update={"num_checkpoints": 0})
    return cfg.model_copy(update={"run": run, "online": online})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppod_solves_keydoor_from_one_demo_and_plain_ppo_does_not(seed: int) -> None:
    cfg = _keydoor(seed)
    _, stats = train_ppod(cfg)
    success_ppod = stats.evaluations[-1][1]  # reward 1 on reaching the goal: success rate
    c = cfg.ppo_config()
    _, stats_ppo = train_ppo(c.run, c.online, c.environment, None)
    success_ppo = stats_ppo.evaluations[-1][1]
    assert success_ppod > 0.9, stats.evaluations
    assert success_ppo < 0.1, stats_ppo.evaluations


def test_demo_steps_of_box_actions_store_the_demo_action() -> None:
    # a (N,) row mask against (N, 1) Box actions broadcast to (N, N): a shape error here (and
    # with N == action size, other envs' actions silently replaced)
    n, length = 3, 4
    cfg = PPODTrainConfig.from_dict(
        {"run": {"track": False}, "environment": {"env_id": "Pendulum-v1", "max_steps": 5},
         "online": {"num_envs": n, "num_steps": 16}, "ppod": {"rho": 1.0, "phi": 0.0}}
    )  # fmt: skip
    envs = make_vector_env(cfg.environment, n)
    agent = get_agent(None, envs, cfg.environment, cfg.online)
    store = DemoStore(4, rho=1.0, phi=0.0, seed=0)
    actions = np.full((length, 1), 1.5, np.float32)
    store.add_initial(Demo(np.zeros((length, 3), np.float32), actions, np.ones(length, np.float32),
                           human=True))  # fmt: skip
    obs, _ = envs.reset(seed=0)
    state = RolloutState.start(agent, envs, 0)
    mix = DemoRollout(store, agent, envs, obs, cfg.ppod, None)
    buffer = RolloutBuffer(16, n, gamma=0.99, lam=0.95, seed=0)
    run_rollout(agent, buffer, 16, envs, state, mix=mix)
    envs.close()
    b = buffer.get()
    assert b.actions.shape == (16, n, 1)
    # the first episode of each slot is real (5-step limit), then every step replays the demo
    assert torch.all(b.actions[5:] == 1.5) and torch.all(b.logprobs[5:] == 0)
    assert torch.all(b.logprobs[:5] < 0) and not torch.any(b.actions[:5] == 1.5)


def test_demo_actions_outside_the_env_action_space_are_refused_by_name(tmp_path: Path) -> None:
    # an action 2 in a CartPole demo (Discrete(2)) failed inside the PPO update (RuntimeError:
    # index out of bounds), after the run had started; now refused when the demo is loaded
    human, sup = tmp_path / "human", tmp_path / "sup"
    human.mkdir(), sup.mkdir()
    obs, rew = np.zeros((4, 4), np.float32), np.full(4, -1.0, np.float32)
    save_npz_demo(human / "ok.npz", obs, np.array([0, 1, 1, 0]), rew)
    save_npz_demo(human / "bad.npz", obs, np.array([0, 1, 2, 0]), rew)
    cfg = PPODTrainConfig.from_dict({
        "run": {"track": False, "eval_episodes": 1},
        "environment": {"env_id": "CartPole-v1"},
        "online": {"total_timesteps": 64, "num_envs": 1, "num_steps": 64, "num_checkpoints": 0},
        "ppod": {"demos_dir": str(human), "supplementary_demos_dir": str(sup), "rho": 1.0,
                 "phi": 0.0},
    })  # fmt: skip
    with pytest.raises(ConfigError, match=r"bad.npz: Action: expected values in \[0, 1\].* "
                       r"got 2 at step 2"):  # fmt: skip
        train_ppod(cfg)
    (human / "bad.npz").rename(sup / "bad.npz")  # a supplementary demo added by hand
    save_npz_demo(human / "keydoor.npz", np.zeros((4, 3), np.float32), np.zeros(4, int), rew)
    with pytest.raises(ConfigError, match=r"keydoor.npz: Observation: expected rows shaped \(4,\)"):
        train_ppod(cfg)  # was "demo 1: expected frames shaped (4,) ...": which file?
    (human / "keydoor.npz").unlink()
    envs = make_vector_env(cfg.environment, 1)
    agent = get_agent(None, envs, cfg.environment, cfg.online)
    store = DemoStore(4, rho=1.0, phi=0.0, seed=0)
    store.add_initial(human_demos(cfg, envs)[0])
    mix = DemoRollout(store, agent, envs, envs.reset(seed=0)[0], cfg.ppod, None)
    envs.close()
    with pytest.raises(ConfigError, match="bad.npz: Action: expected values in"):
        mix.poll_supplementary()
    assert len(store) == 1


def test_check_demo_fits_observation_shapes_and_discrete_actions() -> None:
    from gymnasium.spaces import Box, Discrete, MultiDiscrete

    from rlstore.buffers.demo_files import check_demo_fits

    def check_demo_actions(name: str, actions: np.ndarray, space: Any) -> None:
        n = len(actions)
        check_demo_fits(name, Demo(np.zeros((n, 2)), actions, np.zeros(n)), Box(-1, 1, (2,)), space)

    with pytest.raises(ConfigError, match=r"d: Observation: expected rows shaped \(2,\) like"):
        check_demo_fits("d", Demo(np.zeros((1, 3)), np.zeros(1, int), np.zeros(1)),
                        Box(-1, 1, (2,)), Discrete(2))  # fmt: skip

    check_demo_actions("d", np.array([-1, 0, 1]), Discrete(3, start=-1))
    with pytest.raises(ConfigError, match=r"d: Action: expected values in \[-1, 1\].*got -2"):
        check_demo_actions("d", np.array([0, -2]), Discrete(3, start=-1))
    check_demo_actions("d", np.array([[0, 4], [1, 0]]), MultiDiscrete([2, 5]))
    with pytest.raises(ConfigError, match=r"got \[2 0\] at step 1"):
        check_demo_actions("d", np.array([[1, 4], [2, 0]]), MultiDiscrete([2, 5]))
    check_demo_actions("d", np.array([[9.0]]), Box(-1, 1, (1,)))  # continuous: not checked
