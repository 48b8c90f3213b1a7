"""DQN trainer (rlstore.agents.dqn): targets on a constructed episode, the prioritized path,
exact resume, configs, velora's ``warm``; the CartPole learning run is marked slow."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from _helpers import register_test_env

from rlstore import NStepReplay
from rlstore.agents.apex import ApexTrainConfig
from rlstore.agents.dqn import (
    DEFAULT_CONFIGS,
    DQNAgent,
    DQNConfig,
    DQNTrainConfig,
    EnvInfo,
    _train,
    load_config,
    runner,
    td_step,
    td_targets,
    train_dqn,
)
from rlstore.agents.run import adam
from rlstore.buffers.replay import ReplayBuffer
from rlstore.checkpoint import load, load_state, save_state
from rlstore.compat.velora import ReplayBuffer as VeloraReplayBuffer
from rlstore.errors import CheckpointError, ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "src" / "rlstore" / "configs"


class CountEnv(gym.Env[np.ndarray, np.int64]):
    """Observation ``[t, episode]``, reward 1 per step; every episode lasts 3 steps and ends
    terminated (even episodes) or truncated (odd ones), so a reset observation ``[0, k]``
    differs from every final observation ``[3, k - 1]``."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t, self.k = 0, -1

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t, self.k = 0, self.k + 1
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.k], np.float32)

    def step(self, action: Any) -> Any:
        self.t += 1
        end = self.t == 3
        return self._obs(), 1.0, end and self.k % 2 == 0, end and self.k % 2 == 1, {}


COUNT_ID = register_test_env("rlstore_test/Count-v0", CountEnv)


def _cfg(env_id: str = "CartPole-v1", run: dict[str, Any] | None = None, **dqn: Any
         ) -> DQNTrainConfig:  # fmt: skip
    base = {"total_timesteps": 400, "learning_starts": 64, "batch_size": 16, "train_freq": 50,
            "gradient_steps": 4, "hidden_sizes": [32], "num_checkpoints": 0}  # fmt: skip
    return DQNTrainConfig.from_dict(
        {
            "run": {"track": False, "seed": 3, "eval_episodes": 0, **(run or {})},
            "environment": {"env_id": env_id},
            "dqn": {**base, **dqn},
        }  # fmt: skip
    )


def _v(agent: DQNAgent, obs: list[float]) -> float:
    """Double-DQN bootstrap value of one observation, from the agent's two networks."""
    x = torch.tensor([obs], dtype=torch.float32)
    with torch.no_grad():
        return float(agent.target(x)[0, agent.q(x).argmax()])


@pytest.mark.parametrize("n_step", [1, 3])
def test_truncation_bootstraps_from_the_final_observation_termination_does_not(
    tmp_path: Path, n_step: int
) -> None:
    # 12 steps of CountEnv through the trainer (no update: learning_starts > steps), then the
    # stored transitions from the checkpointed buffer and the targets td_targets builds
    cfg = _cfg(COUNT_ID, total_timesteps=12, train_freq=12, learning_starts=1000, gamma=0.5,
               n_step=n_step, num_checkpoints=1)  # fmt: skip
    agent, stats = train_dqn(cfg, run_dir=tmp_path)
    assert stats.episode_returns == [3.0] * 4 and stats.episode_end_steps == [3, 6, 9, 12]
    buf = load(tmp_path / "checkpoints" / "checkpoint_0000", prefix="buffer_")
    batch = NStepReplay(buf, n=n_step, gamma=0.5).batch(np.arange(12))
    # the truncated episode (k = 1) ends with next_obs = final obs [3, 1], not the reset [0, 2]
    assert batch.obs[:, 0].tolist() == [0, 1, 2] * 4
    y = td_targets(agent, batch, double_q=True).tolist()
    v = _v(agent, [3.0, 1.0])  # bootstrap of the truncation (episode 1)
    if n_step == 1:
        # mid-episode: 1 + 0.5 V(s_{t+1}); terminal (k = 0, 2): 1; truncated (k = 1, 3): 1 + 0.5 V
        assert y[2] == pytest.approx(1.0) and y[8] == pytest.approx(1.0)
        assert y[5] == pytest.approx(1.0 + 0.5 * v, rel=1e-6)
        assert y[0] == pytest.approx(1.0 + 0.5 * _v(agent, [1.0, 0.0]), rel=1e-6)
    else:
        # from t = 0: 1 + 0.5 + 0.25 = 1.75, then 0 (terminated) or 0.125 V(final) (truncated)
        assert y[0] == pytest.approx(1.75) and y[6] == pytest.approx(1.75)
        assert y[3] == pytest.approx(1.75 + 0.125 * v, rel=1e-6)
        # from t = 2 of the truncated episode: one step, 1 + 0.5 V(final)
        assert y[5] == pytest.approx(1.0 + 0.5 * v, rel=1e-6)
    assert batch.discount[[2, 8]].tolist() == [0.0, 0.0]


