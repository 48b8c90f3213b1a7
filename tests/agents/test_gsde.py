"""Generalized state-dependent exploration (gSDE) for the PPO FC agent: the distribution against
hand-computed values and sampled variances, the rollout's redraws, configs, resume."""

from __future__ import annotations

import math
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlstore.agents.gsde import EPSILON, GSDEConfig, GSDEDistribution, sample_exploration
from rlstore.agents.impala import ImpalaTrainConfig
from rlstore.agents.networks import FCAgent, deterministic_policy, get_agent
from rlstore.agents.ppo import RolloutState, make_vector_env, run_rollout, train_ppo
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    LSTMModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TrainConfig,
    TransformerModelConfig,
)
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError, SpecError

# sigma = exp(log_std) = [[1, 2], [0.5, 1]] (L = 2 features, A = 2 action dims), z = [1, 2]
LOG_STD = torch.tensor([[1.0, 2.0], [0.5, 1.0]], dtype=torch.float64).log()
Z = torch.tensor([[1.0, 2.0]], dtype=torch.float64)


def test_log_prob_entropy_and_std_by_hand() -> None:
    # var_j = sum_i z_i^2 sigma_ij^2: var_0 = 1*1 + 4*0.25 = 2, var_1 = 1*4 + 4*1 = 8
    var = np.array([2.0, 8.0]) + EPSILON
    mean = torch.tensor([[0.5, -1.0]], dtype=torch.float64)
    a = torch.tensor([[1.5, 1.0]], dtype=torch.float64)  # a - mean = [1, 2]
    d = GSDEDistribution(mean, Z, LOG_STD)
    np.testing.assert_allclose(d.stddev.numpy(), np.sqrt(var)[None], rtol=1e-12)
    # log N(a; mean, var) = -(a - mean)^2 / (2 var) - log(2 pi var) / 2, summed over the dims
    logp = sum(
        -(x**2) / (2 * v) - math.log(2 * math.pi * v) / 2 for x, v in zip([1, 2], var, strict=True)
    )
    np.testing.assert_allclose(d.log_prob(a).numpy(), [logp], rtol=1e-12)
    ent = sum(0.5 * math.log(2 * math.pi * math.e * v) for v in var)  # Gaussian entropy
    np.testing.assert_allclose(d.entropy().numpy(), [ent], rtol=1e-12)
    assert torch.equal(d.mode(), mean)
    # full_std off: log_std (L, 1) shared by the dims, sigma = [1, 0.5]: var_j = 1 + 4 * 0.25
    d1 = GSDEDistribution(mean, Z, LOG_STD[:, :1])
    np.testing.assert_allclose(
        d1.stddev.numpy(), np.full((1, 2), math.sqrt(2 + EPSILON)), rtol=1e-12
    )


