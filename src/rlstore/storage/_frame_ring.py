"""The per-field machinery of :class:`~rlstore.storage.frames.FrameStackStorage`: the numba
kernels that classify, write and rebuild frame stacks, and :class:`FrameRing`, one frame-stack
field's ring of newest frames, kinds and side store (the layout is described in
:mod:`rlstore.storage.frames`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlstore.specs import FieldSpec
from rlstore.storage.ring import RingStorage, SideStore

LINK, REPEAT, ZERO, SIDE = 0, 1, 2, 3


def _classify(w: np.ndarray, tail: np.ndarray, kind: np.ndarray) -> int:
    """Kind of each stack of ``w (k, n, S, W)`` into ``kind (k, n)``; ``tail (n, S, W)`` is the
    previous row (no rows: no previous row). Returns the number of SIDE kinds."""
    k, n, s, m = w.shape
    last, sides = (s - 1) * m, 0
    for t in range(k):
        for e in range(n):
            cur = w[t, e].ravel()
            link = t > 0 or len(tail) > 0
            if link:
                prev = w[t - 1, e].ravel() if t else tail[e].ravel()
                for j in range(last):
                    if cur[j] != prev[j + m]:
                        link = False
                        break
            if link:
                kind[t, e] = LINK
                continue
            repeat = zero = True
            for j in range(last):
                repeat = repeat and cur[j] == cur[last + j % m]
                zero = zero and cur[j] == 0
                if not (repeat or zero):
                    break
            kind[t, e] = REPEAT if repeat else ZERO if zero else SIDE
            sides += not (repeat or zero)
    return sides


def _commit(w: Any, kind: Any, frames: Any, kinds: Any, tail: Any, g0: int) -> None:
    """Newest frames and kinds of ``w (k, n, S, W)`` into ``frames (slots * n, W)`` and
    ``kinds (slots * n,)`` at the slots of global rows ``g0, g0 + 1, ...``; the last row into
    ``tail``."""
    k, n, s, m = w.shape
    slots = len(kinds) // n
    for t in range(k):
        at = (g0 + t) % slots * n
        for e in range(n):
            frames[at + e, :] = w[t, e, s - 1, :]
            kinds[at + e] = kind[t, e]
    tail[:] = w[k - 1]


def _sources(g: Any, env: Any, n: int, kinds: Any, keys: Any, src: Any) -> None:
    """Where each frame of the stacks of global rows ``g (B,)``, envs ``env (B,)`` comes from,
    into ``src (B, S)``: a frame slot ``>= 0``, ``-1`` for zeros, ``-2 - i`` for frame ``i`` of
    the side store's flattened older frames. From the newest frame, follow ``LINK`` rows back
    until a row of another kind gives the rest."""
    s, slots = src.shape[1], len(kinds) // n
    for b in range(len(g)):
        h, e = g[b], env[b]
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


_KERNELS: list[Any] = []


def kernels() -> list[Any]:
    """``[_classify, _commit, _sources]`` compiled by numba on first use (not at import)."""
    if not _KERNELS:
        from numba import njit

        _KERNELS.extend(njit(cache=True, nogil=True)(f) for f in (_classify, _commit, _sources))
    return _KERNELS


class FrameRing:
    """One frame-stack field: newest frames (flattened, ``F`` items) + kinds in a ring of
    ``rows + S - 1`` rows, the older frames of ``SIDE`` rows in a side store, the newest written
    stacks (``tail``, for the next sharing check) and the pending put's stacks (``next``).
    Stacks are compared bytewise, as 64-bit words when a frame's bytes allow it."""

    def __init__(
        self, spec: FieldSpec, axis: int, rows: int, num_envs: int, store: RingStorage | None
    ):
        self.n, self.axis = num_envs, axis % len(spec.shape)
        self.depth, self.slots = spec.shape[self.axis], rows + spec.shape[self.axis] - 1
        self.frame = spec.shape[: self.axis] + spec.shape[self.axis + 1 :]
        size = int(np.prod(self.frame))
        step = 8 if size * spec.dtype.itemsize % 8 == 0 else spec.dtype.itemsize
        self.word = np.dtype(f"u{step}")
        self.store_specs = {
            "frame": FieldSpec("frame", (size,), spec.dtype),
            "kind": FieldSpec("kind", (), np.dtype(np.uint8)),
        }
        older = FieldSpec("older", (self.depth - 1, size), spec.dtype)
        self.store = store or RingStorage(self.slots, num_envs, self.store_specs)
        self.side = SideStore({"older": older}, capacity=1)
        self.pending = False  # the next row (global rows_written) was put ahead of its write:
        self.next = np.zeros((num_envs, self.depth, size), spec.dtype)  # its stacks
        words = size * spec.dtype.itemsize // step
        self.tail = np.zeros((num_envs, self.depth, words), self.word)  # the newest row

    def commit(self, x: np.ndarray, kind: np.ndarray, sides: int) -> None:
        """Write stacks ``x (k, n, S, F)`` as the next rows: newest frames and kinds, then the
        older frames of ``SIDE`` rows; a pending put is dropped."""
        side, n, store, slots = self.side, self.n, self.store, self.slots
        g0 = store.rows_written
        frames = store.flat["frame"].view(self.word)
        kernels()[1](x.view(self.word), kind, frames, store.flat["kind"], self.tail, g0)
        store.rows_written += len(x)  # the kernel wrote the rows: advance the store's counters
        store.cursor, store.size = store.rows_written % slots, min(store.rows_written, slots)
        self.pending = False
        if sides:
            t, e = np.nonzero(kind == SIDE)
            oldest = g0 + len(x) - slots  # no live row reads side entries before this row
            side.append((g0 + t) * n + e, {"older": x[t, e, :-1]}, max(oldest, 0) * n)

    def read(self, g: np.ndarray, env: np.ndarray) -> np.ndarray:
        """Stacks ``(B, S, F)`` of global rows ``g`` (zeros where ``g < 0``)."""
        put = g == self.store.rows_written  # the pending row (only while pending)
        src = np.empty((len(g), self.depth), dtype=np.int64)
        keys = self.side.keys[: self.side.n]  # a hit for every live SIDE row: checked on load
        kernels()[2](np.where(put, -1, g), env, self.n, self.store.flat["kind"], keys, src)
        out = self.store.flat["frame"][np.maximum(src, 0)]  # one copy of every frame
        if (src < 0).any():
            out[src == -1] = 0
            pos, q = np.divmod(-2 - src[src < -1], self.depth - 1)  # entry, older frame
            out[src < -1] = self.side.arrays["older"][self.side.slots(pos), q]
        if put.any():
            out[put] = self.next[env[put]]
        return out
