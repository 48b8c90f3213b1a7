"""Client of S replay shards on Ray: routed adds, proportional sampling, prefetch, retries.

Adds. A whole rollout fragment (the keyword arguments of ``buffer.extend``, ``(T, num_envs,
...)``) goes to shard ``route % S`` in one call; its values may be ``ray.ObjectRef`` s (large
observations: ``ray.put`` once, the shard reads them zero-copy).

Coalescing. A Ray call costs the shard a fixed ~0.4 ms of CPU (~1 ms once its argument
exceeds Ray's 100 KiB inline limit), several times the ``extend`` of a 1024-transition fragment
(``benchmarks/results/distributed.md``). So ``add`` / ``add_async`` also take a list of one
sender's consecutive fragments: they are concatenated along time here, in the sender's process,
and stored by one call and one ``extend`` as a whole, or rejected as a whole (the error says
so). A collector's :class:`~rlstore.distributed.collector.FragmentSender` sends such lists of
the fragments that queued up while its call was in flight, up to ``coalesce_bytes`` per call
(:data:`COALESCE_BYTES` by default; with a rate limiter, also ``coalesce_items`` transitions).

Sampling (proportional split over the shards, importance weights across them, ids, prefetch):
the :class:`~rlstore.distributed.shard_sampling.ShardSampling` mixin, see
:mod:`rlstore.distributed.shard_sampling`.

Failures. Every remote call has a deadline (``timeout_s``): no answer in time raises
:class:`~rlstore.distributed.rate_limiter.ReplayTimeoutError` naming the shard and the call.
When a shard's actor dies (``ActorDiedError`` / ``ActorUnavailableError``), the client
re-resolves the named actor, which Ray restarts (``max_restarts``) from the shard's last
checkpoint, and sends the call again (an ``add`` is then delivered at least once: it may also
have been applied before the failure); every retry is logged (logger ``rlstore.distributed``).
A shard that is gone for good raises :class:`ShardUnavailableError`.
"""

from __future__ import annotations

import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlstore._checks import check_count, real_number
from rlstore.distributed._ray import NAMESPACE, require_ray, start_ray
from rlstore.distributed.rate_limiter import ReplayTimeoutError, SampleToInsertRatio
from rlstore.distributed.shard import ReplayShard, log
from rlstore.distributed.shard_sampling import (
    GROUPS,
    ShardBatch,
    ShardSampling,
    _cat,
    _Request,
    send,
)
from rlstore.errors import ConfigError, SpecError
from rlstore.samplers import make_rng

__all__ = ["ReplayShards", "ShardBatch", "ShardUnavailableError"]

STARTUP_TIMEOUT_S = 120.0
"""Longest wait for new shard actors to answer (process start, imports, checkpoint restore)."""
COALESCE_BYTES = 16 << 20
"""Default ``coalesce_bytes``. Measured (``bench_distributed.py``: 4 collectors, 1 shard,
1024-transition fragments): a shard spends ~1 ms of CPU per call plus ~65 us per 1024
transitions, so it stores 5-6M transitions per shard CPU-second at 2 MiB per call, 10M at
8 MiB, 12-13M at 16 MiB, 13-14M at 32 MiB (the in-process ``extend``: 14M). Larger calls
hold the shard's lock longer (~6 ms for a 16 MiB call: a learner's samples wait that long), and
a sender holds up to about three times the cap while a call is in flight (the waiting
fragments, their concatenation, the object store copy); collectors that cannot fill it send
smaller calls."""


class ShardUnavailableError(RuntimeError):
    """A shard's actor is gone for good (restarts exhausted, or killed without restart)."""


