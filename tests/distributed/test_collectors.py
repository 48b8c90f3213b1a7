"""Collectors on Ray: whole fragments with true successors, versioned weight sync, restarts."""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from rlstore.agents.config import EnvironmentConfig  # noqa: E402
from rlstore.agents.impala import ImpalaPolicy  # noqa: E402
from rlstore.distributed.collector import (  # noqa: E402
    CollectorPool,
    Coordinator,
    FragmentQueue,
    module_weights,
)

pytestmark = pytest.mark.xdist_group("ray")
T, N = 8, 2


def _pool(queue, num_collectors=1, run_dir=None):
    args = {"make_policy": functools.partial(ImpalaPolicy, hidden_size=8),
            "environment": EnvironmentConfig(env_id="CartPole-v1"), "num_envs": N,
            "fragment_length": T, "seed": 0}  # fmt: skip
    return CollectorPool(num_collectors, lambda i: args, queue, run_dir=run_dir, timeout_s=120)


def _weights(bias: float) -> dict:
    import gymnasium as gym

    envs = gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync")
    agent = ImpalaPolicy(0, envs, hidden_size=8).agent
    envs.close()
    w = module_weights(agent)
    w["actor.4.bias"] = np.array([-bias, bias], np.float32)  # action 1 all but surely
    return w


def _take(queue, pool, pred, within_s=180.0):
    """The first fragment matching ``pred``, within ``within_s`` however fast the other
    collectors push (a fresh collector actor may take the pool's 120 s start-up under load)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        frag = queue.get(timeout_s=1.0)
        pool.check()
        if frag is not None and pred(frag):
            return frag
    raise AssertionError(f"no matching fragment arrived within {within_s} s")


def test_a_late_sync_of_a_dead_run_does_not_count_as_the_new_runs() -> None:
    coord = Coordinator(2)  # a plain object: no Ray needed
    assert coord.synced_attempts() == [-1, -1]
    coord.sync(0, -1, 16, [], 0, attempt=1)  # collector 0's re-submitted loop synced
    coord.sync(0, -1, 16, [], 0, attempt=0)  # a sync of its dead first run, landing late
    coord.sync(1, -1, 16, [(9.0, 9)], 0)
    assert coord.synced_attempts() == [1, 0]
    r = coord.drain()
    assert (r.steps, r.episodes) == (48, [(1, 9.0, 9, 48)])


def test_fragments_are_whole_and_continuous_and_weights_sync_by_version(ray_session) -> None:
    queue = FragmentQueue(2)
    pool = _pool(queue)
    try:
        pool.publish(0, _weights(0.0))
        # under load a collector actor takes up to the pool's 120 s start-up limit to start
        a, b = queue.get(timeout_s=180), queue.get(timeout_s=60)
        for f in (a, b):
            assert f["obs"].shape == (T, N, 4) and f["next_obs"].shape == (T, N, 4)
            assert f["action"].shape == f["reward"].shape == f["logp"].shape == (T, N)
            assert f["reward"].dtype == np.float32 and f["terminated"].dtype == bool
            done = f["terminated"] | f["truncated"]
            cont = ~done[:-1]  # inside an episode the successor is the next observation
            np.testing.assert_array_equal(f["next_obs"][:-1][cont], f["obs"][1:][cont])
            np.testing.assert_array_equal(f["next_obs"][-1][~done[-1]], f["last_obs"][~done[-1]])
        np.testing.assert_array_equal(b["obs"][0], a["last_obs"])  # fragments follow on
        # a fragment's steps are reported at the collector's next sync, after its push: poll
        for _ in range(1200):  # up to 60 s (steps are a running total)
            steps, _ = pool.drain()
            if steps >= 2 * T * N:
                break
            time.sleep(0.05)
        assert steps >= 2 * T * N and steps % (T * N) == 0
        # a newer version reaches the collector by reference; older fragments carry older ones
        pool.publish(5, _weights(50.0))
        frag = _take(queue, pool, lambda f: f["version"] == 5)
        assert (frag["action"] == 1).all()
        np.testing.assert_allclose(frag["logp"], 0.0, atol=1e-6)
    finally:
        pool.close()
        queue.close()


def test_killed_collectors_are_restarted_and_logged(ray_session, tmp_path) -> None:
    queue = FragmentQueue(2)
    pool = _pool(queue, num_collectors=3, run_dir=tmp_path)
    try:
        pool.publish(0, _weights(0.0))
        for i in (0, 1):
            _take(queue, pool, lambda f, i=i: f["collector"] == i)
        ray.kill(pool.actors[0], no_restart=False)  # Ray restarts it: its loop is re-submitted
        ray.kill(pool.actors[1], no_restart=True)  # gone for good: a fresh actor takes over
        deadline = time.monotonic() + 60  # ray.kill takes effect asynchronously
        while time.monotonic() < deadline:  # the run goes on (collector 2 keeps pushing)
            pool.check()
            pool.drain()
            if pool.restarts[0] >= 1 and pool.restarts[1] >= 1:
                break
            queue.get(timeout_s=0.2)
        assert pool.restarts == [1, 1, 0]
        pool.publish(1, _weights(0.0))
        for i in (0, 1):
            _take(queue, pool, lambda f, i=i: f["collector"] == i and f["version"] == 1)
        text = (tmp_path / "faults.log").read_text()
        assert "collector 0 died" in text and "collector 1 died" in text
        assert "collector 1: Ray did not restart it; started a new actor" in text
        assert "collector 0: Ray did not restart" not in text
    finally:
        pool.close()
        queue.close()
