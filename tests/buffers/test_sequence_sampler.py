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
