"""Faults: exact resume of a shard from its checkpoint, killed shards (bounded loss, clients go
on), a learner killed mid-sample, shards gone for good, and the rate limiter through Ray."""

from __future__ import annotations

import copy
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from ray import cloudpickle  # noqa: E402

from rlstore import ReplayBuffer  # noqa: E402
from rlstore.checkpoint import load_state, metadata_file_path  # noqa: E402
from rlstore.distributed import (  # noqa: E402
    ReplayShards,
    ReplayTimeoutError,
    SampleToInsertRatio,
    ShardUnavailableError,
)
from rlstore.errors import CheckpointError  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # actors of this module's classes
ray_remote = ray.remote(num_cpus=0)


def wait_for(predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.1)


def saved_added(folder, prefix: str) -> int:
    """``added`` of the shard checkpoint on disk (-1: none yet, or being replaced just now)."""
    try:
        return int(load_state(folder, prefix=prefix)["added"])
    except CheckpointError:
        return -1


def test_a_killed_shard_resumes_exactly_from_its_checkpoint(ray_session, fragment, tmp_path):
    shards = ReplayShards(
        lambda: ReplayBuffer(64, num_envs=2, seed=5), name="ckpt", checkpoint_dir=tmp_path,
        checkpoint_every_s=3600.0,
    )  # fmt: skip
    try:
        for i in range(4):
            shards.add(fragment(6, 2, 100 * i))
        shards.checkpoint()
        assert metadata_file_path(tmp_path, "ckpt_0_").exists()
        future = shards.sample_many(3, 8)  # what the shard draws after its checkpoint
        shards.add(fragment(5, 2, 900))  # added after the checkpoint: lost with the shard
        assert shards.size() == 58
        ray_session.kill(shards.actors()[0], no_restart=False)
        wait_for(lambda: shards.stats()[0]["restored"], "the shard restarted")
        assert shards.size() == 48  # the loss: exactly what came after the checkpoint
        for a, b in zip(future, shards.sample_many(3, 8), strict=True):  # the same draws
            for k in ("ids", "obs", "action", "reward", "next_obs", "truncated", "weights"):
                np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
        shards.add(fragment(4, 2, 2000))  # the client goes on
        assert shards.size() == 56
        ray_session.kill(shards.actors()[0], no_restart=True)  # gone for good
        with pytest.raises(ShardUnavailableError, match="shard ckpt/0: the actor is gone"):
            deadline = time.monotonic() + 60  # ray.kill takes effect asynchronously
            while time.monotonic() < deadline:
                shards.add(fragment(1, 2, 0))
                time.sleep(0.1)
    finally:
        shards.close()


@ray_remote
class Learner:
    """A learner process sampling from its own copy of the client."""

    def __init__(self, shards: ReplayShards):
        self.shards = shards

    def run(self, n: int) -> int:
        for _ in range(n):
            self.shards.sample_many(4, 16, prefetch=1)
        return n


def test_killed_shards_and_learners_leave_the_rest_running(ray_session, fragment, tmp_path):
    shards = ReplayShards(
        lambda: ReplayBuffer(400, num_envs=2, seed=0), 2, name="auto", checkpoint_dir=tmp_path,
        checkpoint_every_s=0.2,
    )  # fmt: skip
    try:
        for i in range(10):
            shards.add(fragment(4, 2, 100 * i), route=i)  # 40 items per shard
        # a periodic checkpoint after the last add (not just any: one may predate some adds)
        wait_for(lambda: saved_added(tmp_path, "auto_0_") == 40, "a checkpoint of all 40 adds")
        # a shard killed while collectors add: the client re-resolves it and goes on
        ray_session.kill(shards.actors()[0], no_restart=False)
        for i in range(10):
            shards.add(fragment(4, 2, 5000 + 100 * i), route=i)
        wait_for(lambda: shards.stats()[0]["restored"], "shard 0 restarted")
        sizes = [st["size"] for st in shards.stats()]
        assert sizes[1] == 80 and 40 <= sizes[0] <= 80, sizes  # bounded by the checkpoints
        # a shard killed with a prefetched request in flight: the request is sent again
        shards.checkpoint()  # (nothing lost this time)
        shards.sample_many(2, 16, prefetch=2)
        ray_session.kill(shards.actors()[1], no_restart=False)
        batches = shards.sample_many(2, 16, prefetch=2)
        assert all(len(b.ids) == 16 for b in batches)
        # a learner killed mid-sample: the shards keep their data and serve others
        learner = Learner.remote(shards)
        ref = learner.run.remote(10**6)
        time.sleep(1.0)
        ray_session.kill(learner)
        with pytest.raises(ray_session.exceptions.RayActorError):
            ray_session.get(ref, timeout=60)
        assert [st["size"] for st in shards.stats()] == sizes
        assert len(shards.sample(32).ids) == 32
    finally:
        shards.close()


def test_the_rate_limiter_blocks_the_faster_side_through_ray(ray_session, fragment) -> None:
    limiter = SampleToInsertRatio(samples_per_insert=1.0, min_size_to_sample=8, error_buffer=8.0)
    # the limiter holds a call for timeout_s / 2 = 3 s, then the shard answers with its error:
    # the other 3 s before the client's deadline cover the Ray round trip under load (p99
    # 0.2 s, max 0.4 s for two calls at load 11 on 2 cores; 2.0 s left only 1 s), and the
    # sample that releases the waiting add_async below must arrive within those 3 s
    shards = ReplayShards(
        lambda: ReplayBuffer(400, seed=0), name="limited", rate_limiter=limiter, timeout_s=6.0
    )
    try:
        shards.add(fragment(4, 1, 0))
        with pytest.raises(ReplayTimeoutError, match="shard limited/0: sample of 2 items"):
            shards.sample(2)  # fewer than min_size_to_sample inserted: the learner waits
        shards.add(fragment(12, 1, 4))  # diff = 16: the top of [0, 16]
        shards.add(fragment(4, 1, 16))  # admitted (diff 16 <= 16), now diff = 20
        with pytest.raises(ReplayTimeoutError, match="shard limited/0: insert of 4 items"):
            shards.add(fragment(4, 1, 20))  # collectors wait for the learner
        ref = shards.add_async(fragment(4, 1, 20))  # waits in the shard ...
        assert len(shards.sample(8).ids) == 8  # ... until the learner samples (diff 12)
        assert ray_session.get(ref, timeout=30)["size"] == 24
        shards.add(fragment(4, 1, 24))  # diff 16 -> 20
        impatient = copy.copy(shards)  # a client whose deadline comes before the limiter's
        impatient.timeout_s = 0.3
        with pytest.raises(ReplayTimeoutError, match="shard limited/0: add got no answer within"):
            impatient.add(fragment(4, 1, 28))  # held by the limiter for 3 s
        assert limiter.inserts == 0  # the client's own object is only a config
    finally:
        shards.close()
