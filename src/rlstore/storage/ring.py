"""Preallocated ring storage in memory: per-field arrays ``(rows, num_envs, *shape)``.

:class:`RingStorage` knows nothing about transitions: it writes whole rows (one item per env
column) at a cursor that wraps around, and counts how many rows hold data. Buffers build their
semantics (next-observation reconstruction, sampling) on top of it.

Row bookkeeping:

* ``cursor``: physical row the next write goes to, in ``[0, rows)``;
* ``size``: number of rows holding data, ``min(rows_written, rows)``;
* ``rows_written``: total rows ever written (monotonic), so that row ``g`` (global index) lives
  at physical row ``g % rows`` while it is among the last ``size`` rows.

Example:
    >>> import numpy as np
    >>> from rlstore.specs import FieldSpec
    >>> st = RingStorage(3, 2, {"x": FieldSpec("x", (), np.float32)})
    >>> st.write_block({"x": np.ones((2, 2), np.float32)})
    >>> st.cursor, st.size
    (2, 2)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlstore._checks import check_keys
from rlstore.errors import CapacityError, CheckpointError, RLStoreError
from rlstore.specs import FieldSpec

__all__ = ["RingStorage", "SideStore"]


# Packed records up to this size are gathered whole; larger ones field by field (measured:
# whole-record gathers win for ~100-byte vector records, per-field ones for image records).
GATHER_WHOLE_RECORDS_MAX_BYTES = 1024


class RingStorage:
    """Per-field preallocated arrays ``(rows, num_envs, *shape)`` with a ring cursor.

    With ``packed=True`` (default) all fields of one item live side by side in one record of a
    structured array (no padding), and ``arrays[name]`` are strided views into it: a random
    read of one item then touches one or two cache lines instead of one per field, which is
    what makes uniform sampling from a large buffer fast. ``packed=False`` gives one
    contiguous array per field.

    Args:
        rows: physical rows per env column (> 0).
        num_envs: env columns (> 0).
        specs: ``{name: FieldSpec}``; one array (view) per spec, zero-filled.
        packed: record layout (see above).
    """

    def __init__(
        self, rows: int, num_envs: int, specs: Mapping[str, FieldSpec], *, packed: bool = True
    ):
        if int(rows) <= 0:
            raise CapacityError(f"rows: expected > 0, got {rows}")
        if int(num_envs) <= 0:
            raise CapacityError(f"num_envs: expected > 0, got {num_envs}")
        self.rows = int(rows)
        self.num_envs = int(num_envs)
        self.specs: dict[str, FieldSpec] = dict(specs)
        self.packed = bool(packed) and bool(self.specs)
        shape = (self.rows, self.num_envs)
        self.records: np.ndarray | None = None
        self.arrays: dict[str, np.ndarray] = {}
        try:
            if self.packed:
                rec = np.dtype([(k, s.dtype, s.shape) for k, s in self.specs.items()])
                self.records = self._zeros("records", shape, rec)
            else:
                self.arrays = {
                    k: self._zeros(k, (*shape, *s.shape), s.dtype) for k, s in self.specs.items()
                }
        except RLStoreError:  # a memory-mapped file that does not fit or cannot be made
            raise
        except (MemoryError, ValueError) as exc:  # ValueError: "array is too big"
            item = sum(math.prod(s.shape) * s.dtype.itemsize for s in self.specs.values())
            need = self.rows * self.num_envs * item
            raise CapacityError(
                f"capacity: cannot allocate {need:,} bytes for {self.rows} rows x "
                f"{self.num_envs} envs x {item} bytes per item ({type(exc).__name__}: {exc})"
            ) from None
        self._views()
        self.cursor = 0
        self.size = 0
        self.rows_written = 0

    def _zeros(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Zero-filled memory of one array (``name``: ``records`` or a field name); the
        memory-mapped ring overrides this."""
        return np.zeros(shape, dtype)

    def _views(self) -> None:
        """(Re)build ``arrays`` / ``flat`` as views of ``records`` (packed layout)."""
        n = self.rows * self.num_envs
        self._flat_records = self._rec1 = None
        if self.records is not None and self.num_envs == 1:
            self._rec1 = self.records[:, 0]
        if self.records is not None:
            self.arrays = {k: self.records[k] for k in self.specs}
            self._flat_records = self.records.reshape(n)
        self.flat = {k: a.reshape(n, *a.shape[2:]) for k, a in self.arrays.items()}
        self._row_arrays = [self.arrays[k] for k in self.specs]

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the records once: field views would otherwise come back as copies."""
        state = dict(self.__dict__)
        del state["flat"], state["_flat_records"], state["_rec1"], state["_row_arrays"]
        if self.records is not None:
            del state["arrays"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._views()

    @property
    def nbytes(self) -> int:
        """Bytes held by the field arrays."""
        if self.records is not None:
            return self.records.nbytes
        return sum(a.nbytes for a in self.arrays.values())

    def gather(self, flat: np.ndarray, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Contiguous copies of the items at flat positions ``row * num_envs + env``.

        Args:
            flat: int array ``(B,)`` of physical flat positions.
            names: fields to read (all when None).

        Returns:
            ``{name: (B, *shape)}`` contiguous arrays (safe to hand to ``torch.from_numpy``).
        """
        names = list(self.specs) if names is None else names
        recs = self._flat_records
        if recs is not None and recs.dtype.itemsize <= GATHER_WHOLE_RECORDS_MAX_BYTES:
            # small records: one gather of whole records, then a compact copy per field
            rec = recs.take(flat)
            return {k: rec[k].copy() for k in names}
        if recs is not None:
            # large records (images): gather each field straight from its strided view, so the
            # bytes of a big observation are copied once, not twice
            return {k: recs[k][flat] for k in names}
        return {k: self.flat[k].take(flat, axis=0) for k in names}

    def put_row(self, row: int, values: Mapping[str, np.ndarray]) -> None:
        """Overwrite some fields of physical ``row`` (``{name: (num_envs, *shape)}``); the
        cursor and counters do not change (the pending ``next_obs`` at the spare row)."""
        arrays = self.arrays
        for k, v in values.items():
            arrays[k][row] = v

    def write_row(self, values: Sequence[Any]) -> None:
        """Write one row at ``cursor`` and advance it: one value per field in ``specs`` order,
        each ``(num_envs, *shape)`` (with one env also ``shape``, or a scalar)."""
        c = self.cursor
        if self._rec1 is None or not self._write_record(c, values):
            for arr, v in zip(self._row_arrays, values, strict=True):
                arr[c] = v
        self.cursor = c + 1 if c + 1 < self.rows else 0
        self.rows_written += 1
        if self.size < self.rows:
            self.size += 1

    def _write_record(self, c: int, values: Sequence[Any]) -> bool:
        """One env, packed: row ``c`` in one tuple assignment of its record; False (nothing
        written) for values that keep their env axis, which numpy cannot assign that way."""
        try:
            self._rec1[c] = values if type(values) is tuple else tuple(values)  # type: ignore[index]
        except (ValueError, TypeError):
            return False
        return True

    def write_block(self, values: Mapping[str, np.ndarray]) -> None:
        """Write ``k`` consecutive rows starting at ``cursor`` (wrapping) and advance it.

        Args:
            values: ``{name: array (k, num_envs, *shape)}`` for every field, same ``k``,
                ``k <= rows``.

        Raises:
            CapacityError: ``k > rows``.
        """
        if not values:
            return
        t = len(next(iter(values.values())))
        if t > self.rows:
            raise CapacityError(f"block: expected at most rows={self.rows} rows, got {t}")
        c, arrays = self.cursor, self.arrays
        if c + t <= self.rows:
            for k, v in values.items():
                arrays[k][c : c + t] = v
        else:
            first = self.rows - c
            for k, v in values.items():
                arr = arrays[k]
                arr[c:] = v[:first]
                arr[: t - first] = v[first:]
        self.cursor = (c + t) % self.rows
        self.rows_written += t
        self.size = min(self.size + t, self.rows)

    def state_dict(self) -> dict[str, Any]:
        """Nested dict: ``arrays`` (numpy copies, all rows) and JSON-able ``cursor``, ``size``,
        ``rows_written``, ``capacity_per_env`` (the rows), ``num_envs``, ``specs``."""
        return {"arrays": {k: a.copy() for k, a in self.arrays.items()}, **self.counters()}

    def counters(self) -> dict[str, Any]:
        """The JSON-able part of :meth:`state_dict` (everything but the arrays)."""
        return {
            "cursor": self.cursor,
            "size": self.size,
            "rows_written": self.rows_written,
            "capacity_per_env": self.rows,
            "num_envs": self.num_envs,
            "specs": [s.to_json() for s in self.specs.values()],
        }

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Any], *, where: str = "storage") -> RingStorage:
        """Rebuild a storage from :meth:`state_dict` output (arrays copied).

        Everything is checked before anything is allocated: the specs, one array per spec of
        shape ``(rows, num_envs, *shape)`` and the spec's dtype (bools 0/1), and counters
        reachable by writes: ``size == min(rows_written, rows)`` and
        ``cursor == rows_written % rows``.

        Args:
            sd: the state dict.
            where: its name in error messages.

        Raises:
            CheckpointError: naming the first entry that is missing or wrong.
        """
        sd = check_keys(where, sd, ("arrays", *_COUNTERS))
        rows, n_envs, specs = checked_layout(sd, where)
        arrays = check_keys(f"{where}.arrays", sd["arrays"], tuple(specs))
        checked = {
            k: _checked_array(f"{where}.arrays.{k}", arrays[k], (rows, n_envs, *s.shape), s.dtype)
            for k, s in specs.items()
        }
        counters = checked_counts(sd, where, rows)
        st = cls(rows, n_envs, specs)
        for k, arr in st.arrays.items():
            arr[...] = checked[k]
        st.cursor, st.size, st.rows_written = counters
        return st


