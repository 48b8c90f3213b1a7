"""The safetensors state file: a streaming writer, a validating reader, and sha256.

Why a writer of our own (keep it): a checkpoint can be as large as the buffer, i.e. a good
part of the RAM, so it must be written without a second in-memory copy. Older releases of
safetensors within our lower bound (0.4) build ``{"data": array.tobytes()}`` for every array in
``safetensors.numpy.save_file``, a full copy of the checkpoint (0.8 writes from the arrays'
pointers). Our writer (:func:`_write_safetensors`) streams each array straight from its own
memory with every supported version, computes the sha256 on the way (no second pass reading
the file back) and fsyncs the file it wrote before the atomic rename
(:mod:`rlstore.checkpoint._atomic`).

The format is exactly safetensors' (8-byte little-endian header length, JSON header padded to
8 bytes with spaces, then the raw little-endian array bytes back to back, keys sorted). Reading
goes through the official ``safetensors.safe_open``; tests/checkpoint/test_safetensors_io.py
checks that the official ``safetensors.numpy.load_file`` reads our files to the same arrays
(and that our reader reads the official writer's files).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from rlstore.errors import CheckpointError

_HEADER_KEY = "rlstore"
"""Key of the rlstore record in the safetensors header's ``__metadata__``."""
_CHUNK = 1 << 20

_ST_DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16",
    "uint32": "U32", "int32": "I32", "uint64": "U64", "int64": "I64",
    "float16": "F16", "float32": "F32", "float64": "F64",
}  # fmt: skip
"""numpy dtype name -> safetensors dtype code, for every dtype a checkpoint can hold."""


def _c_contiguous(arr: np.ndarray) -> np.ndarray:
    """C-contiguous view or copy; unlike ``np.ascontiguousarray`` keeps 0-d arrays 0-d."""
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _write_safetensors(
    path: Path, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str]
) -> tuple[str, int]:
    """Stream ``arrays`` into a safetensors file at ``path`` and fsync it.

    Same format as ``safetensors.numpy.save_file`` (see the module docstring for why we do
    not call it), but each array is written straight from its memory: no second in-memory
    copy of the checkpoint, no temporary file of the library's own, and the sha256 is
    computed on the way. Big-endian arrays are converted to little-endian (one copy of that
    array only).

    Args:
        path: file to create or truncate.
        arrays: ``'/'``-joined key -> array of any shape and a dtype of ``_ST_DTYPES``.
        metadata: string -> string entries of the header's ``__metadata__``.

    Returns:
        ``(sha256 hex digest of the whole file, file size in bytes)``.
    """
    ordered = []
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    offset = 0
    for key in sorted(arrays):
        arr = arrays[key]
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        arr = _c_contiguous(arr)
        code = _ST_DTYPES.get(arr.dtype.name)
        if code is None:
            raise CheckpointError(f"state[{key!r}]: dtype {arr.dtype} cannot be saved")
        header[key] = {
            "dtype": code,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
        ordered.append(arr)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        for chunk in (len(raw).to_bytes(8, "little"), raw):
            f.write(chunk)
            h.update(chunk)
        for arr in ordered:
            if arr.nbytes:
                view = memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
                for start in range(0, len(view), _CHUNK * 16):
                    piece = view[start : start + _CHUNK * 16]
                    f.write(piece)
                    h.update(piece)
        f.flush()
        os.fsync(f.fileno())
    return h.hexdigest(), 8 + len(raw) + offset


def _sha256(path: Path) -> str:
    """Hex sha256 of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _header(path: Path) -> dict[str, Any]:
    """The rlstore record embedded in a safetensors header (validates the whole layout)."""
    try:
        with safe_open(str(path), framework="np") as f:
            raw = (f.metadata() or {}).get(_HEADER_KEY)
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: truncated or corrupted safetensors file ({exc})") from exc
    if raw is None:
        raise CheckpointError(f"{path}: not an rlstore checkpoint (no '{_HEADER_KEY}' header)")
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: corrupted header record ({exc})") from exc
    if not isinstance(record, dict):
        raise CheckpointError(f"{path}: corrupted header record (not a JSON object)")
    return record


def _read_arrays(path: Path, schema: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Load every array of ``path`` and check keys, shapes and dtypes against ``schema``.

    Args:
        path: a safetensors file.
        schema: key -> ``{"shape": [...], "dtype": name, "kind": ...}`` (the sidecar's).

    Returns:
        key -> numpy array (little-endian), exactly the keys of ``schema``.

    Raises:
        CheckpointError: unreadable file, or keys / shapes / dtypes that differ from ``schema``.
    """
    try:
        with safe_open(str(path), framework="np") as f:
            keys = set(f.keys())
            expected = set(schema)
            if keys != expected:
                raise CheckpointError(
                    f"{path}: array keys do not match the metadata schema: "
                    f"missing {sorted(expected - keys)}, unexpected {sorted(keys - expected)}"
                )
            arrays = {k: f.get_tensor(k) for k in sorted(keys)}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path}: truncated or corrupted safetensors file ({exc})") from exc
    for key, arr in arrays.items():
        want_shape = tuple(schema[key].get("shape", ()))
        want_dtype = schema[key].get("dtype")
        if arr.shape != want_shape or arr.dtype.name != want_dtype:
            raise CheckpointError(
                f"{path}: array {key!r}: expected shape {want_shape} dtype {want_dtype} "
                f"(metadata), got shape {arr.shape} dtype {arr.dtype.name}"
            )
    return arrays
