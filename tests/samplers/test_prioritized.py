"""PrioritizedSampler: frequencies, importance weights, stale updates, validation, exact resume."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstore.errors import (
    CapacityError,
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    SpecError,
)
from rlstore.samplers import LinearSchedule, PrioritizedSampler, SampledIds


def _sampler(priorities: list[float], capacity: int | None = None, **kw: Any) -> PrioritizedSampler:
    n = len(priorities)
    s = PrioritizedSampler(capacity or n, **kw)
    s.on_write(0, n)
    s.update_priorities(np.arange(n), np.array(priorities, dtype=np.float64))
    return s


def _state(s: PrioritizedSampler) -> dict[str, Any]:
    sd = s.state_dict()
    sd["tree_nodes"] = (s.tree._sum.copy(), s.tree._min.copy())
    sd["len"] = len(s)
    return sd


def _assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    for k, v in a.items():
        if k == "tree":
            np.testing.assert_array_equal(v["leaves"], b[k]["leaves"])
        elif k == "tree_nodes":
            np.testing.assert_array_equal(v[0], b[k][0])
            np.testing.assert_array_equal(v[1], b[k][1])
        elif isinstance(v, np.ndarray):
            np.testing.assert_array_equal(v, b[k])
        else:
            assert v == b[k], k


def test_sampling_frequencies_within_three_sigma() -> None:
    priorities = [0.5, 1.0, 2.0, 4.0, 0.0, 8.5]
    s = _sampler(priorities, capacity=9, alpha=1.0, beta=1.0, eps=1e-6, seed=0)
    p = np.array(priorities) + 1e-6
    prob = p / p.sum()  # P(i) = (p_i + eps)^1 / sum: 0.5/16, 1/16, 2/16, 4/16, ~0, 8.5/16
    draws = 100_000
    counts = np.zeros(9)
    for _ in range(100):
        batch = s.sample(1000)
        counts += np.bincount(batch.indices, minlength=9)
    assert counts[6:].sum() == 0  # slots never written are never drawn
    sigma = np.sqrt(draws * prob * (1 - prob))
    assert np.all(np.abs(counts[:6] - draws * prob) <= 3 * sigma + 1), (counts, draws * prob)


def test_stratified_one_draw_per_segment() -> None:
    s = _sampler([1.0] * 8, alpha=1.0, seed=3)  # 8 equal segments = the 8 slots
    for _ in range(5):
        np.testing.assert_array_equal(s.sample(8).indices, np.arange(8))


def test_weights_hand_computed() -> None:
    # alpha = 0.5, eps = 1: stored (p + 1)^0.5 for p = 3, 8, 15, 0 -> 2, 3, 4, 1; total 10.
    # N = 4 live slots (capacity 6): P = .2, .3, .4, .1; w_i = (4 P_i)^-0.5, normalized by the
    # global max weight (4 * P_min)^-0.5 = (0.4)^-0.5:
    #   slot 0: (0.4 / 0.8)^0.5 = 0.70711, slot 1: (0.4 / 1.2)^0.5 = 0.57735,
    #   slot 2: (0.4 / 1.6)^0.5 = 0.5, slot 3 (the least likely): 1.
    s = _sampler([3.0, 8.0, 15.0, 0.0], capacity=6, alpha=0.5, beta=0.5, eps=1.0, seed=1)
    np.testing.assert_allclose(s.tree.leaves, [2, 3, 4, 1, 0, 0], rtol=1e-15)
    batch = s.sample(400)
    assert isinstance(batch, SampledIds)
    assert batch.indices.dtype == np.int64 and batch.weights.dtype == np.float32
    expected = np.array([0.5**0.5, (1 / 3) ** 0.5, 0.5, 1.0])
    np.testing.assert_allclose(batch.weights, expected[batch.indices], rtol=1e-6)
    assert set(batch.indices.tolist()) == {0, 1, 2, 3}
    # beta per call: beta = 1 gives 0.4 / (4 P_i) = 0.5, 1/3, 0.25, 1
    batch = s.sample(400, beta=1.0)
    expected = np.array([0.5, 1 / 3, 0.25, 1.0])
    np.testing.assert_allclose(batch.weights, expected[batch.indices], rtol=1e-6)


def test_alpha_zero_is_uniform_with_unit_weights() -> None:
    s = _sampler([0.1, 5.0, 50.0, 0.0], alpha=0.0, beta=0.7, seed=2)
    np.testing.assert_array_equal(s.tree.leaves, [1.0, 1.0, 1.0, 1.0])  # x^0 = 1
    counts = np.zeros(4)
    for _ in range(100):
        batch = s.sample(1000)
        np.testing.assert_array_equal(batch.weights, 1.0)
        counts += np.bincount(batch.indices, minlength=4)
    sigma = np.sqrt(100_000 * 0.25 * 0.75)
    assert np.all(np.abs(counts - 25_000) <= 3 * sigma)


def test_beta_zero_gives_unit_weights() -> None:
    s = _sampler([0.1, 5.0, 50.0, 0.0], alpha=0.6, beta=0.0, seed=2)
    np.testing.assert_array_equal(s.sample(256).weights, 1.0)


def test_linear_beta_schedule() -> None:
    sched = LinearSchedule(0.0, 1.0, 4)
    assert [sched(t) for t in (0, 1, 2, 4, 10)] == [0.0, 0.25, 0.5, 1.0, 1.0]
    s = _sampler([1.0, 3.0], alpha=1.0, beta=sched, eps=1e-12, seed=0)
    # P = 0.25, 0.75; weight of slot 1 = (0.25 / 0.75)^beta = (1/3)^beta
    for step in range(6):
        assert s.current_beta() == sched(step)
        batch = s.sample(64)
        w1 = batch.weights[batch.indices == 1]
        np.testing.assert_allclose(w1, (1 / 3) ** sched(step), rtol=1e-6)
    assert s.steps == 6
    with pytest.raises(ConfigError, match="beta.steps"):
        LinearSchedule(0.4, 1.0, 0)
    with pytest.raises(ConfigError, match="beta.start"):
        LinearSchedule(-0.1, 1.0, 10)
    with pytest.raises(ConfigError, match="beta.end: expected a finite number >= 0, got inf"):
        LinearSchedule(0.4, math.inf, 10)


@pytest.mark.parametrize("beta", [math.inf, float("nan"), -1.0])
def test_an_infinite_beta_is_refused_not_turned_into_zero_weights(beta: float) -> None:
    """``beta = inf`` gave every drawn id but the least likely ones the weight 0 (the weights
    are documented in (0, 1]); it is refused like a negative beta, nothing drawn."""
    s = _sampler([1.0, 3.0], alpha=1.0, seed=0)
    before = _state(s)
    with pytest.raises(ConfigError, match=r"beta: expected a finite number >= 0"):
        s.sample(4, beta=beta)
    _assert_same_state(before, _state(s))
    with pytest.raises(ConfigError, match=r"beta: expected a finite number >= 0"):
        PrioritizedSampler(4, beta=beta)


def test_new_items_get_the_max_priority_seen() -> None:
    s = PrioritizedSampler(8, alpha=0.5, eps=1e-6, seed=0)
    s.on_write(0, 2)
    np.testing.assert_array_equal(s.tree.leaves[:2], [1.0, 1.0])  # initial max priority 1
    s.update_priorities(np.array([0, 1]), np.array([8.0, 0.5]))
    assert s.max_priority == pytest.approx(8.0 + 1e-6, rel=1e-15)
    s.update_priorities(np.array([0]), np.array([0.1]))  # max priority never goes down
    s.on_write(0, 4)
    assert len(s) == 4
    np.testing.assert_allclose(s.tree.leaves[2:4], (8.0 + 1e-6) ** 0.5, rtol=1e-15)
    s.on_write(7, 11)  # ids 0..6 leave (priority 0), 7..10 enter in slots 7, 0, 1, 2
    np.testing.assert_allclose(
        s.tree.leaves, [(8.0 + 1e-6) ** 0.5] * 3 + [0] * 4 + [(8.0 + 1e-6) ** 0.5]
    )


def test_updates_of_overwritten_ids_are_ignored() -> None:
    s = _sampler([1.0, 2.0, 3.0, 4.0], alpha=1.0, eps=1e-6, seed=4)
    batch = SampledIds(np.arange(4), np.ones(4, np.float32))  # as if drawn now
    s.on_write(1, 5)  # id 0 overwritten after it was drawn: id 4 now sits in its slot
    leaf_before = s.tree.leaves[0]
    s.update_priorities(batch.indices, np.full(4, 0.25))
    assert s.tree.leaves[0] == leaf_before  # the new item keeps its entry priority
    for i in batch.indices[1:]:
        assert s.tree.leaves[i] == pytest.approx(0.25 + 1e-6, rel=1e-15)
    assert s.tree.total == pytest.approx(s.tree.leaves.sum(), rel=1e-12)
    s.update_priorities(np.array([4]), np.array([0.5]))  # the new id itself
    assert s.tree.leaves[0] == pytest.approx(0.5 + 1e-6, rel=1e-15)


def test_duplicate_indices_in_one_update() -> None:
    s = _sampler([1.0, 1.0, 1.0], alpha=1.0, eps=1e-6, seed=0)
    s.update_priorities(np.array([2, 0, 2]), np.array([100.0, 3.0, 0.5]))
    np.testing.assert_allclose(s.tree.leaves, [3.0 + 1e-6, 1.0 + 1e-6, 0.5 + 1e-6], rtol=1e-15)
    # the discarded 100 does not raise the max priority either
    assert s.max_priority == pytest.approx(3.0 + 1e-6, rel=1e-15)


@pytest.mark.parametrize(
    ("args", "err", "match"),
    [
        (([0, 1], [1.0, -1.0]), SpecError, "priorities: expected values >= 0.0, got -1.0"),
        (([0, 1], [1.0, np.nan]), SpecError, "priorities: expected finite values, got nan"),
        (([0, 1], [np.inf, 1.0]), SpecError, "priorities: expected finite values, got inf"),
        (([0, 1], [1.0]), SpecError, r"priorities: expected shape \(2,\) like indices"),
        (([0, 1], [True, False]), SpecError, "priorities: expected a real-valued array"),
        (([0, 1], [1.0 + 0j, 2.0]), SpecError, "priorities: expected a real-valued array"),
        (([0, 9], [1.0, 1.0]), SpecError, r"indices: expected ids in \[0, 4\) \(written\), got 9"),
        (([0, -1], [1.0, 1.0]), SpecError, r"indices: expected ids in \[0, 4\)"),
        (([0.0], [1.0]), SpecError, "indices: expected a 1-D integer array"),
        (([0], [1e200]), SpecError, r"priorities: expected \(p \+ eps\)\^alpha <=.* p = 1e\+200"),
        (([2**63 + 5], [1.0]), SpecError, "indices: .* got 9223372036854775813"),
        (([0, 9], [1.0, -1.0]), SpecError, "priorities: expected values >= 0.0, got -1.0"),
    ],
)
def test_rejected_updates_change_nothing(args: tuple, err: type, match: str) -> None:
    s = _sampler([1.0, 2.0, 3.0, 4.0], capacity=6, alpha=2.0, seed=5)
    s.sample(3)
    before = _state(s)
    with pytest.raises(err, match=match):
        s.update_priorities(*(np.array(a) for a in args))
    _assert_same_state(before, _state(s))


def test_sample_errors() -> None:
    s = PrioritizedSampler(4, seed=0)
    with pytest.raises(EmptyBufferError, match="no live id"):
        s.sample(2)
    s.on_write(0, 2)
    with pytest.raises(CapacityError, match="batch_size: expected an int >= 1, got 0"):
        s.sample(0)
    with pytest.raises(ConfigError, match="beta"):
        s.sample(2, beta=-1.0)
    with pytest.raises(SpecError, match="at most capacity=4 live ids, got 5"):
        s.on_write(0, 5)
    with pytest.raises(ConfigError, match="capacity: expected 4"):
        s.bind(8)
    with pytest.raises(ConfigError, match="no slots yet"):
        PrioritizedSampler().on_write(0, 1)
    assert len(s) == 2 and s.steps == 0


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"capacity": 0}, "capacity"),
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": np.inf}, "alpha"),
        ({"eps": 0.0}, "eps: expected a finite number > 0"),
        # a zero priority would be stored as 0 ** ... == 0: an empty leaf, never drawn again
        ({"eps": 1e-200, "alpha": 2.0}, r"eps: expected eps \*\* alpha > 0"),
        ({"beta": "0.4"}, "beta"),
        ({"beta": np.nan}, "beta"),
        ({"seed": -1}, "seed"),
    ],
)
def test_config_errors(kw: dict, match: str) -> None:
    args = {"capacity": 4, **kw}
    with pytest.raises(ConfigError, match=match):
        PrioritizedSampler(**args)


def _run(s: PrioritizedSampler, n: int, seed: int) -> list[np.ndarray]:
    """A little training loop: sample, update, overwrite; returns what was drawn."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = s.sample(16)
        out += [b.indices, b.weights]
        s.update_priorities(b.indices, rng.exponential(size=16))
        hi = s.hi + 3
        s.on_write(max(s.lo + int(rng.integers(0, 3)), hi - s.capacity), hi)
    return out


