"""The per-field machinery of :class:`~rlstore.storage.frames.FrameStackStorage`: the numba
kernels that classify, write and rebuild frame stacks, and :class:`FrameRing`, one frame-stack
field's ring of newest frames, kinds and side store (the layout is described in
:mod:`rlstore.storage.frames`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlstore.errors import SpecError
from rlstore.specs import FieldSpec
from rlstore.storage.ring import RingStorage, SideStore

LINK, REPEAT, ZERO, SIDE = 0, 1, 2, 3


def _differ(a: Any, i: int, b: Any, j: int, count: int) -> bool:
    """Do the words ``a[i : i + count]`` and ``b[j : j + count]`` differ (1-D arrays)? (One
    xor-or pass without branches: the compiler vectorizes it.)"""
    if count <= 0:
        return False
    x, y = a[i : i + count], b[j : j + count]  # (slices: the loop indexes from 0, vectorized)
    acc = x[0] ^ y[0]
    for q in range(1, count):
        acc |= x[q] ^ y[q]
    return acc != 0


def _nonzero(a: Any, count: int) -> bool:
    """Is any of the words ``a[:count]`` non-zero (1-D)?"""
    if count <= 0:
        return False
    x = a[:count]
    acc = x[0]
    for q in range(1, count):
        acc |= x[q]
    return acc != 0


def _classify(w: Any, kind: Any, frames: Any, kinds: Any, keys: Any, older: Any, base: int,
              g0: int) -> int:  # fmt: skip
    """Kind of each stack of ``w (k, n, S, W)`` (global rows ``g0, g0 + 1, ...``) into
    ``kind (k, n)``; the stored rows (``frames``, ``kinds``, side ``keys`` and ``older`` frames
    in a circle from ``base``) give the stacks of row ``g0 - 1``. Returns the number of SIDE
    kinds."""
    k, n, s, m = w.shape
    last, sides, src = (s - 1) * m, 0, np.empty((1, s), dtype=np.int64)
    for t in range(k):
        for e in range(n):
            cur = w[t, e].ravel()
            if t:
                link = not _differ(cur, 0, w[t - 1, e].ravel(), m, last)
            elif g0:  # compare with the stored row g0 - 1, frame by frame from its sources
                _source(g0 - 1, e, n, kinds, keys, src, 0)
                link = True
                for q in range(s - 1):
                    p = src[0, q + 1]
                    if p >= 0:
                        link = not _differ(cur, q * m, frames[p], 0, m)
                    elif p == -1:
                        link = not _nonzero(cur[q * m :], m)
                    else:
                        entry, j = divmod(-2 - p, s - 1)
                        link = not _differ(cur, q * m, older[(base + entry) % len(older), j], 0, m)
                    if not link:
                        break
            else:
                link = False
            if link:
                kind[t, e] = LINK
                continue
            repeat = True
            for q in range(s - 1):
                if _differ(cur, q * m, cur, last, m):
                    repeat = False
                    break
            zero = not repeat and not _nonzero(cur, last)
            kind[t, e] = REPEAT if repeat else ZERO if zero else SIDE
            sides += not (repeat or zero)
    return sides


def _unshared(a: np.ndarray, b: np.ndarray) -> int:
    """The first item ``t * n + e`` of ``a, b (k, n, S, W)`` whose stack ``b`` does not continue
    stack ``a`` (``a[t, e, 1:] != b[t, e, :-1]``), else -1."""
    k, n, s, m = a.shape
    for t in range(k):
        for e in range(n):
            if _differ(a[t, e].ravel(), m, b[t, e].ravel(), 0, (s - 1) * m):
                return t * n + e
    return -1


def _commit(w: Any, kind: Any, frames: Any, kinds: Any, g0: int) -> None:
    """Newest frames and kinds of ``w (k, n, S, W)`` into ``frames (slots * n, W)`` and
    ``kinds (slots * n,)`` at the slots of global rows ``g0, g0 + 1, ...``."""
    k, n, s, m = w.shape
    slots = len(kinds) // n
    for t in range(k):
        at = (g0 + t) % slots * n
        for e in range(n):
            frames[at + e, :] = w[t, e, s - 1, :]
            kinds[at + e] = kind[t, e]


def _write(w: Any, kind: Any, frames: Any, kinds: Any, keys: Any, older: Any, base: int, g0: int,
           commit: bool) -> int:  # fmt: skip
    """Classify the stacks ``w (k, n, S, W)`` as global rows ``g0, g0 + 1, ...`` into ``kind``
    (:func:`_classify`), then, if ``commit``, write them (:func:`_commit`). Returns the number
    of SIDE kinds."""
    sides = _classify(w, kind, frames, kinds, keys, older, base, g0)
    if commit:
        _commit(w, kind, frames, kinds, g0)
    return sides


def _source(h: int, e: int, n: int, kinds: Any, keys: Any, src: Any, b: int) -> None:
    """Where each frame of the stack of global row ``h``, env ``e`` comes from, into
    ``src[b] (S,)``: a frame slot ``>= 0``, ``-1`` for zeros, ``-2 - i`` for frame ``i`` of the
    side store's flattened older frames. From the newest frame, follow ``LINK`` rows back
    until a row of another kind gives the rest."""
    s, slots = src.shape[1], len(kinds) // n
    pos = h % slots * n + e
    src[b, s - 1] = pos if h >= 0 else -1
    p = s - 2
    while p >= 0 and h >= 0 and kinds[pos] == LINK:
        h -= 1
        pos = h % slots * n + e
        src[b, p] = pos
        p -= 1
    shift = s - 2 - p  # row h's stack is row g's shifted by g - h: its older frame q + shift
    side = np.searchsorted(keys, h * n + e) * (s - 1) + shift
    for q in range(p + 1):
        kind = kinds[pos] if h >= 0 else ZERO
        src[b, q] = pos if kind == REPEAT else -1 if kind == ZERO else -2 - (side + q)


def _sources(g: Any, env: Any, n: int, kinds: Any, keys: Any, src: Any) -> None:
    """:func:`_source` of global rows ``g (B,)``, envs ``env (B,)`` into ``src (B, S)``."""
    for b in range(len(g)):
        _source(g[b], env[b], n, kinds, keys, src, b)


_KERNELS: list[Any] = []


def kernels() -> list[Any]:
    """``[_write, _sources, _unshared]`` compiled by numba on first use (not at import); the
    helpers they call first."""
    if not _KERNELS:
        from numba import njit

        jit, scope = njit(cache=True, nogil=True), globals()
        for name in ("_differ", "_nonzero", "_source", "_classify", "_commit"):
            scope[name] = njit(cache=True, nogil=True, inline="always")(scope[name])
        _KERNELS.extend(jit(f) for f in (_write, _sources, _unshared))
    return _KERNELS


def word_of(frame_bytes: int, itemsize: int) -> np.dtype:
    """The unsigned word stacks are compared in: 64 bits when a frame's bytes allow it."""
    return np.dtype(f"u{8 if frame_bytes % 8 == 0 else itemsize}")


