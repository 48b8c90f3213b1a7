"""Sequence starts for recurrent replay (R2D2): a grid in each episode, drawn by priority.

The sampler sees a ring of ``capacity_per_env`` rows by ``num_envs`` env columns only through the
flags it is given: for each newly written row, whether it starts an episode (:meth:`observe`).
Global row ``g`` counts every row ever written; the ring holds rows ``[lo, hi)`` with
``lo = max(0, hi - capacity_per_env)``.

* **Grid.** Row ``g`` of a column is a sequence start when its step within its episode
  (0 at the episode's first row) is a multiple of ``stride``. The oldest stored rows of an
  episode whose beginning was never observed count from the first row observed.
* **Live.** A start is drawn only while its whole window of ``window`` rows is stored:
  ``lo <= g`` and ``g + window <= hi``: never across the write head, never from dropped rows.
* **Ids.** A sequence is named ``g * num_envs + env`` (global, never reused). Sequences become
  complete and leave the ring in the same order (by ``g``, then ``env``), so the ``k``-th
  complete sequence has the window id ``k`` of a :class:`~rlstore.samplers.PrioritizedSampler`,
  whose live window ``[klo, khi)`` is exactly the live sequences; ``keys[k % capacity]`` holds
  its name (sorted along the window). ``alpha = 0`` is uniform sampling (unit weights).

Example:
    >>> s = SequenceSampler(8, 1, window=3, stride=2, seed=0)
    >>> s.observe(0, np.array([[True], [False], [False], [False], [True]]))
    >>> len(s), sorted(s.sample(4).ids.tolist())  # starts at rows 0 and 2 (row 4: incomplete)
    (2, [0, 0, 2, 2])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from rlstore._checks import check_count, check_keys
from rlstore._trees import to_numpy
from rlstore.errors import CapacityError, CheckpointError, EmptyBufferError, SpecError
from rlstore.samplers.prioritized import PrioritizedSampler
from rlstore.samplers.uniform import check_ids
from rlstore.storage.ring import _checked_array, _count

__all__ = ["SequenceSample", "SequenceSampler"]


class SequenceSample(NamedTuple):
    """``ids`` ``(B,)`` int64 (``start_row * num_envs + env``) and ``weights`` ``(B,)`` float32."""

    ids: np.ndarray
    weights: np.ndarray


class SequenceSampler:
    """Live sequence starts of a ring (see the module docstring).

    Args:
        capacity_per_env: rows of the ring (int >= 1).
        num_envs: env columns (int >= 1).
        window: rows per sequence (``burn_in + length``), ``1 <= window <= capacity_per_env``.
        stride: rows between grid starts in an episode (int >= 1).
        alpha, beta, eps, seed: as for :class:`PrioritizedSampler` (``alpha = 0``: uniform).
    """

    def __init__(
        self,
        capacity_per_env: int,
        num_envs: int,
        window: int,
        stride: int,
        *,
        alpha: float = 0.0,
        beta: float = 0.0,
        eps: float = 1e-6,
        seed: int | np.random.Generator | None = None,
    ):
        self.capacity_per_env = check_count("capacity_per_env", capacity_per_env)
        self.num_envs = check_count("num_envs", num_envs)
        self.window = check_count("window", window)
        self.stride = check_count("stride", stride)
        if self.window > self.capacity_per_env:
            raise CapacityError(
                f"window: expected at most capacity_per_env={capacity_per_env} rows, got {window}"
            )
        cap = self.capacity_per_env * self.num_envs
        self.prio = PrioritizedSampler(cap, alpha=alpha, beta=beta, eps=eps, seed=seed)
        self.keys = np.full(cap, -1, dtype=np.int64)  # name of window id k at k % cap
        self.start_row = np.full((self.capacity_per_env, self.num_envs), -1, dtype=np.int64)
        self.phase = np.zeros(self.num_envs, dtype=np.int64)  # episode step of row hi - 1
        self.hi = 0  # rows observed

    def __len__(self) -> int:
        """Live sequences."""
        return len(self.prio)

    def _segments(self) -> list[tuple[np.ndarray, int]]:
        """The live window's names as (at most) two sorted ring views and their first ids."""
        lo, hi, cap = self.prio.lo, self.prio.hi, len(self.keys)
        first = self.keys[lo % cap : lo % cap + (hi - lo)] if hi > lo else self.keys[:0]
        return [(first, lo), (self.keys[: hi - lo - len(first)], lo + len(first))]

    def _find(self, names: np.ndarray) -> np.ndarray:
        """Window ids of the live sequences ``names``; -1 for names not live."""
        out = np.full(len(names), -1, dtype=np.int64)
        for seg, k0 in self._segments():
            if len(seg):
                pos = np.minimum(np.searchsorted(seg, names), len(seg) - 1)
                hit = seg[pos] == names
                out[hit] = k0 + pos[hit]
        return out

    @property
    def lo(self) -> int:
        return max(0, self.hi - self.capacity_per_env)

    def _slots(self, g0: int, g1: int) -> np.ndarray:
        """Slots of the registered starts at global rows ``[g0, g1)`` (every column)."""
        if g1 <= g0:
            return np.zeros(0, dtype=np.int64)
        g = np.arange(g0, g1)
        p = g % self.capacity_per_env
        hit = self.start_row[p] == g[:, None]
        return (p[:, None] * self.num_envs + np.arange(self.num_envs))[hit]

    def observe(self, first_row: int, starts: np.ndarray) -> None:
        """Register rows ``first_row .. first_row + R - 1`` and advance the ring to their end.

        Args:
            first_row: the global row of ``starts[0]``: ``hi`` (the next row), or a later
                row when the rows between were dropped before being observed (the episodes
                are then counted from ``first_row``).
            starts: ``(R, num_envs)`` bool: the row starts an episode in that column.
        """
        first = check_count("first_row", first_row, minimum=0, error=SpecError)
        st = np.asarray(starts)
        if st.dtype != bool or st.ndim != 2 or st.shape[1] != self.num_envs:
            raise SpecError(
                f"starts: expected a bool array of shape (R, {self.num_envs}), got {st.dtype} "
                f"of shape {st.shape}"
            )
        if first < self.hi:
            raise SpecError(f"first_row: expected >= {self.hi} (rows observed), got {first}")
        c, w, hi0 = self.capacity_per_env, self.window, self.hi
        hi1 = first + len(st)
        lo1 = max(0, hi1 - c)
        if first > hi0 and first > lo1:
            raise SpecError(f"first_row: expected <= {max(hi0, lo1)} (no unseen rows), got {first}")
        if not len(st):
            return
        st = st.copy()
        st[0] |= first != hi0 or hi0 == 0  # nothing seen before this row
        steps = np.arange(len(st))[:, None]
        last = np.maximum.accumulate(np.where(st, steps, -1), axis=0)
        phase = np.where(last >= 0, steps - last, self.phase + 1 + steps)
        keep = max(first, lo1) - first  # rows beyond the ring's reach are never stored
        g = np.arange(first + keep, hi1)
        self.start_row[g % c] = np.where(phase[keep:] % self.stride == 0, g[:, None], -1)
        new = self._slots(max(lo1, hi0 - w + 1), hi1 - w + 1)  # complete now, sorted
        p, env = np.divmod(new, self.num_envs)
        names = self.start_row[p, env] * self.num_envs + env
        # drop the sequences that start before the ring (row lo1): a prefix of old + new
        thr, klo, khi = lo1 * self.num_envs, self.prio.lo, self.prio.hi
        klo += sum(int(np.searchsorted(seg, thr)) for seg, _ in self._segments())
        if klo == khi:
            klo += int(np.searchsorted(names, thr))
        k = np.arange(khi, khi + len(names))
        self.keys[k[k >= klo] % len(self.keys)] = names[k >= klo]
        self.prio.on_write(klo, khi + len(names))
        self.phase, self.hi = phase[-1], hi1

    def sample(self, batch_size: int, beta: float | None = None) -> SequenceSample:
        """Draw ``batch_size`` live sequences (with replacement) and their importance weights.

        Raises:
            EmptyBufferError: no complete sequence is stored yet.
        """
        b = check_count("batch_size", batch_size)
        if not len(self.prio):
            raise EmptyBufferError(
                f"sample: no complete sequence of {self.window} rows stored yet (add more)"
            )
        s = self.prio.sample(b, beta)
        return SequenceSample(self.keys[s.indices % len(self.keys)], s.weights)

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of sequences ``ids`` (from :meth:`sample`); ids whose sequence is
        no longer live (dropped or overwritten since it was drawn) are ignored.

        Raises:
            SpecError: ``ids`` not a 1-D integer array, or bad ``priorities`` (see
                :meth:`PrioritizedSampler.update_priorities`); nothing changes.
        """
        idx = check_ids("ids", ids)
        k = self._find(idx)
        live = k >= 0
        pri = to_numpy("priorities", priorities)
        ok = pri.shape == idx.shape and pri.dtype.kind in "iuf"
        if not ok or not (np.isfinite(pri) & (pri >= 0)).all():
            raise SpecError(
                f"priorities: expected finite numbers >= 0 of shape {idx.shape} like ids, got "
                f"{pri.dtype} of shape {pri.shape}"
            )
        self.prio.update_priorities(k[live], pri[live])

    def state_dict(self) -> dict[str, Any]:
        """The window and stride, copies of the starts, phases, rows observed and the
        prioritized sampler's state."""
        return {
            "window": self.window,
            "stride": self.stride,
            "start_row": self.start_row.copy(),
            "phase": self.phase.copy(),
            "hi": self.hi,
            "keys": self.keys.copy(),
            "prio": self.prio.state_dict(),
        }

    def load_state_dict(self, sd: Mapping[str, Any], *, where: str = "sampler") -> None:
        """Restore :meth:`state_dict` output exactly (later draws equal the original's).

        Raises:
            CheckpointError: a missing, malformed or mismatching entry (a state saved with
                another ``window`` or ``stride``: its grid and live sequences are another
                sampler's); nothing changes.
        """
        sd = check_keys(where, sd, ("window", "stride", "start_row", "phase", "hi", "keys", "prio"))
        for name, means in (("window", "burn_in + length"), ("stride", "window - overlap")):
            if _count(f"{where}.{name}", sd[name], 1) != getattr(self, name):
                raise CheckpointError(
                    f"{where}.{name}: expected {getattr(self, name)} ({means}) like this "
                    f"sampler, got {sd[name]!r}"
                )
        shape = (self.capacity_per_env, self.num_envs)
        start = _checked_array(f"{where}.start_row", sd["start_row"], shape, np.dtype(np.int64))
        phase = _checked_array(f"{where}.phase", sd["phase"], shape[1:], np.dtype(np.int64))
        hi = _count(f"{where}.hi", sd["hi"], 0)
        if start.max() >= hi or start.min() < -1 or phase.min() < 0:
            raise CheckpointError(f"{where}.start_row: expected rows in [-1, {hi}) and phases >= 0")
        keys = _checked_array(f"{where}.keys", sd["keys"], self.keys.shape, np.dtype(np.int64))
        trial = PrioritizedSampler(len(keys), alpha=self.prio.alpha, eps=self.prio.eps)
        trial.load_state_dict(sd["prio"], where=f"{where}.prio")  # checked on a copy first
        # the live ids name exactly the registered starts whose whole window is stored
        c, n, lo = self.capacity_per_env, self.num_envs, max(0, hi - self.capacity_per_env)
        g = np.arange(lo, max(lo, hi - self.window + 1))
        hit = start[g % c] == g[:, None]
        live = (g[:, None] * n + np.arange(n))[hit]
        if not np.array_equal(keys[np.arange(trial.lo, trial.hi) % len(keys)], live):
            raise CheckpointError(
                f"{where}.keys: expected the live sequences to be the starts in start_row whose "
                f"{self.window} rows lie in rows [{lo}, {hi}) ({len(live)} of them)"
            )
        self.prio.load_state_dict(sd["prio"], where=f"{where}.prio")
        self.start_row, self.phase, self.hi = start.copy(), phase.copy(), hi
        self.keys = keys.copy()
