"""Tests of rlstore.checkpoint: round trips, exact resume, corruption, crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstore import checkpoint
from rlstore.checkpoint import (
    CHECKPOINT_REGISTRY,
    FORMAT_VERSION,
    load,
    load_state,
    load_state_file,
    metadata_file_path,
    read_metadata,
    register_checkpointable,
    save,
    save_state,
    state_file_path,
)
from rlstore.errors import CheckpointError


def _nested_state() -> dict[str, Any]:
    rng = np.random.default_rng(123)
    return {
        "storage": {
            "obs": rng.standard_normal((5, 2, 3)).astype(np.float32),
            "image": rng.integers(0, 256, (5, 2, 4, 4), dtype=np.uint8),
            "terminated": rng.random((5, 2)) < 0.3,
            "empty": np.zeros((0, 3), np.float64),
            "scalar": np.array(7, np.int64),
            "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
            "strided": np.arange(10, dtype=np.int16)[::3],
            "big_endian": np.arange(4, dtype=">i4"),
            "half": np.linspace(0, 1, 5, dtype=np.float16),
            "u64": np.array([2**64 - 1], np.uint64),
        },
        "hidden": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "cursor": 3,
        "size": np.int64(9),  # numpy scalar -> python int
        "ratio": 0.25,
        "name": "buf",
        "flags": (True, None),
        "rng": np.random.default_rng(5).bit_generator.state,  # 128-bit ints
        "nothing": {},
    }


def _assert_state_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert set(a) == set(b)
    for key, va in a.items():
        vb = b[key]
        if isinstance(va, dict):
            _assert_state_equal(va, vb)
        elif isinstance(va, torch.Tensor):
            assert isinstance(vb, torch.Tensor)
            assert (vb.dtype, vb.shape) == (va.dtype, va.shape), key
            assert torch.equal(va, vb)
        elif isinstance(va, np.ndarray):
            assert isinstance(vb, np.ndarray), key
            # same dtype up to byte order (saved little-endian)
            assert (vb.dtype.name, vb.shape) == (va.dtype.name, va.shape), key
            np.testing.assert_array_equal(va, vb)
        elif isinstance(va, tuple):
            assert list(va) == vb
        else:
            assert va == vb, key


def test_nested_state_round_trip(tmp_path: Path) -> None:
    state = _nested_state()
    meta_path = save_state(tmp_path, state)
    loaded = load_state(tmp_path)
    _assert_state_equal(state, loaded)
    assert isinstance(loaded["size"], int)
    assert loaded["storage"]["big_endian"].dtype == np.dtype("<i4")
    sidecar = json.loads(meta_path.read_text())
    assert sidecar["format_version"] == FORMAT_VERSION
    assert sidecar["schema"]["storage/image"] == {
        "shape": [5, 2, 4, 4],
        "dtype": "uint8",
        "kind": "numpy",
    }
    assert sidecar["schema"]["hidden"]["kind"] == "torch"
    assert sidecar["state"]["cursor"] == 3 and "obs" not in sidecar["state"]["storage"]
    # the restored RNG state reproduces the original stream
    gen = np.random.default_rng()
    gen.bit_generator.state = loaded["rng"]
    np.testing.assert_array_equal(gen.random(4), np.random.default_rng(5).random(4))


_DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
_DTYPES += ["float16", "float32", "float64"]
_KEYS = st.text(st.characters(codec="utf-8", exclude_characters="/"), min_size=1, max_size=6)


@st.composite
def _arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    seed = draw(st.integers(0, 2**32 - 1))
    raw = np.random.default_rng(seed).integers(0, 256, int(np.prod(shape)) * dtype.itemsize)
    arr = raw.astype(np.uint8).view(dtype).reshape(shape)  # any bit pattern (NaN, inf, -0.0)
    return arr.astype(bool) if dtype == np.bool_ else arr


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=5)
    | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=5,
)  # fmt: skip
_STATES = st.recursive(
    st.dictionaries(_KEYS, _arrays() | _JSON, max_size=4),
    lambda inner: st.dictionaries(_KEYS, inner | _arrays() | _JSON, max_size=3),
    max_leaves=8,
)


def _bitwise_equal(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for k in a:
            _bitwise_equal(a[k], b[k])
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and (a.dtype, a.shape) == (b.dtype, b.shape)
        assert a.tobytes() == b.tobytes()  # bit-exact, NaN payloads included
    else:
        assert a == b


@settings(max_examples=40)
@given(state=_STATES)
def test_any_nested_state_round_trips_bit_exactly(tmp_path_factory: Any, state: dict) -> None:
    folder = tmp_path_factory.mktemp("prop")
    save_state(folder, state)
    _bitwise_equal(state, load_state(folder))


def test_state_file_is_plain_safetensors(tmp_path: Path) -> None:
    """Our streaming writer produces files the reference safetensors reader accepts."""
    from safetensors.numpy import load_file

    state = _nested_state()
    save_state(tmp_path, state)
    plain = load_file(str(state_file_path(tmp_path)))
    np.testing.assert_array_equal(plain["storage/image"], state["storage"]["image"])
    np.testing.assert_array_equal(plain["hidden"], state["hidden"].numpy())
    assert plain["storage/big_endian"].dtype == np.dtype("<i4")
    np.testing.assert_array_equal(plain["storage/big_endian"], np.arange(4))


def test_overwrite_leaves_only_the_two_files(tmp_path: Path) -> None:
    save_state(tmp_path, {"x": np.zeros(3), "gen": 0})
    save_state(tmp_path, {"x": np.ones(4), "gen": 1})
    loaded = load_state(tmp_path)
    assert loaded["gen"] == 1
    np.testing.assert_array_equal(loaded["x"], np.ones(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "buffer_metadata.json",
        "buffer_state.safetensors",
    ]


def test_prefixes_share_a_folder(tmp_path: Path) -> None:
    save_state(tmp_path, {"x": np.zeros(2)}, prefix="a_")
    save_state(tmp_path, {"x": np.ones(3)}, prefix="b_")
    assert load_state(tmp_path, prefix="a_")["x"].shape == (2,)
    assert load_state(tmp_path, prefix="b_")["x"].shape == (3,)


def test_state_file_alone_is_self_describing(tmp_path: Path) -> None:
    state = _nested_state()
    save_state(tmp_path, state, class_name="X", config={"capacity": 4})
    loaded, record = load_state_file(state_file_path(tmp_path))
    _assert_state_equal(state, loaded)
    assert record["class"] == "X" and record["config"] == {"capacity": 4}


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ({"a/b": np.zeros(2)}, "without '/'"),
        ({"": 1}, "non-empty"),
        ({"x": object()}, "got object"),
        ({"x": torch.zeros(2, dtype=torch.bfloat16)}, "bfloat16"),
        ({"x": np.array(["a", "b"])}, "got <U1"),
        ({"x": np.zeros(2, np.complex64)}, "got complex64"),
        ({"x": torch.zeros(2, dtype=torch.complex64)}, "got complex64"),
        ({"x": {"y": [np.zeros(2)]}}, "got ndarray"),
    ],
)
def test_unsupported_state_is_rejected_before_writing(
    tmp_path: Path, state: dict[str, Any], match: str
) -> None:
    target = tmp_path / "ckpt"
    with pytest.raises(CheckpointError, match=match):
        save_state(target, state)
    assert not target.exists()


# --------------------------------------------------------------------------- corruption


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    save_state(tmp_path, {"x": np.arange(1000, dtype=np.float32), "cursor": 1})
    return tmp_path


def test_missing_files(saved: Path) -> None:
    state_file_path(saved).unlink()
    with pytest.raises(CheckpointError, match="state file is missing"):
        load_state(saved)
    metadata_file_path(saved).unlink()
    with pytest.raises(CheckpointError, match="metadata file is missing"):
        load_state(saved)


def test_truncated_state_file(saved: Path) -> None:
    path = state_file_path(saved)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        load_state(saved)


@pytest.mark.parametrize("where", ["data", "header_length", "header_json"])
def test_flipped_bytes(saved: Path, where: str) -> None:
    path = state_file_path(saved)
    data = bytearray(path.read_bytes())
    header_len = int.from_bytes(data[:8], "little")
    pos = {"data": len(data) - 10, "header_length": 1, "header_json": 8 + header_len // 2}[where]
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted|sha256|no state file matches"):
        load_state(saved)


def test_metadata_not_json(saved: Path) -> None:
    metadata_file_path(saved).write_text('{"format_version": 1, "sche')
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_state(saved)


@pytest.mark.parametrize(
    ("version", "match"),
    [(FORMAT_VERSION + 1, "newer than this rlstore"), ("1", "expected an integer"), (0, "integer")],
)
def test_bad_format_version(saved: Path, version: object, match: str) -> None:
    path = metadata_file_path(saved)
    sidecar = json.loads(path.read_text())
    sidecar["format_version"] = version
    path.write_text(json.dumps(sidecar))
    with pytest.raises(CheckpointError, match=match):
        load_state(saved)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: s["schema"]["x"].update(shape=[999]), "expected shape"),
        (lambda s: s["schema"]["x"].update(dtype="float64"), "dtype float64"),
        (lambda s: s["schema"].update(y={"shape": [1], "dtype": "int8"}), "missing \\['y'\\]"),
        (lambda s: s["schema"].pop("x"), "unexpected \\['x'\\]"),
        (lambda s: s.update(state_sha256="0" * 64), "sha256 mismatch"),
        (lambda s: s.pop("save_id"), "lacks required key 'save_id'"),
    ],
)
def test_metadata_disagreeing_with_arrays(saved: Path, edit: Any, match: str) -> None:
    path = metadata_file_path(saved)
    sidecar = json.loads(path.read_text())
    edit(sidecar)
    path.write_text(json.dumps(sidecar))
    with pytest.raises(CheckpointError, match=match):
        load_state(saved)


def test_state_file_of_another_save_is_refused(saved: Path, tmp_path_factory: Any) -> None:
    other = tmp_path_factory.mktemp("other")
    save_state(other, {"x": np.arange(1000, dtype=np.float32), "cursor": 1})
    state_file_path(saved).write_bytes(state_file_path(other).read_bytes())
    with pytest.raises(CheckpointError, match="no state file matches the metadata"):
        load_state(saved)


# --------------------------------------------------------------------------- objects


class Counter:
    """A tiny checkpointable object: a seeded RNG and a growing array."""

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size = size
        self.seed = seed
        self.values = np.zeros(size, np.int64)
        self.rng = np.random.default_rng(seed)

    def step(self) -> int:
        v = int(self.rng.integers(0, 1000))
        self.values[v % self.size] += 1
        return v

    def config(self) -> dict[str, Any]:
        return {"size": self.size, "seed": self.seed}

    def metadata(self) -> dict[str, Any]:
        return {"total": int(self.values.sum())}

    def state_dict(self) -> dict[str, Any]:
        return {"values": self.values.copy(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.values = sd["values"].copy()
        self.rng.bit_generator.state = sd["rng"]


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "CHECKPOINT_REGISTRY", dict(CHECKPOINT_REGISTRY))
    register_checkpointable("Counter", Counter)


def test_object_save_load_resumes_exactly(tmp_path: Path, registered: None) -> None:
    obj = Counter(7, seed=3)
    for _ in range(20):
        obj.step()
    save(obj, tmp_path)
    restored = load(tmp_path)
    assert isinstance(restored, Counter) and restored.config() == obj.config()
    assert [restored.step() for _ in range(10)] == [obj.step() for _ in range(10)]
    np.testing.assert_array_equal(restored.values, obj.values)
    assert read_metadata(tmp_path)["metadata"] == {"total": 20}


def test_unregistered_objects_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a registered checkpointable"):
        save(Counter(3), tmp_path)
    save_state(tmp_path, {"x": np.zeros(1)}, class_name="Evil", config={})
    with pytest.raises(CheckpointError, match="class: expected one of"):
        load(tmp_path)


# --------------------------------------------------------------------------- exact resume


def test_replay_buffer_exact_resume(tmp_path: Path) -> None:
    from rlstore.buffers.replay import ReplayBuffer

    rng = np.random.default_rng(0)
    buf = ReplayBuffer(50, num_envs=2, seed=7)
    obs = rng.standard_normal((2, 3)).astype(np.float32)
    for t in range(40):  # wraps around: 40 * 2 > 50
        nxt = rng.standard_normal((2, 3)).astype(np.float32)
        term = np.array([t % 9 == 8, False])
        trunc = np.array([False, t % 13 == 12])
        act = rng.integers(0, 4, 2)
        buf.add(obs, act, rng.standard_normal(2).astype(np.float32), nxt, term, trunc)
        obs = nxt
        if t % 10 == 5:
            buf.sample(8)  # advance the sampler RNG before saving
    save(buf, tmp_path)
    restored = load(tmp_path)
    assert len(restored) == len(buf)
    for _ in range(3):
        a, b = buf.sample(16), restored.sample(16)
        for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_rollout_buffer_exact_resume(tmp_path: Path) -> None:
    """Half-filled rollout with LSTM-style hidden tuples and an intrinsic stream: the reloaded
    buffer finishes the rollout and shuffles minibatches exactly like the original."""
    from rlstore.buffers.rollout import IntrinsicConfig, RolloutBuffer

    rng = np.random.default_rng(1)
    rb = RolloutBuffer(6, 2, gamma=0.9, lam=0.8, intrinsic=IntrinsicConfig(), seed=4)

    def step(buf: RolloutBuffer, r: np.random.Generator, g: torch.Generator) -> None:
        buf.add(
            r.standard_normal((2, 3)).astype(np.float32),
            r.integers(0, 3, 2),
            r.standard_normal(2),
            r.standard_normal(2),
            r.standard_normal(2),
            r.random(2) < 0.2,
            r.random(2) < 0.1,
            final_value=r.standard_normal(2),
            hidden=(torch.randn(2, 5, generator=g), torch.randn(2, 5, generator=g)),
            int_reward=r.random(2),
            int_value=r.standard_normal(2),
        )

    g0 = torch.Generator().manual_seed(0)
    for _ in range(3):
        step(rb, rng, g0)
    save(rb, tmp_path)
    restored = load(tmp_path)
    _assert_state_equal(rb.state_dict(), restored.state_dict())
    rng_a, rng_b = np.random.default_rng(2), np.random.default_rng(2)
    for buf, r in ((rb, rng_a), (restored, rng_b)):
        g1 = torch.Generator().manual_seed(1)
        for _ in range(3):
            step(buf, r, g1)
        buf.compute_returns(np.ones(2), last_int_value=np.zeros(2))
    pairs = zip(
        rb.minibatches(num_minibatches=3), restored.minibatches(num_minibatches=3), strict=True
    )
    for a, b in pairs:
        assert torch.equal(a.obs, b.obs) and torch.equal(a.advantages, b.advantages)
        assert torch.equal(a.returns, b.returns)


# --------------------------------------------------------------------------- crash safety

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    from rlstore import checkpoint

    target, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def state(gen):
        return {"x": np.full(n, gen, np.float64), "gen": gen}

    if mode == "loop":  # save forever; the parent kills us at an arbitrary instant
        gen = 0
        while True:
            checkpoint.save_state(target, state(gen))
            print(gen, flush=True)
            gen += 1
    if mode == "buffer":  # a real replay buffer, fully overwritten by each generation
        from rlstore.buffers.replay import ReplayBuffer

        buf = ReplayBuffer(n, num_envs=4, seed=0)
        rows = buf.capacity_per_env
        gen = 0
        while True:
            obs = np.full((rows, 4, 17), gen, np.float32)
            flags = np.zeros((rows, 4), bool)
            buf.extend(obs, np.zeros((rows, 4, 6), np.float32), np.full((rows, 4), gen),
                       obs, flags, flags)
            checkpoint.save(buf, target)
            print(gen, flush=True)
            gen += 1
    checkpoint.save_state(target, state(0))
    checkpoint.save_state(target, state(1))

    def die(stage):
        if stage == mode:
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint._stage_hook = die
    checkpoint.save_state(target, state(2))
    print("survived", flush=True)
    """
)

