"""Tests of the PyTorchRL MBReplayBuffer facade against naive references."""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstore.compat.model_based import MBReplayBuffer
from rlstore.compat.pytorchrl import ACT, DONE, DONE2, OBS, OBS2, REW
from rlstore.errors import ConfigError, EmptyBufferError, RLStoreError, SpecError


def sample(k, n_envs=2):
    """Vector step k: env e has obs [k, e], action (k + e) % 3, reward k, next obs obs + 1."""
    e = torch.arange(n_envs, dtype=torch.float32)
    obs = torch.stack([torch.full((n_envs,), float(k)), e], 1)
    return {
        OBS: obs,
        ACT: ((k + e.long()) % 3)[:, None],
        REW: torch.full((n_envs, 1), float(k)),
        OBS2: obs + 1.0,
        DONE: torch.zeros(n_envs, 1),
        DONE2: torch.zeros(n_envs, 1),
    }


def make(size, **kw):
    envs = SimpleNamespace(single_action_space=gym.spaces.Discrete(3))
    actor = kw.pop("actor", SimpleNamespace())
    return MBReplayBuffer(size, "cpu", actor, SimpleNamespace(), envs, **kw)


def test_vector_steps_append_env_rows_and_wrap_chronologically():
    buf = make(5)
    for k in range(4):  # 8 rows into 5: rows (k, e) for k = 1.5.. -> the newest five
        buf.insert_transition(sample(k))
    rows = [(float(k), float(e)) for k in range(4) for e in range(2)][-5:]
    got = buf.get_all_buffer_data()
    assert [tuple(r) for r in got[OBS].tolist()] == rows
    assert (buf.size, buf.step) == (5, 8 % 5)
    assert got[ACT].dtype == np.int64 and got[REW][:, 0].tolist() == [r[0] for r in rows]
    assert [tuple(r) for r in buf.get_data_slice(1, 3)[OBS].tolist()] == rows[1:3]
    buf.reset()
    assert buf.size == 0 and buf.get_all_buffer_data()[OBS].shape == (0, 2)
    with pytest.raises(SpecError, match="leading env axis"):
        buf.insert_transition({OBS: torch.tensor(1.0)})


def test_insert_single_tensor_slice_wraps_without_moving_the_cursor():
    buf = make(4)
    buf.insert_data_slice({"x": np.arange(3.0)})
    store: dict[str, np.ndarray] = {}
    assert buf.insert_single_tensor_slice(store, "y", np.array([10.0, 11.0, 12.0])) == 3
    assert store["y"].tolist() == [11.0, 12.0, 0.0, 10.0] and buf.step == 3  # from step 3


def test_generate_batches_split_scaler_one_hot_and_no_empty_batch():
    buf = make(100, validation_ratio=0.25, seed=0)
    for k in range(8):  # 16 rows: floor(16 * 0.25) = 4 holdout, 12 train
        buf.insert_transition(sample(k))
    batches = list(buf.generate_batches(None, mini_batch_size=4, num_epochs=2))
    assert len(batches) == 6 and [b["batch_number"] for b in batches] == [0, 1, 2] * 2
    assert all(b["train_input"].shape == (4, 5) and b["max_batches"] == 3 for b in batches)
    sc = buf.scaler
    hold_in = sc.inverse_transform(batches[0]["holdout_input"].numpy())
    train_in = np.concatenate(
        [sc.inverse_transform(b["train_input"].numpy()) for b in batches if b["epoch"] == 0]
    )
    assert hold_in.shape == (4, 5) and train_in.shape == (12, 5)
    # naive rows: [obs (2), one-hot(action) (3)]; labels [next_obs - obs = 1, 1, reward]
    data = buf.get_all_buffer_data()
    naive = np.array(
        [[*o, *(1.0 if a[0] == c else 0.0 for c in range(3))]
         for o, a in zip(data[OBS], data[ACT], strict=True)]
    )  # fmt: skip
    together = np.concatenate([train_in, hold_in])
    np.testing.assert_allclose(
        together[np.lexsort(together.T[::-1])], naive[np.lexsort(naive.T[::-1])], atol=1e-5
    )
    np.testing.assert_allclose(sc.mean, train_in.mean(axis=0), atol=1e-6)  # train rows only
    labels = torch.cat([b["train_label"] for b in batches[:3]]).numpy()
    np.testing.assert_allclose(labels[:, :2], 1.0)
    # the reward label is the obs[0] of the row (reward k = obs[0] = k)
    order = np.argsort(train_in[:, 0], kind="stable")
    np.testing.assert_allclose(np.sort(labels[:, 2]), train_in[order, 0], atol=1e-5)