_COUNTERS = ("cursor", "size", "rows_written", "capacity_per_env", "num_envs", "specs")


def checked_layout(sd: Mapping[str, Any], where: str) -> tuple[int, int, dict[str, FieldSpec]]:
    """``(rows, num_envs, specs)`` of a ring's state dict, checked."""
    rows = _count(f"{where}.capacity_per_env", sd["capacity_per_env"], 1)
    n_envs = _count(f"{where}.num_envs", sd["num_envs"], 1)
    return rows, n_envs, _specs_from_json(f"{where}.specs", sd["specs"])


def checked_counts(sd: Mapping[str, Any], where: str, rows: int) -> tuple[int, int, int]:
    """``(cursor, size, rows_written)`` of a ring's state dict, checked: reachable by writes
    (``size == min(rows_written, rows)``, ``cursor == rows_written % rows``)."""
    rows_written = _count(f"{where}.rows_written", sd["rows_written"], 0)
    size = _count(f"{where}.size", sd["size"], 0)
    cursor = _count(f"{where}.cursor", sd["cursor"], 0)
    if size != min(rows_written, rows) or cursor != rows_written % rows:
        raise CheckpointError(
            f"{where}: expected size == min(rows_written, capacity_per_env) and cursor == "
            f"rows_written % capacity_per_env, got cursor {cursor}, size {size}, "
            f"rows_written {rows_written}, capacity_per_env {rows}"
        )
    return cursor, size, rows_written


