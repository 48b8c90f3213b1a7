"""rlstore.checkpoint._atomic: a save killed (or failing) at any stage leaves a loadable folder."""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlstore.checkpoint import load, load_state, save_state

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

    from rlstore.checkpoint import _atomic
    interrupt_at_stages(_atomic, die, setattr)
    checkpoint.save_state(target, state(2))
    print("survived", flush=True)
    """
)


def interrupt_at_stages(atomic: Any, on_stage: Any, setattr_: Any) -> None:
    """Make ``on_stage(name)`` run at each stage of a save (see ``rlstore.checkpoint._atomic``):
    "written" as ``_keep_committed_state_reachable`` starts, "linked" and "state_replaced"
    before the first and second ``os.replace``, "committed" after the second. ``setattr_`` is
    ``setattr`` in a child process, ``monkeypatch.setattr`` here (undone after the test)."""
    keep, replace = atomic._keep_committed_state_reachable, atomic.os.replace
    calls = []

    def keep_hook(*args):
        on_stage("written")
        return keep(*args)

    def replace_hook(src, dst):
        calls.append(dst)
        on_stage("linked" if len(calls) == 1 else "state_replaced")
        replace(src, dst)
        if len(calls) == 2:
            on_stage("committed")

    setattr_(atomic, "_keep_committed_state_reachable", keep_hook)
    setattr_(atomic.os, "replace", replace_hook)


_CHILD = _CHILD.replace(
    "from rlstore import checkpoint\n",
    "from rlstore import checkpoint\nfrom typing import Any\n"
    + textwrap.dedent(inspect.getsource(interrupt_at_stages)),
)

_STAGES = {"written": 1, "linked": 1, "state_replaced": 1, "committed": 2}

Spawn = Callable[[Path, str, int], "subprocess.Popen[str]"]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """``spawn(target, mode, n)`` starts ``_CHILD``. At teardown, also after a failure, a child
    still running is killed, every child is reaped and its pipes are closed: a ``loop`` child
    left behind would save forever, and its Popen's "still running" ResourceWarning (an error
    under ``filterwarnings``) would fail whichever later test of this worker collects it."""
    with contextlib.ExitStack() as stack:

        def start(target: Path, mode: str, n: int) -> subprocess.Popen[str]:
            args = [sys.executable, "-c", _CHILD, str(target), mode, str(n)]
            pipe = subprocess.PIPE
            proc = stack.enter_context(subprocess.Popen(args, stdout=pipe, stderr=pipe, text=True))
            stack.callback(lambda: proc.poll() is None and proc.kill())  # before Popen's exit
            return proc

        yield start


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_killed_mid_save_leaves_a_loadable_checkpoint(tmp_path: Path, spawn: Spawn) -> None:
    """A child dies (SIGKILL) at each stage of a save; the folder always loads, old or new."""
    n = 1 << 18  # 2 MiB of float64
    procs = {stage: spawn(tmp_path / stage, stage, n) for stage in _STAGES}
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


def _kill_after(proc: subprocess.Popen[str], delay: float) -> int:
    """Wait for two complete saves of a saving loop, SIGKILL it ``delay`` s later."""
    assert proc.stdout is not None
    completed = [proc.stdout.readline() for _ in range(2)]
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert all(line.strip().isdigit() for line in completed), err
    return int(completed[-1])


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
@pytest.mark.parametrize("delay", [0.0, 0.017])
def test_killed_at_an_arbitrary_instant(tmp_path: Path, spawn: Spawn, delay: float) -> None:
    """Kill a child that saves an 8 MiB state in a loop; arrays and JSON always agree."""
    n = 1 << 20
    last = _kill_after(spawn(tmp_path, "loop", n), delay)
    loaded = load_state(tmp_path)
    assert loaded["gen"] >= last
    np.testing.assert_array_equal(loaded["x"], np.full(n, loaded["gen"], np.float64))


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_replay_buffer_killed_while_saving(tmp_path: Path, spawn: Spawn) -> None:
    """A child overwrites a 100k-transition buffer (obs_dim 17) and saves it in a loop; after
    SIGKILL the folder loads as one whole generation of the buffer."""
    last = _kill_after(spawn(tmp_path, "buffer", 100_000), 0.005)
    buf = load(tmp_path)
    assert len(buf) == 100_000
    batch = buf.sample(4096)
    gen = batch.reward[0].item()
    assert gen >= last
    assert torch.all(batch.reward == gen) and torch.all(batch.obs == gen)
    assert torch.all(batch.next_obs == gen)


class _Boom(Exception):
    """Raised at a stage of a save to interrupt it in-process."""


@pytest.mark.parametrize(("stage", "expected_gen"), list(_STAGES.items()))
def test_save_interrupted_in_process_at_each_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str, expected_gen: int
) -> None:
    """An exception at each stage of a save (the stages the crash tests kill the child at)
    leaves the same checkpoint as a SIGKILL there (old before the sidecar's rename, new after
    it) and this process's temporaries are removed."""
    from rlstore.checkpoint import _atomic

    save_state(tmp_path, {"x": np.full(5, 0.0), "gen": 0})
    save_state(tmp_path, {"x": np.full(5, 1.0), "gen": 1})
    seen: list[str] = []

    def hook(name: str) -> None:
        seen.append(name)
        if name == stage:
            raise _Boom(name)

    with monkeypatch.context() as patch:
        interrupt_at_stages(_atomic, hook, patch.setattr)
        with pytest.raises(_Boom):
            save_state(tmp_path, {"x": np.full(5, 2.0), "gen": 2})
    order = ["written", "linked", "state_replaced", "committed"]
    assert seen == order[: order.index(stage) + 1]
    loaded = load_state(tmp_path)
    assert loaded["gen"] == expected_gen
    np.testing.assert_array_equal(loaded["x"], np.full(5, float(expected_gen)))
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]
    save_state(tmp_path, {"x": np.full(2, 9.0), "gen": 9})  # the next save cleans up
    assert load_state(tmp_path)["gen"] == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "buffer_metadata.json",
        "buffer_state.safetensors",
    ]


