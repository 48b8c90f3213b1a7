"""Checkpoints check themselves: the sidecar is checksummed, every failure to load is a
CheckpointError (bad paths, bytes that are not JSON, wrong types), and objects are rebuilt
through one construction path whose bugs surface."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _checkpoint_helpers import replay_buffer, rollout_buffer, state_equal

from rlstore import checkpoint
from rlstore.checkpoint import (
    CHECKPOINT_REGISTRY,
    load,
    load_state,
    metadata_file_path,
    read_metadata,
    register_checkpointable,
    save,
    save_state,
)
from rlstore.checkpoint._tree import _sidecar_digest
from rlstore.errors import CheckpointError


def _edit_sidecar(folder: Path, edit: Any, *, resign: bool) -> None:
    path = metadata_file_path(folder)
    sidecar = json.loads(path.read_text())
    edit(sidecar)
    if resign:  # a deliberate edit that also recomputes the sidecar's own checksum
        sidecar["sidecar_sha256"] = _sidecar_digest(sidecar)
    path.write_text(json.dumps(sidecar, indent=2))


def test_issue_repro_lowering_the_size_in_the_sidecar(tmp_path: Path) -> None:
    """Save 10 transitions, lower state.storage.size by one: this loaded with len 9."""
    from rlstore.buffers.replay import ReplayBuffer

    buf = ReplayBuffer(100, seed=0)
    for t in range(10):
        buf.add(np.full(4, t, np.float32), 0, 1.0, np.full(4, t + 1, np.float32), False, False)
    save(buf, tmp_path)
    assert len(load(tmp_path)) == 10

    def lower(s: dict) -> None:
        s["state"]["storage"]["size"] -= 1

    _edit_sidecar(tmp_path, lower, resign=False)
    with pytest.raises(CheckpointError, match="sidecar_sha256 mismatch"):
        load(tmp_path)
    _edit_sidecar(tmp_path, lambda s: None, resign=True)
    with pytest.raises(CheckpointError, match=r"disagrees .* \['state'\]"):
        load(tmp_path)


_REPLAY_EDITS = {
    "cursor": lambda s: s["state"]["storage"].update(cursor=s["state"]["storage"]["cursor"] - 1),
    "rows_written": lambda s: s["state"]["storage"].update(rows_written=0),
    "allow_nonfinite": lambda s: s["config"].update(allow_nonfinite=True),
    "sampler": lambda s: s["state"]["sampler"]["rng"]["state"].update(inc=1),
    "seed": lambda s: s["state"]["sampler"]["rng"].update(bit_generator="seed"),
}
_ROLLOUT_EDITS = {
    "pos": lambda s: s["state"].update(pos=s["state"]["pos"] + 1),
    "hidden_given": lambda s: s["state"].update(hidden_given=not s["state"]["hidden_given"]),
}


@pytest.mark.parametrize("resign", [False, True])
@pytest.mark.parametrize("field", list(_REPLAY_EDITS) + list(_ROLLOUT_EDITS))
def test_edited_sidecar_fields_never_load(tmp_path: Path, field: str, resign: bool) -> None:
    """Edits to the fields the issue lists loaded silently; now the sidecar checksum, or with
    a recomputed checksum the comparison with the state file's header, refuses them."""
    make, edits = (replay_buffer, _REPLAY_EDITS) if field in _REPLAY_EDITS else (
        rollout_buffer, _ROLLOUT_EDITS)  # fmt: skip
    save(make(), tmp_path)
    _edit_sidecar(tmp_path, edits[field], resign=resign)
    with pytest.raises(CheckpointError, match="disagrees" if resign else "sidecar_sha256"):
        load(tmp_path)


@pytest.mark.parametrize("bad", [None, 3, b"dir", ["a"]])
def test_bad_paths_are_checkpoint_errors(bad: Any) -> None:
    """checkpoint.load(None) was a TypeError."""
    for call in (load, load_state, read_metadata):
        with pytest.raises(CheckpointError, match="dirpath: expected a folder path"):
            call(bad)
    with pytest.raises(CheckpointError, match="prefix: expected a str"):
        load(".", prefix=None)  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="state_path: expected a file path"):
        checkpoint.load_verified(bad, {"format_version": 1, "state_sha256": "", "save_id": "",
                                       "schema": {}, "state": {}})  # fmt: skip
    with pytest.raises(CheckpointError, match="cannot read"):
        load("a\0b")


