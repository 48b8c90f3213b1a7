"""One replay shard: any rlstore replay buffer behind a thread-safe, checkpointing wrapper.

:class:`ReplayShard` is plain Python (no Ray import at module level): :class:`ReplayShards`
runs it as a named, threaded Ray actor, and tests can drive it directly. It serves whatever
``make_buffer()`` returns, unchanged:

* a buffer with ``extend`` (``ReplayBuffer`` with a uniform or prioritized sampler, frame-stack
  or memory-mapped storage), or
* a view over one (``NStepReplay``, ``SequenceReplay``): writes go to ``view.buffer.extend``,
  samples through ``view.sample``, priority updates through ``view.update_priorities``.

Sampling for the client. A prioritized shard draws with ``beta = 1``, so the local weight of
item ``i`` is ``r_i = p_min_shard / p_i``; with the shard's mass and ``p_min`` the client turns
that into the weight across all shards (see :mod:`rlstore.distributed.client`). A uniform shard
returns unit weights.

Checkpoints. With ``checkpoint_dir`` the shard saves every ``checkpoint_every_s`` seconds from
a background thread, through the project's one atomic writer
(:func:`rlstore.checkpoint.save_state`, prefix ``<name>_<shard>_``): under the buffer lock it
only takes ``state_dict()`` (a copy), the write runs outside it, so sampling stalls for the copy,
not for the write. A shard whose folder holds a checkpoint restores it in ``__init__``, which
is what Ray re-runs when it restarts a dead actor: the data added after the last checkpoint are
lost, and the restore is logged (logger ``rlstore.distributed``).

Concurrency. The actor runs with several threads, adds and samples in concurrency groups of
their own (:data:`~rlstore.distributed.shard_sampling.GROUPS`), so that calls the rate limiter
blocks never take the threads of the calls that would unblock them; every buffer access holds
one lock.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlstore._trees import real_array
from rlstore.checkpoint import load_state, metadata_file_path, save_state
from rlstore.distributed.rate_limiter import SampleToInsertRatio
from rlstore.errors import ConfigError, RLStoreError, SpecError
from rlstore.samplers import PrioritizedSampler

__all__ = ["ReplayShard", "FRAGMENT_KEYS", "log"]

log = logging.getLogger("rlstore.distributed")

FRAGMENT_KEYS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
"""The arguments of ``buffer.extend`` every fragment carries (extras may follow)."""


class ReplayShard:
    """A replay buffer served to a :class:`~rlstore.distributed.ReplayShards` client.

    Args:
        make_buffer: builds the buffer (or n-step / sequence view) this shard serves; called
            with the shard index when it requires one argument (e.g. to seed each shard's
            sampler differently), else with none.
        shard: index of this shard; ``name``: the client's name (used in messages and files).
        checkpoint_dir: folder of the periodic checkpoints (``None``: none; restores from it
            when it holds this shard's checkpoint).
        checkpoint_every_s: seconds between background checkpoints (> 0).
        rate_limiter: ``SampleToInsertRatio.config()`` of this shard's limiter, or ``None``.
        wait_s: longest wait for the rate limiter per call, then :class:`ReplayTimeoutError`.
    """

    def __init__(
        self,
        make_buffer: Callable[[], Any],
        *,
        shard: int = 0,
        name: str = "replay",
        checkpoint_dir: str | Path | None = None,
        checkpoint_every_s: float = 60.0,
        rate_limiter: Mapping[str, Any] | None = None,
        wait_s: float = 30.0,
    ):
        self._make_buffer = make_buffer
        self._shard_arg = (shard,) if _takes_shard(make_buffer) else ()
        self.where = f"shard {name}/{shard}: "
        self._build()
        self.limiter = None if rate_limiter is None else SampleToInsertRatio(**rate_limiter)
        self.wait_s = wait_s
        self.added = 0  # transitions added, restored ones included
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self.dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.prefix = f"{name}_{shard}_"
        self.restored = self.dir is not None and self._restore(self.dir)
        self._stop = threading.Event()
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            loop = threading.Thread(target=self._loop, args=(checkpoint_every_s,), daemon=True)
            loop.start()

    def _build(self) -> None:
        """A fresh buffer from ``make_buffer``, and what the shard needs to know about it."""
        view = self._make_buffer(*self._shard_arg)
        store: Any = view if callable(getattr(view, "extend", None)) else None
        if store is None:
            store = getattr(view, "buffer", None)
        if not callable(getattr(store, "extend", None)) or not callable(
            getattr(view, "sample", None)
        ):
            raise ConfigError(
                "make_buffer: expected a replay buffer with extend() and sample() (or a view "
                f"such as NStepReplay over one), got {type(view).__name__}"
            )
        sampler = getattr(getattr(view, "sampler", None), "prio", None)  # SequenceReplay
        if sampler is None:  # (not `or`: an empty sampler is falsy)
            sampler = getattr(store, "_sampler", None)
        self.view, self.store = view, store
        self.prio = sampler if isinstance(sampler, PrioritizedSampler) else None

    def clear(self) -> None:
        """Replace the buffer by a fresh one from ``make_buffer`` (and zero the rate limiter's
        and ``added`` counters); checkpoints on disk stay until the next save."""
        with self._lock:
            self._build()
            self.added = 0
            if self.limiter is not None:
                self.limiter.load_state_dict({"inserts": 0, "samples": 0})

    # ------------------------------------------------------------------ writing
    def add(self, fragment: Mapping[str, Any], parts: int = 1) -> dict[str, Any]:
        """``extend`` the buffer with one fragment (``(T, num_envs, ...)`` arrays or ObjectRefs
        of them; ``priorities`` ``(T, num_envs)`` sets the new transitions' priorities).
        ``parts > 1``: the fragment is that many fragments of one sender concatenated along
        time (a coalesced add, see the client); it is stored or rejected as a whole.
        Returns :meth:`stats`.

        Raises:
            SpecError: a missing field, malformed priorities, or what ``extend`` rejects
                (the buffer is unchanged then; a coalesced add's message says so).
            ReplayTimeoutError: the rate limiter held the insert longer than ``wait_s``.
        """
        try:
            return self._add(_resolved(fragment))
        except RLStoreError as exc:
            if parts == 1:
                raise
            raise type(exc)(
                f"{self.where}a coalesced add of {parts} fragments was rejected as a whole "
                f"(none of them stored): {str(exc).removeprefix(self.where)}"
            ) from exc

    def _add(self, frag: dict[str, Any]) -> dict[str, Any]:
        missing = [k for k in FRAGMENT_KEYS if k not in frag]
        if missing:
            raise SpecError(f"fragment: expected the keys {FRAGMENT_KEYS}, missing {missing}")
        lead = np.shape(frag["reward"])
        pri = frag.pop("priorities", None)
        if pri is not None:
            pri = self._check_priorities(pri, lead)
        n = int(np.prod(lead))
        if self.limiter is not None and n:
            self.limiter.wait_insert(n, self.wait_s, where=self.where)
        with self._lock:
            self.store.extend(**frag)
            if pri is not None:
                k = min(n, len(self.store))
                hi = self.store.first_id + len(self.store)
                self.store.update_priorities(np.arange(hi - k, hi), pri.ravel()[n - k :])
            self.added += n
            if self.limiter is not None and n:  # under the lock: a checkpoint sees both
                self.limiter.record_insert(n)
            return self._stats()

    def _check_priorities(self, pri: Any, lead: tuple[int, ...]) -> np.ndarray:
        sampler = getattr(self.store, "_sampler", None)
        if not isinstance(sampler, PrioritizedSampler):
            raise ConfigError(
                f"{self.where}priorities: the buffer samples uniformly; build it with a "
                "PrioritizedSampler to set initial priorities"
            )
        p = real_array("priorities", pri).astype(np.float64)
        if p.shape != lead:
            raise SpecError(f"priorities: expected shape {lead} like reward, got {p.shape}")
        if not (np.isfinite(p).all() and (p >= 0).all()):
            raise SpecError("priorities: expected finite numbers >= 0, got NaN, inf or < 0")
        sampler.check_storable(p)  # before extend: the add is refused whole
        return p

    def update_priorities(self, ids: np.ndarray, priorities: Any) -> dict[str, Any]:
        """Set priorities of shard-local ids under the lock: ``view.update_priorities`` (a
        sequence view: TD errors ``(B, T)``), else the buffer's (``NStepReplay`` has none).
        Returns :meth:`stats` (the new mass, for the client's next split)."""
        target = self.view if hasattr(self.view, "update_priorities") else self.store
        with self._lock:
            target.update_priorities(ids, priorities)
            return self._stats()

    # ------------------------------------------------------------------ reading
    def stats(self) -> dict[str, Any]:
        """``size`` (sampleable items), ``mass`` (their total priority, ``size`` if uniform),
        ``pmin`` (smallest live priority, 1 if uniform), ``beta`` (the sampler's current
        beta), ``added``, ``restored``, ``cpu_s`` (the shard process's CPU seconds)."""
        with self._lock:
            out = self._stats()
        out["cpu_s"] = time.process_time()  # the shard process's CPU time (benchmarks)
        return out

    def _stats(self) -> dict[str, Any]:
        """The statistics an add or a sample returns (no ``cpu_s``: it sums every thread's
        CPU time, a cost per call)."""
        sync = getattr(self.view, "_sync", None)  # SequenceReplay: see the new rows first
        if callable(sync):
            sync()
        view = self.view
        size = len(view) if hasattr(view, "__len__") else len(self.store)
        out: dict[str, Any] = {"size": size, "added": self.added, "restored": self.restored}
        if self.prio is None or not size:
            return {**out, "mass": float(size), "pmin": 1.0, "beta": 0.0}
        tree = self.prio.tree
        return {**out, "mass": tree.total, "pmin": tree.min, "beta": self.prio.current_beta()}

    def sample_many(
        self, counts: list[int], beta: float | None = None
    ) -> tuple[list[dict[str, Any] | None], dict[str, Any]]:
        """Draw one part per entry of ``counts`` (``None`` for a zero count).

        A part is ``{field: numpy array or dict of them, "ids": (c,) int64, "ratio": (c,)
        float32 p_min/p_i (ones if uniform), "beta": the beta of its batch}``.

        Returns:
            ``(parts, stats)``, stats taken after the draws.
        """
        total = int(sum(counts))
        if self.limiter is not None and total:
            self.limiter.wait_sample(total, self.wait_s, where=self.where)
        with self._lock:
            parts = [self._draw(int(c), beta) if c else None for c in counts]
            if self.limiter is not None and total:
                self.limiter.record_sample(total)
            return parts, self._stats()

    def _draw(self, count: int, beta: float | None) -> dict[str, Any]:
        """``count`` items; more than the shard holds are drawn in several calls (a buffer
        samples with replacement but refuses a batch larger than its size)."""
        size = self._stats()["size"]
        if size and count > size:
            chunks = [self._draw(min(size, count - i), beta) for i in range(0, count, size)]
            return _cat_parts(chunks)
        if self.prio is None:
            used, batch = 0.0, self.view.sample(count, beta)
        else:
            used = self.prio.current_beta() if beta is None else float(beta)
            batch = self.view.sample(count, 1.0)  # weights = p_min / p_i
        out: dict[str, Any] = {"beta": used}
        for field, value in zip(batch._fields, batch, strict=True):
            if value is None:
                continue
            key = {"indices": "ids", "weights": "ratio"}.get(field, field)
            out[key] = _numpy(value)
        out["ids"] = np.asarray(out["ids"], dtype=np.int64)
        return out

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> int:
        """Save the shard now (atomic); returns the number of items saved.

        Raises:
            ConfigError: the shard has no ``checkpoint_dir``.
        """
        if self.dir is None:
            raise ConfigError(f"{self.where}checkpoint_dir: none given, nothing to save to")
        with self._lock:  # only the copy holds the lock, not the write
            view = self.view
            state = {
                "buffer": self.store.state_dict(),
                "view": view.state_dict() if view is not self.store and _has_state(view) else None,
                "limiter": None if self.limiter is None else self.limiter.state_dict(),
                "added": self.added,
            }
            size = len(self.store)
        with self._save_lock:
            save_state(self.dir, state, prefix=self.prefix)
        return size

    def _restore(self, folder: Path) -> bool:
        if not metadata_file_path(folder, self.prefix).exists():
            return False
        sd = load_state(folder, prefix=self.prefix)
        self.store.load_state_dict(sd["buffer"])
        if sd["view"] is not None:
            self.view.load_state_dict(sd["view"])
        if self.limiter is not None and sd["limiter"] is not None:
            self.limiter.load_state_dict(sd["limiter"])
        self.added = int(sd["added"])
        log.warning(
            "%srestored %d transitions (%d added in all) from its checkpoint in %s; "
            "transitions added after that checkpoint are lost",
            self.where, len(self.store), self.added, folder,
        )  # fmt: skip
        return True

    def _loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                self.checkpoint()
            except Exception:  # keep serving; the next period tries again
                log.exception("%speriodic checkpoint failed", self.where)

    def close(self) -> None:
        """Stop the checkpoint thread (the actor is killed by the client)."""
        self._stop.set()


def _takes_shard(make_buffer: Callable[..., Any]) -> bool:
    """Whether ``make_buffer`` must be called with the shard index (one required argument)."""
    try:
        sig = inspect.signature(make_buffer)
    except (TypeError, ValueError):
        return False
    try:
        sig.bind()
        return False
    except TypeError:
        pass
    try:
        sig.bind(0)
        return True
    except TypeError:
        return False


def _has_state(view: Any) -> bool:
    return callable(getattr(view, "state_dict", None))


def _cat_parts(parts: list[Any]) -> Any:
    """Concatenate parts (dicts of arrays, nested) along axis 0; scalars from the first."""
    first = parts[0]
    if isinstance(first, dict):
        return {k: _cat_parts([p[k] for p in parts]) for k in first}
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    return first


def _numpy(value: Any) -> Any:
    """Torch tensors (or dicts of them) as numpy arrays (zero-copy on the CPU)."""
    if isinstance(value, dict):
        return {k: _numpy(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        return value.numpy(force=True)
    return np.asarray(value)


def _resolved(fragment: Any) -> dict[str, Any]:
    """The fragment as a dict, ObjectRef values fetched (zero-copy from the object store)."""
    if not isinstance(fragment, Mapping):
        raise SpecError(f"fragment: expected a dict of extend() arguments, got {fragment!r}")
    frag = dict(fragment)
    refs = [k for k, v in frag.items() if type(v).__name__ == "ObjectRef"]
    if refs:
        import ray

        for k, v in zip(refs, ray.get([frag[k] for k in refs]), strict=True):
            frag[k] = v
    return frag
