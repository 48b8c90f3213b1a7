"""Sampling across S replay shards, the part of :class:`~rlstore.distributed.client.ReplayShards`
that draws (the :class:`ShardSampling` mixin; routing adds, remote calls and retries stay in
:mod:`rlstore.distributed.client`, which re-exports :class:`ShardBatch`).

Sampling. A request of ``k`` batches of ``B`` items is split over the shards by a multinomial
draw with probabilities ``mass_s / sum(mass)``: ``mass`` is a shard's size (uniform) or its
priority mass (prioritized), as of its last answer. Each shard gets one call
(``sample_many``) and every answer brings fresh statistics. So item ``i`` of shard ``s`` is
drawn with ``P(i) = mass_s / M * p_i / mass_s = p_i / M``, the global prioritized probability.

Importance weights (prioritized shards): with ``N`` live items in all, ``M`` the total mass
and ``p_min`` the smallest live priority over ALL shards,

    w_i = (N * P(i))^-beta / (N * p_min / M)^-beta = (p_min / p_i)^beta,

normalised by the one maximum ``(N p_min / M)^-beta`` of the whole replay (the weight of its
least likely item), as each local buffer does for itself; it is computed from the shard's
local ratio ``p_min_s / p_i`` as ``(p_min / p_min_s * p_min_s / p_i)^beta``. ``beta=None`` takes
the shard sampler's own beta (schedule) of the first shard in the batch.

Ids. ``ShardBatch.ids = local_id * S + shard``, for
:meth:`~rlstore.distributed.client.ReplayShards.update_priorities`.

Prefetch. ``sample_many(..., prefetch=p)`` keeps ``p`` requests of the same shape in flight:
the wait overlaps with the learner's work; the prefetched batches were drawn with the
priorities of the moment they were requested.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from rlstore._checks import check_count, real_number
from rlstore._trees import real_array
from rlstore.errors import ConfigError, EmptyBufferError, SpecError

__all__ = ["GROUPS", "ShardBatch", "ShardSampling", "send"]

_CORE = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
_NOT_EXTRA = {*_CORE, "ids", "ratio", "beta", "discount", "extras"}


class ShardBatch(NamedTuple):
    """``B`` items sampled across shards, as numpy arrays (the learner converts them).

    Attributes:
        obs, action, reward, next_obs, terminated, truncated: ``(B, ...)`` as the shards'
            buffers return them (dicts of arrays for dict observations; ``(B, L, ...)`` for
            sequence shards).
        extras: ``{name: (B, ...)}``: the buffers' extra fields, and the fields of view batches
            that have no slot here (``steps`` of n-step, ``mask`` and ``hidden`` of sequences).
        ids: ``(B,)`` int64 global ids ``local_id * num_shards + shard``.
        weights: ``(B,)`` float32 importance weights across shards (ones if uniform).
        discount: ``(B,)`` ``gamma**m`` of n-step shards (``NStepReplay``), else ``None``.
    """

    obs: Any
    action: np.ndarray
    reward: np.ndarray
    next_obs: Any
    terminated: np.ndarray
    truncated: np.ndarray
    extras: dict[str, np.ndarray]
    ids: np.ndarray
    weights: np.ndarray
    discount: np.ndarray | None = None


class _Request(NamedTuple):
    counts: np.ndarray  # (k, S)
    beta: float | None
    refs: list[Any]  # one per shard (None where the shard draws nothing)


class ShardSampling:
    """The sampling methods of :class:`~rlstore.distributed.client.ReplayShards` (module
    docstring), over its shard actors, their last statistics and its remote calls."""

    num_shards: int
    name: str
    timeout_s: float
    _rng: np.random.Generator
    _actors: list[Any]
    _stats: list[dict[str, Any]]
    _pending: deque[tuple[tuple[Any, ...], _Request]]

    if TYPE_CHECKING:

        def _get(self, s: int, ref: Any, method: str, args: tuple, deadline: float) -> Any: ...

        def _refresh(self, timeout_s: float | None = None) -> None: ...

    def _issue(self, k: int, batch_size: int, beta: float | None) -> _Request:
        masses = np.array([st["mass"] for st in self._stats], dtype=np.float64)
        if not masses.sum() > 0:
            self._refresh()
            masses = np.array([st["mass"] for st in self._stats], dtype=np.float64)
        if not masses.sum() > 0:
            raise EmptyBufferError(
                f"sample: the shards {self.name}/0..{self.num_shards - 1} hold no sampleable "
                "item yet (add first)"
            )
        size = sum(st["size"] for st in self._stats)
        if batch_size > size:
            raise EmptyBufferError(
                f"batch_size: expected <= stored items={size} over all shards, got {batch_size}"
            )
        counts = self._rng.multinomial(batch_size, masses / masses.sum(), size=k)
        refs = [
            send(a, "sample_many", (counts[:, s].tolist(), beta)) if counts[:, s].any() else None
            for s, a in enumerate(self._actors)
        ]
        return _Request(counts, beta, refs)

    def _collect(self, req: _Request, k: int, batch_size: int) -> list[ShardBatch]:
        deadline = time.monotonic() + self.timeout_s
        parts: list[list[dict[str, Any] | None]] = []
        for s, ref in enumerate(req.refs):
            if ref is None:
                parts.append([None] * len(req.counts))
                continue
            args = (req.counts[:, s].tolist(), req.beta)
            got, self._stats[s] = self._get(s, ref, "sample_many", args, deadline)
            parts.append(got)
        live = [st["pmin"] for st in self._stats if st["size"]]
        pmin = min(live) if live else 1.0
        return [self._assemble([p[j] for p in parts], pmin) for j in range(len(req.counts))]

    def _assemble(self, parts: list[dict[str, Any] | None], pmin: float) -> ShardBatch:
        have = [(s, p) for s, p in enumerate(parts) if p is not None]
        beta = have[0][1]["beta"]
        ids = _cat([p["ids"] * self.num_shards + s for s, p in have])
        w = [
            (pmin / self._stats[s]["pmin"] * p["ratio"].astype(np.float64)) ** beta for s, p in have
        ]
        first = have[0][1]
        extras = {k: _cat([p["extras"][k] for _, p in have]) for k in first.get("extras", {})}
        extras.update({k: _cat([p[k] for _, p in have]) for k in first if k not in _NOT_EXTRA})
        core = {k: _cat([p[k] for _, p in have]) for k in _CORE}
        disc = _cat([p["discount"] for _, p in have]) if "discount" in first else None
        return ShardBatch(
            **core, extras=extras, ids=ids, weights=_cat(w).astype(np.float32), discount=disc
        )

    def sample_many(
        self, k: int, batch_size: int, beta: float | None = None, *, prefetch: int = 0
    ) -> list[ShardBatch]:
        """``k`` batches of ``batch_size`` items across the shards, one call per shard.

        Args:
            k: number of batches.
            batch_size: items per batch.
            beta: importance exponent (prioritized shards); ``None``: the shards' own.
            prefetch: requests of this shape kept in flight after this one (0: none).

        Raises:
            EmptyBufferError: no shard holds a sampleable item.
            ReplayTimeoutError, ShardUnavailableError: see :mod:`rlstore.distributed.client`.
        """
        k = check_count("k", k)
        batch_size = check_count("batch_size", batch_size)
        if beta is not None:
            beta = real_number("beta", beta, 0.0, expected="a number >= 0 or None")
        depth = check_count("prefetch", prefetch, minimum=0, error=ConfigError)
        key = (k, batch_size, beta)
        req = None
        while self._pending and req is None:  # requests of another shape are dropped
            shape, pending = self._pending.popleft()
            req = pending if shape == key else None
        for attempt in range(3):
            if req is None:
                req = self._issue(k, batch_size, beta)
            while len(self._pending) < depth:
                self._pending.append((key, self._issue(k, batch_size, beta)))
            try:
                return self._collect(req, k, batch_size)
            except EmptyBufferError:  # a shard shrank (restarted) since its last answer
                if attempt == 2:
                    raise
                self._pending.clear()
                self._refresh()
                req = None
        raise AssertionError("unreachable")

    def sample(
        self, batch_size: int, beta: float | None = None, *, prefetch: int = 0
    ) -> ShardBatch:
        """One batch: ``sample_many(1, batch_size, beta, prefetch=prefetch)[0]``."""
        return self.sample_many(1, batch_size, beta, prefetch=prefetch)[0]

    def update_priorities(self, ids: Any, priorities: Any) -> None:
        """Send ``priorities`` (``(B,)``, or ``(B, T)`` TD errors for sequence shards) of the
        items ``ids`` (from :attr:`ShardBatch.ids`) to their shards.

        Raises:
            SpecError: ids not a 1-D array of ints >= 0, priorities not finite, negative
                (``(B,)``) or not of length ``len(ids)`` (nothing is sent); what a shard
                rejects.
        """
        idx = np.asarray(ids)
        if idx.ndim != 1 or idx.dtype.kind not in "iu" or (idx.size and idx.min() < 0):
            raise SpecError(f"ids: expected a 1-D array of ints >= 0, got {idx.dtype} "
                            f"{idx.shape}")  # fmt: skip
        pri = real_array("priorities", priorities)
        if pri.ndim < 1 or pri.shape[0] != idx.shape[0] or not np.isfinite(pri).all():
            raise SpecError(
                f"priorities: expected finite numbers of leading length {len(idx)} like ids, "
                f"got shape {pri.shape}"
            )
        if pri.ndim == 1 and (pri < 0).any():  # (B, T) TD errors may be negative
            raise SpecError(f"priorities: expected numbers >= 0, got {pri[pri < 0][0]}")
        idx = idx.astype(np.int64)
        shard, local = idx % self.num_shards, idx // self.num_shards
        deadline = time.monotonic() + self.timeout_s
        sent = []
        for s, actor in enumerate(self._actors):
            mine = shard == s
            if mine.any():
                args = (local[mine], pri[mine])
                sent.append((s, actor.update_priorities.remote(*args), args))
        for s, ref, args in sent:  # the new masses split the next request
            self._stats[s] = self._get(s, ref, "update_priorities", args, deadline)


GROUPS = {"add": 1, "sample_many": 8}
"""Ray concurrency groups of the shard actor: the calls the rate limiter may block (adds,
samples) each get their own threads, so that blocked adds never hold every thread a sample
(which would unblock them) needs, nor blocked samples those of the adds; the other calls run
in the default group. Adds run one at a time (the limiter admits or holds all adds alike
anyway), which makes two adds of one sender in flight rarely swap; Ray does not promise the
order of a threaded actor's calls, so a sender that needs its fragments in order keeps one call
in flight (``FragmentSender``'s default whenever the shards coalesce)."""


def send(actor: Any, method: str, args: tuple) -> Any:
    """Call ``method(*args)`` on a shard actor, in its concurrency group (:data:`GROUPS`)."""
    call = getattr(actor, method)
    if method in GROUPS:
        call = call.options(concurrency_group=method)
    return call.remote(*args)


def _cat(values: list[Any]) -> Any:
    """Concatenate arrays (or dicts of arrays) along axis 0; always a fresh, writable copy."""
    if isinstance(values[0], dict):
        return {k: _cat([v[k] for v in values]) for k in values[0]}
    return np.concatenate(values)
