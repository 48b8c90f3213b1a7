"""ReplayShard without Ray: checkpoints (exact restore, background saves that do not hold the
buffer while writing), make_buffer with or without the shard index, clear."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("ray")

from rlstore import ReplayBuffer  # noqa: E402
from rlstore.checkpoint import metadata_file_path  # noqa: E402
from rlstore.distributed import SampleToInsertRatio  # noqa: E402
from rlstore.distributed import shard as shard_module  # noqa: E402
from rlstore.distributed.shard import ReplayShard  # noqa: E402
from rlstore.errors import ConfigError  # noqa: E402


def test_restore_from_checkpoint_is_exact(tmp_path, fragment) -> None:
    limiter = SampleToInsertRatio(1.0, 4, 100.0).config()
    a = ReplayShard(lambda: ReplayBuffer(32, num_envs=2, seed=1), shard=3, name="x",
                    checkpoint_dir=tmp_path, checkpoint_every_s=3600,
                    rate_limiter=limiter)  # fmt: skip
    for i in range(3):
        a.add(fragment(5, 2, 100 * i))
    a.sample_many([4])
    assert a.checkpoint() == 30 and metadata_file_path(tmp_path, "x_3_").exists()
    b = ReplayShard(lambda: ReplayBuffer(32, num_envs=2, seed=99), shard=3, name="x",
                    checkpoint_dir=tmp_path, rate_limiter=limiter)  # fmt: skip
    assert b.restored and b.stats()["size"] == 30 and b.added == 30
    assert b.limiter is not None and (b.limiter.inserts, b.limiter.samples) == (30, 4)
    for x, y in zip(a.sample_many([8, 8])[0], b.sample_many([8, 8])[0], strict=True):
        assert x is not None and y is not None
        for k in ("ids", "obs", "next_obs", "reward", "ratio"):
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)
    a.close()
    b.close()


def test_a_background_save_does_not_hold_the_buffer(tmp_path, fragment, monkeypatch) -> None:
    writing, release = threading.Event(), threading.Event()
    real = shard_module.save_state

    def slow_save(*args, **kwargs):
        writing.set()
        assert release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(shard_module, "save_state", slow_save)
    s = ReplayShard(lambda: ReplayBuffer(32, seed=0), checkpoint_dir=tmp_path,
                    checkpoint_every_s=0.05)  # fmt: skip
    s.add(fragment(8, 1, 0))
    assert writing.wait(30)  # the periodic save is writing now ...
    parts, stats = s.sample_many([4, 4])  # ... and sampling and adding go on meanwhile
    s.add(fragment(2, 1, 8))
    assert [len(p["ids"]) for p in parts if p] == [4, 4] and s.stats()["size"] == 10
    release.set()
    deadline = time.monotonic() + 30
    while not metadata_file_path(tmp_path, "replay_0_").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    s.close()


def test_make_buffer_takes_the_shard_index_when_it_needs_one(fragment) -> None:
    seen = []

    def per_shard(shard: int) -> ReplayBuffer:
        seen.append(shard)
        return ReplayBuffer(8, seed=shard)

    def with_default(seed: int = 5) -> ReplayBuffer:
        seen.append(seed)
        return ReplayBuffer(8, seed=seed)

    ReplayShard(per_shard, shard=2)
    ReplayShard(with_default, shard=2)
    assert seen == [2, 5]
    s = ReplayShard(lambda: ReplayBuffer(8, seed=0))
    s.add(fragment(4, 1, 0))
    s.clear()
    assert s.stats()["size"] == 0 and s.added == 0
    with pytest.raises(ConfigError, match="make_buffer: expected a replay buffer"):
        ReplayShard(lambda: object())
    with pytest.raises(ConfigError, match="checkpoint_dir: none given"):
        s.checkpoint()
