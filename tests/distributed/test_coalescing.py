"""Coalesced adds: a sender's fragments that queued up while its calls were in flight are
stored by one call, exactly as the adds one by one; a rejected one raises to its sender."""

from __future__ import annotations

import numpy as np
import pytest
from _checkpoint_helpers import state_equal

ray = pytest.importorskip("ray")

from rlstore import ReplayBuffer  # noqa: E402
from rlstore.distributed import ReplayShards, SampleToInsertRatio  # noqa: E402
from rlstore.distributed.client import STARTUP_TIMEOUT_S, _checked_fragment  # noqa: E402
from rlstore.distributed.collector import FragmentSender  # noqa: E402
from rlstore.distributed.shard import ReplayShard  # noqa: E402
from rlstore.errors import ConfigError, SpecError  # noqa: E402
from rlstore.samplers import PrioritizedSampler  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")


def _episodes(t: int, n: int, start: int) -> dict[str, np.ndarray]:
    """``t`` continuing steps of ``n`` envs from the step counter ``start`` (episodes of 5
    steps end by termination), so consecutive fragments chain: next_obs[t] = obs[t + 1]."""
    steps = np.arange(start, start + t + 1, dtype=np.float32)[:, None] + np.zeros(n, "f4")
    obs = steps[..., None] * np.ones(2, "f4")
    return dict(obs=obs[:-1], action=np.ones((t, n), np.int64), reward=steps[:-1] / 4,
                next_obs=obs[1:], terminated=(steps[1:] % 5 == 0),
                truncated=np.zeros((t, n), bool),
                priorities=1.0 + steps[:-1] % 3)  # fmt: skip


def _state(shard: ReplayShard) -> dict:
    return shard.store.state_dict()


def test_a_coalesced_add_stores_what_the_adds_one_by_one_store() -> None:
    def make():
        return ReplayBuffer(64, num_envs=3, sampler=PrioritizedSampler(seed=0))

    frags = [_episodes(4, 3, 4 * i) for i in range(4)]
    one_by_one, coalesced = ReplayShard(make), ReplayShard(make)
    for f in frags:
        one_by_one.add(f)
    coalesced.add(frags[0])
    coalesced.add(*_checked_fragment(frags[1:]))  # what ReplayShards.add_async sends
    assert coalesced.added == one_by_one.added == 48
    assert state_equal(_state(one_by_one), _state(coalesced))


@pytest.fixture(scope="module")
def one(ray_session):
    shards = ReplayShards(
        lambda: ReplayBuffer(400, num_envs=2, sampler=PrioritizedSampler(seed=0)), 1,
        name="coalesce",
    )  # fmt: skip
    yield shards
    shards.close()


def test_a_rejected_coalesced_add_raises_to_its_sender_and_stores_nothing(one) -> None:
    one.clear()
    one.add([_episodes(4, 2, 0), _episodes(4, 2, 4)])  # accepted: 16 items
    bad = _episodes(4, 2, 12)
    bad["reward"] = bad["reward"].copy()
    bad["reward"][2, 1] = np.nan
    ref = one.add_async([_episodes(4, 2, 8), bad, _episodes(4, 2, 16)])
    with pytest.raises(SpecError, match="coalesced add of 3 fragments was rejected as a whole "
                       r"\(none of them stored\): .*reward: expected finite"):  # fmt: skip
        ray.get(ref, timeout=60)
    with pytest.raises(SpecError, match="coalesced add of 2 fragments was rejected"):
        one.add([_episodes(4, 2, 8), bad])  # the blocking add says the same
    with pytest.raises(SpecError, match=r"fragment\[1\]: expected dicts of numpy arrays"):
        one.add_async([_episodes(4, 2, 8), _episodes(4, 1, 12)])  # raised here, nothing sent
    assert one.stats()[0]["size"] == 16


@ray.remote(num_cpus=0)
class _Gate:
    """Calls that finish when the test says so (a shard that is busy)."""

    def __init__(self) -> None:
        import asyncio

        self.open = asyncio.Event()

    async def call(self, fail: bool) -> None:
        await self.open.wait()
        if fail:
            raise SpecError("rejected")

    def release(self) -> None:
        self.open.set()


