"""ReplayBuffer.gather / sample: the compiled ring (``rlstore._accel``) against the numpy path.

The numpy path is the slow, obviously-correct twin; both must return the same arrays for every
stored transition, across wrap-around, ended episodes (final observations from the side store)
and stream discontinuities, and the same samples for the same seed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlstore.buffers._replay_fast import accel_available
from rlstore.buffers.replay import ReplayBuffer
from rlstore.errors import SpecError
from rlstore.specs import FieldSpec

pytestmark = pytest.mark.skipif(
    not accel_available(), reason="rlstore._accel is not built (no C compiler at install)"
)


def filled(n: int, obs_shape: tuple[int, ...], dtype, act: str, cap: int, steps: int, seed: int):
    """A buffer after ``steps`` rows of a stream with ends, truncations and obs jumps."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)

    def fresh(k: int) -> np.ndarray:
        if dt.kind == "u":
            return rng.integers(0, 256, (k, *obs_shape), dtype=dt)
        return rng.standard_normal((k, *obs_shape)).astype(dt)

    specs = {
        "obs": FieldSpec("obs", obs_shape, dt),
        "action": FieldSpec("action", *(((), np.int64) if act == "int" else ((2,), np.float32))),
    }
    buf = ReplayBuffer(cap, num_envs=n, specs=specs, seed=seed)
    cur = fresh(n)
    for _ in range(steps):
        ev = rng.choice(4, size=n, p=[0.7, 0.1, 0.1, 0.1])  # go on, term, trunc, jump
        jump = (ev == 3).reshape(n, *(1,) * len(obs_shape))
        obs = np.where(jump, fresh(n), cur)
        nxt = fresh(n)
        term, trunc = ev == 1, ev == 2
        action = rng.integers(0, 4, n) if act == "int" else rng.standard_normal((n, 2)).astype("f4")
        buf.add(obs, action, rng.standard_normal(n).astype("f4"), nxt, term, trunc)
        cur = np.where((term | trunc).reshape(jump.shape), fresh(n), nxt)
    return buf


def numpy_twin(buf: ReplayBuffer) -> dict:
    """gather with the compiled ring switched off (same buffer, same storage)."""
    f = buf._fast
    assert f is not None and f.writer is not None
    w, f.writer = f.writer, None
    try:
        return buf.gather(np.arange(len(buf)))
    finally:
        f.writer = w


CASES = [  # (num_envs, obs shape, obs dtype, action kind, capacity, rows added)
    (1, (5,), np.float32, "float", 7, 4),  # not yet full
    (1, (5,), np.float32, "float", 7, 30),  # wrapped several times
    (3, (4,), np.float32, "int", 6, 25),
    (8, (17,), np.float32, "float", 16, 70),
    (2, (3, 4, 4), np.uint8, "int", 5, 13),  # images
    (4, (2,), np.float64, "float", 9, 40),
]


@pytest.mark.parametrize(("n", "shape", "dtype", "act", "cap", "steps"), CASES)
def test_compiled_gather_equals_numpy_gather(n, shape, dtype, act, cap, steps) -> None:
    buf = filled(n, shape, dtype, act, cap, steps, seed=cap * 10 + n)
    assert buf._fast is not None and buf._fast.writer is not None
    assert buf._side is not None and buf._side.n > 0  # final observations are patched in
    got = buf.gather(np.arange(len(buf)))
    want = numpy_twin(buf)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].flags.c_contiguous, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_compiled_gather_sees_discontinuities() -> None:
    """A jump of the obs stream keeps the pending next_obs in the disc store: both paths
    return it, not the jumped-to observation now at that row."""
    buf = ReplayBuffer(4, num_envs=1, seed=0)
    a, b, c = (np.full(2, v, np.float32) for v in (1, 2, 3))
    f = np.float32(0)
    buf.add(a, f, f, b, False, False)
    buf.add(c, f, f, a, False, False)  # obs c is not the pending b: a discontinuity
    got = buf.gather(np.arange(2))
    np.testing.assert_array_equal(got["next_obs"], [b, a])
    for k, v in numpy_twin(buf).items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)


@pytest.mark.parametrize("accel", [True, False])
def test_gather_rejects_indices_out_of_range(accel: bool) -> None:
    buf = filled(2, (3,), np.float32, "float", 5, 3, seed=1)
    assert buf._fast is not None
    if not accel:
        buf._fast.writer = None
    for bad in ([len(buf)], [-1], [0, 1, 99]):
        with pytest.raises(SpecError, match=r"indices: expected values in \[0, 6\)"):
            buf.gather(np.array(bad))


def test_same_seed_same_samples_with_and_without_the_compiled_ring() -> None:
    a = filled(3, (4,), np.float32, "float", 24, 30, seed=4)
    b = filled(3, (4,), np.float32, "float", 24, 30, seed=4)
    assert b._fast is not None
    b._fast.writer = None
    for _ in range(5):
        x, y = a.sample(16), b.sample(16)
        for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name


def test_large_batches_reuse_memory_only_once_released() -> None:
    """Image-sized batches come from the output pool: a batch still held is never overwritten
    by later samples; a dropped batch's memory is reused."""
    buf = filled(1, (4, 84, 84), np.uint8, "int", 300, 300, seed=6)
    kept = buf.sample(256)
    assert kept.obs.numel() >= 1 << 20  # large enough for the pool
    copy = {k: getattr(kept, k).clone() for k in ("obs", "next_obs", "action", "reward")}
    for _ in range(4):
        other = buf.sample(256)
        assert other.obs.data_ptr() != kept.obs.data_ptr()
    for k, v in copy.items():
        assert torch.equal(getattr(kept, k), v), k
    del other
    first = buf.sample(256)
    p = first.obs.data_ptr()
    del first
    assert buf.sample(256).obs.data_ptr() == p  # released memory is lent again
