"""The one key checker of loaded states and input dicts (``rlstore._checks.check_keys``), and
the loaders that stand on it."""

from __future__ import annotations

import numpy as np
import pytest

from rlstore._checks import check_keys
from rlstore.errors import CheckpointError, SpecError
from rlstore.normalize import RunningMeanStd


def test_exact_keys_pass_in_any_order_and_the_mapping_comes_back() -> None:
    d = {"b": 1, "a": 2}
    assert check_keys("x", d, ("a", "b")) is d


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": 1}, r"^x: expected keys \['a', 'b'\]; missing \['b'\], unknown \[\]$"),
        ({"a": 1, "b": 2, 3: 4}, r"^x: expected keys \['a', 'b'\]; missing \[\], unknown \['3'\]$"),
        ([1, 2], r"^x: expected keys \['a', 'b'\] in a dict, got list$"),
    ],
)
def test_missing_unknown_and_non_dicts_are_named(value, message) -> None:
    with pytest.raises(CheckpointError, match=message):
        check_keys("x", value, ("b", "a"))
    with pytest.raises(SpecError):
        check_keys("x", value, ("b", "a"), SpecError)


def test_a_loader_names_the_keys_not_the_values() -> None:
    """RunningMeanStd used to print the whole rejected state (``{sd!r}``), arrays included."""
    rms = RunningMeanStd(shape=(1000,))
    sd = {**rms.state_dict(), "extra": np.arange(1000)}
    with pytest.raises(CheckpointError, match=r"unknown \['extra'\]$") as info:
        rms.load_state_dict(sd)
    assert len(str(info.value)) < 200