def test_double_q_picks_the_action_with_the_online_net() -> None:
    agent = DQNAgent(EnvInfo(gym.spec(COUNT_ID), CountEnv.observation_space,
                             CountEnv.action_space), DQNConfig(hidden_sizes=[4]))  # fmt: skip
    with torch.no_grad():  # online prefers action 0, target values action 1 higher
        for net, bias in ((agent.q, [1.0, 0.0]), (agent.target, [2.0, 5.0])):
            for p in net.parameters():
                p.zero_()
            net.advantage.bias.copy_(torch.tensor(bias))
    buf = ReplayBuffer(10, seed=0)
    buf.add(np.zeros(2, np.float32), 0, 1.0, np.ones(2, np.float32), False, False)
    batch = NStepReplay(buf, n=1, gamma=0.5).batch(np.array([0]))
    assert td_targets(agent, batch, double_q=True).tolist() == [1.0 + 0.5 * 2.0]
    assert td_targets(agent, batch, double_q=False).tolist() == [1.0 + 0.5 * 5.0]


@pytest.mark.parametrize("dueling", [False, True])
def test_q_network_is_its_layers_applied_in_order(dueling: bool) -> None:
    # forward calls the layers functionally; the twin calls the modules (same ops: bitwise)
    net = DQNAgent(EnvInfo(None, CountEnv.observation_space, CountEnv.action_space),
                   DQNConfig(hidden_sizes=[8, 5], dueling=dueling)).q  # fmt: skip
    x = torch.randn(7, 2)
    h = net.body(x)
    a = net.advantage(h)
    want = a if net.value is None else net.value(h) + a - a.mean(1, keepdim=True)
    torch.testing.assert_close(net(x), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0])
def test_explore_draws_what_the_always_greedy_formula_draws(eps: float) -> None:
    agent = DQNAgent(EnvInfo(None, CountEnv.observation_space, CountEnv.action_space),
                     DQNConfig(hidden_sizes=[8]))  # fmt: skip
    calls: list[int] = []
    agent.q.register_forward_hook(lambda *_: calls.append(1))
    obs = torch.randn(5, 2)
    torch.manual_seed(4)
    got = [agent.explore(obs, eps) for _ in range(20)]
    torch.manual_seed(4)
    for acted in got:  # the twin: Q-values always computed, the same two draws
        greedy = agent.q(obs).argmax(1)
        use_random = torch.rand(5) < eps
        assert torch.equal(acted, torch.where(use_random, torch.randint(2, (5,)), greedy))
    # all-random steps skip the Q-network: never at eps = 1, every step at eps = 0
    if eps in (0.0, 1.0):
        assert len(calls) - 20 == (20 if eps == 0.0 else 0)


