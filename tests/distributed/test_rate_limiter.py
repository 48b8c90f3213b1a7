"""SampleToInsertRatio: Reverb's bands, blocking and timeouts, without Ray."""

from __future__ import annotations

import pickle
import threading
import time

import pytest

from rlstore.distributed.rate_limiter import ReplayTimeoutError, SampleToInsertRatio
from rlstore.errors import CheckpointError, ConfigError


def test_bands_follow_reverb() -> None:
    # spi 4, min size 10, error buffer 20: diff = 4 I - S must stay in [40 - 20, 40 + 20]
    lim = SampleToInsertRatio(4.0, 10, 20.0)
    assert (lim.min_diff, lim.max_diff) == (20.0, 60.0)
    assert lim.can_insert(100) and not lim.can_sample(1)  # below min size: insert, no sample
    lim.record_insert(9)
    assert not lim.can_sample(1)
    lim.record_insert(1)  # I = 10: diff = 40
    assert lim.can_sample(1) and lim.can_insert(1)
    lim.record_insert(5)  # diff = 60: still admitted (<= max_diff)
    assert lim.can_insert(1)
    lim.record_insert(1)  # diff = 64 > 60: inserts wait for samples
    assert not lim.can_insert(1) and lim.can_sample(1)
    lim.record_sample(44)  # diff = 20: samples still admitted (>= min_diff)
    assert lim.can_sample(1) and lim.can_insert(1)
    lim.record_sample(1)  # diff = 19 < 20: samples wait for inserts
    assert not lim.can_sample(1) and lim.can_insert(1)


def test_insert_blocks_until_samples_then_times_out_with_a_clear_error() -> None:
    lim = SampleToInsertRatio(1.0, 1, 2.0)  # diff in [-1, 3]
    lim.record_insert(4)  # diff 4: the next insert waits
    with pytest.raises(ReplayTimeoutError, match=r"shard x/0: insert of 8 items: blocked .*"
                       r"inserts=4, samples=0"):  # fmt: skip
        lim.wait_insert(8, 0.05, where="shard x/0: ")

    def learner() -> None:
        time.sleep(0.05)
        lim.record_sample(2)  # diff 2: admitted

    thread = threading.Thread(target=learner)
    thread.start()
    lim.wait_insert(8, 10.0)  # woken by the sample, long before the timeout
    thread.join()
    with pytest.raises(ReplayTimeoutError, match="sample of 16 items"):
        SampleToInsertRatio(1.0, 5, 2.0).wait_sample(16, 0.01)


def test_whole_calls_never_block_both_sides() -> None:
    lim = SampleToInsertRatio(2.0, 3, 2.0)
    for inserts, samples in [(0, 0), (3, 0), (3, 100), (50, 0), (50, 97), (50, 99)]:
        lim.inserts, lim.samples = inserts, samples
        assert lim.can_insert(1024) or lim.can_sample(1024), (inserts, samples)


def test_config_state_and_pickle() -> None:
    lim = SampleToInsertRatio(0.5, 2, 1.0)
    lim.record_insert(7)
    lim.record_sample(3)
    twin = SampleToInsertRatio(**lim.config())
    twin.load_state_dict(lim.state_dict())
    copy = pickle.loads(pickle.dumps(lim))  # as Ray ships it
    for other in (twin, copy):
        assert (other.inserts, other.samples, other.config()) == (7, 3, lim.config())
    with pytest.raises(CheckpointError, match="rate_limiter.samples"):
        twin.load_state_dict({"inserts": 1, "samples": -1})
    assert (twin.inserts, twin.samples) == (7, 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(samples_per_insert=0.0), "samples_per_insert"),
        (dict(samples_per_insert=float("inf")), "samples_per_insert"),
        (dict(samples_per_insert="2"), "samples_per_insert"),
        (dict(min_size_to_sample=0), "min_size_to_sample"),
        (dict(min_size_to_sample=1.5), "min_size_to_sample"),
        (dict(error_buffer=1.0), r"error_buffer: expected .* >= max\(1, samples_per_insert\)"),
        (dict(error_buffer=float("nan")), "error_buffer"),
    ],
)
def test_bad_config_is_rejected(kwargs, match) -> None:
    args = {"samples_per_insert": 2.0, "min_size_to_sample": 1, "error_buffer": 4.0, **kwargs}
    with pytest.raises(ConfigError, match=match):
        SampleToInsertRatio(**args)
