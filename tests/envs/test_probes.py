"""Exact dynamics of the probe environments, and GAE targets on them against hand values."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rlstore.envs.probes import (
    PROBE_IDS,
    Probe1,
    Probe2,
    Probe3,
    Probe4,
    Probe5,
    Probe6,
    Probe7,
    register_probes,
)
from rlstore.errors import ConfigError, SpecError
from rlstore.returns import gae

ALL = [Probe1, Probe2, Probe3, Probe4, Probe5, Probe6, Probe7]
GAMMA = 0.9


def run_episode(env: gym.Env, policy, seed: int | None = None) -> dict[str, list]:
    """Play one episode; ``policy(obs_value, t) -> action``. Returns per-step lists."""
    obs, info = env.reset(seed=seed)
    assert info == {}
    out: dict[str, list] = {"obs": [], "action": [], "reward": [], "term": [], "trunc": []}
    for t in range(100):
        a = policy(float(obs[0]), t)
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in zip(out, (float(obs[0]), a, r, term, trunc), strict=True):
            out[k].append(v)
        obs = nxt
        if term or trunc:
            out["final_obs"] = [float(obs[0])]
            return out
        assert t < 99
    raise AssertionError("episode did not end")


# ---------------------------------------------------------------- API conformance


@pytest.mark.parametrize("cls", ALL)
def test_check_env_and_spaces(cls: type[gym.Env]) -> None:
    env = cls()
    check_env(env, skip_render_check=True)
    assert env.observation_space.shape == (1,)
    assert env.observation_space.dtype == np.float32
    assert isinstance(env.action_space, gym.spaces.Discrete)
    expected_n = {Probe1: 1, Probe2: 1, Probe3: 1}.get(cls, 2)
    assert env.action_space.n == expected_n


def test_register_probes_is_idempotent_and_makes_every_id() -> None:
    register_probes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register_probes()  # second call: no "overriding environment" warning
    for i, env_id in enumerate(PROBE_IDS, start=1):
        env = gym.make(env_id)
        assert type(env.unwrapped).__name__ == f"Probe{i}"
        env.reset(seed=0)
        env.close()
    assert gym.make("rlstore/Probe7-v0", num_actions=5).action_space.n == 5


def test_import_does_not_register() -> None:
    code = (
        "import gymnasium, rlstore, rlstore.envs.probes; "
        "print(any(k.startswith('rlstore/Probe') for k in gymnasium.registry))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("cls", ALL)
def test_step_validates_action_and_needs_reset(cls: type[gym.Env]) -> None:
    env = cls()
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(SpecError, match=r"action: expected an int in \[0, "):
        env.step(env.action_space.n)
    # finish the episode, then stepping again needs a reset
    run_episode(env, lambda o, t: 0, seed=1)
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)


def test_probe7_rejects_bad_num_actions() -> None:
    with pytest.raises(ConfigError, match="num_actions"):
        Probe7(num_actions=1)


# ---------------------------------------------------------------- exact dynamics


def test_probe1_dynamics() -> None:
    ep = run_episode(Probe1(), lambda o, t: 0, seed=0)
    assert ep["obs"] == [0.0] and ep["reward"] == [1.0]
    assert ep["term"] == [True] and ep["trunc"] == [False]


def test_probe2_dynamics_and_seeding() -> None:
    env = Probe2()
    first = [run_episode(env, lambda o, t: 0, seed=s)["obs"][0] for s in range(40)]
    again = [run_episode(env, lambda o, t: 0, seed=s)["obs"][0] for s in range(40)]
    assert first == again  # same seed, same observation
    assert set(first) == {-1.0, 1.0}
    env.reset(seed=3)
    for _ in range(20):  # unseeded resets continue the env's RNG stream
        ep = run_episode(env, lambda o, t: 0)
        assert ep["reward"] == ep["obs"] and ep["term"] == [True]


def test_probe3_dynamics() -> None:
    ep = run_episode(Probe3(), lambda o, t: 0, seed=0)
    assert ep["obs"] == [0.0, 1.0]
    assert ep["reward"] == [0.0, 1.0]
    assert ep["term"] == [False, True] and ep["trunc"] == [False, False]


@pytest.mark.parametrize(("action", "reward"), [(0, -1.0), (1, 1.0)])
def test_probe4_dynamics(action: int, reward: float) -> None:
    ep = run_episode(Probe4(), lambda o, t: action, seed=0)
    assert ep["obs"] == [0.0] and ep["reward"] == [reward] and ep["term"] == [True]


def test_probe5_dynamics() -> None:
    env = Probe5()
    seen = set()
    for s in range(30):
        match = run_episode(env, lambda o, t: int(o), seed=s)
        miss = run_episode(env, lambda o, t: 1 - int(o), seed=s)
        assert match["obs"] == miss["obs"] and match["obs"][0] in (0.0, 1.0)
        seen.add(match["obs"][0])
        assert match["reward"] == [1.0] and miss["reward"] == [-1.0]
        assert match["term"] == [True]
    assert seen == {0.0, 1.0}


def test_probe6_dynamics() -> None:
    good = run_episode(Probe6(), lambda o, t: int(o) % 2, seed=0)
    assert good["obs"] == [float(t) for t in range(10)]
    assert good["final_obs"] == [10.0]
    assert good["reward"] == [1.0] * 10
    assert good["term"] == [False] * 9 + [True] and not any(good["trunc"])
    bad = run_episode(Probe6(), lambda o, t: 1 - int(o) % 2, seed=0)
    assert bad["reward"] == [0.0] * 10
    # always action 1: rewarded on odd steps only
    ones = run_episode(Probe6(), lambda o, t: 1, seed=0)
    assert ones["reward"] == [0.0, 1.0] * 5


@pytest.mark.parametrize("num_actions", [2, 5])
def test_probe7_dynamics(num_actions: int) -> None:
    env = Probe7(num_actions=num_actions)
    cues = set()
    for s in range(30):
        ep = run_episode(env, lambda o, t: 0, seed=s)
        cue = ep["obs"][0]
        cues.add(cue)
        assert ep["obs"][1:] == [-1.0, -1.0, -1.0]  # blanks, distinct from both cues
        assert ep["term"] == [False, False, False, True]
        assert ep["reward"][:3] == [0.0, 0.0, 0.0]
        assert ep["reward"][3] == (1.0 if cue == 0.0 else 0.0)

        def recall(o: float, t: int, c: float = cue) -> int:
            return int(c) if t == 3 else num_actions - 1  # earlier actions do not matter

        assert run_episode(env, recall, seed=s)["reward"] == [0.0, 0.0, 0.0, 1.0]
    assert cues == {0.0, 1.0}


def test_probe7_memoryless_policy_gets_half() -> None:
    """Without memory the last decision sees only a blank: any fixed action earns 1/2 on average."""
    env = Probe7()
    rewards = [sum(run_episode(env, lambda o, t: 1, seed=s)["reward"]) for s in range(400)]
    assert abs(np.mean(rewards) - 0.5) < 0.1  # binomial(400, 1/2): std 0.025, so 4 sigma


# ---------------------------------------------------------------- GAE targets, hand values


def gae_on_episodes(
    episodes: list[dict[str, list]], values_fn, *, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate episodes into one (T,) rollout and run rlstore.returns.gae with V = values_fn."""
    obs = [o for ep in episodes for o in ep["obs"]]
    rewards = np.array([r for ep in episodes for r in ep["reward"]])
    term = np.array([x for ep in episodes for x in ep["term"]])
    trunc = np.array([x for ep in episodes for x in ep["trunc"]])
    values = np.array([values_fn(o) for o in obs])
    # successor of step t: next row while the episode goes on; terminal rows are never read
    next_values = np.append(values[1:], np.nan)
    return gae(rewards, values, next_values, term, trunc, gamma=GAMMA, lam=lam)


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
def test_gae_targets_probe1_and_2(lam: float) -> None:
    ep1 = run_episode(Probe1(), lambda o, t: 0, seed=0)
    adv, ret = gae_on_episodes([ep1], lambda o: 0.25, lam=lam)
    # one terminal step: A = r - V = 1 - 0.25, R = 1
    np.testing.assert_allclose(adv, [0.75])
    np.testing.assert_allclose(ret, [1.0])
    eps = [run_episode(Probe2(), lambda o, t: 0, seed=s) for s in range(6)]
    _, ret = gae_on_episodes(eps, lambda o: 0.0, lam=lam)
    np.testing.assert_allclose(ret, [ep["obs"][0] for ep in eps])  # R = r = obs


