"""State trees: split a nested state dict into arrays, their schema and a JSON-able rest.

A state dict is a nested ``dict[str, ...]`` whose leaves are numpy arrays, torch tensors, or
JSON scalars / lists / dicts. :func:`_flatten` turns it into

* ``arrays``: ``'/'``-joined key -> C-contiguous numpy array (tensors detached, on CPU),
* ``schema``: the same keys -> ``{"shape": [...], "dtype": numpy name, "kind": "numpy"|"torch"}``,
* ``tree``: the nested dict without the array leaves, JSON-able (numpy scalars become Python
  scalars, tuples become lists);

:func:`_unflatten` puts the arrays back (tensors again where ``kind`` is ``"torch"``). The
``format_version`` check of a record read from disk (:func:`_check_record`) lives here too.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlstore._trees import to_numpy, tree_map
from rlstore.checkpoint._safetensors_io import _ST_DTYPES, _c_contiguous
from rlstore.errors import CheckpointError

FORMAT_VERSION = 2
"""Version of the on-disk layout; a reader refuses files with a larger version.

* 1: the sidecar's ``state_sha256`` covers the state file; the sidecar itself is unchecked.
* 2: the sidecar also carries ``sidecar_sha256`` (:func:`_sidecar_digest`). Version-1 files are
  still read: their loader-used content is checked against the state file's header record,
  which the state file's sha256 covers (see :func:`rlstore.checkpoint.load_verified`).
"""

SIDECAR_DIGEST_KEY = "sidecar_sha256"
"""Sidecar key of the sha256 over the sidecar's own content (format version 2)."""


def _flatten(
    state: Mapping[str, Any],
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]], dict[str, Any]]:
    """Split a nested state dict into ``arrays``, their ``schema`` and the JSON-able rest.

    Raises:
        CheckpointError: a key that is not a non-empty string without ``'/'``, an array of an
            unsupported dtype (bfloat16, complex, strings, objects), or a leaf that is neither
            an array, a tensor, a dict nor a JSON scalar/list.
    """
    arrays: dict[str, np.ndarray] = {}
    schema: dict[str, dict[str, Any]] = {}
    torch = sys.modules.get("torch")  # no tensor can exist unless torch was imported

    def split(path: tuple[Any, ...], value: Any) -> Any:
        """An array leaf goes to ``arrays`` (``_ARRAY`` marks its place); others stay."""
        if not all(isinstance(k, str) for k in path):  # in a tuple (a JSON list) or a bad key:
            return value  # _jsonable refuses arrays in lists, and non-string keys
        full = "/".join(path)
        kind = "numpy" if isinstance(value, np.ndarray) else None
        if torch is not None and isinstance(value, torch.Tensor):
            if value.dtype == torch.bfloat16:
                raise CheckpointError(
                    f"state[{full!r}]: bfloat16 tensors are not supported, convert to float32 first"
                )
            kind = "torch"
        if kind is None:
            return value
        arrays[full] = _c_contiguous(to_numpy(full, value))
        _check_dtype(full, arrays[full].dtype)
        schema[full] = _schema_entry(arrays[full], kind)
        return _ARRAY

    tree = _jsonable(tree_map(split, state, path=()), "", state_keys=True)
    return arrays, schema, tree


def _check_dtype(key: str, dtype: np.dtype) -> None:
    if dtype.name not in _ST_DTYPES:
        raise CheckpointError(
            f"state[{key!r}]: expected an array of dtype {', '.join(_ST_DTYPES)}, got {dtype}"
        )


def _schema_entry(arr: np.ndarray, kind: str) -> dict[str, Any]:
    return {"shape": list(arr.shape), "dtype": arr.dtype.name, "kind": kind}


_ARRAY = object()
"""Where :func:`_flatten` took an array out of the state (dropped from the JSON rest)."""


def _jsonable(value: Any, path: str, *, state_keys: bool = False) -> Any:
    """``value`` as plain JSON types (numpy scalars -> Python, tuples -> lists; entries marked
    ``_ARRAY`` dropped), else raise. With ``state_keys``, the keys of dicts reached through
    dicts only must be non-empty strings without ``'/'`` (state-dict keys)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        for k in value if state_keys else ():
            if not isinstance(k, str) or not k or "/" in k:
                raise CheckpointError(
                    f"state{'/' + path if path else ''}: keys must be non-empty strings "
                    f"without '/', got {k!r}"
                )
        return {
            str(k): _jsonable(v, f"{path}/{k}" if path else str(k), state_keys=state_keys)
            for k, v in value.items()
            if v is not _ARRAY
        }
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


def _check_record(record: Mapping[str, Any], where: str) -> None:
    """Raise unless ``record["format_version"]`` is an int in ``[1, FORMAT_VERSION]``."""
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


def _canonical(value: Any) -> bytes:
    """One byte string per JSON value: sorted keys, no spaces, ASCII (formatting-free)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _sidecar_digest(sidecar: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of ``sidecar`` without its ``sidecar_sha256`` entry.

    It covers every value of the sidecar (an edit to any of them changes it), not the file's
    formatting (whitespace, key order, ``1e5`` vs ``1E5``), which no loader reads.
    """
    body = {k: v for k, v in sidecar.items() if k != SIDECAR_DIGEST_KEY}
    return hashlib.sha256(_canonical(body)).hexdigest()
