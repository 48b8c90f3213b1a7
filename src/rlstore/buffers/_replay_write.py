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
    def _validate(
        self, lead: tuple[int, ...], obs: Any, next_obs: Any, core: tuple, extra: dict[str, Any]
    ) -> tuple[dict, dict, dict]:
        if self._schema is None:
            raise SpecError("specs: buffer has no schema yet (add or pass specs first)")
        return self._schema.validate(lead, obs, next_obs, core, extra)

    def _infer(self, lead_ndim: int, obs: Any, action: Any, reward: Any, extra: dict) -> None:
        self._allocate(TransitionSchema.infer(lead_ndim, obs, action, reward, extra))

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
        if self.specs is None:
            single = n == 1 and np.ndim(reward) == 0
            self._infer(0 if single else 1, obs, action, reward, extra)
            if self._fast is not None and not extra:  # a first add may take the fast path too
                return self.add(obs, action, reward, next_obs, terminated, truncated)
        o, no, vals = self._validate(
            (n,), obs, next_obs, (action, reward, terminated, truncated), extra
        )
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
        if np.ndim(reward) < 1:
            raise SpecError(f"reward: expected shape (T, {n}), got {np.shape(reward)}")
        t = int(np.shape(reward)[0])
        if self.specs is None:
            self._infer(2, obs, action, reward, extra)
        o, no, vals = self._validate(
            (t, n), obs, next_obs, (action, reward, terminated, truncated), extra
        )
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
