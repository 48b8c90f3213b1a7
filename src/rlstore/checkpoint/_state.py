"""Raw state dicts on disk: :func:`save_state` / :func:`load_state` and their helpers.

The layout, atomicity and error rules are described in :mod:`rlstore.checkpoint`; this module
glues the pieces together: :mod:`._tree` (flatten / schema / JSON), :mod:`._safetensors_io`
(the state file) and :mod:`._atomic` (the crash-safe commit).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlstore._checks import read_file
from rlstore.checkpoint._atomic import _write_checkpoint_files
from rlstore.checkpoint._safetensors_io import _header, _read_arrays, _sha256
from rlstore.checkpoint._tree import (
    FORMAT_VERSION,
    SIDECAR_DIGEST_KEY,
    _canonical,
    _check_record,
    _flatten,
    _jsonable,
    _sidecar_digest,
    _unflatten,
)
from rlstore.errors import CheckpointError

_REQUIRED: dict[str, type] = {"state_sha256": str, "save_id": str, "schema": dict, "state": dict}
"""Sidecar keys a loader needs besides ``format_version``, with their JSON types."""

_SIDECAR_ONLY = ("state_file", "state_sha256", "state_nbytes", SIDECAR_DIGEST_KEY)
"""Sidecar keys that are not in the state file's header record (the rest is a copy of it)."""


def _folder(dirpath: Any, prefix: Any) -> Path:
    if not isinstance(dirpath, (str, os.PathLike)):
        raise CheckpointError(
            f"dirpath: expected a folder path (str or os.PathLike), got {type(dirpath).__name__}"
        )
    if not isinstance(prefix, str):
        raise CheckpointError(f"prefix: expected a str, got {type(prefix).__name__}")
    if "/" in prefix or os.sep in prefix or (os.altsep and os.altsep in prefix):
        raise CheckpointError(  # '../' wrote outside the folder
            f"prefix: expected a file-name prefix (no path separator), got {prefix!r}"
        )
    if Path(dirpath).is_file():  # e.g. the sidecar path that save() returns
        raise CheckpointError(
            f"dirpath: expected the checkpoint's folder, got the file {str(dirpath)!r} (save() "
            "returns the sidecar's path: pass its parent folder)"
        )
    return Path(dirpath)


def state_file_path(dirpath: str | os.PathLike[str], prefix: str = "buffer_") -> Path:
    """Path of the arrays file, ``<dirpath>/<prefix>state.safetensors``."""
    return _folder(dirpath, prefix) / f"{prefix}state.safetensors"


def metadata_file_path(dirpath: str | os.PathLike[str], prefix: str = "buffer_") -> Path:
    """Path of the JSON sidecar, ``<dirpath>/<prefix>metadata.json``."""
    return _folder(dirpath, prefix) / f"{prefix}metadata.json"


def _check_sidecar(sidecar: Any, where: str) -> None:
    """Version, checksum and required keys of a sidecar (see :data:`FORMAT_VERSION`).

    Raises:
        CheckpointError: not a dict, an unsupported version, a missing or wrong
            ``sidecar_sha256`` (version >= 2), or a required key missing or of the wrong type.
    """
    if not isinstance(sidecar, dict):
        raise CheckpointError(f"{where}: expected a JSON object, got {type(sidecar).__name__}")
    _check_record(sidecar, where)
    if sidecar["format_version"] >= 2 or SIDECAR_DIGEST_KEY in sidecar:
        stored = sidecar.get(SIDECAR_DIGEST_KEY)
        if not isinstance(stored, str):
            raise CheckpointError(f"{where}: lacks its checksum {SIDECAR_DIGEST_KEY!r}")
        if stored != _sidecar_digest(sidecar):
            raise CheckpointError(
                f"{where}: {SIDECAR_DIGEST_KEY} mismatch: the metadata was edited or corrupted"
            )
    for key, kind in _REQUIRED.items():
        if key not in sidecar:
            raise CheckpointError(f"{where}: metadata lacks required key {key!r}")
        if not isinstance(sidecar[key], kind):
            raise CheckpointError(
                f"{where}: {key}: expected a {kind.__name__}, got {type(sidecar[key]).__name__}"
            )


