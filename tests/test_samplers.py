"""Tests for rlstore.samplers: uniform index sampling and exact RNG-state round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError
from rlstore.samplers import UniformSampler, make_rng, rng_state, set_rng_state


def test_uniform_in_range_and_roughly_uniform() -> None:
    s = UniformSampler(seed=1)
    idx = s.sample(10, 100_000)
    assert idx.dtype == np.int64 and idx.min() >= 0 and idx.max() <= 9
    counts = np.bincount(idx, minlength=10)
    # each count ~ Binomial(1e5, 0.1): sd = sqrt(1e5 * 0.1 * 0.9) ~ 95; allow 6 sd
    assert np.all(np.abs(counts - 10_000) < 6 * 95)


def test_mask_sampling_only_hits_true_positions() -> None:
    mask = np.zeros((4, 5), bool)
    mask[1, 2] = mask[3, 0] = True
    idx = UniformSampler(seed=0).sample(mask, 1000)
    assert set(idx.tolist()) == {7, 15}  # flat positions 1*5+2 and 3*5+0
    with pytest.raises(EmptyBufferError, match="mask all False"):
        UniformSampler(seed=0).sample(np.zeros(3, bool), 1)


def test_errors() -> None:
    s = UniformSampler(seed=0)
    with pytest.raises(EmptyBufferError):
        s.sample(0, 3)
    with pytest.raises(CapacityError, match="batch_size: expected an int > 0, got 0"):
        s.sample(5, 0)
    with pytest.raises(ConfigError, match="seed"):
        make_rng("seed")  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="rng"):
        s.load_state_dict({})


def test_state_round_trip_draws_the_same_future() -> None:
    a = UniformSampler(seed=123)
    a.sample(50, 7)
    sd = json.loads(json.dumps(a.state_dict()))  # JSON-able
    expected = [a.sample(50, 16) for _ in range(3)]
    b = UniformSampler(seed=999)
    b.load_state_dict(sd)
    for e in expected:
        np.testing.assert_array_equal(b.sample(50, 16), e)


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