def test_exact_resume() -> None:
    a = PrioritizedSampler(32, alpha=0.7, beta=LinearSchedule(0.4, 1.0, 10), seed=11)
    a.on_write(0, 20)
    _run(a, 5, seed=0)
    sd = copy.deepcopy(a.state_dict())
    b = PrioritizedSampler(32, alpha=0.7, beta=LinearSchedule(0.4, 1.0, 10), seed=99)
    b.load_state_dict(sd)
    assert len(b) == len(a)
    for x, y in zip(_run(a, 8, seed=1), _run(b, 8, seed=1), strict=True):
        np.testing.assert_array_equal(x, y)
    # state_dict returns copies
    sd2 = b.state_dict()
    sd2["tree"]["leaves"][:] = 0
    assert b.tree.total > 0


def _corrupt(sd: dict, key: str, value: Any) -> dict:
    sd = copy.deepcopy(sd)
    if key == "leaves":
        sd["tree"]["leaves"] = value
    else:
        sd[key] = value
    return sd


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("alpha", 0.5, r"sampler.alpha: expected 0.6 like this sampler, got 0.5"),
        ("eps", 1e-3, "sampler.eps: expected 1e-06"),
        ("max_priority", float("nan"), "sampler.max_priority"),
        ("max_priority", 0.0, "sampler.max_priority"),
        ("max_priority", float("inf"), "sampler.max_priority"),
        ("max_priority", 1, "sampler.max_priority"),
        ("steps", -1, "sampler.steps"),
        ("window", [0, 2], "leaves: expected priorities > 0 exactly on the live ids"),
        ("window", [0, 9], r"sampler.window: expected at most capacity ids"),
        ("window", [3], r"sampler.window: expected \[lo, hi\]"),
        ("leaves", np.full(8, np.nan), "sampler.tree.leaves"),
        ("rng", {"bit_generator": "Evil"}, "sampler.rng.bit_generator"),
    ],
)
def test_load_state_dict_rejects_and_changes_nothing(key: str, value: Any, match: str) -> None:
    src = _sampler([1.0, 2.0, 3.0], capacity=8, seed=0)
    _run(src, 2, seed=0)
    sd = src.state_dict()
    dst = _sampler([5.0, 6.0], capacity=8, seed=1)
    before = _state(dst)
    with pytest.raises(CheckpointError, match=match):
        dst.load_state_dict(_corrupt(sd, key, value))
    _assert_same_state(before, _state(dst))


