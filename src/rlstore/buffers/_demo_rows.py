"""The row stores of :class:`~rlstore.buffers.demo_mixer.DemoMixer` (private): the demos being
replayed, copied once into the env's layout (:class:`DemoBank`, after the lossless check of
:func:`check_replayable`), and the real steps of the open env episodes (:class:`StepHistory`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlstore._trees import cast_lossless
from rlstore.buffers.demo_store import Demo
from rlstore.errors import SpecError

__all__ = ["DemoBank", "StepHistory", "check_replayable"]


def _assign_rows(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[j] = src[j]`` for every row ``j``, each row broadcast to ``dst``'s (the caller
    checked the rows with :func:`check_replayable`: they broadcast and cast losslessly)."""
    dst[...] = src.reshape(src.shape[:1] + (1,) * (dst.ndim - src.ndim) + src.shape[1:])


def check_replayable(name: str, arr: np.ndarray, row: tuple[int, ...], dtype: np.dtype) -> None:
    """Raise a :class:`SpecError` naming ``name`` unless every row of ``arr`` broadcasts to
    ``row`` and its values convert to ``dtype`` losslessly (:func:`~rlstore._trees.
    cast_lossless`'s rules: no 0.5 into an int, 300 into a uint8, 1e300 into a float32)."""
    try:
        fits = np.broadcast_shapes(arr.shape[1:], row) == row
    except ValueError:
        fits = False
    if not fits:
        raise SpecError(f"{name}: expected rows that broadcast to {row}, got {arr.shape[1:]}")
    if arr.dtype == dtype or np.can_cast(arr.dtype, dtype, "safe"):
        return
    if arr.dtype.kind == "u" and arr.dtype.itemsize > 1:  # torch lacks min/max of wide uints
        if arr.size and arr.max() > np.iinfo(np.int64).max:
            raise SpecError(f"{name}: expected values of dtype {dtype}, got {arr.max()}")
        arr = arr.astype(np.int64)
    cast_lossless(name, torch.tensor(arr), torch.from_numpy(np.empty(0, dtype)).dtype)


class DemoBank:
    """Flat copies of the demos being replayed, in one env layout.

    A banked demo of length ``L`` occupies rows ``offsets[id(demo)] .. + L - 1`` of ``obs``
    ``(rows, *frame_shape)``, ``act`` ``(rows, *action_shape)`` (both in the env's dtypes, to
    which the mixer checked they convert losslessly) and ``rew``
    ``(rows,)`` float32. The bank keeps a reference to every banked demo, so ``id`` keys stay
    unique. When it is full, :meth:`rebuild` keeps only the demos still replayed and doubles
    the room (amortized O(1) copies per row).
    """

    def __init__(
        self, key: tuple[Any, ...], frame_shape: tuple[int, ...], act_shape: tuple[int, ...]
    ) -> None:
        self.key = key  # (next_obs shape, next_obs dtype, action shape, action dtype)
        obs_dtype, act_dtype = key[1], key[3]
        self.obs = np.empty((0, *frame_shape), obs_dtype)
        self.act = np.empty((0, *act_shape), act_dtype)
        self.rew = np.empty(0, np.float32)
        self.rows = 0
        self.offsets: dict[int, int] = {}
        self._demos: dict[int, Demo] = {}

    def extend(self, demos: list[Demo]) -> None:
        """Append ``demos`` (not banked yet); the caller checked the room."""
        for d in demos:
            at, L = self.rows, d.length
            _assign_rows(self.obs[at : at + L], d.observations)
            _assign_rows(self.act[at : at + L], d.actions)
            self.rew[at : at + L] = d.rewards
            self.offsets[id(d)], self._demos[id(d)] = at, d
            self.rows += L

    def rebuild(self, demos: list[Demo]) -> None:
        """Keep exactly ``demos`` (distinct), with room for as many rows again."""
        need = sum(d.length for d in demos)
        cap = max(64, 2 * need)
        self.obs = np.empty((cap, *self.obs.shape[1:]), self.obs.dtype)
        self.act = np.empty((cap, *self.act.shape[1:]), self.act.dtype)
        self.rew = np.empty(cap, np.float32)
        self.rows, self.offsets, self._demos = 0, {}, {}
        self.extend(demos)


class StepHistory:
    """The real steps ``(frames, action, reward)`` of global steps ``base .. base + len - 1``.

    Rows are ``(N, ...)`` each, stored in preallocated ``(capacity, N, ...)`` arrays that grow by
    doubling; :meth:`trim` drops rows from the front. The row layout (shapes) is fixed while
    rows are held; dtypes are promoted when a step brings a wider one.
    """

    def __init__(self) -> None:
        self.base = 0  # global step index of the first held row
        self._start = self._count = 0
        self._arrays: list[np.ndarray] = []

    def __len__(self) -> int:
        return self._count

    def check(self, action: np.ndarray) -> None:
        """Raise before anything changes if ``action``'s rows do not fit the held rows."""
        if self._count and action.shape[1:] != self._arrays[1].shape[2:]:
            raise SpecError(
                f"action: expected rows shaped {self._arrays[1].shape[2:]} like the earlier "
                f"steps of the open episodes, got {action.shape[1:]}"
            )

    def append(self, *rows: np.ndarray) -> None:
        """Append one step's ``(N, ...)`` arrays (copied)."""
        if not self._count and (
            not self._arrays
            or any(a.shape[1:] != r.shape for a, r in zip(self._arrays, rows, strict=True))
        ):
            self._arrays = [np.empty((16, *r.shape), r.dtype) for r in rows]
            self._start = 0
        for k, r in enumerate(rows):
            a = self._arrays[k]
            if r.dtype != a.dtype and not np.can_cast(r.dtype, a.dtype, casting="safe"):
                self._arrays[k] = a.astype(np.result_type(a, r))
        cap = self._arrays[0].shape[0]
        if self._start + self._count == cap:
            s, n = self._start, self._count
            if n > cap // 2:  # grow
                grown = (np.concatenate([a[s : s + n], np.empty_like(a)]) for a in self._arrays)
                self._arrays = list(grown)
            else:  # slide the held rows to the front
                for a in self._arrays:
                    a[:n] = a[s : s + n]
            self._start = 0
        at = self._start + self._count
        for a, r in zip(self._arrays, rows, strict=True):
            a[at] = r
        self._count += 1

    def column(self, i: int, start: int) -> tuple[np.ndarray, ...]:
        """Copies of env ``i``'s rows from global step ``start`` to the newest row."""
        s, e = self._start + start - self.base, self._start + self._count
        return tuple(a[s:e, i].copy() for a in self._arrays)

    def state(self) -> dict[str, Any]:
        """The held rows (copies) and ``base``, for the mixer's ``state_dict``."""
        s, e = self._start, self._start + self._count
        return {
            "base": self.base,
            "rows": {str(k): a[s:e].copy() for k, a in enumerate(self._arrays)},
        }

    def load(self, sd: dict[str, Any]) -> None:
        """Inverse of :meth:`state` (checked by the caller)."""
        rows = [np.array(sd["rows"][str(k)]) for k in range(len(sd["rows"]))]
        self.base, self._start, self._count = int(sd["base"]), 0, len(rows[0]) if rows else 0
        self._arrays = [np.concatenate([r, np.empty_like(r)]) for r in rows] if self._count else []

    def trim(self, keep_from: int) -> None:
        """Drop the rows of global steps before ``keep_from``."""
        drop = min(max(0, keep_from - self.base), self._count)
        self._start, self._count = self._start + drop, self._count - drop
        self.base = max(self.base, keep_from)