def test_gae_targets_probe3() -> None:
    eps = [run_episode(Probe3(), lambda o, t: 0, seed=s) for s in range(3)]
    # V == 0, lam = 1 (Monte-Carlo): R = [gamma * 1, 1] per episode, = [0.9, 1]
    _, ret = gae_on_episodes(eps, lambda o: 0.0, lam=1.0)
    np.testing.assert_allclose(ret, [0.9, 1.0] * 3)
    # V == 0, lam = 0.5: delta = [0 + 0.9*0 - 0, 1] = [0, 1]; A_0 = 0 + 0.9*0.5*1 = 0.45
    adv, ret = gae_on_episodes(eps, lambda o: 0.0, lam=0.5)
    np.testing.assert_allclose(ret, [0.45, 1.0] * 3)
    # V = V* (V(0) = gamma, V(1) = 1): every delta is 0, so A = 0 and R = V* for any lambda
    adv, ret = gae_on_episodes(eps, lambda o: 1.0 if o == 1.0 else GAMMA, lam=0.7)
    np.testing.assert_allclose(adv, np.zeros(6), atol=1e-12)
    np.testing.assert_allclose(ret, [0.9, 1.0] * 3)


def test_gae_targets_probe4_and_5() -> None:
    eps = [run_episode(Probe4(), lambda o, t, a=a: a, seed=0) for a in (0, 1, 1)]
    adv, ret = gae_on_episodes(eps, lambda o: 0.5, lam=0.95)
    np.testing.assert_allclose(ret, [-1.0, 1.0, 1.0])
    np.testing.assert_allclose(adv, [-1.5, 0.5, 0.5])  # r - V
    eps = [run_episode(Probe5(), lambda o, t: int(o), seed=s) for s in range(4)]
    eps += [run_episode(Probe5(), lambda o, t: 1 - int(o), seed=s) for s in range(4)]
    _, ret = gae_on_episodes(eps, lambda o: 0.0, lam=0.95)
    np.testing.assert_allclose(ret, [1.0] * 4 + [-1.0] * 4)


def test_gae_targets_probe6_closed_form() -> None:
    ep = run_episode(Probe6(), lambda o, t: int(o) % 2, seed=0)
    _, ret = gae_on_episodes([ep, ep], lambda o: 0.0, lam=1.0)
    # R_t = sum_{k=0}^{9-t} gamma^k = (1 - gamma^(10-t)) / (1 - gamma); R_9 = 1, R_0 ~ 6.513
    closed = [(1 - GAMMA ** (10 - t)) / (1 - GAMMA) for t in range(10)]
    np.testing.assert_allclose(ret, closed * 2)
    assert ret[9] == pytest.approx(1.0) and ret[8] == pytest.approx(1.9)


def test_gae_targets_probe7() -> None:
    env = Probe7()
    ep = run_episode(env, lambda o, t: 0, seed=0)
    cue = int(ep["obs"][0])
    ep = run_episode(env, lambda o, t: cue, seed=0)
    _, ret = gae_on_episodes([ep], lambda o: 0.0, lam=1.0)
    np.testing.assert_allclose(ret, [0.729, 0.81, 0.9, 1.0])  # gamma^(3-t) with gamma = 0.9
