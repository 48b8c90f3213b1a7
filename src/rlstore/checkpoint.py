"""Crash-safe checkpoints: arrays in one safetensors file, everything else in a JSON sidecar.

Layout of a checkpoint saved under ``dirpath`` with ``prefix="buffer_"``::

    dirpath/buffer_state.safetensors   every array leaf of the state dict, keys joined with "/"
    dirpath/buffer_metadata.json       format_version, class, config, metadata, schema (shape and
                                       dtype of every array), the non-array state (cursor, size,
                                       RNG state, ...), save_id and the sha256 of the state file

The safetensors header carries a copy of the sidecar (without the checksum), so the state file is
self-describing (used by :meth:`rlstore.compat.velora.ReplayBuffer.load`).

Atomicity. A save writes both files to temporary siblings and fsyncs them, keeps the current
state file reachable as ``buffer_state.safetensors.prev`` (a hard link, no copy), then
``os.replace``-s the state file and the sidecar (the sidecar is the commit point), fsyncs the
directory and drops the ``.prev`` link. A reader picks whichever of the two state files carries
the ``save_id`` the sidecar names, so a process killed at any instant of a save leaves a
loadable checkpoint: the previous one until the sidecar is replaced, the new one afterwards.
Temporaries of a killed save are removed by the next save. One writer at a time per folder and
prefix (concurrent saves to the same checkpoint are not supported).

Arrays are streamed to disk from their own memory (no second in-memory copy) and hashed on the
way; numpy arrays come back as numpy arrays, torch tensors as CPU torch tensors, importing
torch only when the state holds tensors.

Every failure to load is a :class:`~rlstore.errors.CheckpointError`: missing files, JSON that
does not parse, an unknown or newer ``format_version``, a truncated or corrupted state file
(sha256 mismatch), or arrays whose keys, shapes or dtypes differ from the sidecar's schema.
Nothing is half-loaded.

Example::

    >>> import numpy as np, tempfile
    >>> from rlstore.checkpoint import save_state, load_state
    >>> d = tempfile.mkdtemp()
    >>> _ = save_state(d, {"obs": np.zeros((4, 2), np.float32), "cursor": 3})
    >>> sd = load_state(d)
    >>> sd["cursor"], sd["obs"].shape
    (3, (4, 2))
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open

from rlstore.errors import CheckpointError, RLStoreError

__all__ = [
    "FORMAT_VERSION",
    "CHECKPOINT_REGISTRY",
    "register_checkpointable",
    "save_state",
    "load_state",
    "read_metadata",
    "load_state_file",
    "load_verified",
    "build_from_record",
    "save",
    "load",
    "state_file_path",
    "metadata_file_path",
]

FORMAT_VERSION = 1
"""Version of the on-disk layout; a reader refuses files with a larger version."""

_HEADER_KEY = "rlstore"
_CHUNK = 1 << 20

# name stored in the sidecar -> "module:Class" imported lazily on load. Only registered classes
# are ever imported from a checkpoint (a file never names arbitrary code to import).
CHECKPOINT_REGISTRY: dict[str, str] = {
    "ReplayBuffer": "rlstore.buffers.replay:ReplayBuffer",
    "RolloutBuffer": "rlstore.buffers.rollout:RolloutBuffer",
    "velora.ReplayBuffer": "rlstore.compat.velora:ReplayBuffer",
    "SimpleReplayBuffer": "rlstore.compat.simple_replay:SimpleReplayBuffer",
}

# Test seam: called with the name of each stage of a save ("written", "linked",
# "state_replaced", "committed"). Crash tests set it in a child process to die at that stage.
_stage_hook: Callable[[str], None] | None = None


def register_checkpointable(name: str, target: str | type) -> None:
    """Register a class for :func:`save` / :func:`load` under ``name``.

    Args:
        name: the name written into the sidecar's ``class`` field.
        target: the class itself or its ``"module:QualName"`` import path.
    """
    if not isinstance(target, str):
        target = f"{target.__module__}:{target.__qualname__}"
    if ":" not in target:
        raise CheckpointError(f"target: expected 'module:Class', got {target!r}")
    CHECKPOINT_REGISTRY[name] = target


def state_file_path(dirpath: str | os.PathLike[str], prefix: str = "buffer_") -> Path:
    """Path of the arrays file, ``<dirpath>/<prefix>state.safetensors``."""
    return Path(dirpath) / f"{prefix}state.safetensors"


def metadata_file_path(dirpath: str | os.PathLike[str], prefix: str = "buffer_") -> Path:
    """Path of the JSON sidecar, ``<dirpath>/<prefix>metadata.json``."""
    return Path(dirpath) / f"{prefix}metadata.json"


# --------------------------------------------------------------------------- flattening


def _flatten(
    state: Mapping[str, Any],
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]], dict[str, Any]]:
    """Split a nested state dict into ``arrays``, their ``schema`` and the JSON-able rest."""
    arrays: dict[str, np.ndarray] = {}
    schema: dict[str, dict[str, Any]] = {}
    torch = sys.modules.get("torch")  # no tensor can exist unless torch was imported

    def walk(node: Mapping[str, Any], path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str) or not key or "/" in key:
                raise CheckpointError(
                    f"state{path or ''}: keys must be non-empty strings without '/', got {key!r}"
                )
            full = f"{path}/{key}" if path else key
            if isinstance(value, Mapping):
                out[key] = walk(value, full)
            elif torch is not None and isinstance(value, torch.Tensor):
                if value.dtype == torch.bfloat16:
                    raise CheckpointError(
                        f"state[{full!r}]: bfloat16 tensors are not supported, "
                        "convert to float32 first"
                    )
                arrays[full] = _c_contiguous(value.detach().cpu().numpy())
                _check_dtype(full, arrays[full].dtype)
                schema[full] = _schema_entry(arrays[full], "torch")
            elif isinstance(value, np.ndarray):
                _check_dtype(full, value.dtype)
                arrays[full] = _c_contiguous(value)
                schema[full] = _schema_entry(arrays[full], "numpy")
            else:
                out[key] = _jsonable(value, full)
        return out

    tree = walk(state, "")
    return arrays, schema, tree


def _check_dtype(key: str, dtype: np.dtype) -> None:
    if dtype.name not in _ST_DTYPES:
        raise CheckpointError(
            f"state[{key!r}]: expected an array of dtype {', '.join(_ST_DTYPES)}, got {dtype}"
        )


def _c_contiguous(arr: np.ndarray) -> np.ndarray:
    """C-contiguous view or copy; unlike ``np.ascontiguousarray`` keeps 0-d arrays 0-d."""
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _schema_entry(arr: np.ndarray, kind: str) -> dict[str, Any]:
    return {"shape": list(arr.shape), "dtype": arr.dtype.name, "kind": kind}


def _jsonable(value: Any, path: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, f"{path}/{k}") for k, v in value.items()}
    raise CheckpointError(
        f"state[{path!r}]: expected a numpy array, torch tensor, dict or JSON scalar/list, "
        f"got {type(value).__name__}"
    )


def _unflatten(tree: Mapping[str, Any], arrays: Mapping[str, np.ndarray], schema: Mapping) -> dict:
    """Inverse of :func:`_flatten` (arrays go back into the tree at their '/'-joined paths)."""
    out: dict[str, Any] = json.loads(json.dumps(tree))  # deep copy, plain dicts
    for key, arr in arrays.items():
        parts = key.split("/")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise CheckpointError(f"array key {key!r}: collides with a non-dict state entry")
        if schema[key].get("kind", "numpy") == "torch":
            import torch

            node[parts[-1]] = torch.from_numpy(arr)
        else:
            node[parts[-1]] = arr
    return out


# --------------------------------------------------------------------------- file helpers


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


_ST_DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16",
    "uint32": "U32", "int32": "I32", "uint64": "U64", "int64": "I64",
    "float16": "F16", "float32": "F32", "float64": "F64",
}  # fmt: skip


def _write_safetensors(
    path: Path, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str]
) -> tuple[str, int]:
    """Stream ``arrays`` into a safetensors file at ``path`` and fsync it.

    Same format as ``safetensors.numpy.save_file`` (8-byte little-endian header length, JSON
    header padded to 8 bytes, then the raw little-endian array bytes back to back), but each
    array is written straight from its memory: no second in-memory copy of the checkpoint,
    no temporary file of the library's own, and the sha256 is computed on the way.

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
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _stage(name: str) -> None:
    if _stage_hook is not None:
        _stage_hook(name)


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


