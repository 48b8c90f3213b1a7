"""Experience collectors on Ray: vector-env actors that push whole rollout fragments.

A :class:`Collector` runs a Gymnasium vector env (``AutoresetMode.SAME_STEP``) with a CPU
snapshot of the learner's policy. Its loop (:meth:`Collector.run`) repeats:

1. ``sync`` with the :class:`Coordinator`: report the env steps and finished episodes since the
   last sync, receive a newer weights version if the learner published one (an ``ObjectRef``,
   fetched zero-copy from the object store) and the stop signal;
2. collect one fragment of ``fragment_length`` steps of every env: time-major ``(T, N, ...)``
   numpy arrays ``obs, action, reward, next_obs, terminated, truncated`` (``next_obs[t]`` is the
   true successor: the final observation of an ended episode, never the reset one) plus what the
   policy adds (behaviour log-probs, initial priorities, ...), see :class:`Policy`;
3. push it through a :class:`FragmentSender`: ``sink.add_async(fragment, route=index)`` (one
   call per fragment, never per env step). A sink that coalesces (``ReplayShards``) gets one
   call at a time, and the fragments made while it runs leave together in the next call: so a
   collector's fragments are stored in order (a threaded actor may run two calls of one caller
   in either order). Other sinks get up to two calls in flight. The finished calls are
   ``ray.get`` so that a failed add surfaces (its fragments are counted as lost, the error is
   logged and the loop goes on).

The sink is any object with ``add_async(fragment, *, route) -> ObjectRef``: a
:class:`~rlstore.distributed.ReplayShards` (Ape-X; it also takes a list of fragments, up to its
``coalesce_bytes``) or a :class:`FragmentQueue` (IMPALA: one fragment per call).

:class:`CollectorPool` starts ``K`` collectors (``max_restarts=-1``, ``num_cpus`` 0 by default,
so they never wait for a whole core) and keeps them going: :meth:`CollectorPool.check` finds a
collector whose loop died (``ray.kill``, a crash), re-submits its loop on the restarted actor
(or, when Ray will not restart it, on a fresh actor) and writes a line to ``faults.log`` in the
run folder. The run goes on with the other collectors meanwhile; what is lost is the dead
collector's unfinished fragment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import ray
import torch

from rlstore._trees import tree_leaves
from rlstore.agents.config import EnvironmentConfig
from rlstore.agents.envs import make_vector_env
from rlstore.distributed.client import fragment_layout
from rlstore.vector import TransitionAdapter

__all__ = [
    "Policy",
    "Collector",
    "Coordinator",
    "CollectorPool",
    "FragmentQueue",
    "FragmentSender",
    "module_weights",
    "load_weights",
]

log = logging.getLogger("rlstore.distributed")

MAX_IN_FLIGHT = 2
"""Adds a collector keeps in flight to a sink that does not coalesce (ray.md: more starve the
learner on small machines)."""


class Policy(Protocol):
    """What a collector acts with; built inside the actor by ``make_policy(index, envs)``."""

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        """Take the published weights snapshot number ``version`` (:func:`module_weights`)."""

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions ``(N, ...)`` for observations ``(N, ...)`` and per-step extras (``(N,)``
        each, e.g. ``{"logp": ...}``) that are stacked into the fragment."""
        ...

    def finish(self, fragment: dict[str, Any], last_obs: np.ndarray) -> dict[str, Any]:
        """The fragment as pushed (add what the learner needs, e.g. priorities)."""
        ...


def module_weights(module: torch.nn.Module) -> dict[str, np.ndarray]:
    """A module's state as numpy copies (what the learner ``ray.put``s for the collectors)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_weights(module: torch.nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Load :func:`module_weights` output into ``module`` (shapes checked by torch)."""
    module.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})


# ----------------------------------------------------------------- coordinator


@dataclass
class _Reports:
    steps: int = 0
    lost: int = 0
    episodes: list[tuple[int, float, int, int]] = field(default_factory=list)


