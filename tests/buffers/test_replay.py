"""Hand-written cases for rlstore.buffers.replay.ReplayBuffer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _helpers import flat_state

from rlstore.buffers.replay import ReplayBatch, ReplayBuffer
from rlstore.errors import CapacityError, CheckpointError, EmptyBufferError, SpecError
from rlstore.specs import FieldSpec


def o(v: float, d: int = 3) -> np.ndarray:
    return np.full(d, v, np.float32)


def test_single_adds_hand_case_with_wraparound_done_and_discontinuity() -> None:
    buf = ReplayBuffer(3, seed=0)
    # stream: 0->1, 1->2 (terminated, final obs 2), reset obs 10 -> 11 (truncated, final 11),
    # reset obs 20 -> 21, then a jump: obs 30 (!= 21, not done) -> 31
    buf.add(o(0), 0, 0.5, o(1), False, False)
    buf.add(o(1), 1, 1.5, o(2), True, False)
    buf.add(o(10), 2, 2.5, o(11), False, True)
    buf.add(o(20), 3, 3.5, o(21), False, False)
    buf.add(o(30), 4, 4.5, o(31), False, False)
    assert len(buf) == 3  # capacity 3 keeps the last three transitions, oldest first
    arr = buf.gather(np.arange(3))
    np.testing.assert_array_equal(arr["obs"][:, 0], [10, 20, 30])
    np.testing.assert_array_equal(arr["next_obs"][:, 0], [11, 21, 31])
    np.testing.assert_array_equal(arr["action"], [2, 3, 4])
    np.testing.assert_array_equal(arr["reward"], np.array([2.5, 3.5, 4.5], np.float32))
    np.testing.assert_array_equal(arr["terminated"], [False, False, False])
    np.testing.assert_array_equal(arr["truncated"], [True, False, False])
    # side stores: final obs of the two ended episodes; the discontinuous 20 -> 21
    assert buf.metadata()["side_entries"] == 2 and buf.metadata()["discontinuities"] == 1


def test_batched_adds_keep_env_columns_apart() -> None:
    buf = ReplayBuffer(4, num_envs=2, seed=0)
    for t in range(3):
        obs = np.stack([o(t), o(100 + t)])
        nxt = np.stack([o(t + 1), o(100 + t + 1)])
        term = np.array([t == 1, False])
        if t == 1:
            nxt[0] = o(-1)  # final obs of env 0's episode; env 0 resets to obs 2
        buf.add(
            obs, np.array([t, t]), np.array([1.0, 2.0], np.float32), nxt, term, np.zeros(2, bool)
        )
    assert len(buf) == 4  # capacity_per_env 2 rows x 2 envs
    arr = buf.gather(np.arange(4))  # flat index = row * 2 + env
    np.testing.assert_array_equal(arr["obs"][:, 0], [1, 101, 2, 102])
    np.testing.assert_array_equal(arr["next_obs"][:, 0], [-1, 102, 3, 103])
    np.testing.assert_array_equal(arr["terminated"], [True, False, False, False])


def test_extend_equals_repeated_add_and_twin_layout() -> None:
    rng = np.random.default_rng(0)
    t, n = 9, 3
    obs = rng.standard_normal((t + 1, n, 4)).astype(np.float32)
    nxt = obs[1:].copy()
    done = rng.random((t, n)) < 0.3
    nxt[done] = 7.0  # final observations differ from the next obs (the reset obs)
    act = rng.integers(0, 5, (t, n))
    rew = rng.standard_normal((t, n)).astype(np.float32)
    trunc = done & (rng.random((t, n)) < 0.5)
    term = done & ~trunc
    a = ReplayBuffer(15, num_envs=n, seed=3)
    b = ReplayBuffer(15, num_envs=n, seed=3)
    c = ReplayBuffer(15, num_envs=n, seed=3, store_next_obs_once=False)
    a.extend(obs[:-1], act, rew, nxt, term, trunc)
    for i in range(t):
        b.add(obs[i], act[i], rew[i], nxt[i], term[i], trunc[i])
    c.extend(obs[:4], act[:4], rew[:4], nxt[:4], term[:4], trunc[:4])
    c.extend(obs[4:-1], act[4:], rew[4:], nxt[4:], term[4:], trunc[4:])
    assert len(a) == len(b) == len(c) == 15
    sa = a.sample(12)
    for buf in (b, c):
        ga, gb = a.gather(np.arange(15)), buf.gather(np.arange(15))
        for k in ga:
            np.testing.assert_array_equal(ga[k], gb[k], err_msg=k)
        for x, y in zip(sa, buf.sample(12), strict=True):  # same seed, same draws, same transitions
            if isinstance(x, torch.Tensor):
                assert torch.equal(x, y)
    # expected by hand: the last 5 rows of the stream
    g = a.gather(np.arange(15))
    np.testing.assert_array_equal(g["obs"], obs[4:-1].reshape(15, 4))
    np.testing.assert_array_equal(g["next_obs"], nxt[4:].reshape(15, 4))


def test_memory_per_transition_at_obs17_act6() -> None:
    n_rows = 1000
    rng = np.random.default_rng(1)
    obs = rng.standard_normal((n_rows + 1, 1, 17)).astype(np.float32)
    args = (
        obs[:-1],
        rng.standard_normal((n_rows, 1, 6)).astype(np.float32),
        np.zeros((n_rows, 1), np.float32),
        obs[1:],
        np.zeros((n_rows, 1), bool),
        np.zeros((n_rows, 1), bool),
    )
    once, twice = ReplayBuffer(n_rows), ReplayBuffer(n_rows, store_next_obs_once=False)
    once.extend(*args)
    twice.extend(*args)
    # per transition: obs 17*4 + action 6*4 + reward 4 + 2 flags = 98 bytes (+ one spare row,
    # an empty 16-entry side store and bookkeeping); the twin also stores next_obs (+68)
    assert 98 <= once.nbytes / len(once) <= 100
    assert twice.nbytes - once.nbytes > 67 * n_rows


def test_dict_obs_uint8_and_extras_keep_dtype() -> None:
    buf = ReplayBuffer(8, num_envs=2, seed=0)
    for t in range(5):
        ob = {"image": np.full((2, 3, 4, 4), t, np.uint8), "state": np.full((2, 7), t, np.float64)}
        nx = {
            "image": np.full((2, 3, 4, 4), t + 1, np.uint8),
            "state": np.full((2, 7), t + 1, np.float64),
        }
        buf.add(
            ob,
            np.zeros((2, 2), np.float32),
            np.ones(2),
            nx,
            np.zeros(2, bool),
            np.zeros(2, bool),
            hidden=np.full((2, 5), t, np.float32),
        )
    batch = buf.sample(6)
    assert isinstance(batch, ReplayBatch)
    assert batch.obs["image"].dtype == torch.uint8 and batch.obs["image"].shape == (6, 3, 4, 4)
    assert batch.obs["state"].dtype == torch.float32  # float64 input stored as float32
    assert torch.equal(batch.next_obs["image"].float(), batch.obs["image"].float() + 1)
    assert torch.equal(batch.next_obs["state"], batch.obs["state"] + 1)
    assert torch.equal(batch.extras["hidden"][:, 0], batch.obs["state"][:, 0])
    assert batch.reward.dtype == torch.float32 and batch.terminated.dtype == torch.bool


def _filled(n_envs: int = 1) -> ReplayBuffer:
    buf = ReplayBuffer(4 * n_envs, num_envs=n_envs, seed=0)
    lead = () if n_envs == 1 else (n_envs,)
    for t in range(3):
        buf.add(
            np.full((*lead, 3), t, np.float32),
            np.zeros((*lead, 2), np.float32),
            np.zeros(lead, np.float32) if lead else 0.0,
            np.full((*lead, 3), t + 1, np.float32),
            np.zeros(lead, bool) if lead else False,
            np.zeros(lead, bool) if lead else False,
        )
    return buf


GOOD = dict(
    obs=np.zeros(3, np.float32),
    action=np.zeros(2, np.float32),
    reward=0.0,
    next_obs=np.ones(3, np.float32),
    terminated=False,
    truncated=False,
)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"obs": np.zeros(4, np.float32)}, r"obs: expected shape \(3,\), got \(4,\)"),
        ({"next_obs": np.zeros((2, 3), np.float32)}, r"next_obs: expected shape"),
        ({"action": np.zeros(2, np.int64) + 1j}, r"action: expected dtype float32, got complex"),
        ({"reward": float("nan")}, r"reward: expected finite values"),
        ({"next_obs": np.array([0, np.inf, 0], np.float32)}, r"next_obs: expected finite"),
        ({"obs": np.array([np.nan, 0, 0], np.float32)}, r"obs: expected finite"),
        ({"terminated": 2}, r"terminated: expected dtype bool"),
        ({"truncated": 0.5}, r"truncated: expected dtype bool"),
        ({"obs": {"a": np.zeros(3)}}, r"obs: expected an array, got a dict"),
        ({"hidden": np.zeros(3)}, r"extras: expected \[\], got \['hidden'\]"),
    ],
)
def test_rejected_add_leaves_buffer_unchanged(change: dict, match: str) -> None:
    buf = _filled()
    before = flat_state(buf)
    with pytest.raises(SpecError, match=match):
        buf.add(**{**GOOD, **change})
    assert flat_state(buf) == before
    buf.add(**GOOD)  # still usable
    assert len(buf) == 4


def test_rejected_batched_add_and_extend_leave_buffer_unchanged() -> None:
    buf = _filled(2)
    before = flat_state(buf)
    z = np.zeros((2, 3), np.float32)
    bad_next = z.copy()
    bad_next[1, 2] = np.nan  # only the second env's next_obs is bad: nothing may be written
    with pytest.raises(SpecError, match="next_obs: expected finite"):
        buf.add(
            z,
            np.zeros((2, 2), np.float32),
            np.zeros(2),
            bad_next,
            np.zeros(2, bool),
            np.zeros(2, bool),
        )
    with pytest.raises(SpecError, match=r"action: expected shape \(2, 2, 2\)"):
        buf.extend(
            np.zeros((2, 2, 3)),
            np.zeros((2, 3, 2)),
            np.zeros((2, 2)),
            np.zeros((2, 2, 3)),
            np.zeros((2, 2), bool),
            np.zeros((2, 2), bool),
        )
    with pytest.raises(SpecError, match=r"terminated: expected shape \(5, 2\), got \(5, 3\)"):
        buf.extend(
            np.zeros((5, 2, 3)),
            np.zeros((5, 2, 2)),
            np.zeros((5, 2)),
            np.zeros((5, 2, 3)),
            np.zeros((5, 3), bool),
            np.zeros((5, 2), bool),
        )
    assert flat_state(buf) == before


def test_dict_obs_key_errors() -> None:
    buf = ReplayBuffer(4)
    ob = {"a": np.zeros(2, np.float32), "b": np.zeros(1, np.uint8)}
    buf.add(ob, 0, 0.0, ob, False, False)
    before = flat_state(buf)
    with pytest.raises(SpecError, match=r"obs: expected keys \['a', 'b'\], got \['a'\]"):
        buf.add({"a": np.zeros(2)}, 0, 0.0, ob, False, False)
    with pytest.raises(
        SpecError, match=r"next_obs: expected keys \['a', 'b'\], got \['a', 'b', 'c'\]"
    ):
        buf.add(ob, 0, 0.0, {**ob, "c": np.zeros(1)}, False, False)
    with pytest.raises(SpecError, match="obs: expected a dict"):
        buf.add(np.zeros(2), 0, 0.0, ob, False, False)
    assert flat_state(buf) == before


def test_capacity_and_sampling_errors() -> None:
    for bad in (0, -3, 2.5):
        with pytest.raises(CapacityError, match="capacity: expected an int >= 1"):
            ReplayBuffer(bad)  # type: ignore[arg-type]
    with pytest.raises(CapacityError, match="num_envs"):
        ReplayBuffer(4, num_envs=0)
    buf = ReplayBuffer(4, seed=0)
    with pytest.raises(EmptyBufferError):
        buf.sample(1)
    buf = _filled()
    with pytest.raises(EmptyBufferError, match="stored transitions=3, got 4"):
        buf.sample(4)
    with pytest.raises(CapacityError, match="capacity=4, got 5"):
        buf.sample(5)
    with pytest.raises(CapacityError, match="batch_size: expected an int >= 1"):
        buf.sample(0)
    # 3 envs: capacity 4 is held as 3 columns of 2 rows, so 6 transitions fit and can be drawn
    buf = ReplayBuffer(4, num_envs=3, seed=0)
    for i in range(2):
        buf.add(
            np.full((3, 2), i), np.zeros(3), np.zeros(3), np.full((3, 2), i + 1), [0] * 3, [0] * 3
        )
    assert len(buf) == 6 and buf.sample(6).obs.shape == (6, 2)
    with pytest.raises(
        CapacityError, match=r"capacity=6 \(4 rounded up to whole env rows\), got 7"
    ):
        buf.sample(7)


def test_explicit_specs_and_config_round_trip() -> None:
    specs = {"obs": FieldSpec("obs", (3,), np.float32), "action": FieldSpec("action", (), np.int64)}
    buf = ReplayBuffer(10, specs=specs, seed=4)
    assert buf.nbytes > 0 and len(buf) == 0
    with pytest.raises(SpecError, match="action: expected dtype int64, got float64"):
        buf.add(o(0), 0.5, 0.0, o(1), False, False)
    cfg = json.loads(json.dumps(buf.config()))
    twin = ReplayBuffer(**cfg)
    assert twin.specs == buf.specs and twin.config() == buf.config()
    with pytest.raises(SpecError, match="next_obs"):
        ReplayBuffer(4, specs={**specs, "next_obs": specs["obs"]})
    with pytest.raises(SpecError, match="'action'"):
        ReplayBuffer(4, specs={"obs": specs["obs"]})


def test_state_dict_round_trip_resumes_exactly() -> None:
    rng = np.random.default_rng(0)
    a = ReplayBuffer(12, num_envs=2, seed=7)
    ob = rng.standard_normal((2, 3)).astype(np.float32)

    def step(buf: ReplayBuffer, t: int) -> None:
        done = np.array([t % 4 == 3, t % 5 == 4])
        nxt = ob + t + 1
        buf.add(
            ob + t,
            np.full((2, 2), t, np.float32),
            np.full(2, t, np.float32),
            nxt,
            done,
            np.zeros(2, bool),
        )

    for t in range(9):
        step(a, t)
    a.sample(5)
    sd = a.state_dict()
    json.dumps({k: v for k, v in sd.items() if k in ("config", "sampler")})
    b = ReplayBuffer(12, num_envs=2, seed=0)
    b.load_state_dict(sd)
    assert flat_state(b) == flat_state(a)
    for t in range(9, 15):  # continue both identically: same data and same draws
        step(a, t)
        step(b, t)
        for x, y in zip(a.sample(8), b.sample(8), strict=True):
            if isinstance(x, torch.Tensor):
                assert torch.equal(x, y)
    with pytest.raises(CheckpointError, match="capacity: expected 13, got 12"):
        ReplayBuffer(13, num_envs=2).load_state_dict(sd)
    with pytest.raises(CheckpointError, match=r"state_dict: expected keys .*; missing \[.disc."):
        ReplayBuffer(12, num_envs=2).load_state_dict({"config": sd["config"]})
    empty = ReplayBuffer(12, num_envs=2)
    c = ReplayBuffer(12, num_envs=2)
    c.load_state_dict(empty.state_dict())
    assert len(c) == 0 and c.specs is None


def test_generator_injection_is_shared() -> None:
    g = np.random.default_rng(11)
    a = _filled()
    a._sampler.rng = g  # what ReplayBuffer(seed=g) does
    b = ReplayBuffer(4, seed=np.random.default_rng(11))
    b.load_state_dict({**a.state_dict(), "sampler": b.state_dict()["sampler"]})
    assert torch.equal(a.sample(3).obs, b.sample(3).obs)


def test_warm_cartpole_stores_true_final_observations() -> None:
    buf = ReplayBuffer(600, seed=0)
    added = buf.warm(None, 500, num_envs=4, seed=0)
    assert added == 500 and len(buf) == 500
    arr = buf.gather(np.arange(len(buf)))
    nxt, done = arr["next_obs"], arr["terminated"] | arr["truncated"]
    # CartPole terminates when |x| > 2.4 or |theta| > 12 degrees; reset obs are within +-0.05
    out_of_bounds = (np.abs(nxt[:, 0]) > 2.4) | (np.abs(nxt[:, 2]) > 12 * 2 * np.pi / 360)
    np.testing.assert_array_equal(out_of_bounds, arr["terminated"])
    assert done.sum() >= 10
    # a non-done transition's next_obs is the next row's obs of the same stream
    cont = np.flatnonzero(~done[:-1])
    assert np.mean(np.all(nxt[cont] == arr["obs"][cont + 1], axis=1)) > 0.95


def test_allow_nonfinite_stores_nan_and_inf() -> None:
    buf = ReplayBuffer(4, seed=0, allow_nonfinite=True)
    x = np.array([np.nan, np.inf, 1.0], np.float32)
    buf.add(o(0), 0, float("nan"), x, False, False)
    buf.add(x, 1, float("-inf"), o(5), False, False)  # NaN != NaN: kept as a discontinuity
    g = buf.gather(np.arange(2))
    np.testing.assert_array_equal(g["next_obs"], np.stack([x, o(5)]))
    np.testing.assert_array_equal(g["obs"], np.stack([o(0), x]))
    np.testing.assert_array_equal(g["reward"], np.array([np.nan, -np.inf], np.float32))


def test_batched_adds_reopen_columns_after_a_done() -> None:
    """Regression: env 0 ends at step 1, goes on at step 2, then jumps at step 3; the jump must
    be detected (the step-2 transition keeps its own next_obs)."""
    buf = ReplayBuffer(8, num_envs=2, seed=0)
    f = np.zeros(2, bool)
    seq = [  # (obs of env 0, next_obs of env 0, done of env 0); env 1 always continuous
        (0.0, 1.0, False),
        (1.0, 2.0, True),  # final obs 2, reset obs 10
        (10.0, 11.0, False),
        (50.0, 51.0, False),  # jump: 50 != 11
    ]
    for t, (ob0, nx0, d0) in enumerate(seq):
        obs = np.array([[ob0], [100.0 + t]], np.float32)
        nxt = np.array([[nx0], [101.0 + t]], np.float32)
        buf.add(
            obs,
            np.zeros((2, 1), np.float32),
            np.zeros(2, np.float32),
            nxt,
            np.array([d0, False]),
            f,
        )
    g = buf.gather(np.arange(len(buf)))
    np.testing.assert_array_equal(g["next_obs"][::2, 0], [1.0, 2.0, 11.0, 51.0])
    np.testing.assert_array_equal(g["next_obs"][1::2, 0], [101.0, 102.0, 103.0, 104.0])
