"""Fast add path of :class:`~rlstore.buffers.replay.ReplayBuffer` (see ``_replay_write.py``).

Taken only for input that needs no conversion at all: numpy arrays of the exact stored dtype and
shape, plus float / bool scalars (and a numpy-scalar or in-range ``int`` action of a scalar
action field) for a single add (``num_envs == 1``, env axis left out), or float32 / bool arrays
``(num_envs,)`` for a row of a vector env. What makes it lean:

* the per-layout predicates and field views are computed once (:class:`FastPlan`);
* the finiteness checks of the float fields are folded: a single add sums ``next_obs``,
  ``action`` and ``reward`` as Python floats once (finite exactly when every term is: float32
  values cannot overflow a double sum); a row writes ``np.isfinite`` of each float field into a
  preallocated bool row and compares its bytes with all-True (no numpy reduction, no warning);
* "is the new ``obs`` the previous ``next_obs``?" compares the bytes kept from the previous fast
  add (valid only while the storage object and its ``rows_written`` are unchanged), not a
  strided copy out of the packed records;
* "did an episode end?" compares the flag bytes with ``bytes(num_envs)``, no numpy reduction;
* a single add writes its whole packed record with one tuple assignment.

Every fast method returns ``False`` having written nothing when anything is unusual (a cast,
a NaN/inf, a 0/1 integer flag, an odd type); the general path (``_replay_write.py``), the slow
and obviously-correct twin, then decides and raises the error. Tests compare both byte for byte
(``tests/buffers/test_replay_write.py``).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from rlstore.specs import FieldSpec, TransitionSchema, all_finite

if TYPE_CHECKING:
    from rlstore.storage import RingStorage, SideStore

__all__ = ["FastAdd", "FastPlan", "accel_available"]

try:  # the optional compiled twin of the common case (src/rlstore/_accel.c)
    from rlstore import _accel
except ImportError:  # built without a C compiler: the Python fast path does everything
    _accel = None  # type: ignore[assignment]


def accel_available() -> bool:
    """Whether new buffers use the compiled writer (built, and ``RLSTORE_NO_ACCEL`` unset)."""
    return _accel is not None and not os.environ.get("RLSTORE_NO_ACCEL")


_F32_MAX = float(np.finfo(np.float32).max)
_F32, _BOOL = np.dtype(np.float32), np.dtype(np.bool_)
_FLOAT_SCALARS = (float, np.float32, np.float64)
_BOOL_SCALARS = (bool, np.bool_)
_NDARRAY = np.ndarray


def _small_vector(spec: FieldSpec) -> bool:
    """Float field whose per-item value is a short 1-D vector: finiteness via ``tolist``."""
    return spec.is_float and len(spec.shape) == 1 and spec.shape[0] <= 64


class FastPlan:
    """Per-buffer predicates and views of the fast add path, computed once per layout.

    Only built for the common layout: array observations, no extras, compact storage,
    ``reward`` float32 scalar, bool flags, NaN/inf rejected.

    Attributes:
        odt, adt: stored dtypes of ``obs`` and ``action``.
        o_item, a_item: per-item shapes (single add, env axis left out).
        o_row, a_row, n_row: ``(num_envs, *shape)`` shapes of a batched add.
        ofloat, afloat: whether ``obs`` / ``action`` need the finiteness check.
        a_scalar: numpy scalar type accepted as a single add's action (scalar actions only).
        a_int: ``(min, max)`` of Python ints accepted as a scalar integer action, else None.
        o_small, a_small: short float vectors (Python-sum check of a single add).
        ob, ac, rw, te, tr: views ``(rows, num_envs, ...)`` of the stored fields.
        ob1: ``ob[:, 0]`` (single adds).
        rec1: ``records[:, 0]`` when the record's fields are exactly
            ``(obs, action, reward, terminated, truncated)`` (one tuple assignment per single
            add), else ``None``.
        fin_o, fin_a, fin_r: preallocated bool rows receiving ``np.isfinite`` of a row's
            float fields (``None`` for integer fields); all_o, all_a, all_r: their all-True
            bytes. ``np.isfinite(x, out).tobytes() == all`` is exact and warning-free.
        no_done: ``bytes(num_envs)``, the bytes of an all-False flag row.
        writer: the compiled writer (``rlstore._accel.Writer``) of the common case, or None
            (no compiler at install, ``RLSTORE_NO_ACCEL`` set, or a layout it does not cover).
    """

    __slots__ = (
        "odt",
        "adt",
        "o_item",
        "a_item",
        "o_row",
        "a_row",
        "n_row",
        "ofloat",
        "afloat",
        "a_scalar",
        "a_int",
        "o_small",
        "a_small",
        "ob",
        "ac",
        "rw",
        "te",
        "tr",
        "ob1",
        "rec1",
        "fin_o",
        "fin_a",
        "fin_r",
        "all_o",
        "all_a",
        "all_r",
        "no_done",
        "writer",
    )

    def __init__(self, specs: dict[str, FieldSpec], storage: RingStorage, num_envs: int):
        so, sa, n = specs["obs"], specs["action"], num_envs
        a = storage.arrays
        self.odt, self.adt = so.dtype, sa.dtype
        self.o_item, self.a_item = so.shape, sa.shape
        self.o_row, self.a_row, self.n_row = (n, *so.shape), (n, *sa.shape), (n,)
        self.ofloat, self.afloat = so.is_float, sa.is_float
        # scalar actions of a single add: the numpy scalar type of the stored dtype, and
        # Python ints in range for integer dtypes (both stored without any conversion loss)
        self.a_scalar = sa.dtype.type if sa.shape == () else None
        self.a_int = (
            (int(np.iinfo(sa.dtype).min), int(np.iinfo(sa.dtype).max))
            if sa.shape == () and sa.dtype.kind in "iu"
            else None
        )
        self.o_small, self.a_small = _small_vector(so), _small_vector(sa)
        self.ob, self.ac, self.rw = a["obs"], a["action"], a["reward"]
        self.te, self.tr = a["terminated"], a["truncated"]
        self.ob1 = self.ob[:, 0]
        rec = storage.records
        names = ("obs", "action", "reward", "terminated", "truncated")
        self.rec1 = rec[:, 0] if rec is not None and rec.dtype.names == names else None
        # finiteness of a row: np.isfinite into preallocated bool rows, compared with all-True
        # bytes (exact, no FP warnings, no numpy reduction); None for non-float fields
        self.fin_o = np.empty(self.o_row, bool) if so.is_float else None
        self.fin_a = np.empty(self.a_row, bool) if sa.is_float else None
        self.fin_r = np.empty(n, bool)
        self.all_o = b"\x01" * (self.fin_o.size if self.fin_o is not None else 0)
        self.all_a = b"\x01" * (self.fin_a.size if self.fin_a is not None else 0)
        self.all_r = b"\x01" * n
        self.no_done = bytes(n)
        self.writer = _make_writer(storage, n) if accel_available() else None

    @staticmethod
    def applies(
        specs: dict[str, FieldSpec],
        schema: TransitionSchema,
        *,
        store_next_obs_once: bool,
        allow_nonfinite: bool,
    ) -> bool:
        """Whether the layout is the common one the fast path handles."""
        core_ok = (
            specs["reward"].shape == ()
            and specs["reward"].dtype == np.float32
            and specs["terminated"].shape == ()
            and specs["truncated"].shape == ()
            and specs["terminated"].dtype == np.bool_
            and specs["truncated"].dtype == np.bool_
        )
        return (
            core_ok
            and not schema.dict_obs
            and not schema.extra_names
            and store_next_obs_once
            and not allow_nonfinite
        )


def _accel_field(rec: np.dtype, name: str) -> tuple[int, int, tuple[int, ...], int, int] | None:
    """``(offset, nbytes, shape, dtype number, float kind)`` of a record field for the writer."""
    dt, off = rec.fields[name][:2]  # type: ignore[index]
    base = dt.base
    if base.kind == "f" and base.itemsize not in (4, 8):
        return None  # float16: no compiled finiteness check
    if not base.isnative:
        return None
    kind = base.itemsize if base.kind == "f" else 0
    return int(off), int(dt.itemsize), tuple(dt.shape), base.num, kind


def _make_writer(storage: RingStorage, num_envs: int) -> Any:
    """A compiled writer bound to ``storage``'s packed records, or None if not applicable."""
    rec = storage.records
    names = ("obs", "action", "reward", "terminated", "truncated")
    if _accel is None or rec is None or rec.dtype.names != names or not rec.flags.c_contiguous:
        return None
    obs, act = _accel_field(rec.dtype, "obs"), _accel_field(rec.dtype, "action")
    if obs is None or act is None or max(len(obs[2]), len(act[2])) > _accel.MAX_DIMS:
        return None
    fields = rec.dtype.fields
    assert fields is not None
    return _accel.Writer(
        storage, rec, np.float32, np.False_,
        num_envs, storage.capacity_per_env, rec.dtype.itemsize, obs, act,
        fields["reward"][1], fields["terminated"][1], fields["truncated"][1],
    )  # fmt: skip


