"""Crash-safe checkpoints: arrays in one safetensors file, everything else in a JSON sidecar.

Layout of a checkpoint saved under ``dirpath`` with ``prefix="buffer_"``::

    dirpath/buffer_state.safetensors   every array leaf of the state dict, keys joined with "/"
    dirpath/buffer_metadata.json       format_version, class, config, metadata, schema (shape and
                                       dtype of every array), the non-array state (cursor, size,
                                       RNG state, ...), save_id, the sha256 of the state file,
                                       and sidecar_sha256 over all of the sidecar's values

Integrity. The safetensors header carries a copy of the sidecar (without the state file's
checksum), so the state file is self-describing (used by
:meth:`rlstore.compat.velora.ReplayBuffer.load`) and everything a loader uses is covered by the
state file's sha256: :func:`load_verified` checks ``sidecar_sha256`` (format version 2), the
state file's size and sha256, then takes the schema and the non-array state from the header and
requires the sidecar to be an exact copy of it. Any edited or corrupted byte of either file that
changes a value is a :class:`~rlstore.errors.CheckpointError`. Format version 1 (no
``sidecar_sha256``) is still read, with the same header comparison.

Atomicity. A save writes both files to temporaries, fsyncs them and commits by renaming the
sidecar last, keeping the previous state file reachable meanwhile, so a process killed at any
instant of a save leaves a loadable checkpoint: the previous one until the sidecar is replaced,
the new one afterwards (details in :mod:`rlstore.checkpoint._atomic`). One writer at a time per
folder and prefix.

Arrays are written by ``safetensors.numpy.save_file`` straight from their own memory (no
second in-memory copy with safetensors >= 0.8, see :mod:`rlstore.checkpoint._safetensors_io`),
then the file is fsynced and hashed (sha256, read back); numpy arrays come back as numpy
arrays, torch tensors as CPU torch tensors, importing torch only when the state holds tensors.

Every failure to load is a :class:`~rlstore.errors.CheckpointError`: a path that is not a
path, missing files, bytes that are not UTF-8 JSON, an unknown or newer ``format_version``, a
checksum mismatch of either file, arrays whose keys, shapes or dtypes differ from the schema,
a config the class rejects, or a state its ``load_state_dict`` rejects (buffers check the whole
state before they change). Nothing is half-loaded.

The package: this module holds the object API (registry, :func:`save`, :func:`load`,
:func:`build_from_record`), which stands on the buffers and facades it rebuilds;
:mod:`._state` the raw state-dict API (:func:`save_state`, :func:`load_state`, ...), which the
buffers and facades import directly (so that nothing imports back up); :mod:`._tree`
flattening, JSON-ability and schema; :mod:`._safetensors_io` the state file; :mod:`._atomic`
the crash-safe commit.

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

import inspect
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlstore.checkpoint._atomic import write_text_atomic
from rlstore.checkpoint._state import (
    _load_with_sidecar,
    load_state,
    load_state_file,
    load_verified,
    metadata_file_path,
    read_metadata,
    save_state,
    state_file_path,
)
from rlstore.checkpoint._tree import FORMAT_VERSION
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
    "write_text_atomic",
]

CHECKPOINT_REGISTRY: dict[str, type] = {}
"""Name stored in the sidecar's ``class`` field -> class. Only registered classes are ever built
from a checkpoint (a file never names code to import). rlstore's own classes are added by
:func:`_registry` on first use."""


def register_checkpointable(name: str, target: type) -> None:
    """Register a class for :func:`save` / :func:`load` under ``name``.

    Args:
        name: the name written into the sidecar's ``class`` field.
        target: the class itself.
    """
    if not isinstance(target, type):
        raise CheckpointError(
            f"target: expected a class, got {target!r} "
            "(import paths such as 'module:Class' are not accepted)"
        )
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"name: expected a non-empty string, got {name!r}")
    CHECKPOINT_REGISTRY[name] = target


def _registry() -> dict[str, type]:
    """:data:`CHECKPOINT_REGISTRY` with rlstore's own checkpointable classes added. The object
    API stands above the buffers, the facades and :mod:`rlstore.config` (no cycle: they import
    the raw layer, :mod:`._state`, never this module); they are imported on first use only
    because importing ``rlstore.checkpoint._state`` runs this ``__init__`` first."""
    from rlstore.buffers.demo_store import DemoStore
    from rlstore.buffers.model_based import ModelBasedReplay
    from rlstore.buffers.replay import ReplayBuffer
    from rlstore.buffers.rollout import RolloutBuffer
    from rlstore.compat.ppo_buffer import PPOBuffer
    from rlstore.compat.simple_replay import SimpleReplayBuffer
    from rlstore.compat.velora import ReplayBuffer as VeloraReplayBuffer

    for name, cls in (
        ("ReplayBuffer", ReplayBuffer),
        ("RolloutBuffer", RolloutBuffer),
        ("ModelBasedReplay", ModelBasedReplay),
        ("DemoStore", DemoStore),
        ("velora.ReplayBuffer", VeloraReplayBuffer),
        ("SimpleReplayBuffer", SimpleReplayBuffer),
        ("PPOBuffer", PPOBuffer),
    ):
        CHECKPOINT_REGISTRY.setdefault(name, cls)
    return CHECKPOINT_REGISTRY


def _class_name(obj: object) -> str:
    for name, registered in _registry().items():
        if registered is type(obj):
            return name
    raise CheckpointError(
        f"obj: {type(obj).__module__}.{type(obj).__qualname__} is not a registered "
        "checkpointable class; call rlstore.checkpoint.register_checkpointable(name, cls) first"
    )


def save(obj: Any, dirpath: str | os.PathLike[str], *, prefix: str = "buffer_") -> Path:
    """Save a registered checkpointable object (``state_dict``, ``config``, ``metadata``).

    The object must be an instance of a class in :data:`CHECKPOINT_REGISTRY` and provide
    ``state_dict()`` and ``config()`` (JSON-able constructor kwargs); ``metadata()`` is
    recorded when present. An object whose ``state_dict()`` carries the same data twice (a
    facade that also exposes its arrays in a foreign layout) may define
    ``checkpoint_state()``, the smallest dict its ``load_state_dict`` accepts: it is saved
    instead. Returns the path of the JSON sidecar.
    """
    name = _class_name(obj)
    meta = obj.metadata() if callable(getattr(obj, "metadata", None)) else None
    minimal = getattr(obj, "checkpoint_state", None)
    return save_state(
        dirpath,
        minimal() if callable(minimal) else obj.state_dict(),
        prefix=prefix,
        class_name=name,
        config=obj.config(),
        metadata=meta,
    )


def build_from_record(
    record: Mapping[str, Any], state: Mapping[str, Any], *, device: str | None = None
) -> Any:
    """Rebuild an object from a sidecar/header record and its state dict.

    One construction path per class: ``cls.from_config(config)`` when the class has it; else,
    for a class :mod:`rlstore.config` has a typed config model for (``ReplayBuffer``,
    ``RolloutBuffer``), the validated model's kwargs; else ``cls(**config)`` once the kwargs
    are known to bind to the constructor's signature. Then ``load_state_dict(state)``.
    ``device`` overrides the saved device.

    Raises:
        CheckpointError: an unregistered class, a config that is not a dict, does not bind to
            the constructor or is rejected by it (an :class:`RLStoreError`), or a state that
            ``load_state_dict`` rejects. Other exceptions of a constructor (bugs) propagate.
    """
    if not isinstance(record, Mapping):
        raise CheckpointError(f"record: expected a dict, got {type(record).__name__}")
    name = record.get("class")
    registry = _registry()
    if not isinstance(name, str) or name not in registry:
        raise CheckpointError(
            f"class: expected one of {sorted(registry)}, got {name!r} "
            "(use load_state() for raw state dicts)"
        )
    cls = registry[name]
    raw = record.get("config")
    if raw is not None and not isinstance(raw, Mapping):
        raise CheckpointError(f"config: expected a dict, got {type(raw).__name__}")
    config = dict(raw or {})
    if device is not None:
        config["device"] = device
    from_config = getattr(cls, "from_config", None)
    try:
        if callable(from_config):
            obj = from_config(config)
        else:
            obj = cls(**_constructor_kwargs(name, cls, config))
    except RLStoreError as exc:
        raise CheckpointError(f"config: cannot rebuild {name} from {config!r} ({exc})") from exc
    obj.load_state_dict(state)
    return obj


def _constructor_kwargs(name: str, cls: type, config: dict[str, Any]) -> dict:
    """Constructor kwargs of ``cls`` from a saved config: through the typed config model of
    :mod:`rlstore.config` when it knows the class (it rebuilds nested objects such as
    ``specs`` or ``intrinsic``), else ``config`` itself once it binds to the signature."""
    from rlstore.config import BUFFER_REGISTRY, CONFIG_MODELS, validate_config

    for kind, registered in BUFFER_REGISTRY.items():
        if registered is cls and kind in CONFIG_MODELS:
            return validate_config({**config, "type": kind}).to_kwargs()
    try:
        inspect.signature(cls).bind(**config)
    except TypeError as exc:
        raise CheckpointError(f"config: does not fit {name}'s constructor ({exc})") from exc
    return config


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