class _Sink:
    def __init__(self, max_bytes: int, max_items: int | None) -> None:
        self.coalesce_bytes, self.coalesce_items = max_bytes, max_items
        self.gate, self.calls = _Gate.remote(), []
        # a new actor's worker may take a minute to start on a loaded machine: wait for it
        # here, so that the timeouts below measure calls, not the worker's start
        ray.get(self.gate.__ray_ready__.remote(), timeout=STARTUP_TIMEOUT_S)

    def add_async(self, fragment, *, route: int = 0):
        self.calls.append(fragment)
        return self.gate.call.remote(isinstance(fragment, list) and len(fragment) == 3)


def _firsts(call) -> list[float]:
    frags = call if isinstance(call, list) else [call]
    return [float(f["obs"][0, 0, 0]) if isinstance(f, dict) else -1.0 for f in frags]


@pytest.mark.parametrize("caps", [(1 << 20, 16), (544, None)])  # 16 items = 544 bytes
def test_the_sender_coalesces_what_queued_while_its_calls_were_in_flight(ray_session, caps):
    sink = _Sink(*caps)
    assert sum(v.nbytes for v in _episodes(8, 2, 0).values()) == 544
    sender = FragmentSender(sink, route=0, timeout_s=0.2)  # one call in flight: in order
    for i in range(3):  # 8 transitions each; the first call never finishes meanwhile
        sender.push(_episodes(4, 2, 4 * i))
    # the first went at once, the 2nd waited, the 3rd reached 16 transitions: sent together
    # (after waiting timeout_s for the busy call, as a push without coalescing would)
    assert [_firsts(c) for c in sink.calls] == [[0.0], [4.0, 8.0]]
    sender.push(_episodes(4, 2, 12))  # waits ...
    sender.push(ray_session.put(_episodes(4, 2, 16)))  # ... an ObjectRef is sent alone, after
    assert [_firsts(c) for c in sink.calls][2:] == [[12.0], [-1.0]]
    for i in range(5, 8):  # three fragments of 4 transitions, one call: the gate rejects it
        sender.push(_episodes(2, 2, 4 * i))
    ray.get(sink.gate.release.remote(), timeout=30)  # an async actor: runs beside the calls
    sender.timeout_s = 60.0  # the flush waits for the released calls, not just 0.2 s
    sender.flush()
    assert [_firsts(c) for c in sink.calls][4:] == [[20.0, 24.0, 28.0]]
    assert (sender.calls, sender.lost) == (5, 3)  # the rejected call's three fragments


def test_coalesce_is_checked_and_kept_inside_the_rate_limiters_band(ray_session) -> None:
    with pytest.raises(ConfigError, match="coalesce_bytes: expected"):
        ReplayShards(lambda: ReplayBuffer(8), coalesce_bytes=-1)
    limiter = SampleToInsertRatio(samples_per_insert=4.0, min_size_to_sample=8, error_buffer=96)
    shards = ReplayShards(lambda: ReplayBuffer(8), name="banded", rate_limiter=limiter)
    assert shards.coalesce_items == 24  # a call overshoots the band by at most its half-width
    # the default cap: calls of ~80k transitions of 17-dim obs spread Ray's ~1 ms per call
    # thin enough for 0.9x the in-process extend per core (8 MiB reached 0.7x)
    assert shards.coalesce_bytes == 16 << 20
    shards.close()


def test_a_senders_fragments_are_stored_in_order(one) -> None:
    one.clear()  # a threaded actor may run two calls of one caller in either order
    sender = FragmentSender(one, route=0)
    for i in range(100):
        sender.push(_episodes(1, 2, i))
    sender.flush()
    assert sender.lost == 0 and 1 <= sender.calls <= 100
    b = one.sample_many(1, 200)[0]  # items in insertion order: id = 2 * step + env
    order = np.argsort(b.ids, kind="stable")
    np.testing.assert_array_equal(b.obs[order, 0], b.ids[order] // 2)
