"""rlstore.checkpoint._safetensors_io: our streaming writer against the official safetensors
library, and every way a state file or its sidecar can be corrupted."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
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


_SIDECAR_ONLY = ("state_file", "state_sha256", "state_nbytes")


def test_state_file_is_plain_safetensors(tmp_path: Path, nested_state: dict[str, Any]) -> None:
    """The official reader (safetensors.numpy.load_file) reads every array of our streamed file
    back bit-exactly, and the official header API sees our record."""
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


_DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
_DTYPES += ["float16", "float32", "float64"]


@st.composite
def _array_dicts(draw: st.DrawFn) -> dict[str, np.ndarray]:
    out = {}
    for i in range(draw(st.integers(0, 4))):
        dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
        shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
        seed = draw(st.integers(0, 2**32 - 1))
        raw = np.random.default_rng(seed).integers(0, 256, int(np.prod(shape)) * dtype.itemsize)
        arr = raw.astype(np.uint8).view(dtype).reshape(shape)  # any bit pattern
        out[f"k{i}"] = arr.astype(bool) if dtype == np.bool_ else arr
    return out


@settings(max_examples=30)
@given(arrays=_array_dicts())
def test_writer_matches_the_official_library_both_ways(
    tmp_path_factory: Any, arrays: dict[str, np.ndarray]
) -> None:
    """Ours -> official reader, and official writer -> our reader, bit-exactly; the sha256 and
    size our writer reports are those of the bytes on disk."""
    folder = tmp_path_factory.mktemp("st")
    ours, theirs = folder / "ours.safetensors", folder / "theirs.safetensors"
    digest, nbytes = _write_safetensors(ours, arrays, {"k": "v"})
    assert nbytes == ours.stat().st_size
    assert digest == hashlib.sha256(ours.read_bytes()).hexdigest() == _sha256(ours)
    back = load_file(str(ours))
    assert set(back) == set(arrays)
    for key, want in arrays.items():
        assert (back[key].dtype, back[key].shape) == (want.dtype, want.shape)
        assert back[key].tobytes() == want.tobytes()
    save_file(arrays, str(theirs), metadata={"k": "v"})
    schema = {k: {"shape": list(a.shape), "dtype": a.dtype.name} for k, a in arrays.items()}
    mine = _read_arrays(theirs, schema)
    assert set(mine) == set(arrays)
    for key, want in arrays.items():
        assert mine[key].tobytes() == want.tobytes()


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