class FastAdd:
    """Mixin: the fast add methods and the write-path helpers shared with the general path.

    The attributes below are set by ``ReplayBuffer.__init__`` / ``_allocate``.
    """

    num_envs: int
    capacity_per_env: int
    _storage: RingStorage | None
    _side: SideStore | None
    _disc: SideStore | None
    _prev_open: np.ndarray
    _prev_open_any: bool
    _prev_all: bool
    _fast: FastPlan | None
    # (storage, rows_written, bytes of the pending next_obs row) after the last fast add
    _pending: tuple[Any, int, bytes] | None

    def _rows(self) -> int:
        raise NotImplementedError  # provided by ReplayBuffer

    def _set_open(self, done: np.ndarray) -> None:
        """Remember which env columns continue (their pending ``next_obs`` is open)."""
        po = self._prev_open
        np.logical_not(done, out=po)
        b = po.tobytes()  # logical_not writes 0/1 bytes: compare bytes, no numpy reduction
        self._prev_open_any = b != bytes(len(b))
        self._prev_all = b == b"\x01" * len(b)

    def _differs(self, obs_row: dict[str, np.ndarray], row: int) -> np.ndarray:
        """Per env column: does ``obs_row`` differ from the pending observation at ``row``?"""
        st = self._storage
        if st is None:
            return np.ones(self.num_envs, dtype=bool)
        out = np.zeros(self.num_envs, dtype=bool)
        for k, v in obs_row.items():
            stored = st.arrays[k][row]
            if v.size == stored.size and v.tobytes() == stored.tobytes():
                continue
            out |= (np.broadcast_to(v, stored.shape) != stored).reshape(self.num_envs, -1).any(1)
        return out

    def _min_live_key(self) -> int:
        """Smallest side-store key still referenced by a stored transition."""
        st = self._storage
        if st is None:
            return 0
        return (st.rows_written - self._rows()) * self.num_envs

    def _add_fast_single(
        self,
        f: FastPlan,
        obs: np.ndarray,
        action: Any,
        reward: Any,
        next_obs: np.ndarray,
        terminated: Any,
        truncated: Any,
    ) -> bool:
        """One transition, env axis left out: ``obs (*obs_shape)``, scalar reward and flags."""
        ta = type(action)
        if ta is _NDARRAY:
            if (action.dtype is not f.adt and action.dtype != f.adt) or action.shape != f.a_item:
                return False
        elif ta is int:
            if f.a_int is None or not f.a_int[0] <= action <= f.a_int[1]:
                return False
        elif ta is not f.a_scalar:
            return False
        if (
            obs.shape != f.o_item
            or next_obs.shape != f.o_item
            or type(terminated) not in _BOOL_SCALARS
            or type(truncated) not in _BOOL_SCALARS
        ):
            return False
        r = float(reward)
        if not abs(r) <= _F32_MAX:  # NaN, inf, or overflow of the float32 cast
            return False
        total = r  # one finiteness check for reward + next_obs + action (see module doc)
        if f.o_small:
            total += sum(next_obs.tolist())
        elif f.ofloat and not all_finite(next_obs):
            return False
        if f.a_small:
            total += sum(action.tolist())
        elif f.afloat and not all_finite(action):
            return False
        if not math.isfinite(total):
            return False
        st, side, disc = self._storage, self._side, self._disc
        if st is None or side is None or disc is None:
            return False
        c = st.cursor
        ob1 = f.ob1
        if self._prev_open_any:
            p = self._pending  # bytes of the pending next_obs, if the last add was fast
            pend = p[2] if p is not None and p[0] is st and p[1] == st.rows_written else None
            if obs.tobytes() != (ob1[c].tobytes() if pend is None else pend):
                if f.ofloat and not all_finite(obs):
                    return False
                if self._differs({"obs": obs}, c)[0]:  # discontinuity: keep the pending obs
                    key = np.array([st.rows_written - 1], np.int64)
                    disc.append(key, {"obs": f.ob[c, :1]}, self._min_live_key())
        elif f.ofloat and not all_finite(obs):
            return False
        # ---- nothing can fail below: write
        if f.rec1 is not None:
            f.rec1[c] = (obs, action, r, terminated, truncated)
        else:
            ob1[c] = obs
            f.ac[c, 0] = action
            f.rw[c, 0] = r
            f.te[c, 0] = terminated
            f.tr[c, 0] = truncated
        c2 = c + 1 if c + 1 < st.capacity_per_env else 0
        ob1[c2] = next_obs
        st.cursor = c2
        st.rows_written += 1
        if st.size < st.capacity_per_env:
            st.size += 1
        self._pending = (st, st.rows_written, next_obs.tobytes())
        if terminated or truncated:
            key = np.array([st.rows_written - 1], np.int64)
            side.append(key, {"obs": f.ob[c2, :1]}, self._min_live_key())
            self._prev_open[0] = False
            self._prev_open_any = self._prev_all = False
        elif not self._prev_all:
            self._prev_open[0] = True
            self._prev_open_any = self._prev_all = True
        return True

    def _add_fast_row(
        self,
        f: FastPlan,
        obs: np.ndarray,
        action: np.ndarray,
        reward: Any,
        next_obs: np.ndarray,
        terminated: Any,
        truncated: Any,
    ) -> bool:
        """One row of ``num_envs`` transitions, every argument with the leading env axis."""
        # dtype checks try identity first: builtin dtypes are singletons, `!=` is the slow twin
        n_row = f.n_row
        if (
            type(action) is not _NDARRAY
            or type(reward) is not _NDARRAY
            or type(terminated) is not _NDARRAY
            or type(truncated) is not _NDARRAY
            or (action.dtype is not f.adt and action.dtype != f.adt)
            or (reward.dtype is not _F32 and reward.dtype != _F32)
            or (terminated.dtype is not _BOOL and terminated.dtype != _BOOL)
            or (truncated.dtype is not _BOOL and truncated.dtype != _BOOL)
            or obs.shape != f.o_row
            or next_obs.shape != f.o_row
            or action.shape != f.a_row
            or reward.shape != n_row
            or terminated.shape != n_row
            or truncated.shape != n_row
        ):
            return False
        fo, fa, isfinite = f.fin_o, f.fin_a, np.isfinite
        if (
            isfinite(reward, f.fin_r).tobytes() != f.all_r
            or (fo is not None and isfinite(next_obs, fo).tobytes() != f.all_o)
            or (fa is not None and isfinite(action, fa).tobytes() != f.all_a)
        ):
            return False
        st, side, disc = self._storage, self._side, self._disc
        if st is None or side is None or disc is None:
            return False
        n = self.num_envs
        c = st.cursor
        ob = f.ob
        if self._prev_open_any:
            p = self._pending  # bytes of the pending next_obs, if the last add was fast
            pend = p[2] if p is not None and p[0] is st and p[1] == st.rows_written else None
            if obs.tobytes() != (ob[c].tobytes() if pend is None else pend):
                if fo is not None and isfinite(obs, fo).tobytes() != f.all_o:
                    return False
                jump = self._prev_open & self._differs({"obs": obs}, c)
                if jump.tobytes() != f.no_done:  # 0/1 bytes of a bool `&`: any jump?
                    cols = np.flatnonzero(jump)
                    key = (st.rows_written - 1) * n + cols
                    disc.append(key, {"obs": ob[c, cols]}, self._min_live_key())
        elif fo is not None and isfinite(obs, fo).tobytes() != f.all_o:
            return False
        # ---- nothing can fail below: write
        nd = f.no_done  # bool rows hold 0/1 bytes: all-zero bytes <=> no env is done
        done_any = terminated.tobytes() != nd or truncated.tobytes() != nd
        ob[c] = obs
        f.ac[c] = action
        f.rw[c] = reward
        f.te[c] = terminated
        f.tr[c] = truncated
        c2 = c + 1 if c + 1 < st.capacity_per_env else 0
        ob[c2] = next_obs
        st.cursor = c2
        st.rows_written += 1
        if st.size < st.capacity_per_env:
            st.size += 1
        self._pending = (st, st.rows_written, next_obs.tobytes())
        if done_any:
            done = terminated | truncated
            cols = np.flatnonzero(done)
            key = (st.rows_written - 1) * n + cols
            side.append(key, {"obs": ob[c2, cols]}, self._min_live_key())
            self._set_open(done)
        elif not self._prev_all:  # every env goes on: all pending next_obs are open
            self._prev_open[:] = True
            self._prev_open_any = self._prev_all = True
        return True
