"""Off-policy FIFO replay buffer storing each observation once.

Layout. Fields live in a :class:`~rlstore.storage.RingStorage` of ``C + 1`` rows by
``num_envs`` columns (``C = capacity_per_env = ceil(capacity / num_envs)``); one add writes one
row (one transition per env). Row ``t`` of column ``n`` holds ``obs, action, reward,
terminated, truncated`` (+ extras) of one transition. Its ``next_obs`` is not stored:

* it is ``obs`` of row ``t + 1`` of the same column when the episode went on and the stream was
  continuous (the next add's ``obs`` equals this ``next_obs``);
* otherwise (``terminated | truncated``, or a discontinuous stream) it sits in a compact keyed
  :class:`~rlstore.storage.SideStore` under the key ``global_row * num_envs + n``;
* the newest row's pending ``next_obs`` is written into the obs field of the next physical row
  (the spare ``+1`` row), so every stored transition is sampleable and none reads a stale or
  unwritten successor.

With ``store_next_obs_once=False`` ``next_obs`` is stored per row (twice the observation
memory); it is the plain twin the compact layout is tested against: both draw identical batches.

Modules. This file holds the layout, reading (``sample`` / ``gather``), ``warm`` and state; the
write path (``add`` / ``extend``, validation, discontinuity detection) is the mixin
``_replay_write.ReplayWriter``, whose fast add path for already well-typed input lives in
``_replay_fast.py`` (tested byte for byte against the general path).

Example:
    >>> import numpy as np
    >>> buf = ReplayBuffer(1000, seed=0)
    >>> buf.add(np.zeros(4), 1, 1.0, np.ones(4), False, False)
    >>> buf.add(np.ones(4), 0, 0.5, np.full(4, 2.0), True, False)
    >>> len(buf), buf.metadata()["side_entries"]  # one final observation kept aside
    (2, 1)
    >>> batch = buf.sample(2)
    >>> tuple(batch.next_obs.shape), batch.next_obs.dtype
    ((2, 4), torch.float32)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from rlstore._checks import as_device, check_count
from rlstore._output_pool import OutputPool
from rlstore.buffers._replay_fast import FastPlan
from rlstore.buffers._replay_state import checked_state
from rlstore.buffers._replay_write import ReplayWriter
from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.samplers import UniformSampler
from rlstore.specs import FieldSpec, TransitionSchema
from rlstore.storage import RingStorage, SideStore

__all__ = ["ReplayBuffer", "ReplayBatch"]

Obs = Any  # np.ndarray-like, or a one-level dict of them


POOLED_BATCH_MIN_BYTES = 1 << 20
"""Sampled batches of at least this many bytes reuse pooled memory (:mod:`rlstore._output_pool`):
measured on 256 x 84x84x4 images, 4.3 ms per sample with fresh memory (page faults), 0.8 ms with
reused memory; below it, fresh ``np.empty`` arrays are cheaper than the pool's bookkeeping."""


class ReplayBatch(NamedTuple):
    """A uniform sample of ``B`` transitions as torch tensors on the buffer's device.

    Attributes:
        obs: ``(B, *obs_shape)`` (or a dict of them), stored dtype (uint8 stays uint8).
        action: ``(B, *action_shape)``.
        reward: ``(B,)`` float32 (or the reward spec's shape/dtype).
        next_obs: the true successor of ``obs``: the final observation for ended episodes.
        terminated: ``(B,)`` bool; use ``1 - terminated`` as the bootstrap mask.
        truncated: ``(B,)`` bool; time-limit ends (bootstrap from ``next_obs``).
        extras: ``{name: (B, *shape)}`` for any extra field (e.g. ``hidden``).
    """

    obs: torch.Tensor | dict[str, torch.Tensor]
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor | dict[str, torch.Tensor]
    terminated: torch.Tensor
    truncated: torch.Tensor
    extras: dict[str, torch.Tensor]