class Coordinator:
    """Ray actor between the learner and its collectors: the newest weights (by reference,
    versioned), the stop signal, and the collectors' reports (env steps, episodes, lost adds).
    One small call per fragment per collector; the learner drains the reports."""

    def __init__(self, num_collectors: int) -> None:
        self.version, self.stopped = -1, False
        self.weights: list[Any] | None = None
        self.reports = _Reports()
        self.attempts = [-1] * num_collectors  # per collector: the newest run that synced

    def publish(self, version: int, weights: list[Any]) -> None:
        """Make ``weights[0]`` (an ObjectRef, wrapped in a list so Ray does not resolve it)
        the current snapshot, numbered ``version``."""
        self.version, self.weights = version, weights

    def sync(
        self,
        index: int,
        version: int,
        steps: int,
        episodes: list[tuple[float, int]],
        lost: int,
        attempt: int = 0,
    ) -> tuple[int, list[Any] | None, bool]:
        """A collector's report from its run number ``attempt``; returns ``(version, [ref] or
        None if not newer, stop)``."""
        r = self.reports
        r.steps += steps
        r.lost += lost
        self.attempts[index] = max(self.attempts[index], attempt)
        r.episodes += [(index, float(ret), int(length), r.steps) for ret, length in episodes]
        newer = self.weights if self.version > version else None
        return self.version, newer, self.stopped

    def drain(self) -> _Reports:
        """The reports since the last drain (steps and lost adds are running totals)."""
        r = self.reports
        out = _Reports(r.steps, r.lost, r.episodes)
        r.episodes = []
        return out

    def synced_attempts(self) -> list[int]:
        """Per collector, the newest run number that synced (-1: none). A late sync of a run
        that has since died carries its own, older number, so the pool tells a new death (the
        current run synced) from the same death seen again (it did not)."""
        return list(self.attempts)

    def stop(self) -> None:
        """Tell every collector to return from its loop at its next sync."""
        self.stopped = True


# ----------------------------------------------------------------- sending


