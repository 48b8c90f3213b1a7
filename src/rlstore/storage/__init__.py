"""Storages: rings of ``rows x num_envs`` items, one array (or record field) per field spec.

A buffer touches its storage only through the :class:`Storage` protocol, so that every ring
plugs into every buffer:

* :class:`RingStorage` (``ring.py``): preallocated memory, packed records (default);
* :class:`MemmapStorage` (``memmap.py``): the same ring on memory-mapped files in a folder,
  reopened after a restart without a copy;
* ``FrameStackStorage`` (``frames.py``): stacked frames stored once each.

:class:`StorageLayout` is the small JSON-able choice a buffer takes (``storage=``) and turns into
a storage once the field specs are known.

Example:
    >>> import numpy as np
    >>> from rlstore.specs import FieldSpec
    >>> st = StorageLayout().build(3, 2, {"x": FieldSpec("x", (), np.float32)})
    >>> st.write_block({"x": np.ones((1, 2), np.float32)})
    >>> st.gather(np.array([0, 1]))["x"].tolist(), st.cursor
    ([1.0, 1.0], 1)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from rlstore.errors import ConfigError
from rlstore.specs import FieldSpec
from rlstore.storage.frames import FrameStackStorage
from rlstore.storage.memmap import MemmapStorage
from rlstore.storage.ring import RingStorage, SideStore

__all__ = [
    "FrameStackStorage",
    "MemmapStorage",
    "RingStorage",
    "SideStore",
    "Storage",
    "StorageLayout",
]


class Storage(Protocol):
    """A ring of ``rows`` physical rows by ``num_envs`` columns of items.

    Row ``g`` (global, counted from the first write) lives at physical row ``g % rows`` while it
    is among the last ``size`` rows; ``cursor == rows_written % rows``.
    """

    specs: dict[str, FieldSpec]
    num_envs: int
    rows: int
    cursor: int
    rows_written: int
    size: int

    @property
    def nbytes(self) -> int:
        """Bytes held."""
        ...

    def write_block(self, values: Mapping[str, np.ndarray]) -> None:
        """Every field ``(k, num_envs, *shape)`` written at ``cursor``; it advances ``k`` rows."""
        ...

    def write_row(self, values: Sequence[Any]) -> None:
        """One row at ``cursor``, one value per field in ``specs`` order; it advances one row."""
        ...

    def put_row(self, row: int, values: Mapping[str, np.ndarray]) -> None:
        """Overwrite some fields ``(num_envs, *shape)`` of one physical row; cursor unchanged."""
        ...

    def gather(self, flat: np.ndarray, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Contiguous copies ``{name: (B, *shape)}`` at ``flat = physical_row * num_envs + env``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Copies of everything needed to rebuild the storage."""
        ...

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Any], *, where: str = "storage") -> Storage:
        """The storage of :meth:`state_dict` output, checked whole (CheckpointError)."""
        ...