def save_state(
    dirpath: str | os.PathLike[str],
    state: Mapping[str, Any],
    *,
    prefix: str = "buffer_",
    class_name: str | None = None,
    config: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Atomically write a nested state dict to ``dirpath`` (created if needed).

    Args:
        dirpath: target folder; other files in it are left alone.
        state: nested dict whose leaves are numpy arrays / torch tensors (-> safetensors, any
            shape, bool/int/uint/float dtypes) or JSON scalars, lists and dicts (-> sidecar).
            Keys are non-empty strings without ``/``.
        prefix: file name prefix, so several objects can share a folder.
        class_name: registered class name recorded for :func:`load` (``None`` for raw state).
        config: JSON-able constructor kwargs recorded for :func:`load`.
        metadata: JSON-able description shown by ``rlstore inspect``.

    Returns:
        The path of the JSON sidecar.

    Raises:
        CheckpointError: a leaf of unsupported type or a bad key (nothing is written then).
    """
    arrays, schema, tree = _flatten(state)
    record: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "library": "rlstore",
        "class": class_name,
        "config": _jsonable(dict(config), "config") if config is not None else None,
        "metadata": _jsonable(dict(metadata), "metadata") if metadata is not None else None,
        "schema": schema,
        "state": tree,
        "save_id": uuid.uuid4().hex,
        "created_unix": time.time(),
    }
    try:
        header = json.dumps(record)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"state: non-array part is not JSON-serializable ({exc})") from exc
    final_state = state_file_path(dirpath, prefix)
    final_meta = metadata_file_path(dirpath, prefix)
    return _write_checkpoint_files(final_state, final_meta, arrays, record, header)


def read_metadata(dirpath: str | os.PathLike[str], *, prefix: str = "buffer_") -> dict[str, Any]:
    """Read and validate the JSON sidecar of a checkpoint (does not touch the arrays file).

    Raises:
        CheckpointError: missing file, JSON that does not parse, an unsupported version, a
            sidecar checksum mismatch (edited or corrupted metadata), or missing keys.
    """
    path = metadata_file_path(dirpath, prefix)
    raw = read_file(path, "checkpoint metadata file", CheckpointError)
    try:
        sidecar = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, bad JSON, huge ints, deep nesting
        raise CheckpointError(f"{path}: metadata is not valid JSON ({exc})") from exc
    _check_sidecar(sidecar, str(path))
    return sidecar  # type: ignore[no-any-return]


def _load_with_sidecar(
    dirpath: str | os.PathLike[str], prefix: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    sidecar = read_metadata(dirpath, prefix=prefix)
    state = load_verified(state_file_path(dirpath, prefix), sidecar)
    return state, sidecar


def load_verified(state_path: str | os.PathLike[str], sidecar: Mapping[str, Any]) -> dict:
    """Load the state file a sidecar names, checked against its save_id, sha256 and schema.

    ``state_path`` is ``<prefix>state.safetensors``; when a save was interrupted between its
    two renames, the committed file is ``<prefix>state.safetensors.prev`` and is used instead.

    Everything returned comes from the checksummed state file: the arrays, and the non-array
    state and schema of the header record, which must equal the sidecar's copy.

    Raises:
        CheckpointError: no matching state file, checksum mismatch, a sidecar that differs from
            the state file's record, or schema mismatch.
    """
    _check_sidecar(sidecar, "metadata")
    if not isinstance(state_path, (str, os.PathLike)):
        raise CheckpointError(
            "state_path: expected a file path (str or os.PathLike), got "
            f"{type(state_path).__name__}"
        )
    state_path = Path(state_path)
    prev = state_path.with_name(state_path.name + ".prev")
    try:
        candidates = [p for p in (state_path, prev) if p.is_file()]
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{state_path}: cannot read the state file ({exc})") from exc
    if not candidates:
        raise CheckpointError(f"{state_path}: checkpoint state file is missing")
    chosen: Path | None = None
    header: dict[str, Any] = {}
    errors: list[str] = []
    for cand in candidates:
        try:
            header = _header(cand)
            if header.get("save_id") == sidecar["save_id"]:
                chosen = cand
                break
            errors.append(f"{cand.name}: belongs to another save")
        except CheckpointError as exc:
            errors.append(str(exc))
    if chosen is None:
        raise CheckpointError(
            f"{state_path}: no state file matches the metadata (save_id "
            f"{sidecar['save_id']}): " + "; ".join(errors)
        )
    nbytes = sidecar.get("state_nbytes")
    if type(nbytes) is not int or nbytes != chosen.stat().st_size:
        raise CheckpointError(
            f"{chosen}: expected {nbytes!r} bytes (metadata state_nbytes), got "
            f"{chosen.stat().st_size}: the file is truncated or another file"
        )
    digest = _sha256(chosen)
    if digest != sidecar["state_sha256"]:
        raise CheckpointError(
            f"{chosen}: sha256 mismatch (metadata {sidecar['state_sha256'][:16]}..., file "
            f"{digest[:16]}...): the file is corrupted or truncated"
        )
    # The header record is covered by the sha256 just checked; the sidecar must be its copy.
    copy = {k: v for k, v in sidecar.items() if k not in _SIDECAR_ONLY}
    if _canonical(copy) != _canonical(header):
        differ = sorted(
            str(k)
            for k in set(copy) | set(header)
            if k not in copy or k not in header or _canonical(copy[k]) != _canonical(header[k])
        )
        raise CheckpointError(
            f"{chosen}: the metadata disagrees with the record in the state file on {differ}"
        )
    arrays = _read_arrays(chosen, header["schema"])
    return _unflatten(header["state"], arrays, header["schema"])


def load_state(dirpath: str | os.PathLike[str], *, prefix: str = "buffer_") -> dict[str, Any]:
    """Load a state dict written by :func:`save_state`.

    Returns:
        The nested state dict: arrays come back as numpy arrays (little-endian; torch tensors
        as CPU tensors), tuples as lists, numpy scalars as Python scalars.

    Raises:
        CheckpointError: missing or corrupted files, unsupported version, schema mismatch.
    """
    state, _ = _load_with_sidecar(dirpath, prefix)
    return state


def load_state_file(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load a ``*.safetensors`` state file on its own, using the record in its header.

    Used when only the arrays file is at hand (velora's ``load(state_path, metadata)``). No
    checksum is available without the sidecar, but safetensors validates the layout and the
    arrays are checked against the embedded schema.

    Returns:
        ``(state, record)``: the nested state dict and the embedded record (class, config, ...).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise CheckpointError(f"path: expected a file path, got {type(path).__name__}")
    path = Path(path)
    try:
        if not path.is_file():
            raise CheckpointError(f"{path}: state file is missing")
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read the state file ({exc})") from exc
    record = _header(path)
    _check_record(record, str(path))
    schema = record.get("schema")
    if not isinstance(schema, dict) or not isinstance(record.get("state"), dict):
        raise CheckpointError(f"{path}: header record lacks 'schema' or 'state'")
    arrays = _read_arrays(path, schema)
    return _unflatten(record["state"], arrays, schema), record
