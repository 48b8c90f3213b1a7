"""sample_from_agents: sampling methods against closed-form action frequencies, recorded data
against the probe dynamics, and the trajectory file round trip."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from rlstore.agents.networks import FCAgent, get_agent
from rlstore.agents.ppo import make_vector_env
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    LSTMModelConfig,
    OnlineTrainConfig,
    TransformerModelConfig,
)
from rlstore.agents.sampling import (
    Trajectories,
    TrajectoryWriter,
    load_trajectories,
    sample_from_agents,
    save_trajectories,
)
from rlstore.errors import CheckpointError, ConfigError

# action logits: probabilities 0.1, 0.2, 0.3, 0.4 and ~0 for the fifth action
LOGITS = np.log(np.array([1.0, 2.0, 3.0, 4.0, 1e-9]))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def fixed_policy_agent(logits: np.ndarray) -> FCAgent:
    """FC agent on Probe7 with 5 actions whose policy ignores the observation: logits fixed."""
    cfg = EnvironmentConfig(env_id="rlstore/Probe7-v0", env_kwargs={"num_actions": len(logits)})
    envs = make_vector_env(cfg, 1)
    agent = FCAgent(envs, cfg)
    envs.close()
    last = agent.actor[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.as_tensor(logits, dtype=torch.float32))
    return agent


def _freqs(tr: Trajectories, n: int) -> np.ndarray:
    return np.bincount(tr.actions.reshape(-1), minlength=n) / tr.actions.size


@pytest.mark.parametrize(
    ("method", "kwargs", "expected"),
    [
        ("basic", {}, [0.1, 0.2, 0.3, 0.4, 0.0]),
        ("greedy", {}, [0.0, 0.0, 0.0, 1.0, 0.0]),
        # softmax(logits / 2) = sqrt(p) / sum sqrt(p) = [1, 1.414, 1.732, 2, ~0] / 6.146
        ("temperature", {"temperature": 2.0}, list(_softmax(LOGITS / 2.0))),
        # top 2 of [0.1, 0.2, 0.3, 0.4]: renormalised 0.3 / 0.7 and 0.4 / 0.7
        ("topk", {"k": 2}, [0.0, 0.0, 3 / 7, 4 / 7, 0.0]),
        ("topk", {"k": 1}, [0.0, 0.0, 0.0, 1.0, 0.0]),
    ],
)
def test_sampling_method_frequencies(method: str, kwargs: dict, expected: list[float]) -> None:
    agent = fixed_policy_agent(LOGITS)
    (tr,) = sample_from_agents(
        [agent], rollout_length=250, num_envs=8, sampling_method=method, seed=3, **kwargs
    )
    # 2000 draws: the std of a frequency is at most sqrt(0.25 / 2000) = 0.011; 0.045 is 4 sigma
    np.testing.assert_allclose(_freqs(tr, 5), expected, atol=0.045)
    if method in ("greedy",) or kwargs.get("k") == 1:
        assert np.all(tr.actions == 3)
    if method == "topk":
        assert set(np.unique(tr.actions)) <= {2, 3}


def test_temperature_reference_values() -> None:
    # the closed form used above: sqrt(1), sqrt(2), sqrt(3), sqrt(4) over 6.146 (the fifth
    # action carries sqrt(1e-9) ~ 3e-5 of unnormalised mass, hence atol 1e-4)
    np.testing.assert_allclose(
        _softmax(LOGITS / 2.0)[:4], np.sqrt([1, 2, 3, 4]) / np.sqrt([1, 2, 3, 4]).sum(), atol=1e-4
    )


def test_continuous_actions_greedy_and_temperature() -> None:
    cfg = EnvironmentConfig(env_id="Pendulum-v1")
    envs = make_vector_env(cfg, 1)
    agent = FCAgent(envs, cfg)
    envs.close()
    with torch.no_grad():
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.fill_(0.3)
        agent.actor_logstd.fill_(math.log(0.5))
    (greedy,) = sample_from_agents([agent], 50, num_envs=2, sampling_method="greedy")
    np.testing.assert_allclose(greedy.actions, 0.3, atol=1e-6)  # the Gaussian mean
    (basic,) = sample_from_agents([agent], 250, num_envs=8, sampling_method="basic")
    (cold,) = sample_from_agents(
        [agent], 250, num_envs=8, sampling_method="temperature", temperature=0.5
    )
    # 2000 draws of N(0.3, 0.5) (clipping at +-2 is 3.4 sigma away): sample std within 10 %
    assert basic.actions.std() == pytest.approx(0.5, rel=0.1)
    assert cold.actions.std() == pytest.approx(0.25, rel=0.1)  # std x temperature
    assert cold.actions.mean() == pytest.approx(0.3, abs=0.03)
    with pytest.raises(ConfigError, match="topk"):
        sample_from_agents([agent], 10, sampling_method="topk", k=1)


def test_recorded_data_follows_probe6_dynamics() -> None:
    cfg = EnvironmentConfig(env_id="rlstore/Probe6-v0")
    envs = make_vector_env(cfg, 3)
    agent = get_agent(None, envs, cfg, OnlineTrainConfig())
    envs.close()
    (tr,) = sample_from_agents([agent], rollout_length=35, num_envs=3, seed=1)
    obs = tr.observations[..., 0]
    assert obs.shape == (35, 3) and tr.actions.shape == (35, 3) and tr.rewards.dtype == np.float32
    # rows are transition-aligned: obs is the step counter t, reward 1 iff action == t mod 2
    np.testing.assert_array_equal(obs, np.tile(np.arange(35) % 10, (3, 1)).T)
    np.testing.assert_array_equal(tr.rewards, (tr.actions == obs % 2).astype(np.float32))
    np.testing.assert_array_equal(tr.terminated, obs == 9)
    assert not tr.truncated.any()
    # three complete 10-step episodes per env (the fourth is cut by the end of the data)
    np.testing.assert_array_equal(tr.episode_lengths(), [10] * 9)
    ref = [tr.rewards[10 * e : 10 * e + 10, n].sum() for n in range(3) for e in range(3)]
    np.testing.assert_allclose(tr.episode_returns(), ref)


@pytest.mark.parametrize("model_config", [LSTMModelConfig(), TransformerModelConfig()])
def test_recurrent_agents_sample_probe7(model_config) -> None:
    cfg = EnvironmentConfig(env_id="rlstore/Probe7-v0")
    envs = make_vector_env(cfg, 2)
    agent = get_agent(model_config, envs, cfg, OnlineTrainConfig())
    envs.close()
    (tr,) = sample_from_agents([agent], rollout_length=16, num_envs=2, sampling_method="greedy")
    np.testing.assert_array_equal(tr.episode_lengths(), [4] * 8)
    obs = tr.observations[..., 0]
    np.testing.assert_array_equal(obs[1::4], -1.0)  # blanks after the cue
    assert set(np.unique(obs[0::4])) <= {0.0, 1.0}


def test_same_seed_same_trajectories_and_global_rng_untouched() -> None:
    agent = fixed_policy_agent(LOGITS)
    torch.manual_seed(11)
    expected_next = torch.rand(3)
    torch.manual_seed(11)
    a = sample_from_agents([agent], 50, num_envs=2, seed=5)[0]
    assert torch.equal(torch.rand(3), expected_next)  # global torch RNG restored
    b = sample_from_agents([agent], 50, num_envs=2, seed=5)[0]
    c = sample_from_agents([agent], 50, num_envs=2, seed=6)[0]
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.observations, b.observations)
    assert not np.array_equal(a.actions, c.actions)


def test_round_trip_through_file(tmp_path: Path) -> None:
    agents = [fixed_policy_agent(LOGITS), fixed_policy_agent(LOGITS[::-1].copy())]
    out = sample_from_agents(
        agents, 30, trajectory_path=tmp_path / "trajs", num_envs=2, sampling_method="topk", k=3
    )
    back = load_trajectories(tmp_path / "trajs")
    assert len(back) == 2
    for orig, loaded in zip(out, back, strict=True):
        for name in ("observations", "actions", "rewards", "terminated", "truncated"):
            x, y = getattr(orig, name), getattr(loaded, name)
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)
        assert loaded.info == orig.info
    assert back[1].info["agent_index"] == 1 and back[0].info["sampling_kwargs"] == {"k": 3}
    assert back[0].info["env_id"] == "rlstore/Probe7-v0"


def test_dict_observations_round_trip(tmp_path: Path, rng: np.random.Generator) -> None:
    tr = Trajectories(
        observations={
            "image": rng.integers(0, 255, (3, 2, 4, 4, 3), dtype=np.uint8),
            "direction": rng.integers(0, 4, (3, 2)),
        },
        actions=rng.integers(0, 3, (3, 2)),
        rewards=rng.normal(size=(3, 2)).astype(np.float32),
        terminated=np.array([[False, True], [False, False], [True, False]]),
        truncated=np.zeros((3, 2), bool),
        info={"env_id": "x"},
    )
    save_trajectories(tmp_path, [tr])
    (back,) = load_trajectories(tmp_path)
    assert set(back.observations) == {"image", "direction"}
    for key in ("image", "direction"):
        np.testing.assert_array_equal(back.observations[key], tr.observations[key])
    # hand values: env 0 ends one episode at t = 2 (3 steps), env 1 at t = 0 (1 step)
    np.testing.assert_array_equal(back.episode_lengths(), [3, 1])
    np.testing.assert_allclose(
        back.episode_returns(),
        [tr.rewards[:, 0].sum(dtype=np.float64), tr.rewards[0, 1].astype(np.float64)],
    )


def test_writer_drops_non_numeric_observation_entries() -> None:
    w = TrajectoryWriter({"env_id": "mg"})
    w.start({"image": np.zeros((2, 3)), "mission": ("go", "go")})
    w.accumulate_trajectory(
        {"image": np.ones((2, 3)), "mission": ("a", "b")}, [1.0, 0.0], [True, False],
        [False, False], np.array([1, 2]), {},
    )  # fmt: skip
    tr = w.finish()
    assert set(tr.observations) == {"image"}
    np.testing.assert_array_equal(tr.observations["image"], np.zeros((1, 2, 3)))
    with pytest.raises(ConfigError, match="start"):
        TrajectoryWriter().accumulate_trajectory(0, 0, False, False, 0)
    with pytest.raises(ConfigError, match="no steps"):
        TrajectoryWriter().finish()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sampling_method": "nucleus"}, "sampling_method: expected one of"),
        ({"sampling_method": "temperature"}, "temperature: expected a finite float > 0"),
        ({"sampling_method": "temperature", "temperature": 0.0}, "temperature: expected"),
        ({"sampling_method": "greedy", "temperature": 0.5}, "temperature: only used by"),
        ({"sampling_method": "basic", "k": 2}, "k: only used by"),
        ({"sampling_method": "topk"}, "k: expected an int >= 1"),
        ({"sampling_method": "topk", "k": 0}, "k: expected an int >= 1"),
        ({"sampling_method": "topk", "k": 6}, r"k: expected 1 <= k <= 5"),
        ({"rollout_length": 0}, "rollout_length: expected an int >= 1"),
        ({"num_envs": 0}, "num_envs: expected an int >= 1"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    agent = fixed_policy_agent(LOGITS)
    with pytest.raises(ConfigError, match=match):
        sample_from_agents([agent], **{"rollout_length": 5, **kwargs})


def test_agents_need_an_environment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="non-empty sequence"):
        sample_from_agents([], 5)
    agent = fixed_policy_agent(LOGITS)
    agent.environment_config = None
    with pytest.raises(ConfigError, match="environment_config"):
        sample_from_agents([agent], 5)
    # an explicit environment config works for such an agent
    cfg = EnvironmentConfig(env_id="rlstore/Probe7-v0", env_kwargs={"num_actions": 5})
    (tr,) = sample_from_agents([agent], 8, environment_config=cfg)
    assert tr.info["env_id"] == "rlstore/Probe7-v0"


def test_load_rejects_missing_or_foreign_files(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        load_trajectories(tmp_path / "nothing")
    from rlstore.checkpoint import save_state

    save_state(tmp_path / "other", {"x": np.zeros(2)}, prefix="trajectories_")
    with pytest.raises(CheckpointError, match="expected a trajectories file"):
        load_trajectories(tmp_path / "other")


def test_a_cpu_agent_leaves_every_cuda_rng_alone(monkeypatch) -> None:
    """torch.manual_seed would reseed every CUDA device and fork_rng(devices=[]) not restore it."""
    calls: list[str] = []
    for name in ("manual_seed", "manual_seed_all"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, name=name: calls.append(name))
    sample_from_agents([fixed_policy_agent(LOGITS)], 8, num_envs=2, seed=5)
    assert calls == []