@dataclass(frozen=True)
class StorageLayout:
    """Which storage a buffer builds (JSON-able: :meth:`to_json` / :meth:`parse`).

    Attributes:
        kind: ``"memory"`` (default), ``"memmap"`` or ``"frames"`` (stacked frames stored once:
            :class:`~rlstore.storage.frames.FrameStackStorage`).
        directory: folder of the memory-mapped files (``memmap`` only).
        keep: keep the files once the buffer is gone (``memmap`` only).
        stack_axis: the stack axis of stacked-frame observations (``frames`` only).
        frame_fields: the uint8 observation fields holding frame stacks, e.g. ``("obs.pixels",)``
            (``frames`` only); default: every uint8 ``obs`` / ``obs.<key>`` with a stack axis
            of size >= 2 (name them when another uint8 observation key is not a stack).
    """

    kind: str = "memory"
    directory: str | None = None
    keep: bool = True
    stack_axis: int = 0
    frame_fields: Sequence[str] | None = None  # kept as a tuple

    def __post_init__(self) -> None:
        if self.kind not in ("memory", "memmap", "frames"):
            raise ConfigError(
                f"storage.kind: expected 'memory', 'memmap' or 'frames', got {self.kind!r}"
            )
        if type(self.stack_axis) is not int:
            raise ConfigError(f"storage.stack_axis: expected an int, got {self.stack_axis!r}")
        names = self.frame_fields
        if names is not None:
            ok = isinstance(names, list | tuple) and all(isinstance(k, str) for k in names)
            if not ok or not names or len(set(names)) != len(names) or self.kind != "frames":
                raise ConfigError(
                    "storage.frame_fields: expected distinct field names (e.g. ['obs.pixels']) "
                    f"for kind 'frames', got {names!r} for kind {self.kind!r}"
                )
            object.__setattr__(self, "frame_fields", tuple(names))  # JSON gives a list
        if (self.kind == "memmap") != isinstance(self.directory, str) or (
            self.directory is not None and not self.directory
        ):
            raise ConfigError(
                f"storage.directory: expected a folder path (str) for kind 'memmap' only, got "
                f"{self.directory!r} for kind {self.kind!r}"
            )
        if not isinstance(self.keep, bool):
            raise ConfigError(f"storage.keep: expected a bool, got {self.keep!r}")

    @classmethod
    def memmap(cls, directory: Any, *, keep: bool = True) -> StorageLayout:
        """Memory-mapped files in ``directory`` (a str or path)."""
        return cls("memmap", str(directory), keep)

    @classmethod
    def frames(
        cls, stack_axis: int = 0, frame_fields: Sequence[str] | None = None
    ) -> StorageLayout:
        """Stacked frames (e.g. uint8 ``(4, 84, 84)`` observations) with each frame stored once;
        ``frame_fields``: which observation fields are stacks (default: every uint8 one with a
        stack axis of size >= 2)."""
        return cls("frames", stack_axis=stack_axis, frame_fields=frame_fields)

    @classmethod
    def parse(cls, value: StorageLayout | Mapping[str, Any] | None) -> StorageLayout:
        """A layout from itself, its :meth:`to_json` dict, or ``None`` (memory)."""
        if value is None:
            return cls()
        if isinstance(value, StorageLayout):
            return value
        keys = {"kind", "directory", "keep", "stack_axis", "frame_fields"}
        if isinstance(value, Mapping) and set(value) <= keys:
            return cls(**value)
        raise ConfigError(
            f"storage: expected a StorageLayout or its dict {{{', '.join(sorted(keys))}}}, got "
            f"{value!r}"
        )

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.frame_fields is None:
            del out["frame_fields"]  # the JSON of layouts saved before the option existed
        else:
            out["frame_fields"] = list(self.frame_fields)
        return out

    def adopt(self, ring: RingStorage, old: Any) -> Any:
        """``ring`` (a checked, loaded copy) as a storage of this layout; ``old`` is the storage
        it replaces (a memory-mapped one gives its files up first)."""
        if self.kind != "memmap":
            return ring
        if isinstance(old, MemmapStorage):
            old.remove()
        st = self.build(ring.rows, ring.num_envs, ring.specs)
        for k, arr in st.arrays.items():
            arr[...] = ring.arrays[k]
        st.cursor, st.size, st.rows_written = ring.cursor, ring.size, ring.rows_written
        return st

    def build(self, rows: int, num_envs: int, specs: Mapping[str, FieldSpec]) -> Any:
        """A new, empty storage of this layout."""
        if self.kind == "memmap":
            return MemmapStorage(
                rows, num_envs, specs, directory=str(self.directory), keep=self.keep
            )
        if self.kind == "frames":
            return FrameStackStorage(
                rows, num_envs, specs, stack_axis=self.stack_axis, frame_fields=self.frame_fields
            )
        return RingStorage(rows, num_envs, specs)

    def load(self, sd: Mapping[str, Any], *, where: str) -> Any:
        """The in-memory storage of a :meth:`Storage.state_dict` of this layout, checked whole."""
        cls = FrameStackStorage if self.kind == "frames" else RingStorage
        return cls.from_state_dict(sd, where=where)
