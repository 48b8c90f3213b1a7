"""The one write path of :class:`~rlstore.buffers.replay.ReplayBuffer`: ``add`` and ``extend``.

Both go through :meth:`ReplayWriter._write`: it validates the whole input (one row of
``num_envs`` envs, or a block of ``T`` rows) against the schema before anything changes, then
writes it through the storage protocol (``write_row`` / ``write_block``, ``put_row``):

* each argument is checked by its :class:`_Field`, built once per layout: a value already of
  the stored dtype and shape passes as is (no copy, no shape inference), Python scalars of a
  single add convert exactly, anything else goes through
  :func:`~rlstore.specs.cast_to_spec` (safe casts only, errors naming the field);
* the observation-stored-once layout writes ``obs`` in the ring and the newest ``next_obs`` in
  the spare row after the cursor; the final observations of ended episodes go to ``side``;
* a stream is *discontinuous* where an ``obs`` differs (in any byte) from the previous
  ``next_obs`` of its env column although no episode ended (an offline dataset, relabelled
  goals): the previous ``next_obs`` then goes to ``disc``. The pending ``next_obs`` is kept as
  bytes, so that the continuing case costs one bytes comparison, and an ``obs`` equal to it
  byte for byte is not checked for NaN/inf again (it was, as that ``next_obs``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from operator import call, itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from rlstore.buffers._replay_state import ReplayState
from rlstore.errors import SpecError
from rlstore.specs import FieldSpec, TransitionSchema, all_finite, cast_to_spec
from rlstore.storage.frames import check_shared_frames, newest_frame

if TYPE_CHECKING:
    from rlstore.storage import Storage
    from rlstore.storage.ring import SideStore

__all__ = ["ReplayWriter", "WritePlan"]

_F32 = np.dtype(np.float32)
_F32_MAX = float(np.finfo(np.float32).max)
_NDARRAY = np.ndarray


def _cast(name: str, value: Any, spec: FieldSpec, lead: tuple[int, ...], single: bool,
          check_finite: bool) -> np.ndarray:  # fmt: skip
    """``value`` as an array ``(*lead, *spec.shape)`` of the spec's dtype, or a SpecError.

    ``lead`` is ``(T, num_envs)`` for a block, ``(num_envs,)`` for an add; ``single``: a
    single add (``num_envs == 1``) whose values may leave the env axis out.
    """
    inner = lead
    if single:
        try:
            if np.ndim(value) == len(spec.shape):
                inner = ()
        except (TypeError, ValueError, RuntimeError):  # ragged: cast_to_spec names the field
            pass
    arr = cast_to_spec(name, value, spec, inner, allow_nonfinite=not check_finite)
    return arr if inner == lead else arr.reshape(lead + spec.shape)


class _Field:
    """How one argument of an add is checked, computed once per buffer layout: the stored
    dtype, the row shape ``(num_envs, *shape)``, the item shape a single add may pass
    (``num_envs == 1``), whether NaN/inf are refused, and the exact scalar conversions.

    ``row(v)`` returns the value to write: the input array itself when its dtype and shape are
    the stored ones (NaN/inf checked unless ``defer``: the writer checks those), a checked
    Python or numpy scalar of a single add, or else the result of :meth:`cast` (which raises
    the named error). ``row`` is a closure over the field's constants (no attribute lookups).
    """

    __slots__ = ("name", "spec", "item", "single", "fin", "row")

    def __init__(
        self, name: str, spec: FieldSpec, n: int, allow_nonfinite: bool, obs: bool, defer: bool
    ):
        self.name, self.spec = name, spec
        self.item = (n, *spec.shape)
        self.single = spec.shape if n == 1 else None  # a single add may leave the env out
        self.fin = spec.is_float and not allow_nonfinite
        self.row = _row_check(self, n == 1 and not spec.shape, obs, defer)

    def cast(self, v: Any, lead: tuple[int, ...] | None = None) -> np.ndarray:
        """The general conversion of ``v`` to a row (``lead=None``) or a ``lead`` block."""
        single = lead is None and self.single is not None
        return _cast(self.name, v, self.spec, lead or self.item[:1], single, self.fin)


def _row_check(f: _Field, scalar: bool, obs: bool, defer: bool) -> Callable[[Any], Any]:
    """The ``row`` check of field ``f`` (``scalar``: one env, a scalar field: a record item;
    ``obs``: an observation, kept as bytes: arrays only)."""
    dt, item, single, fin = f.spec.dtype, f.item, f.single, f.fin and not defer
    isfinite, nd = np.isfinite, _NDARRAY

    def slow(v: Any) -> Any:
        arr = f.cast(v)
        return arr[0] if scalar else arr

    if not scalar:

        def row(v: Any) -> Any:
            if type(v) is nd and (v.dtype is dt or v.dtype == dt):
                shape = v.shape
                if (shape == item or shape == single) and (
                    not fin or 0 not in isfinite(v).tobytes()
                ):
                    return v
            return slow(v)

        return row

    sctype, f32, flag = dt.type, dt == _F32, dt.kind == "b"
    info = np.iinfo(dt) if dt.kind in "iu" else None
    lo, hi = (int(info.min), int(info.max)) if info is not None else (1, 0)
    check = math.isfinite if fin else None

    def row_scalar(v: Any) -> Any:
        t = type(v)
        if t is nd:
            if (v.dtype is dt or v.dtype == dt) and (v.shape == () or v.shape == (1,)):
                x = v[0] if v.shape else v[()]
                if check is None or check(x):
                    return x
        elif obs:  # arrays only (kept as bytes)
            pass
        elif t is sctype:
            if check is None or check(v):
                return v
        elif t is float:
            if f32 and -_F32_MAX <= v <= _F32_MAX:  # NaN, inf and overflow fail
                return v
        elif t is bool:
            if flag:
                return v
        elif t is int and lo <= v <= hi:
            return v
        return slow(v)

    return row_scalar


class WritePlan:
    """Everything an add checks and writes, computed once per layout
    (``ReplayBuffer._allocate``): one :class:`_Field` per argument in the order
    ``obs fields, next_obs fields, action, reward, terminated, truncated, extras``, and which
    of them the storage's ``write_row`` takes, in its field order. Pickled as its arguments
    (the checks are closures)."""

    def __init__(self, schema: TransitionSchema, n: int, allow_nonfinite: bool, once: bool,
                 stored: list[str]):  # fmt: skip
        self.args = (schema, n, allow_nonfinite, once, stored)
        self.schema, self.k = schema, len(schema.obs_names)
        obs = [(k, schema.specs[k]) for k in schema.obs_names]
        self.fields = [
            *(_Field(k, s, n, allow_nonfinite, True, once) for k, s in obs),
            *(_Field("next_" + k, s, n, allow_nonfinite, True, False) for k, s in obs),
            *(_Field(k, s, n, allow_nonfinite, False, False) for k, s in schema.nonobs),
        ]
        self.obs, self.names = self.fields[: self.k], schema.obs_names
        self.rows = [f.row for f in self.fields]
        pos = {f.name: i for i, f in enumerate(self.fields)}
        order = [pos[k] for k in stored] or [0, 0]  # (the plan of a first add writes nothing)
        self.stored = itemgetter(*order) if len(order) > 1 else lambda v: (v[order[0]],)
        self.term, self.trunc = pos["terminated"], pos["truncated"]
        self.plain = not (schema.dict_obs or schema.extra_names)  # args need no flattening
        self.fin_obs = [(i, f) for i, f in enumerate(self.obs) if f.fin]  # NaN-checked obs
        self.pend_types = [
            (k, f.item, f.spec.dtype) for k, f in zip(self.names, self.obs, strict=True)
        ]

    def unbytes(self, pend: list[bytes]) -> dict[str, np.ndarray]:
        """The pending ``next_obs`` row: read-only arrays ``(n, *shape)`` over its bytes
        (no copy)."""
        if self.k == 1:  # (one obs field: no loop)
            name, shape, dtype = self.pend_types[0]
            return {name: np.ndarray(shape, dtype, pend[0])}
        return {k: np.ndarray(s, d, p) for (k, s, d), p in zip(self.pend_types, pend, strict=True)}

    def __reduce__(self) -> tuple[Any, ...]:
        return WritePlan, self.args


class ReplayWriter(ReplayState):
    """Mixin: ``add`` / ``extend`` of ``ReplayBuffer`` (attributes set by the buffer, declared
    by :class:`ReplayState`; ``_pending``: the bytes of the pending next_obs row per obs field,
    ``_plan``: the per-argument checks of an add)."""

    _prev_open_any: bool
    _prev_all: bool
    _plan: WritePlan | None

    def add(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        terminated: Any,
        truncated: Any,
        **extra: Any,
    ) -> None:
        """Add one transition per env.

        Args:
            obs: ``(num_envs, *obs_shape)`` or a dict of them; with ``num_envs == 1`` the env
                axis may be left out (single add; a scalar ``reward`` marks a single add on the
                first call).
            action: ``(num_envs, *action_shape)``.
            reward: ``(num_envs,)``.
            next_obs: the true successor of ``obs`` (the final observation when done).
            terminated, truncated: ``(num_envs,)`` bool (exact 0/1 ints or floats accepted).
            **extra: extra fields, ``(num_envs, *shape)`` each.

        Raises:
            SpecError: bad shape, dtype, NaN/inf, missing or unexpected field; nothing is
                written then.
        """
        self._write(None, obs, action, reward, next_obs, terminated, truncated, extra)

    def extend(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        terminated: Any,
        truncated: Any,
        **extra: Any,
    ) -> None:
        """Add ``T`` consecutive steps of every env: arguments shaped ``(T, num_envs, ...)``.

        ``next_obs[t]`` is the true successor of ``obs[t]``; where it differs from
        ``obs[t + 1]`` without a done flag, the stream is treated as discontinuous. ``T`` may
        exceed the capacity (only the last ``capacity_per_env`` rows are kept).

        Raises:
            SpecError: as :meth:`add`; nothing is written then.
        """
        n = self.num_envs
        shape = _shape("reward", reward)
        if len(shape) < 1 or isinstance(reward, dict):
            raise SpecError(f"reward: expected shape (T, {n}), got {shape}")
        t = shape[0]
        args = {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs,
                "terminated": terminated, "truncated": truncated, **extra}  # fmt: skip
        lengths = {}
        for k, v in args.items():
            for kk, vv in v.items() if isinstance(v, dict) and k.endswith("obs") else [(k, v)]:
                lengths[kk if kk == k else f"{k}.{kk}"] = _shape(k, vv)[:1]
        if any(v != (t,) for v in lengths.values()):
            shown = ", ".join(f"{k}={v[0] if v else None}" for k, v in lengths.items())
            raise SpecError(f"T: expected one leading length T for every argument, got {shown}")
        self._write(t, obs, action, reward, next_obs, terminated, truncated, extra)

    # ------------------------------------------------------------------ validation
    def _infer(self, obs: Any, action: Any, reward: Any, extra: Any, t: int | None) -> WritePlan:
        """The plan of a first add, its schema inferred from the values (nothing allocated)."""
        n = self.num_envs
        lead = (n,) if t is None else (t, n)
        if t is None and n == 1:  # a scalar reward marks a single add
            lead_ndim = 0 if _shape("reward", reward) == () else 1
        else:
            lead_ndim = len(lead)
        if lead_ndim and _shape("reward", reward) != lead:  # the reward fixes the batch axes
            raise SpecError(f"reward: expected shape {lead} (one per env), got "
                            f"{np.shape(reward)}")  # fmt: skip
        specs = TransitionSchema.infer(lead_ndim, obs, action, reward, extra)
        schema = TransitionSchema(specs, allow_nonfinite=self.allow_nonfinite)
        return WritePlan(schema, n, self.allow_nonfinite, False, [])  # obs checked whole

    def _arguments(self, plan: WritePlan, obs: Any, next_obs: Any, core: tuple[Any, ...],
                   extra: Mapping[str, Any]) -> tuple[Any, ...]:  # fmt: skip
        """The arguments in the plan's order (obs and next_obs flattened, extras checked)."""
        schema = plan.schema
        if extra or schema.extra_names:
            if sorted(extra) != sorted(schema.extra_names):
                raise SpecError(
                    f"extras: expected {sorted(schema.extra_names)}, got {sorted(extra)}"
                )
            core = (*core, *(extra[k] for k in schema.extra_names))
        if (
            schema.dict_obs
            or not (type(obs) is _NDARRAY and type(next_obs) is _NDARRAY)
            and (isinstance(obs, Mapping) or isinstance(next_obs, Mapping))
        ):
            fo, fno = schema.flatten_obs("obs", obs), schema.flatten_obs("next_obs", next_obs)
            return (*(fo[k] for k in schema.obs_names), *(fno[k] for k in schema.obs_names), *core)
        return (obs, next_obs, *core)

    # ------------------------------------------------------------------ writing
    def _write(self, t: int | None, obs: Any, action: Any, reward: Any, next_obs: Any,
               terminated: Any, truncated: Any, extra: Mapping[str, Any]) -> None:  # fmt: skip
        """Validate the whole input (``t is None``: one add), then write it (blocks of at
        most ``capacity_per_env`` rows)."""
        plan, first = self._plan, self._plan is None
        if plan is None:
            plan = self._infer(obs, action, reward, extra, t)
        if plan.plain and not extra and type(obs) is _NDARRAY and type(next_obs) is _NDARRAY:
            args: tuple[Any, ...] = (obs, next_obs, action, reward, terminated, truncated)
        else:
            args = self._arguments(plan, obs, next_obs, (action, reward, terminated, truncated),
                                   extra)  # fmt: skip
        if t is None:  # one check per argument (same order)
            vals = list(map(call, plan.rows, args))
        else:
            lead = (t, self.num_envs)
            vals = [f.cast(v, lead) for f, v in zip(plan.fields, args, strict=True)]
        if self._layout.kind == "frames":  # stacks must share frames as the layout declares
            k, shape = plan.k, (1, self.num_envs) if t is None else ()
            o, no = ({f.spec.name: np.asarray(v).reshape(shape + f.item[1:]) if shape else v
                      for f, v in zip(plan.fields[a : a + k], vals[a : a + k], strict=True)}
                     for a in (0, k))  # fmt: skip
            lay = self._layout
            check_shared_frames(plan.schema.specs, lay.stack_axis, o, no, lay.frame_fields)
        if first:  # allocate only once everything passed
            self._allocate(plan.schema.specs)
            plan = self._plan or plan
        if self._clean:  # a flushed memory-mapped ring is about to change
            self._mark_unflushed()
        st: Storage = self._storage  # type: ignore[assignment]  # (allocated)
        if t is None:
            self._write_row(plan, vals, st)
        else:
            rows, cap, names = len(vals[plan.term]), self.capacity_per_env, plan.fields
            for a in range(0, rows, cap):
                block = {f.name: v[a : a + cap] for f, v in zip(names, vals, strict=True)}
                self._write_block(plan, block, min(cap, rows - a), st)
        n, rw = self.num_envs, st.rows_written
        rows = st.size if st.size <= self.capacity_per_env else self.capacity_per_env
        self._sampler.on_write((rw - rows) * n, rw * n)

    def _write_row(self, plan: WritePlan, vals: list[Any], st: Storage) -> None:
        """Write one validated row (an add); its obs is checked for NaN/inf here unless it
        continues every column's pending next_obs byte for byte."""
        if not self.store_next_obs_once:
            st.write_row(plan.stored(vals))
            return
        n, k = self.num_envs, plan.k
        jump: Any = None  # columns whose obs jumped (all of them for one env)
        check = True
        if self._prev_open_any:  # is obs the pending next_obs of its column?
            pend = self._pending or self._pending_bytes(st)
            if (
                (vals[0].tobytes() != pend[0])
                if k == 1
                else [v.tobytes() for v in vals[:k]] != pend
            ):
                jump = ... if n == 1 else self._jumps(plan, vals[:k], pend)  # (``...``: all)
            else:
                check = not self._prev_all
        if check:
            for i, f in plan.fin_obs:
                if not all_finite(vals[i]):
                    f.cast(vals[i])  # raises the named error
        te, tr = vals[plan.term], vals[plan.trunc]
        if n == 1:
            done = _ONE if te or tr else None
        elif te.tobytes() != bytes(n) or tr.tobytes() != bytes(n):  # bools are 0/1 bytes
            done = te | tr
        else:
            done = None
        # everything is checked: write
        g0 = st.rows_written
        if jump is not None:
            self._keep_pending(plan, pend, jump, st)
        st.write_row(plan.stored(vals))
        no = vals[k : 2 * k]
        if k == 1:
            st.put_row(st.cursor, {plan.names[0]: no[0]})
            self._pending = [no[0].tobytes()]
        else:
            st.put_row(st.cursor, dict(zip(plan.names, no, strict=True)))
            self._pending = [v.tobytes() for v in no]
        if done is not None:
            cols = done.nonzero()[0]  # (array methods: numpy's module functions cost ~1 us more)
            ended = {
                f.spec.name: v.reshape(f.item)[cols] for f, v in zip(plan.obs, no, strict=True)
            }
            self._keep(self._side, g0 * n + cols, ended, self._min_live_key(st))
        if done is not None or not self._prev_all:
            self._close(done)

    def _jumps(self, plan: WritePlan, obs: list[Any], pend: list[bytes]) -> np.ndarray | None:
        """Columns whose ``obs`` differs from their open pending ``next_obs`` (None: none)."""
        po, prev = self._prev_open, plan.unbytes(pend).values()
        if all(a[po].tobytes() == p[po].tobytes() for a, p in zip(obs, prev, strict=True)):
            return None  # (the usual case: only columns whose episode ended changed)
        n, jump = self.num_envs, np.zeros(self.num_envs, dtype=bool)
        for a, p in zip(obs, prev, strict=True):
            jump |= _differ(a, p, n)
        cols = (jump & po).nonzero()[0]
        return cols if len(cols) else None

    def _keep_pending(self, plan: WritePlan, pend: list[bytes], cols: Any, st: Storage) -> None:
        """Keep the pending ``next_obs`` of the columns ``cols`` (``...``: one env), whose next
        ``obs`` jumped, in ``disc`` under the keys of the newest stored row."""
        n, g = self.num_envs, st.rows_written - 1
        prev = plan.unbytes(pend)
        if cols is ...:
            keys: Any = (g,)
        else:
            keys, prev = g * n + cols, {k: v[cols] for k, v in prev.items()}
        self._keep(self._disc, keys, prev, self._min_live_key(st))

    def _write_block(
        self, plan: WritePlan, vals: dict[str, np.ndarray], t: int, st: Storage
    ) -> None:
        """Write ``t <= capacity_per_env`` validated rows (``extend``)."""
        if not self.store_next_obs_once:
            st.write_block(vals)
            return
        n, names = self.num_envs, self._obs_names
        o = {k: vals.pop(k) for k in names}
        no = {k: vals.pop("next_" + k) for k in names}
        te, tr = vals["terminated"], vals["truncated"]
        zero = bytes(te.size)  # bool bytes are 0/1: all-zero bytes <=> no episode ended
        done = te | tr if te.tobytes() != zero or tr.tobytes() != zero else None
        g0 = st.rows_written
        if self._prev_open_any:  # is obs[0] the pending next_obs of its column?
            pend, first = self._pending or self._pending_bytes(st), [o[k][0] for k in names]
            if [v.tobytes() for v in first] != pend:
                cols = self._jumps(plan, first, pend)
                if cols is not None:
                    self._keep_pending(plan, pend, cols, st)
        if t > 1:  # jumps inside the block
            inner = np.zeros((t - 1, n), dtype=bool)
            for k in names:
                inner |= _differ(no[k][:-1], o[k][1:], (t - 1, n))
            if done is not None:
                inner &= ~done[:-1]
        st.write_block({**o, **vals})
        st.put_row(st.cursor, {k: v[-1] for k, v in no.items()})
        self._pending = [v[-1].tobytes() for v in no.values()]
        lo = self._min_live_key(st)  # after the write: entries of overwritten rows are dead
        if done is not None:
            ti, ni = np.nonzero(done)
            self._keep(self._side, (g0 + ti) * n + ni, {k: v[ti, ni] for k, v in no.items()}, lo)
        if t > 1 and inner.any():
            ti, ni = np.nonzero(inner)
            self._keep(self._disc, (g0 + ti) * n + ni, {k: v[ti, ni] for k, v in no.items()}, lo)
        self._close(None if done is None else done[-1])

    def _close(self, done: np.ndarray | None) -> None:
        """Remember which columns' newest row did not end (their next obs must continue)."""
        po = self._prev_open
        if done is not None:
            np.logical_not(done, out=po)
            b = po.tobytes()
            self._prev_open_any, self._prev_all = b != bytes(len(b)), b == b"\x01" * len(b)
        elif not self._prev_all:  # every episode goes on
            po[:] = True
            self._prev_open_any = self._prev_all = True

    def _keep(self, store: SideStore | None, keys: Any, values: dict[str, np.ndarray],
              lo: int) -> None:  # fmt: skip
        """Append ``next_obs`` items to a side store: whole, or their newest frame on the
        frames layout (the rest of the stack is its ``obs``'s, rebuilt on reading)."""
        if store is None or not len(keys):
            return
        specs = self.specs
        if self._layout.kind == "frames" and specs is not None:
            ax, kept = self._layout.stack_axis, store.specs
            values = {k: v if kept[k] == specs[k] else newest_frame(v, ax, len(kept[k].shape))
                      for k, v in values.items()}  # fmt: skip
        store.append(keys, values, lo)

    def _pending_bytes(self, st: Storage) -> list[bytes]:
        """Bytes of the pending ``next_obs`` row (read from the storage after a load)."""
        if self._pending is None:
            n = self.num_envs
            got = st.gather(st.cursor * n + np.arange(n), list(self._obs_names))
            self._pending = [got[k].tobytes() for k in self._obs_names]
        return self._pending

    _obs_names: list[str]

    def _min_live_key(self, st: Storage) -> int:
        """Smallest side-store key still referenced by a stored transition."""
        cap = self.capacity_per_env
        return (st.rows_written - (st.size if st.size <= cap else cap)) * self.num_envs


