"""Write path of :class:`~rlstore.buffers.replay.ReplayBuffer`: ``add`` / ``extend``.

Everything that puts transitions into the ring lives here and in ``_replay_fast.py``: validation
against the schema (nothing is written before every field passed), the row / block writes, the
bookkeeping of pending ``next_obs`` and the detection of discontinuous streams (an ``obs`` that
is not the previous ``next_obs`` of its env column although no episode ended), whose true
successors go to the discontinuity side store.

Two routes lead to the same bytes:

* the **general path** (:meth:`ReplayWriter._add_general`, via
  :meth:`~rlstore.specs.TransitionSchema.validate`): any input the schema accepts (lists, safe
  casts, dict observations, extras); it is the slow, obviously-correct twin;
* the **fast path** (``_replay_fast.FastAdd``), taken first for input that needs no conversion;
  it writes nothing and hands over to the general path whenever anything is unusual.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlstore.buffers._replay_fast import _FLOAT_SCALARS, _NDARRAY, FastAdd
from rlstore.errors import SpecError
from rlstore.specs import FieldSpec, TransitionSchema
from rlstore.storage import RingStorage

__all__ = ["ReplayWriter"]


class ReplayWriter(FastAdd):
    """Mixin holding the write path of ``ReplayBuffer`` (see the module docstring).

    The attributes below are set by ``ReplayBuffer.__init__`` / ``_allocate``.
    """

    store_next_obs_once: bool
    allow_nonfinite: bool
    specs: dict[str, FieldSpec] | None
    _schema: TransitionSchema | None

    def _allocate(self, specs: dict[str, FieldSpec], storage: RingStorage | None = None) -> None:
        raise NotImplementedError  # provided by ReplayBuffer

    # ------------------------------------------------------------------ general path
    def _check(
        self,
        lead: tuple[int, ...],
        obs: Any,
        next_obs: Any,
        core: tuple[Any, Any, Any, Any],
        extra: dict[str, Any],
    ) -> tuple[TransitionSchema, tuple[dict, dict, dict]]:
        """Validate a whole add against the schema, inferring it first on the first add.

        On the first add the schema is inferred from these values and the whole transition
        (``next_obs``, flags and extras included) is validated against it before anything is
        allocated, so a rejected first add leaves the buffer exactly as constructed. The caller
        allocates (:meth:`_adopt`) only after this returned.
        """
        schema = self._schema
        if schema is None:
            action, reward = core[0], core[1]
            if lead == (1,):  # num_envs == 1: a scalar reward marks a single add
                lead_ndim = 0 if _shape("reward", reward) == () else 1
            else:
                lead_ndim = len(lead)
            if lead_ndim and _shape("reward", reward) != lead:  # the reward fixes the batch axes
                raise SpecError(f"reward: expected shape {lead} (one per env), got "
                                f"{np.shape(reward)}")  # fmt: skip
            specs = TransitionSchema.infer(lead_ndim, obs, action, reward, extra)
            schema = TransitionSchema(specs, allow_nonfinite=self.allow_nonfinite)
        return schema, schema.validate(lead, obs, next_obs, core, extra)

    def _adopt(self, schema: TransitionSchema) -> None:
        """Allocate the storage of a schema inferred by :meth:`_check` (first add only)."""
        if self._schema is None:
            self._allocate(schema.specs)

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
        f = self._fast
        if f is not None and not extra:
            w = f.writer  # compiled common case: True = written, False = nothing written
            if w is not None and w.add(self, obs, action, reward, next_obs, terminated, truncated):
                return
            if (  # the Python fast path
                type(obs) is _NDARRAY
                and type(next_obs) is _NDARRAY
                and (obs.dtype is f.odt or obs.dtype == f.odt)
                and (next_obs.dtype is f.odt or next_obs.dtype == f.odt)
            ):
                if self.num_envs == 1 and type(reward) in _FLOAT_SCALARS:
                    if self._add_fast_single(
                        f, obs, action, reward, next_obs, terminated, truncated
                    ):
                        return
                elif self._add_fast_row(f, obs, action, reward, next_obs, terminated, truncated):
                    return
        self._add_general(obs, action, reward, next_obs, terminated, truncated, extra)

    def _add_general(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        terminated: Any,
        truncated: Any,
        extra: dict[str, Any],
    ) -> None:
        """Validate everything, then write (the slow, obviously-correct twin of the fast path)."""
        n = self.num_envs
        schema, (o, no, vals) = self._check(
            (n,), obs, next_obs, (action, reward, terminated, truncated), extra
        )
        self._adopt(schema)
        st, side, disc_store = self._storage, self._side, self._disc
        if st is None or side is None or disc_store is None:  # _allocate sets all three
            raise SpecError("specs: storage missing after validation")
        done = np.asarray(vals["terminated"] | vals["truncated"]).reshape(n)
        if not self.store_next_obs_once:
            vals.update({"next_" + k: v for k, v in no.items()})
            vals.update(o)
            st.write_row(vals)
            return
        c = st.cursor
        if self._prev_open.any():
            disc = self._prev_open & self._differs(o, c)
            if disc.any():
                cols = np.flatnonzero(disc)
                disc_store.append(
                    (st.rows_written - 1) * n + cols,
                    {k: st.arrays[k][c, cols] for k in o},
                    self._min_live_key(),
                )
        vals.update(o)
        st.write_row(vals)
        c2 = st.cursor
        for k, v in no.items():
            st.arrays[k][c2] = v
        if done.any():
            cols = np.flatnonzero(done)
            side.append(
                (st.rows_written - 1) * n + cols,
                {k: st.arrays[k][c2, cols] for k in no},
                self._min_live_key(),
            )
        self._set_open(done)

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
        if len(_shape("reward", reward)) < 1 or isinstance(reward, dict):
            raise SpecError(f"reward: expected shape (T, {n}), got {np.shape(reward)}")
        t = int(np.shape(reward)[0])
        args = {"obs": obs, "action": action, "reward": reward, "next_obs": next_obs,
                "terminated": terminated, "truncated": truncated, **extra}  # fmt: skip
        lengths = {}
        for k, v in args.items():
            for kk, vv in v.items() if isinstance(v, dict) and k.endswith("obs") else [(k, v)]:
                lengths[kk if kk == k else f"{k}.{kk}"] = _shape(k, vv)[:1]
        if any(v != (t,) for v in lengths.values()):
            shown = ", ".join(f"{k}={v[0] if v else None}" for k, v in lengths.items())
            raise SpecError(f"T: expected one leading length T for every argument, got {shown}")
        schema, (o, no, vals) = self._check(
            (t, n), obs, next_obs, (action, reward, terminated, truncated), extra
        )
        self._adopt(schema)
        cap = self.capacity_per_env
        for a in range(0, t, cap):
            b = min(a + cap, t)
            self._write_block(
                {k: v[a:b] for k, v in o.items()},
                {k: v[a:b] for k, v in no.items()},
                {k: v[a:b] for k, v in vals.items()},
            )

    def _write_block(
        self, o: dict[str, np.ndarray], no: dict[str, np.ndarray], vals: dict[str, np.ndarray]
    ) -> None:
        """Write ``T <= capacity_per_env`` validated rows."""
        st, side, disc_store = self._storage, self._side, self._disc
        if st is None or side is None or disc_store is None:  # _allocate sets all three
            raise SpecError("specs: storage missing after validation")
        n, t = self.num_envs, len(vals["reward"])
        if not self.store_next_obs_once:
            vals.update({"next_" + k: v for k, v in no.items()})
            vals.update(o)
            st.write_block(vals)
            return
        done = vals["terminated"] | vals["truncated"]
        c, g0 = st.cursor, st.rows_written
        if self._prev_open_any:
            disc = self._prev_open & self._differs({k: v[0] for k, v in o.items()}, c)
            if disc.any():
                cols = np.flatnonzero(disc)
                disc_store.append(
                    (g0 - 1) * n + cols, {k: st.arrays[k][c, cols] for k in o}, self._min_live_key()
                )
        jump = np.zeros_like(done)
        for k in o if t > 1 else ():
            jump[:-1] |= (no[k][:-1] != o[k][1:]).reshape(t - 1, n, -1).any(axis=2)
        jump &= ~done
        vals.update(o)
        st.write_block(vals)
        for k, v in no.items():
            st.arrays[k][st.cursor] = v[-1]
        for store, need in ((side, done), (disc_store, jump)):
            ti, ni = np.nonzero(need)
            if ti.size:
                store.append(
                    (g0 + ti) * n + ni, {k: v[ti, ni] for k, v in no.items()}, self._min_live_key()
                )
        self._set_open(done[-1])


def _shape(name: str, value: Any) -> tuple[int, ...]:
    """``np.shape(value)``; a value numpy cannot read as an array is a named SpecError."""
    try:
        return tuple(np.shape(value))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise SpecError(f"{name}: expected an array, got {type(value).__name__}: {exc}") from exc