class ReplayShards(ShardSampling):
    """``num_shards`` named Ray actors, each serving one buffer built by ``make_buffer()``.

    Args:
        make_buffer: builds one shard's buffer (``ReplayBuffer`` uniform or prioritized,
            frame-stack storage, ``NStepReplay`` or ``SequenceReplay`` over one); called in
            each actor (pickled by Ray: a function or a lambda, not a buffer), with the shard
            index when it requires one argument: give each shard its own sampler seed.
        num_shards: number of shard actors ``S``.
        name: actors are named ``<name>/<i>`` in the namespace ``"rlstore"``; checkpoint files
            are prefixed ``<name>_<i>_``. Letters, digits, ``_ . -``.
        checkpoint_dir: folder of the shards' periodic checkpoints (``None``: none). Shards
            restore from it when it holds their checkpoint (a restart, or resuming a run).
        checkpoint_every_s: seconds between a shard's background checkpoints.
        rate_limiter: a :class:`SampleToInsertRatio`; each shard enforces a copy of it on
            its own inserts and samples.
        timeout_s: deadline of every remote call (the rate limiter waits at most half of it;
            the first answer of new actors may take up to ``max(timeout_s, 120)`` s).
        num_cpus: CPUs each actor reserves (0: never blocks scheduling on small machines).
        max_restarts: restarts Ray grants each shard actor (-1: unlimited).
        seed: seed of the split of batches over shards.
        placement: ``placement(i)``: more Ray actor options for shard ``i``, e.g.
            ``{"resources": {f"node{i}": 0.01}}`` to put each shard on its own node.
        coalesce_bytes: the most array bytes a collector sends in one coalesced add (0: one
            call per fragment); with a ``rate_limiter`` one also carries at most
            ``coalesce_items = error_buffer / samples_per_insert`` transitions, so that it
            overshoots the limiter's band by no more than its half-width. See the module
            docstring.

    Example::

        start_ray()
        shards = ReplayShards(lambda: ReplayBuffer(100_000, num_envs=8), num_shards=2)
        shards.add(fragment, route=collector_id)  # extend() kwargs, (T, 8, ...)
        batches = shards.sample_many(4, 256, prefetch=1)
        shards.close()
    """

    def __init__(
        self,
        make_buffer: Callable[[], Any],
        num_shards: int = 1,
        *,
        name: str = "replay",
        checkpoint_dir: str | Path | None = None,
        checkpoint_every_s: float = 60.0,
        rate_limiter: SampleToInsertRatio | None = None,
        timeout_s: float = 60.0,
        num_cpus: float = 0.0,
        max_restarts: int = 3,
        seed: int | np.random.Generator | None = None,
        placement: Callable[[int], Mapping[str, Any]] | None = None,
        coalesce_bytes: int = COALESCE_BYTES,
    ):
        if not callable(make_buffer):
            raise ConfigError(f"make_buffer: expected a callable building a buffer, got "
                              f"{make_buffer!r}")  # fmt: skip
        self.num_shards = check_count("num_shards", num_shards, error=ConfigError)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ConfigError(f"name: expected letters, digits, '_', '.', '-', got {name!r}")
        if checkpoint_dir is not None and not isinstance(checkpoint_dir, str | os.PathLike):
            raise ConfigError(f"checkpoint_dir: expected a path or None, got {checkpoint_dir!r}")
        every = real_number("checkpoint_every_s", checkpoint_every_s, 0.0)
        self.timeout_s = real_number("timeout_s", timeout_s, 0.0)
        cpus = real_number("num_cpus", num_cpus, 0.0, expected="a number >= 0")
        if every <= 0 or self.timeout_s <= 0:
            raise ConfigError(
                f"checkpoint_every_s, timeout_s: expected numbers > 0, got {checkpoint_every_s!r}"
                f", {timeout_s!r}"
            )
        restarts = check_count("max_restarts", max_restarts, minimum=-1, error=ConfigError)
        if rate_limiter is not None and not isinstance(rate_limiter, SampleToInsertRatio):
            raise ConfigError(f"rate_limiter: expected a SampleToInsertRatio, got {rate_limiter!r}")
        self.coalesce_bytes = check_count(
            "coalesce_bytes", coalesce_bytes, minimum=0, error=ConfigError
        )
        self.coalesce_items = None
        if rate_limiter is not None:
            self.coalesce_items = int(rate_limiter.error_buffer / rate_limiter.samples_per_insert)
        if placement is not None and not callable(placement):
            raise ConfigError(f"placement: expected a function of the shard index, got "
                              f"{placement!r}")  # fmt: skip
        self.name = name
        self._rng = make_rng(seed)
        ray = require_ray()
        start_ray()  # a no-op when Ray runs (start it yourself for other settings)
        names = [f"{name}/{i}" for i in range(self.num_shards)]
        for actor_name in names:
            try:
                ray.get_actor(actor_name, namespace=NAMESPACE)
            except ValueError:
                continue
            raise ConfigError(
                f"name: a shard actor {actor_name!r} exists already; close() the other "
                "ReplayShards or pick another name"
            )
        remote = ray.remote(concurrency_groups=GROUPS)(ReplayShard)
        self._actors = [
            remote.options(
                name=actor_name, namespace=NAMESPACE, max_restarts=restarts,
                max_task_retries=0, num_cpus=cpus, max_concurrency=8,
                **(dict(placement(i)) if placement is not None else {}),
            ).remote(
                make_buffer, shard=i, name=name, checkpoint_dir=checkpoint_dir,
                checkpoint_every_s=every, wait_s=self.timeout_s / 2,
                rate_limiter=None if rate_limiter is None else rate_limiter.config(),
            )
            for i, actor_name in enumerate(names)
        ]  # fmt: skip
        self._owners = list(self._actors)  # the creator's handles keep the actors alive
        self._stats: list[dict[str, Any]] = []
        self._pending: deque[tuple[tuple[Any, ...], _Request]] = deque()
        try:  # the actors' processes start (and restore their checkpoints) first
            self._refresh(max(self.timeout_s, STARTUP_TIMEOUT_S))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ remote calls
    def _where(self, s: int) -> str:
        return f"shard {self.name}/{s}"

    def _get(self, s: int, ref: Any, method: str, args: tuple, deadline: float) -> Any:
        """The result of ``ref`` (a call of ``method(*args)`` on shard ``s``), re-sent to the
        re-resolved actor after an actor failure, until ``deadline``."""
        ray = require_ray()
        from ray.exceptions import GetTimeoutError, RayActorError

        while True:
            try:
                return ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except GetTimeoutError:
                raise ReplayTimeoutError(
                    f"{self._where(s)}: {method} got no answer within {self.timeout_s} s "
                    "(timeout_s)"
                ) from None
            except RayActorError as exc:
                if exc.actor_init_failed:  # every restart fails the same way: do not retry
                    raise ShardUnavailableError(
                        f"{self._where(s)}: the actor failed in its constructor (make_buffer, "
                        f"or the restore of its checkpoint): {exc.error_msg}"
                    ) from exc
                log.warning(
                    "%s: %s failed (%s); re-resolving the actor and sending it again%s",
                    self._where(s), method, type(exc).__name__,
                    " (the fragment may be applied twice, or lost with data since the "
                    "shard's last checkpoint)" if method == "add" else "",
                )  # fmt: skip
                self._actors[s] = self._resolve(s, exc)
                if time.monotonic() > deadline:
                    raise ReplayTimeoutError(
                        f"{self._where(s)}: {method} did not succeed within {self.timeout_s} s "
                        f"(the actor failed: {type(exc).__name__})"
                    ) from exc
                time.sleep(0.05)
                ref = send(self._actors[s], method, args)

    def _resolve(self, s: int, exc: BaseException) -> Any:
        ray = require_ray()
        try:
            return ray.get_actor(f"{self.name}/{s}", namespace=NAMESPACE)
        except ValueError:
            raise ShardUnavailableError(
                f"{self._where(s)}: the actor is gone for good (restarts exhausted or killed "
                f"without restart): {exc}"
            ) from exc

    def _call_all(
        self, method: str, args_of: Callable[[int], tuple], timeout_s: float | None = None
    ) -> list[Any]:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        refs = [getattr(a, method).remote(*args_of(s)) for s, a in enumerate(self._actors)]
        return [self._get(s, ref, method, args_of(s), deadline) for s, ref in enumerate(refs)]

    def _refresh(self, timeout_s: float | None = None) -> None:
        self._stats = self._call_all("stats", lambda s: (), timeout_s)

    # ------------------------------------------------------------------ adding
    def _route(self, route: int) -> int:
        return check_count("route", route, minimum=0, error=ConfigError) % self.num_shards

    def add(self, fragment: Mapping[str, Any], *, route: int = 0) -> None:
        """Add one fragment to shard ``route % num_shards`` and wait until it is stored.

        Args:
            fragment: the keyword arguments of ``buffer.extend`` (``obs, action, reward,
                next_obs, terminated, truncated`` + extras, each ``(T, num_envs, ...)``), numpy
                arrays or ObjectRefs of them (or one ObjectRef of the whole dict); optional
                ``priorities`` ``(T, num_envs)``: the initial priorities (prioritized shards).
                Or a list of one sender's consecutive fragments (dicts of arrays with the same
                keys, dtypes and shapes but the first), stored as one: see the module docstring.
            route: e.g. the collector's index.

        Raises:
            SpecError: what the shard's ``extend`` rejects (nothing is stored then), a list
                of fragments that do not concatenate.
            ReplayTimeoutError: no answer within ``timeout_s`` (the rate limiter held it).
        """
        s = self._route(route)
        args = _checked_fragment(fragment)
        deadline = time.monotonic() + self.timeout_s
        ref = send(self._actors[s], "add", args)
        self._stats[s] = self._get(s, ref, "add", args, deadline)

    def add_async(self, fragment: Mapping[str, Any], *, route: int = 0) -> Any:
        """Send one fragment (as :meth:`add`) and return the call's ``ObjectRef`` at once.

        Cap the calls in flight (e.g. 2 per collector) and ``ray.get`` the finished refs: a
        failed add (a rejected fragment, a dead shard) shows only there; this call does not
        retry.
        """
        return send(self._actors[self._route(route)], "add", _checked_fragment(fragment))

    # ------------------------------------------------------------------ bookkeeping
    def stats(self) -> list[dict[str, Any]]:
        """Each shard's statistics now (``size``, ``mass``, ``pmin``, ``beta``, ``added``,
        ``restored``, ``cpu_s``)."""
        self._refresh()
        return [dict(st) for st in self._stats]

    def size(self) -> int:
        """Sampleable items over all shards now."""
        return int(sum(st["size"] for st in self.stats()))

    def checkpoint(self) -> None:
        """Every shard saves now (atomic; needs ``checkpoint_dir``)."""
        self._call_all("checkpoint", lambda s: ())

    def clear(self) -> None:
        """Empty every shard (a fresh buffer from ``make_buffer``; requests in flight dropped)."""
        self._pending.clear()
        self._call_all("clear", lambda s: ())
        self._refresh()

    def actors(self) -> list[Any]:
        """The shard actors' handles (e.g. for ``ray.kill`` in fault tests)."""
        return list(self._actors)

    def close(self) -> None:
        """Kill the shard actors (their checkpoints stay on disk)."""
        ray = require_ray()
        self._pending.clear()
        for actor in self._actors:
            ray.kill(actor, no_restart=True)

    def __getstate__(self) -> dict[str, Any]:  # a copy for a collector: no requests in flight
        state = dict(self.__dict__)
        state["_pending"] = deque()
        return state


