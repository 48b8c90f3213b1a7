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

from rlstore.checkpoint._atomic import _write_checkpoint_files
from rlstore.checkpoint._safetensors_io import _header, _read_arrays, _sha256
from rlstore.checkpoint._tree import FORMAT_VERSION, _check_record, _flatten, _jsonable, _unflatten
from rlstore.errors import CheckpointError

_REQUIRED = ("state_sha256", "save_id", "schema", "state")
"""Sidecar keys a loader needs besides ``format_version``."""


def state_file_path(dirpath: str | os.PathLike[str], prefix: str = "buffer_") -> Path:
    """Path of the arrays file, ``<dirpath>/<prefix>state.safetensors``."""
    return Path(dirpath) / f"{prefix}state.safetensors"


def metadata_file_path(dirpath: str | os.PathLike[str], prefix: str = "buffer_") -> Path:
    """Path of the JSON sidecar, ``<dirpath>/<prefix>metadata.json``."""
    return Path(dirpath) / f"{prefix}metadata.json"


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
        CheckpointError: missing file, JSON that does not parse, or an unsupported version.
    """
    path = metadata_file_path(dirpath, prefix)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint metadata file is missing")
    try:
        sidecar = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: metadata is not valid JSON ({exc})") from exc
    if not isinstance(sidecar, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(sidecar).__name__}")
    _check_record(sidecar, str(path))
    for key in _REQUIRED:
        if key not in sidecar:
            raise CheckpointError(f"{path}: metadata lacks required key {key!r}")
    return sidecar


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

    Raises:
        CheckpointError: no matching state file, checksum mismatch, or schema mismatch.
    """
    _check_record(sidecar, "metadata")
    for key in _REQUIRED:
        if key not in sidecar:
            raise CheckpointError(f"metadata: lacks required key {key!r}")
    state_path = Path(state_path)
    prev = state_path.with_name(state_path.name + ".prev")
    candidates = [p for p in (state_path, prev) if p.is_file()]
    if not candidates:
        raise CheckpointError(f"{state_path}: checkpoint state file is missing")
    chosen: Path | None = None
    errors: list[str] = []
    for cand in candidates:
        try:
            if _header(cand).get("save_id") == sidecar["save_id"]:
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
    digest = _sha256(chosen)
    if digest != sidecar["state_sha256"]:
        raise CheckpointError(
            f"{chosen}: sha256 mismatch (metadata {sidecar['state_sha256'][:16]}..., file "
            f"{digest[:16]}...): the file is corrupted or truncated"
        )
    arrays = _read_arrays(chosen, sidecar["schema"])
    return _unflatten(sidecar["state"], arrays, sidecar["schema"])


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
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: state file is missing")
    record = _header(path)
    _check_record(record, str(path))
    schema = record.get("schema")
    if not isinstance(schema, dict) or not isinstance(record.get("state"), dict):
        raise CheckpointError(f"{path}: header record lacks 'schema' or 'state'")
    arrays = _read_arrays(path, schema)
    return _unflatten(record["state"], arrays, schema), record
