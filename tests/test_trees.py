"""rlstore._trees: tree map / leaves, checkpoint round trip, named tensor conversion."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlstore._trees import (
    as_tensor,
    cast_lossless,
    flag_array,
    flat_items,
    to_numpy,
    tree_from_state,
    tree_leaves,
    tree_map,
    tree_to_state,
)
from rlstore.errors import SpecError


def test_tree_map_keeps_structure_and_leaves_order():
    tree = {"a": torch.tensor([1.0]), "b": (torch.tensor([2.0]), torch.tensor([3.0]))}
    out = tree_map(lambda x: x * 10, tree)
    assert set(out) == {"a", "b"} and isinstance(out["b"], tuple) and len(out["b"]) == 2
    assert [float(x) for x in tree_leaves(out)] == [10.0, 20.0, 30.0]
    assert [float(x) for x in tree_leaves(tree)] == [1.0, 2.0, 3.0]  # input untouched
    assert tree_map(lambda x: x + 1, 4) == 5  # a bare leaf


def test_state_round_trip_rebuilds_tuples_and_copies():
    h, c = torch.arange(6.0).reshape(2, 3), torch.ones(2, 3, dtype=torch.int64)
    tree = {"obs": {"x": torch.zeros(2)}, "hidden": (h, c)}
    sd = tree_to_state(tree)
    assert set(sd["hidden"]) == {"tuple:0", "tuple:1"}  # tuples become dicts in a state dict
    h.add_(100)  # the state holds copies, not views
    back = tree_from_state(sd, torch.device("cpu"))
    assert isinstance(back["hidden"], tuple)
    torch.testing.assert_close(back["hidden"][0], torch.arange(6.0).reshape(2, 3))
    assert back["hidden"][1].dtype == torch.int64
    from_numpy = tree_from_state({"tuple:0": np.ones(2, np.float32)}, torch.device("cpu"))
    assert isinstance(from_numpy, tuple) and from_numpy[0].dtype == torch.float32


def test_as_tensor_passes_tensors_through_and_names_bad_inputs():
    t = torch.ones(3, requires_grad=True)
    out = as_tensor("x", t)
    assert out.data_ptr() == t.data_ptr() and not out.requires_grad  # detached, not copied
    assert as_tensor("x", [[1, 2]]).shape == (1, 2)
    assert as_tensor("x", np.float32(2.0), torch.device("cpu")).dtype == torch.float32
    with pytest.raises(SpecError, match="reward: expected an array or tensor, got object"):
        as_tensor("reward", object())


def test_tree_map_keeps_insertion_order_and_maps_several_trees():
    tree = {"z": np.zeros(1), "a": (np.ones(1), None), "m": {"y": np.full(1, 2.0), "b": 3}}
    assert list(tree_map(lambda x: x, tree)) == ["z", "a", "m"]  # not sorted
    assert list(tree_map(lambda x: x, tree)["m"]) == ["y", "b"]
    assert tree_leaves(tree)[2] is None  # None is a leaf, not an empty subtree
    parts = [
        {"o": np.arange(2), "h": (np.arange(1),)},
        {"o": np.arange(2, 5), "h": (np.arange(3),)},
    ]
    cat = tree_map(lambda *xs: np.concatenate(xs), *parts)
    assert cat["o"].tolist() == [0, 1, 2, 3, 4] and cat["h"][0].tolist() == [0, 0, 1, 2]
    assert tree_map(lambda *xs: sum(xs), 1, 2, 3) == 6


def test_to_numpy_views_arrays_and_cpu_tensors_and_names_bad_inputs():
    a = np.arange(3)
    assert to_numpy("x", a) is a
    t = torch.arange(3.0, requires_grad=True)
    out = to_numpy("x", t)
    assert isinstance(out, np.ndarray) and out.ctypes.data == t.data_ptr()  # a view, detached
    bf = to_numpy("x", torch.tensor([1.5, -2.0], dtype=torch.bfloat16))  # numpy has no bfloat16
    assert bf.dtype == np.float32 and bf.tolist() == [1.5, -2.0]
    assert to_numpy("x", [[1, 2]]).shape == (1, 2) and to_numpy("x", 2.5).shape == ()
    with pytest.raises(SpecError, match="obs: expected an array or tensor, got a dict"):
        to_numpy("obs", {"a": np.zeros(2)})
    with pytest.raises(SpecError, match="rew: expected an array or tensor, got list"):
        to_numpy("rew", [[1.0], [1.0, 2.0]])  # ragged


def test_tree_map_with_path_gives_each_leaf_its_key_path() -> None:
    tree = {"a": 1, "b": ({"c": 2}, 3)}
    seen: list[tuple] = []
    out = tree_map(lambda p, x: seen.append(p) or x * 10, tree, path=())
    assert out == {"a": 10, "b": ({"c": 20}, 30)}
    assert seen == [("a",), ("b", 0, "c"), ("b", 1)]
    both = tree_map(lambda p, x, y: (p, x + y), {"k": 1}, {"k": 2}, path=("root",))
    assert both == {"k": (("root", "k"), 3)}


def test_flag_array_error_shows_a_few_values_not_the_whole_array() -> None:
    """The message listed every value (a 10,000-env rollout printed 10,000 numbers)."""
    with pytest.raises(SpecError, match=r"^done: expected bools \(or exact 0/1\), got int64") as e:
        flag_array("done", np.full(10_000, 2, np.int64), 10_000)
    assert len(str(e.value)) < 120


def test_flat_items_joins_key_paths() -> None:
    """The one walker also serves the demo's state comparison and inspect's listing (each had
    its own recursion)."""
    tree = {"a": {"b": 1, "c": (2, {"d": 3})}, "e": None}
    assert flat_items(tree) == {"a/b": 1, "a/c/0": 2, "a/c/1/d": 3, "e": None}


def test_cast_lossless_takes_ints_into_floats_only_when_exact() -> None:
    """The torch twin of cast_to_spec's rule: ints into a float dtype were cast even when the
    float rounds them (2**24 + 1 became float32 16777216.0)."""
    exact = torch.tensor([2**24, -(2**24) - 2, 7])
    assert cast_lossless("x", exact, torch.float32).tolist() == [2**24, -(2**24) - 2, 7]
    assert cast_lossless("x", torch.tensor([2**53]), torch.float64).item() == 2**53
    for ints, dtype in (([0, 2**24 + 1], torch.float32), ([70000], torch.float16),
                        ([2**53 + 1], torch.float64), ([257], torch.bfloat16)):  # fmt: skip
        with pytest.raises(SpecError, match=r"x: expected integers exactly representable"):
            cast_lossless("x", torch.tensor(ints), dtype)
    # narrow ints (int8 into float16) skip the check: always exact
    assert cast_lossless(
        "x", torch.tensor([-128, 127], dtype=torch.int8), torch.float16
    ).tolist() == [-128, 127]