class FragmentSender:
    """One sender's adds to a sink: at most ``max_in_flight`` calls in flight (default: 1 when
    the sink coalesces, which keeps the fragments in order; else :data:`MAX_IN_FLIGHT`, whose
    calls Ray may run out of order, rarely: pass 1 where n-step or sequence rows need order).

    A fragment pushed while all calls are in flight waits here when the sink coalesces (its
    ``coalesce_bytes``: the most array bytes per call, 0 or absent: one fragment per call; its
    ``coalesce_items``: the most transitions, or None) and leaves with the ones after it in one
    call, as a list the sink concatenates along time (``ReplayShards.add_async``): so a shard
    that falls behind gets fewer, larger calls, and a shard that keeps up gets each fragment
    at once. A push blocks (up to ``timeout_s`` per wait) once the waiting fragments reach a
    cap, or when the fragment cannot join them (it would pass a cap; other fields, dtypes or
    shapes; ObjectRefs, which are sent alone).

    A call that fails (a rejected fragment, a shard that restarted) is logged and its fragments
    are counted in :attr:`lost`; a coalesced call is stored or rejected as a whole.
    """

    def __init__(
        self, sink: Any, route: int, *, max_in_flight: int | None = None, timeout_s: float = 60.0
    ) -> None:
        self.sink, self.route, self.timeout_s = sink, route, timeout_s
        self.max_bytes = int(getattr(sink, "coalesce_bytes", 0))
        self.max_items = getattr(sink, "coalesce_items", None) or float("inf")
        if max_in_flight is None:
            max_in_flight = 1 if self.max_bytes else MAX_IN_FLIGHT
        self.max_in_flight = max_in_flight
        self.lost = 0  # fragments of failed calls
        self.calls = 0  # calls sent
        self._waiting: list[Any] = []
        self._layout: Any = None
        self._count = self._bytes = 0  # transitions and bytes waiting
        self._in_flight: list[tuple[Any, int]] = []  # (ref, fragments)

    def push(self, fragment: Any) -> None:
        """Send ``fragment`` now, or keep it for the next call (see the class docstring)."""
        layout = fragment_layout(fragment) if self.max_bytes else None
        layout = layout if layout is not None and "reward" in fragment else None
        count = int(np.prod(np.shape(fragment["reward"]))) if layout is not None else 0
        size = sum(int(x.nbytes) for x in tree_leaves(fragment)) if layout is not None else 0
        if self._waiting and (
            layout is None or layout != self._layout or self._bytes + size > self.max_bytes
            or self._count + count > self.max_items
        ):  # fmt: skip
            self._send(block=True)
        self._waiting.append(fragment)
        self._layout, self._count, self._bytes = layout, self._count + count, self._bytes + size
        full = self._bytes >= self.max_bytes or self._count >= self.max_items
        self._send(block=layout is None or full)

    def flush(self) -> None:
        """Send what waits and wait for every call in flight (up to ``timeout_s``)."""
        if self._waiting:
            self._send(block=True)
        refs = [ref for ref, _ in self._in_flight]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s)
        self._settle(ready)

    def _send(self, block: bool) -> None:
        refs = [ref for ref, _ in self._in_flight]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        self._settle(ready)
        if len(self._in_flight) >= self.max_in_flight:
            if not block:
                return
            ready, _ = ray.wait([r for r, _ in self._in_flight], timeout=self.timeout_s)
            self._settle(ready)
        frags, self._waiting, self._count, self._bytes = self._waiting, [], 0, 0
        ref = self.sink.add_async(frags[0] if len(frags) == 1 else frags, route=self.route)
        self._in_flight.append((ref, len(frags)))
        self.calls += 1

    def _settle(self, refs: list[Any]) -> None:
        for ref in refs:
            parts = next(n for r, n in self._in_flight if r == ref)
            self._in_flight = [(r, n) for r, n in self._in_flight if r != ref]
            try:
                ray.get(ref)
            except ray.exceptions.RayError as err:  # rejected, or the sink restarted
                self.lost += parts
                log.warning("sender %d: an add of %d fragment(s) failed, lost: %s",
                            self.route, parts, err)  # fmt: skip


# ----------------------------------------------------------------- collector


