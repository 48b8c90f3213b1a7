"""SAC (rlstore.agents.sac): squashed log-prob, twin critics, TD targets on a constructed
episode (truncation bootstraps, termination does not), exact resume, configs, velora's warm."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
from _helpers import register_test_env

from rlstore import checkpoint
from rlstore.agents.envs import make_vector_env
from rlstore.agents.run import TrainStats
from rlstore.agents.sac import (
    DEFAULT_CONFIGS,
    LoopState,
    SACAgent,
    SACConfig,
    SACTrainConfig,
    TwinQ,
    load_config,
    make_optimizers,
    ou_noise,
    polyak_update,
    runner,
    squashed_log_prob,
    td_target,
    train_sac,
)
from rlstore.agents.sac_checkpoint import restore_checkpoint
from rlstore.buffers.replay import ReplayBuffer
from rlstore.checkpoint import load_state, save_state
from rlstore.compat.velora import ReplayBuffer as VeloraReplayBuffer
from rlstore.errors import CheckpointError, ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "rlstore" / "configs"


class CountEnv(gym.Env):
    """obs = [0.5] at reset, +1 per step; reward = the new obs; terminates when the obs
    reaches ``terminate_at`` (if given). Actions are ignored."""

    observation_space = gym.spaces.Box(-100.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, terminate_at: float | None = None):
        self.terminate_at = terminate_at

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = 0.5
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.x += 1.0
        done = self.terminate_at is not None and self.x >= self.terminate_at
        return np.array([self.x], np.float32), self.x, done, False, {}


COUNT_ID = register_test_env("rlstore-test/SACCount-v0", CountEnv)


def tiny(**sac) -> SACTrainConfig:
    """A small, fast Pendulum run (episodes of 50 steps)."""
    base = {"total_timesteps": 400, "batch_size": 32, "hidden_sizes": [32, 32],
            "buffer_size": 1000, "log_freq": 100, "num_checkpoints": 3,
            "learning_starts": 50}  # fmt: skip
    return SACTrainConfig.from_dict(
        {
            "run": {"seed": 1, "track": False, "eval_interval": 100, "eval_episodes": 1},
            "environment": {"env_id": "Pendulum-v1", "max_steps": 50},
            "sac": {**base, **sac},
        }  # fmt: skip
    )


# ------------------------------------------------------------------ the squashed Gaussian


def test_squashed_log_prob_matches_the_change_of_variables_formula():
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(64, 3, generator=g, dtype=torch.float64)
    log_std = torch.rand(64, 3, generator=g, dtype=torch.float64) * 2 - 1.5
    u = mean + log_std.exp() * torch.randn(64, 3, generator=g, dtype=torch.float64)
    got = squashed_log_prob(u, mean, log_std)
    # independent reference in numpy: log N(u; m, s) - log(1 - tanh(u)^2), per dim
    un, mn, sn = u.numpy(), mean.numpy(), log_std.exp().numpy()
    log_n = -0.5 * ((un - mn) / sn) ** 2 - np.log(sn) - 0.5 * np.log(2 * np.pi)
    want = (log_n - np.log(1 - np.tanh(un) ** 2)).sum(-1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)
    # and torch.distributions' own transformed distribution, evaluated at the action
    dist = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()), [torch.distributions.TanhTransform()]
    )
    action = torch.tanh(u)
    np.testing.assert_allclose(got.numpy(), dist.log_prob(action).sum(-1).numpy(), atol=1e-6)


def test_squashed_density_integrates_to_one_and_stays_finite_when_saturated():
    # 1-D: integrate exp(log p(a)) over a = tanh(u) in [-1, 1] numerically
    mean, log_std = torch.tensor([[0.7]], dtype=torch.float64), torch.tensor([[-0.2]]).double()
    u = torch.linspace(-12, 12, 200_001, dtype=torch.float64)[:, None]
    p = squashed_log_prob(u, mean, log_std).exp()
    a = torch.tanh(u[:, 0])
    assert abs(float(torch.trapezoid(p, a)) - 1.0) < 1e-6
    # far in the tail tanh(u) == 1 in float32, yet log(1 - tanh^2) = log 4 - 2|u| exactly
    big = torch.tensor([[30.0]])
    lp = squashed_log_prob(big, torch.zeros(1, 1), torch.zeros(1, 1))
    want = -0.5 * 900 - 0.5 * math.log(2 * math.pi) - (math.log(4) - 60)
    assert math.isfinite(float(lp)) and abs(float(lp) - want) < 1e-3


def test_actor_samples_normalized_actions_with_their_log_prob_the_env_gets_them_scaled():
    env = gym.make("Pendulum-v1")
    agent = SACAgent(env.observation_space, env.action_space, SACConfig(), "Pendulum-v1")
    torch.manual_seed(0)
    obs = torch.randn(512, 3)
    with torch.no_grad():
        a, lp = agent.actor.sample(obs)
        mean, log_std = agent.actor(obs)
    assert a.shape == (512, 1) and lp.shape == (512,)
    assert float(a.abs().max()) <= 1.0
    u = torch.atanh(a.double().clamp(-1 + 1e-12, 1 - 1e-12))  # back to the Gaussian
    ref = squashed_log_prob(u, mean.double(), log_std.double())
    inner = a.abs()[:, 0] < 0.995  # where float32 tanh is invertible to good precision
    np.testing.assert_allclose(lp[inner].numpy(), ref[inner].numpy(), atol=1e-3)
    det = agent.act(obs[:4].numpy(), deterministic=True)
    np.testing.assert_allclose(det, (2 * torch.tanh(mean[:4])).numpy(), atol=1e-6)


# ------------------------------------------------------------------ critics and targets


def test_twin_q_is_two_independent_mlps_and_polyak_averages():
    torch.manual_seed(0)
    q = TwinQ(5, [8, 8])
    obs, act = torch.randn(10, 3), torch.randn(10, 2)
    out = q(obs, act)
    x = torch.cat([obs, act], -1)
    for k in range(2):  # the same networks as a plain loop of linear layers
        h = x
        for i, (w, b) in enumerate(zip(q.weights, q.biases, strict=True)):
            h = h @ w[k] + b[k]
            h = torch.relu(h) if i < 2 else h
        torch.testing.assert_close(out[k], h[:, 0])
    assert not torch.allclose(out[0], out[1])  # independently initialized
    target = TwinQ(5, [8, 8])
    before = [p.clone() for p in target.parameters()]
    polyak_update(target, q, 0.1)
    for t, b, p in zip(target.parameters(), before, q.parameters(), strict=True):
        torch.testing.assert_close(t, 0.9 * b + 0.1 * p)


@pytest.mark.parametrize(
    ("terminate_at", "max_steps", "last_target"),
    [
        (None, 3, 3.5 + 0.9 * 2 * 3.5),  # truncated: bootstraps from the final obs 3.5 -> 9.8
        (3.5, 5, 3.5),  # terminated: no bootstrap
        (3.5, 3, 3.5),  # terminated and truncated at once: termination wins
    ],
)
def test_td_targets_of_a_constructed_episode(tmp_path, terminate_at, max_steps, last_target):
    """Four env steps through the trainer: 0.5 -> 1.5 -> 2.5 -> 3.5 (episode end), then the
    reset obs 0.5 -> 1.5. With stand-in critics Q1 = 2 s', Q2 = 3 s' (min: 2 s'), alpha 0,
    gamma 0.9: y = r + 0.9 * (1 - terminated) * 2 s'. Hand-computed:
    1.5 + 0.9 * 3 = 4.2; 2.5 + 0.9 * 5 = 7.0; the end (above); 1.5 + 0.9 * 3 = 4.2.
    Bootstrapping a truncation from the reset obs 0.5 instead would give 3.5 + 0.9 = 4.4."""
    cfg = SACTrainConfig.from_dict({
        "run": {"seed": 0, "track": False, "eval_episodes": 1},
        "environment": {"env_id": COUNT_ID, "env_kwargs": {"terminate_at": terminate_at},
                        "max_steps": max_steps},
        "sac": {"total_timesteps": 4, "learning_starts": 1000, "batch_size": 1,
                "buffer_size": 16, "hidden_sizes": [4], "num_checkpoints": 1},
    })  # fmt: skip
    train_sac(cfg, run_dir=tmp_path)
    buf = checkpoint.load(tmp_path / "checkpoints" / "checkpoint_0000", prefix="buffer_")
    rows = buf.gather(np.arange(len(buf)))  # the stored transitions, in order
    np.testing.assert_array_equal(rows["obs"][:, 0], [0.5, 1.5, 2.5, 0.5])
    np.testing.assert_array_equal(rows["next_obs"][:, 0], [1.5, 2.5, 3.5, 1.5])
    batch = SimpleNamespace(**{k: torch.from_numpy(rows[k]) for k in
                               ("reward", "next_obs", "terminated")})  # fmt: skip
    stand_in = SimpleNamespace(
        actor=SimpleNamespace(sample=lambda s: (torch.zeros(len(s), 1), torch.zeros(len(s)))),
        critic_target=lambda s, a: torch.stack([2 * s[:, 0], 3 * s[:, 0]]),
    )
    y = td_target(stand_in, batch, torch.tensor(0.0), 0.9)  # type: ignore[arg-type]
    np.testing.assert_allclose(y.numpy(), [4.2, 7.0, last_target, 4.2], rtol=1e-6)


# ------------------------------------------------------------------ training, checkpoints


def test_resume_from_a_checkpoint_continues_the_run_bit_for_bit(tmp_path):
    cfg = tiny()
    a, b = tmp_path / "a", tmp_path / "b"
    agent1, stats1 = train_sac(cfg, run_dir=a)
    assert stats1.global_step == 400 and stats1.num_updates == 400 - 50
    shutil.copytree(a, b)
    # as if killed while writing the second checkpoint (step 267): its buffer is on disk, its
    # state (which commits it) is not; resuming starts from the first one (step 133)
    shutil.rmtree(b / "checkpoints" / "checkpoint_0002")
    for f in (b / "checkpoints" / "checkpoint_0001").glob("sac_*"):
        f.unlink()
    agent2, stats2 = train_sac(cfg, run_dir=b, resume=True)
    for (k, v1), v2 in zip(agent1.state_dict().items(), agent2.state_dict().values(), strict=True):
        assert torch.equal(v1, v2), k
    assert stats2.episode_returns == stats1.episode_returns
    assert stats2.episode_end_steps == stats1.episode_end_steps
    assert stats2.evaluations == stats1.evaluations and len(stats1.evaluations) == 4
    drop = {"sps"}
    assert [{k: v for k, v in u.items() if k not in drop} for u in stats2.updates] == [
        {k: v for k, v in u.items() if k not in drop} for u in stats1.updates
    ]
    last = Path("checkpoints") / "checkpoint_0002"
    for prefix in ("buffer_", "sac_"):  # buffer contents + sampler, optimizers, RNGs, counters
        s1, s2 = load_state(a / last, prefix=prefix), load_state(b / last, prefix=prefix)
        if prefix == "sac_":
            s1.pop("updates"), s2.pop("updates")  # holds the measured steps/s
        _assert_tree_equal(s1, s2)


def _assert_tree_equal(x, y, where="state"):
    if isinstance(x, dict):
        assert set(x) == set(y), where
        for k in x:
            _assert_tree_equal(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, torch.Tensor):
        assert torch.equal(x, y), where
    elif isinstance(x, np.ndarray):
        np.testing.assert_array_equal(x, y, err_msg=where)
    else:
        assert x == y, where


def test_resume_refuses_another_config_and_a_missing_checkpoint(tmp_path):
    train_sac(tiny(total_timesteps=100, num_checkpoints=1), run_dir=tmp_path)
    with pytest.raises(CheckpointError, match="config.sac"):
        train_sac(tiny(total_timesteps=100, num_checkpoints=1, hidden_sizes=[16]),
                  run_dir=tmp_path, resume=True)  # fmt: skip
    with pytest.raises(ConfigError, match="resume: no SAC checkpoint"):
        train_sac(tiny(), run_dir=tmp_path / "empty", resume=True)


@pytest.mark.parametrize(
    ("corrupt", "match"),
    [
        (lambda sd: sd.update(format="rlstore.sac/0"), "format"),
        (lambda sd: sd["model"].update({"log_alpha": torch.zeros(2)}), "model.log_alpha"),
        (lambda sd: sd["optimizers"].pop("alpha"), "optimizers"),
        (lambda sd: sd["history"]["episode_lengths"].append(3), "unequal lengths"),
        (lambda sd: sd["rng"]["numpy"].update(pos=10_000), "rng"),
        (lambda sd: sd.update(obs=np.zeros((1, 4), np.float32)), "obs"),
        (lambda sd: sd["counters"].update(iteration=-1), "counters.iteration"),
        (lambda sd: sd["updates"].append({"x": "y"}), "updates"),
    ],
)
def test_a_crafted_checkpoint_is_refused_before_anything_changes(tmp_path, corrupt, match):
    cfg = tiny(total_timesteps=100, num_checkpoints=1)
    train_sac(cfg, run_dir=tmp_path)
    folder = tmp_path / "checkpoints" / "checkpoint_0000"
    sd = load_state(folder, prefix="sac_")
    corrupt(sd)
    save_state(folder, sd, prefix="sac_")
    envs = make_vector_env(cfg.environment, 1)
    agent = SACAgent(
        envs.single_observation_space, envs.single_action_space, cfg.sac, "Pendulum-v1"
    )
    opts, buf = make_optimizers(agent, cfg.sac), ReplayBuffer(1000, seed=1)
    state = LoopState(envs.reset(seed=1)[0], np.zeros(1), np.zeros(1, np.int64))
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    with pytest.raises(CheckpointError, match=match):
        restore_checkpoint(folder, cfg, agent, opts, buf, envs, state, TrainStats())
    envs.close()
    assert len(buf) == 0 and state.iteration == 0 and not opts["critic"].state
    for k, v in agent.state_dict().items():
        assert torch.equal(before[k], v), k


def test_runner_writes_the_run_folder(tmp_path):
    cfg = tiny(total_timesteps=100, num_checkpoints=1)
    runner(cfg, run_dir=tmp_path / "run", resume=False)
    assert load_config(tmp_path / "run" / "config.yaml") == cfg
    assert (tmp_path / "run" / "learning_curve.png").is_file()
    assert (tmp_path / "run" / "checkpoints" / "checkpoint_0000" / "sac_metadata.json").is_file()


# ------------------------------------------------------------------ configs and facades


def test_packaged_config_has_the_zoo_settings():
    assert next(iter(DEFAULT_CONFIGS)) == "Pendulum-v1"  # the fallback of other envs
    cfg = load_config(CONFIGS / DEFAULT_CONFIGS["Pendulum-v1"])
    assert cfg.environment.env_id == "Pendulum-v1"
    s = cfg.sac
    assert (s.total_timesteps, s.learning_rate, s.buffer_size, s.batch_size, s.tau, s.gamma,
            s.learning_starts, s.train_freq, s.gradient_steps, s.ent_coef, s.hidden_sizes) == (
        20_000, 1e-3, 1_000_000, 256, 0.005, 0.99, 100, 1, 1, "auto", [256, 256]
    )  # fmt: skip


def test_mountain_car_continuous_gets_the_sb2_zoo_recipe_with_ou_noise():
    """``rlstore train --algo sac --env MountainCarContinuous-v0`` fell back to Pendulum's
    config and stood still (eval 0.0 at 20k); the SB2 RL Zoo's recipe (OU noise 0.5) ships."""
    import argparse

    from rlstore.agents import sac
    from rlstore.agents.train_cli import add_arguments, build_config, default_config

    path, fallback = default_config("sac", sac, "MountainCarContinuous-v0", None)
    assert path.name == "sac_MountainCarContinuous-v0.yaml" and not fallback
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(p.parse_args(["--algo", "sac", "--env", "MountainCarContinuous-v0"]))
    assert cfg.environment.env_id == "MountainCarContinuous-v0"
    s = cfg.sac
    zoo = (60_000, 3e-4, 50_000, 64, "auto", 1, 1, 0, [64, 64], 0.5)
    assert (s.total_timesteps, s.learning_rate, s.buffer_size, s.batch_size, s.ent_coef,
            s.train_freq, s.gradient_steps, s.learning_starts, s.hidden_sizes,
            s.ou_noise_std) == zoo  # fmt: skip


# ------------------------------------------------------------------ Ornstein-Uhlenbeck noise


def test_ou_noise_steps_like_sb3_by_hand():
    # x' = x - 0.15 * 0.01 * x + sigma * sqrt(0.01) * z, sigma = 0.5:
    # 0.2 - 0.0003 + 0.05 * 1 = 0.2497; -1 + 0.0015 + 0.05 * -2 = -1.0985; 0 + 0 + 0 = 0
    x = ou_noise(np.array([[0.2, -1.0, 0.0]]), 0.5, np.array([[1.0, -2.0, 0.0]]))
    np.testing.assert_allclose(x, [[0.2497, -1.0985, 0.0]], rtol=1e-12)
    # no draws: decays geometrically by (1 - 0.0015) per step
    x = np.array([[1.0]])
    for _ in range(10):
        x = ou_noise(x, 0.5, np.zeros((1, 1)))
    np.testing.assert_allclose(x, [[0.9985**10]], rtol=1e-12)


def test_ou_noise_state_resumes_and_resets_at_episode_ends(tmp_path):
    """Pendulum episodes of 50 steps; checkpoints at steps 133 (mid-episode: noise carried) and
    400 (an episode just ended: noise reset to 0); resuming from 133 repeats the run exactly."""
    cfg = tiny(ou_noise_std=0.5)
    a, b = tmp_path / "a", tmp_path / "b"
    agent1, stats1 = train_sac(cfg, run_dir=a)
    mid = load_state(a / "checkpoints" / "checkpoint_0000", prefix="sac_")["episode"]["noise"]
    end = load_state(a / "checkpoints" / "checkpoint_0002", prefix="sac_")["episode"]["noise"]
    assert mid.shape == (1, 1) and mid.dtype == np.float32 and mid[0, 0] != 0.0
    np.testing.assert_array_equal(end, np.zeros((1, 1), np.float32))
    shutil.copytree(a, b)
    for k in ("checkpoint_0001", "checkpoint_0002"):
        shutil.rmtree(b / "checkpoints" / k)
    agent2, stats2 = train_sac(cfg, run_dir=b, resume=True)
    for (k, v1), v2 in zip(agent1.state_dict().items(), agent2.state_dict().values(), strict=True):
        assert torch.equal(v1, v2), k
    assert stats2.episode_returns == stats1.episode_returns
    # the noise changes what is collected: another run than without it
    _, stats0 = train_sac(tiny(), run_dir=None)
    assert stats0.episode_returns[1:] != stats1.episode_returns[1:]


def test_ou_noise_is_scaled_clipped_and_reset_by_hand(monkeypatch):
    """Policy action 0, every draw z = 1, sigma 5 (steps of sigma * sqrt(dt) = 0.5), Pendulum's
    bounds +-2 (half range 2): x1 = 0.5 -> a = 1.0; x2 = 0.9985 * 0.5 + 0.5 = 0.99925 ->
    a = 1.9985; x3 = 0.9985 * 0.99925 + 0.5 = 1.49775 -> 2.9955, clipped to 2.0 (and every later
    step). The episode ends after 50 steps: step 51 starts again from x = 0 -> a = 1.0."""
    seen = []
    add = ReplayBuffer.add

    def spy(self, obs, action, *rest):
        seen.append(np.asarray(action).copy())
        return add(self, obs, action, *rest)

    monkeypatch.setattr(ReplayBuffer, "add", spy)
    monkeypatch.setattr(SACAgent, "act", lambda self, obs, deterministic=False: np.zeros(
        (len(obs), 1), np.float32))  # fmt: skip
    monkeypatch.setattr(torch, "randn", lambda *shape, **kw: torch.ones(*shape, **kw))
    train_sac(tiny(ou_noise_std=5.0, total_timesteps=53, learning_starts=0, num_checkpoints=0))
    acts = np.concatenate(seen)[:, 0]
    assert acts.dtype == np.float32 and len(acts) == 53
    want = [1.0, 1.9985] + [2.0] * 48 + [1.0, 1.9985, 2.0]
    np.testing.assert_allclose(acts, want, rtol=1e-6)


@pytest.mark.parametrize(
    ("sac", "match"),
    [
        ({"ou_noise_std": -0.1}, "ou_noise_std"),
        ({"ou_noise_std": float("nan")}, "ou_noise_std"),
        ({"ou_noise_std": "0.5"}, "ou_noise_std"),
        ({"unknown": 1}, "unknown"),
        ({"ent_coef": 0.0}, "ent_coef"),
        ({"ent_coef": "fixed"}, "ent_coef"),
        ({"hidden_sizes": [0]}, "hidden_sizes"),
        ({"batch_size": 300, "buffer_size": 200}, "batch_size"),
        ({"tau": 1.5}, "tau"),
    ],
)
def test_bad_configs_are_refused(sac, match):
    with pytest.raises(ConfigError, match=match):
        SACTrainConfig.from_dict({"sac": sac})


def test_discrete_actions_are_refused():
    env = gym.make("CartPole-v1")
    with pytest.raises(ConfigError, match="1-D Box action space"):
        SACAgent(env.observation_space, env.action_space, SACConfig(), "CartPole-v1")


def test_velora_warm_fills_its_buffer_from_the_agent():
    env = gym.make("Pendulum-v1")
    agent = SACAgent(env.observation_space, env.action_space, SACConfig(), "Pendulum-v1")
    buf = VeloraReplayBuffer(100, state_dim=3, action_dim=1, hidden_dim=2, seed=0)
    torch.manual_seed(0)
    buf.warm(agent, 50, num_envs=2, seed=0)
    assert len(buf) == 50
    batch = buf.sample(50)
    assert float(batch.actions.abs().max()) <= 2.0 and float(batch.actions.std()) > 0
    actions, hidden = agent.predict(torch.zeros(4, 3), None, train_mode=False)
    assert hidden is None and torch.equal(actions, actions[:1].expand(4, 1))


@pytest.mark.slow
def test_sac_learns_pendulum_within_20k_steps():
    cfg = load_config(CONFIGS / "sac_Pendulum-v1.yaml")
    _, stats = train_sac(cfg)
    assert stats.global_step == 20_000
    assert stats.evaluations[-1][1] > -200, stats.evaluations
