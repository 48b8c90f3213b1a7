"""RunningMeanStd and DiscountedReturnNormalizer against naive numpy computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlstore.errors import CheckpointError, SpecError
from rlstore.normalize import DiscountedReturnNormalizer, RunningMeanStd


def test_running_mean_std_hand_computed() -> None:
    rms = RunningMeanStd()
    assert rms.count == 0 and float(rms.mean) == 0.0 and float(rms.var) == 1.0
    rms.update(np.array([1.0, 2.0]))
    rms.update(np.array([3.0, 4.0]))
    # all of [1,2,3,4]: mean 2.5, population var (2.25+.25+.25+2.25)/4 = 1.25
    assert rms.count == 4
    assert float(rms.mean) == pytest.approx(2.5)
    assert float(rms.var) == pytest.approx(1.25)
    assert float(rms.std) == pytest.approx(np.sqrt(1.25))


@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=6),
    st.integers(0, 2**32 - 1),
    st.sampled_from([(), (3,), (2, 2)]),
)
def test_batched_updates_equal_statistics_of_the_concatenation(
    sizes: list[int], seed: int, shape: tuple[int, ...]
) -> None:
    rng = np.random.default_rng(seed)
    batches = [rng.normal(loc=3.0, scale=2.0, size=(s, *shape)) for s in sizes]
    rms = RunningMeanStd(shape)
    for b in batches:
        rms.update(b)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(rms.mean, everything.mean(axis=0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rms.var, everything.var(axis=0), rtol=1e-10, atol=1e-12)
    assert rms.count == everything.shape[0]


def test_leading_axes_are_sample_axes_and_torch_is_accepted() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 4, 3))
    rms = RunningMeanStd((3,))
    rms.update(torch.from_numpy(x))
    np.testing.assert_allclose(rms.mean, x.reshape(-1, 3).mean(0))
    np.testing.assert_allclose(rms.var, x.reshape(-1, 3).var(0))
    normed = rms.normalize(torch.from_numpy(x).float(), clip=0.5)
    assert isinstance(normed, torch.Tensor) and normed.dtype == torch.float32
    expected = np.clip((x - x.reshape(-1, 3).mean(0)) / np.sqrt(x.reshape(-1, 3).var(0) + 1e-8),
                       -0.5, 0.5)  # fmt: skip
    np.testing.assert_allclose(normed.numpy(), expected, atol=1e-6)
    with pytest.raises(SpecError, match=r"x: expected shape"):
        rms.update(np.zeros((4, 2)))


def test_running_mean_std_state_dict_round_trip() -> None:
    rng = np.random.default_rng(1)
    a = RunningMeanStd((2,))
    a.update(rng.normal(size=(10, 2)))
    b = RunningMeanStd((2,))
    b.load_state_dict(a.state_dict())
    nxt = rng.normal(size=(7, 2))
    a.update(nxt)
    b.update(nxt)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.var, b.var)
    with pytest.raises(CheckpointError, match="mean: expected shape"):
        RunningMeanStd((3,)).load_state_dict(a.state_dict())


def _naive_filter_std(chunks: list[np.ndarray], gamma: float) -> list[float]:
    """Per env R <- gamma*R + r over the concatenated stream, std of all R so far after each
    chunk (numpy var of everything, no running formula)."""
    stream = np.concatenate(chunks)
    R = np.zeros(stream.shape[1])
    sums = []
    for row in stream:
        R = gamma * R + row
        sums.append(R.copy())
    sums_arr = np.array(sums)
    ends = np.cumsum([len(c) for c in chunks])
    return [float(sums_arr[:e].std()) for e in ends]


def test_discounted_return_normalizer_matches_naive_filter() -> None:
    rng = np.random.default_rng(2)
    chunks = [rng.exponential(size=(16, 4)) for _ in range(3)]
    norm = DiscountedReturnNormalizer(0.9, eps=0.0)
    stds = _naive_filter_std(chunks, 0.9)
    for chunk, std in zip(chunks, stds, strict=True):
        out = norm(chunk)
        np.testing.assert_allclose(out, chunk / std, rtol=1e-10)  # no mean subtraction


def test_discounted_return_filter_hand_computed_and_not_reset_at_episode_ends() -> None:
    norm = DiscountedReturnNormalizer(0.5, eps=0.0)
    norm.update(np.array([[1.0], [1.0]]))
    # R: 1, then .5*1 + 1 = 1.5 ; the filter state carries over to the next call
    np.testing.assert_allclose(norm.returns, [1.5])
    norm.update(np.array([[2.0]]))
    # R = .5*1.5 + 2 = 2.75 ; all R seen: [1, 1.5, 2.75], mean 1.75, var (.5625+.0625+1)/3
    np.testing.assert_allclose(norm.returns, [2.75])
    assert float(norm.rms.var) == pytest.approx((0.5625 + 0.0625 + 1.0) / 3)
    assert norm.scale(np.array([3.0]))[0] == pytest.approx(3.0 / np.sqrt(1.625 / 3))


def test_normalizer_never_subtracts_the_mean() -> None:
    norm = DiscountedReturnNormalizer(0.99)
    r = np.full((32, 2), 5.0)
    out = norm(r)
    assert (out > 0).all()
    np.testing.assert_allclose(out / r, out[0, 0] / 5.0)  # a pure rescaling


def test_normalizer_torch_round_trip_state_and_errors() -> None:
    rng = np.random.default_rng(3)
    a = DiscountedReturnNormalizer(0.99)
    a(torch.from_numpy(rng.random((8, 3))).float())
    b = DiscountedReturnNormalizer(0.99)
    b.load_state_dict(a.state_dict())
    x = torch.from_numpy(rng.random((8, 3))).float()
    out_a, out_b = a(x), b(x)
    assert isinstance(out_a, torch.Tensor) and out_a.dtype == torch.float32
    torch.testing.assert_close(out_a, out_b)
    with pytest.raises(SpecError, match="expected 3 env columns"):
        a(np.zeros((4, 2)))
    with pytest.raises(CheckpointError, match="gamma"):
        DiscountedReturnNormalizer(0.9).load_state_dict(a.state_dict())
    with pytest.raises(SpecError, match="gamma: expected a number in"):
        DiscountedReturnNormalizer(1.5)


def test_discounted_return_with_dones_restarts_at_episode_ends() -> None:
    """SB3 VecNormalize rule, as a naive loop over one stream split into two calls."""
    rng = np.random.default_rng(4)
    r, d = rng.normal(size=(20, 3)), rng.random((20, 3)) < 0.25
    R, seen = np.zeros(3), []
    for t in range(20):
        R = 0.9 * R + r[t]
        seen.extend(R)  # the return of the done step still counts ...
        R[d[t]] = 0.0  # ... then it restarts
    norm = DiscountedReturnNormalizer(0.9, eps=0.0)
    norm.update(r[:7], d[:7])
    out = norm(r[7:], d[7:])
    np.testing.assert_allclose(norm.returns, R, rtol=1e-12)
    np.testing.assert_allclose(norm.rms.var, np.var(seen), rtol=1e-10)
    np.testing.assert_allclose(out, r[7:] / np.std(seen), rtol=1e-10)
    # hand-computed: gamma .5, R = 1, done -> 0, then R = 2; var of [1, 2] = .25
    hand = DiscountedReturnNormalizer(0.5, eps=0.0)
    hand.update(np.array([1.0, 2.0]), np.array([True, False]))
    assert hand.returns.tolist() == pytest.approx([2.0])
    assert float(hand.rms.var) == pytest.approx(0.25)


def test_discounted_return_dones_may_be_tensors_or_0_1_numbers() -> None:
    """dones went through np.asarray: a CUDA tensor raised numpy's TypeError, 0/1 numbers (the
    flags every other rlstore function takes) a SpecError."""
    rng = np.random.default_rng(5)
    r, d = rng.normal(size=(6, 2)), rng.random((6, 2)) < 0.4
    ref = DiscountedReturnNormalizer(0.9)
    ref.update(r, d)
    for dones in (torch.from_numpy(d), d.astype(np.float32), torch.from_numpy(d).int()):
        norm = DiscountedReturnNormalizer(0.9)
        norm.update(r, dones)
        np.testing.assert_array_equal(norm.returns, ref.returns)
        np.testing.assert_array_equal(norm.rms.var, ref.rms.var)


def test_discounted_return_rejected_updates_change_nothing() -> None:
    norm = DiscountedReturnNormalizer(0.9)
    norm.update(np.ones((2, 2)))
    before = norm.state_dict()
    with pytest.raises(SpecError, match=r"dones: expected bool or 0/1 flags of shape \(3, 2\)"):
        norm.update(np.ones((3, 2)), np.zeros((3, 1), bool))
    with pytest.raises(SpecError, match="dones: expected bool or 0/1 flags, got a value 0.5"):
        norm.update(np.ones((3, 2)), np.full((3, 2), 0.5))
    meta = torch.zeros(3, 2, dtype=torch.bool, device="meta")  # like CUDA: not numpy-viewable
    with pytest.raises(SpecError, match="dones: expected a tensor with data"):
        norm.update(np.ones((3, 2)), meta)
    with pytest.raises(SpecError, match="variance fits float64"):
        norm.update(np.array([[1e300, -1e300], [1e300, -1e300]]))  # overflowing std update
    after = norm.state_dict()
    np.testing.assert_array_equal(after["returns"], before["returns"])
    np.testing.assert_array_equal(after["rms"]["var"], before["rms"]["var"])
    assert after["rms"]["count"] == before["rms"]["count"]
