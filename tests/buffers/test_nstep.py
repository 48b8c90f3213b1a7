"""NStepReplay against a naive model: per-env lists of transitions, walked step by step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _helpers import event_stream
from hypothesis import given
from hypothesis import strategies as st

from rlstore import FieldSpec, ReplayBuffer, nstep
from rlstore.buffers.nstep import NStepReplay
from rlstore.errors import ConfigError, EmptyBufferError, SpecError


def stream(codes: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """:func:`event_stream` with random rewards and ``hidden = 2 * reward``."""
    rew = np.random.default_rng(seed).normal(size=codes.shape).astype(np.float32)
    return dict(event_stream(codes), reward=rew, hidden=rew[..., None] * 2)


def naive(data: dict, lo: int, hi: int, r: int, e: int, n: int, gamma: float) -> tuple:
    """(G, discount, next_obs, m) of stored row ``r`` (global rows ``lo..hi-1`` stored)."""
    g = 0.0
    for k in range(n):
        t = r + k
        g += gamma**k * float(data["reward"][t, e])
        nxt = data["next_obs"][t, e]
        if data["terminated"][t, e]:
            return g, 0.0, nxt, k + 1
        cont = t + 1 < hi and data["obs"][t + 1, e].tobytes() == nxt.tobytes()
        if data["truncated"][t, e] or k == n - 1 or not cont:
            return g, gamma ** (k + 1), nxt, k + 1
    raise AssertionError


def fill(data: dict, capacity: int, splits: list[int]) -> ReplayBuffer:
    buf = ReplayBuffer(capacity, num_envs=data["reward"].shape[1], seed=0)
    t_len, start = len(data["reward"]), 0
    for s in [*sorted(set(splits)), t_len]:
        if start < min(s, t_len):
            buf.extend(**{k: v[start:s] for k, v in data.items()})
            start = s
    return buf


@given(
    envs=st.integers(1, 3),
    t_len=st.integers(1, 30),
    capacity=st.integers(1, 40),
    n=st.integers(1, 5),
    gamma=st.sampled_from([0.0, 0.5, 0.99, 1.0]),
    seed=st.integers(0, 2**16),
    splits=st.lists(st.integers(1, 29), max_size=4),
)
def test_nstep_matches_naive_model(envs, t_len, capacity, n, gamma, seed, splits) -> None:
    rng = np.random.default_rng(seed)
    codes = rng.choice(5, size=(t_len, envs), p=[0.6, 0.15, 0.15, 0.05, 0.05])
    data = stream(codes, seed)
    buf = fill(data, capacity, splits)
    hi = t_len
    lo = hi - len(buf) // envs
    idx = np.arange(len(buf))
    b = NStepReplay(buf, n, gamma).batch(idx)
    for i in idx:
        r, e = lo + i // envs, i % envs
        g, disc, nxt, m = naive(data, lo, hi, r, e, n, gamma)
        assert b.reward[i].item() == pytest.approx(g, rel=1e-5, abs=1e-5)
        assert b.discount[i].item() == pytest.approx(disc, rel=1e-6, abs=1e-12)
        assert b.steps[i].item() == m and r + m <= hi  # never past the head
        assert b.next_obs[i].numpy().tobytes() == nxt.tobytes()  # the same env column, sign of 0
        assert bool(b.terminated[i]) == bool(data["terminated"][r + m - 1, e])
    np.testing.assert_array_equal(b.obs.numpy(), buf.gather(idx)["obs"])
    np.testing.assert_array_equal(b.extras["hidden"].numpy(), buf.gather(idx)["hidden"])


@given(
    t_len=st.integers(1, 25),
    n=st.integers(1, 6),
    gamma=st.floats(0.0, 1.0),
    seed=st.integers(0, 99),
)
def test_target_equals_returns_nstep(t_len, n, gamma, seed) -> None:
    """Identity across modules: G + discount * V(next_obs) is returns.nstep's target."""
    rng = np.random.default_rng(seed)
    data = stream(rng.choice(3, size=(t_len, 2), p=[0.7, 0.15, 0.15]), seed)  # no jumps
    buf = fill(data, 100, [])
    value = lambda o: np.sin(o[..., 1]).astype(np.float64)  # noqa: E731
    b = NStepReplay(buf, n, gamma).batch(np.arange(len(buf)))
    got = b.reward.double().numpy() + b.discount.double().numpy() * value(b.next_obs.numpy())
    want = nstep(
        data["reward"].astype(np.float64),
        value(data["next_obs"]),
        data["terminated"],
        data["truncated"],
        n=n,
        gamma=gamma,
    )
    np.testing.assert_allclose(got, want.ravel(), rtol=1e-5, atol=1e-5)