class Collector:
    """One collector actor (see the module docstring).

    Args:
        index: this collector's number (its route to the sink, its env seeds).
        make_policy: ``make_policy(index, envs) -> Policy`` (pickled to the actor).
        environment: the env config (``make_vector_env``); num_envs: envs per collector.
        fragment_length: T, steps per env per fragment.
        seed: env ``j`` of collector ``i`` resets with ``seed + 1000 * i + j``.

    The sink and the coordinator are arguments of :meth:`run`, not of the constructor (Ray
    cannot restart an actor whose constructor took actor handles once they are released).
    """

    def __init__(
        self,
        index: int,
        make_policy: Callable[[int, Any], Policy],
        environment: EnvironmentConfig,
        num_envs: int,
        fragment_length: int,
        seed: int,
    ) -> None:
        torch.set_num_threads(1)
        self.index, self.T = index, fragment_length
        self.sink: Any = None
        self.coordinator: Any = None
        self.attempt = 0
        self.envs = make_vector_env(environment, num_envs)
        self.adapter = TransitionAdapter.from_env(self.envs)
        self.policy = make_policy(index, self.envs)
        self.obs, _ = self.envs.reset(seed=seed + 1000 * index)
        self.version, self.stopped = -1, False
        self.ep_ret, self.ep_len = np.zeros(num_envs), np.zeros(num_envs, np.int64)
        self.episodes: list[tuple[float, int]] = []
        self.steps = 0
        self.sender: FragmentSender | None = None

    def sync(self, timeout_s: float = 60.0) -> None:
        """Report to the coordinator and load newer weights if there are any."""
        lost = 0 if self.sender is None else self.sender.lost
        call = self.coordinator.sync.remote(
            self.index, self.version, self.steps, self.episodes, lost, self.attempt
        )
        version, weights, self.stopped = ray.get(call, timeout=timeout_s)
        self.steps, self.episodes = 0, []
        if self.sender is not None:
            self.sender.lost -= lost
        if weights is not None:
            self.policy.load(ray.get(weights[0], timeout=timeout_s), version)
            self.version = version

    def collect(self) -> dict[str, Any]:
        """One fragment ``(T, N, ...)`` from the current policy (see the module docstring)."""
        steps: list[Any] = []
        extras: list[dict[str, np.ndarray]] = []
        for _ in range(self.T):
            action, extra = self.policy.act(self.obs)
            next_obs, reward, term, trunc, info = self.envs.step(action)
            steps.append(self.adapter.step(self.obs, action, reward, term, trunc, info, next_obs))
            extras.append(extra)
            self.ep_ret += reward
            self.ep_len += 1
            for i in np.flatnonzero(term | trunc):
                self.episodes.append((float(self.ep_ret[i]), int(self.ep_len[i])))
                self.ep_ret[i], self.ep_len[i] = 0.0, 0
            self.obs = next_obs
        self.steps += self.T * self.envs.num_envs
        names = ("obs", "action", "reward", "next_obs", "terminated", "truncated")
        fragment: dict[str, Any] = {k: np.stack([getattr(s, k) for s in steps]) for k in names}
        fragment["reward"] = fragment["reward"].astype(np.float32)
        fragment.update({k: np.stack([e[k] for e in extras]) for k in extras[0]})
        return self.policy.finish(fragment, self.obs)

    def run(
        self,
        sink: Any,
        coordinator: Any,
        max_fragments: int | None = None,
        timeout_s: float = 60.0,
        attempt: int = 0,
    ) -> int:
        """Sync with ``coordinator``, collect, push to ``sink`` until stopped (or
        ``max_fragments``); returns the fragments pushed. ``attempt``: how many times the pool
        has re-submitted this collector's loop (sent with every sync)."""
        self.sink, self.coordinator, self.attempt = sink, coordinator, attempt
        self.sender = FragmentSender(sink, self.index, timeout_s=timeout_s)
        pushed = 0
        while max_fragments is None or pushed < max_fragments:
            self.sync(timeout_s)
            if self.stopped:
                break
            self.sender.push(self.collect())
            pushed += 1
        self.sender.flush()
        return pushed


# ----------------------------------------------------------------- IMPALA's sink


class FragmentQueue:
    """A bounded FIFO of fragments (``ray.util.queue.Queue``, an actor with ``num_cpus=0``):
    collectors ``add_async`` (it blocks them while the queue is full: backpressure), the
    learner takes fragments in arrival order with :meth:`get`."""

    def __init__(self, maxsize: int) -> None:
        from ray.util.queue import Queue

        self.queue: Any = Queue(maxsize, actor_options={"num_cpus": 0})

    def add_async(self, fragment: dict[str, Any], *, route: int = 0) -> Any:
        """Enqueue one fragment; the ref completes once it is in the queue."""
        return self.queue.actor.put.remote(fragment, None)

    def get(self, timeout_s: float) -> dict[str, Any] | None:
        """The oldest fragment, or None when none arrived within ``timeout_s``."""
        from ray.util.queue import Empty

        try:
            return self.queue.get(timeout=timeout_s)  # type: ignore[no-any-return]
        except Empty:
            return None

    def close(self) -> None:
        """Kill the queue actor."""
        self.queue.shutdown(force=True)


# ----------------------------------------------------------------- the pool