class ReplayBuffer(ReplayWriter):
    """FIFO ring of transitions with uniform sampling with replacement.

    Args:
        capacity: total transitions kept (> 0); rounded up to a multiple of ``num_envs``.
        num_envs: env columns; every ``add`` writes one transition per env.
        specs: ``{name: FieldSpec}`` (or the JSON list from :meth:`config`); inferred from the
            first add when ``None``. Needs ``obs`` (or ``obs.<key>``) and ``action``;
            ``reward`` (float32), ``terminated``/``truncated`` (bool) default; other names are
            extras.
        device: torch device of sampled tensors (storage stays in host memory).
        seed: int, ``np.random.Generator`` or ``None`` for the sampler.
        store_next_obs_once: compact layout (default) or plain per-row ``next_obs``.
        allow_nonfinite: accept NaN/inf in float fields (rejected by default).
    """

    def __init__(
        self,
        capacity: int,
        *,
        num_envs: int = 1,
        specs: Mapping[str, FieldSpec] | Sequence[Mapping[str, Any]] | None = None,
        device: str | torch.device = "cpu",
        seed: int | np.random.Generator | None = None,
        store_next_obs_once: bool = True,
        allow_nonfinite: bool = False,
    ):
        self.capacity = check_count("capacity", capacity)
        self.num_envs = check_count("num_envs", num_envs)
        if self.num_envs > np.iinfo(np.int32).max:  # one flag per env is allocated below
            raise CapacityError(f"num_envs: expected at most 2**31 - 1 envs, got {num_envs!r}")
        self.capacity_per_env = math.ceil(self.capacity / self.num_envs)
        self.device = as_device(device)
        for name, flag in (
            ("store_next_obs_once", store_next_obs_once),
            ("allow_nonfinite", allow_nonfinite),
        ):
            if not isinstance(flag, (bool, np.bool_)):
                raise ConfigError(f"{name}: expected a bool, got {flag!r}")
        self.store_next_obs_once = bool(store_next_obs_once)
        self.allow_nonfinite = bool(allow_nonfinite)
        self._seed = int(seed) if isinstance(seed, (int, np.integer)) else None
        self._sampler = UniformSampler(seed)
        self.specs: dict[str, FieldSpec] | None = None
        self._schema: TransitionSchema | None = None
        self._storage: RingStorage | None = None
        self._side: SideStore | None = None  # final observations of ended episodes
        self._disc: SideStore | None = None  # next_obs of discontinuous (non-done) rows
        self._fast: FastPlan | None = None  # fast add path (common layout only)
        self._pending: tuple[Any, int, bytes] | None = None  # see _replay_fast
        self._prev_open = np.zeros(self.num_envs, dtype=bool)
        self._prev_open_any = False
        self._prev_all = False
        self._outputs = OutputPool()  # reused memory of sampled batches (compiled gather)
        parsed = TransitionSchema.parse(specs)
        if parsed is not None:
            self._allocate(parsed)

    # ------------------------------------------------------------------ layout
    def _allocate(self, specs: dict[str, FieldSpec], storage: RingStorage | None = None) -> None:
        """Build the schema and storage of ``specs``; nothing is assigned before every
        allocation succeeded (a failed one raises :class:`CapacityError`, buffer unchanged)."""
        schema = TransitionSchema(specs, allow_nonfinite=self.allow_nonfinite)
        next_names = {k: "next_" + k for k in schema.obs_names}
        stored = dict(specs)
        if not self.store_next_obs_once:
            stored.update(
                {n: FieldSpec(n, specs[k].shape, specs[k].dtype) for k, n in next_names.items()}
            )
        if storage is None:
            storage = RingStorage(self.capacity_per_env + 1, self.num_envs, stored)
        elif storage.specs != stored or storage.arrays["reward"].shape[:2] != (
            self.capacity_per_env + 1,
            self.num_envs,
        ):
            raise CheckpointError(
                f"state_dict.storage: expected fields {list(stored)} with "
                f"{self.capacity_per_env + 1} rows x {self.num_envs} envs, got "
                f"{list(storage.specs)} with "
                f"{storage.arrays['reward'].shape[:2]}"
            )
        side = SideStore({k: specs[k] for k in schema.obs_names})
        disc = SideStore({k: specs[k] for k in schema.obs_names}, capacity=1)
        self.specs, self._schema = schema.specs, schema
        self._obs_names, self._dict_obs = schema.obs_names, schema.dict_obs
        self._extra_names = schema.extra_names
        self._next_names = next_names
        self._storage, self._side, self._disc = storage, side, disc
        self._build_fast()

    def _build_fast(self) -> None:
        """Fast add plan (views into the storage) for the common layout, else ``None``."""
        st, specs, schema = self._storage, self.specs, self._schema
        self._fast = self._pending = None
        if st is not None and specs is not None and schema is not None:
            if FastPlan.applies(
                specs,
                schema,
                store_next_obs_once=self.store_next_obs_once,
                allow_nonfinite=self.allow_nonfinite,
            ):
                self._fast = FastPlan(specs, st, self.num_envs)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the fast plan: its views are rebuilt on the unpickled storage."""
        state = dict(self.__dict__)
        state["_fast"] = state["_pending"] = state["_outputs"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._outputs = OutputPool()
        self._build_fast()

    # ------------------------------------------------------------------ reading
    def _rows(self) -> int:
        return 0 if self._storage is None else min(self._storage.size, self.capacity_per_env)

    def __len__(self) -> int:
        """Number of stored (sampleable) transitions."""
        return self._rows() * self.num_envs

    @property
    def nbytes(self) -> int:
        """Bytes of all stored arrays (ring, side store, bookkeeping); 0 before the first add."""
        if self._storage is None or self._side is None or self._disc is None:
            return 0
        return self._storage.nbytes + self._side.nbytes + self._disc.nbytes + self._prev_open.nbytes

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """Draw flat transition indices ``row * num_envs + env`` (row 0 = oldest), int64."""
        check_count("batch_size", batch_size)
        cap = self.capacity_per_env * self.num_envs  # capacity rounded up to whole rows
        if batch_size > cap:
            raise CapacityError(f"batch_size: expected <= capacity={cap}, got {batch_size}")
        size = len(self)
        if batch_size > size:
            raise EmptyBufferError(
                f"batch_size: expected <= stored transitions={size}, got {batch_size}"
            )
        return self._sampler.sample(size, int(batch_size))

    def gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Numpy arrays of the transitions at flat indices (see :meth:`sample_indices`).

        Returns ``{field: (B, ...)}`` with stored field names plus ``next_obs`` /
        ``next_obs.<key>``. Reading never mutates the buffer.

        Raises:
            EmptyBufferError: nothing was added yet.
            SpecError: ``indices`` not a 1-D integer array, or an index outside
                ``[0, len(self))``.
        """
        st, side, disc = self._storage, self._side, self._disc
        if st is None or side is None or disc is None:
            raise EmptyBufferError("indices: the buffer holds no transition yet (add first)")
        if type(indices) is not np.ndarray or indices.dtype != np.int64:
            indices = _check_indices(indices)
        elif indices.ndim != 1:
            raise SpecError(f"indices: expected a 1-D integer array, got shape {indices.shape}")
        f = self._fast
        if f is not None and f.writer is not None:
            try:
                return self._gather_compiled(f.writer, indices)
            except IndexError as exc:  # the compiled ring checks the range as it reads
                raise SpecError(str(exc)) from None
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            bad = indices[(indices < 0) | (indices >= len(self))][0]
            raise SpecError(f"indices: expected values in [0, {len(self)}), got {bad}")
        n, rows = self.num_envs, st.capacity_per_env
        if n == 1:
            g = indices + (st.rows_written - self._rows())
            col = None
            phys = g % rows
            flat, succ = phys, phys + 1
            succ[succ == rows] = 0
        else:
            lrow, col = np.divmod(indices, n)
            g = lrow + (st.rows_written - self._rows())
            phys = g % rows
            flat = phys * n + col
            succ = (phys + 1) % rows * n + col
        out = st.gather(flat)
        if not self.store_next_obs_once:
            return out
        out.update({"next_" + k: v for k, v in st.gather(succ, self._obs_names).items()})
        done = out["terminated"] | out["truncated"]
        if side.n and done.any():  # every done transition has its final obs in `side`
            where = np.flatnonzero(done)
            keys = g[where] * n + col[where] if col is not None else g[where]
            self._patch(out, side, where, keys)
        if disc.n:
            self._patch(out, disc, np.arange(len(flat)), g * n + col if col is not None else g)
        return out

    def _gather_compiled(self, writer: Any, indices: np.ndarray) -> dict[str, np.ndarray]:
        """:meth:`gather` by the compiled ring (one pass over the records), then the same
        side-store patches; tested equal to the numpy path (``test_replay_gather.py``)."""
        st, side, disc = self._storage, self._side, self._disc
        rec = None if st is None else st.records  # the compiled ring exists only for records
        if st is None or side is None or disc is None or rec is None:  # gather checked these
            raise EmptyBufferError("indices: the buffer holds no transition yet (add first)")
        idx = np.ascontiguousarray(indices, dtype=np.int64)
        b, specs = len(idx), st.specs
        fields = {k: ((b, *specs[k].shape), specs[k].dtype) for k in specs}
        fields["next_obs"] = fields["obs"]
        if b * rec.dtype.itemsize >= POOLED_BATCH_MIN_BYTES:
            out = self._outputs.take(fields)  # large (image) batches: no page faults
        else:  # small batches come from the heap cheaply; the pool's bookkeeping would cost more
            out = {k: np.empty(shape, dtype) for k, (shape, dtype) in fields.items()}
        offset = st.rows_written - self._rows()
        done = writer.gather(
            idx, len(self), offset, out["obs"], out["action"], out["reward"],
            out["terminated"], out["truncated"], out["next_obs"],
        )  # fmt: skip
        if (done and side.n) or disc.n:
            n = self.num_envs
            g = idx // n + offset
            keys = g * n + idx % n  # global flat key of each sampled transition
            if done and side.n:
                where = np.flatnonzero(out["terminated"] | out["truncated"])
                self._patch(out, side, where, keys[where])
            if disc.n:
                self._patch(out, disc, np.arange(b), keys)
        return out

    def _patch(
        self, out: dict[str, np.ndarray], store: SideStore, where: np.ndarray, keys: np.ndarray
    ) -> None:
        hit, pos = store.lookup(keys)
        if hit.any():
            w, p = where[hit], pos[hit]
            for k in self._obs_names:
                out["next_" + k][w] = store.arrays[k][p]

    def sample(self, batch_size: int) -> ReplayBatch:
        """Uniformly sample ``batch_size`` stored transitions with replacement.

        Returns:
            :class:`ReplayBatch` of torch tensors on ``device``, leading axis ``batch_size``.

        Raises:
            CapacityError: ``batch_size <= 0`` or ``> capacity``.
            EmptyBufferError: ``batch_size`` larger than the number of stored transitions.
        """
        arrays = self.gather(self.sample_indices(batch_size))
        dev = self.device
        if dev.type == "cpu":
            t = {k: torch.from_numpy(v) for k, v in arrays.items()}
        else:
            t = {k: torch.from_numpy(v).to(dev, non_blocking=True) for k, v in arrays.items()}
        obs: torch.Tensor | dict[str, torch.Tensor] = t.get("obs", {})
        nxt: torch.Tensor | dict[str, torch.Tensor] = t.get("next_obs", {})
        if self._dict_obs:
            obs = {k[4:]: t[k] for k in self._obs_names}
            nxt = {k[4:]: t["next_" + k] for k in self._obs_names}
        return ReplayBatch(
            obs,
            t["action"],
            t["reward"],
            nxt,
            t["terminated"],
            t["truncated"],
            {k: t[k] for k in self._extra_names},
        )

    # ------------------------------------------------------------------ filling
    def warm(
        self,
        policy: Callable[[Any], Any] | None = None,
        n_samples: int = 1000,
        *,
        env_id: str = "CartPole-v1",
        env: Any = None,
        num_envs: int = 8,
        seed: int | None = None,
    ) -> int:
        """Fill the buffer from a gymnasium vector env (see :func:`rlstore.vector.fill_buffer`).

        Args:
            policy: batched ``obs -> actions``; uniform random actions when ``None``.
            n_samples: transitions to add (rounded up to a multiple of the buffer's num_envs).
            env_id: gymnasium id used when ``env`` is not given (SAME_STEP autoreset).
            env: an existing ``gymnasium.vector.VectorEnv`` (any autoreset mode).
            num_envs: envs of the vector env created from ``env_id``.
            seed: seed of the env reset and of the random policy.

        Returns:
            Number of transitions added.
        """
        from rlstore.vector import fill_buffer

        return fill_buffer(
            self, policy, n_samples, env_id=env_id, env=env, num_envs=num_envs, seed=seed
        )

    # ------------------------------------------------------------------ state
    def config(self) -> dict[str, Any]:
        """JSON-able constructor kwargs: ``ReplayBuffer(**buf.config())`` rebuilds an empty twin."""
        return {
            "capacity": self.capacity,
            "num_envs": self.num_envs,
            "specs": None if self.specs is None else [s.to_json() for s in self.specs.values()],
            "device": str(self.device),
            "seed": self._seed,
            "store_next_obs_once": self.store_next_obs_once,
            "allow_nonfinite": self.allow_nonfinite,
        }

    def metadata(self) -> dict[str, Any]:
        """JSON-able summary: capacity, num_envs, size, nbytes, bytes per transition, specs..."""
        size = len(self)
        return {
            **self.config(),
            "capacity_per_env": self.capacity_per_env,
            "size": size,
            "nbytes": self.nbytes,
            "bytes_per_transition": self.nbytes / size if size else None,
            "side_entries": 0 if self._side is None else self._side.n,
            "discontinuities": 0 if self._disc is None else self._disc.n,
            "rows_written": 0 if self._storage is None else self._storage.rows_written,
        }

    def state_dict(self) -> dict[str, Any]:
        """Nested dict of numpy arrays and JSON-able scalars restoring this buffer exactly
        (contents, cursor, size, pending observations, sampler RNG state)."""
        return {
            "config": self.config(),
            "storage": None if self._storage is None else self._storage.state_dict(),
            "side": None if self._side is None else self._side.state_dict(),
            "disc": None if self._disc is None else self._disc.state_dict(),
            "prev_open": self._prev_open.copy(),
            "sampler": self._sampler.state_dict(),
        }

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; later samples equal the original's.

        The whole state is checked before the buffer changes (all or nothing): the config
        (capacity, num_envs, layout, ``allow_nonfinite``, specs), the ring's arrays and
        counters, the side stores (sorted keys, none from the future, every stored done
        transition's final observation present), the pending-observation flags, finiteness
        of float fields unless ``allow_nonfinite``, and the sampler's RNG state.

        Raises:
            CheckpointError: naming the first entry that is missing or wrong; the buffer is
                unchanged then.
        """
        new = checked_state(self, sd)
        self._sampler.load_state_dict(sd["sampler"])  # checked whole before it changes
        specs, storage, side, disc = (new.pop(k) for k in ("specs", "storage", "side", "disc"))
        if storage is None:
            self.specs = self._schema = self._storage = self._side = self._disc = None
            self._fast = self._pending = None
        else:
            self._allocate(specs, storage)
            self._side, self._disc = side, disc
        self.__dict__.update(new)


def _check_indices(indices: Any) -> np.ndarray:
    """User indices as a 1-D int64 array: integer input only (no floats, bools, objects)."""
    try:
        arr = np.asarray(indices)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise SpecError(f"indices: expected a 1-D integer array, got {indices!r}") from exc
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise SpecError(
            f"indices: expected a 1-D integer array, got {arr.dtype} of shape {arr.shape}"
        )
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise SpecError(f"indices: expected values in [0, 2**63), got {int(arr.max())}")
    return arr.astype(np.int64, copy=False)