@pytest.mark.parametrize("prefix", ["../buffer_", "sub/buffer_"])
def test_a_prefix_with_a_path_separator_is_refused(tmp_path: Path, prefix: str) -> None:
    """A prefix of '../' wrote the checkpoint outside its folder."""
    with pytest.raises(CheckpointError, match="prefix: expected a file-name prefix"):
        checkpoint.save(replay_buffer(), tmp_path / "ckpt", prefix=prefix)
    assert not any(tmp_path.rglob("*.safetensors"))


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"\xff\xfe\x00binary", "not valid JSON"),
        (b'{"format_version": 2, "x": ' + b"9" * 5000 + b"}", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON|expected a JSON object"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'"text"', "expected a JSON object, got str"),
    ],
)
def test_sidecar_bytes_that_are_not_a_json_object(
    tmp_path: Path, content: bytes, match: str
) -> None:
    save_state(tmp_path, {"x": np.zeros(2)})
    metadata_file_path(tmp_path).write_bytes(content)
    with pytest.raises(CheckpointError, match=match):
        load_state(tmp_path)


@pytest.mark.parametrize(
    ("key", "value"),
    [("state", [1]), ("schema", "x"), ("save_id", 5), ("state_sha256", None), ("config", [1])],
)
def test_sidecar_values_of_the_wrong_json_type(tmp_path: Path, key: str, value: Any) -> None:
    from rlstore.buffers.replay import ReplayBuffer

    save(ReplayBuffer(4, seed=0), tmp_path)
    _edit_sidecar(tmp_path, lambda s: s.update({key: value}), resign=True)
    with pytest.raises(CheckpointError, match=key):
        load(tmp_path)


# --------------------------------------------------------------------------- construction


class _Buggy:
    """A registered class whose constructor has a bug (a TypeError of its own)."""

    def __init__(self, size: int) -> None:
        self.size = len(size)  # type: ignore[arg-type]  # the bug: len() of an int

    def config(self) -> dict[str, Any]:
        return {"size": 3}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        pass


@pytest.fixture
def buggy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "CHECKPOINT_REGISTRY", dict(CHECKPOINT_REGISTRY))
    register_checkpointable("Buggy", _Buggy)


def test_a_constructor_bug_surfaces(tmp_path: Path, buggy: None) -> None:
    """The TypeError of a constructor bug used to be caught and the construction retried."""
    save_state(tmp_path, {}, class_name="Buggy", config={"size": 3})
    with pytest.raises(TypeError, match="has no len"):
        load(tmp_path)


def test_a_config_that_does_not_fit_the_constructor(tmp_path: Path, buggy: None) -> None:
    save_state(tmp_path, {}, class_name="Buggy", config={"size": 3, "extra": 1})
    with pytest.raises(CheckpointError, match="does not fit Buggy's constructor"):
        load(tmp_path)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda c: c["specs"][0].pop("name"), "specs"),  # KeyError / SpecError before
        (lambda c: c.update(capacity=True), "capacity"),
        (lambda c: c.update(seed=-1), "seed"),
        (lambda c: c.update(specs=[{"name": "obs", "shape": [-1], "dtype": "float32"}]), "specs"),
        (lambda c: c.update(unknown=1), "unknown"),
    ],
)
def test_saved_replay_configs_are_validated_by_the_typed_model(
    tmp_path: Path, edit: Any, match: str
) -> None:
    """A config saved with valid checksums but invalid values: CheckpointError naming it."""
    buf = replay_buffer()
    config = buf.config()
    edit(config)
    save_state(tmp_path, buf.state_dict(), class_name="ReplayBuffer", config=config)
    with pytest.raises(CheckpointError, match=match):
        load(tmp_path)


def test_replay_and_rollout_rebuild_through_the_typed_config(tmp_path: Path) -> None:
    for make in (replay_buffer, rollout_buffer):
        buf = make()
        save(buf, tmp_path)
        assert state_equal(load(tmp_path).state_dict(), buf.state_dict())