_MAX_COUNT = 1 << 62
"""Upper bound of loaded counters and capacities (far above any allocatable buffer, far below
int64 overflow in ``rows * num_envs + env`` keys)."""


def _count(where: str, value: Any, low: int) -> int:
    """``value`` as an int in ``[low, 2**62)`` (bools and floats refused)."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)):
        raise CheckpointError(f"{where}: expected an int, got {value!r}")
    if not low <= value < _MAX_COUNT:
        raise CheckpointError(f"{where}: expected an int in [{low}, 2**62), got {value}")
    return int(value)


def _specs_from_json(where: str, value: Any) -> dict[str, FieldSpec]:
    """Field specs from their JSON list (distinct names, bool/int/uint/float dtypes)."""
    if not isinstance(value, list):
        raise CheckpointError(f"{where}: expected a list of field specs, got {value!r}")
    specs: dict[str, FieldSpec] = {}
    for i, d in enumerate(value):
        if not isinstance(d, Mapping) or set(d) != {"name", "shape", "dtype"}:
            raise CheckpointError(f"{where}[{i}]: expected {{'name', 'shape', 'dtype'}}, got {d!r}")
        name, shape, dtype = d["name"], d["shape"], d["dtype"]
        ok = isinstance(name, str) and name not in specs and isinstance(shape, list)
        ok = ok and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)
        try:
            spec = FieldSpec(name, tuple(shape), dtype) if ok else None
        except (TypeError, ValueError):  # SpecError is a ValueError
            spec = None
        if spec is None or spec.dtype.kind not in "biuf":
            raise CheckpointError(f"{where}[{i}]: malformed or repeated field spec {dict(d)!r}")
        specs[name] = spec
    return specs


def _checked_array(where: str, value: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``value`` if it is a numpy array of exactly ``shape`` and ``dtype`` (bools 0/1)."""
    if not isinstance(value, np.ndarray):
        raise CheckpointError(f"{where}: expected a numpy array, got {type(value).__name__}")
    if value.shape != shape or value.dtype != dtype:
        raise CheckpointError(
            f"{where}: expected shape {shape} dtype {dtype}, got {value.shape} {value.dtype}"
        )
    if dtype == np.bool_ and value.size and value.view(np.uint8).max() > 1:
        raise CheckpointError(f"{where}: bool array holds bytes other than 0 and 1")
    return value


