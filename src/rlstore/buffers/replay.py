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

Composition. The ring is any :class:`~rlstore.storage.Storage` (``storage=``: memory by
default, memory-mapped files with :meth:`StorageLayout.memmap`), touched only through its
protocol; the sampler is any :class:`~rlstore.samplers.Sampler` (``sampler=``: uniform by
default, or :class:`~rlstore.samplers.PrioritizedSampler`). Transition ids are
``global_row * num_envs + env`` (``global_row`` counts every row ever written), so they stay
valid while the transition is stored and tell when it was overwritten. The one write path
(``add`` / ``extend``: validation, discontinuity detection) is ``_replay_write.py``; saving,
loading (checked whole) and the memory-mapped ``flush`` / ``open`` are ``_replay_state.py``.

Example:
    >>> import numpy as np
    >>> buf = ReplayBuffer(1000, seed=0)
    >>> buf.add(np.zeros(4), 1, 1.0, np.ones(4), False, False)
    >>> buf.add(np.ones(4), 0, 0.5, np.full(4, 2.0), True, False)
    >>> len(buf), buf.metadata()["side_entries"]  # one final observation kept aside
    (2, 1)
    >>> batch = buf.sample(2)
    >>> tuple(batch.next_obs.shape), batch.next_obs.dtype, batch.weights.tolist()
    ((2, 4), torch.float32, [1.0, 1.0])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from rlstore._checks import as_device, check_count
from rlstore.buffers._replay_state import ReplayState, side_specs, stored_specs
from rlstore.buffers._replay_write import ReplayWriter, WritePlan
from rlstore.errors import (
    CapacityError,
    ConfigError,
    EmptyBufferError,
)
from rlstore.samplers import SampledIds, Sampler, make_sampler
from rlstore.samplers.uniform import check_ids
from rlstore.specs import FieldSpec, TransitionSchema
from rlstore.storage import Storage, StorageLayout
from rlstore.storage.frames import restack
from rlstore.storage.ring import SideStore

__all__ = ["ReplayBuffer", "ReplayBatch"]


class ReplayBatch(NamedTuple):
    """A sample of ``B`` transitions as torch tensors on the buffer's device.

    Attributes:
        obs: ``(B, *obs_shape)`` (or a dict of them), stored dtype (uint8 stays uint8).
        action: ``(B, *action_shape)``.
        reward: ``(B,)`` float32 (or the reward spec's shape/dtype).
        next_obs: the true successor of ``obs``: the final observation for ended episodes.
        terminated: ``(B,)`` bool; use ``1 - terminated`` as the bootstrap mask.
        truncated: ``(B,)`` bool; time-limit ends (bootstrap from ``next_obs``).
        extras: ``{name: (B, *shape)}`` for any extra field (e.g. ``hidden``).
        indices: ``(B,)`` int64 numpy transition ids ``global_row * num_envs + env`` (pass
            them to :meth:`ReplayBuffer.update_priorities`).
        weights: ``(B,)`` float32 importance weights (ones for uniform sampling).
    """

    obs: torch.Tensor | dict[str, torch.Tensor]
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor | dict[str, torch.Tensor]
    terminated: torch.Tensor
    truncated: torch.Tensor
    extras: dict[str, torch.Tensor]
    indices: np.ndarray
    weights: torch.Tensor


