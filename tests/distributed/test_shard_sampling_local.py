"""Replay shards without Ray: :class:`ShardSampling` over in-process shards (a fake actor runs
each call at once) for the client-side checks, and :class:`ReplayShard` refusing whole adds."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import pytest

from rlstore import ReplayBuffer
from rlstore.distributed import SampleToInsertRatio
from rlstore.distributed.shard import ReplayShard
from rlstore.distributed.shard_sampling import ShardSampling
from rlstore.errors import ConfigError, SpecError
from rlstore.samplers import PrioritizedSampler


class _Call:
    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def options(self, **options: Any) -> _Call:
        return self

    def remote(self, *args: Any) -> Any:
        return self.fn(*args)


class _Actor:
    def __init__(self, shard: ReplayShard) -> None:
        self.shard = shard

    def __getattr__(self, method: str) -> _Call:
        return _Call(getattr(self.shard, method))


class LocalShards(ShardSampling):
    """The sampling half of ``ReplayShards`` over ``ReplayShard`` objects in this process."""

    def __init__(self, shards: list[ReplayShard], seed: int = 0) -> None:
        self.shards, self.num_shards, self.name, self.timeout_s = shards, len(shards), "t", 10.0
        self._actors = [_Actor(s) for s in shards]
        self._rng = np.random.default_rng(seed)
        self._pending = deque()
        self._refresh()

    def _get(self, s: int, ref: Any, method: str, args: tuple, deadline: float) -> Any:
        return ref

    def _refresh(self, timeout_s: float | None = None) -> None:
        self._stats = [s.stats() for s in self.shards]


def prioritized_shards(fragment: Any, sizes: tuple[int, ...]) -> LocalShards:
    def make(i: int) -> ReplayBuffer:
        return ReplayBuffer(64, sampler=PrioritizedSampler(alpha=1.0, beta=0.5, seed=i))

    shards = [ReplayShard(make, shard=i) for i in range(len(sizes))]
    for i, (s, n) in enumerate(zip(shards, sizes, strict=True)):
        s.add(fragment(n, 1, 100 * i))
    return LocalShards(shards)


def test_negative_priorities_change_no_shard(fragment) -> None:
    client = prioritized_shards(fragment, (8, 8))
    batch = client.sample(16)
    assert set(batch.ids % 2) == {0, 1}
    priorities = np.full(16, 3.0)
    priorities[np.flatnonzero(batch.ids % 2 == 1)[0]] = -1.0  # one bad value, on shard 1
    masses = [s.prio.tree.total for s in client.shards]
    with pytest.raises(SpecError, match="priorities: expected numbers >= 0, got -1.0"):
        client.update_priorities(batch.ids, priorities)
    assert [s.prio.tree.total for s in client.shards] == masses  # shard 0 unchanged too


def test_an_add_whose_priorities_overflow_the_tree_stores_nothing(fragment) -> None:
    limiter = SampleToInsertRatio(1.0, 4, 10.0).config()
    shard = ReplayShard(
        lambda: ReplayBuffer(64, num_envs=2, sampler=PrioritizedSampler(alpha=1.0)),
        rate_limiter=limiter,
    )
    frag = {**fragment(3, 2, 0), "priorities": np.full((3, 2), 1e307)}
    with pytest.raises(SpecError, match=r"priorities: expected \(p \+ eps\)\^alpha <="):
        shard.add(frag)
    assert (shard.stats()["size"], shard.added) == (0, 0)  # was 6 items stored, 0 counted
    assert shard.limiter is not None and shard.limiter.inserts == 0


def test_bad_placement_is_refused_before_ray_starts(monkeypatch) -> None:
    pytest.importorskip("ray")
    from rlstore.distributed import client

    def no_ray() -> None:
        raise AssertionError("Ray started for a call that fails its checks")

    monkeypatch.setattr(client, "start_ray", no_ray)
    with pytest.raises(ConfigError, match="placement: expected a function"):
        client.ReplayShards(lambda: ReplayBuffer(8), placement=5)


def test_the_split_after_update_priorities_follows_the_new_masses(fragment) -> None:
    client = prioritized_shards(fragment, (8, 8))  # every priority 1: masses 8 and 8
    client.sample(4)
    ids0 = np.arange(8) * 2  # all of shard 0, local ids 0..7
    client.update_priorities(ids0, np.full(8, 1e6))  # shard 1: now ~1e-6 of the mass
    batch = client.sample(16)
    assert (batch.ids % 2 == 0).sum() >= 15  # was split by the old masses: ~8 from shard 1


def test_the_limiter_counts_under_the_buffer_lock(fragment) -> None:
    # a checkpoint copies buffer and counters under the buffer lock: counted after it was
    # released, a checkpoint in between saved the items without their count
    limiter = SampleToInsertRatio(1.0, 1, 100.0).config()
    shard = ReplayShard(lambda: ReplayBuffer(64), rate_limiter=limiter)
    assert shard.limiter is not None
    locked = []
    for name in ("record_insert", "record_sample"):
        real = getattr(shard.limiter, name)

        def record(n: int, real: Any = real) -> None:
            locked.append(shard._lock.locked())
            real(n)

        setattr(shard.limiter, name, record)
    shard.add(fragment(4, 1, 0))
    shard.sample_many([2])
    assert locked == [True, True]