def test_divisible_sizes_do_not_yield_an_empty_batch_and_ensembles_get_a_member_axis():
    model = SimpleNamespace(reward_function=lambda *a: 0.0, ensemble_size=3)
    buf = make(100, validation_ratio=0.0, actor=SimpleNamespace(dynamics_model=model))
    for k in range(4):
        buf.insert_transition(sample(k))  # 8 rows, batch 4 -> exactly 2 batches
    batches = list(buf.generate_batches(1, mini_batch_size=4))
    assert len(batches) == 2
    assert all(b["train_input"].shape == (3, 4, 5) for b in batches)
    assert batches[0]["train_label"].shape == (3, 4, 2)  # known reward function: no reward
    assert batches[0]["holdout_input"].shape == (0, 5)


def test_errors_and_parameters():
    buf = make(10)
    with pytest.raises(EmptyBufferError):
        next(buf.generate_batches(1))
    with pytest.raises(ConfigError, match="validation_ratio"):
        make(10, validation_ratio=1.0)
    buf.update_storage_parameter("validation_ratio", 0.5)
    assert buf.validation_ratio == 0.5
    with pytest.raises(ConfigError, match="nope"):
        buf.update_storage_parameter("nope", 1.0)
    factory = MBReplayBuffer.create_factory(7, seed=1)
    built = factory("cpu", None, None, None)
    assert isinstance(built, MBReplayBuffer) and built.max_size == 7
    assert built.after_gradients(None, {"a": 1}) == {"a": 1}


def test_rejected_inserts_change_nothing_and_are_named():
    """Issue 8's repro: an object action after a valid obs wrote the obs (oldest row read 99)
    and raised a bare TypeError; fractional actions were truncated, NaN rewards stored."""
    from _helpers import flat_state

    buf = MBReplayBuffer(3, "cpu", None, None, None)
    for k in range(3):
        buf.insert_transition(sample(k))
    before = flat_state(buf.core)
    bad = sample(9)
    cases = [
        ({**bad, OBS: torch.full((2, 2), 99.0), ACT: np.array([[None], [None]], dtype=object)},
         ACT),
        ({**bad, ACT: torch.tensor([[0.5], [1.0]])}, ACT),
        ({**bad, REW: torch.tensor([[float("nan")], [0.0]])}, REW),
        ({**bad, OBS: torch.tensor([[float("inf"), 0.0], [0.0, 0.0]])}, OBS),
        ({**bad, OBS2: np.zeros((2, 3), np.float32)}, OBS2),
        ({**bad, REW: "x"}, REW),
        ({**bad, REW: {"a": 1}}, REW),
    ]  # fmt: skip
    for data, named in cases:
        with pytest.raises(SpecError, match=named):
            buf.insert_transition(data)
        assert flat_state(buf.core) == before
    assert 99.0 not in buf.get_all_buffer_data()[OBS]
    storage: dict = {}
    with pytest.raises(SpecError, match=ACT):
        buf.insert_single_tensor_slice(storage, ACT, np.array([[None]], dtype=object))
    assert storage == {}


def test_constructor_arguments_are_checked():
    with pytest.raises(ConfigError, match="device"):
        MBReplayBuffer(10, "nope", None, None, None)
    for kw, named in (({"max_holdout": True}, "max_holdout"), ({"ensemble_size": 0},
                      "ensemble_size"), ({"max_holdout": "5"}, "max_holdout")):  # fmt: skip
        with pytest.raises(RLStoreError, match=named):
            make(10, **kw)
    with pytest.raises(RLStoreError, match="max_size"):
        make(True)


def test_numeric_parameters_refuse_bools_nan_and_strings():
    """update_storage_parameter stored True as validation_ratio 1.0 and NaN as is; a string
    ratio in the constructor raised a bare TypeError."""
    buf = make(10)
    for bad in (True, float("nan"), "0.5", None):
        with pytest.raises(ConfigError, match="new_parameter_value"):
            buf.update_storage_parameter("validation_ratio", bad)
    assert buf.validation_ratio == 0.2
    for bad in (2.5, float("inf")):  # an int parameter took int(2.5) == 2; inf overflowed
        with pytest.raises(ConfigError, match="new_parameter_value"):
            buf.update_storage_parameter("max_holdout", bad)
    buf.update_storage_parameter("max_holdout", 7.0)
    assert buf.max_holdout == 7 and isinstance(buf.max_holdout, int)
    with pytest.raises(ConfigError, match="validation_ratio"):
        make(10, validation_ratio="0.5")