def test_td_step_clips_like_clip_grad_norm() -> None:
    # the twin: the same step with torch's clip_grad_norm_. Plain SGD (lr 1) makes the parameter
    # change the clipped gradient itself (Adam's update is nearly scale-free and would hide a
    # wrong clip); the norms are summed in a different order, hence a tolerance
    agent, _, buf, _ = _prioritized_setup()
    batch = NStepReplay(buf, n=3, gamma=0.9).sample(32)
    for max_norm in (1e-3, 1e3):  # clipping active, inactive
        ref = copy.deepcopy(agent)
        opt = torch.optim.SGD(agent.q.parameters(), lr=1.0)
        ref_opt = torch.optim.SGD(ref.q.parameters(), lr=1.0)
        before = [p.detach().clone() for p in agent.q.parameters()]
        td_step(agent, opt, batch, True, max_norm)
        y = td_targets(ref, batch, True)
        q = ref.q(batch.obs).gather(1, batch.action.view(-1, 1)).squeeze(1)
        loss = (batch.weights * torch.nn.functional.smooth_l1_loss(q, y, reduction="none")).mean()
        ref_opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.q.parameters(), max_norm)
        ref_opt.step()
        steps = [b - a for a, b in zip(before, agent.q.parameters(), strict=True)]
        ref_steps = [b - a for a, b in zip(before, ref.q.parameters(), strict=True)]
        for got, want in zip(steps, ref_steps, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-9)
        if max_norm < 1:
            total = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(d) for d in steps])
            )
            assert total.item() == pytest.approx(max_norm, rel=1e-3)


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_target_copies_only_after_the_online_net_changed(
    monkeypatch: pytest.MonkeyPatch, tau: float
) -> None:
    calls: list[float] = []
    update = DQNAgent.update_target
    monkeypatch.setattr(DQNAgent, "update_target", lambda a, t: (calls.append(t), update(a, t)))
    train_dqn(_cfg(tau=tau, target_update_interval=10))
    # 8 periods of 50 steps, 5 scheduled updates each; training after periods 2..8 (step > 64).
    # tau = 1: the first copy, then one after each training but the last (an unchanged
    # net's copy is a no-op); Polyak averaging moves the target every time
    assert len(calls) == (1 + 6 if tau == 1.0 else 40)


class _Scaled:
    """A replay whose batches carry their importance weights times ``scale`` (recorded)."""

    def __init__(self, replay: NStepReplay, scale: float) -> None:
        self.replay, self.buffer, self.scale, self.batches = replay, replay.buffer, scale, []

    def sample(self, batch_size: int) -> Any:
        b = self.replay.sample(batch_size)
        b = b._replace(weights=b.weights * self.scale)
        self.batches.append(b)
        return b


def _prioritized_setup() -> tuple[DQNAgent, torch.optim.Optimizer, ReplayBuffer, DQNConfig]:
    dc = DQNConfig(hidden_sizes=[16], batch_size=32, gradient_steps=1, prioritized=True,
                   per_alpha=0.7, per_eps=0.01)  # fmt: skip
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    agent = DQNAgent(EnvInfo(env.spec, env.observation_space, env.action_space), dc)
    env.close()
    sampler = {"kind": "prioritized", "alpha": 0.7, "beta": 0.5, "eps": 0.01}
    buf = ReplayBuffer(1000, num_envs=2, seed=0, sampler=sampler)
    buf.warm(None, 400, env_id="CartPole-v1", num_envs=2, seed=0)
    return agent, adam(agent.q.parameters(), 1e-3), buf, dc


def test_prioritized_path_sets_priorities_from_td_errors_and_weights_scale_the_loss() -> None:
    agent, opt, buf, dc = _prioritized_setup()
    before = copy.deepcopy(agent)
    rec = _Scaled(NStepReplay(buf, n=1, gamma=dc.gamma), 1.0)
    _train(agent, opt, rec, dc)  # type: ignore[arg-type]
    (b,) = rec.batches
    y = td_targets(before, b, dc.double_q)
    with torch.no_grad():
        q = before.q(b.obs).gather(1, b.action.view(-1, 1)).squeeze(1)
    want = (np.abs((q - y).numpy()).astype(np.float64) + 0.01) ** 0.7
    tree = buf._sampler.tree  # type: ignore[attr-defined]
    got = tree.leaves[b.indices.numpy() % len(tree.leaves)]
    np.testing.assert_allclose(got, want, rtol=1e-5)  # priorities = (|TD error| + eps)^alpha
    assert buf.sample(64).weights.min() < 1.0  # unequal priorities: weights below 1
    # weights reach the loss: zero weights leave every parameter where it was
    agent, opt, buf, dc = _prioritized_setup()
    start = copy.deepcopy(agent.q.state_dict())
    _train(agent, opt, _Scaled(NStepReplay(buf, n=1, gamma=dc.gamma), 0.0), dc)  # type: ignore[arg-type]
    assert all(torch.equal(start[k], v) for k, v in agent.q.state_dict().items())


