"""Tests of the PPO+D demo store against hand-computed values and naive references.

The mixer's tests are in test_demo_mixer.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlstore.buffers.demos import (
    Demo,
    DemoStore,
    cut_after_last_positive,
    list_demos,
    load_demo,
    save_demo,
    value_demo_probabilities,
)
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError


def demo(rewards, *, human=False, max_value=float("-inf"), obs_dim=2, offset=0.0):
    """A demo whose observation j is [offset + j, ...] and action j is j."""
    r = np.asarray(rewards, dtype=np.float32)
    obs = offset + np.repeat(np.arange(len(r), dtype=np.float32)[:, None], obs_dim, axis=1)
    return Demo(obs, np.arange(len(r)), r, human=human, max_value=max_value)


def cut_reference(rewards):
    last = -1
    for j, r in enumerate(rewards):
        if r > 0:
            last = j
    return len(rewards) if last < 0 else last + 1


# ---------------------------------------------------------------------- pure functions
def test_cut_after_last_positive_hand_cases():
    assert cut_after_last_positive(np.array([0.0, 0.0, 1.0, 0.0, 0.0])) == 3
    assert cut_after_last_positive(np.array([0.0, 0.0, 0.0])) == 3  # no positive: keep all
    assert cut_after_last_positive(np.array([-1.0, 2.0, -1.0])) == 2
    assert cut_after_last_positive(np.array([0.5])) == 1


@given(st.lists(st.sampled_from([-1.0, 0.0, 0.0, 0.5, 2.0]), min_size=1, max_size=30))
def test_cut_matches_loop(rewards):
    assert cut_after_last_positive(np.array(rewards)) == cut_reference(rewards)


def test_value_probabilities_hand_values():
    # [1, 2] ** 2 = [1, 4], sum 5
    np.testing.assert_allclose(value_demo_probabilities(np.array([1.0, 2.0]), 2.0), [0.2, 0.8])
    # negatives are clipped to 0: [0, 3] -> [0, 1]
    np.testing.assert_allclose(value_demo_probabilities(np.array([-2.0, 3.0]), 10.0), [0.0, 1.0])
    # all non-positive: uniform
    np.testing.assert_allclose(value_demo_probabilities(np.array([-1.0, 0.0]), 10.0), [0.5, 0.5])
    with pytest.raises(SpecError, match="max_values"):
        value_demo_probabilities(np.array([np.inf, 1.0]), 1.0)


def value_demo_probabilities_reference(max_values: list[float], alpha: float) -> list[float]:
    """Plain-loop twin of ``value_demo_probabilities``."""
    m = [v if v > 0.0 else 0.0 for v in max_values]
    total = 0.0
    for v in m:
        total += v**alpha
    if total == 0.0:
        return [1.0 / len(m)] * len(m)
    return [v**alpha / total for v in m]


@given(
    # two decimals: the naive v ** alpha neither underflows (0.01 ** 10) nor overflows (30 ** 10)
    st.lists(st.integers(-500, 3000).map(lambda k: k / 100), min_size=1, max_size=12),
    st.sampled_from([0.5, 1.0, 2.0, 10.0]),
)
def test_value_probabilities_match_loop(values, alpha):
    fast = value_demo_probabilities(np.array(values), alpha)
    ref = value_demo_probabilities_reference(values, alpha)
    np.testing.assert_allclose(fast, ref, rtol=1e-9, atol=1e-12)
    assert math.isclose(fast.sum(), 1.0, rel_tol=1e-12)


def test_demo_validates_lengths():
    with pytest.raises(SpecError, match="actions"):
        Demo(np.zeros((3, 2)), np.zeros(2), np.zeros(3))
    with pytest.raises(SpecError, match="rewards"):
        Demo(np.zeros((0, 2)), np.zeros(0), np.zeros(0))


# ---------------------------------------------------------------------- store rules
def test_constructor_errors():
    with pytest.raises(ConfigError, match="rho"):
        DemoStore(rho=1.5)
    with pytest.raises(ConfigError, match="rho \\+ phi"):
        DemoStore(rho=0.7, phi=0.4)
    with pytest.raises(ConfigError, match="alpha"):
        DemoStore(alpha=0.0)
    with pytest.raises(CapacityError, match="capacity"):
        DemoStore(capacity=0)


def test_reward_demo_acceptance_cut_and_emptying_on_new_maximum():
    store = DemoStore(capacity=10, rho=0.1, phi=0.3, seed=0)
    store.add_initial(demo([0.0, 0.5], human=True))  # total 0.5 -> threshold 0.5
    assert store.reward_threshold == 0.5 and store.max_demo_reward == 0.5
    # total 1 >= 0.5 and > max 0.5: agent reward demos emptied (none yet), human kept;
    # cut after the last positive reward: [0, 1, 0, 0] -> length 2
    assert store.offer_episode(np.zeros((4, 2)), np.arange(4), np.array([0, 1, 0, 0.0])) == "reward"
    assert [d.length for d in store.reward_demos] == [2, 2]
    # threshold = max(0.5, min(0.5, 1.0)) = 0.5; a total of 0.7 is a reward demo but no new max
    assert store.offer_episode(np.zeros((3, 2)), np.arange(3), np.array([0.7, 0, 0])) == "reward"
    assert len(store.reward_demos) == 3
    # a new maximum 2.0 empties the agent reward demos; the human one stays
    assert store.offer_episode(np.zeros((1, 2)), np.arange(1), np.array([2.0])) == "reward"
    assert [(d.human, d.total_reward) for d in store.reward_demos] == [(True, 0.5), (False, 2.0)]
    assert store.max_demo_reward == 2.0 and store.reward_threshold == 0.5
    # below threshold: value demo (store below capacity), with its max value
    assert store.offer_episode(np.zeros((2, 2)), np.arange(2), np.zeros(2), 3.0) == "value"
    assert store.value_demos[0].max_value == 3.0


def test_value_demo_acceptance_when_full():
    store = DemoStore(capacity=3, reward_threshold=10.0, seed=0)
    for mv in (5.0, 1.0, 3.0):
        assert store.offer_episode(np.zeros((2, 1)), np.arange(2), np.zeros(2), mv) == "value"
    # full: 0.5 < smallest (1.0) -> rejected; 2.0 >= 1.0 -> accepted, evicting the 1.0 one
    assert store.offer_episode(np.zeros((2, 1)), np.arange(2), np.zeros(2), 0.5) == "rejected"
    assert store.offer_episode(np.zeros((2, 1)), np.arange(2), np.zeros(2), 2.0) == "value"
    assert sorted(d.max_value for d in store.value_demos) == [2.0, 3.0, 5.0]


def test_eviction_order_value_first_then_longest_agent_reward_demo():
    store = DemoStore(capacity=4, seed=0)
    store.add_initial(demo([0.0] * 9 + [1.0], human=True))  # longest, but human
    store.reward_demos.append(store._register(demo([1.0] * 3)))
    store.reward_demos.append(store._register(demo([1.0] * 5)))
    store.value_demos.append(store._register(demo([0.0], max_value=4.0)))
    store.value_demos.append(store._register(demo([0.0], max_value=-1.0)))
    evicted = store.enforce_capacity()  # 5 > 4: the value demo with MaxValue -1 goes
    assert [d.max_value for d in evicted] == [-1.0]
    store.capacity = 2  # then the other value demo, then the longest agent reward demo (5)
    evicted = store.enforce_capacity()
    assert [(d.max_value, d.length) for d in evicted] == [(4.0, 1), (-np.inf, 5)]
    assert [d.length for d in store.reward_demos] == [10, 3]
    store.capacity = 0
    with pytest.raises(CapacityError, match="human"):
        store.enforce_capacity()


def test_initial_demos_beyond_capacity_raise():
    store = DemoStore(capacity=1)
    store.add_initial(demo([1.0]))
    with pytest.raises(CapacityError, match="capacity=1"):
        store.add_initial(demo([1.0]))


def test_annealing_hand_values_and_conservation():
    store = DemoStore(capacity=20, rho=0.1, phi=0.3, reward_threshold=0.0, seed=0)
    for mv in (1.0, 2.0, 3.0):  # total -1 < 0: value demos
        store.offer_episode(np.zeros((1, 1)), np.arange(1), np.array([-1.0]), mv)
    # 3 value demos: delta = min(0.3 / 3, 0.3) = 0.1 -> rho 0.2, phi 0.2
    store.offer_episode(np.zeros((1, 1)), np.arange(1), np.array([1.0]))
    assert math.isclose(store.rho, 0.2) and math.isclose(store.phi, 0.2)
    for _ in range(2):  # 0.2 -> 0.1 -> 0.0
        store.offer_episode(np.zeros((1, 1)), np.arange(1), np.array([1.0]))
    assert math.isclose(store.rho, 0.4) and math.isclose(store.phi, 0.0, abs_tol=1e-15)
    store.offer_episode(np.zeros((1, 1)), np.arange(1), np.array([1.0]))  # phi stays at 0
    assert math.isclose(store.rho, 0.4) and store.phi == 0.0


episode = st.tuples(
    st.lists(st.sampled_from([-1.0, 0.0, 0.0, 1.0, 2.0, 3.0]), min_size=1, max_size=6),
    st.floats(-3.0, 3.0),
)


@given(st.lists(episode, min_size=1, max_size=40), st.integers(1, 6))
def test_store_invariants_over_random_offers(episodes, capacity):
    store = DemoStore(capacity=capacity, rho=0.2, phi=0.5, seed=1)
    last_threshold = store.reward_threshold
    for rewards, mv in episodes:
        n = len(rewards)
        verdict = store.offer_episode(np.zeros((n, 1)), np.arange(n), np.array(rewards), mv)
        cut = cut_reference(rewards)
        total = float(np.float32(rewards[:cut]).astype(np.float64).sum())
        assert (verdict == "reward") == (total >= last_threshold)
        assert len(store) <= capacity
        assert store.reward_threshold >= last_threshold  # monotone
        last_threshold = store.reward_threshold
        assert math.isclose(store.rho + store.phi, 0.7, rel_tol=1e-12)
        assert 0.0 <= store.phi <= 0.5 + 1e-12
        # no human demos: every reward demo has the maximal total (a new max empties the rest)
        assert all(d.total_reward == store.max_demo_reward for d in store.reward_demos)
        assert all(d.rewards.size == cut_reference(d.rewards.tolist()) for d in store.reward_demos)


# ---------------------------------------------------------------------- sampling
def three_sigma(count, n, p):
    return abs(count - n * p) <= 3 * math.sqrt(n * p * (1 - p)) + 1e-9


def test_source_frequencies_within_three_sigma():
    store = DemoStore(capacity=5, rho=0.2, phi=0.3, seed=7)
    store.add_initial(demo([1.0]))
    store.value_demos.append(store._register(demo([0.0], max_value=1.0)))
    n = 20000
    draws = [store.sample_source() for _ in range(n)]
    for src, p in (("reward_demo", 0.2), ("value_demo", 0.3), ("env", 0.5)):
        assert three_sigma(draws.count(src), n, p), (src, draws.count(src))
    store.value_demos.clear()  # empty value list: its share falls back to env
    draws = [store.sample_source() for _ in range(n)]
    assert draws.count("value_demo") == 0 and three_sigma(draws.count("env"), n, 0.8)


def test_value_demo_sampling_frequencies_match_probabilities():
    store = DemoStore(capacity=5, alpha=2.0, seed=0)
    for mv in (1.0, 2.0, 3.0):
        store.value_demos.append(store._register(demo([0.0], max_value=mv)))
    n = 12000
    ids = [store.sample_demo("value_demo").demo_id for _ in range(n)]
    p = [1 / 14, 4 / 14, 9 / 14]  # v ** 2 / (1 + 4 + 9)
    for k, d in enumerate(store.value_demos):
        assert three_sigma(ids.count(d.demo_id), n, p[k])
    with pytest.raises(EmptyBufferError):
        store.sample_demo("reward_demo")


# ---------------------------------------------------------------------- persistence
def test_store_save_load_round_trip_draws_the_same(tmp_path):
    store = DemoStore(capacity=6, rho=0.3, phi=0.4, alpha=3.0, seed=5)
    store.add_initial(demo([0.0, 1.0], human=True))
    for mv in (0.5, 2.0):
        store.offer_episode(np.ones((3, 2)), np.arange(3), np.array([-1.0, 0, 0]), mv)
    store.sample_source()
    from rlstore import checkpoint

    checkpoint.save(store, tmp_path, prefix="demos_")
    clone = checkpoint.load(tmp_path, prefix="demos_")
    assert isinstance(clone, DemoStore)
    assert clone.config() == store.config() and (clone.rho, clone.phi) == (store.rho, store.phi)
    for a, b in zip(
        store.reward_demos + store.value_demos, clone.reward_demos + clone.value_demos, strict=True
    ):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        assert (a.human, a.max_value, a.demo_id) == (b.human, b.max_value, b.demo_id)
    for _ in range(50):
        src = store.sample_source()
        assert clone.sample_source() == src
        if src != "env":
            assert store.sample_demo(src).demo_id == clone.sample_demo(src).demo_id


def test_single_demo_files(tmp_path):
    d = demo([0.0, 1.0, 0.0], max_value=2.5)
    save_demo(d, tmp_path, "b")
    save_demo(demo([1.0]), tmp_path, "a")
    assert list_demos(tmp_path) == ["a", "b"] and list_demos(tmp_path / "none") == []
    back = load_demo(tmp_path, "b")
    np.testing.assert_array_equal(back.observations, d.observations)
    np.testing.assert_array_equal(back.actions, d.actions)
    assert back.rewards.tolist() == [0.0, 1.0, 0.0] and back.max_value == 2.5


def test_no_loop_twin_in_the_public_demo_api() -> None:
    import rlstore.buffers.demo_store
    import rlstore.buffers.demos

    for mod in (rlstore.buffers.demos, rlstore.buffers.demo_store):
        assert not [n for n in mod.__all__ if n.endswith("_reference")], mod.__name__
        assert not hasattr(mod, "value_demo_probabilities_reference"), mod.__name__


def test_demo_from_arrays_drops_the_final_observation_and_names_the_file() -> None:
    from rlstore.buffers.demo_files import demo_from_arrays
    from rlstore.errors import CheckpointError

    obs, act = np.zeros((4, 2), np.float32), np.arange(3)
    rew = np.ones((3, 1), np.float32)
    d = demo_from_arrays("x.npz", obs, act, rew, human=True)
    assert d.observations.shape == (3, 2) and d.rewards.shape == (3,) and d.human
    plain = demo_from_arrays("x.npz", obs[:3], act, rew)
    assert plain.observations.shape == (3, 2) and not plain.human
    with pytest.raises(CheckpointError, match=r"x\.npz"):
        demo_from_arrays("x.npz", obs[:2], act, rew)


def test_an_infinite_max_value_is_refused_before_it_breaks_value_demo_sampling() -> None:
    """A MaxValue of +inf left value_demo_probabilities no finite weight: every later value-demo
    draw (inside a mixer step) raised. It is refused where it enters, the store unchanged."""
    store = DemoStore(capacity=4, rho=0.0, phi=1.0, reward_threshold=5.0, seed=0)
    assert store.offer_episode(np.zeros((2, 2)), np.arange(2), np.zeros(2), 1.0) == "value"
    before = store.state_dict()
    with pytest.raises(ConfigError, match="max_value: expected a finite number"):
        store.offer_episode(np.zeros((2, 2)), np.arange(2), np.zeros(2), max_value=np.inf)
    with pytest.raises(ConfigError, match="max_value: expected a finite number"):
        store.update_max_value(store.value_demos[0].demo_id, float("inf"))
    with pytest.raises(ConfigError, match="max_value"):
        demo([1.0], max_value=float("inf"))
    assert store.state_dict()["next_id"] == before["next_id"]
    assert [d.max_value for d in store.value_demos] == [1.0]
    assert store.sample_demo("value_demo") is store.value_demos[0]
    assert demo([1.0]).max_value == -np.inf  # unknown stays allowed


@pytest.mark.parametrize("alpha", [-1.0, 0.0, float("nan"), True, "2"])
def test_value_demo_probabilities_refuses_an_alpha_that_is_not_positive(alpha) -> None:
    """alpha=-1 or NaN returned NaN "probabilities"; True was taken as 1."""
    with pytest.raises(ConfigError, match="alpha: expected a positive float"):
        value_demo_probabilities(np.array([0.0, 1.0, 2.0]), alpha)


@pytest.mark.parametrize("max_values", [np.array([]), np.ones((2, 2))])
def test_value_demo_probabilities_wants_one_value_per_demo(max_values) -> None:
    """[] raised numpy's bare ValueError; a (2, 2) array gave a (2, 2) "distribution"."""
    with pytest.raises(SpecError, match=r"max_values: expected shape \(K,\)"):
        value_demo_probabilities(max_values, 1.0)


