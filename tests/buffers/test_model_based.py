"""Tests of ModelBasedReplay and the MBPO-style split against naive references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlstore.buffers.model_based import (
    ModelBasedReplay,
    StandardScaler,
    ensemble_minibatches,
    model_dataset,
)
from rlstore.checkpoint import load_state, save_state
from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError


def rows(lo, hi, dim=2):
    """Rows x_lo .. x_{hi-1}, x_k = [k, 10k, ...]."""
    k = np.arange(lo, hi, dtype=np.float32)[:, None]
    return {"x": k * (10.0 ** np.arange(dim, dtype=np.float32)), "k": np.arange(lo, hi)}


def test_wrap_around_case_from_the_spec():
    buf = ModelBasedReplay(5)
    buf.insert_data_slice(rows(0, 3))  # x0..x2
    buf.insert_data_slice(rows(3, 7))  # x3..x6
    assert buf.data["k"].tolist() == [5, 6, 2, 3, 4]  # physical storage
    assert (buf.step, buf.size, len(buf)) == (2, 5, 5)
    assert buf.get_all()["k"].tolist() == [2, 3, 4, 5, 6]  # chronological from step
    np.testing.assert_array_equal(buf.get_all()["x"], rows(2, 7)["x"])
    assert buf.get_data_slice(1, 4)["k"].tolist() == [3, 4, 5]


def test_round_trip_into_an_empty_buffer_including_wrap_around():
    src = ModelBasedReplay(5)
    src.insert_data_slice(rows(0, 3))
    src.insert_data_slice(rows(3, 7))
    dst = ModelBasedReplay(5)
    dst.insert_data_slice(src.get_data_slice(0, len(src)))
    for key in ("x", "k"):
        np.testing.assert_array_equal(dst.get_all()[key], src.get_all()[key])
    # a slice longer than the buffer keeps its newest max_size rows
    big = ModelBasedReplay(3)
    big.insert_data_slice(rows(0, 8))
    assert big.get_all()["k"].tolist() == [5, 6, 7] and big.step == 8 % 3


@given(st.integers(1, 7), st.lists(st.integers(0, 9), min_size=1, max_size=12))
def test_contents_match_a_list_model(max_size, lengths):
    buf, model, start = ModelBasedReplay(max_size), [], 0
    for n in lengths:
        buf.insert_data_slice(rows(start, start + n))
        model = (model + list(range(start, start + n)))[-max_size:]
        start += n
        assert len(buf) == len(model) and buf.step == start % max_size
        assert buf.get_all()["k"].tolist() == model
    for k in model[:2]:
        buf.insert_transition({"x": rows(k, k + 1)["x"][0], "k": np.int64(k)})
        model = (model + [k])[-max_size:]
    assert buf.get_all()["k"].tolist() == model


def test_reading_returns_copies_and_rejections_leave_the_buffer_unchanged():
    buf = ModelBasedReplay(4)
    buf.insert_data_slice(rows(0, 3))
    got = buf.get_all()
    got["k"][:] = -1
    assert buf.get_all()["k"].tolist() == [0, 1, 2]
    with pytest.raises(SpecError, match="leading axis"):
        buf.insert_data_slice({"x": np.zeros((2, 2)), "k": np.zeros(3)})
    with pytest.raises(SpecError, match="fields"):
        buf.insert_data_slice({"x": np.zeros((2, 2))})
    with pytest.raises(SpecError, match=r"x: expected shape \(2, 2\)"):
        buf.insert_data_slice({"x": np.zeros((2, 3)), "k": np.zeros(2)})
    with pytest.raises(SpecError, match="start_pos"):
        buf.get_data_slice(2, 4)
    assert (buf.step, buf.size) == (3, 3) and buf.get_all()["k"].tolist() == [0, 1, 2]
    with pytest.raises(CapacityError):
        ModelBasedReplay(0)
    buf.clear()
    assert len(buf) == 0 and buf.get_all()["k"].shape == (0,)


@pytest.mark.parametrize(
    "n, ratio, cap, expected",
    [(10, 0.2, 5000, 2), (7, 0.5, 5000, 3), (100, 0.2, 5, 5), (9, 0.0, 5000, 0), (3, 0.2, 10, 0)],
)  # floor(10*0.2)=2, floor(3.5)=3, min(20, 5)=5, 0, floor(0.6)=0
def test_split_sizes_partition_and_determinism(n, ratio, cap, expected):
    buf = ModelBasedReplay(200, seed=0)
    buf.insert_data_slice(rows(0, n))
    split = buf.train_validation_split(ratio, cap, seed=3, ensemble_size=4)
    assert split.holdout.size == expected
    assert set(split.train) & set(split.holdout) == set()
    assert sorted([*split.train, *split.holdout]) == list(range(n))
    assert split.bootstrap.shape == (4, n - expected)
    assert split.bootstrap.min() >= 0 and split.bootstrap.max() < n - expected
    again = buf.train_validation_split(ratio, cap, seed=3, ensemble_size=4)
    for a, b in zip(split, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_split_errors():
    buf = ModelBasedReplay(10)
    with pytest.raises(EmptyBufferError):
        buf.train_validation_split()
    buf.insert_data_slice(rows(0, 4))
    with pytest.raises(ConfigError, match="validation_ratio"):
        buf.train_validation_split(1.0)
    with pytest.raises(ConfigError, match="ensemble_size"):
        buf.train_validation_split(ensemble_size=0)


def test_model_dataset_hand_values_one_hot_and_train_only_scaler():
    data = {
        "obs": np.array([[0.0], [1.0], [2.0], [4.0]], np.float32),
        "action": np.array([1, 0, 2, 1]),
        "next_obs": np.array([[1.0], [3.0], [2.0], [0.0]], np.float32),
        "reward": np.array([0.5, -1.0, 0.0, 2.0], np.float32),
    }
    buf = ModelBasedReplay(10)
    buf.insert_data_slice(data)
    split = buf.train_validation_split(0.25, seed=0)  # floor(4 * 0.25) = 1 holdout row
    ds = model_dataset(buf.get_all(), split, num_actions=3)
    # naive rows: input = [obs, onehot(action)], target = [next_obs - obs, reward]
    inputs = [
        [o[0], *(1.0 if a == c else 0.0 for c in range(3))]
        for o, a in zip(data["obs"], data["action"], strict=True)
    ]
    targets = [
        [n[0] - o[0], r]
        for o, n, r in zip(data["obs"], data["next_obs"], data["reward"], strict=True)
    ]
    train = np.array([inputs[i] for i in split.train])
    mean = train.sum(axis=0) / len(train)
    std = np.sqrt(((train - mean) ** 2).sum(axis=0) / len(train))
    np.testing.assert_allclose(ds.scaler.mean, mean, atol=1e-6)  # train rows only
    np.testing.assert_allclose(ds.scaler.std, np.where(std < 1e-12, 1.0, std), atol=1e-6)
    np.testing.assert_allclose(ds.train_targets, [targets[i] for i in split.train])
    np.testing.assert_allclose(ds.holdout_targets, [targets[i] for i in split.holdout])
    np.testing.assert_allclose(ds.scaler.inverse_transform(ds.train_inputs), train, atol=1e-6)
    held = np.array([inputs[i] for i in split.holdout])
    np.testing.assert_allclose(ds.scaler.inverse_transform(ds.holdout_inputs), held, atol=1e-6)
    no_rew = model_dataset(buf.get_all(), split, keys=("obs", "action", "next_obs", None))
    assert no_rew.train_targets.shape == (3, 1) and no_rew.train_inputs.shape == (3, 2)
    with pytest.raises(SpecError, match="action"):
        model_dataset(buf.get_all(), split, num_actions=2)


def test_scaler_errors_and_constant_features():
    with pytest.raises(EmptyBufferError):
        StandardScaler().transform(np.zeros((1, 1)))
    sc = StandardScaler().fit(np.array([[1.0, 2.0], [1.0, 4.0]]))
    np.testing.assert_allclose(sc.std, [1.0, 1.0])  # constant column: std 0 -> 1
    np.testing.assert_allclose(sc.transform(np.array([[1.0, 3.0]])), [[0.0, 0.0]])


@pytest.mark.parametrize("n_train, batch", [(12, 4), (13, 4), (5, 8)])
def test_ensemble_minibatches_cover_bootstrap_rows_without_empty_batches(n_train, batch):
    buf = ModelBasedReplay(50, seed=1)
    buf.insert_data_slice({"obs": np.arange(n_train + 1, dtype=np.float32)[:, None],
                           "action": np.zeros((n_train + 1, 1), np.float32),
                           "next_obs": np.zeros((n_train + 1, 1), np.float32),
                           "reward": np.zeros(n_train + 1, np.float32)})  # fmt: skip
    split = buf.train_validation_split(0.5, 1, seed=2, ensemble_size=3)  # 1 holdout row
    ds = model_dataset(buf.get_all(), split)
    assert ds.train_inputs.shape[0] == n_train
    batches = list(ensemble_minibatches(ds, batch, num_epochs=2, seed=0))
    per_epoch = -(-n_train // batch)  # ceil: 12/4 = 3, 13/4 -> 4, 5/8 -> 1
    assert len(batches) == 2 * per_epoch
    assert all(b.inputs.shape[1] >= 1 and b.inputs.shape[0] == 3 for b in batches)
    for epoch in range(2):
        got = np.concatenate([b.inputs for b in batches if b.epoch == epoch], axis=1)
        for e in range(3):  # each member sees its bootstrap multiset exactly once per epoch
            expected = ds.train_inputs[ds.bootstrap[e]]
            np.testing.assert_array_equal(np.sort(got[e], axis=0), np.sort(expected, axis=0))


def test_state_round_trip_through_a_checkpoint(tmp_path):
    buf = ModelBasedReplay(5, seed=4)
    buf.insert_data_slice(rows(0, 7))
    save_state(tmp_path, buf.state_dict())
    clone = ModelBasedReplay(5)
    clone.load_state_dict(load_state(tmp_path))
    np.testing.assert_array_equal(clone.get_all()["x"], buf.get_all()["x"])
    a, b = buf.train_validation_split(), clone.train_validation_split()
    np.testing.assert_array_equal(a.train, b.train)  # same RNG state -> same split
    with pytest.raises(CheckpointError):
        ModelBasedReplay(4).load_state_dict(buf.state_dict())


def test_generic_checkpoint_save_load_by_default(tmp_path):
    from rlstore import checkpoint

    buf = ModelBasedReplay(4, seed=0)
    buf.insert_data_slice(rows(0, 6))
    checkpoint.save(buf, tmp_path)
    clone = checkpoint.load(tmp_path)
    assert isinstance(clone, ModelBasedReplay) and clone.max_size == 4
    assert clone.get_all()["k"].tolist() == [2, 3, 4, 5] and clone.step == buf.step


def test_later_inserts_convert_only_losslessly_and_rejections_change_nothing():
    """Issue 8: 1.7 into an int field was stored as 1; NaN/inf were stored; state_dict() was
    the live arrays. Every rejection names the field and leaves the state as it was."""
    from _helpers import flat_state

    buf = ModelBasedReplay(3, seed=0)
    buf.insert_data_slice({"x": np.zeros((2, 2), np.float32), "k": np.array([1, 2])})
    saved = buf.state_dict()
    before = flat_state(buf)
    bad = [
        ({"x": np.zeros((1, 2)), "k": np.array([1.7])}, "k"),
        ({"x": np.zeros((1, 2)), "k": np.array([1.0])}, "k"),  # float -> int: refused
        ({"x": np.full((1, 2), np.nan), "k": np.array([1])}, "x"),
        ({"x": np.full((1, 2), np.inf), "k": np.array([1])}, "x"),
        ({"x": np.full((1, 2), 1e300), "k": np.array([1])}, "x"),  # float32 inf
        ({"x": np.zeros((1, 2)) + 1j, "k": np.array([1])}, "x"),
        ({"x": np.zeros((1, 2)), "k": np.array([None], dtype=object)}, "k"),
        ({"x": np.zeros((1, 2)), "k": np.array(["1"])}, "k"),
        ({"x": np.zeros((1, 2)), "k": np.array([2**40])}, "k"),  # out of int64? no: ok below
        ({"x": {"a": 1}, "k": np.array([1])}, "x"),
        ({"x": np.zeros((1, 2)), "k": 1}, "new_data"),
    ]
    for data, named in bad:
        if named == "k" and data["k"].dtype == np.int64:
            buf2 = ModelBasedReplay(3)
            buf2.insert_data_slice({"k": np.zeros(1, np.int8)})
            with pytest.raises(SpecError, match="k: expected values of dtype int8"):
                buf2.insert_data_slice({"k": np.array([2**40])})
            continue
        with pytest.raises(SpecError, match=named):
            buf.insert_data_slice(data)
        if named != "new_data":  # the same row through insert_transition
            with pytest.raises(SpecError, match=named):
                buf.insert_transition({k: v[0] if isinstance(v, np.ndarray) else v
                                       for k, v in data.items()})  # fmt: skip
        assert flat_state(buf) == before
    buf.insert_data_slice({"x": np.ones((2, 2)), "k": np.array([3, 4], np.int32)})  # lossless
    assert buf.get_all()["k"].tolist() == [2, 3, 4] and buf.data["k"].dtype == np.int64
    assert saved["data"]["k"].tolist() == [1, 2, 0]  # the saved state did not follow
    for first in ({"x": np.array([[np.nan]])}, {"x": np.array([object()])}, {"x": 1.0}):
        fresh = ModelBasedReplay(3)
        with pytest.raises(SpecError, match="x"):
            fresh.insert_data_slice(first)
        assert fresh.data == {} and len(fresh) == 0


def test_rows_live_in_the_shared_ring_and_state_checks_the_cursor():
    from rlstore.storage import RingStorage

    buf = ModelBasedReplay(4)
    buf.insert_data_slice(rows(0, 6))
    assert isinstance(buf._ring, RingStorage) and buf._ring.rows_written == 6
    sd = buf.state_dict()
    fresh = ModelBasedReplay(4)
    with pytest.raises(CheckpointError, match="does not fit"):
        fresh.load_state_dict({**sd, "size": 2, "step": 3})  # a ring that is not full wraps
    assert fresh.data == {} and len(fresh) == 0
    fresh.load_state_dict(sd)
    fresh.insert_data_slice(rows(6, 7))
    assert fresh.get_all()["k"].tolist() == [3, 4, 5, 6] and fresh.step == 3


def _discrete_data(actions):
    n = len(actions)
    obs = np.arange(2 * n, dtype=np.float32).reshape(n, 2)
    return {"obs": obs, "action": np.asarray(actions), "next_obs": obs + 1, "reward": np.ones(n)}


def test_one_hot_refuses_non_integral_actions_and_a_bad_num_actions():
    """num_actions one-hot: 1.7 was truncated to class 1 silently; 0 / True / 2.5 classes
    were not named. Integral floats (2.0) are lossless and encoded."""
    from rlstore.buffers.model_based import DataSplit

    sp = DataSplit(np.arange(4), np.arange(0), np.zeros((1, 4), np.int64))
    ds = model_dataset(_discrete_data([0.0, 2.0, 1.0, 2.0]), sp, num_actions=3)
    raw_onehot = ds.scaler.inverse_transform(ds.train_inputs)[:, 2:]
    np.testing.assert_allclose(raw_onehot, np.eye(3)[[0, 2, 1, 2]], atol=1e-6)
    for bad in ([0.0, 1.7, 1.0, 0.0], [0, 3, 1, 0], [0, -1, 1, 0], [True, False, True, True]):
        with pytest.raises(SpecError, match="action: expected integers in"):
            model_dataset(_discrete_data(bad), sp, num_actions=3)
    for bad_n in (0, True, 2.5, "3"):
        with pytest.raises(ConfigError, match="num_actions: expected an int >= 1"):
            model_dataset(_discrete_data([0, 1, 1, 0]), sp, num_actions=bad_n)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"validation_ratio": "0.2"}, "validation_ratio"),
        ({"validation_ratio": True}, "validation_ratio"),
        ({"validation_ratio": float("nan")}, "validation_ratio"),
        ({"max_holdout": 2.5}, "max_holdout"),
        ({"max_holdout": -1}, "max_holdout"),
        ({"ensemble_size": 1.5}, "ensemble_size"),
        ({"ensemble_size": True}, "ensemble_size"),
        ({"ensemble_size": 0}, "ensemble_size"),
    ],
)
def test_split_arguments_are_checked_and_named(kwargs, name):
    """A string / float ensemble_size raised a bare TypeError, max_holdout=2.5 was truncated."""
    buf = ModelBasedReplay(8, seed=0)
    buf.insert_data_slice(rows(0, 6))
    before = buf.state_dict()["rng"]
    with pytest.raises(ConfigError, match=name):
        buf.train_validation_split(**kwargs)
    assert buf.state_dict()["rng"] == before


@pytest.mark.parametrize(("start", "end"), [(0, 1.5), (False, True), (0.0, 2), ("0", 2)])
def test_get_data_slice_takes_int_positions_only(start, end):
    buf = ModelBasedReplay(8)
    buf.insert_data_slice(rows(0, 6))
    with pytest.raises(SpecError, match="start_pos, end_pos"):
        buf.get_data_slice(start, end)


@pytest.mark.parametrize(
    "change",
    [
        {"step": 1.5},
        {"size": "5"},
        {"data": {"x": np.full((5, 2), np.nan, np.float32), "k": np.zeros(5, np.int64)}},
    ],
)
def test_load_state_dict_refuses_fractional_counters_and_non_finite_rows(change):
    """step=1.5 was truncated to 1, "5" raised a bare ValueError, NaN rows (which inserts
    refuse) were loaded."""
    src = ModelBasedReplay(5)
    src.insert_data_slice(rows(0, 7))
    buf = ModelBasedReplay(5)
    with pytest.raises(CheckpointError):
        buf.load_state_dict({**src.state_dict(), **change})
    with pytest.raises(CheckpointError, match="ModelBasedReplay state"):
        buf.load_state_dict(None)  # type: ignore[arg-type]
    assert len(buf) == 0 and buf.data == {}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"reward": None}, "missing \\['reward'\\]"),
        ({"next_obs": np.zeros((4, 3), np.float32)}, "next_obs shaped like obs"),
        ({"reward": np.ones(5)}, "expected N rows each"),
    ],
)
def test_model_dataset_names_missing_or_misshapen_fields(change, match):
    """A missing field raised KeyError, shape mismatches numpy's ValueError."""
    from rlstore.buffers.model_based import DataSplit

    data = {**_discrete_data([0, 1, 1, 0]), **change}
    data = {k: v for k, v in data.items() if v is not None}
    sp = DataSplit(np.arange(3), np.array([3]), np.zeros((1, 3), np.int64))
    with pytest.raises(SpecError, match=match):
        model_dataset(data, sp)


def test_model_dataset_refuses_a_split_of_another_buffer():
    """Indices past the data's rows raised IndexError (negative ones wrapped silently)."""
    from rlstore.buffers.model_based import DataSplit

    for train in (np.arange(5), np.array([-1, 0, 1])):
        sp = DataSplit(train, np.array([], np.int64), np.zeros((1, train.size), np.int64))
        with pytest.raises(SpecError, match=r"split: expected row indices in \[0, 4\)"):
            model_dataset(_discrete_data([0, 1, 1, 0]), sp)


def test_standard_scaler_refuses_non_finite_rows():
    """fit on a NaN row gave NaN mean / std that scaled every later input to NaN."""
    with pytest.raises(SpecError, match="x: expected finite values"):
        StandardScaler().fit(np.array([[np.nan], [1.0]]))
