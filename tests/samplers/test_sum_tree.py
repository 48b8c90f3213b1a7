"""SumTree against naive references: sums of leaves, cumulative-sum search, minimum, checkpoints."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstore.errors import CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.samplers import SumTree


def _naive_find(leaves: np.ndarray, masses: np.ndarray) -> np.ndarray:
    """Smallest i with leaves[0] + ... + leaves[i] > mass (last non-empty leaf past the end)."""
    cum = np.cumsum(leaves)
    out = np.searchsorted(cum, masses, side="right")
    return np.minimum(out, np.flatnonzero(leaves > 0)[-1])


def _snapshot(t: SumTree) -> tuple[np.ndarray, np.ndarray]:
    return t._sum.copy(), t._min.copy()


def test_hand_case() -> None:
    t = SumTree(5)  # 8 leaves inside, 3 of them padding
    t.update(np.array([0, 1, 3]), np.array([1.0, 0.5, 2.5]))
    assert t.total == 4.0 and t.min == 0.5
    # prefix sums 1, 1.5, 1.5, 4: masses in [0,1) -> 0, [1,1.5) -> 1, [1.5,4) -> 3 (2 is empty)
    got = t.find(np.array([0.0, 0.99, 1.0, 1.49, 1.5, 3.99, 4.0, 100.0]))
    np.testing.assert_array_equal(got, [0, 0, 1, 1, 3, 3, 3, 3])
    assert got.dtype == np.int64


def test_random_batched_updates_keep_sums_and_minimum() -> None:
    """10^4 batched updates with repeated indices and zeros; the model applies them in order."""
    rng = np.random.default_rng(0)
    cap = 1000  # not a power of two
    t = SumTree(cap)
    model = np.zeros(cap)
    for _ in range(10_000):
        k = int(rng.integers(1, 33))
        idx = rng.integers(0, cap, k)
        vals = rng.exponential(size=k) * (rng.random(k) > 0.1)  # ~10% zeros: empty leaves
        t.update(idx, vals)
        for i, v in zip(idx.tolist(), vals.tolist(), strict=True):  # reference: one write at a time
            model[i] = v
    np.testing.assert_array_equal(t.leaves, model)  # same values copied: exact
    assert abs(t.total - model.sum()) <= 1e-9 * model.sum()
    assert t.min == model[model > 0].min()
    _assert_parents_exact(t)


def _assert_parents_exact(t: SumTree) -> None:
    """Every stored parent is the binary-order sum of its 4 children, and the min of their
    non-empty leaves (level 1) or mins (above).

    Exact equality is sound on any CPU: both sides are the same scalar IEEE additions in the
    same order, ``(c0 + c1) + (c2 + c3)`` element by element (numba compiles the kernels
    without fastmath, so nothing is reassociated), and a min is exact."""
    s, m, offs = t._sum, t._min, t._offs
    for level in range(1, len(offs) - 1):
        c = s[offs[level - 1] : offs[level]].reshape(-1, 4)
        want = (c[:, 0] + c[:, 1]) + (c[:, 2] + c[:, 3])
        np.testing.assert_array_equal(s[offs[level] : offs[level] + len(c)], want)
        lows = (
            np.where(c > 0, c, np.inf)
            if level == 1
            else m[offs[level - 1] - offs[1] : offs[level] - offs[1]].reshape(-1, 4)
        )
        np.testing.assert_array_equal(m[offs[level] - offs[1] :][: len(c)], lows.min(axis=1))


def _binary_tree(leaves: np.ndarray) -> tuple[float, Callable[[float], int]]:
    """The reference binary layout (2L nodes, node k's children 2k and 2k + 1): its root and
    its one-query descent (right when past the left sum and the right subtree is non-empty)."""
    n = 1 << (len(leaves) - 1).bit_length()
    tree = np.zeros(2 * n)
    tree[n : n + len(leaves)] = leaves
    for k in range(n - 1, 0, -1):
        tree[k] = tree[2 * k] + tree[2 * k + 1]

    def find(x: float) -> int:
        node = 1
        while node < n:
            left = tree[2 * node]
            if x >= left and tree[2 * node + 1] > 0:
                x, node = x - left, 2 * node + 1
            else:
                node = 2 * node
        return node - n

    return float(tree[1]), find


@pytest.mark.parametrize("cap", [1, 5, 8, 9, 64, 100, 1000, 4097])
def test_root_and_find_are_those_of_the_binary_layout(cap: int) -> None:
    """The 4-ary layout sums in the binary tree's order and descends its binary levels: the
    same root and the same leaf for every mass, bit for bit (the layout it replaced). The
    reference performs the same additions in the same order (pairwise, level by level), so
    exact equality holds on any CPU."""
    rng = np.random.default_rng(cap)
    leaves = rng.exponential(size=cap) * (rng.random(cap) > 0.3)
    leaves[rng.integers(0, cap)] = 0.5  # at least one non-empty leaf
    t = SumTree(cap)
    t.update(np.arange(cap), leaves)
    total, find = _binary_tree(leaves)
    assert t.total == total
    _assert_parents_exact(t)
    masses = np.concatenate([rng.random(2000) * total, [0.0, total, np.nextafter(total, 0)]])
    masses = np.concatenate([masses, np.cumsum(leaves)[:50]])  # prefix sums: the boundaries
    np.testing.assert_array_equal(t.find(masses), [find(x) for x in masses.tolist()])


def test_find_matches_cumsum_search() -> None:
    rng = np.random.default_rng(1)
    cap = 777
    t = SumTree(cap)
    leaves = rng.exponential(size=cap) * (rng.random(cap) > 0.3)
    leaves[:5] = 0.0  # leading and trailing empty leaves
    leaves[-5:] = 0.0
    t.update(np.arange(cap), leaves)
    masses = rng.random(100_000) * t.total
    got, want = t.find(masses), _naive_find(leaves, masses)
    differ = got != want
    # the tree and cumsum add in different orders: a mismatch is only allowed on a boundary
    if differ.any():
        cum = np.cumsum(leaves)
        gap = np.abs(cum[np.minimum(got, want)[differ]] - masses[differ])
        assert gap.max() <= 1e-9 * t.total
    assert differ.sum() <= 2
    assert (leaves[got] > 0).all()
    first, last = np.flatnonzero(leaves)[[0, -1]].tolist()
    ends = np.array([t.total, np.nextafter(t.total, 0), 0.0])
    assert t.find(ends).tolist() == [last, last, first]


def test_duplicate_indices_last_write_wins() -> None:
    t = SumTree(4)
    t.update(np.array([3, 1, 3, 3]), np.array([1.0, 2.0, 5.0, 0.25]))
    np.testing.assert_array_equal(t.leaves, [0.0, 2.0, 0.0, 0.25])
    assert t.total == 2.25 and t.min == 0.25  # the min tree took the same (last) value
    t.update(np.array([3, 3]), np.array([0.0, 7.0]))
    assert t.total == 9.0 and t.min == 2.0
    t.update(np.array([0, 1, 1, 3, 3]), np.array([1.0, 4.0, 0.5, 7.0, 3.0]))  # sorted input
    np.testing.assert_array_equal(t.leaves, [1.0, 0.5, 0.0, 3.0])


def test_capacity_one_and_empty() -> None:
    t = SumTree(1)
    with pytest.raises(EmptyBufferError, match="total is 0"):
        t.find(np.array([0.0]))
    assert t.min == np.inf
    t.update([0], [3.0])
    assert t.total == 3.0 and t.find([0.0, 2.9, 5.0]).tolist() == [0, 0, 0]
    with pytest.raises(ConfigError, match="capacity"):
        SumTree(0)


@pytest.mark.parametrize(
    ("indices", "values", "match"),
    [
        ([0, 4], [1.0, 1.0], r"indices: expected values in \[0, 4\), got 4"),
        ([-1], [1.0], r"indices: expected values in \[0, 4\), got -1"),
        ([0.0], [1.0], "indices: expected a 1-D integer array, got float64"),
        ([[0]], [1.0], r"indices: expected a 1-D integer array, got int64 of shape \(1, 1\)"),
        ([0, 1], [1.0], r"values: expected shape \(2,\) like indices, got \(1,\)"),
        ([0, 1], [1.0, -0.5], "values: expected values >= 0.0, got -0.5"),
        ([0, 1], [1.0, np.nan], "values: expected finite values, got nan"),
        ([0, 1], [np.inf, 1.0], "values: expected finite values, got inf"),
        ([0, 1], [True, False], "values: expected a real-valued array, got dtype bool"),
        ([0], ["1"], "values: expected a real-valued array"),
        ([0], [1e308], "values: expected values <= "),
    ],
)
def test_rejected_update_changes_nothing(indices: list, values: list, match: str) -> None:
    t = SumTree(4)
    t.update([0, 1, 2], [1.0, 2.0, 3.0])
    before = _snapshot(t)
    with pytest.raises(SpecError, match=match):
        t.update(np.array(indices), np.array(values))
    after = _snapshot(t)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(before[1], after[1])


def test_find_rejects_bad_masses() -> None:
    t = SumTree(4)
    t.update([0], [1.0])
    for masses, match in [([-0.1], ">= 0.0"), ([np.nan], "finite"), (0.5, "1-D")]:
        with pytest.raises(SpecError, match=f"masses: expected .*{match}"):
            t.find(np.array(masses))


def test_state_dict_round_trip_is_exact() -> None:
    rng = np.random.default_rng(2)
    a = SumTree(100)
    for _ in range(50):
        a.update(rng.integers(0, 100, 8), rng.exponential(size=8))
    sd = a.state_dict()
    assert set(sd) == {"capacity", "leaves"} and sd["leaves"].flags.writeable
    b = SumTree(100)
    b.load_state_dict(sd)
    # each parent is the float sum of the same children in the same order, however rebuilt
    np.testing.assert_array_equal(a._sum, b._sum)
    np.testing.assert_array_equal(a._min, b._min)
    masses = rng.random(1000) * a.total
    np.testing.assert_array_equal(a.find(masses), b.find(masses))


def _leaves(values: list[float], dtype: type = np.float64) -> np.ndarray:
    return np.array(values, dtype=dtype)


@pytest.mark.parametrize(
    ("sd", "match"),
    [
        ({"capacity": 3}, "sum_tree: expected keys"),
        ({"capacity": 4, "leaves": _leaves([1, 2, 3])}, "capacity: expected 3 like this tree"),
        ({"capacity": True, "leaves": _leaves([1, 2, 3])}, "capacity: expected an int"),
        ({"capacity": 3, "leaves": _leaves([1, 2])}, r"leaves: expected shape \(3,\)"),
        ({"capacity": 3, "leaves": _leaves([1, 2, 3], np.float32)}, "dtype float64"),
        ({"capacity": 3, "leaves": [1.0, 2.0, 3.0]}, "leaves: expected a numpy array"),
        ({"capacity": 3, "leaves": _leaves([1, np.nan, 3])}, "got nan at index 1"),
        ({"capacity": 3, "leaves": _leaves([1, 2, np.inf])}, "got inf at index 2"),
        ({"capacity": 3, "leaves": _leaves([-1, 2, 3])}, "got -1.0 at index 0"),
    ],
)
def test_load_state_dict_rejects_and_changes_nothing(sd: dict, match: str) -> None:
    t = SumTree(3)
    t.update([0, 2], [4.0, 5.0])
    before = _snapshot(t)
    with pytest.raises(CheckpointError, match=match):
        t.load_state_dict(sd)
    np.testing.assert_array_equal(before[0], t._sum)
    np.testing.assert_array_equal(before[1], t._min)


@settings(max_examples=60, deadline=None)
@given(
    cap=st.integers(1, 40),
    batches=st.lists(
        st.lists(st.tuples(st.integers(0, 39), st.floats(0, 1e6)), min_size=1, max_size=10),
        min_size=1,
        max_size=15,
    ),
)
def test_property_against_list_model(cap: int, batches: list) -> None:
    t = SumTree(cap)
    model = [0.0] * cap
    for batch in batches:
        batch = [(i % cap, v) for i, v in batch]
        t.update(np.array([i for i, _ in batch]), np.array([v for _, v in batch]))
        for i, v in batch:
            model[i] = v
    leaves = np.array(model)
    np.testing.assert_array_equal(t.leaves, leaves)
    assert t.total == pytest.approx(leaves.sum(), rel=1e-12, abs=0)
    assert t.min == (leaves[leaves > 0].min() if (leaves > 0).any() else np.inf)
    if t.total > 0:
        masses = np.linspace(0, t.total, 50)
        got = t.find(masses)
        assert (leaves[got] > 0).all()
        cum = np.cumsum(leaves)
        # got is right of every prefix sum <= mass (up to rounding) and its own prefix > mass
        assert (cum[got] >= masses - 1e-9 * t.total).all()


def test_a_tree_too_large_for_memory_is_a_capacity_error() -> None:
    """Was a bare ValueError ("array is too big") or MemoryError from the constructor of a
    prioritized buffer; now a CapacityError naming the capacity, the caller's sampler unbound."""
    from rlstore import ReplayBuffer
    from rlstore.errors import CapacityError
    from rlstore.samplers import PrioritizedSampler

    with pytest.raises(CapacityError, match=r"capacity: cannot allocate a sum tree of 1,000,"):
        SumTree(10**18)
    sampler = PrioritizedSampler(alpha=0.6, seed=0)
    with pytest.raises(CapacityError, match="capacity: cannot allocate a sum tree"):
        ReplayBuffer(10**18, sampler=sampler)
    assert sampler.capacity is None
    ReplayBuffer(8, sampler=sampler)  # still usable