def test_a_reward_demo_evicted_on_arrival_is_reported_rejected() -> None:
    """offer_episode said "reward" for a demo that enforce_capacity evicted at once (the longest
    agent reward demo), as the value path already reports "rejected"."""
    store = DemoStore(capacity=2, rho=0.2, phi=0.0, seed=0)
    store.add_initial(demo([1.0], human=True))
    assert store.offer_episode(np.zeros((5, 2)), np.arange(5), np.eye(5)[4]) == "reward"
    assert store.offer_episode(np.zeros((6, 2)), np.arange(6), np.eye(6)[5]) == "rejected"
    assert [d.length for d in store.reward_demos] == [1, 5]
    assert store.offer_episode(np.zeros((3, 2)), np.arange(3), np.eye(3)[2]) == "reward"
    assert [d.length for d in store.reward_demos] == [1, 3]  # the longer one made room


def _filled_store() -> DemoStore:
    store = DemoStore(capacity=3, rho=0.2, phi=0.5, seed=1)
    store.add_initial(demo([0.0, 1.0], human=True))
    store.offer_episode(np.zeros((2, 2)), np.arange(2), np.zeros(2), 1.0)
    store.offer_episode(np.zeros((2, 2)), np.arange(2), np.zeros(2), 2.0)
    return store


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("rho", 7.0, "rho"),
        ("phi", float("nan"), "phi"),
        ("phi", 0.9, "rho \\+ phi <= 1"),
        ("reward_threshold", float("nan"), "reward_threshold"),
        ("next_id", 1, "distinct ids in \\[0, next_id=1\\)"),
    ],
)
def test_store_load_state_dict_refuses_impossible_states(key, value, match) -> None:
    """rho=7, NaN, rho + phi > 1 were loaded as they came; a next_id at or below a stored id
    let the next demo share its id (update_max_value and the mixer find demos by id)."""
    from rlstore.errors import CheckpointError

    sd = _filled_store().state_dict()
    target = DemoStore(capacity=3, seed=0)
    before = target.state_dict()
    with pytest.raises(CheckpointError, match=match):
        target.load_state_dict({**sd, key: value})
    assert target.state_dict()["rng"] == before["rng"] and len(target) == 0


def test_store_load_state_dict_refuses_more_demos_than_its_capacity() -> None:
    from rlstore.errors import CheckpointError

    with pytest.raises(CheckpointError, match="at most capacity=2"):
        DemoStore(capacity=2).load_state_dict(_filled_store().state_dict())
