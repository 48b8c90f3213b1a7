"""A rejected first add or extend leaves a ReplayBuffer exactly as constructed (issue 8).

The schema is inferred from the first add; it used to be allocated before the rest of the
transition was checked, so a bad ``next_obs`` fixed the wrong obs shape for good and a NaN action
fixed a float action dtype. Every case below must raise a named RLStoreError, and the valid add
that follows must give exactly the state a fresh buffer gets from it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _helpers import flat_state
from hypothesis import given
from hypothesis import strategies as st

from rlstore.buffers.replay import ReplayBuffer
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, RLStoreError, SpecError

F = np.float32


def valid(n: int) -> dict[str, Any]:
    """A valid first add for ``num_envs = n`` (n = 1: single add, env axis left out)."""
    if n == 1:
        return {"obs": np.zeros(4, F), "action": 1, "reward": 1.0,
                "next_obs": np.ones(4, F), "terminated": False, "truncated": False}  # fmt: skip
    return {"obs": np.zeros((n, 4), F), "action": np.arange(n), "reward": np.ones(n, F),
            "next_obs": np.ones((n, 4), F), "terminated": np.zeros(n, bool),
            "truncated": np.zeros(n, bool)}  # fmt: skip


NAN, INF = float("nan"), float("inf")
# (field, bad value, text the message must name): the field names the argument at fault
BAD_SINGLE: list[tuple[str, Any, str]] = [
    ("next_obs", np.zeros(5, F), "next_obs"),  # issue 8's repro
    ("next_obs", np.zeros((2, 4), F), "next_obs"),
    ("next_obs", {"a": np.zeros(4, F)}, "next_obs"),
    ("next_obs", np.full(4, NAN, F), "next_obs"),
    ("next_obs", "abc", "next_obs"),
    ("next_obs", None, "next_obs"),
    ("obs", np.array([1 + 2j, 0, 0, 0]), "obs"),
    ("obs", np.array([object()] * 4), "obs"),
    ("obs", np.full(4, INF, F), "obs"),
    ("obs", [[1.0], [1.0, 2.0]], "obs"),  # ragged
    ("action", np.float32("nan"), "action"),  # issue 8: later int actions came back float
    ("action", INF, "action"),
    ("action", "1", "action"),
    ("action", None, "action"),
    ("action", {"a": 1}, "action"),
    ("action", 1j, "action"),
    ("reward", np.array([[1.0]]), "reward"),  # wrong rank: was blamed on `action`
    ("reward", NAN, "reward"),
    ("reward", "1.0", "reward"),
    ("reward", None, "reward"),
    ("reward", {"r": 1.0}, "reward"),
    ("reward", 1 + 1j, "reward"),
    ("terminated", 0.5, "terminated"),
    ("terminated", 2, "terminated"),
    ("terminated", "False", "terminated"),
    ("terminated", None, "terminated"),
    ("truncated", NAN, "truncated"),
    ("truncated", np.array([True, False]), "truncated"),
]
BAD_VECTOR: list[tuple[str, Any, str]] = [
    ("obs", np.zeros((3, 4), F), "obs"),  # num_envs axis of 3, not 2
    ("next_obs", np.zeros((3, 4), F), "next_obs"),
    ("action", np.arange(3), "action"),
    ("reward", np.ones(3, F), "reward"),
    ("reward", np.float32(1.0), "reward"),
    ("terminated", np.zeros(3, bool), "terminated"),
    ("truncated", np.array([0.5, 0.0]), "truncated"),
    ("action", np.array([0.0, NAN]), "action"),
]


def _bad_then_valid(n: int, field: str, value: Any, named: str, **extra: Any) -> None:
    buf, fresh = ReplayBuffer(10, num_envs=n, seed=3), ReplayBuffer(10, num_envs=n, seed=3)
    before = flat_state(buf)
    with pytest.raises(RLStoreError, match=named):
        buf.add(**{**valid(n), field: value}, **extra)
    assert flat_state(buf) == before and buf.specs is None and buf.nbytes == 0
    buf.add(**valid(n))
    fresh.add(**valid(n))
    assert flat_state(buf) == flat_state(fresh)
    assert buf.sample(1).action.tolist() == fresh.sample(1).action.tolist()


@pytest.mark.parametrize(("field", "value", "named"), BAD_SINGLE)
def test_rejected_first_single_add_changes_nothing(field: str, value: Any, named: str) -> None:
    _bad_then_valid(1, field, value, named)


@pytest.mark.parametrize(("field", "value", "named"), BAD_VECTOR)
def test_rejected_first_vector_add_changes_nothing(field: str, value: Any, named: str) -> None:
    _bad_then_valid(2, field, value, named)


@pytest.mark.parametrize(
    "hidden", [np.full(3, NAN, F), {"h": np.zeros(3)}, "abc", np.array([1j, 0, 0])]
)
def test_rejected_first_add_with_a_bad_extra_changes_nothing(hidden: Any) -> None:
    _bad_then_valid(1, "obs", np.zeros(4, F), "hidden", hidden=hidden)


def test_issue_repros() -> None:
    b = ReplayBuffer(100)
    with pytest.raises(SpecError, match="next_obs"):
        b.add(np.zeros(5, F), 0, 1.0, np.zeros(4, F), False, False)
    b.add(np.zeros(4, F), 0, 1.0, np.zeros(4, F), False, False)
    assert b.specs is not None and b.specs["obs"].shape == (4,)
    b = ReplayBuffer(100, seed=0)
    with pytest.raises(SpecError, match="action"):
        b.add(np.zeros(4, F), np.float32("nan"), 1.0, np.zeros(4, F), False, False)
    b.add(np.zeros(4, F), 2, 1.0, np.zeros(4, F), False, False)
    assert b.sample(1).action.dtype.is_floating_point is False
    with pytest.raises(SpecError, match="^reward"):
        ReplayBuffer(10).add(np.zeros(4), 0, np.array([[1.0]]), np.zeros(4), False, False)


def test_rejected_first_extend_changes_nothing() -> None:
    t, n = 3, 2
    good = {"obs": np.zeros((t, n, 4), F), "action": np.zeros((t, n), np.int64),
            "reward": np.ones((t, n), F), "next_obs": np.ones((t, n, 4), F),
            "terminated": np.zeros((t, n), bool), "truncated": np.zeros((t, n), bool)}  # fmt: skip
    bad = [("next_obs", np.ones((t, n, 5), F)), ("action", np.full((t, n), NAN)),
           ("reward", np.ones((t, n, 1), F)), ("terminated", np.full((t, n), 2)),
           ("obs", np.zeros((t, 3, 4), F)), ("reward", 1.0)]  # fmt: skip
    for field, value in bad:
        buf, fresh = ReplayBuffer(10, num_envs=n, seed=1), ReplayBuffer(10, num_envs=n, seed=1)
        with pytest.raises(RLStoreError, match=field):
            buf.extend(**{**good, field: value})
        assert buf.specs is None and buf.nbytes == 0
        buf.extend(**good)
        fresh.extend(**good)
        assert flat_state(buf) == flat_state(fresh)


_junk = st.one_of(
    st.none(),
    st.text(max_size=3),
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not np.isfinite(x)),
    st.complex_numbers(min_magnitude=1, max_magnitude=2),
    st.dictionaries(st.sampled_from("ab"), st.integers(0, 1), min_size=1),
    st.integers(1, 6).map(lambda k: np.zeros(k, F)),
    st.integers(1, 3).map(lambda k: np.zeros((k, 4), F)),
    st.just(np.array([object()])),
)


@given(field=st.sampled_from(sorted(valid(1))), value=_junk, n=st.sampled_from([1, 2]))
def test_malformed_first_adds_property(field: str, value: Any, n: int) -> None:
    """Any junk in any one field of a first add: when rejected, the error names the field and
    nothing changed (a later valid add equals a fresh buffer's); junk that is in fact a valid
    first add (a float action of shape (k,)) must be stored exactly like a fresh buffer would."""
    buf, fresh = ReplayBuffer(10, num_envs=n, seed=5), ReplayBuffer(10, num_envs=n, seed=5)
    add = {**valid(n), field: value}
    try:
        buf.add(**add)
    except RLStoreError as exc:
        assert field in str(exc) or field.replace("next_", "") in str(exc), str(exc)
        assert buf.specs is None and buf.nbytes == 0
        add = valid(n)
        buf.add(**add)
    fresh.add(**add)
    assert flat_state(buf) == flat_state(fresh)


@pytest.mark.parametrize("bad", [True, False, np.True_, 2.0, "4", None])
def test_bools_and_non_ints_are_not_counts(bad: Any) -> None:
    with pytest.raises(CapacityError, match="capacity"):
        ReplayBuffer(bad)
    with pytest.raises(CapacityError, match="num_envs"):
        ReplayBuffer(10, num_envs=bad)
    buf = ReplayBuffer(10, seed=0)
    buf.add(**valid(1))
    with pytest.raises(CapacityError, match="batch_size"):
        buf.sample(bad)
    numpy_ints = ReplayBuffer(np.int64(10), num_envs=np.int32(2))
    numpy_ints.add(**valid(2))
    assert len(numpy_ints.sample_indices(np.int64(2))) == 2


def test_gather_errors_are_named() -> None:
    with pytest.raises(EmptyBufferError, match="indices"):
        ReplayBuffer(10).gather(np.array([0]))
    buf = ReplayBuffer(10, seed=0)
    buf.add(**valid(1))
    for bad in (np.array([1]), np.array([-1]), np.array([0.5]), np.array([[0]]), ["a"]):
        with pytest.raises(SpecError, match="indices"):
            buf.gather(bad)
    assert buf.gather([0])["obs"].shape == (1, 4)


def test_huge_capacity_is_a_capacity_error_with_the_bytes() -> None:
    specs = {"obs": {"shape": [1 << 16], "dtype": "float32"}, "action": {"shape": [],
             "dtype": "int64"}}  # fmt: skip
    with pytest.raises(CapacityError, match=r"capacity: cannot allocate [\d,]+ bytes"):
        ReplayBuffer(1 << 50, specs=specs)
    buf = ReplayBuffer(1 << 50)  # inferred from the first add: the add is refused, buffer kept
    with pytest.raises(CapacityError, match="capacity"):
        buf.add(**valid(1))
    assert buf.specs is None and buf.nbytes == 0


def test_bad_device_is_a_config_error() -> None:
    for bad in ("nope", "cuda:x", 3.5):
        with pytest.raises(ConfigError, match="device"):
            ReplayBuffer(10, device=bad)


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"specs": [1]}, SpecError, "specs"),
        ({"specs": {"obs": 3}}, SpecError, "specs"),
        ({"specs": "obs"}, SpecError, "specs"),
        ({"specs": [{"shape": [2], "dtype": "float32"}]}, SpecError, "specs"),
        ({"store_next_obs_once": "no"}, ConfigError, "store_next_obs_once"),
        ({"allow_nonfinite": 1}, ConfigError, "allow_nonfinite"),
    ],
)
def test_malformed_constructor_arguments_are_named(kwargs: dict, error: type, named: str) -> None:
    with pytest.raises(error, match=named):
        ReplayBuffer(10, **kwargs)


def test_big_endian_input_is_stored_natively_sampled_and_reloaded(tmp_path) -> None:
    """Network-order data (``>f4`` observations, ``>i8`` actions), inferred or declared: the
    specs were big-endian, so ``sample`` failed in ``torch.from_numpy`` (a bare ValueError) and
    a saved buffer could not be loaded (its arrays come back native)."""
    from rlstore import checkpoint
    from rlstore.specs import FieldSpec

    declared = {
        "obs": FieldSpec("obs", (2,), np.dtype(">f4")),
        "action": {"shape": [], "dtype": ">i8"},
    }
    for specs in (None, declared):
        buf = ReplayBuffer(4, specs=specs, seed=0)
        for t in range(3):
            obs = np.full(2, t, ">f4")
            buf.add(obs, np.array(t, ">i8"), np.array(0.5, ">f8"), obs + 1, t == 2, False)
        assert buf.specs is not None
        assert buf.specs["obs"].dtype == np.float32 and buf.specs["obs"].dtype.isnative
        assert buf.specs["action"].dtype == np.int64 and buf.specs["action"].dtype.isnative
        batch = buf.sample(3)
        assert sorted(batch.obs[:, 0].tolist()) == sorted(batch.action.float().tolist())
        checkpoint.save(buf, tmp_path)
        back = checkpoint.load(tmp_path)
        assert flat_state(back) == flat_state(buf)
        np.testing.assert_array_equal(
            back.sample(3).next_obs.numpy(), buf.sample(3).next_obs.numpy()
        )