_ORDER = ["written", "linked", "state_replaced", "committed"]


@pytest.mark.parametrize("first", _ORDER)
def test_saves_interrupted_one_after_another_keep_the_last_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """A save interrupted at ``first``, then saves interrupted at every stage in turn (and one
    that completes): after each, the folder loads the last committed generation, whatever
    state file and ``.prev`` link the earlier interruptions left (a ``.prev`` must never be
    dropped while it is the only committed state file)."""
    from rlstore.checkpoint import _atomic

    def save(gen: int, stage: str | None, committed: int) -> int:
        """Save generation ``gen``, interrupted at ``stage``; the generation committed after."""

        def hook(name: str) -> None:
            if name == stage:
                raise _Boom(name)

        with monkeypatch.context() as patch:
            interrupt_at_stages(_atomic, hook, patch.setattr)
            with contextlib.suppress(_Boom):
                save_state(tmp_path, {"x": np.full(3, float(gen)), "gen": gen})
        return gen if stage in (None, "committed") else committed

    save_state(tmp_path, {"x": np.zeros(3), "gen": 0})
    committed = save(1, first, 0)
    for gen, stage in enumerate([*_ORDER, *_ORDER[::-1], None, *_ORDER], start=2):
        committed = save(gen, stage, committed)
        loaded = load_state(tmp_path)
        assert loaded["gen"] == committed, (first, gen, stage)
        np.testing.assert_array_equal(loaded["x"], np.full(3, float(committed)))


def test_orphan_temporaries_of_dead_processes_are_removed(tmp_path: Path) -> None:
    """Temporaries (files and folders) named after a dead pid go at the next save; those of a
    live pid stay."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid names no process (pids are not reused this fast)
    orphan = tmp_path / f".buffer_state.safetensors.tmp-{dead.pid}-deadbeef"
    live = tmp_path / f".buffer_metadata.json.tmp-{os.getppid()}-cafebabe"
    unrelated = tmp_path / ".other.tmp-1-x"
    for p in (orphan, live, unrelated):
        p.write_bytes(b"partial")
    # the state file's private folders, with safetensors' own temporary inside
    orphan_dir = tmp_path / f".buffer_state.safetensors.tmp-{dead.pid}-feedface"
    live_dir = tmp_path / f".buffer_state.safetensors.tmp-{os.getppid()}-0badf00d"
    for d in (orphan_dir, live_dir):
        d.mkdir()
        (d / ".tmpAb12Cd").write_bytes(b"partial")
    save_state(tmp_path, {"x": np.zeros(2)})
    assert not orphan.exists() and not orphan_dir.exists()
    assert live.exists() and unrelated.exists() and (live_dir / ".tmpAb12Cd").exists()


def _library_temporaries(folder: Path) -> list[Path]:
    """safetensors' own ``.tmpXXXXXX`` files under ``folder`` (ours are ``.<name>.tmp-...``),
    while a save runs: a private folder may vanish between listing ``folder`` and scanning it,
    which ``os.walk`` skips (``Path.rglob`` raises FileNotFoundError there before Python 3.13)."""
    return [Path(d, f) for d, _, files in os.walk(folder) for f in files if f.startswith(".tmp")]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_killed_inside_the_library_write_leaves_nothing_behind(
    tmp_path: Path, spawn: Spawn
) -> None:
    """SIGKILL while safetensors' save_file is writing its own temporary file (the parent
    polls for it): the old checkpoint loads, and the next save removes every temporary,
    the library's included (it lies inside our private folder, named after the dead pid)."""
    n = 1 << 21  # 16 MiB of float64: the library's temporary lives for milliseconds
    proc = spawn(tmp_path, "loop", n)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "0"  # one complete save first
    deadline = time.monotonic() + 60
    while not (caught := _library_temporaries(tmp_path)) and time.monotonic() < deadline:
        pass
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert caught, f"never saw the library's temporary file; child stderr: {err}"
    loaded = load_state(tmp_path)
    np.testing.assert_array_equal(loaded["x"], np.full(n, loaded["gen"], np.float64))
    save_state(tmp_path, {"x": np.full(3, 9.0), "gen": 9})
    assert load_state(tmp_path)["gen"] == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "buffer_metadata.json",
        "buffer_state.safetensors",
    ]
