"""``rlstore demo`` and ``rlstore inspect`` through the CLI entry point, with tiny sizes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from rlstore import checkpoint
from rlstore.buffers.replay import ReplayBuffer
from rlstore.cli import main
from rlstore.demo import buffers_equal

TINY = ["--steps", "120", "--capacity", "64", "--num-envs", "2", "--batches", "5"]
TINY += ["--batch-size", "16", "--no-progress"]


def test_demo_fills_saves_reloads_and_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ckpt"
    assert main(["demo", *TINY, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stored    64 / 64 transitions" in text
    assert "verified  identical contents and next samples" in text
    for word in ("memory", "B/transition", "samples/s", "save", "load"):
        assert word in text
    buf = checkpoint.load(out)
    assert isinstance(buf, ReplayBuffer) and len(buf) == 64
    assert buf.config()["num_envs"] == 2
    batch = buf.sample(64)
    assert batch.obs.shape == (64, 4) and batch.obs.dtype == torch.float32


def test_demo_other_env_and_default_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the default folder goes here
    args = ["demo", "--env", "Pendulum-v1", "--steps", "40", "--capacity", "40"]
    args += ["--num-envs", "2", "--batches", "2", "--batch-size", "8", "--no-progress"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "Pendulum-v1 x 2" in text and "verified  identical" in text
    folder = Path(text.split(" in ")[-1].split("\n")[0])
    assert folder.parent == tmp_path and folder.name.startswith("rlstore-demo-")
    assert checkpoint.read_metadata(folder)["class"] == "ReplayBuffer"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--env", "NoSuchEnv-v9"], "--env 'NoSuchEnv-v9'"),
        (["--capacity", "1", "--num-envs", "2"], "--capacity must be >= --num-envs"),
        (["--steps", "0"], "--steps must be > 0"),
    ],
)
def test_demo_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["demo", *TINY, "--out", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err


def test_demo_out_naming_a_file_is_refused_before_filling(tmp_path, capsys) -> None:
    """It failed in ``checkpoint.save`` with a FileExistsError traceback, after the fill."""
    (tmp_path / "f").write_text("mine")
    assert main(["demo", *TINY, "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert "--out: expected a folder, got the file" in err and "Traceback" not in err
    assert (tmp_path / "f").read_text() == "mine"


def test_demo_on_an_rlstore_env(tmp_path, capsys) -> None:
    """``--env rlstore/KeyDoor-v0`` failed: ``Namespace rlstore not found`` (not registered)."""
    assert main(["demo", *TINY, "--env", "rlstore/Probe1-v0", "--out", str(tmp_path)]) == 0
    assert "verified  identical contents and next samples" in capsys.readouterr().out


def test_buffers_equal_detects_a_difference() -> None:
    """The demo's verification can fail: one changed reward is reported."""
    rng = np.random.default_rng(0)
    a = ReplayBuffer(20, seed=1)
    for _ in range(10):
        a.add(rng.standard_normal(3), 1, 0.5, rng.standard_normal(3), False, False)
    b = ReplayBuffer(20, seed=1)
    b.load_state_dict(a.state_dict())
    assert buffers_equal(a, b, batch_size=4) == []
    sd = a.state_dict()
    sd["storage"]["arrays"]["reward"] = sd["storage"]["arrays"]["reward"].copy()
    sd["storage"]["arrays"]["reward"][3] += 1.0
    c = ReplayBuffer(20, seed=1)
    c.load_state_dict(sd)
    problems = buffers_equal(a, c, batch_size=10)
    assert "state entry 'storage/arrays/reward' differs" in problems


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    assert main(["demo", *TINY, "--out", str(tmp_path)]) == 0
    return tmp_path


def test_inspect_prints_readable_metadata(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["inspect", str(saved), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "class           ReplayBuffer" in text
    assert "capacity             64" in text
    assert "storage/arrays/obs" in text and "float32" in text
    assert "verified  checksum, keys, shapes and dtypes match" in text


def test_inspect_json_and_several_prefixes(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint.save_state(saved, {"x": np.zeros(3)}, prefix="extra_")
    capsys.readouterr()
    assert main(["inspect", str(saved)]) == 0
    text = capsys.readouterr().out
    assert f"{saved / 'buffer_'}*" in text and f"{saved / 'extra_'}*" in text
    assert main(["inspect", str(saved), "--prefix", "buffer_", "--json"]) == 0
    sidecar = json.loads(capsys.readouterr().out)
    assert sidecar["class"] == "ReplayBuffer" and sidecar["config"]["capacity"] == 64
    # several checkpoints: one JSON document (two printed one after the other were not JSON)
    assert main(["inspect", str(saved), "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert set(both) == {"buffer_", "extra_"} and both["buffer_"] == sidecar


def test_inspect_of_a_run_folder_names_its_checkpoint_folders(tmp_path, capsys) -> None:
    """A run folder (or its ``checkpoints/``) holds no sidecar itself: the error only said
    ``no *metadata.json found``."""
    for n in range(5):
        checkpoint.save_state(tmp_path / "checkpoints" / f"checkpoint_{n:04d}", {"x": np.zeros(1)})
    assert main(["inspect", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    first, last = (tmp_path / "checkpoints" / f"checkpoint_{n:04d}" for n in (0, 4))
    assert f"the checkpoint folders below it: {first}, ..., {last} (5 folders)" in err
    assert main(["inspect", str(last)]) == 0


def test_inspect_errors(saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["inspect", str(empty)]) == 2
    assert "no *metadata.json found" in capsys.readouterr().err
    state = checkpoint.state_file_path(saved)
    data = bytearray(state.read_bytes())
    data[-1] ^= 0xFF
    state.write_bytes(bytes(data))
    assert main(["inspect", str(saved)]) == 0  # metadata alone is still readable
    capsys.readouterr()
    assert main(["inspect", str(saved), "--verify"]) == 2
    assert "sha256 mismatch" in capsys.readouterr().err


def test_inspect_into_a_closed_pipe_is_no_traceback(saved: Path) -> None:
    """``rlstore inspect DIR | head`` ended in a BrokenPipeError traceback when ``head`` left."""
    import os
    import subprocess
    import sys

    import rlstore

    env = {**os.environ, "PYTHONPATH": str(Path(rlstore.__file__).resolve().parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlstore.cli", "inspect", str(saved)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader leaves before the first line is written
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err