def test_log_std_gets_the_variance_gradient_and_the_features_none() -> None:
    """SB3's learn_features=False: d/d log_std_ij of log N(a_j; m_j, v_j) + H_j with
    v_j = sum_i z_i^2 sigma_ij^2 + eps is (-1/(2v) + (a-m)^2/(2v^2) + 1/(2v)) * 2 z_i^2
    sigma_ij^2; z gets no gradient from the distribution; the mean the Normal's."""
    log_std = LOG_STD.clone().requires_grad_(True)
    z = Z.clone().requires_grad_(True)
    mean = torch.tensor([[0.5, -1.0]], dtype=torch.float64, requires_grad=True)
    a = torch.tensor([[1.5, 1.0]], dtype=torch.float64)
    d = GSDEDistribution(mean, z, log_std)
    (d.log_prob(a) + d.entropy()).sum().backward()
    assert z.grad is None
    var = np.array([2.0, 8.0]) + EPSILON
    diff = np.array([1.0, 2.0])
    dv = diff**2 / (2 * var**2)  # the -1/(2v) of log N and the 1/(2v) of H cancel
    sigma2 = LOG_STD.exp().numpy() ** 2
    want = dv[None, :] * 2 * (Z.numpy()[0] ** 2)[:, None] * sigma2
    np.testing.assert_allclose(log_std.grad.numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(mean.grad.numpy(), (diff / var)[None], rtol=1e-10)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: sample_exploration(torch.zeros(3, 2), 3, 2), SpecError, r"log_std: .*\(L, 3\)"),
        (lambda: sample_exploration(torch.zeros(3), 1, 2), SpecError, r"log_std: .*got \(3,\)"),
        (lambda: sample_exploration(torch.zeros(3, 2), 2, 2.5), ConfigError, "num_envs: .*2.5"),
        (lambda: sample_exploration(torch.zeros(3, 2), 2, 0), ConfigError, "num_envs: .*got 0"),
        (
            lambda: GSDEDistribution(torch.zeros(4, 2), torch.ones(4, 5), torch.zeros(3, 2)),
            SpecError,
            r"latent: expected \(4, 3\) .* got \(4, 5\)",
        ),
        (
            lambda: GSDEDistribution(torch.zeros(4, 2), torch.ones(5, 3), torch.zeros(3, 2)),
            SpecError,
            r"latent: expected \(4, 3\)",
        ),
        (
            lambda: GSDEDistribution(
                torch.zeros(4, 2), torch.ones(4, 3), torch.zeros(3, 2), torch.zeros(4, 3, 3)
            ),
            SpecError,
            r"exploration: expected \(\.\.\., 3, 2\), got \(4, 3, 3\)",
        ),
    ],
)
def test_public_gsde_functions_check_their_shapes(call, error, match: str) -> None:
    """They raised torch's RuntimeError / TypeError (or sampled a wrong shape) instead."""
    with pytest.raises(error, match=match):
        call()


def test_log_prob_does_not_need_the_matrices_and_noise_is_z_times_w() -> None:
    w = torch.tensor([[[1.0, -1.0], [2.0, 0.5]]], dtype=torch.float64)  # (N=1, L, A)
    mean = torch.zeros(1, 2, dtype=torch.float64)
    d = GSDEDistribution(mean, Z, LOG_STD, w)
    # z @ W = [1*1 + 2*2, 1*(-1) + 2*0.5] = [5, 0]
    assert torch.equal(d.sample(), torch.tensor([[5.0, 0.0]], dtype=torch.float64))
    a = d.sample()
    assert torch.equal(d.log_prob(a), GSDEDistribution(mean, Z, LOG_STD).log_prob(a))
    with pytest.raises(ConfigError, match="exploration"):
        GSDEDistribution(mean, Z, LOG_STD).sample()


@pytest.mark.parametrize("full_std", [True, False])
def test_sampled_actions_have_the_formula_variance(full_std: bool) -> None:
    """Over many matrix draws, ``z @ W`` has mean 0, variance ``(z**2) @ (sigma**2)`` and
    uncorrelated dims. 200k draws: the variance estimate's relative error is ~0.3% (one sd);
    a formula with sigma instead of sigma^2 would be off by 25% (dim 0) and 50% (dim 1)."""
    torch.manual_seed(0)
    log_std = LOG_STD if full_std else LOG_STD[:, :1]
    n = 200_000
    w = sample_exploration(log_std, 2, n)
    assert w.shape == (n, 2, 2)
    d = GSDEDistribution(torch.zeros(n, 2, dtype=torch.float64), Z.expand(n, 2), log_std, w)
    noise = d.sample().numpy()
    want = (d.stddev[0] ** 2 - EPSILON).numpy()  # [2, 8] full; [2, 2] shared
    np.testing.assert_allclose(noise.var(0), want, rtol=0.02)
    np.testing.assert_allclose(noise.mean(0), 0.0, atol=0.02)
    assert abs(np.corrcoef(noise.T)[0, 1]) < 0.02


