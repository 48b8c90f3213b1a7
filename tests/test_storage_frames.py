"""FrameStackStorage against a naive twin: a plain RingStorage holding every stack in full."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstore.errors import CapacityError, CheckpointError, SpecError
from rlstore.specs import FieldSpec
from rlstore.storage import RingStorage
from rlstore.storage.frames import FrameStackStorage


class Stream:
    """Frame stacks of ``n`` envs: episodes (reset padded by repetition, zeros or random
    frames), continuations (drop the oldest frame, add a new one) and discontinuities."""

    def __init__(self, rng: np.random.Generator, n: int, depth: int, frame: tuple, high: int):
        self.rng, self.frame, self.high, self.depth = rng, frame, high, depth
        self.stacks = np.stack([self.reset() for _ in range(n)])

    def new_frame(self) -> np.ndarray:
        return self.rng.integers(0, self.high, self.frame, dtype=np.uint8)

    def reset(self) -> np.ndarray:
        f, mode = self.new_frame(), self.rng.integers(3)
        older = [f, np.zeros_like(f), None][mode]
        return np.stack([self.new_frame() if older is None else older] * (self.depth - 1) + [f])

    def step(self, p_end: float, p_jump: float) -> tuple[np.ndarray, np.ndarray]:
        """The next stacks ``(n, S, *frame)`` and which env continued its previous stack."""
        u = self.rng.random(len(self.stacks))
        for e, x in enumerate(u):
            if x < p_end:
                self.stacks[e] = self.reset()
            elif x < p_end + p_jump:
                self.stacks[e] = [self.new_frame() for _ in range(self.depth)]
            else:
                self.stacks[e] = np.concatenate([self.stacks[e, 1:], self.new_frame()[None]])
        return self.stacks.copy(), u >= p_end + p_jump


def _specs(depth: int, axis: int, frame: tuple) -> dict[str, FieldSpec]:
    shape = (depth, *frame) if axis == 0 else (*frame, depth)
    return {
        "obs.a": FieldSpec("obs.a", shape, np.uint8),
        "action": FieldSpec("action", (2,), np.float32),
        "obs.b": FieldSpec("obs.b", shape, np.uint8),
    }


def _assert_same(frames: FrameStackStorage, twin: RingStorage) -> None:
    assert (frames.cursor, frames.size, frames.rows_written) == (
        twin.cursor,
        twin.size,
        twin.rows_written,
    )
    flat = np.arange(frames.rows * frames.num_envs)
    got, want = frames.gather(flat), twin.gather(flat)
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        assert got[k].flags.c_contiguous and got[k].dtype == want[k].dtype


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 6),
    n=st.integers(1, 3),
    depth=st.integers(2, 4),
    axis=st.sampled_from([0, -1]),
    p_end=st.sampled_from([0.0, 0.1, 0.4]),
    p_jump=st.sampled_from([0.0, 0.1]),
)
def test_every_gathered_stack_is_the_stack_written(
    seed: int, rows: int, n: int, depth: int, axis: int, p_end: float, p_jump: float
) -> None:
    """Writes like the buffer's (blocks, the pending next obs put at the cursor, then written
    again, continuations declared), many wrap-arounds: the twin's content everywhere."""
    rng = np.random.default_rng(seed)
    frame = (2, 4)  # 8 bytes: compared as one 64-bit word
    specs = _specs(depth, axis, frame)
    fs = FrameStackStorage(rows, n, specs, stack_axis=axis)
    twin = RingStorage(rows, n, specs, packed=False)
    streams = {k: Stream(rng, n, depth, frame, high=3) for k in ("obs.a", "obs.b")}

    def layout(x: np.ndarray) -> np.ndarray:  # canonical (..., S, *frame) -> the spec's layout
        return x if axis == 0 else np.moveaxis(x, -3, -1)

    for _ in range(30):
        k = int(rng.integers(1, rows + 1))
        block: dict[str, Any] = {"action": rng.standard_normal((k, n, 2)).astype(np.float32)}
        cont = np.ones((k, n), dtype=bool)
        for name, s in streams.items():
            steps = [s.step(p_end, p_jump) for _ in range(k)]
            block[name] = layout(np.stack([x for x, _ in steps]))
            cont &= np.stack([c for _, c in steps])
        if fs.rows_written == 0:
            cont[0] = False
        fs.write_block(block, continuing=cont if rng.random() < 0.5 else None)
        twin.write_block(block)
        _assert_same(fs, twin)
        if rng.random() < 0.7:  # the pending next obs: continues the newest stack, or not
            put = {
                name: layout(np.concatenate([s.stacks[:, 1:], s.stacks[:, -1:] // 2 + 1], 1))
                if rng.random() < 0.5
                else layout(rng.integers(0, 3, s.stacks.shape, dtype=np.uint8))
                for name, s in streams.items()
                if rng.random() < 0.8
            }
            fs.put_row(fs.cursor, put)
            for name, v in put.items():
                twin.arrays[name][twin.cursor] = v
            _assert_same(fs, twin)
        if rng.random() < 0.3:  # non-frame fields may be put at any row
            row, act = int(rng.integers(rows)), rng.standard_normal((n, 2)).astype(np.float32)
            fs.put_row(row, {"action": act})
            twin.arrays["action"][row] = act
    back = FrameStackStorage.from_state_dict(fs.state_dict())
    _assert_same(back, twin)


def _filled(rows: int = 4, n: int = 2, steps: int = 13, seed: int = 0) -> FrameStackStorage:
    rng = np.random.default_rng(seed)
    fs = FrameStackStorage(rows, n, _specs(3, 0, (2, 4)))
    s = Stream(rng, n, 3, (2, 4), high=4)
    for _ in range(steps):
        obs = s.step(0.2, 0.2)[0][None]
        fs.write_block({"obs.a": obs, "obs.b": obs, "action": np.zeros((1, n, 2), np.float32)})
    fs.put_row(fs.cursor, {"obs.a": np.zeros((n, 3, 2, 4), np.uint8)})
    return fs


def _assert_state_equal(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
        for k in a:
            _assert_state_equal(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b and type(a) is type(b)


def test_state_dict_round_trip_is_exact_and_writes_go_on_alike() -> None:
    fs = _filled()
    sd = fs.state_dict()
    back = FrameStackStorage.from_state_dict(sd)
    _assert_state_equal(back.state_dict(), sd)
    flat = np.arange(8)
    block = {
        "obs.a": np.ones((2, 2, 3, 2, 4), np.uint8),
        "obs.b": np.ones((2, 2, 3, 2, 4), np.uint8),
        "action": np.ones((2, 2, 2), np.float32),
    }
    pickled = pickle.loads(pickle.dumps(fs))  # buffers are plain picklable objects
    for st_ in (fs, back, pickled):
        st_.write_block(block)
    _assert_state_equal(back.state_dict(), fs.state_dict())
    _assert_state_equal(pickled.state_dict(), fs.state_dict())
    assert pickled._clock is pickled.frames["obs.a"].store  # one counter source after a pickle
    for k, v in fs.gather(flat).items():
        np.testing.assert_array_equal(back.gather(flat)[k], v)


def test_state_dict_rejects_damaged_states() -> None:
    fs = _filled()
    with pytest.raises(CheckpointError, match="storage: expected keys"):
        FrameStackStorage.from_state_dict({**fs.state_dict(), "extra": 1})
    sd = fs.state_dict()
    sd["frames"]["obs.b"]["side"] = {"keys": np.zeros(0, np.int64), "arrays": {"older":
        np.zeros((0, 2, 8), np.uint8)}, "capacity": 1}  # fmt: skip
    with pytest.raises(CheckpointError, match="obs.b: kinds out of range or a SIDE row without"):
        FrameStackStorage.from_state_dict(sd)
    sd = fs.state_dict()
    sd["frames"]["obs.a"]["pending"] = 1
    with pytest.raises(CheckpointError, match=r"frames.obs.a.pending: expected a bool, got 1"):
        FrameStackStorage.from_state_dict(sd)
    sd = fs.state_dict()
    sd["ring"]["rows_written"] -= 4  # one wrap back: same cursor and size
    with pytest.raises(CheckpointError, match="one rows_written for all rings"):
        FrameStackStorage.from_state_dict(sd)
    sd = fs.state_dict()
    sd["stack_axis"] = 3
    with pytest.raises(CheckpointError, match="storage: bad layout .*frame_fields"):
        FrameStackStorage.from_state_dict(sd)


def test_rejected_writes_name_the_problem_and_change_nothing() -> None:
    fs = _filled()
    before = fs.state_dict()
    good = {
        "obs.a": np.ones((2, 2, 3, 2, 4), np.uint8),
        "obs.b": np.ones((2, 2, 3, 2, 4), np.uint8),
        "action": np.ones((2, 2, 2), np.float32),
    }
    cont = np.array([[False, False], [True, False]])
    bad_b = good["obs.b"].copy()
    bad_b[1, 0, 0] = 7  # row 1 env 0 drops frame [1, 1, 1] -> [7, 1, 1]: 1 of 2 frames equal
    with pytest.raises(
        SpecError,
        match=r"obs.b: env 0 block row 1 was declared continuing: expected obs.b\[:-1\] along "
        r"stack axis 0 to equal the previous row's obs.b\[1:\] \(2 shared frames\), got 1 of 2",
    ):
        fs.write_block({**good, "obs.b": bad_b}, continuing=cont)
    with pytest.raises(SpecError, match=r"continuing: expected a bool array of shape \(2, 2\)"):
        fs.write_block(good, continuing=cont.astype(int))
    with pytest.raises(
        SpecError,
        match=r"obs.a: expected an array of shape \(2, 2, 3, 2, 4\) dtype uint8, got .* int16",
    ):
        fs.write_block({**good, "obs.a": good["obs.a"].astype(np.int16)})
    with pytest.raises(
        SpecError,
        match=r"values: expected the fields \[.action., .obs.a., .obs.b.\], got \[.obs.a., .obs.b",
    ):
        fs.write_block({k: v for k, v in good.items() if k != "action"})
    with pytest.raises(CapacityError, match="at most rows=4 rows, got 5"):
        fs.write_block({k: np.concatenate([v, v, v[:1]]) for k, v in good.items()})
    with pytest.raises(
        SpecError, match=r"action: expected an array of shape \(2, 2, 2\), got float"
    ):
        fs.write_block({"action": 1.0, **{k: v for k, v in good.items() if k != "action"}})
    with pytest.raises(SpecError, match=r"frame fields \['obs.b'\] can only be put at the cursor"):
        fs.put_row((fs.cursor + 1) % 4, {"obs.b": good["obs.b"][0]})
    with pytest.raises(SpecError, match="names: expected fields of"):
        fs.gather(np.arange(2), ["next_obs"])
    with pytest.raises(SpecError, match=r"flat: expected 1-D ints in \[0, 8\)"):
        fs.gather(np.array([8]))
    _assert_state_equal(fs.state_dict(), before)
    fresh = FrameStackStorage(3, 1, _specs(3, 0, (2, 4)))
    with pytest.raises(SpecError, match="env 0 block row 0 .* got no previous row"):
        fresh.write_block({k: v[:1, :1] for k, v in good.items()}, continuing=np.ones((1, 1), bool))
    assert fresh.rows_written == 0 and fresh.frames["obs.a"].side.n == 0


def test_constructor_errors() -> None:
    with pytest.raises(
        SpecError,
        match=r"specs: expected a frame-stack field .*got \[FieldSpec\(name=.obs., shape=\(4, 8\)",
    ):
        FrameStackStorage(4, 1, {"obs": FieldSpec("obs", (4, 8), np.float32)})
    with pytest.raises(SpecError, match=r"frame_fields: 'obs': expected a field with a stack axis"):
        FrameStackStorage(4, 1, {"obs": FieldSpec("obs", (1, 8), np.uint8)}, frame_fields=["obs"])
    with pytest.raises(CapacityError, match="rows: expected > 0, got 0"):
        FrameStackStorage(0, 1, _specs(4, 0, (2, 4)))
    # float stacks when named explicitly (12-byte frames: compared as 32-bit words): compared
    # bytewise, so -0.0 does not link to 0.0
    fs = FrameStackStorage(
        4, 1, {"obs": FieldSpec("obs", (2, 3), np.float32)}, frame_fields=["obs"]
    )
    obs = np.zeros((2, 1, 2, 3), np.float32)
    obs[0, 0, 1], obs[1, 0, 0, 0], obs[1, 0, 1] = 1.0, -0.0, 2.0
    fs.write_block({"obs": obs})
    assert fs.frames["obs"].word == np.uint32 and fs.frames["obs"].side.n == 1  # row 1
    np.testing.assert_array_equal(fs.gather(np.arange(2))["obs"], obs[:, 0])
    assert np.signbit(fs.gather(np.array([1]))["obs"][0, 0, 0])


@pytest.mark.parametrize("padding", ["repeat", "zero"])
def test_atari_bytes_per_transition(padding: str) -> None:
    """84x84x4 uint8 stacks, episodes of 100-300 steps, several wrap-arounds: at most 7,300
    bytes per transition with everything counted (one frame is 7,056)."""
    rng = np.random.default_rng(1)
    rows, n, depth = 500, 2, 4
    specs = {
        "obs": FieldSpec("obs", (depth, 84, 84), np.uint8),
        "action": FieldSpec("action", (), np.int64),
        "reward": FieldSpec("reward", (), np.float32),
        "terminated": FieldSpec("terminated", (), np.bool_),
        "truncated": FieldSpec("truncated", (), np.bool_),
    }
    fs = FrameStackStorage(rows, n, specs)
    stacks = np.zeros((n, depth, 84, 84), np.uint8)
    left = np.zeros(n, dtype=int)
    for _ in range(3 * rows):
        for e in range(n):
            f = rng.integers(0, 256, (84, 84), dtype=np.uint8)
            if left[e] == 0:
                left[e] = rng.integers(100, 300)
                stacks[e] = f if padding == "repeat" else np.stack([f * 0] * 3 + [f])
            else:
                stacks[e] = np.concatenate([stacks[e, 1:], f[None]])
            left[e] -= 1
        row = {k: np.zeros((1, n), s.dtype) for k, s in specs.items() if k != "obs"}
        fs.write_block({"obs": stacks[None], **row})
        fs.put_row(fs.cursor, {"obs": stacks})
    per = fs.nbytes / (rows * n)
    assert 7056 < per <= 7300, per
    assert np.array_equal(fs.gather(np.array([fs.cursor * n + 1]))["obs"][0], stacks[1])


def test_benchmark_worker_runs_and_checks_its_stacks() -> None:
    """benchmarks/bench_frames.py's rlstore worker end to end at a tiny size (no timing checked)."""
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, str(root / "benchmarks" / "bench_frames.py"), "--worker", "rlstore"]
    cmd += ["--envs", "2", "--capacity", "256", "--repeats", "1"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["stacks_checked"] is True and r["add"]["rate"] > 0 and r["sample256"]["rate"] > 0
    # 129 rows + 3 frame rows, x 2 envs, one 7,056-byte frame each, plus tails, pending stacks
    assert 7056 <= r["own_per_transition"] <= 7056 * 1.5


def test_write_row_rejects_bad_rows_and_changes_nothing() -> None:
    """``write_row`` checks every value before writing (a count that is not one per field is a
    SpecError too, no bare ValueError from ``zip``)."""
    fs = _filled()
    before = fs.state_dict()
    obs = np.ones((2, 3, 2, 4), np.uint8)
    act = np.zeros((2, 2), np.float32)
    with pytest.raises(SpecError, match=r"values: expected one per field \['obs.a', 'action'"):
        fs.write_row((obs, act))
    with pytest.raises(SpecError, match=r"obs.b: expected an array of shape \(2, 3, 2, 4\) dtype"):
        fs.write_row((obs, act, obs.astype(np.int16)))
    with pytest.raises(SpecError, match=r"action: expected an array of shape \(2, 2\), got \(2,\)"):
        fs.write_row((obs, act[0], obs))
    _assert_state_equal(fs.state_dict(), before)


@pytest.mark.parametrize("reload", ["none", "state_dict", "pickle"])
def test_a_row_continuing_a_stored_side_row_links_to_it(reload: str) -> None:
    """A new row is compared with the stored previous row (rebuilt from its frame sources, here
    a SIDE row's side frames), also after a reload: it links (no new side entry) and reads back
    exactly."""
    specs = {"obs": FieldSpec("obs", (3, 2, 4), np.uint8)}
    fs = FrameStackStorage(4, 1, specs)
    rng = np.random.default_rng(3)
    side_stack = rng.integers(1, 9, (3, 2, 4), dtype=np.uint8)  # a discontinuity: SIDE
    fs.write_row((side_stack,))
    if reload == "state_dict":
        fs = FrameStackStorage.from_state_dict(fs.state_dict())
    elif reload == "pickle":
        fs = pickle.loads(pickle.dumps(fs))
    nxt = np.concatenate([side_stack[1:], rng.integers(1, 9, (1, 2, 4), dtype=np.uint8)])
    fs.write_row((nxt,))
    f = fs.frames["obs"]
    assert f.side.n == 1 and f.store.arrays["kind"][1, 0] == 0  # LINK
    np.testing.assert_array_equal(fs.gather(np.array([0, 1]))["obs"], np.stack([side_stack, nxt]))


def test_check_shared_frames_names_the_first_bad_row_and_env() -> None:
    from rlstore.storage.frames import check_shared_frames

    specs = {"obs": FieldSpec("obs", (2, 3, 4), np.uint8)}  # stack axis last: (2, 3, S=4)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 255, (3, 2, 6, 2, 3), dtype=np.uint8)  # (T, n, frames, 2, 3)
    obs = np.moveaxis(frames[:, :, :4], 2, -1)  # non-contiguous views
    nxt = np.moveaxis(frames[:, :, 1:5], 2, -1).copy()
    check_shared_frames(specs, -1, {"obs": obs}, {"obs": nxt})
    nxt[2, 1, 0, 0, 1] += 1  # frame 1 of row 2, env 1
    nxt[2, 1, 0, 0, 3] += 1  # its newest frame: not compared
    with pytest.raises(SpecError, match=r"next_obs: expected frames 0..2 along stack axis -1 .* "
                       r"at row 2, env 1"):  # fmt: skip
        check_shared_frames(specs, -1, {"obs": obs}, {"obs": nxt})
    nxt[2, 1, 0, 0, 1] -= 1
    check_shared_frames(specs, -1, {"obs": obs}, {"obs": nxt})


def test_write_row_with_the_stack_axis_last_equals_write_block() -> None:
    """One env, stack axis last: item-shaped rows (moved to stack-first words) store what
    blocks store."""
    specs = {"obs": FieldSpec("obs", (2, 4, 3), np.uint8), "r": FieldSpec("r", (), np.float32)}
    by_row, by_block = (FrameStackStorage(3, 1, specs, stack_axis=-1) for _ in range(2))
    rng = np.random.default_rng(5)
    frames = rng.integers(0, 3, (9, 2, 4), dtype=np.uint8)
    for t in range(6):
        stack = np.moveaxis(frames[t : t + 3], 0, -1)  # (2, 4, 3), a continuation each step
        by_row.write_row((stack, float(t)))
        by_block.write_block({"obs": stack[None, None], "r": np.full((1, 1), t, np.float32)})
        by_row.put_row(by_row.cursor, {"obs": stack})
        by_block.put_row(by_block.cursor, {"obs": stack[None]})
    _assert_state_equal(by_row.state_dict(), by_block.state_dict())
    np.testing.assert_array_equal(
        by_row.gather(np.arange(3))["obs"], by_block.gather(np.arange(3))["obs"]
    )


def test_a_state_whose_frame_spec_does_not_fit_its_ring_is_refused() -> None:
    """A loaded state whose frame-stack spec has frames of another size than its ring's
    (here 0 bytes against 2) raised numpy's ValueError while building the ring's word views;
    it is a CheckpointError naming the ring, checked before anything is built."""
    from rlstore import ReplayBuffer
    from rlstore.errors import CheckpointError
    from rlstore.storage import StorageLayout

    buf = ReplayBuffer(4, seed=0, storage=StorageLayout.frames())
    for i in range(3):
        buf.add(np.full((3, 2), i, np.uint8), 0, 1.0, np.full((3, 2), i, np.uint8), False, False)
    for shape in ([3, 0], [3, 4]):
        sd = buf.state_dict()
        sd["storage"]["specs"][0]["shape"] = shape
        fresh = ReplayBuffer(**{**buf.config(), "specs": None})
        with pytest.raises(CheckpointError, match=r"storage\.frames\.obs\.store: expected 7 rows"):
            fresh.load_state_dict(sd)
        assert len(fresh) == 0 and fresh.specs is None