def as_words(
    x: np.ndarray, lead: tuple[int, ...], axis: int, depth: int, size: int, word: np.dtype
) -> np.ndarray:
    """Stacks ``x`` as contiguous words ``(*lead, S, W)`` of frames of ``size`` items (a view of
    ``x`` when it is C-contiguous). ``x`` is ``(*lead, *item)`` with the stack axis ``axis >= 0``
    of the item; with ``axis == 0`` any shape of the same items in the same order."""
    if axis:
        x = np.moveaxis(x, len(lead) + axis, len(lead))
    return np.ascontiguousarray(x).reshape(*lead, depth, size).view(word)


def store_layout(spec: FieldSpec, axis: int, rows: int) -> tuple[int, dict[str, FieldSpec]]:
    """The rows (``rows + S - 1``) and field specs of the ring of one frame-stack field
    ``spec`` (stack axis ``axis``): each row holds one frame, flattened, and its kind."""
    ax = axis % len(spec.shape)
    size = int(np.prod(spec.shape[:ax] + spec.shape[ax + 1 :]))
    return rows + spec.shape[ax] - 1, {
        "frame": FieldSpec("frame", (size,), spec.dtype),
        "kind": FieldSpec("kind", (), np.dtype(np.uint8)),
    }


class FrameRing:
    """One frame-stack field: newest frames (flattened, ``F`` items) + kinds in a ring of
    ``rows + S - 1`` rows, the older frames of ``SIDE`` rows in a side store and the pending
    put's stacks (``next``). Stacks are compared bytewise (a new row with the stored previous
    row, frame by frame), as 64-bit words when a frame's bytes allow it."""

    def __init__(
        self, spec: FieldSpec, axis: int, rows: int, num_envs: int, store: RingStorage | None
    ):
        self.n, self.axis, self.shape = num_envs, axis % len(spec.shape), spec.shape
        self.depth = spec.shape[self.axis]
        self.frame = spec.shape[: self.axis] + spec.shape[self.axis + 1 :]
        self.slots, self.store_specs = store_layout(spec, axis, rows)
        self.dtype, self.size = spec.dtype, int(np.prod(self.frame))
        size = self.size
        self.word = word_of(size * spec.dtype.itemsize, spec.dtype.itemsize)
        self.row_shapes = [(num_envs, *spec.shape)] + ([spec.shape] if num_envs == 1 else [])
        older = FieldSpec("older", (self.depth - 1, size), spec.dtype)
        self.store = store or RingStorage(self.slots, num_envs, self.store_specs)
        self.side = SideStore({"older": older}, capacity=1)
        self.pending = False  # the next row (global rows_written) was put ahead of its write:
        self.next = np.zeros((num_envs, self.depth, size), spec.dtype)  # its stacks
        self._views()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_frames"], state["_kinds"], state["_next"]  # views: rebuilt
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._views()

    def _views(self) -> None:
        """The store's frames as words, its kinds (the write kernel's arguments) and the
        pending stacks as words."""
        self._frames, self._kinds = (
            self.store.flat["frame"].view(self.word),
            self.store.flat["kind"],
        )
        self._next = self.next.view(self.word)

    def words(self, name: str, v: Any, lead: tuple[int, ...], row: bool = False) -> np.ndarray:
        """Stacks ``v`` checked and as words ``(*lead, S, W)``: ``v`` is ``(*lead, *shape)`` of
        the field's dtype, or with ``row`` one row ``(num_envs, *shape)`` (one env: also
        ``shape``).

        Raises:
            SpecError: naming the field, the expected and the given shape and dtype.
        """
        shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
        if (shape not in self.row_shapes if row else shape != (*lead, *self.shape)) or (
            dtype != self.dtype
        ):
            want = self.row_shapes[0] if row else (*lead, *self.shape)
            raise SpecError(f"{name}: expected an array of shape {want} dtype {self.dtype}, "
                            f"got {shape} {dtype or type(v).__name__}")  # fmt: skip
        if row and self.axis:
            v = v.reshape(*lead, *self.shape)
        return as_words(v, lead, self.axis, self.depth, self.size, self.word)

    def write(self, w: np.ndarray, commit: bool = True) -> np.ndarray:
        """Classify the stacks ``w (k, n, S, W)`` as the next rows and, if ``commit``, write
        them: newest frames and kinds, then the older frames of ``SIDE`` rows (a pending put is
        dropped). Returns their kinds ``(k, n)``."""
        store, slots, side = self.store, self.slots, self.side
        g0, kind = store.rows_written, np.empty(w.shape[:2], dtype=np.uint8)
        older = side.arrays["older"].view(self.word)  # (the side store may have grown)
        sides = kernels()[0](w, kind, self._frames, self._kinds, side.keys[: side.n], older,
                             side.base, g0, commit)  # fmt: skip
        if not commit:
            return kind
        store.rows_written = g = g0 + len(w)  # the kernel wrote the rows: advance the counters
        store.cursor, store.size = g % slots, g if g < slots else slots
        self.pending = False
        if sides:
            t, e = np.nonzero(kind == SIDE)
            oldest = g0 + len(w) - slots  # no live row reads side entries before this row
            older = w[t, e, :-1].view(self.dtype)
            self.side.append((g0 + t) * self.n + e, {"older": older}, max(oldest, 0) * self.n)
        return kind

    def put(self, w: np.ndarray) -> None:
        """Keep the stacks ``w (num_envs, S, W)`` of the pending next row."""
        self._next[...] = w
        self.pending = True

    def read(self, g: np.ndarray, env: np.ndarray) -> np.ndarray:
        """Stacks ``(B, S, F)`` of global rows ``g`` (zeros where ``g < 0``)."""
        put = g == self.store.rows_written  # the pending row (only while pending)
        src = np.empty((len(g), self.depth), dtype=np.int64)
        keys = self.side.keys[: self.side.n]  # a hit for every live SIDE row: checked on load
        kernels()[1](np.where(put, -1, g), env, self.n, self.store.flat["kind"], keys, src)
        out = self.store.flat["frame"][np.maximum(src, 0)]  # one copy of every frame
        if (src < 0).any():
            out[src == -1] = 0
            pos, q = np.divmod(-2 - src[src < -1], self.depth - 1)  # entry, older frame
            out[src < -1] = self.side.arrays["older"][self.side.slots(pos), q]
        if put.any():
            out[put] = self.next[env[put]]
        return out