# --------------------------------------------------------------------------- save / load state


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
    directory = Path(dirpath)
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

    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        _fsync_dir(directory.parent)  # make the new folder's entry durable too
    final_state = state_file_path(directory, prefix)
    final_meta = metadata_file_path(directory, prefix)
    _remove_orphan_temporaries(directory, (final_state.name, final_meta.name))
    prev = final_state.with_name(final_state.name + ".prev")
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp_state = directory / f".{final_state.name}.tmp-{token}"
    tmp_meta = directory / f".{final_meta.name}.tmp-{token}"
    try:
        digest, nbytes = _write_safetensors(tmp_state, arrays, {_HEADER_KEY: header})
        sidecar = {
            **record,
            "state_file": final_state.name,
            "state_sha256": digest,
            "state_nbytes": nbytes,
        }
        with open(tmp_meta, "w", encoding="utf-8") as f:
            json.dump(sidecar, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        _stage("written")
        _keep_committed_state_reachable(final_meta, final_state, prev)
        _fsync_dir(directory)
        _stage("linked")
        os.replace(tmp_state, final_state)
        _stage("state_replaced")
        os.replace(tmp_meta, final_meta)  # commit point
        _fsync_dir(directory)
        _stage("committed")
        prev.unlink(missing_ok=True)
        _fsync_dir(directory)
    finally:
        tmp_state.unlink(missing_ok=True)
        tmp_meta.unlink(missing_ok=True)
    return final_meta


def _remove_orphan_temporaries(directory: Path, names: tuple[str, ...]) -> None:
    """Delete temporaries left by saves whose process died (``.<name>.tmp-<pid>-<token>``)."""
    for name in names:
        for tmp in directory.glob(f".{name}.tmp-*"):
            pid_text = tmp.name.rsplit(".tmp-", 1)[1].split("-", 1)[0]
            if not pid_text.isdigit() or _pid_alive(int(pid_text)):
                continue
            tmp.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # on Windows os.kill(pid, 0) is not a probe
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _keep_committed_state_reachable(meta: Path, state: Path, prev: Path) -> None:
    """Make ``prev`` the state file the current sidecar names, before ``state`` is replaced."""
    if not state.exists():
        return
    if prev.exists():
        try:
            committed_id = json.loads(meta.read_text(encoding="utf-8")).get("save_id")
            if _header(prev).get("save_id") == committed_id:
                return  # an earlier save died after replacing `state`: prev is the committed one
        except (OSError, ValueError, AttributeError):
            pass
        prev.unlink()
    try:
        os.link(state, prev)
    except OSError:  # pragma: no cover - filesystems without hard links
        import shutil

        shutil.copy2(state, prev)
        _fsync_file(prev)


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
    for key in ("state_sha256", "save_id", "schema", "state"):
        if key not in sidecar:
            raise CheckpointError(f"{path}: metadata lacks required key {key!r}")
    return sidecar


def _check_record(record: Mapping[str, Any], where: str) -> None:
    version = record.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CheckpointError(
            f"{where}: format_version: expected an integer in [1, {FORMAT_VERSION}], "
            f"got {version!r}"
        )
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{where}: format_version {version} is newer than this rlstore supports "
            f"({FORMAT_VERSION}); upgrade rlstore to read it"
        )