class ReplayBuffer(ReplayWriter, ReplayState):
    """FIFO ring of transitions, sampled uniformly (default) or by priority, with replacement.

    Args:
        capacity: total transitions kept (> 0); rounded up to a multiple of ``num_envs``.
        num_envs: env columns; every ``add`` writes one transition per env.
        specs: ``{name: FieldSpec}`` (or the JSON list from :meth:`config`); inferred from the
            first add when ``None``. Needs ``obs`` (or ``obs.<key>``) and ``action``;
            ``reward`` (float32), ``terminated``/``truncated`` (bool) default; other names are
            extras.
        device: torch device of sampled tensors (storage stays in host memory).
        seed: int, ``np.random.Generator`` or ``None`` for the sampler built here (give a
            sampler object its own seed instead).
        store_next_obs_once: compact layout (default) or plain per-row ``next_obs``.
        allow_nonfinite: accept NaN/inf in float fields (rejected by default).
        storage: a :class:`~rlstore.storage.StorageLayout` (or its dict): memory (default) or
            ``StorageLayout.memmap(directory, keep=...)``.
        sampler: ``None`` (uniform), a :class:`~rlstore.samplers.PrioritizedSampler` (or a
            :class:`~rlstore.samplers.UniformSampler`), or a sampler's ``config()`` dict.
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
        storage: StorageLayout | Mapping[str, Any] | None = None,
        sampler: Sampler | Mapping[str, Any] | None = None,
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
        self._layout = StorageLayout.parse(storage)
        if seed is not None and not isinstance(sampler, (Mapping, type(None))):
            raise ConfigError(
                "seed: give the seed to the sampler object, or pass its config() dict with "
                "seed=..., not both"
            )
        self._seed = int(seed) if isinstance(seed, (int, np.integer)) else None
        self._sampler = make_sampler(sampler, seed)
        self.specs: dict[str, FieldSpec] | None = None
        self._schema: TransitionSchema | None = None
        self._storage: Storage | None = None
        self._side: SideStore | None = None  # final observations of ended episodes
        self._disc: SideStore | None = None  # next_obs of discontinuous (non-done) rows
        self._pending: list[bytes] | None = None
        self._plan: WritePlan | None = None
        self._prev_open = np.zeros(self.num_envs, dtype=bool)
        self._prev_open_any = self._prev_all = False
        self._clean = False  # a memory-mapped ring as its last flush left it (see flush)
        parsed = TransitionSchema.parse(specs)
        if parsed is not None:
            self._allocate(parsed)
        slots = (self.capacity_per_env + 1) * self.num_envs  # a spare row: the pending next_obs
        try:  # last: a refused buffer leaves the caller's sampler unbound
            self._sampler.bind(slots)
        except ConfigError as exc:
            remove = getattr(self._storage, "remove", None)  # a memory-mapped one's files
            if remove is not None:
                remove()
            raise ConfigError(
                f"sampler: {exc}; the buffer binds its sampler to its {slots} slots, so build "
                "the sampler without a capacity (e.g. PrioritizedSampler(alpha=0.6))"
            ) from exc

    # ------------------------------------------------------------------ layout
    def _allocate(self, specs: dict[str, FieldSpec], storage: Storage | None = None) -> None:
        """Build the schema and storage of ``specs``; nothing is assigned before every
        allocation succeeded (a failed one raises :class:`CapacityError`, buffer unchanged)."""
        schema = TransitionSchema(specs, allow_nonfinite=self.allow_nonfinite)
        if storage is None:
            stored = stored_specs(specs, self.store_next_obs_once)
            storage = self._layout.build(self.capacity_per_env + 1, self.num_envs, stored)
        obs_specs = side_specs(specs, self._layout)
        side, disc = SideStore(obs_specs), SideStore(obs_specs, capacity=1)
        self.specs, self._schema = schema.specs, schema
        self._obs_names, self._dict_obs = schema.obs_names, schema.dict_obs
        self._extra_names = schema.extra_names
        self._storage, self._side, self._disc = storage, side, disc
        self._plan = WritePlan(schema, self.num_envs, self.allow_nonfinite,
                               self.store_next_obs_once, list(storage.specs))  # fmt: skip
        self._pending = None

    # ------------------------------------------------------------------ reading
    def _rows(self) -> int:
        return 0 if self._storage is None else min(self._storage.size, self.capacity_per_env)

    def _window(self) -> tuple[int, int]:
        """Live transition ids ``[lo, hi)``."""
        st = self._storage
        if st is None:
            return 0, 0
        n = self.num_envs
        return (st.rows_written - self._rows()) * n, st.rows_written * n

    def __len__(self) -> int:
        """Number of stored (sampleable) transitions."""
        return self._rows() * self.num_envs

    @property
    def nbytes(self) -> int:
        """Bytes of all stored arrays (ring, side store, bookkeeping); 0 before the first add."""
        if self._storage is None or self._side is None or self._disc is None:
            return 0
        return self._storage.nbytes + self._side.nbytes + self._disc.nbytes + self._prev_open.nbytes

    def _check_batch(self, batch_size: int) -> int:
        check_count("batch_size", batch_size)
        cap = self.capacity_per_env * self.num_envs  # capacity rounded up to whole rows
        if batch_size > cap:
            held = (
                "" if cap == self.capacity else f" ({self.capacity} rounded up to whole env rows)"
            )
            raise CapacityError(f"batch_size: expected <= capacity={cap}{held}, got {batch_size}")
        size = len(self)
        if batch_size > size:
            raise EmptyBufferError(
                f"batch_size: expected <= stored transitions={size}, got {batch_size}"
            )
        return int(batch_size)

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """Draw flat transition indices ``row * num_envs + env`` (row 0 = oldest), int64, by
        the buffer's sampler (for :meth:`gather`)."""
        return self.sample_ids(batch_size).indices - self.first_id

    def sample_ids(self, batch_size: int, beta: float | None = None) -> SampledIds:
        """Draw ``batch_size`` transition ids and importance weights by the buffer's sampler
        (what :meth:`sample` draws; ``ids - first_id`` are :meth:`gather` indices)."""
        return self._sampler.sample(self._check_batch(batch_size), beta)

    @property
    def first_id(self) -> int:
        """Id of the oldest stored transition (ids count every transition ever added)."""
        return self._window()[0]

    def gather(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Numpy arrays of the transitions at flat indices (see :meth:`sample_indices`).

        Returns ``{field: (B, ...)}`` with stored field names plus ``next_obs`` /
        ``next_obs.<key>``. Reading never mutates the buffer.

        Raises:
            EmptyBufferError: nothing was added yet.
            SpecError: ``indices`` not a 1-D integer array, or an index outside
                ``[0, len(self))``.
        """
        if self._storage is None:
            raise EmptyBufferError("indices: the buffer holds no transition yet (add first)")
        return self._gather_ids(check_ids("indices", indices, len(self)) + self._window()[0])

    def _gather_ids(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions of live ids (checked by the caller)."""
        st, side, disc = self._storage, self._side, self._disc
        if st is None or side is None or disc is None:
            raise EmptyBufferError("indices: the buffer holds no transition yet (add first)")
        n, rows = self.num_envs, st.rows
        if n == 1:
            flat = ids % rows
            succ = flat + 1
            succ[succ == rows] = 0
        else:
            g, col = np.divmod(ids, n)
            phys = g % rows
            flat = phys * n + col
            succ = (phys + 1) % rows * n + col
        out = st.gather(flat)
        if not self.store_next_obs_once:
            return out
        out.update({"next_" + k: v for k, v in st.gather(succ, self._obs_names).items()})
        if side.n:  # every done transition has its final obs in `side`
            where = np.flatnonzero(out["terminated"] | out["truncated"])
            if where.size:
                self._patch(out, side, where, ids[where])
        if disc.n:
            self._patch(out, disc, np.arange(len(ids)), ids)
        return out

    def _patch(
        self, out: dict[str, np.ndarray], store: SideStore, where: np.ndarray, keys: np.ndarray
    ) -> None:
        hit, pos = store.lookup(keys)
        if hit.any():
            w, p = where[hit], pos[hit]
            for k in self._obs_names:
                got, spec = store.arrays[k][p], store.specs[k]
                if self.specs is not None and spec != self.specs[k]:  # a newest frame only
                    got = restack(out[k][w], got, self._layout.stack_axis, len(spec.shape))
                out["next_" + k][w] = got

    def sample(self, batch_size: int, beta: float | None = None) -> ReplayBatch:
        """Sample ``batch_size`` stored transitions with replacement, by the buffer's sampler.

        Args:
            batch_size: transitions to draw.
            beta: importance exponent of a prioritized sampler for this batch (its own
                ``beta`` or schedule when ``None``); ignored by uniform sampling.

        Returns:
            :class:`ReplayBatch` of torch tensors on ``device``, leading axis ``batch_size``,
            with the drawn ``indices`` (ids) and importance ``weights``.

        Raises:
            CapacityError: ``batch_size <= 0`` or ``> capacity``.
            EmptyBufferError: ``batch_size`` larger than the number of stored transitions.
        """
        drawn = self.sample_ids(batch_size, beta)
        arrays = self._gather_ids(drawn.indices)
        dev = self.device
        if dev.type == "cpu":
            t = {k: torch.from_numpy(v) for k, v in arrays.items()}
            weights = torch.from_numpy(drawn.weights)
        else:
            t = {k: torch.from_numpy(v).to(dev, non_blocking=True) for k, v in arrays.items()}
            weights = torch.from_numpy(drawn.weights).to(dev, non_blocking=True)
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
            drawn.indices,
            weights,
        )

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Set the priorities (e.g. ``|TD error|``) of sampled transitions by their ids
        (``batch.indices``); ids overwritten since they were sampled are ignored.

        Raises:
            ConfigError: the buffer samples uniformly.
            SpecError: malformed ids or priorities (negative, NaN, inf); nothing changes.
        """
        self._sampler.update_priorities(indices, priorities)

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
            "storage": self._layout.to_json(),
            "sampler": self._sampler.config(),
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
