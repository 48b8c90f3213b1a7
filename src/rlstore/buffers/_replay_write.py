"""The one write path of :class:`~rlstore.buffers.replay.ReplayBuffer`: ``add`` and ``extend``.

Both go through :meth:`ReplayWriter._write`, which validates the whole batch (one step of
``num_envs`` envs, or a block of ``T`` steps) against the schema before anything changes, then
writes it with vectorized numpy through the storage protocol (``write_block`` / ``put_row``):

* each field is cast by :func:`_cast`: input already of the stored dtype and shape passes as is
  (a view, no copy), Python scalars of a single add convert exactly, anything else goes through
  :func:`~rlstore.specs.cast_to_spec` (safe casts only, named errors);
* the observation-stored-once layout writes ``obs`` in the ring and the newest ``next_obs`` in
  the spare row after the cursor; the final observations of ended episodes go to ``side``;
* a stream is *discontinuous* where an ``obs`` differs (in any byte) from the previous
  ``next_obs`` of its env column although no episode ended (an offline dataset, relabelled
  goals): the true successor then goes to ``disc``. The previous pending ``next_obs`` is kept as
  bytes, so that the common continuing case costs one bytes comparison.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlstore.errors import SpecError
from rlstore.specs import FieldSpec, TransitionSchema, all_finite, cast_to_spec
from rlstore.storage import StorageLayout
from rlstore.storage.frames import check_shared_frames, newest_frame

if TYPE_CHECKING:
    from rlstore.samplers import Sampler
    from rlstore.storage import Storage
    from rlstore.storage.ring import SideStore

__all__ = ["ReplayWriter", "field_plan"]

_F32 = np.dtype(np.float32)
_F32_MAX = float(np.finfo(np.float32).max)
_NDARRAY = np.ndarray


def _cast(name: str, value: Any, spec: FieldSpec, lead: tuple[int, ...],
          inner: tuple[int, ...], single: bool, check_finite: bool) -> np.ndarray:  # fmt: skip
    """``value`` as an array ``(*lead, *spec.shape)`` of the spec's dtype, or a SpecError.

    ``lead`` is the block shape written, ``(T, num_envs)``; ``inner`` the shape the caller
    passes (``(num_envs,)`` for an add); ``single``: a single add (``num_envs == 1``) whose
    values may leave the env axis out.
    """
    dt = spec.dtype
    if type(value) is _NDARRAY and (value.dtype is dt or value.dtype == dt):
        shape = value.shape
        if shape == lead + spec.shape or (single and shape == spec.shape):
            arr = value.reshape(lead + spec.shape) if shape != lead + spec.shape else value
            if check_finite and not all_finite(arr):  # raises the named error
                cast_to_spec(name, arr, spec, lead, allow_nonfinite=False)
            return arr
    elif single and not spec.shape:  # Python scalars of a single add: exact conversions only
        t = type(value)
        if t is float and dt is _F32 and abs(value) <= _F32_MAX:  # NaN / inf / overflow fail
            return np.float32(value).reshape(lead)
        if (t is bool and dt.kind == "b") or (t is int and dt.kind in "iu" and _fits(value, dt)):
            return dt.type(value).reshape(lead)
    if single:  # num_envs == 1: the env axis may be left out
        try:
            if np.ndim(value) == len(spec.shape):
                inner = ()
        except (TypeError, ValueError, RuntimeError):  # ragged: cast_to_spec names the field
            pass
    arr = cast_to_spec(name, value, spec, inner, allow_nonfinite=not check_finite)
    return arr.reshape(lead + spec.shape)


def _fits(value: int, dt: np.dtype) -> bool:
    info = np.iinfo(dt)
    return bool(info.min <= value <= info.max)


class _Field:
    """What one field of an add is checked against, computed once per buffer layout: the
    stored dtype, the row shape ``(1, num_envs, *shape)``, the item shape a single add may pass
    (``num_envs == 1``), whether NaN/inf are refused, and the exact scalar conversions.

    A Python or numpy scalar of a single add is stored into ``scratch``, a preallocated
    ``(1, 1)`` row (measured: ~0.2 us, against ~1.7 us for ``np.float32(v).reshape(1, 1)``);
    the row is written into the storage before the next add reuses it.
    """

    __slots__ = ("spec", "dt", "row", "item", "single", "fin", "f32", "flag", "ints", "sctype",
                 "scratch")  # fmt: skip

    def __init__(self, spec: FieldSpec, n: int, allow_nonfinite: bool, obs: bool):
        self.spec, self.dt = spec, spec.dtype
        self.row = (1, n, *spec.shape)
        self.item = (n, *spec.shape)  # an add's shape; a single add may leave the env out:
        self.single = spec.shape if n == 1 else None
        self.fin = spec.is_float and not allow_nonfinite
        scalar = n == 1 and not spec.shape and not obs  # obs and next_obs would share scratch
        self.scratch = np.zeros(self.row, spec.dtype) if scalar else None
        self.f32 = scalar and spec.dtype == _F32
        self.flag = scalar and spec.dtype.kind == "b"
        info = np.iinfo(spec.dtype) if spec.dtype.kind in "iu" else None
        self.ints = (int(info.min), int(info.max)) if scalar and info is not None else None
        self.sctype = spec.dtype.type if scalar else None

    def take(self, v: Any) -> np.ndarray | None:
        """``v`` as the row written when it converts exactly (else None: :func:`_cast`)."""
        t = type(v)
        if t is _NDARRAY:
            if v.dtype is not self.dt and v.dtype != self.dt:
                return None
            if v.shape != self.item and v.shape != self.single:
                return None
            if self.fin:  # small 1-D rows: one Python sum (NaN/inf make it non-finite)
                ok = math.isfinite(sum(v.tolist())) if v.ndim == 1 and v.size <= 64 else None
                if not (ok or all_finite(v)):
                    return None
            return v.reshape(self.row)
        sc = self.scratch
        if sc is None:
            return None
        if t is float:
            ok = self.f32 and -_F32_MAX <= v <= _F32_MAX  # NaN, inf and overflow fail
        elif t is bool:
            ok = self.flag
        elif t is int:
            ok = self.ints is not None and self.ints[0] <= v <= self.ints[1]
        else:
            ok = t is self.sctype and (not self.fin or math.isfinite(v))
        if not ok:
            return None
        sc[0, 0] = v
        return sc


def field_plan(schema: TransitionSchema, n: int, allow_nonfinite: bool) -> dict[str, _Field]:
    """The :class:`_Field` of every stored field of ``schema`` (``ReplayBuffer._allocate``)."""
    obs = set(schema.obs_names)
    return {k: _Field(s, n, allow_nonfinite, k in obs) for k, s in schema.specs.items()}


class ReplayWriter:
    """Mixin: ``add`` / ``extend`` of ``ReplayBuffer`` (attributes set by the buffer)."""

    num_envs: int
    capacity_per_env: int
    store_next_obs_once: bool
    allow_nonfinite: bool
    specs: dict[str, FieldSpec] | None
    _schema: TransitionSchema | None
    _storage: Storage | None
    _side: SideStore | None
    _disc: SideStore | None
    _sampler: Sampler
    _prev_open: np.ndarray
    _prev_open_any: bool
    _prev_all: bool
    _pending: list[bytes] | None  # bytes of the pending next_obs row per obs field
    _plan: dict[str, _Field]  # per-field checks of an add (field_plan)

    def _allocate(self, specs: dict[str, FieldSpec], storage: Any = None) -> None:
        raise NotImplementedError  # provided by ReplayBuffer

    def _window(self) -> tuple[int, int]:
        raise NotImplementedError  # provided by ReplayBuffer

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
            terminated, truncated: ``(num_envs,)`` bool (0/1 ints accepted).
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
    def _infer(self, t: int | None, obs: Any, action: Any, reward: Any, extra: Any) -> Any:
        """The schema of a first add, inferred from its values (nothing allocated yet)."""
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
        return TransitionSchema(specs, allow_nonfinite=self.allow_nonfinite)

    def _validate(
        self, schema: TransitionSchema, t: int | None, obs: Any, next_obs: Any,
        core: tuple[Any, Any, Any, Any], extra: Mapping[str, Any],
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:  # fmt: skip
        """``(obs, next_obs, other fields)``, each ``{name: (T, num_envs, *shape)}``."""
        if (extra or schema.extra_names) and sorted(extra) != sorted(schema.extra_names):
            raise SpecError(f"extras: expected {sorted(schema.extra_names)}, got {sorted(extra)}")
        n, fin = self.num_envs, not self.allow_nonfinite
        lead, inner = ((1, n), (n,)) if t is None else ((t, n), (t, n))
        single = t is None and n == 1
        plan = self._plan if t is None and self._schema is schema else None
        values = (*core, *(extra[k] for k in schema.extra_names)) if extra else core
        vals = {}
        for (k, s), v in zip(schema.nonobs, values, strict=True):
            arr = None if plan is None else plan[k].take(v)
            vals[k] = (
                _cast(k, v, s, lead, inner, single, fin and s.is_float) if arr is None else arr
            )
        specs = schema.specs
        if (
            schema.dict_obs
            or not (type(obs) is _NDARRAY and type(next_obs) is _NDARRAY)
            and (isinstance(obs, Mapping) or isinstance(next_obs, Mapping))
        ):
            flat_o = schema.flatten_obs("obs", obs)
            flat_no = schema.flatten_obs("next_obs", next_obs)
        else:
            flat_o, flat_no = {"obs": obs}, {"obs": next_obs}
        o, no = {}, {}
        for k in schema.obs_names:
            s = specs[k]
            arr = None if plan is None else plan[k].take(flat_o[k])
            o[k] = (
                _cast(k, flat_o[k], s, lead, inner, single, fin and s.is_float)
                if arr is None
                else arr
            )
            arr = None if plan is None else plan[k].take(flat_no[k])
            no[k] = (_cast("next_" + k, flat_no[k], s, lead, inner, single, fin and s.is_float)
                     if arr is None else arr)  # fmt: skip
        return o, no, vals

    # ------------------------------------------------------------------ writing
    def _write(self, t: int | None, obs: Any, action: Any, reward: Any, next_obs: Any,
               terminated: Any, truncated: Any, extra: Mapping[str, Any]) -> None:  # fmt: skip
        """Validate the whole batch (``t is None``: one add), then write it in blocks of at
        most ``capacity_per_env`` rows."""
        schema = self._schema
        if schema is None:
            schema = self._infer(t, obs, action, reward, extra)
        core = (action, reward, terminated, truncated)
        o, no, vals = self._validate(schema, t, obs, next_obs, core, extra)
        if self._layout.kind == "frames":  # stacks must share frames as the layout declares
            check_shared_frames(schema.specs, self._layout.stack_axis, o, no)
        if self._schema is None:  # first add: allocate only once everything passed
            self._allocate(schema.specs)
        rows = len(vals["reward"])
        cap = self.capacity_per_env
        if rows <= cap:
            self._write_block(o, no, vals, rows)
        else:
            for a in range(0, rows, cap):
                b = min(a + cap, rows)
                self._write_block({k: v[a:b] for k, v in o.items()},
                                  {k: v[a:b] for k, v in no.items()},
                                  {k: v[a:b] for k, v in vals.items()}, b - a)  # fmt: skip
        st = self._storage
        if st is not None:
            n, rw = self.num_envs, st.rows_written
            rows = st.size if st.size <= self.capacity_per_env else self.capacity_per_env
            self._sampler.on_write((rw - rows) * n, rw * n)

    def _write_block(self, o: dict[str, np.ndarray], no: dict[str, np.ndarray],
                     vals: dict[str, np.ndarray], t: int) -> None:  # fmt: skip
        """Write ``t <= capacity_per_env`` validated rows."""
        st, side, disc_store = self._storage, self._side, self._disc
        if st is None or side is None or disc_store is None:  # _allocate sets all three
            raise SpecError("specs: storage missing after validation")
        n = self.num_envs
        if not self.store_next_obs_once:
            vals.update(o)
            vals.update({"next_" + k: v for k, v in no.items()})
            st.write_block(vals)
            return
        te, tr = vals["terminated"], vals["truncated"]
        zero = bytes(te.size)  # bool bytes are 0/1: all-zero bytes <=> no episode ended
        done = te | tr if te.tobytes() != zero or tr.tobytes() != zero else None
        c, g0 = st.cursor, st.rows_written
        if self._prev_open_any:  # is obs[0] the pending next_obs of its column?
            pend = self._pending or self._pending_bytes(st, c)
            changed = [k for k, p in zip(o, pend, strict=True) if o[k][0].tobytes() != p]
            if changed:  # a discontinuity: keep the pending next_obs of those columns
                prev = {k: _from_bytes(pend[i], st.specs[k], n) for i, k in enumerate(o)}
                if n == 1:
                    jump = self._prev_open
                else:
                    jump = np.zeros(n, dtype=bool)
                    for k in changed:
                        jump |= _differ(o[k][0], prev[k], n)
                    jump &= self._prev_open
                if n == 1 or jump.any():
                    cols = np.flatnonzero(jump)
                    kept = self._aside({k: v[cols] for k, v in prev.items()})
                    disc_store.append((g0 - 1) * n + cols, kept, self._min_live_key())
        if t > 1:  # jumps inside the block
            jump = np.zeros((t - 1, n), dtype=bool)
            for k in o:
                jump |= _differ(no[k][:-1], o[k][1:], (t - 1, n))
            if done is not None:
                jump &= ~done[:-1]
        vals.update(o)
        st.write_block(vals)
        last = {k: v[-1] for k, v in no.items()}
        st.put_row(st.cursor, last)
        self._pending = [v.tobytes() for v in last.values()]
        if done is not None:
            ti, ni = np.nonzero(done)
            kept = self._aside({k: v[ti, ni] for k, v in no.items()})
            side.append((g0 + ti) * n + ni, kept, self._min_live_key())
        if t > 1 and jump.any():
            ti, ni = np.nonzero(jump)
            kept = self._aside({k: v[ti, ni] for k, v in no.items()})
            disc_store.append((g0 + ti) * n + ni, kept, self._min_live_key())
        po = self._prev_open
        if done is not None:
            np.logical_not(done[-1], out=po)
            b = po.tobytes()
            self._prev_open_any, self._prev_all = b != bytes(n), b == b"\x01" * n
        elif not self._prev_all:  # every episode goes on
            po[:] = True
            self._prev_open_any = self._prev_all = True

    def _aside(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``next_obs`` items as the side stores keep them: whole, or their newest frame on the
        frames layout (the rest of the stack is its ``obs``'s, rebuilt by ``_patch``)."""
        store, specs = self._side, self.specs
        if self._layout.kind != "frames" or store is None or specs is None:
            return values
        ax, kept = self._layout.stack_axis, store.specs
        return {k: v if kept[k] == specs[k] else newest_frame(v, ax, len(kept[k].shape))
                for k, v in values.items()}  # fmt: skip

    def _pending_bytes(self, st: Storage, row: int) -> list[bytes]:
        """Bytes of the pending ``next_obs`` row (read from the storage after a load)."""
        if self._pending is None:
            n = self.num_envs
            got = st.gather(row * n + np.arange(n), list(self._obs_names))
            self._pending = [got[k].tobytes() for k in self._obs_names]
        return self._pending

    _obs_names: list[str]
    _layout: StorageLayout

    def _min_live_key(self) -> int:
        """Smallest side-store key still referenced by a stored transition."""
        return self._window()[0]


def _differ(a: np.ndarray, b: np.ndarray, lead: Any) -> np.ndarray:
    """Per item of the ``lead`` axes: do ``a`` and ``b`` differ in any byte? (Bytes, not
    values: a successor is continuous only when it is bit for bit the next ``obs``, so that
    ``-0.0`` and NaN payloads come back exactly.)"""
    lead = (lead,) if isinstance(lead, int) else lead
    a8 = np.ascontiguousarray(a).view(np.uint8).reshape(*lead, -1)
    b8 = np.ascontiguousarray(b).view(np.uint8).reshape(*lead, -1)
    return (a8 != b8).any(axis=-1)


def _from_bytes(b: bytes, spec: FieldSpec, n: int) -> np.ndarray:
    return np.frombuffer(b, dtype=spec.dtype).reshape(n, *spec.shape)


def _shape(name: str, value: Any) -> tuple[int, ...]:
    """``np.shape(value)``; a value numpy cannot read as an array is a named SpecError."""
    try:
        return tuple(np.shape(value))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise SpecError(f"{name}: expected an array, got {type(value).__name__}: {exc}") from exc