def test_prioritized_n_step_run_changes_priorities_end_to_end(tmp_path: Path) -> None:
    cfg = _cfg(prioritized=True, n_step=3, num_checkpoints=1)
    train_dqn(cfg, run_dir=tmp_path)
    buf = load(tmp_path / "checkpoints" / "checkpoint_0000", prefix="buffer_")
    leaves = buf._sampler.tree.leaves
    live = leaves[leaves > 0]
    assert len(live) == len(buf) and len(np.unique(live)) > 50  # updated, not all max priority
    assert buf._sampler.steps == cfg.dqn.num_periods * cfg.dqn.gradient_steps - 4  # one period idle


@pytest.mark.parametrize("extra", [{}, {"prioritized": True, "n_step": 2, "dueling": True}])
def test_resume_continues_the_run_exactly(tmp_path: Path, extra: dict[str, Any]) -> None:
    cfg = _cfg(num_envs=2, num_checkpoints=2, run={"eval_interval": 200, "eval_episodes": 1},
               **extra)  # fmt: skip
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    agent_a, stats_a = runner(cfg, run_dir=a_dir, resume=False)
    assert {"config.yaml", "learning_curve.png", "checkpoints"} <= {p.name for p in a_dir.iterdir()}
    assert load_config(a_dir / "config.yaml") == cfg
    shutil.copytree(a_dir, b_dir)
    shutil.rmtree(b_dir / "checkpoints" / "checkpoint_0001")  # resume from the middle
    agent_b, stats_b = runner(cfg, run_dir=b_dir, resume=True)
    sd_a, sd_b = agent_a.state_dict(), agent_b.state_dict()
    assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)
    assert stats_b.episode_returns == stats_a.episode_returns
    assert stats_b.episode_end_steps == stats_a.episode_end_steps
    assert stats_b.evaluations == stats_a.evaluations
    assert [s for s, _ in stats_a.evaluations] == [200, 400]  # periods of 100 steps
    drop = ("sps",)
    assert [{k: v for k, v in u.items() if k not in drop} for u in stats_b.updates] == [
        {k: v for k, v in u.items() if k not in drop} for u in stats_a.updates
    ]
    assert stats_b.global_step == stats_a.global_step == 400
    assert (b_dir / "checkpoints" / "checkpoint_0001").is_dir()  # written again


def test_resume_refuses_a_checkpoint_of_another_config_or_buffer(tmp_path: Path) -> None:
    cfg = _cfg(num_checkpoints=1)
    train_dqn(cfg, run_dir=tmp_path)
    with pytest.raises(CheckpointError, match="config.dqn"):
        train_dqn(_cfg(num_checkpoints=1, gamma=0.9), run_dir=tmp_path, resume=True)
    folder = tmp_path / "checkpoints" / "checkpoint_0000"
    from rlstore.checkpoint import save

    save(load(folder, prefix="buffer_"), folder, prefix="buffer_")  # another save of it
    with pytest.raises(CheckpointError, match="buffer_save_id"):
        train_dqn(cfg, run_dir=tmp_path, resume=True)
    with pytest.raises(ConfigError, match="resume"):
        train_dqn(cfg, run_dir=tmp_path / "empty", resume=True)


@pytest.mark.parametrize(
    ("key", "value"),
    [("counters", {"period": -1}), ("history", {"updates": ["x"]}), ("epsilon", 2.0),
     ("episode_return", np.zeros(3)), ("model", {})],
)  # fmt: skip
def test_resume_refuses_a_crafted_checkpoint(tmp_path: Path, key: str, value: Any) -> None:
    cfg = _cfg(num_checkpoints=1)
    train_dqn(cfg, run_dir=tmp_path)
    folder = tmp_path / "checkpoints" / "checkpoint_0000"
    sd = load_state(folder, prefix="dqn_")
    sd[key] = {**sd[key], **value} if isinstance(value, dict) and value else value
    save_state(folder, sd, prefix="dqn_")  # a consistent (checksummed) but wrong state
    with pytest.raises(CheckpointError, match=key):
        train_dqn(cfg, run_dir=tmp_path, resume=True)


