"""The ring of :mod:`rlstore.storage.ring` on memory-mapped ``.npy`` files in a folder.

Buffers larger than RAM: the operating system pages rows in and out. ``records.npy`` (packed
layout) or one ``<field>.npy`` per field holds the ring's arrays; everything else a buffer needs
to reopen (counters, side stores, sampler state) is written next to them by its ``flush()``
(:meth:`rlstore.buffers.replay.ReplayBuffer.flush`), and :meth:`MemmapStorage.open` maps the
files again without copying them. ``keep=False`` removes the files when the storage is
garbage-collected (or :meth:`MemmapStorage.close` is called).

Example:
    >>> import numpy as np, tempfile
    >>> from rlstore.specs import FieldSpec
    >>> d = tempfile.mkdtemp()
    >>> st = MemmapStorage(4, 1, {"x": FieldSpec("x", (), np.float32)}, directory=d)
    >>> st.write_block({"x": np.ones((2, 1), np.float32)})
    >>> back = MemmapStorage.open(d, st.counters())
    >>> back.gather(np.arange(3))["x"].tolist()
    [1.0, 1.0, 0.0]
"""

from __future__ import annotations

import errno
import math
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlstore.errors import CapacityError, CheckpointError, ConfigError
from rlstore.specs import FieldSpec
from rlstore.storage.ring import RingStorage, checked_counts, checked_layout

__all__ = ["MemmapStorage"]


class MemmapStorage(RingStorage):
    """:class:`~rlstore.storage.ring.RingStorage` whose arrays are memory-mapped files.

    Args:
        rows, num_envs, specs, packed: as :class:`~rlstore.storage.ring.RingStorage`.
        directory: folder of the files (created if missing); it must not already hold a ring.
        keep: keep the files after this object is gone (reopen with :meth:`open`), or remove
            them then.

    Raises:
        ConfigError: the folder already holds ring files, or cannot be created or written.
        CapacityError: the files do not fit the file system (nothing is left behind).
    """

    def __init__(
        self,
        rows: int,
        num_envs: int,
        specs: Mapping[str, FieldSpec],
        *,
        directory: str | Path,
        keep: bool = True,
        packed: bool = True,
        _mode: str = "w+",
    ):
        self.directory = Path(directory)
        self.keep = bool(keep)
        self._mode = _mode
        self._files: list[Path] = []
        if _mode == "w+":
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a file in the way, a read-only parent
                raise ConfigError(
                    f"directory: expected a folder that can be created, got "
                    f"{str(self.directory)!r} ({exc})"
                ) from exc
            if any(self.directory.glob("*.npy")):
                raise ConfigError(
                    f"directory: expected a folder without a memory-mapped ring, got "
                    f"{str(self.directory)!r} holding .npy files (reopen it with "
                    "ReplayBuffer.open, or remove them)"
                )
        super().__init__(rows, num_envs, specs, packed=packed)
        self._doomed: list[Path] = [] if keep else list(self._files)  # removed when gone
        self._finalizer = weakref.finalize(self, _remove, self._doomed)

    def _zeros(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        path = self.directory / f"{name}.npy"
        self._files.append(path)
        if self._mode == "w+":  # a new file reads as zeros (sparse on most file systems)
            try:
                return np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)
            except OSError as exc:  # nothing is left behind: the files made so far go too
                _remove(self._files)
                need = math.prod(shape) * dtype.itemsize
                room = exc.errno in _NO_ROOM
                raise (CapacityError if room else ConfigError)(
                    f"{'capacity' if room else 'directory'}: cannot create the ring file "
                    f"{str(path)!r} of {need:,} bytes ({exc})"
                ) from exc
        try:
            arr = np.load(path, mmap_mode="r+", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path}: cannot map the ring file ({exc})") from exc
        if arr.shape != shape or arr.dtype != dtype:
            raise CheckpointError(
                f"{path}: expected shape {shape} dtype {dtype}, got {arr.shape} {arr.dtype}"
            )
        return arr

    @classmethod
    def open(
        cls, directory: str | Path, counters: Mapping[str, Any], *, keep: bool = True
    ) -> MemmapStorage:
        """Map the files of a ring written earlier, without copying them.

        Args:
            directory: the folder given at construction.
            counters: :meth:`counters` of the ring when it was last flushed.
            keep: as in the constructor.

        Raises:
            CheckpointError: malformed counters, or missing files / shapes / dtypes that do
                not match them.
        """
        rows, n_envs, specs = checked_layout(counters, "storage")
        cursor, size, written = checked_counts(counters, "storage", rows)
        packed = (Path(directory) / "records.npy").exists()
        st = cls(rows, n_envs, specs, directory=directory, keep=keep, packed=packed, _mode="r+")
        st.cursor, st.size, st.rows_written = cursor, size, written
        return st

    def flush(self) -> None:
        """Write the mapped pages back to the files."""
        for arr in [self.records] if self.records is not None else self.arrays.values():
            if isinstance(arr, np.memmap):
                arr.flush()

    def own(self, files: list[Path]) -> None:
        """Files written beside the ring (a buffer's flushed state): with ``keep=False`` they
        are removed with the ring's own files."""
        if not self.keep:
            self._doomed.extend(f for f in files if f not in self._doomed)

    def close(self) -> None:
        """Flush, and remove the files now when ``keep`` is False."""
        self.flush()
        self._finalizer()

    def remove(self) -> None:
        """Remove the files now (whatever ``keep`` says); the storage must not be used after."""
        self._finalizer.detach()
        _remove(self._files + self._doomed)

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a memory-mapped storage is not pickled: flush() and open() it instead")


_NO_ROOM = (errno.EINVAL, errno.EFBIG, errno.ENOSPC, errno.ENOMEM, errno.EOVERFLOW)
"""Errors of a file too large for the file system, the disk or the address space."""


def _remove(files: list[Path]) -> None:
    for f in files:
        f.unlink(missing_ok=True)