def _read_arrays(path: Path, schema: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Load every array of ``path`` and check keys, shapes and dtypes against ``schema``."""
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
    for key in ("state_sha256", "save_id", "schema", "state"):
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


# --------------------------------------------------------------------------- objects


def _class_name(obj: object) -> str:
    target = f"{type(obj).__module__}:{type(obj).__qualname__}"
    for name, registered in CHECKPOINT_REGISTRY.items():
        if registered == target:
            return name
    raise CheckpointError(
        f"obj: {target} is not a registered checkpointable class; call "
        "rlstore.checkpoint.register_checkpointable(name, cls) first"
    )


def _import(target: str) -> type:
    module_name, _, qualname = target.partition(":")
    try:
        attr: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            attr = getattr(attr, part)
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(f"cannot import checkpointable class {target!r} ({exc})") from exc
    return attr


def save(obj: Any, dirpath: str | os.PathLike[str], *, prefix: str = "buffer_") -> Path:
    """Save a registered checkpointable object (``state_dict``, ``config``, ``metadata``).

    The object must be an instance of a class in :data:`CHECKPOINT_REGISTRY` and provide
    ``state_dict()`` and ``config()`` (JSON-able constructor kwargs); ``metadata()`` is
    recorded when present. Returns the path of the JSON sidecar.
    """
    name = _class_name(obj)
    meta = obj.metadata() if callable(getattr(obj, "metadata", None)) else None
    return save_state(
        dirpath,
        obj.state_dict(),
        prefix=prefix,
        class_name=name,
        config=obj.config(),
        metadata=meta,
    )


def build_from_record(
    record: Mapping[str, Any], state: Mapping[str, Any], *, device: str | None = None
) -> Any:
    """Rebuild an object from a sidecar/header record and its state dict.

    Construction uses ``cls.from_config(config)`` when the class has it, else
    ``cls(**config)`` (``config()`` is the class's own constructor kwargs), else, for kwargs
    that are JSON stand-ins of objects (a rollout buffer's ``intrinsic``), the typed config
    model of :mod:`rlstore.config`; then ``load_state_dict(state)``. ``device`` overrides the
    saved device.
    """
    name = record.get("class")
    if name not in CHECKPOINT_REGISTRY:
        raise CheckpointError(
            f"class: expected one of {sorted(CHECKPOINT_REGISTRY)}, got {name!r} "
            "(use load_state() for raw state dicts)"
        )
    target = CHECKPOINT_REGISTRY[name]
    cls = _import(target)
    config = dict(record.get("config") or {})
    if device is not None:
        config["device"] = device
    from_config = getattr(cls, "from_config", None)
    try:
        obj = from_config(config) if callable(from_config) else cls(**config)
    except (TypeError, RLStoreError) as exc:
        typed = None if callable(from_config) else _typed_kwargs(target, config)
        if typed is None:
            raise CheckpointError(f"config: cannot rebuild {name} from {config!r} ({exc})") from exc
        obj = cls(**typed)
    obj.load_state_dict(state)
    return obj


def _typed_kwargs(target: str, config: dict[str, Any]) -> dict[str, Any] | None:
    """Constructor kwargs through the typed config model when :mod:`rlstore.config` knows the
    class (it rebuilds nested objects such as ``specs`` or ``intrinsic``), else ``None``."""
    from rlstore.config import BUFFER_REGISTRY, CONFIG_MODELS, validate_config

    for kind, registered in BUFFER_REGISTRY.items():
        if registered == target and kind in CONFIG_MODELS:
            try:
                return validate_config({**config, "type": kind}).to_kwargs()
            except RLStoreError:
                return None
    return None


def load(
    dirpath: str | os.PathLike[str], *, prefix: str = "buffer_", device: str | None = None
) -> Any:
    """Load an object saved by :func:`save`: rebuild it from its config, then load its state.

    Args:
        dirpath: folder of the checkpoint.
        prefix: file name prefix used at save time.
        device: overrides the saved ``device`` config entry (e.g. load a CUDA buffer on CPU).

    Raises:
        CheckpointError: see :func:`load_state`; also an unregistered class name.
    """
    state, sidecar = _load_with_sidecar(dirpath, prefix)
    return build_from_record(sidecar, state, device=device)
