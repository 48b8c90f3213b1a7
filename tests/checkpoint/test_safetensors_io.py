"""rlstore.checkpoint._safetensors_io: the state file written through safetensors' save_file
(layouts, hash, mode, plain-safetensors readability), and every way a state file or its sidecar
can be corrupted."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

from rlstore.checkpoint import (
    FORMAT_VERSION,
    load_state,
    metadata_file_path,
    save_state,
    state_file_path,
)
from rlstore.checkpoint._safetensors_io import (
    _HEADER_KEY,
    _read_arrays,
    _sha256,
    _write_safetensors,
)
from rlstore.checkpoint._tree import _sidecar_digest
from rlstore.errors import CheckpointError


def _array_leaves(node: dict[str, Any], path: str = "") -> dict[str, np.ndarray]:
    """Naive reference flattening: every array / tensor leaf under its '/'-joined key."""
    out: dict[str, np.ndarray] = {}
    for key, value in node.items():
        full = f"{path}/{key}" if path else key
        if isinstance(value, dict):
            out.update(_array_leaves(value, full))
        elif isinstance(value, torch.Tensor):
            out[full] = value.numpy()
        elif isinstance(value, np.ndarray):
            out[full] = value
    return out


_SIDECAR_ONLY = ("state_file", "state_sha256", "state_nbytes", "sidecar_sha256")


def test_state_file_is_plain_safetensors(tmp_path: Path, nested_state: dict[str, Any]) -> None:
    """The official reader (safetensors.numpy.load_file) reads every array of a saved state
    back bit-exactly (all dtypes and layouts of the fixture), and the official header API sees
    our record."""
    state = nested_state
    save_state(tmp_path, state)
    path = state_file_path(tmp_path)
    plain = load_file(str(path))
    expected = _array_leaves(state)
    assert set(plain) == set(expected) and len(expected) == 11
    for key, want in expected.items():
        got = plain[key]
        assert got.dtype == want.dtype.newbyteorder("<") and got.shape == want.shape, key
        assert got.tobytes() == want.astype(got.dtype).tobytes(), key
    assert plain["storage/big_endian"].dtype == np.dtype("<i4")
    np.testing.assert_array_equal(plain["storage/big_endian"], np.arange(4))
    with safe_open(str(path), framework="np") as f:
        record = json.loads(f.metadata()[_HEADER_KEY])
    sidecar = json.loads(metadata_file_path(tmp_path).read_text())
    assert record == {k: v for k, v in sidecar.items() if k not in _SIDECAR_ONLY}


def test_written_file_is_hashed_and_sized_from_disk(tmp_path: Path) -> None:
    """The sha256 and size returned by the writer (recorded in the sidecar) are those of the
    bytes on disk: an independent hashlib over the whole file and the file's size."""
    path = tmp_path / "x.safetensors"
    arrays = {"a": np.arange(3 * (1 << 18), dtype=np.float32), "b": np.array(True)}
    digest, nbytes = _write_safetensors(path, arrays, {"k": "v"})
    data = path.read_bytes()
    assert nbytes == len(data) > arrays["a"].nbytes
    assert digest == hashlib.sha256(data).hexdigest() == _sha256(path)
    back = load_file(str(path))
    assert back["a"].tobytes() == arrays["a"].tobytes() and back["b"].item() is True


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(30, dtype=np.int16)[::3],  # strided view
        lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),  # Fortran order
        lambda: np.arange(24, dtype=np.float32).reshape(4, 6)[:, 1:4],  # non-contiguous rows
        lambda: np.arange(5, dtype=">i8"),  # big-endian
        lambda: np.arange(6, dtype=">f4").reshape(2, 3).T,  # big-endian and transposed
    ],
)
def test_layouts_save_file_would_misread_are_written_by_value(tmp_path: Path, make: Any) -> None:
    """safetensors' save_file writes from the data pointer and trusts the array to be
    C-contiguous: the writer must hand it C-ordered little-endian copies. Reference: the
    values element by element (tolist), independent of memory layout."""
    arr = make()
    path = tmp_path / "x.safetensors"
    _write_safetensors(path, {"x": arr}, {})
    back = load_file(str(path))["x"]
    assert back.shape == arr.shape and back.dtype == arr.dtype.newbyteorder("<")
    assert back.tolist() == arr.tolist()


