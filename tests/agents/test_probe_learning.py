"""Learning tests: PPO agents must solve the probe environments on 3 seeds each.

Tolerances are the library's acceptance criteria (algorithms.md section 7) and can fail: Probe3
runs with gamma = 0.9, so a discount applied twice (V([0]) = 0.81) or not at all (1.0) misses
V([0]) = 0.9 by far more than 0.02; a policy that ignores the observation gets pi(a=o|o) = 0.5
on Probe5; an agent without memory gets a mean reward of 0.5 on Probe7.

The agents are measured through their own networks here (``agent.critic`` / ``agent.actor`` for
the FC agent), independently of ``probe_cli.trace_episode``; only the hyper-parameters come from
``probe_cli``. Cost: about 15 short training runs of 2k steps and 9 runs of 8k steps (Probe7);
Probe6 (40k steps x 3 seeds, ~10-20 s each) is the longest.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlstore.agents.networks import FCAgent
from rlstore.agents.ppo import make_vector_env, train_ppo
from rlstore.agents.ppo_config import EnvironmentConfig, RunConfig
from rlstore.agents.probe_cli import evaluate_probe, probe_model_config, probe_online_config
from rlstore.agents.sampling import sample_from_agents
from rlstore.cli import main

SEEDS = (0, 1, 2)


def train(probe: int, agent: str, seed: int, **overrides):
    oc = probe_online_config(probe, **overrides)
    agent_obj, stats = train_ppo(
        RunConfig(seed=seed, track=False),
        oc,
        EnvironmentConfig(env_id=f"rlstore/Probe{probe}-v0"),
        probe_model_config(agent),
    )
    agent_obj.eval()
    return agent_obj, stats, oc


def fc_value_and_probs(agent: FCAgent, obs: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """V(o) and pi(.|o) of an FC agent for a batch of scalar observations."""
    assert isinstance(agent, FCAgent)
    x = torch.tensor(obs, dtype=torch.float32)[:, None]
    with torch.no_grad():
        v = agent.critic(x).squeeze(-1).double().numpy()
        p = torch.softmax(agent.actor(x), -1).double().numpy()
    return v, p


@pytest.mark.parametrize("seed", SEEDS)
def test_probe1_value(seed: int) -> None:
    agent, _, _ = train(1, "fc", seed)
    v, _ = fc_value_and_probs(agent, [0.0])
    assert abs(v[0] - 1.0) < 0.02, f"V([0]) = {v[0]:.4f}, expected 1"


@pytest.mark.parametrize("seed", SEEDS)
def test_probe2_value_depends_on_observation(seed: int) -> None:
    agent, _, _ = train(2, "fc", seed)
    v, _ = fc_value_and_probs(agent, [-1.0, 1.0])
    np.testing.assert_allclose(v, [-1.0, 1.0], atol=0.02)


@pytest.mark.parametrize("seed", SEEDS)
def test_probe3_discounting(seed: int) -> None:
    agent, _, oc = train(3, "fc", seed)
    assert oc.gamma == 0.9
    v, _ = fc_value_and_probs(agent, [0.0, 1.0])
    # V([0]) = 0 + gamma * V([1]) = 0.9 * 1 = 0.9, V([1]) = 1
    np.testing.assert_allclose(v, [0.9, 1.0], atol=0.02)


@pytest.mark.parametrize("seed", SEEDS)
def test_probe4_policy(seed: int) -> None:
    agent, _, _ = train(4, "fc", seed)
    v, p = fc_value_and_probs(agent, [0.0])
    assert p[0, 1] > 0.95, f"pi(a=1) = {p[0, 1]:.3f}"
    assert abs(v[0] - 1.0) < 0.1  # V = 2 pi(1) - 1 under the learned policy


@pytest.mark.parametrize("seed", SEEDS)
def test_probe5_policy_and_value_together(seed: int) -> None:
    agent, _, _ = train(5, "fc", seed)
    v, p = fc_value_and_probs(agent, [0.0, 1.0])
    assert p[0, 0] > 0.9 and p[1, 1] > 0.9, f"pi(o|o) = {p[0, 0]:.3f}, {p[1, 1]:.3f}"
    np.testing.assert_allclose(v, [1.0, 1.0], atol=0.2)


@pytest.mark.parametrize("seed", SEEDS)
def test_probe6_state_dependent_policy(seed: int) -> None:
    """Every one of the ten states, not their average: min_t pi(t mod 2 | t) > 0.5, which no
    policy that ignores t reaches (half the states want each action: min(p, 1 - p) <= 0.5),
    nor one fitting only the linear trend of the targets (it gets some t wrong); and the median
    state > 0.95, near the regularised optimum: a run that learns too little fails.

    ``rlstore probe``'s criterion too. Not min > 0.9: late knock-backs (see probe_cli) leave one
    state at 0.72-0.90 on 4 seeds in 26 (0.92-0.99 on the rest; at 80k steps still 1 in 20),
    so 0.9 held for seeds 0-2 on this CPU by luck. Seeds 0-25: lowest state 0.718, lowest
    median 0.98 (2026-11-24)."""
    agent, _, _ = train(6, "fc", seed)
    t = np.arange(10)
    _, p = fc_value_and_probs(agent, [float(x) for x in t])
    correct = p[t, t % 2]
    msg = f"pi(t mod 2 | t) = {np.round(correct, 3)}"
    assert correct.min() > 0.5 and np.median(correct) > 0.95, msg


def probe7_mean_reward(agent, seed: int) -> float:
    """Mean return of 200 episodes sampled from the trained policy (basic sampling)."""
    (tr,) = sample_from_agents([agent], rollout_length=100, num_envs=8, seed=1000 + seed)
    returns = tr.episode_returns()
    assert returns.size == 200  # 4-step episodes: 8 envs x 100 steps
    return float(returns.mean())


@pytest.mark.parametrize("kind", ["lstm", "transformer"])
@pytest.mark.parametrize("seed", SEEDS)
def test_probe7_memory_agents_remember_the_cue(kind: str, seed: int) -> None:
    agent, _, _ = train(7, kind, seed)
    assert probe7_mean_reward(agent, seed) > 0.9


@pytest.mark.parametrize("seed", SEEDS)
def test_probe7_fc_agent_cannot_solve_it(seed: int) -> None:
    """Negative control: the same budget without memory stays near the 0.5 of guessing."""
    agent, _, _ = train(7, "fc", seed)
    assert probe7_mean_reward(agent, seed) < 0.7


# ---------------------------------------------------------------- rlstore probe


def test_evaluate_probe_fails_an_untrained_agent() -> None:
    cfg = EnvironmentConfig(env_id="rlstore/Probe4-v0")
    envs = make_vector_env(cfg, 1)
    agent = FCAgent(envs, cfg)
    envs.close()
    (check,) = evaluate_probe(4, "fc", agent, gamma=0.99)
    # the actor's output layer is initialised with std 0.01: pi(1) ~ 0.5
    assert not check.passed and abs(check.measured - 0.5) < 0.05


@pytest.mark.parametrize(
    ("name", "correct", "passed"),
    [
        ("solved", [0.99] * 10, True),
        ("one state knocked back", [0.99] * 9 + [0.72], True),
        ("ignores t", [0.7, 0.3] * 5, False),  # pi(a=1) = 0.3 everywhere
        ("one state wrong", [0.99] * 9 + [0.4], False),
        ("learned too little", [0.9] * 10, False),
    ],
)
def test_probe6_criterion(monkeypatch: pytest.MonkeyPatch, name, correct, passed) -> None:
    """Greedy action right in every state (min > 0.5) and the median state > 0.95."""
    import rlstore.agents.probe_cli as probe_cli

    t = np.arange(10)
    probs = np.empty((10, 2))
    probs[t, t % 2] = correct
    probs[t, 1 - t % 2] = 1 - np.asarray(correct)
    monkeypatch.setattr(probe_cli, "trace_episode", lambda agent, ep: (probs, np.zeros(10)))
    checks = evaluate_probe(6, "fc", agent=None, gamma=0.0)
    assert all(c.passed for c in checks) == passed, (name, checks)


def test_cli_probe_passes_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--probes", "4", "--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "Probe4" in out and "PASS" in out and "1/1 checks passed" in out
    # one update of 128 steps cannot move pi(1) past 0.95 (the ratio clip allows ~ 0.5 x 1.2)
    assert main(["probe", "--probes", "4", "--seeds", "0", "--total-steps", "128"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "0/1 checks passed" in out


def test_cli_probe_rejects_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["probe", "--agents", "mlp"])
    assert main(["probe", "--probes", "9"]) == 2
    assert "probe: expected an int in 1..7" in capsys.readouterr().err
