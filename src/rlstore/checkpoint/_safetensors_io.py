"""The safetensors state file: the official writer plus fsync and sha256, a validating reader.

Writing goes through ``safetensors.numpy.save_file``. From safetensors 0.8 on it writes each
array straight from the array's own memory (it passes the data pointer to the Rust writer; 0.4
built ``array.tobytes()`` for every array, a full second copy of the checkpoint, hence the
``safetensors>=0.8`` lower bound). The library neither fsyncs nor hashes, so
:func:`_write_safetensors` fsyncs the file it wrote before the atomic rename
(:mod:`rlstore.checkpoint._atomic`) and computes the sha256 recorded in the sidecar by reading
the written file back in 1 MiB chunks (the bytes on disk, not the bytes we meant to write).

``save_file`` (0.8) writes a ``.tmpXXXXXX`` sibling of its target with mode 0o600 and renames
it onto the target, without fsync. Hence :mod:`._atomic` gives it a target inside a private
temporary folder (so a killed save leaves nothing it cannot clean up), and
:func:`_write_safetensors` restores the usual file mode and fsyncs.

``save_file`` requires C-contiguous ("contiguous and dense") arrays and does not check it: a
strided or Fortran-ordered array would be written from its data pointer as if it were
C-ordered. :func:`_write_safetensors` therefore passes C-contiguous little-endian arrays only
(a copy of an offending array, never of the whole state).

Reading goes through the official ``safetensors.safe_open``, validated against the sidecar's
schema by :func:`_read_arrays`.
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
from safetensors.numpy import save_file

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


def _writable_array(key: str, arr: np.ndarray) -> np.ndarray:
    """``arr`` as a C-contiguous little-endian array that ``save_file`` writes correctly.

    A view when ``arr`` already is one; otherwise a copy of this array only.

    Raises:
        CheckpointError: ``arr`` is not a numpy array or its dtype is not in ``_ST_DTYPES``.
    """
    if not isinstance(arr, np.ndarray):
        raise CheckpointError(f"state[{key!r}]: expected a numpy array, got {type(arr).__name__}")
    if arr.dtype.name not in _ST_DTYPES:
        raise CheckpointError(
            f"state[{key!r}]: expected a dtype among {', '.join(_ST_DTYPES)}, got {arr.dtype}"
        )
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return _c_contiguous(arr)


def _write_safetensors(
    path: Path, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str]
) -> tuple[str, int]:
    """Write ``arrays`` into a safetensors file at ``path`` with the official writer, fsync it.

    ``safetensors.numpy.save_file`` writes every array from its own memory (no second
    in-memory copy of the checkpoint with safetensors >= 0.8); arrays that are not
    C-contiguous little-endian are copied first, one at a time (see the module docstring).
    The sha256 is computed afterwards by reading the fsynced file back.

    Args:
        path: file to create or truncate.
        arrays: ``'/'``-joined key -> array of any shape and a dtype of ``_ST_DTYPES``.
        metadata: string -> string entries of the header's ``__metadata__``.

    Returns:
        ``(sha256 hex digest of the whole file, file size in bytes)``.

    Raises:
        CheckpointError: an array of an unsupported type or dtype (nothing is written), or
            the library refusing to write.
        OSError: the file cannot be created, written or fsynced.
    """
    # `ready` keeps the (possibly copied) arrays alive: the library only gets their pointers.
    ready = {key: _writable_array(key, arrays[key]) for key in sorted(arrays)}
    # save_file creates its file with mode 0o600 (a private temporary renamed onto `path`);
    # give the state file the mode open() gives any new file (0o666 minus the umask), as the
    # JSON sidecar has, by creating `path` first and copying its mode.
    with open(path, "wb") as f:
        mode = os.fstat(f.fileno()).st_mode & 0o7777
    try:
        save_file(ready, path, metadata=dict(metadata))
    except SafetensorError as exc:
        raise CheckpointError(f"{path}: safetensors could not write the state ({exc})") from exc
    os.chmod(path, mode)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        nbytes = os.fstat(fd).st_size
    finally:
        os.close(fd)
    return _sha256(path), nbytes


def _sha256(path: Path) -> str:
    """Hex sha256 of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
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
    except (ValueError, RecursionError) as exc:  # bad JSON, > 4300-digit ints, deep nesting
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
        CheckpointError: unreadable file, a malformed ``schema``, or keys / shapes / dtypes
            that differ from ``schema``.
    """
    if not isinstance(schema, Mapping):
        raise CheckpointError(f"{path}: schema: expected a dict, got {type(schema).__name__}")
    for key, entry in schema.items():
        shape = entry.get("shape") if isinstance(entry, Mapping) else None
        if (
            not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            or entry.get("dtype") not in _ST_DTYPES
            or entry.get("kind", "numpy") not in ("numpy", "torch")
        ):
            raise CheckpointError(
                f"{path}: schema[{key!r}]: expected {{'shape': [ints >= 0], 'dtype': one of "
                f"{', '.join(_ST_DTYPES)}, 'kind': 'numpy' | 'torch'}}, got {entry!r}"
            )
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
        want_shape = tuple(schema[key]["shape"])
        want_dtype = schema[key].get("dtype")
        if arr.shape != want_shape or arr.dtype.name != want_dtype:
            raise CheckpointError(
                f"{path}: array {key!r}: expected shape {want_shape} dtype {want_dtype} "
                f"(metadata), got shape {arr.shape} dtype {arr.dtype.name}"
            )
    return arrays