def test_unsupported_arrays_are_refused_before_writing(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    with pytest.raises(CheckpointError, match=r"state\['c'\]: expected a dtype .* complex128"):
        _write_safetensors(path, {"c": np.zeros(2, np.complex128)}, {})
    with pytest.raises(CheckpointError, match=r"state\['l'\]: expected a numpy array, got list"):
        _write_safetensors(path, {"l": [1, 2]}, {})  # type: ignore[dict-item]
    assert not path.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
def test_state_file_gets_the_usual_file_mode(tmp_path: Path) -> None:
    """save_file creates its file 0o600; the state file gets the mode of any new file (that
    of the JSON sidecar, created by open()), whatever the umask."""
    old = os.umask(0o027)
    try:
        save_state(tmp_path, {"x": np.zeros(3)})
    finally:
        os.umask(old)
    state_mode = stat.S_IMODE(state_file_path(tmp_path).stat().st_mode)
    assert state_mode == stat.S_IMODE(metadata_file_path(tmp_path).stat().st_mode) == 0o640


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


_EDITS = [
    (lambda s: s["schema"]["x"].update(shape=[999]), "disagrees .* \\['schema'\\]"),
    (lambda s: s["schema"]["x"].update(dtype="float64"), "disagrees .* \\['schema'\\]"),
    (lambda s: s["state"].update(cursor=2), "disagrees .* \\['state'\\]"),
    (lambda s: s.update(created_unix=0.0), "disagrees .* \\['created_unix'\\]"),
    (lambda s: s.update(state_sha256="0" * 64), "sha256 mismatch"),
    (lambda s: s.pop("save_id"), "lacks required key 'save_id'"),
    (lambda s: s.update(schema=[]), "schema: expected a dict, got list"),
]


@pytest.mark.parametrize(("edit", "match"), _EDITS)
def test_edited_metadata_fails_its_checksum(saved: Path, edit: Any, match: str) -> None:
    """Any edit of the sidecar (format version 2) fails its own checksum."""
    path = metadata_file_path(saved)
    sidecar = json.loads(path.read_text())
    edit(sidecar)
    path.write_text(json.dumps(sidecar))
    with pytest.raises(CheckpointError, match="sidecar_sha256 mismatch"):
        load_state(saved)


@pytest.mark.parametrize(("edit", "match"), _EDITS)
def test_edited_metadata_with_a_recomputed_checksum(saved: Path, edit: Any, match: str) -> None:
    """An edit whose sidecar checksum was recomputed still fails: the loader takes its schema
    and non-array state from the state file's header (covered by ``state_sha256``) and
    requires the sidecar to be an exact copy of it."""
    path = metadata_file_path(saved)
    sidecar = json.loads(path.read_text())
    edit(sidecar)
    sidecar["sidecar_sha256"] = _sidecar_digest(sidecar)
    path.write_text(json.dumps(sidecar))
    with pytest.raises(CheckpointError, match=match):
        load_state(saved)


def test_version_1_sidecars_are_still_read_and_checked(saved: Path) -> None:
    """A version-1 sidecar (no checksum of its own) loads; an edit of it is caught by the
    comparison with the state file's header record."""
    path = metadata_file_path(saved)
    sidecar = json.loads(path.read_text())
    del sidecar["sidecar_sha256"]
    sidecar["format_version"] = 1
    state = state_file_path(saved)  # the v1 writer put the same record in the header
    arrays = load_file(str(state))
    header = {k: v for k, v in sidecar.items() if k not in _SIDECAR_ONLY}
    save_file(arrays, str(state), metadata={_HEADER_KEY: json.dumps(header)})
    sidecar["state_sha256"] = _sha256(state)
    path.write_text(json.dumps(sidecar))
    assert load_state(saved)["cursor"] == 1
    sidecar["state"]["cursor"] = 0
    path.write_text(json.dumps(sidecar))
    with pytest.raises(CheckpointError, match="disagrees .* \\['state'\\]"):
        load_state(saved)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: s["x"].update(shape=[999]), "expected shape"),
        (lambda s: s["x"].update(dtype="float64"), "dtype float64"),
        (lambda s: s.update(y={"shape": [1], "dtype": "int8"}), "missing \\['y'\\]"),
        (lambda s: s.pop("x"), "unexpected \\['x'\\]"),
        (lambda s: s["x"].update(shape=[True]), "schema\\['x'\\]: expected"),
        (lambda s: s.update(x=5), "schema\\['x'\\]: expected"),
    ],
)
def test_arrays_checked_against_the_schema(saved: Path, edit: Any, match: str) -> None:
    schema = json.loads(metadata_file_path(saved).read_text())["schema"]
    edit(schema)
    with pytest.raises(CheckpointError, match=match):
        _read_arrays(state_file_path(saved), schema)


def test_state_file_of_another_save_is_refused(saved: Path, tmp_path_factory: Any) -> None:
    other = tmp_path_factory.mktemp("other")
    save_state(other, {"x": np.arange(1000, dtype=np.float32), "cursor": 1})
    state_file_path(saved).write_bytes(state_file_path(other).read_bytes())
    with pytest.raises(CheckpointError, match="no state file matches the metadata"):
        load_state(saved)
