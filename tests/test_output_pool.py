"""OutputPool: memory is lent again only when nothing can still see it.

Reuse is observed through the data pointer; "still visible" is every way a caller can keep the
memory: the lent array, a numpy slice of it, a torch tensor from it, a view of that tensor, and
``tensor.numpy()``.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from rlstore._output_pool import OutputPool

FIELDS = {"obs": ((8, 3), np.dtype(np.float32)), "flag": ((8,), np.dtype(np.bool_))}


def ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_lent_arrays_have_the_requested_layout_and_are_writable() -> None:
    out = OutputPool().take(FIELDS)
    assert {k: (v.shape, v.dtype) for k, v in out.items()} == FIELDS
    for v in out.values():
        assert v.flags.c_contiguous and v.flags.writeable
        assert not isinstance(v.base, np.ndarray)  # numpy views cannot skip the lent array


def test_dropped_batch_memory_is_reused() -> None:
    pool = OutputPool(slots=1)
    first = pool.take(FIELDS)
    p = ptr(first["obs"])
    del first
    gc.collect()
    assert ptr(pool.take(FIELDS)["obs"]) == p


KEEPERS = {
    "the array": lambda a: a,
    "a numpy slice": lambda a: a[2:5],
    "a numpy view of a view": lambda a: a[1:].reshape(-1)[3:],
    "a tensor": torch.from_numpy,
    "a tensor view": lambda a: torch.from_numpy(a)[1:].T,
    "tensor.numpy()": lambda a: torch.from_numpy(a)[1:].numpy(),
}


@pytest.mark.parametrize("keeper", list(KEEPERS))
def test_memory_still_visible_is_never_lent_again(keeper: str) -> None:
    pool = OutputPool(slots=1)
    out = pool.take(FIELDS)
    out["obs"][:] = 7.0
    kept = KEEPERS[keeper](out["obs"])
    p = ptr(out["obs"])
    del out
    gc.collect()
    for _ in range(3):  # every later take gets other memory, and nothing writes into `kept`
        other = pool.take(FIELDS)
        assert ptr(other["obs"]) != p
        other["obs"][:] = -1.0
    assert float(np.asarray(kept).min()) == float(np.asarray(kept).max()) == 7.0
    del kept, other
    gc.collect()
    assert ptr(pool.take(FIELDS)["obs"]) == p  # released at last: lent again


def test_a_second_slot_serves_the_batch_still_bound_in_a_loop() -> None:
    """``batch = take()`` in a loop: the previous batch is alive while the next is taken."""
    pool = OutputPool(slots=2)
    seen = set()
    batch = pool.take(FIELDS)
    for _ in range(6):
        batch = pool.take(FIELDS)
        seen.add(ptr(batch["obs"]))
    assert len(seen) == 2 and pool.nbytes == 2 * (8 * 3 * 4 + 8)


def test_other_layouts_get_their_own_memory() -> None:
    pool = OutputPool(slots=2)
    a = pool.take(FIELDS)
    b = pool.take({"obs": ((4, 3), np.dtype(np.float32))})
    assert b["obs"].shape == (4, 3) and ptr(a["obs"]) != ptr(b["obs"])
