"""Tests for rlstore.specs: spec normalisation, inference, safe casting, finiteness checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlstore.errors import RLStoreError, SpecError
from rlstore.specs import FieldSpec, all_finite, cast_to_spec, infer_specs, validate_batch


def test_fieldspec_normalises_and_round_trips_json() -> None:
    s = FieldSpec("obs", [3, np.int64(2)], "uint8")
    assert s.shape == (3, 2) and s.dtype == np.dtype(np.uint8)
    assert FieldSpec.from_json(s.to_json()) == s
    with pytest.raises(SpecError, match="obs"):
        FieldSpec("obs", (3,), object)
    with pytest.raises(SpecError, match="non-negative"):
        FieldSpec("obs", (-1,), np.float32)
    with pytest.raises(SpecError, match="missing key 'dtype'"):
        FieldSpec.from_json({"name": "x", "shape": []})


def test_infer_specs_keeps_dtypes_flattens_one_dict_level() -> None:
    sample = {
        "obs": {"image": np.zeros((4, 3, 8, 8), np.uint8), "state": np.zeros((4, 7))},
        "action": np.zeros((4,), np.int64),
        "reward": [0.0, 1.0, 2.0, 3.0],
        "flag": np.zeros(4, bool),
        "half": np.zeros((4, 2), np.float16),
    }
    specs = infer_specs(sample, batch_ndim=1)
    assert list(specs) == ["obs.image", "obs.state", "action", "reward", "flag", "half"]
    assert specs["obs.image"] == FieldSpec("obs.image", (3, 8, 8), np.uint8)
    assert specs["obs.state"] == FieldSpec("obs.state", (7,), np.float32)  # float64 -> float32
    assert specs["action"].dtype == np.int64 and specs["action"].shape == ()
    assert specs["reward"] == FieldSpec("reward", (), np.float32)
    assert specs["flag"].dtype == np.bool_
    assert specs["half"].dtype == np.float16
    with pytest.raises(SpecError, match="one level"):
        infer_specs({"obs": {"a": {"b": np.zeros(2)}}}, batch_ndim=0)
    with pytest.raises(SpecError, match="obs: expected at least 2 batch axes"):
        infer_specs({"obs": np.zeros(3)}, batch_ndim=2)
    with pytest.raises(SpecError, match="obs: cannot store dtype"):
        infer_specs({"obs": np.array(["a"])}, batch_ndim=0)


def test_cast_to_spec_fast_path_returns_input_unchanged() -> None:
    spec = FieldSpec("obs", (3,), np.float32)
    x = np.ones((2, 3), np.float32)
    assert cast_to_spec("obs", x, spec, (2,), allow_nonfinite=False) is x


@pytest.mark.parametrize(
    ("value", "dtype", "expected"),
    [
        (np.array([1.5, 2.25], np.float64), np.float32, np.array([1.5, 2.25], np.float32)),
        ([1, 2], np.float32, np.array([1.0, 2.0], np.float32)),  # int -> float is safe
        (np.array([0, 255], np.int64), np.uint8, np.array([0, 255], np.uint8)),  # values fit
        (np.array([3, 4], np.int32), np.int64, np.array([3, 4], np.int64)),
        (np.array([0, 1], np.int64), np.bool_, np.array([False, True])),
        (np.array([1.0, 0.0], np.float32), np.bool_, np.array([True, False])),  # float dones
        # int -> float when exact: 2**24 and its even neighbours fit float32's 24-bit mantissa
        (np.array([2**24, -(2**24) - 2]), np.float32, np.array([2**24, -(2**24) - 2], np.float32)),
        (np.array([2**53, 7], np.uint64), np.float64, np.array([2.0**53, 7.0])),
        (np.array([2**62, -(2**63)]), np.float64, np.array([2.0**62, -(2.0**63)])),
        (np.array([65504, -2048], np.int32), np.float16, np.array([65504, -2048], np.float16)),
    ],
)
def test_cast_to_spec_accepts_safe_casts(value, dtype, expected) -> None:
    out = cast_to_spec("x", value, FieldSpec("x", (), dtype), (2,), allow_nonfinite=False)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize(
    ("value", "dtype", "match"),
    [
        (np.array([1.0, 2.0]), np.int64, r"action: expected dtype int64, got float64"),
        (np.array([0, 256]), np.uint8, r"action: expected values of dtype uint8 in \[0, 255\]"),
        (np.array([-1, 2]), np.uint8, r"in \[0, 255\], got int64 values in \[-1, 2\]"),
        (np.array([0, 2]), np.bool_, r"action: expected dtype bool \(or exact 0/1 numbers\)"),
        (np.array([0.0, 0.5]), np.bool_, r"action: expected dtype bool"),
        (np.array([1.0, np.nan]), np.bool_, r"action: expected dtype bool"),
        (np.array([1j, 2j]), np.float32, r"action: expected dtype float32, got complex128"),
        (np.zeros(3, np.float32), np.float32, r"action: expected shape \(2,\), got \(3,\)"),
        ({"a": 1}, np.float32, r"action: expected an array of shape \(2,\), got a dict"),
        # issue 8: no bools where numbers are expected, no float32 overflow to inf
        ([True, False], np.float32, r"action: expected dtype float32, got bool"),
        ([True, False], np.int64, r"action: expected dtype int64, got bool"),
        (np.array([1e300, 0.0]), np.float32, r"action: expected values within the float32"),
        (["1", "2"], np.float32, r"action: expected dtype float32, got <U1"),
        # no silent rounding of integers a float cannot hold
        ([0, 2**24 + 1], np.float32, r"in float32 \(\|x\| <= 2\*\*24\), got 16777217"),
        (np.array([-(2**53) - 1, 0]), np.float64, r"in float64 .*got -9007199254740993"),
        (np.array([2**64 - 1, 0], np.uint64), np.float64, r"got 18446744073709551615"),
        (np.array([2049, 0], np.int16), np.float16, r"in float16 .*got 2049"),
        (np.array([70000, 0], np.int32), np.float16, r"got 70000 \(would be stored as inf\)"),
        (torch.ones(2, requires_grad=True), np.float32, r"action: expected data, got a tensor"),
    ],
)
def test_cast_to_spec_rejects_unsafe_input_naming_the_field(value, dtype, match) -> None:
    with pytest.raises(SpecError, match=match):
        cast_to_spec("action", value, FieldSpec("action", (), dtype), (2,), allow_nonfinite=False)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_rejected_unless_allowed(bad: float) -> None:
    spec = FieldSpec("reward", (), np.float32)
    x = np.array([1.0, bad], np.float32)
    with pytest.raises(SpecError, match="reward: expected finite values, got 1 NaN/inf"):
        cast_to_spec("reward", x, spec, (2,), allow_nonfinite=False)
    out = cast_to_spec("reward", x, spec, (2,), allow_nonfinite=True)
    np.testing.assert_array_equal(out, x)
    assert isinstance(SpecError("x"), RLStoreError) and isinstance(SpecError("x"), ValueError)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("size", [1, 17, 300, 5000])
def test_all_finite_matches_isfinite(dtype, size: int) -> None:
    rng = np.random.default_rng(size)
    big = np.finfo(dtype).max
    for trial in range(30):
        x = (rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4)).astype(dtype)
        if trial % 3 == 0:
            x[rng.integers(size)] = big  # huge finite values must not look non-finite
        if trial % 2 == 1:
            x[rng.integers(size)] = rng.choice([np.nan, np.inf, -np.inf])
        assert all_finite(x) == bool(np.isfinite(x).all())
        assert all_finite(x.reshape(1, -1)) == bool(np.isfinite(x).all())
        assert all_finite(x[::3]) == bool(np.isfinite(x[::3]).all())  # a strided view
        assert all_finite(x[0]) == bool(np.isfinite(x[0]))  # a numpy scalar
    assert all_finite(np.zeros(0, dtype))


def test_validate_batch_names_missing_and_extra_keys() -> None:
    specs = {"a": FieldSpec("a", (), np.float32), "b": FieldSpec("b", (2,), np.int64)}
    out = validate_batch(specs, {"a": [1.0], "b": [[1, 2]]}, (1,))
    assert out["a"].dtype == np.float32 and out["b"].shape == (1, 2)
    with pytest.raises(SpecError, match=r"missing \['b'\], unexpected \['c'\]"):
        validate_batch(specs, {"a": [1.0], "c": [1]}, (1,))


def test_field_spec_dtypes_are_native() -> None:
    """A big-endian dtype is stored in the native byte order (lossless; torch cannot read the
    other), and a value of either byte order casts to it."""
    spec = FieldSpec("obs", (2,), np.dtype(">f4"))
    assert spec.dtype == np.float32 and spec.dtype.isnative
    assert FieldSpec.from_json(spec.to_json()) == spec == FieldSpec("obs", (2,), "<f4")
    out = cast_to_spec("obs", np.array([[1.5, -2.0]], ">f4"), spec, (1,), allow_nonfinite=False)
    assert out.dtype.isnative and out.tolist() == [[1.5, -2.0]]
    assert infer_specs({"a": np.zeros(3, ">i4")}, batch_ndim=1)["a"].dtype.isnative


_A = FieldSpec("action", (), np.int64)


@pytest.mark.parametrize(
    ("specs", "match"),
    [  # each was accepted: the first broke at the first add (a KeyError), the second at
        # save/load (a spec saves under its own name, so 'obs' came back missing), the
        # others silently (a dict key '', the second of two specs named alike overriding)
        ({"obs": FieldSpec("obs", (2,), np.float32), "obs.x": FieldSpec("obs.x", (1,), np.float32),
          "action": _A}, r"expected 'obs' alone or 'obs.<key>' fields .*\['obs', 'obs.x'\]"),
        ({"obs": FieldSpec("x", (2,), np.float32), "action": _A},
         r"specs\['obs'\]: expected a FieldSpec named 'obs', got 'x'"),
        ({"obs.": FieldSpec("obs.", (2,), np.float32), "action": _A}, r"non-empty keys"),
        ([{"name": "obs", "shape": [2], "dtype": "<f4"}, {"name": "obs", "shape": [3],
          "dtype": "<f4"}, _A.to_json()], r"expected distinct field names"),
    ],
)  # fmt: skip
def test_transition_schema_refuses_specs_it_cannot_store_or_restore(specs, match) -> None:
    from rlstore import ReplayBuffer
    from rlstore.specs import TransitionSchema

    with pytest.raises(SpecError, match=match):
        TransitionSchema.parse(specs)
    with pytest.raises(SpecError, match=match):
        ReplayBuffer(4, specs=specs)


def test_a_first_add_with_an_empty_dict_observation_key_is_refused() -> None:
    from _helpers import flat_state

    from rlstore import ReplayBuffer

    buf = ReplayBuffer(4, seed=0)
    before = flat_state(buf)
    with pytest.raises(SpecError, match="non-empty keys"):
        buf.add({"": np.zeros(2)}, 0, 0.0, {"": np.ones(2)}, False, False)
    assert flat_state(buf) == before


@pytest.mark.parametrize(
    ("d", "match"),
    [  # a null dtype became float64 silently; the others raised a bare TypeError
        ({"name": "x", "shape": [2], "dtype": None}, r"x: invalid dtype None"),
        (
            {"name": "x", "shape": None, "dtype": "<f4"},
            r"x: shape must be a list of ints, got None",
        ),
        ({"name": "x", "shape": 5, "dtype": "<f4"}, r"x: shape must be a list of ints, got 5"),
        ({"name": "x", "shape": [2], "dtype": "nope"}, r"x: invalid dtype 'nope'"),
        (["x", [2], "<f4"], r"field spec: expected a dict"),
    ],
)
def test_field_spec_from_json_refuses_malformed_entries(d, match) -> None:
    with pytest.raises(SpecError, match=match):
        FieldSpec.from_json(d)
    if isinstance(d, dict) and d["dtype"] is None:
        with pytest.raises(SpecError, match=match):
            FieldSpec("x", (2,), None)  # type: ignore[arg-type]


def test_field_names_with_a_slash_are_refused_at_the_first_add() -> None:
    """A dict observation key or an extra with '/' was stored and sampled, but the buffer
    could never be saved (checkpoint keys are '/'-joined): refused up front, nothing changed."""
    from _helpers import flat_state

    from rlstore import ReplayBuffer

    buf = ReplayBuffer(4, seed=0)
    before = flat_state(buf)
    with pytest.raises(SpecError, match=r"without '/', got \['obs.cam/rgb'\]"):
        buf.add({"cam/rgb": np.zeros(2)}, 0, 0.0, {"cam/rgb": np.ones(2)}, False, False)
    with pytest.raises(SpecError, match=r"without '/', got \['a/b'\]"):
        buf.add(np.zeros(2), 0, 0.0, np.ones(2), False, False, **{"a/b": np.zeros(1)})
    assert flat_state(buf) == before
    with pytest.raises(SpecError, match="without '/'"):
        ReplayBuffer(4, specs={"obs": {"shape": [2], "dtype": "<f4"}, "action": {"shape": [],
                     "dtype": "<i8"}, "x/y": {"shape": [], "dtype": "<f4"}})  # fmt: skip


@pytest.mark.parametrize(
    "flag",
    [
        FieldSpec("terminated", (), np.float32),  # TypeError in the add (float | float)
        FieldSpec("truncated", (2,), np.bool_),  # ValueError in the add (a broadcast)
        FieldSpec("terminated", (), np.int64),  # accepted: ints came back as flags
    ],
)
def test_flags_declared_other_than_scalar_bools_are_refused(flag: FieldSpec) -> None:
    from rlstore import ReplayBuffer

    specs = {"obs": FieldSpec("obs", (2,), np.float32), "action": _A, flag.name: flag}
    with pytest.raises(SpecError, match=rf"specs\['{flag.name}'\]: expected shape \(\) dtype bool"):
        ReplayBuffer(4, num_envs=2, specs=specs)