def test_resume_names_the_misshapen_parameter_like_the_other_trainers(tmp_path: Path) -> None:
    # one check for PPO, DQN and SAC (run_checkpoint.check_module_state): key, expected, got
    cfg = _cfg(num_checkpoints=1)
    train_dqn(cfg, run_dir=tmp_path)
    folder = tmp_path / "checkpoints" / "checkpoint_0000"
    sd = load_state(folder, prefix="dqn_")
    sd["model"]["q.advantage.bias"] = torch.zeros(3, dtype=torch.float64)
    save_state(folder, sd, prefix="dqn_")
    want = (
        r"model\.q\.advantage\.bias: expected a tensor of shape \(2,\) and dtype torch\.float32, "
        r"got \(\(3,\), torch\.float64\)"
    )
    with pytest.raises(CheckpointError, match=want):
        train_dqn(cfg, run_dir=tmp_path, resume=True)


def test_shipped_config_has_rl_zoo_settings_but_lr_and_final_eps() -> None:
    assert next(iter(DEFAULT_CONFIGS)) == "CartPole-v1"  # the fallback of other envs
    cfg = load_config(CONFIGS / DEFAULT_CONFIGS["CartPole-v1"])
    d = cfg.dqn
    zoo = (1e-3, 64, 100_000, 1000, 0.99, 10, 256, 128, 0.16, 0.0, [256, 256], 50_000)
    assert (d.learning_rate, d.batch_size, d.buffer_size, d.learning_starts, d.gamma,
            d.target_update_interval, d.train_freq, d.gradient_steps, d.exploration_fraction,
            d.exploration_final_eps, d.hidden_sizes, d.total_timesteps) == zoo  # fmt: skip
    assert d.double_q and cfg.environment.env_id == "CartPole-v1"


def test_mountain_car_gets_its_own_zoo_config_not_cartpoles() -> None:
    """``rlstore train --algo dqn --env MountainCar-v0`` used CartPole's config (50k steps,
    lr 1e-3, target copied every 10 steps, train_freq 256) and stayed at -200 (the car never
    reached the flag); RL Zoo's MountainCar-v0 settings (hyperparams/dqn.yml) reach -103 to -126
    (greedy evaluation at 120k, seeds 1-3, 2026-11-24)."""
    import argparse

    from rlstore.agents import dqn
    from rlstore.agents.train_cli import add_arguments, build_config, default_config

    path, fallback = default_config("dqn", dqn, "MountainCar-v0", None)
    assert path.name == "dqn_MountainCar-v0.yaml" and not fallback
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(p.parse_args(["--algo", "dqn", "--env", "MountainCar-v0"]))
    d = cfg.dqn
    zoo = (4e-3, 128, 10_000, 1000, 0.98, 600, 16, 8, 0.2, 0.07, [256, 256], 120_000)
    assert (d.learning_rate, d.batch_size, d.buffer_size, d.learning_starts, d.gamma,
            d.target_update_interval, d.train_freq, d.gradient_steps, d.exploration_fraction,
            d.exploration_final_eps, d.hidden_sizes, d.total_timesteps) == zoo  # fmt: skip
    # SB3's DQN: no double Q, uniform replay, 1-step targets
    assert (d.double_q, d.prioritized, d.n_step, d.tau) == (False, False, 1, 1.0)
    assert cfg.environment.env_id == "MountainCar-v0"