def test_hand_computed_truncation_and_head() -> None:
    buf = ReplayBuffer(10, seed=0)
    # rewards 1, 2, 4; row 1 truncated (final obs 10), then a new episode whose row 2 is the head
    buf.add(np.array([0.0]), 0, 1.0, np.array([1.0]), False, False)
    buf.add(np.array([1.0]), 0, 2.0, np.array([10.0]), False, True)
    buf.add(np.array([5.0]), 0, 4.0, np.array([6.0]), False, False)
    b = NStepReplay(buf, n=3, gamma=0.5).batch(np.arange(3))
    # row 0: 1 + 0.5 * 2 = 2, cut by the truncation at row 1 -> gamma**2, bootstrap from 10
    # row 1: 2, gamma**1, final obs 10; row 2: 4 at the head, gamma**1, pending next obs 6
    assert b.reward.tolist() == pytest.approx([2.0, 2.0, 4.0], abs=1e-6)
    assert b.discount.tolist() == pytest.approx([0.25, 0.5, 0.5], abs=1e-7)
    assert b.next_obs[:, 0].tolist() == [10.0, 10.0, 6.0]
    assert b.steps.tolist() == [2, 1, 1] and b.truncated.tolist() == [True, True, False]
    assert b.indices.tolist() == [0, 1, 2] and b.reward.dtype == torch.float32


@pytest.mark.parametrize(("nxt", "obs", "jump"), [(-0.0, 0.0, True), (np.nan, np.nan, False)])
def test_continuity_is_byte_equality_like_the_write_path(nxt, obs, jump) -> None:
    """A window continues only where the next ``obs`` is the previous ``next_obs`` byte for byte,
    as the buffer stores it: ``-0.0`` then ``0.0`` is a jump (the buffer keeps ``-0.0`` aside),
    a NaN then the same NaN is not (``!=`` on values said the opposite of both)."""
    from rlstore import SequenceReplay

    buf = ReplayBuffer(10, seed=0, allow_nonfinite=True)
    buf.add(np.array([1.0]), 0, 1.0, np.array([nxt]), False, False)
    buf.add(np.array([obs]), 0, 2.0, np.array([3.0]), False, False)
    assert np.signbit(buf.gather([0])["next_obs"][0, 0]) == np.signbit(nxt)  # stored exactly
    mask = SequenceReplay(buf, 2, hidden=None).sample(1).mask
    assert mask.tolist() == [[True, not jump]]
    b = NStepReplay(buf, 2, 0.5).batch(np.array([0]))
    assert b.steps.tolist() == ([1] if jump else [2])
    assert b.reward.tolist() == pytest.approx([1.0] if jump else [1.0 + 0.5 * 2.0])