class SideStore:
    """Compact keyed store for the few observations that cannot live in the ring.

    Entries are ``(key, item per field)`` with int64 keys kept sorted in ``keys[:n]`` (keys are
    global transition numbers ``row * num_envs + env``, which only grow), so lookups are one
    ``searchsorted``. Items sit in a circle: the item of ``keys[i]`` is in slot
    ``(base + i) % capacity`` of ``arrays`` (:meth:`lookup` returns slots). Entries whose key
    fell behind the oldest live key are dropped lazily, only when an append needs room: their
    keys are shifted out (8 bytes each) and ``base`` moves past their items: an item is
    written once, and moves only if the arrays grow while it wraps around their end or an
    append arrives out of key order (a buffer of independent transitions keeps one
    ``next_obs`` per transition here). The arrays grow in
    place by half when less than a quarter of them would be free (``ndarray.resize``: the
    allocator extends or remaps a large block without copying it).

    Args:
        specs: ``{name: FieldSpec}`` of the stored items.
        capacity: initial number of entries allocated (grows on demand).
    """

    def __init__(self, specs: Mapping[str, FieldSpec], capacity: int = 16):
        self.specs = dict(specs)
        self.n = 0
        self._alloc(max(int(capacity), 1))

    def _alloc(self, capacity: int) -> None:
        self.capacity, self.base = capacity, 0
        self.keys = np.zeros(capacity, dtype=np.int64)
        self.arrays = {k: np.zeros((capacity, *s.shape), s.dtype) for k, s in self.specs.items()}

    @property
    def nbytes(self) -> int:
        """Bytes allocated (keys and items, whole capacity)."""
        return self.keys.nbytes + sum(a.nbytes for a in self.arrays.values())

    def slots(self, positions: np.ndarray) -> np.ndarray:
        """Slots in ``arrays`` of the items of ``keys[positions]``."""
        return (positions + self.base) % self.capacity

    def append(
        self, keys: np.ndarray | Sequence[int], values: Mapping[str, np.ndarray], min_live_key: int
    ) -> None:
        """Add entries; any order of ``keys`` is accepted (kept sorted internally).

        Args:
            keys: int64 ``(k,)`` (or a sequence of ints), distinct from the live keys.
            values: ``{name: (k, *shape)}`` for every spec.
            min_live_key: entries with smaller keys are dead and may be dropped.
        """
        k, n = len(keys), self.n
        if k == 0:
            return
        if n + k > self.capacity:
            self._compact(min_live_key, k)
            n = self.n
        cap, at, stored = self.capacity, self.base + n, self.keys
        at = at - cap if at >= cap else at  # the slot of the first new item
        where: Any = slice(at, at + k) if at + k <= cap else (at + np.arange(k)) % cap
        for name, arr in self.arrays.items():
            arr[where] = values[name]
        self.n = n + k
        if k == 1:  # (an add)
            stored[n] = key = keys[0]
            if not n or key >= stored[n - 1]:
                return
        else:
            stored[n : n + k] = keys
        if (n and stored[n] < stored[n - 1]) or (k > 1 and bool((np.diff(keys) < 0).any())):
            start = int(np.searchsorted(self.keys[:n], np.min(keys)))
            order = np.argsort(self.keys[start : self.n], kind="stable") + start
            self.keys[start : self.n] = self.keys[order]
            dst, src = self.slots(np.arange(start, self.n)), self.slots(order)
            for arr in self.arrays.values():
                arr[dst] = arr[src]

    def _compact(self, min_live_key: int, extra: int) -> None:
        """Drop the dead entries (their keys; their slots become free), then grow unless a
        quarter of the capacity is free after ``extra`` more entries, so that compactions are
        rare (amortized O(1) key moves per append)."""
        n, cap = self.n, self.capacity
        first = int(np.searchsorted(self.keys[:n], min_live_key))
        if first:
            self.keys[: n - first] = self.keys[first:n]
            self.n, self.base = n - first, (self.base + first) % cap
        if 4 * (self.n + extra) > 3 * cap:
            self._grow(max(cap + cap // 2 + 1, self.n + extra))

    def _grow(self, capacity: int) -> None:
        """Enlarge every array to ``capacity`` entries in place; items that wrapped around the
        old end move to keep the circle (the shorter of its two arcs moves)."""
        old, base = self.capacity, self.base
        _grow_rows(self.__dict__, "keys", capacity)  # (its only reference: resized in place)
        for name in self.arrays:
            _grow_rows(self.arrays, name, capacity)
        wrapped, upper = base + self.n - old, old - base  # items in slots [0, wrapped)
        if wrapped > 0:
            if wrapped <= min(upper, capacity - old):  # after the old end
                for arr in self.arrays.values():
                    arr[old : old + wrapped] = arr[:wrapped]
            else:  # the upper arc to the new end
                for arr in self.arrays.values():
                    arr[capacity - upper :] = arr[base:old]
                self.base = capacity - upper
        self.capacity = capacity

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Find ``keys``: returns ``(hit bool (k,), slot int64 (k,))``, the slot in ``arrays``
        of each key's item; ``slot`` is only meaningful where ``hit``."""
        n = self.n
        if n == 0:
            return np.zeros(len(keys), dtype=bool), np.zeros(len(keys), dtype=np.int64)
        pos = np.searchsorted(self.keys[:n], keys)
        np.minimum(pos, n - 1, out=pos)
        return self.keys[pos] == keys, self.slots(pos)

    def state_dict(self) -> dict[str, Any]:
        """``keys`` and ``arrays`` of the ``n`` stored entries (in key order) plus JSON-able
        ``capacity``."""
        slots = self.slots(np.arange(self.n))
        return {
            "keys": self.keys[: self.n].copy(),
            "arrays": {k: a.take(slots, axis=0) for k, a in self.arrays.items()},
            "capacity": self.capacity,
        }

    def load_state_dict(
        self, sd: Mapping[str, Any], *, max_key: int, max_capacity: int, where: str = "side"
    ) -> None:
        """Restore from :meth:`state_dict` output (specs must match); checked whole first.

        Args:
            sd: the state dict.
            max_key: keys must lie in ``[0, max_key)`` (no entry from the future).
            max_capacity: bound of the saved ``capacity`` (it is allocated).
            where: the name of ``sd`` in error messages.

        Raises:
            CheckpointError: missing keys, keys unsorted, repeated or out of range, arrays of
                the wrong shape or dtype, or a capacity out of range; ``self`` is unchanged.
        """
        sd = check_keys(where, sd, ("keys", "arrays", "capacity"))
        keys = sd["keys"]
        if not isinstance(keys, np.ndarray) or keys.dtype != np.int64 or keys.ndim != 1:
            raise CheckpointError(
                f"{where}.keys: expected a 1-d int64 array, got "
                f"{getattr(keys, 'dtype', type(keys).__name__)} {np.shape(keys)}"
            )
        n = len(keys)
        if n and (keys[0] < 0 or keys[-1] >= max_key or bool((np.diff(keys) <= 0).any())):
            raise CheckpointError(
                f"{where}.keys: expected strictly increasing keys in [0, {max_key}), got "
                f"{keys[:8].tolist()}{'...' if n > 8 else ''}"
            )
        capacity = _count(f"{where}.capacity", sd["capacity"], 1)
        top = max(max_capacity, n)
        if not n <= capacity <= top:
            raise CheckpointError(
                f"{where}.capacity: expected an int in [{n}, {top}], got {capacity}"
            )
        arrays = check_keys(f"{where}.arrays", sd["arrays"], tuple(self.specs))
        checked = {
            k: _checked_array(f"{where}.arrays.{k}", arrays[k], (n, *s.shape), s.dtype)
            for k, s in self.specs.items()
        }
        self._alloc(capacity)
        self.keys[:n] = keys
        for k, arr in self.arrays.items():
            arr[:n] = checked[k]
        self.n = n


def _grow_rows(owner: dict[str, Any], name: str, rows: int) -> None:
    """Enlarge the array ``owner[name]`` to ``rows`` rows, new rows zero: in place when
    nothing else references it (the allocator extends or remaps a large block, no copy),
    else as a copy."""
    try:
        owner[name].resize((rows, *owner[name].shape[1:]), refcheck=True)
    except ValueError:  # a view of it is alive elsewhere: it must not move under it
        old = owner[name]
        owner[name] = np.zeros((rows, *old.shape[1:]), old.dtype)
        owner[name][: len(old)] = old
