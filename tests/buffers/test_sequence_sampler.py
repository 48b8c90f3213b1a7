"""SequenceSampler on its own: grid bookkeeping from episode-start flags, refusals, state."""

from __future__ import annotations

import numpy as np
import pytest

from rlstore.errors import CapacityError, CheckpointError, EmptyBufferError, SpecError
from rlstore.samplers.sequence import SequenceSampler


def live(s: SequenceSampler) -> list[int]:
    return sorted(set(s.sample(4 * len(s)).ids.tolist()))


def test_grid_restarts_at_episode_starts_and_after_unseen_rows() -> None:
    s = SequenceSampler(6, 1, window=2, stride=3, seed=0)
    s.observe(0, np.array([[True], [False], [False], [False], [True]]))  # episodes 0-3, 4-
    assert live(s) == [0, 3]  # row 3 is step 3 of its episode; row 4 starts but is incomplete
    s.observe(5, np.array([[False]]))
    assert live(s) == [0, 3, 4]
    # 8 more rows at once: rows 6..7 are dropped unseen (ring of 6 holds 8..13); row 8 is
    # treated as an episode start: starts 8, 11 (row 13 incomplete)
    s.observe(8, np.zeros((6, 1), bool))
    assert live(s) == [8, 11] and s.lo == 8


def test_refusals_change_nothing() -> None:
    with pytest.raises(CapacityError, match="window: expected at most capacity_per_env=4"):
        SequenceSampler(4, 2, window=5, stride=1)
    s = SequenceSampler(4, 2, window=2, stride=1, seed=0)
    with pytest.raises(EmptyBufferError, match="no complete sequence of 2 rows"):
        s.sample(1)
    s.observe(0, np.ones((3, 2), bool))
    before = s.state_dict()
    for first, starts, match in [
        (2, np.ones((1, 2), bool), "first_row: expected >= 3"),
        (5, np.ones((1, 2), bool), "first_row: expected <= 3"),
        (3, np.ones((1, 3), bool), r"starts: expected a bool array of shape \(R, 2\)"),
        (3, np.ones((1, 2)), "starts: expected a bool array"),
    ]:
        with pytest.raises(SpecError, match=match):
            s.observe(first, starts)
    for ids, pri, match in [
        ([0], [-1.0], "priorities: expected finite numbers >= 0"),
        ([0], [np.inf], "priorities: expected finite numbers >= 0"),
        ([0, 1], [1.0], "priorities: expected finite numbers >= 0 of shape"),
    ]:
        with pytest.raises(SpecError, match=match):
            s.update_priorities(np.array(ids), np.array(pri))
    for bad, match in [
        ({**before, "start_row": np.full((4, 2), 7)}, "start_row: expected rows in"),
        ({**before, "phase": np.full(2, -1)}, "expected rows in .* and phases >= 0"),
        ({**before, "hi": -1}, "hi"),
        ({k: v for k, v in before.items() if k != "prio"}, "prio"),
    ]:
        with pytest.raises(CheckpointError, match=match):
            s.load_state_dict(bad)
    after = s.state_dict()
    assert after["hi"] == before["hi"] and np.array_equal(after["start_row"], before["start_row"])


@pytest.mark.parametrize(("window", "stride", "named"), [(3, 2, "window"), (2, 1, "stride")])
def test_a_state_of_another_window_or_stride_is_refused(window: int, stride: int, named: str):
    """A state keeps its sampler's grid and complete windows: loaded into a sampler of another
    window it drew windows past the write head (the buffer's gather then failed), into another
    stride a grid the sampler would never build. Both are refused, naming the setting."""
    s = SequenceSampler(6, 2, window=2, stride=2, seed=0)
    s.observe(0, np.array([[True, True]] + [[False, False]] * 3))
    other = SequenceSampler(6, 2, window=window, stride=stride, seed=1)
    before = other.state_dict()
    with pytest.raises(CheckpointError, match=rf"sampler\.{named}: expected {locals()[named]}"):
        other.load_state_dict(s.state_dict())
    after = other.state_dict()
    assert after["hi"] == before["hi"] == 0 and len(other) == 0
    twin = SequenceSampler(6, 2, window=2, stride=2, seed=1)
    twin.load_state_dict(s.state_dict())
    assert np.array_equal(twin.sample(8).ids, s.sample(8).ids)


def test_a_state_whose_live_keys_are_not_its_complete_starts_is_refused() -> None:
    """``keys`` name the live sequences; a state whose names are not exactly the registered
    starts with a whole stored window (a start past the head, a start off the grid, one left
    out, out of order) was accepted, and the next sample read past the buffer's head."""
    s = SequenceSampler(6, 2, window=2, stride=2, seed=0)
    s.observe(0, np.array([[True, True]] + [[False, False]] * 4))  # starts at rows 0, 2, 4
    sd = s.state_dict()
    k0, k1 = sd["prio"]["window"]
    live = sd["keys"][np.arange(k0, k1) % len(sd["keys"])]
    assert live.tolist() == [0, 1, 4, 5]  # rows 0 and 2 of both envs (row 4: incomplete)
    for name in ([0, 1, 4, 8], [0, 1, 2, 5], [0, 4, 1, 5], [0, 1, 4, -1]):
        keys = sd["keys"].copy()
        keys[np.arange(k0, k1) % len(keys)] = name
        other = SequenceSampler(6, 2, window=2, stride=2, seed=1)
        with pytest.raises(CheckpointError, match="sampler.keys: expected the live sequences"):
            other.load_state_dict({**sd, "keys": keys})
        assert other.state_dict()["hi"] == 0 and len(other) == 0