_ONE = np.ones(1, dtype=bool)


_WORDS = ((8, np.uint64), (4, np.uint32), (2, np.uint16), (1, np.uint8))
"""Unsigned words by size, widest first (:func:`row_words` uses the widest that fits)."""


def row_words(a: np.ndarray, lead: Any) -> np.ndarray:
    """The bytes of each item of ``a`` (``(*lead, *item)``, possibly empty) as ``(*lead, W)``
    unsigned words, the widest that divide an item's bytes (same bytes, fewer compares; a view
    of C-contiguous ``a``). Items are continuous only when equal byte for byte, so that
    ``-0.0`` and NaN payloads come back exactly: compare these, not the values."""
    lead = (lead,) if isinstance(lead, int) else tuple(lead)
    row = a.dtype.itemsize * math.prod(a.shape[len(lead) :])
    a8 = np.ascontiguousarray(a).view(np.uint8).reshape(*lead, row)
    return a8.view(next(w for size, w in _WORDS if row % size == 0))


def _differ(a: np.ndarray, b: np.ndarray, lead: Any) -> np.ndarray:
    """Per item of the ``lead`` axes: do ``a`` and ``b`` differ in any byte?"""
    return (row_words(a, lead) != row_words(b, lead)).any(axis=-1)


def _shape(name: str, value: Any) -> tuple[int, ...]:
    """``np.shape(value)``; a value numpy cannot read as an array is a named SpecError."""
    try:
        return tuple(np.shape(value))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise SpecError(f"{name}: expected an array, got {type(value).__name__}: {exc}") from exc