@pytest.mark.parametrize(
    ("dqn", "match"),
    [({"unknown": 1}, "unknown"), ({"batch_size": 10, "buffer_size": 5}, "batch_size"),
     ({"hidden_sizes": [0]}, "hidden_sizes"), ({"tau": 0.0}, "tau"), ({"n_step": 0}, "n_step"),
     ({"gamma": "0.9"}, "gamma"), ({"hidden_sizes": [True]}, "hidden_sizes"),
     ({"total_timesteps": 1e4}, "total_timesteps"), ({"dueling": 1}, "dueling")],
)  # fmt: skip
def test_bad_config_raises_config_error(dqn: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DQNTrainConfig.from_dict({"dqn": dqn})


def test_apex_refuses_a_batch_larger_than_its_replay_like_dqn() -> None:
    with pytest.raises(ConfigError, match=r"apex.batch_size: expected <= buffer_size \(100\)"):
        ApexTrainConfig.from_dict({"apex": {"buffer_size": 100, "batch_size": 101}})


def test_non_discrete_actions_are_refused() -> None:
    with pytest.raises(ConfigError, match="Discrete"):
        train_dqn(_cfg("Pendulum-v1"))


def test_velora_warm_fills_a_buffer_with_the_agent() -> None:
    agent, _ = train_dqn(_cfg(total_timesteps=100, train_freq=100))
    assert agent.env.spec.id == "CartPole-v1"
    buf = VeloraReplayBuffer(200, state_dim=4, action_dim=1, hidden_dim=8, seed=0)
    buf.warm(agent, 100, num_envs=2, seed=0)
    assert len(buf) == 100
    assert set(np.unique(buf.sample(50).actions.numpy())) <= {0.0, 1.0}
    actions, hidden = agent.predict(torch.zeros(3, 4), None, train_mode=False)
    assert actions.shape == (3,) and hidden is None


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_dqn_learns_cartpole_within_50k_steps(seed: int) -> None:
    cfg = load_config(CONFIGS / DEFAULT_CONFIGS["CartPole-v1"])
    d = cfg.to_dict()
    d["run"].update(seed=seed, track=False, eval_episodes=0)
    d["dqn"].update(num_checkpoints=0)
    _, stats = train_dqn(DQNTrainConfig.from_dict(d))
    reached = stats.first_step_reaching(475.0)
    assert reached is not None and reached <= 50_000, stats.episode_returns[-20:]


def test_the_shared_replay_checkpoint_loader_checks_the_format_and_the_files(tmp_path) -> None:
    from rlstore.agents.replay_checkpoint import load_replay_checkpoint

    cfg = _cfg(num_checkpoints=1)
    agent, _ = train_dqn(cfg, run_dir=tmp_path)
    folder = tmp_path / "checkpoints" / "checkpoint_0000"
    sd, buffer_sd = load_replay_checkpoint(folder, "dqn_", "rlstore.dqn/1", cfg, agent, "DQN")
    assert {"format", "config", "model", "rng", "envs", "buffer_save_id"} <= set(sd)
    assert all(t.device.type == "cpu" for t in sd["model"].values()) and "storage" in buffer_sd
    with pytest.raises(CheckpointError, match="format: expected 'rlstore.sac/1'"):
        load_replay_checkpoint(folder, "dqn_", "rlstore.sac/1", cfg, agent, "DQN")
    with pytest.raises(CheckpointError, match="not a readable SAC checkpoint"):
        load_replay_checkpoint(folder, "sac_", "rlstore.sac/1", cfg, agent, "SAC")


@pytest.mark.parametrize("learning_starts", [64, 200])
def test_per_beta_reaches_one_at_the_last_gradient_step(monkeypatch, learning_starts: int) -> None:
    """beta is annealed over the gradient steps that run: none before ``learning_starts``."""
    from rlstore.samplers.prioritized import PrioritizedSampler

    used: list[float] = []
    sample = PrioritizedSampler.sample

    def spy(self: PrioritizedSampler, batch_size: int, beta: Any = None) -> Any:
        used.append(self.current_beta() if beta is None else beta)
        return sample(self, batch_size, beta)

    monkeypatch.setattr(PrioritizedSampler, "sample", spy)
    cfg = _cfg(prioritized=True, per_beta=0.4, learning_starts=learning_starts)
    train_dqn(cfg)
    first_train = next(p for p in range(8) if (p + 1) * 50 > learning_starts)
    assert len(used) == (8 - first_train) * 4 == cfg.dqn.num_training_periods * 4
    assert used[0] == pytest.approx(0.4)
    assert used[-1] == pytest.approx(1.0 - 0.6 / len(used))  # one step short of the end: 1