def test_resume_through_a_checkpoint_file(tmp_path: Any) -> None:
    """The state survives the project's safetensors + JSON writer (arrays and scalars)."""
    from rlstore.checkpoint import load_state, save_state

    a = PrioritizedSampler(16, alpha=0.5, seed=7)
    a.on_write(0, 10)
    _run(a, 3, seed=0)
    save_state(tmp_path, {"sampler": a.state_dict()})
    b = PrioritizedSampler(16, alpha=0.5, seed=8)
    b.load_state_dict(load_state(tmp_path)["sampler"])
    for x, y in zip(_run(a, 4, seed=1), _run(b, 4, seed=1), strict=True):
        np.testing.assert_array_equal(x, y)


@given(
    cap=st.integers(1, 9),
    moves=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12), st.booleans()), max_size=12),
)
@settings(max_examples=60, deadline=None)
def test_window_moves_match_a_per_id_loop(cap: int, moves: list) -> None:
    # the twin: every id that leaves zeroes its slot, then every id that enters writes the
    # entry priority (max seen, ^alpha) into its slot, one id at a time
    s = PrioritizedSampler(cap, alpha=0.5, eps=0.1, seed=0)
    leaves = np.zeros(cap)
    rng = np.random.default_rng(cap)
    for grow, drop, update in moves:
        hi = s.hi + grow
        lo = max(s.lo + drop, hi - cap)
        lo = min(lo, hi)
        for i in range(s.lo, min(lo, s.hi)):
            leaves[i % cap] = 0.0
        for i in range(max(s.hi, lo), hi):
            leaves[i % cap] = s.max_priority**0.5
        s.on_write(lo, hi)
        if update and hi > lo:
            # ids written so far, overwritten ones included (ignored), sorted half the time
            # (the order of a stratified draw), repeats included (the last one wins)
            ids = rng.integers(max(lo - 2, 0), hi, 4)
            if rng.random() < 0.5:
                ids.sort()
            p = rng.exponential(size=4)
            s.update_priorities(ids, p)
            for i, v in zip(ids, p, strict=True):
                if i >= lo:
                    leaves[i % cap] = (v + 0.1) ** 0.5
        np.testing.assert_allclose(s.tree.leaves, leaves, rtol=1e-15)
        assert s.tree.total == pytest.approx(leaves.sum(), rel=1e-12)
        assert s.tree.min == (leaves[leaves > 0].min() if (leaves > 0).any() else np.inf)
