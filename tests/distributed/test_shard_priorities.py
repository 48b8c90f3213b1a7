"""Prioritized replay across shards: global frequencies, importance weights, priority routing."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("ray")

from rlstore import ReplayBuffer  # noqa: E402
from rlstore.distributed import ReplayShards  # noqa: E402
from rlstore.samplers import PrioritizedSampler  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")

EPS = 1e-6


def prioritized(shard: int, alpha: float = 1.0) -> ReplayBuffer:
    sampler = PrioritizedSampler(alpha=alpha, beta=0.4, eps=EPS, seed=10 + shard)
    return ReplayBuffer(32, num_envs=2, sampler=sampler)


def test_frequencies_and_weights_follow_the_global_priorities(ray_session, fragment) -> None:
    shards = ReplayShards(prioritized, 2, name="prio", seed=0)
    try:
        # shard 0: 16 items (obs 0..15) with priorities 1..16; shard 1: 8 items (obs
        # 1000..1007) with priorities 20..27, set by the fragments' initial priorities
        shards.add({**fragment(8, 2, 0), "priorities": np.arange(1, 17.0).reshape(8, 2)})
        f1 = fragment(4, 2, 1000)
        shards.add({**f1, "priorities": np.arange(20, 28.0).reshape(4, 2)}, route=1)
        prio = {float(o): o + 1.0 for o in range(16)} | {1000.0 + i: 20.0 + i for i in range(8)}
        p = {o: v + EPS for o, v in prio.items()}  # (p + eps)^alpha, alpha = 1
        total, pmin = sum(p.values()), min(p.values())
        stats = shards.stats()
        masses = [total_of(range(1, 17), {}), total_of(range(20, 28), {})]
        np.testing.assert_allclose([st["mass"] for st in stats], masses, rtol=1e-9)
        batches = shards.sample_many(500, 24, beta=0.5)
        obs = np.concatenate([b.obs[:, 0] for b in batches])
        weights = np.concatenate([b.weights for b in batches])
        ids = np.concatenate([b.ids for b in batches])
        # every draw's weight: (N P(i))^-beta / max = (p_min / p_i)^beta, p_min over BOTH shards
        want_w = np.array([(pmin / p[o]) ** 0.5 for o in obs])
        np.testing.assert_allclose(weights, want_w, rtol=1e-6)
        assert weights.max() <= 1.0
        # each item's frequency within 3 sigma of n * p_i / M
        n = len(obs)
        for o, pi in p.items():
            q = pi / total
            assert abs((obs == o).sum() - n * q) <= 3 * np.sqrt(n * q * (1 - q)), o
        # update_priorities reaches the right shard and item
        pick = ids[np.isin(obs, [3.0, 1005.0])]
        first = {o: ids[obs == o][0] for o in (3.0, 1005.0)}
        assert len(pick)
        shards.update_priorities(np.array([first[3.0], first[1005.0]]), np.array([100.0, 0.0]))
        stats = shards.stats()
        np.testing.assert_allclose(stats[0]["mass"], total_of(range(1, 17), {4: 100.0}),
                                   rtol=1e-9)  # fmt: skip
        np.testing.assert_allclose(stats[1]["mass"], total_of(range(20, 28), {25: 0.0}),
                                   rtol=1e-9)  # fmt: skip
        assert stats[1]["pmin"] == pytest.approx(EPS)
        after = shards.sample_many(40, 24, beta=1.0)
        obs = np.concatenate([b.obs[:, 0] for b in after])
        assert (obs == 3.0).mean() > 0.2 and (obs == 1005.0).sum() == 0
    finally:
        shards.close()


def total_of(priorities, changed: dict) -> float:
    """Sum of ``p + eps`` with the items whose priority was ``k`` set to ``changed[k]``."""
    return sum(changed.get(k, float(k)) + EPS for k in priorities)


def test_one_prioritized_shard_equals_the_local_buffer(ray_session, fragment) -> None:
    shards = ReplayShards(lambda: prioritized(0, alpha=0.6), name="prio1")
    local = prioritized(0, alpha=0.6)
    try:
        for i, t in enumerate([5, 9, 4]):  # 36 transitions in a 32-slot ring: wraps
            f = {**fragment(t, 2, 100 * i), "priorities": np.linspace(0.1, 3, 2 * t).reshape(t, 2)}
            shards.add(f)
            pri = f.pop("priorities")
            local.extend(**f)
            k = min(2 * t, len(local))
            hi = local.first_id + len(local)
            local.update_priorities(np.arange(hi - k, hi), pri.ravel()[2 * t - k :])
        for beta in (None, 0.7):  # None: the sampler's own beta (0.4)
            for b in shards.sample_many(3, 16, beta):
                want = local.sample(16, beta)
                np.testing.assert_array_equal(b.ids, want.indices)
                np.testing.assert_array_equal(b.obs, want.obs.numpy())
                np.testing.assert_allclose(b.weights, want.weights.numpy(), rtol=1e-6)
        td = np.linspace(0, 2, 16)
        shards.update_priorities(b.ids, td)
        local.update_priorities(want.indices, td)
        b, want = shards.sample(16), local.sample(16)
        np.testing.assert_array_equal(b.ids, want.indices)
        np.testing.assert_allclose(b.weights, want.weights.numpy(), rtol=1e-6)
    finally:
        shards.close()