class CollectorPool:
    """``num_collectors`` :class:`Collector` actors, their :class:`Coordinator` and their
    restarts (see the module docstring).

    Args:
        num_collectors: K. collector_args: ``collector_args(i)`` -> the keyword arguments of
            :class:`Collector` for collector ``i`` except ``index``.
        sink: where the collectors push (``add_async(fragment, route=i)``).
        num_cpus: Ray CPUs reserved per collector (0: scheduled whatever the load).
        run_dir: the run folder, where ``faults.log`` records restarts (None: log only).
        timeout_s: timeout of every blocking remote call.
    """

    def __init__(
        self,
        num_collectors: int,
        collector_args: Callable[[int], dict[str, Any]],
        sink: Any,
        *,
        num_cpus: float = 0.0,
        run_dir: str | Path | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        self.timeout_s, self.args, self.sink = timeout_s, collector_args, sink
        self.log_path = None if run_dir is None else Path(run_dir) / "faults.log"
        opts = {"num_cpus": num_cpus, "max_restarts": -1, "max_task_retries": 0}
        self._coord: Any = ray.remote(Coordinator).options(num_cpus=0).remote(num_collectors)
        self._remote = ray.remote(Collector).options(**opts)  # type: ignore[arg-type]
        self.actors = [self._spawn(i) for i in range(num_collectors)]
        self.attempts = [0] * num_collectors  # re-submissions of each collector's loop
        self.runs = [self._run(i) for i in range(num_collectors)]
        self.restarts = [0] * num_collectors
        self.lost = 0

    def _spawn(self, i: int) -> Any:
        return self._remote.remote(index=i, **self.args(i))

    def _run(self, i: int) -> Any:
        return self.actors[i].run.remote(
            self.sink, self._coord, None, self.timeout_s, self.attempts[i]
        )

    def publish(self, version: int, weights: dict[str, np.ndarray]) -> None:
        """Put ``weights`` in the object store once and hand the reference to the collectors."""
        ray.get(self._coord.publish.remote(version, [ray.put(weights)]), timeout=self.timeout_s)

    def drain(self) -> tuple[int, list[tuple[int, float, int, int]]]:
        """``(env steps collected so far, new episodes (collector, return, length, step))``."""
        r = ray.get(self._coord.drain.remote(), timeout=self.timeout_s)
        self.lost = r.lost
        return r.steps, r.episodes

    def check(self) -> int:
        """Restart the collectors whose loop ended with an error; returns how many died since
        the last check (one death counts once, however many re-submissions it takes)."""
        ready, _ = ray.wait(self.runs, num_returns=len(self.runs), timeout=0)
        failed: list[tuple[int, BaseException]] = []
        for ref in ready:
            try:
                ray.get(ref)  # a loop that returned was stopped on purpose
            except ray.exceptions.RayError as err:
                failed.append((self.runs.index(ref), err))
        if not failed:
            return 0
        synced = ray.get(self._coord.synced_attempts.remote(), timeout=self.timeout_s)
        new = 0
        for i, error in failed:
            # a re-submitted loop that never synced: the same death (the actor is still
            # restarting, or Ray will not bring it back: killed with no_restart, restarts used up)
            same = self.attempts[i] > 0 and synced[i] < self.attempts[i]
            if same and isinstance(error, ray.exceptions.ActorDiedError):
                ray.kill(self.actors[i], no_restart=True)
                self.actors[i] = self._spawn(i)
                self._record(f"collector {i}: Ray did not restart it; started a new actor")
            elif not same:
                new += 1
                self.restarts[i] += 1
                cause = f"{type(error).__name__}: {str(error).splitlines()[0]}"
                self._record(f"collector {i} died ({cause}); restart {self.restarts[i]}: "
                             "its loop is re-submitted")  # fmt: skip
            self.attempts[i] += 1
            self.runs[i] = self._run(i)
        return new

    def _record(self, message: str) -> None:
        log.warning(message)
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as f:
                f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")

    def close(self, wait_s: float = 5.0) -> None:
        """Stop the loops (waiting up to ``wait_s``), then kill the actors."""
        try:
            ray.get(self._coord.stop.remote(), timeout=self.timeout_s)
            ray.wait(self.runs, num_returns=len(self.runs), timeout=wait_s)
        finally:
            for a in [*self.actors, self._coord]:
                ray.kill(a, no_restart=True)
