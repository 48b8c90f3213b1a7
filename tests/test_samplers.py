"""Tests for rlstore.samplers: uniform index sampling and exact RNG-state round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.samplers import UniformSampler, make_rng, rng_state, set_rng_state


def _uniform(seed: int | np.random.Generator, lo: int, hi: int) -> UniformSampler:
    s = UniformSampler(seed)
    s.on_write(lo, hi)
    return s


def test_uniform_in_the_live_window_and_roughly_uniform() -> None:
    s = _uniform(1, 30, 40)
    batch = s.sample(100_000)
    idx = batch.indices
    assert idx.dtype == np.int64 and idx.min() >= 30 and idx.max() <= 39
    np.testing.assert_array_equal(batch.weights, 1.0)
    counts = np.bincount(idx - 30, minlength=10)
    # each count ~ Binomial(1e5, 0.1): sd = sqrt(1e5 * 0.1 * 0.9) ~ 95; allow 6 sd
    assert np.all(np.abs(counts - 10_000) < 6 * 95)


def test_errors() -> None:
    s = UniformSampler(seed=0)
    with pytest.raises(EmptyBufferError):
        s.sample(3)
    s.on_write(0, 5)
    with pytest.raises(CapacityError, match="batch_size: expected an int >= 1, got 0"):
        s.sample(0)
    with pytest.raises(SpecError, match="lo, hi"):
        s.on_write(3, 2)
    s.on_write(0, 4)  # uniform keeps nothing per id: a window may also start over
    with pytest.raises(ConfigError, match="update_priorities"):
        s.update_priorities([0], [1.0])
    with pytest.raises(ConfigError, match="seed"):
        make_rng("seed")  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="rng"):
        s.load_state_dict({})


def test_state_round_trip_draws_the_same_future() -> None:
    a = _uniform(123, 0, 50)
    a.sample(7)
    sd = json.loads(json.dumps(a.state_dict()))  # JSON-able
    expected = [a.sample(16).indices for _ in range(3)]
    b = UniformSampler(seed=999)
    b.load_state_dict(sd, window=(0, 50))
    for e in expected:
        np.testing.assert_array_equal(b.sample(16).indices, e)


def test_generator_is_shared_and_bit_generator_class_restored() -> None:
    g = np.random.default_rng(5)
    s = UniformSampler(g)
    assert s.rng is g
    philox = np.random.Generator(np.random.Philox(3))
    state = rng_state(philox)
    want = philox.integers(0, 100, 5)
    restored = set_rng_state(np.random.default_rng(0), state)
    assert type(restored.bit_generator).__name__ == "Philox"
    np.testing.assert_array_equal(restored.integers(0, 100, 5), want)


# --------------------------------------------------------------------------- RNG states


@pytest.mark.parametrize("name", ["PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"])
def test_every_allowed_bit_generator_round_trips(name: str) -> None:
    src = np.random.Generator(getattr(np.random, name)(11))
    src.integers(0, 10, 3)
    state = rng_state(src)
    want = src.integers(0, 1 << 30, 6)
    same = set_rng_state(np.random.Generator(getattr(np.random, name)(0)), state)
    other = set_rng_state(np.random.default_rng(0), state)
    for g in (same, other):
        np.testing.assert_array_equal(g.integers(0, 1 << 30, 6), want)


def test_a_file_naming_a_numpy_function_never_calls_it() -> None:
    """The class name is looked up in an allow-list: "seed" used to call np.random.seed()
    (reseeding the global RNG) before the load failed."""
    before = np.random.get_state()  # noqa: NPY002 - the global RNG is what is checked
    for name in ("seed", "default_rng", "RandomState", "BitGenerator", "random", None, 3):
        with pytest.raises(CheckpointError, match="bit_generator: expected one of"):
            set_rng_state(np.random.default_rng(0), {"bit_generator": name, "state": {}})
    after = np.random.get_state()  # noqa: NPY002
    assert before[0] == after[0] and before[2:] == after[2:]
    np.testing.assert_array_equal(before[1], after[1])  # the global RNG was not touched


def _pcg(**edits: object) -> dict:
    state = rng_state(np.random.default_rng(3))
    for path, value in edits.items():
        node = state
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return state


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ([1, 2], "expected a dict, got list"),
        ({"bit_generator": "PCG64"}, "expected keys"),
        (_pcg(state__state=-1), r"state\.state: expected an int in \[0, "),
        (_pcg(state__inc=1 << 128), r"state\.inc: expected an int in"),
        (_pcg(state__state="12"), "expected an int, got '12'"),
        (_pcg(state__state=1.5), "expected an int, got 1.5"),
        (_pcg(has_uint32=True), "has_uint32: expected an int, got True"),
        (_pcg(has_uint32=2), "has_uint32: expected an int in"),
        (_pcg(uinteger=1 << 32), "uinteger: expected an int in"),
        (_pcg(extra=1), "expected keys"),
        (_pcg(state=[1, 2]), "state: expected keys"),
        ({**rng_state(np.random.Generator(np.random.SFC64(1))), "state": {"state": [1, 2]}},
         r"state\.state: expected 4 integers"),
        ({**rng_state(np.random.Generator(np.random.SFC64(1))),
          "state": {"state": np.array([-1, 0, 0, 0])}}, r"state\.state: expected 4 integers"),
        ({**rng_state(np.random.Generator(np.random.Philox(1))), "buffer_pos": 5},
         "buffer_pos: expected an int in"),
        ({**rng_state(np.random.Generator(np.random.MT19937(1))),
          "state": {"key": np.zeros(624, np.uint32), "pos": 625}}, r"state\.pos: expected"),
        ({**rng_state(np.random.Generator(np.random.MT19937(1))),
          "state": {"key": np.zeros(624, np.float64), "pos": 0}}, r"state\.key: expected 624"),
    ],
)  # fmt: skip
def test_malformed_states_raise_checkpoint_error_and_change_nothing(
    state: object, match: str
) -> None:
    """Before: ValueError / TypeError / KeyError / OverflowError leaked from numpy."""
    g = np.random.default_rng(0)
    before = rng_state(g)
    with pytest.raises(CheckpointError, match=match):
        set_rng_state(g, state)  # type: ignore[arg-type]
    assert rng_state(g) == before
    s = UniformSampler(g)
    with pytest.raises(CheckpointError, match="sampler.rng"):
        s.load_state_dict({"rng": state})
    assert s.rng is g and rng_state(g) == before


def test_sampler_state_must_be_a_dict_with_rng() -> None:
    for sd in (None, [1], {"rng": rng_state(np.random.default_rng(0)), "x": 1}):
        with pytest.raises(CheckpointError, match="sampler: expected the key 'rng'"):
            UniformSampler(0).load_state_dict(sd)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", [True, False, -1, 1.0, "3"])
def test_make_rng_refuses_bools_negatives_and_non_ints(seed: object) -> None:
    with pytest.raises(ConfigError, match="seed: expected an int >= 0"):
        make_rng(seed)  # type: ignore[arg-type]