class ConstantEnv(gym.Env):
    """The same observation every step, a 2-D Box action that is never clipped, reward 0."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([0.3, -0.2, 0.7], np.float32), {}

    def step(self, action):
        return np.array([0.3, -0.2, 0.7], np.float32), 0.0, False, False, {}


def _constant_envs(n: int) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv(
        [ConstantEnv for _ in range(n)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )


def _rollout_actions(freq: int, num_steps: int, rollouts: int) -> list[np.ndarray]:
    torch.manual_seed(0)
    envs = _constant_envs(2)
    agent = FCAgent(envs, sde=GSDEConfig(sample_freq=freq))
    state = RolloutState.start(agent, envs, seed=0)
    out = []
    for _ in range(rollouts):
        buf = RolloutBuffer(num_steps, 2)
        run_rollout(agent, buf, num_steps, envs, state)
        out.append(buf.get().actions.numpy().copy())  # (T, N, A)
    return out


@pytest.mark.parametrize("freq", [-1, 1, 3])
def test_noise_is_redrawn_exactly_every_sde_sample_freq_steps(freq: int) -> None:
    """The mean is the same at every step (constant observation, no update), so an action
    changes exactly when the matrices are redrawn: at each rollout's start and every ``freq``
    steps; each env has its own matrix."""
    acts = _rollout_actions(freq, num_steps=8, rollouts=2)
    for a in acts:
        for t in range(1, 8):
            redraw = freq > 0 and t % freq == 0
            assert np.array_equal(a[t], a[t - 1]) != redraw, t
        assert not np.allclose(a[0, 0], a[0, 1])  # one matrix per env
    assert not np.allclose(acts[0][-1], acts[1][0])  # a new rollout draws anew
    for a, b in zip(acts, _rollout_actions(freq, num_steps=8, rollouts=2), strict=True):
        assert np.array_equal(a, b)  # same seed, same actions


def test_float64_bounded_box_gets_clipped_float64_actions_and_stores_the_sampled_ones() -> None:
    seen = []

    class Bounded(ConstantEnv):
        action_space = gym.spaces.Box(-0.1, 0.1, (3,), np.float64)

        def step(self, action):
            seen.append(action)
            return super().step(action)

    torch.manual_seed(0)
    envs = gym.vector.SyncVectorEnv([Bounded], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = FCAgent(envs, sde=GSDEConfig(full_std=False))
    nn.init.constant_(agent.actor_logstd, 1.0)  # noise far beyond the bounds
    state = RolloutState.start(agent, envs, seed=0)
    buf = RolloutBuffer(4, 1)
    run_rollout(agent, buf, 4, envs, state)
    stored = buf.get().actions[:, 0].double().numpy()  # (T, 3)
    assert np.abs(stored).max() > 0.1  # the sampled actions, unclipped
    assert all(a.dtype == np.float64 and np.abs(a).max() <= 0.1 for a in seen)
    np.testing.assert_allclose(np.stack(seen), stored.clip(-0.1, 0.1), rtol=1e-6)


def test_agent_params_log_prob_and_greedy_against_the_layers() -> None:
    """params = [mean, features]; log-prob from the actor's own layers by hand; the greedy
    (evaluation) action is the mean; the plain agent's params are the mean alone."""
    torch.manual_seed(0)
    envs = _constant_envs(2)
    agent = FCAgent(envs, sde=GSDEConfig(full_std=False))
    plain = FCAgent(envs)
    assert agent.actor_logstd.shape == (64, 1) and plain.actor_logstd.shape == (2,)
    obs = torch.randn(5, 3)
    params = agent._step(obs, None, torch.zeros(5))[0]
    z = agent.actor[:-1](obs)
    mean = agent.actor(obs)
    assert params.shape == (5, 2 + 64)
    torch.testing.assert_close(params[:, :2], mean)
    torch.testing.assert_close(params[:, 2:], z)
    assert torch.equal(agent.greedy(params), params[:, :2])
    var = (z**2).sum(-1, keepdim=True) * agent.actor_logstd.exp()[0] ** 2 + EPSILON
    a = torch.randn(5, 2)
    want = torch.distributions.Normal(mean, var.sqrt()).log_prob(a).sum(-1)
    torch.testing.assert_close(agent.distribution(params).log_prob(a), want)
    begin, act = deterministic_policy(agent)
    begin()
    np.testing.assert_allclose(act(obs[0].numpy()), mean[0].detach().numpy(), rtol=1e-6)


