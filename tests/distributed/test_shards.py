"""ReplayShards over uniform ReplayBuffers: routing, sampling across shards, ids, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("ray")

from rlstore import ReplayBuffer  # noqa: E402
from rlstore.distributed import ReplayShards, ShardBatch  # noqa: E402
from rlstore.errors import ConfigError, SpecError  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")


def fragment(t: int, n: int, start: int) -> dict[str, np.ndarray]:
    """``t`` steps of ``n`` envs; obs[..., 0] = a unique counter, next_obs = obs + 0.5."""
    obs = np.arange(start, start + t * n, dtype=np.float32).reshape(t, n, 1) * np.ones(3, "f4")
    return dict(
        obs=obs,
        action=np.arange(t * n, dtype=np.int64).reshape(t, n),
        reward=obs[..., 0] / 2,
        next_obs=obs + 0.5,
        terminated=np.zeros((t, n), bool),
        truncated=np.ones((t, n), bool),  # every step ends: next_obs kept aside, exactly
    )


def test_one_shard_draws_what_the_local_buffer_draws(ray_session) -> None:
    shards = ReplayShards(lambda: ReplayBuffer(64, num_envs=2, seed=3), name="one")
    local = ReplayBuffer(64, num_envs=2, seed=3)
    try:
        for i in range(5):
            f = fragment(8, 2, 100 * i)
            shards.add(f)
            local.extend(**f)
        assert shards.size() == len(local) == 64
        got = [shards.sample(16)] + shards.sample_many(3, 16)
        for b in got:
            want = local.sample(16)
            assert isinstance(b, ShardBatch) and b.discount is None
            np.testing.assert_array_equal(b.ids, want.indices)  # one shard: id * 1 + 0
            for k in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
                np.testing.assert_array_equal(getattr(b, k), getattr(want, k).numpy(), err_msg=k)
            assert b.weights.dtype == np.float32 and (b.weights == 1).all()
            assert b.obs.flags.writeable  # the learner may convert it with torch.from_numpy
    finally:
        shards.close()


@pytest.mark.parametrize("num_shards", [2, 3])
def test_adds_are_routed_and_samples_follow_shard_sizes(ray_session, num_shards) -> None:
    shards = ReplayShards(
        lambda: ReplayBuffer(400, num_envs=4, seed=0), num_shards, name=f"r{num_shards}", seed=1
    )
    try:
        sizes = [40 * (s + 1) for s in range(num_shards)]  # shard s holds 40 (s + 1) items
        for s, size in enumerate(sizes):
            shards.add(fragment(size // 4, 4, 10_000 * s), route=s + num_shards)  # route % S
        assert [st["size"] for st in shards.stats()] == sizes
        assert shards.size() == sum(sizes)
        batches = shards.sample_many(20, 64, prefetch=1) + [shards.sample(64, prefetch=1)]
        ids = np.concatenate([b.ids for b in batches])
        obs = np.concatenate([b.obs[:, 0] for b in batches])
        # the id names the shard, and the item is one that shard holds
        np.testing.assert_array_equal(ids % num_shards, obs // 10_000)
        for b in batches:
            np.testing.assert_array_equal(b.next_obs, b.obs + 0.5)
            np.testing.assert_array_equal(b.reward, b.obs[:, 0] / 2)
        # shard frequencies proportional to sizes, within 3 sigma of the binomial
        n, p = len(ids), np.array(sizes) / sum(sizes)
        counts = np.bincount(ids % num_shards, minlength=num_shards)
        assert (np.abs(counts - n * p) <= 3 * np.sqrt(n * p * (1 - p))).all(), counts
    finally:
        shards.close()


def test_bad_input_is_rejected_and_changes_nothing(ray_session) -> None:
    shards = ReplayShards(lambda: ReplayBuffer(64, num_envs=2, seed=0), 2, name="bad")
    try:
        shards.add(fragment(4, 2, 0), route=1)
        with pytest.raises(SpecError, match="fragment: expected a dict"):
            shards.add([1, 2, 3])  # type: ignore[arg-type]
        bad = fragment(4, 2, 0)
        bad["reward"] = np.full((4, 2), np.nan, np.float32)
        with pytest.raises(SpecError, match="reward: expected finite"):
            shards.add(bad, route=1)
        missing = fragment(4, 2, 0)
        del missing["truncated"]
        with pytest.raises(SpecError, match="missing \\['truncated'\\]"):
            shards.add(missing)
        with pytest.raises(ConfigError, match="route"):
            shards.add(fragment(4, 2, 0), route=-1)
        assert [st["size"] for st in shards.stats()] == [0, 8]
        with pytest.raises(ConfigError, match="samples uniformly"):
            shards.add({**fragment(4, 2, 0), "priorities": np.ones((4, 2))})
        with pytest.raises(ConfigError, match="uniform"):  # from the shard's buffer
            shards.update_priorities(np.array([1]), np.array([2.0]))
        with pytest.raises(SpecError, match="priorities: expected finite"):
            shards.update_priorities(np.array([1, 3]), np.array([2.0]))
        with pytest.raises(ConfigError, match="exists already"):
            ReplayShards(lambda: ReplayBuffer(8), name="bad")
        assert shards.size() == 8
    finally:
        shards.close()
    with pytest.raises(ConfigError, match="name"):
        ReplayShards(lambda: ReplayBuffer(8), name="a/b")


def test_empty_shards_refuse_to_sample(ray_session) -> None:
    from rlstore.errors import EmptyBufferError

    shards = ReplayShards(lambda: ReplayBuffer(8), 2, name="empty")
    try:
        with pytest.raises(EmptyBufferError, match="hold no sampleable item"):
            shards.sample(4)
        shards.add(fragment(2, 1, 0), route=1)
        with pytest.raises(EmptyBufferError, match="expected <= stored items=2"):
            shards.sample(3)  # as a local buffer
        shards.add(fragment(1, 1, 2), route=0)
        # shard 0 holds 1 item but may be asked for more: drawn with replacement
        b = shards.sample_many(10, 3)
        assert all(torch.from_numpy(x.obs).shape == (3, 3) for x in b)
    finally:
        shards.close()
