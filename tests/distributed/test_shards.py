"""ReplayShards over uniform ReplayBuffers: routing, sampling across shards, ids, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("ray")

from rlstore import ReplayBuffer  # noqa: E402
from rlstore.distributed import ReplayShards, ShardBatch, ShardUnavailableError  # noqa: E402
from rlstore.errors import ConfigError, EmptyBufferError, SpecError  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def three(ray_session):
    """Three uniform shards (emptied before each use)."""
    shards = ReplayShards(lambda: ReplayBuffer(400, num_envs=4, seed=0), 3, name="three", seed=1)
    yield shards
    shards.close()


def test_adds_are_routed_and_samples_follow_shard_sizes(three, fragment) -> None:
    three.clear()
    with pytest.raises(EmptyBufferError, match="hold no sampleable item"):
        three.sample(4)
    sizes = [40, 80, 120]  # shard s holds 40 (s + 1) items
    for s, size in enumerate(sizes):
        three.add(fragment(size // 4, 4, 10_000 * s), route=s + 3)  # route % 3 = s
    assert [st["size"] for st in three.stats()] == sizes
    assert three.size() == 240
    batches = three.sample_many(20, 64, prefetch=1) + [three.sample(64, prefetch=1)]
    assert all(isinstance(b, ShardBatch) and b.discount is None for b in batches)
    ids = np.concatenate([b.ids for b in batches])
    obs = np.concatenate([b.obs[:, 0] for b in batches])
    np.testing.assert_array_equal(ids % 3, obs // 10_000)  # the id names the item's shard
    for b in batches:
        np.testing.assert_array_equal(b.next_obs, b.obs + 0.5)
        np.testing.assert_array_equal(b.reward, b.obs[:, 0] / 2)
        assert b.weights.dtype == np.float32 and (b.weights == 1).all()
        assert b.obs.flags.writeable  # fresh arrays: torch.from_numpy without a warning
    # shard frequencies proportional to sizes, within 5 sigma of the binomial: a false alarm
    # for at most 1 seed in 500,000 (3 sigma: 1 in 120), while a split ignoring the sizes
    # (1/3 each) is off by 16 sigma on the first shard
    n, p = len(ids), np.array(sizes) / sum(sizes)
    counts = np.bincount(ids % 3, minlength=3)
    assert (np.abs(counts - n * p) <= 5 * np.sqrt(n * p * (1 - p))).all(), counts


def test_small_shards_and_object_refs(three, fragment, ray_session) -> None:
    three.clear()
    three.add(fragment(2, 4, 0), route=1)
    with pytest.raises(EmptyBufferError, match="expected <= stored items=8"):
        three.sample(9)  # as a local buffer
    f = fragment(1, 4, 100)
    f["obs"] = ray_session.put(f["obs"])  # large observations: put once, passed by reference
    ref = three.add_async(ray_session.put(fragment(1, 4, 200)), route=2)  # the whole fragment
    three.add(f, route=0)
    ray_session.get(ref, timeout=30)
    assert [st["size"] for st in three.stats()] == [4, 8, 4]
    # shard 0 holds 4 items and may be asked for more: drawn with replacement
    for b in three.sample_many(5, 16):
        assert torch.from_numpy(b.obs).shape == (16, 3)
        assert set(np.unique(b.obs[:, 0] // 100)) <= {0, 1, 2}


def test_bad_input_is_rejected_and_changes_nothing(three, fragment) -> None:
    three.clear()
    three.add(fragment(4, 4, 0), route=1)
    with pytest.raises(SpecError, match="fragment: expected a dict"):
        three.add([1, 2, 3])  # type: ignore[arg-type]
    bad = fragment(4, 4, 0)
    bad["reward"] = np.full((4, 4), np.nan, np.float32)
    with pytest.raises(SpecError, match="reward: expected finite"):
        three.add(bad, route=1)  # raised by the shard's buffer, as itself
    missing = fragment(4, 4, 0)
    del missing["truncated"]
    with pytest.raises(SpecError, match="missing \\['truncated'\\]"):
        three.add(missing)
    with pytest.raises(ConfigError, match="route"):
        three.add(fragment(4, 4, 0), route=-1)
    with pytest.raises(ConfigError, match="samples uniformly"):
        three.add({**fragment(4, 4, 0), "priorities": np.ones((4, 4))})
    with pytest.raises(ConfigError, match="uniform"):
        three.update_priorities(np.array([1]), np.array([2.0]))
    with pytest.raises(SpecError, match="priorities: expected finite"):
        three.update_priorities(np.array([1, 3]), np.array([2.0]))
    with pytest.raises(SpecError, match="ids: expected a 1-D array of ints"):
        three.update_priorities(np.array([-1]), np.array([2.0]))
    for kwargs, match in [
        ({"k": 0}, "k"),
        ({"batch_size": 1.5}, "batch_size"),
        ({"beta": -1.0}, "beta"),
        ({"prefetch": -1}, "prefetch"),
    ]:
        with pytest.raises((ConfigError, SpecError, ValueError), match=match):
            three.sample_many(**{"k": 1, "batch_size": 4, **kwargs})
    with pytest.raises(ConfigError, match="exists already"):
        ReplayShards(lambda: ReplayBuffer(8), name="three")
    assert [st["size"] for st in three.stats()] == [0, 16, 0]
    for kwargs, match in [
        ({"name": "a/b"}, "name"),
        ({"num_shards": 0}, "num_shards"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"max_restarts": -2}, "max_restarts"),
        ({"rate_limiter": {"samples_per_insert": 1}}, "rate_limiter"),
        ({"checkpoint_dir": 5}, "checkpoint_dir"),  # was 120 s of retries, then a timeout
    ]:
        with pytest.raises(ConfigError, match=match):
            ReplayShards(lambda: ReplayBuffer(8), **kwargs)
    # a make_buffer that fails in the actors: the error at once, not 120 s of retries
    with pytest.raises(ShardUnavailableError, match="(?s)constructor.*make_buffer: expected"):
        ReplayShards(lambda: 3, name="nobuffer")


def test_one_shard_draws_what_the_local_buffer_draws(ray_session, fragment) -> None:
    shards = ReplayShards(lambda: ReplayBuffer(64, num_envs=2, seed=3), name="one")
    local = ReplayBuffer(64, num_envs=2, seed=3)
    try:
        for i in range(5):
            f = fragment(8, 2, 100 * i)
            shards.add(f)
            local.extend(**f)
        assert shards.size() == len(local) == 64
        for b in [shards.sample(16)] + shards.sample_many(3, 16):
            want = local.sample(16)
            np.testing.assert_array_equal(b.ids, want.indices)  # one shard: id * 1 + 0
            for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
                np.testing.assert_array_equal(getattr(b, k), getattr(want, k).numpy(), err_msg=k)
    finally:
        shards.close()


def test_adds_blocked_by_the_limiter_leave_threads_to_the_samples(ray_session, fragment) -> None:
    # more blocked adds than the actor's default threads (8): the samples that unblock them
    # must still run (they waited behind the adds until every add timed out)
    from rlstore.distributed import SampleToInsertRatio

    limiter = SampleToInsertRatio(1.0, 1, 1.0)  # inserts wait while diff > 2
    shards = ReplayShards(lambda: ReplayBuffer(64), name="busy", timeout_s=30.0,
                          rate_limiter=limiter)  # fmt: skip
    try:
        shards.add(fragment(3, 1, 0))  # diff = 3: the next adds wait for samples
        refs = [shards.add_async(fragment(1, 1, 10 + i)) for i in range(10)]
        while refs:
            shards.sample(1)
            _, refs = ray_session.wait(refs, timeout=0.05)
        assert shards.size() == 13
    finally:
        shards.close()