def test_cnn_features_are_the_noise_features() -> None:
    class ImageEnv(ConstantEnv):
        observation_space = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)

    envs = gym.vector.SyncVectorEnv([ImageEnv], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    agent = FCAgent(envs, encoder="cnn", sde=GSDEConfig())
    x = torch.rand(2, 40, 40, 3)
    params = agent._step(x, None, torch.zeros(2))[0]
    assert params.shape == (2, 2 + 512) and agent.actor_logstd.shape == (512, 2)
    torch.testing.assert_close(params[:, 2:], agent.encoder(x))


# ----------------------------------------------------------------- configs and agents

SDE = dict(use_sde=True, sde_sample_freq=4, log_std_init=-1.0)
SMALL = dict(num_envs=2, num_steps=16, num_minibatches=2, update_epochs=2, num_checkpoints=2)
PENDULUM = EnvironmentConfig(env_id="Pendulum-v1", max_steps=20)


def test_short_run_on_a_box_env_learns_log_std_and_is_reproducible() -> None:
    oc = OnlineTrainConfig(total_timesteps=3 * 32, ortho_init=False, **SDE, **SMALL)
    run = RunConfig(seed=2, track=False, eval_episodes=1)
    agent, stats = train_ppo(run, oc, PENDULUM)
    assert agent.actor_logstd.shape == (64, 1) and stats.global_step == 96
    assert np.isfinite(stats.updates[-1]["loss"]) and not torch.all(agent.actor_logstd == -1.0)
    again, stats2 = train_ppo(run, oc, PENDULUM)
    assert stats2.episode_returns == stats.episode_returns
    for p, q in zip(agent.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(p, q)


def test_resume_with_gsde_continues_the_same_run(tmp_path) -> None:
    """4 updates straight == 2 updates, crash, resume, 2 more (the matrices of the next rollout
    come from the restored global RNG)."""
    oc = OnlineTrainConfig(total_timesteps=4 * 32, normalize_obs=True, **SDE, **SMALL)
    run = RunConfig(seed=3, track=False)
    straight, s_stats = train_ppo(run, oc, PENDULUM, run_dir=tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.rmtree(tmp_path / "b" / "checkpoints" / "checkpoint_0001")
    torch.manual_seed(12345)
    resumed, r_stats = train_ppo(run, oc, PENDULUM, run_dir=tmp_path / "b", resume=True)
    for (name, p), q in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(p, q), name
    assert r_stats.episode_returns == s_stats.episode_returns
    strip = [{k: v for k, v in u.items() if k != "sps"} for u in s_stats.updates]
    assert [{k: v for k, v in u.items() if k != "sps"} for u in r_stats.updates] == strip


def test_stored_log_probs_are_the_update_s_at_the_same_parameters() -> None:
    """The rollout's log-probs (with the matrices) equal ppo_update's (without them) on the
    stored, normalized observations and actions: the first ratio is 1."""
    torch.manual_seed(0)
    envs = make_vector_env(PENDULUM, 2)
    oc = OnlineTrainConfig(normalize_obs=True, **SDE)
    agent = get_agent(None, envs, PENDULUM, oc)
    state = RolloutState.start(agent, envs, seed=0)
    buf = RolloutBuffer(16, 2)
    run_rollout(agent, buf, 16, envs, state)
    with torch.no_grad():
        for mb in agent.minibatches(buf, oc):
            logp = agent.distribution(agent._evaluate(mb)[0]).log_prob(mb.actions)
            torch.testing.assert_close(logp, mb.logprobs, atol=1e-5, rtol=1e-5)
    envs.close()


def test_ppod_trains_with_gsde_on_box_demos(tmp_path) -> None:
    """PPO+D takes gSDE (its demo steps store log-prob 0 whatever the distribution)."""
    from rlstore.agents.ppod import PPODTrainConfig, train_ppod
    from rlstore.buffers.demo_files import save_npz_demo

    env = gym.make("Pendulum-v1", max_episode_steps=20)
    obs = [env.reset(seed=0)[0]]
    acts = np.linspace(-2, 2, 20, dtype=np.float32)[:, None]
    rews = []
    for a in acts:
        o, r, *_ = env.step(a)
        obs.append(o)
        rews.append(r)
    save_npz_demo(tmp_path / "d.npz", np.array(obs), acts, np.array(rews, np.float32))
    cfg = PPODTrainConfig.from_dict(
        {
            "environment": {"env_id": "Pendulum-v1", "max_steps": 20},
            "run": {"track": False, "eval_episodes": 1, "seed": 1},
            "online": {"total_timesteps": 64, **SDE, **SMALL},
            "ppod": {"demos_dir": str(tmp_path), "rho": 0.5},
        }
    )
    agent, stats = train_ppod(cfg)
    assert agent.sde == GSDEConfig(sample_freq=4) and agent.actor_logstd.shape == (64, 1)
    assert np.isfinite(stats.updates[-1]["loss"]) and len(stats.evaluations) == 1


def test_compat_src_ppo_agent_rolls_out_and_learns_with_gsde() -> None:
    from rlstore.compat import src_ppo

    oc = OnlineTrainConfig(total_timesteps=32, **SDE, **SMALL)
    envs = make_vector_env(PENDULUM, oc.num_envs)
    memory = src_ppo.Memory(envs, oc, "cpu")
    agent = src_ppo.get_agent(None, envs, PENDULUM, oc)
    assert isinstance(agent, src_ppo.FCAgent) and agent.sde == GSDEConfig(sample_freq=4)
    optimizer, scheduler = agent.make_optimizer(oc.num_updates, 1e-3, 0.0)
    agent.rollout(memory, oc.num_steps, envs)
    agent.learn(memory, oc, optimizer, scheduler, False)
    assert memory.global_step == 32 and not torch.all(agent.actor_logstd == -1.0)
    envs.close()


def test_log_std_init_and_ortho_init_without_gsde() -> None:
    envs = make_vector_env(PENDULUM, 1)
    oc = OnlineTrainConfig(log_std_init=-0.5, ortho_init=False)
    fc = get_agent(None, envs, PENDULUM, oc)
    assert torch.equal(fc.actor_logstd, torch.full((1,), -0.5))
    assert fc.critic[0].bias.abs().sum() > 0  # PyTorch's default init; CleanRL's zeroes it
    assert get_agent(None, envs, PENDULUM, OnlineTrainConfig()).critic[0].bias.abs().sum() == 0
    lstm = get_agent(LSTMModelConfig(), envs, PENDULUM, OnlineTrainConfig(log_std_init=-0.5))
    assert torch.equal(lstm.actor_logstd, torch.full((1,), -0.5))
    envs.close()


@pytest.mark.parametrize(
    ("online", "match"),
    [
        ({"use_sde": True, "sde_sample_freq": 0}, "online.sde_sample_freq: expected -1"),
        ({"use_sde": True, "sde_sample_freq": -2}, "online.sde_sample_freq"),
        ({"sde_sample_freq": 4}, "online.use_sde: .* got use_sde false with sde_sample_freq 4"),
        ({"full_std": False}, "online.use_sde: .*full_std False"),
        ({"log_std_init": float("nan")}, "online.log_std_init"),
        ({"log_std_init": 45.0}, "online.log_std_init: .*less than or equal to 20"),
        ({"log_std_init": -90.0}, "online.log_std_init: .*greater than or equal to -20"),
        ({"log_std_init": "-3"}, "online.log_std_init"),
        ({"use_sde": "yes"}, "online.use_sde"),
    ],
)
def test_config_errors_name_the_field(online: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TrainConfig.from_dict({"online": online})


@pytest.mark.parametrize("log_std_init", [-20.0, 20.0])
@pytest.mark.parametrize("use_sde", [False, True])
def test_log_std_init_at_its_bounds_gives_finite_log_probs(log_std_init: float, use_sde: bool):
    """45 (gSDE) or -90 (plain) made the first rollout's log-probabilities NaN: refused."""
    envs = make_vector_env(PENDULUM, 2)
    oc = OnlineTrainConfig(use_sde=use_sde, log_std_init=log_std_init)
    agent = get_agent(None, envs, PENDULUM, oc)
    state = RolloutState.start(agent, envs, seed=0)
    buf = RolloutBuffer(4, 2)
    run_rollout(agent, buf, 4, envs, state)  # the buffer refuses non-finite log-probs
    assert torch.isfinite(buf.get().logprobs).all()
    envs.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sample_freq": 0}, "sample_freq: expected -1 or an int >= 1, got 0"),
        ({"sample_freq": 2.5}, "sample_freq: .* got 2.5"),
        ({"sample_freq": -2}, "sample_freq: .* got -2"),
        ({"sample_freq": True}, "sample_freq: .* got True"),
        ({"full_std": 0}, "full_std: expected a bool, got 0"),
    ],
)
def test_gsde_config_checks_its_fields(kwargs: dict, match: str) -> None:
    """The agents' public GSDEConfig: 0 acted as -1 and 2.5 redrew at steps 0, 5, 10."""
    with pytest.raises(ConfigError, match=match):
        GSDEConfig(**kwargs)
    assert GSDEConfig(sample_freq=np.int64(3)).sample_freq == 3


def test_a_run_config_from_before_gsde_loads_without_it() -> None:
    old = TrainConfig.from_dict({"online": {"num_envs": 2}}).to_dict()
    for key in ("use_sde", "sde_sample_freq", "log_std_init", "full_std", "ortho_init"):
        del old["online"][key]
    cfg = TrainConfig.model_validate(TrainConfig.fill_legacy(old))
    o = cfg.online
    assert (o.use_sde, o.sde_sample_freq, o.log_std_init, o.full_std, o.ortho_init) == (
        False, -1, 0.0, True, True
    )  # fmt: skip


@pytest.mark.parametrize(
    ("model", "online", "match"),
    [
        (LSTMModelConfig(), {"use_sde": True}, "online.use_sde: an option of the fc agent"),
        (
            TransformerModelConfig(),
            {"use_sde": True},
            "online.use_sde: .* with TransformerModelConfig",
        ),
        (LSTMModelConfig(), {"ortho_init": False}, "online.ortho_init: .*lstm.ortho_init"),
        (None, {"use_sde": True}, r"sde \(online.use_sde\): expected a Box action space"),
        (None, {"log_std_init": -1.0}, r"online.log_std_init: .* 0.0 for Discrete\(2\), got -1.0"),
    ],
)
def test_agents_that_refuse_gsde(model, online: dict, match: str) -> None:
    env = PENDULUM if model is not None else EnvironmentConfig(env_id="CartPole-v1")
    envs = make_vector_env(env, 1)
    with pytest.raises(ConfigError, match=match):
        get_agent(model, envs, env, OnlineTrainConfig(**online))
    envs.close()


def test_impala_refuses_use_sde() -> None:
    with pytest.raises(ConfigError, match=r"impala\.use_sde: unknown key"):
        ImpalaTrainConfig.from_dict({"impala": {"use_sde": True}})


def test_temperature_scales_the_same_noise() -> None:
    torch.manual_seed(0)
    envs = _constant_envs(1)
    agent = FCAgent(envs, sde=GSDEConfig())
    acts = {}
    for temp in (1.0, 0.5):
        torch.manual_seed(1)
        state = RolloutState.start(agent, envs, seed=0)
        buf = RolloutBuffer(2, 1)
        run_rollout(agent, buf, 2, envs, state, sampling_method="temperature",
                    sampling_kwargs={"temperature": temp})  # fmt: skip
        acts[temp] = buf.get().actions[0, 0]
    mean = agent.greedy(agent._step(state.next_obs, None, torch.zeros(1))[0])[0]
    torch.testing.assert_close(acts[0.5] - mean, 0.5 * (acts[1.0] - mean))


def test_mountain_car_continuous_config_has_rl_zoo_settings() -> None:
    from importlib import resources

    from rlstore.agents import ppo

    name = ppo.DEFAULT_CONFIGS["MountainCarContinuous-v0"]
    with resources.as_file(resources.files("rlstore").joinpath("configs", name)) as f:
        o = ppo.load_config(f).online
    assert (o.num_envs, o.num_steps, o.minibatch_size, o.update_epochs) == (1, 8, 8, 10)
    assert (o.gamma, o.gae_lambda, o.ent_coef, o.learning_rate) == (0.9999, 0.9, 0.00429, 7.77e-5)
    assert (o.clip_coef, o.vf_coef, o.max_grad_norm, o.total_timesteps) == (0.1, 0.38, 5, 20_000)
    assert not o.decay_lr and not o.clip_vloss and o.normalize_obs and o.normalize_reward
    assert (o.use_sde, o.sde_sample_freq, o.full_std) == (True, -1, True)
    assert (o.log_std_init, o.ortho_init) == (-3.29, False)
