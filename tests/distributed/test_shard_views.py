"""A shard serves any replay buffer unchanged: the Hypothesis replay model through a shard,
and n-step, sequence and frame-stack buffers drawing exactly what their local twins draw."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("ray")

import sys  # noqa: E402

from buffers.test_replay_properties import Stream, check_contents, ops_strategy  # noqa: E402
from ray import cloudpickle  # noqa: E402

from rlstore import NStepReplay, ReplayBuffer, SequenceReplay  # noqa: E402
from rlstore.distributed import ReplayShards  # noqa: E402
from rlstore.errors import SpecError  # noqa: E402
from rlstore.samplers import PrioritizedSampler  # noqa: E402
from rlstore.storage import StorageLayout  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this module

CAPACITY = {1: 7, 2: 8}


@pytest.fixture(scope="module")
def model_shards(ray_session):
    """One single-shard ReplayShards per num_envs (emptied by each example)."""
    out = {
        n: ReplayShards(lambda n=n: ReplayBuffer(CAPACITY[n], num_envs=n, seed=0), name=f"m{n}")
        for n in CAPACITY
    }
    yield out
    for shards in out.values():
        shards.close()


def assert_same(got, want) -> None:
    """A ShardBatch against a local batch (torch NamedTuple): every field, weights to 1e-6."""
    local = {k: v for k, v in want._asdict().items() if v is not None}
    extras = local.pop("extras", {})
    local["ids"] = local.pop("indices", local.get("ids"))
    weights = local.pop("weights").numpy()
    np.testing.assert_allclose(got.weights, weights, rtol=1e-6)
    for k, v in local.items():
        mine = getattr(got, k, None)
        if mine is None:
            mine = got.extras[k]  # steps, mask, hidden
        if isinstance(v, dict):
            for kk in v:
                np.testing.assert_array_equal(mine[kk], v[kk].numpy(), err_msg=f"{k}.{kk}")
        else:
            np.testing.assert_array_equal(mine, np.asarray(v), err_msg=k)
    for k, v in extras.items():
        np.testing.assert_array_equal(got.extras[k], v.numpy(), err_msg=k)


@settings(max_examples=6)
@given(n=st.sampled_from([1, 2]), dict_obs=st.booleans(), ops=ops_strategy)
def test_replay_model_through_a_shard(model_shards, n, dict_obs, ops) -> None:
    shards = model_shards[n]
    shards.clear()
    local = ReplayBuffer(CAPACITY[n], num_envs=n, seed=0)
    stream, rows = Stream(n, dict_obs), []
    for _kind, t, codes, bad_first in ops:  # every op is a fragment (extend)
        if bad_first and rows:  # rejected by the shard's buffer, which stays as it was
            saved = (list(stream.cur), stream.counter)
            bad = stream.arrays([stream.step([0] * n)])
            stream.cur, stream.counter = saved
            bad["reward"] = np.full((1, n), np.nan, np.float32)
            with pytest.raises(SpecError, match="reward: expected finite"):
                shards.add(bad)
        block = [stream.step(codes[j * n : (j + 1) * n]) for j in range(t)]
        arrays = stream.arrays(block)
        shards.add(arrays)
        local.extend(**arrays)
        rows.extend(block)
        check_contents(local, rows, stream)  # the local twin holds the model's rows
        assert shards.size() == len(local)
        assert_same(shards.sample(len(local)), local.sample(len(local)))  # same draws


def stream_fragment(rng: np.random.Generator, t: int, n: int, first: int) -> dict:
    """``t`` continuing steps of ``n`` envs with random episode ends, an ``hidden`` extra."""
    obs = np.arange(first, first + (t + 1) * n, dtype=np.float32).reshape(t + 1, n, 1)
    obs = obs * np.ones(3, np.float32)
    term = rng.random((t, n)) < 0.15
    return dict(
        obs=obs[:-1], action=rng.integers(0, 4, (t, n)), reward=rng.random((t, n)).astype("f4"),
        next_obs=obs[1:], terminated=term, truncated=~term & (rng.random((t, n)) < 0.1),
        hidden=obs[:-1, :, :2] * 2,
    )  # fmt: skip


def nstep(shard: int = 0) -> NStepReplay:
    buf = ReplayBuffer(40, num_envs=2, sampler=PrioritizedSampler(alpha=0.7, beta=0.5, seed=1))
    return NStepReplay(buf, n=3, gamma=0.9)


def sequences(shard: int = 0) -> SequenceReplay:
    # no row dropped: the grid of an episode whose start left the ring depends on when the
    # sampler saw it (the shard observes after every add, the local twin when it samples)
    buf = ReplayBuffer(80, num_envs=2, seed=0)
    return SequenceReplay(buf, 3, burn_in=1, overlap=1, alpha=0.6, beta=0.5, seed=2)


@pytest.mark.parametrize("make", [nstep, sequences], ids=["nstep", "sequence"])
def test_views_through_a_shard_equal_their_local_twin(ray_session, make) -> None:
    shards = ReplayShards(make, name=make.__name__)
    local = make()
    rng = np.random.default_rng(0)
    try:
        for i in range(4):
            f = stream_fragment(rng, 6, 2, 1000 * i)
            shards.add(f)
            local.buffer.extend(**f)
        for got in shards.sample_many(2, 8):
            assert_same(got, local.sample(8))
        assert (got.discount is not None) == (make is nstep)
        td = np.linspace(0.0, 3.0, 8) if make is nstep else np.linspace(0, 3, 8 * 4).reshape(8, 4)
        shards.update_priorities(got.ids, td)
        target = local if make is sequences else local.buffer
        target.update_priorities(np.asarray(local_ids := got.ids), td)
        assert local_ids.dtype == np.int64
        assert_same(shards.sample(8, beta=1.0), local.sample(8, beta=1.0))
    finally:
        shards.close()


def test_frame_stack_storage_through_a_shard(ray_session) -> None:
    def frames() -> ReplayBuffer:
        return ReplayBuffer(16, num_envs=2, storage=StorageLayout.frames(), seed=4)

    shards, local = ReplayShards(frames, name="frames"), frames()
    try:
        for i in range(3):  # frame k of env e = k + 100 e; a stack holds frames t..t+3
            k = (
                np.arange(8 * i, 8 * i + 8)[:, None, None]
                + np.arange(4)
                + 100 * np.arange(2)[:, None]
            )
            stacks = (k[..., None, None] * np.ones((3, 2))).astype(np.uint8)  # (8, 2, 4, 3, 2)
            f = dict(
                obs=stacks, action=np.zeros((8, 2), np.int64), reward=np.ones((8, 2), "f4"),
                next_obs=(stacks.astype(int) + 1).astype(np.uint8),
                terminated=np.zeros((8, 2), bool), truncated=np.zeros((8, 2), bool),
            )  # fmt: skip
            shards.add(f)
            local.extend(**f)
        got = shards.sample(16)
        assert_same(got, local.sample(16))
        assert got.obs.shape == (16, 4, 3, 2) and got.obs.dtype == np.uint8
    finally:
        shards.close()