def _checked_fragment(fragment: Any) -> tuple[Any, int]:
    """``(fragment, parts)``: the arguments of the shard's ``add``."""
    if type(fragment).__name__ == "ObjectRef":
        return fragment, 1
    many = isinstance(fragment, list) and fragment
    if not all(isinstance(f, Mapping) for f in (fragment if many else [fragment])):
        raise SpecError(
            f"fragment: expected a dict of extend() arguments (or a list of them), got {fragment!r}"
        )
    return (_coalesced(fragment), len(fragment)) if many else (dict(fragment), 1)


def fragment_layout(fragment: Any) -> tuple[Any, ...] | None:
    """What must agree for fragments to concatenate along time: each field's name, dtype and
    shape after the first axis (nested dicts included); ``None`` when ``fragment`` is not a
    dict of numpy arrays (an ObjectRef, lists, ...)."""
    if not isinstance(fragment, Mapping):
        return None
    out: list[tuple[Any, ...]] = []
    for key, value in sorted(fragment.items(), key=lambda kv: str(kv[0])):
        if isinstance(value, Mapping):
            sub = fragment_layout(value)
            if sub is None:
                return None
            out.append((key, sub))
        elif isinstance(value, np.ndarray) and value.ndim:
            out.append((key, value.dtype.str, value.shape[1:]))
        else:
            return None
    return tuple(out)


def _coalesced(fragments: list[Any]) -> dict[str, Any]:
    """One sender's consecutive fragments as one, concatenated along time."""
    first = fragment_layout(fragments[0])
    for i, frag in enumerate(fragments):
        layout = first if i == 0 else fragment_layout(frag)
        if layout is None or layout != first:
            got = "values that are not numpy arrays" if layout is None else layout
            raise SpecError(
                f"fragment[{i}]: expected dicts of numpy arrays with the fields, dtypes and "
                f"shapes (but the first) of fragment[0] to coalesce, got {got}"
            )
    return _cat(fragments)