_STAGES = {"written": 1, "linked": 1, "state_replaced": 1, "committed": 2}


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_killed_mid_save_leaves_a_loadable_checkpoint(tmp_path: Path) -> None:
    """A child dies (SIGKILL) at each stage of a save; the folder always loads, old or new."""
    n = 1 << 18  # 2 MiB of float64
    procs = {
        stage: subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(tmp_path / stage), stage, str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for stage in _STAGES
    }
    for stage, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == -signal.SIGKILL, (stage, out, err)
        assert "survived" not in out
    for stage, expected_gen in _STAGES.items():
        folder = tmp_path / stage
        loaded = load_state(folder)
        assert loaded["gen"] == expected_gen, stage
        np.testing.assert_array_equal(loaded["x"], np.full(n, expected_gen, np.float64))
        # the next save after the crash works, cleans up, and is what loads
        save_state(folder, {"x": np.full(3, 9.0), "gen": 9})
        assert load_state(folder)["gen"] == 9
        assert sorted(p.name for p in folder.iterdir()) == [
            "buffer_metadata.json",
            "buffer_state.safetensors",
        ], stage


def _kill_after(target: Path, mode: str, n: int, delay: float) -> int:
    """Start a saving loop, wait for two complete saves, SIGKILL it ``delay`` s later."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(target), mode, str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    completed = [proc.stdout.readline() for _ in range(2)]
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert all(line.strip().isdigit() for line in completed), err
    return int(completed[-1])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
@pytest.mark.parametrize("delay", [0.0, 0.017])
def test_killed_at_an_arbitrary_instant(tmp_path: Path, delay: float) -> None:
    """Kill a child that saves an 8 MiB state in a loop; arrays and JSON always agree."""
    n = 1 << 20
    last = _kill_after(tmp_path, "loop", n, delay)
    loaded = load_state(tmp_path)
    assert loaded["gen"] >= last
    np.testing.assert_array_equal(loaded["x"], np.full(n, loaded["gen"], np.float64))


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_replay_buffer_killed_while_saving(tmp_path: Path) -> None:
    """A child overwrites a 100k-transition buffer (obs_dim 17) and saves it in a loop; after
    SIGKILL the folder loads as one whole generation of the buffer."""
    last = _kill_after(tmp_path, "buffer", 100_000, 0.005)
    buf = load(tmp_path)
    assert len(buf) == 100_000
    batch = buf.sample(4096)
    gen = batch.reward[0].item()
    assert gen >= last
    assert torch.all(batch.reward == gen) and torch.all(batch.obs == gen)
    assert torch.all(batch.next_obs == gen)