def test_dict_obs_and_uniform_sample_follow_the_buffer_rng() -> None:
    buf = ReplayBuffer(20, num_envs=2, seed=3)
    for t in range(6):
        o = {"a": np.full((2, 1), t, np.float32), "b": np.full((2, 3), t, np.uint8)}
        n_ = {"a": o["a"] + 1, "b": o["b"] + 1}
        buf.add(
            o,
            np.zeros(2, np.int64),
            np.ones(2, np.float32),
            n_,
            np.zeros(2, bool),
            np.zeros(2, bool),
        )
    twin = ReplayBuffer(20, num_envs=2, seed=99)
    twin.load_state_dict(buf.state_dict())
    x, y = NStepReplay(buf, 3, 0.9).sample(7), NStepReplay(twin, 3, 0.9).sample(7)
    assert x.indices.tolist() == y.indices.tolist()  # exact resume: the buffer's RNG
    assert set(x.obs) == {"a", "b"} and x.next_obs["b"].dtype == torch.uint8
    np.testing.assert_array_equal(x.next_obs["a"][:, 0], x.obs["a"][:, 0] + x.steps.float())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 0, "gamma": 0.9}, "n: expected an int >= 1, got 0"),
        ({"n": True, "gamma": 0.9}, "n: expected an int >= 1, got True"),
        ({"n": 2.0, "gamma": 0.9}, "n: expected an int"),
        ({"n": 3, "gamma": 1.5}, r"gamma: expected a number in \[0.0, 1.0\], got 1.5"),
        ({"n": 3, "gamma": float("nan")}, "gamma: expected"),
        ({"n": 3, "gamma": "0.9"}, "gamma: expected"),
    ],
)
def test_bad_arguments_are_named(kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        NStepReplay(ReplayBuffer(4), **kwargs)


def test_bad_indices_and_empty_buffer() -> None:
    buf = ReplayBuffer(4)
    with pytest.raises(EmptyBufferError):
        NStepReplay(buf, 2, 0.9).sample(1)
    buf.add(np.zeros(2), 0, 1.0, np.ones(2), False, False)
    before = buf.gather(np.arange(len(buf)))
    for bad in ([1], [0.5], [[0]]):
        with pytest.raises(SpecError, match="indices: expected"):
            NStepReplay(buf, 2, 0.9).batch(bad)
    empty = NStepReplay(buf, 2, 0.9).batch(np.array([], np.int64))  # like buf.gather([])
    assert empty.steps.shape == (0,) and empty.next_obs.shape == (0, 2)
    b = NStepReplay(buf, 2, 0.9).batch([0])  # reading never mutates
    assert b.steps.tolist() == [1]
    after = buf.gather(np.arange(len(buf)))
    assert all(np.array_equal(after[k], v) for k, v in before.items())


def test_float16_fields_and_float64_rewards() -> None:
    """Half-precision obs/rewards are compared and summed exactly (widened), float64 kept."""
    codes = np.random.default_rng(2).choice(4, size=(12, 2), p=[0.6, 0.15, 0.15, 0.1])
    data = stream(codes)
    del data["hidden"]
    spec = {"obs": FieldSpec("obs", (2,), np.float16), "action": FieldSpec("action", (), np.int64)}
    for reward_dtype in (np.float16, np.float64):
        spec["reward"] = FieldSpec("reward", (), reward_dtype)
        half = ReplayBuffer(24, num_envs=2, specs=dict(spec), seed=0)
        cast = {**data, "reward": data["reward"].astype(reward_dtype)}
        half.extend(
            **{
                **cast,
                "obs": data["obs"].astype(np.float16),
                "next_obs": data["next_obs"].astype(np.float16),
            }
        )
        ref = fill({**cast, "reward": cast["reward"].astype(np.float64)}, 24, [])
        x, y = (NStepReplay(b, 3, 0.9).batch(np.arange(24)) for b in (half, ref))
        assert torch.equal(x.steps, y.steps) and torch.allclose(
            x.reward.double(), y.reward.double(), atol=1e-5
        )
        assert x.reward.dtype == (torch.float64 if reward_dtype == np.float64 else torch.float32)


def test_docstring_example() -> None:
    import doctest

    from rlstore.buffers import nstep as module

    assert doctest.testmod(module).failed == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_batches_land_on_the_buffer_device() -> None:
    from rlstore import SequenceReplay

    buf = ReplayBuffer(8, device="cuda", seed=0)
    for t in range(4):
        buf.add(np.full(2, 1.0 * t), 0, 1.0, np.full(2, t + 1.0), False, False, hidden=[t])
    assert NStepReplay(buf, 2, 0.9).sample(3).discount.device.type == "cuda"
    assert SequenceReplay(buf, 2).sample(3).mask.device.type == "cuda"


def test_nstep_through_a_prioritized_buffer_carries_ids_and_weights() -> None:
    """With a PrioritizedSampler in the buffer, n-step batches carry the sampler's importance
    weights and stable ids: an update through ``buffer.update_priorities`` moves the draws, also
    after the ring has wrapped (ids are not ring positions)."""
    from rlstore import ReplayBuffer
    from rlstore.samplers import PrioritizedSampler

    buf = ReplayBuffer(64, sampler=PrioritizedSampler(alpha=1.0, beta=1.0, seed=0))
    for t in range(80):  # wraps: ids 16..79 are live
        buf.add(np.full(2, float(t)), 0, 1.0, np.full(2, t + 1.0), False, False)
    assert buf.first_id == 16
    ns = NStepReplay(buf, n=3, gamma=0.5)
    b = ns.sample(64)
    assert b.indices.min() >= 16 and b.weights.dtype == torch.float32
    np.testing.assert_array_equal(b.obs[:, 0].numpy(), b.indices.numpy().astype(np.float32))
    pri = np.where(b.indices.numpy() == b.indices[0].item(), 100.0, 1.0)
    hot = b.indices[0].item()
    buf.update_priorities(b.indices.numpy(), pri)
    again = ns.sample(64)
    assert (again.indices == hot).float().mean() > 0.5
    low = again.weights[again.indices != hot]
    assert torch.all(again.weights[again.indices == hot] < low.min())  # likely -> small weight
    batch = ns.batch(np.array([0]))  # gather indices: row 0 is id 16
    assert batch.indices.tolist() == [16] and batch.weights.tolist() == [1.0]


_CLASHING = ("discount", "steps", "indices", "weights", "_weights", "mask", "ids")
"""Extra field names equal to outputs computed at sampling time."""


def test_extras_named_like_computed_outputs_come_back_as_stored() -> None:
    """An extra named ``discount`` (dm_env's per-step discount), ``weights`` or ``steps`` came
    back as the n-step discount, the importance weights or the window lengths (``_weights`` as
    the replay buffer's weights), and the computed outputs stayed right: both now are."""
    buf = ReplayBuffer(8, seed=0)
    for t in range(4):
        extras = {k: np.float32(10 * i + t) for i, k in enumerate(_CLASHING)}
        buf.add(np.full(2, t, np.float32), 0, 1.0, np.full(2, t + 1.0, np.float32), False, False,
                **extras)  # fmt: skip
    one = buf.sample(3)
    ns = NStepReplay(buf, n=2, gamma=0.5).sample(3)
    for batch in (one, ns):
        rows = batch.obs[:, 0]  # obs = t: the row of each sample
        for i, k in enumerate(_CLASHING):
            torch.testing.assert_close(batch.extras[k], 10 * i + rows, rtol=0, atol=0)
        torch.testing.assert_close(batch.weights, torch.ones(3))
    torch.testing.assert_close(ns.steps, torch.where(ns.obs[:, 0] < 3, 2, 1))
    torch.testing.assert_close(ns.discount, torch.where(ns.obs[:, 0] < 3, 0.25, 0.5))
    assert ns.indices.tolist() == ns.obs[:, 0].long().tolist()
