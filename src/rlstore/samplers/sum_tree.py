"""A float64 sum tree (with a parallel min tree), vectorized over batches of updates and queries.

Layout: ``L`` = ``capacity`` rounded up to a power of two leaves, stored flat in arrays of
``2 * L`` nodes; node ``1`` is the root, node ``k`` has children ``2k`` and ``2k + 1``, leaf ``i``
is node ``L + i`` (node ``0`` is unused). Every parent holds exactly ``sum(children)`` (and
``min(children)`` in the min tree), recomputed level by level from its two children, so the
root (:attr:`SumTree.total`) is the sum of the leaves up to float64 rounding.

A leaf of value ``0`` is *empty*: :meth:`SumTree.find` never returns it and :attr:`SumTree.min`
ignores it. Both operations take a whole batch and touch ``O(batch * log2 L)`` nodes: a batched
update writes all leaves, then recomputes each touched ancestor once, level by level; a batched
query descends all masses together. The two walks are compiled with numba (one call per batch,
no per-item Python loop): measured at a capacity of 2**20 with batches of 256, the same walks
written as numpy operations per level took ~140 us each (per-call overhead, 20 levels), the
compiled ones ~20 us (update) and ~60 us (find on fresh random masses: cache misses).

Example:
    >>> t = SumTree(4)
    >>> t.update(np.array([0, 2]), np.array([1.0, 3.0]))
    >>> t.total, t.min
    (4.0, 1.0)
    >>> t.find(np.array([0.5, 1.0, 3.9])).tolist()  # smallest i with prefix sum > mass
    [0, 2, 2]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlstore._checks import check_count
from rlstore._lazy import lazy_module
from rlstore.errors import CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.storage.ring import _checked_array, _count, _mapping

__all__ = ["SumTree"]

_kernels = lazy_module("rlstore.samplers._tree_kernels")  # the compiled walks


def _check_indices(name: str, indices: Any, high: int) -> np.ndarray:
    """``indices`` as a 1-D int64 array of values in ``[0, high)`` (integer dtypes only)."""
    arr = indices if isinstance(indices, np.ndarray) else np.asarray(indices)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise SpecError(
            f"{name}: expected a 1-D integer array, got {arr.dtype} of shape {arr.shape}"
        )
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= high):
        bad = arr[(arr < 0) | (arr >= high)][0]
        raise SpecError(f"{name}: expected values in [0, {high}), got {bad}")
    return arr.astype(np.int64, copy=False)


def _check_values(
    name: str, values: Any, n: int, *, low: float = 0.0, high: float = math.inf
) -> np.ndarray:
    """``values`` as a float64 array of shape ``(n,)``: real numbers (no bools), finite, in
    ``[low, high]``."""
    arr = values if isinstance(values, np.ndarray) else np.asarray(values)
    if arr.dtype.kind not in "iuf":
        raise SpecError(f"{name}: expected a real-valued array, got dtype {arr.dtype}")
    if arr.shape != (n,):
        raise SpecError(f"{name}: expected shape ({n},) like indices, got {arr.shape}")
    out = arr.astype(np.float64, copy=False)
    if not n:
        return out
    lowest, highest = float(out.min()), float(out.max())  # NaN if any is NaN
    if not (math.isfinite(lowest) and math.isfinite(highest)):
        bad = out[~np.isfinite(out)][0]
        raise SpecError(f"{name}: expected finite values, got {bad}")
    if lowest < low:
        raise SpecError(f"{name}: expected values >= {low}, got {lowest}")
    if highest > high:
        raise SpecError(f"{name}: expected values <= {high:.6g}, got {highest}")
    return out


class SumTree:
    """Sums (and minimum of the non-empty leaves) over ``capacity`` non-negative float64 leaves.

    Args:
        capacity: number of leaves (int >= 1); rounded up to a power of two internally.

    Attributes:
        capacity: the number of usable leaves.
        max_value: the largest leaf value accepted, ``float64 max / (2 * L)``, so that no sum
            of leaves overflows to ``inf``.
    """

    def __init__(self, capacity: int):
        self.capacity = check_count("capacity", capacity, error=ConfigError)
        self._leaf0 = 1 << (self.capacity - 1).bit_length()  # L: first leaf node
        self._depth = self._leaf0.bit_length() - 1  # levels between a leaf and the root
        # sum and min of a node side by side: an update walks one cache line per level, not two
        nodes = np.zeros((2 * self._leaf0, 2), dtype=np.float64)
        self._sum, self._min = nodes[:, 0], nodes[:, 1]
        self._min[:] = np.inf
        self.max_value = float(np.finfo(np.float64).max) / (2 * self._leaf0)

    @property
    def total(self) -> float:
        """Sum of all leaves (the root)."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """Smallest non-empty (> 0) leaf; ``inf`` when every leaf is empty."""
        return float(self._min[1])

    @property
    def leaves(self) -> np.ndarray:
        """A read-only view of the ``capacity`` leaf values (float64)."""
        view = self._sum[self._leaf0 : self._leaf0 + self.capacity]
        view.flags.writeable = False
        return view

    def update(self, indices: Any, values: Any) -> None:
        """Set ``leaf[indices] = values``, then recompute the touched ancestors level by level.

        Args:
            indices: ``(k,)`` integers in ``[0, capacity)``; when an index repeats, its LAST value
                in the batch is the one written (in both trees).
            values: ``(k,)`` real numbers in ``[0, max_value]`` (``0`` empties the leaf).

        Raises:
            SpecError: wrong shapes or dtypes, an index out of range, a negative, non-finite or
                too large value; nothing changes.
        """
        idx = _check_indices("indices", indices, self.capacity)
        vals = _check_values("values", values, len(idx), high=self.max_value)
        uniq, last = _kernels().last_writes(idx, self.capacity)
        self._set_unique(uniq, vals[last])

    def _set_unique(self, uniq: np.ndarray, vals: np.ndarray) -> None:
        """:meth:`update` for checked, sorted, distinct ``uniq`` (the sampler's entry point)."""
        if len(uniq):
            nodes = uniq + self._leaf0  # a fresh array: the kernel compacts it in place
            _kernels().set_leaves(self._sum, self._min, nodes, vals, self._depth)

    def find(self, masses: Any) -> np.ndarray:
        """For each mass, the smallest leaf index ``i`` whose prefix sum ``leaf[0] + ... +
        leaf[i]`` exceeds it (so never an empty leaf), by one descent of all queries together.

        A mass ``>= total`` (e.g. ``total`` itself after rounding) gives the last non-empty leaf.

        Args:
            masses: ``(k,)`` finite real numbers ``>= 0``.

        Returns:
            ``(k,)`` int64 leaf indices in ``[0, capacity)``.

        Raises:
            SpecError: ``masses`` not 1-D, negative or non-finite.
            EmptyBufferError: every leaf is empty (``total == 0``).
        """
        arr = masses if isinstance(masses, np.ndarray) else np.asarray(masses)
        if arr.ndim != 1:
            raise SpecError(f"masses: expected a 1-D array, got shape {arr.shape}")
        mass = _check_values("masses", arr, len(arr))
        if not self._sum[1] > 0:
            raise EmptyBufferError("find: every leaf of the sum tree is empty (total is 0)")
        return self._find(np.ascontiguousarray(mass))

    def _find(self, mass: np.ndarray) -> np.ndarray:
        """:meth:`find` for a checked, contiguous float64 ``mass`` with ``total > 0``."""
        out = np.empty(len(mass), dtype=np.int64)
        _kernels().descend(self._sum, mass, self._leaf0, self._depth, out)
        return out

    def state_dict(self) -> dict[str, Any]:
        """``{"capacity": int, "leaves": float64 (capacity,) copy}`` (parents rebuilt on load)."""
        return {"capacity": self.capacity, "leaves": self.leaves.copy()}

    def load_state_dict(self, sd: Mapping[str, Any], *, where: str = "sum_tree") -> None:
        """Restore :meth:`state_dict` output, checked whole first (the tree is unchanged on error).

        Raises:
            CheckpointError: keys other than ``capacity`` and ``leaves``, a capacity other than
                this tree's, leaves not a float64 ``(capacity,)`` array of finite values ``>= 0``.
        """
        sd = _mapping(where, sd, ("capacity", "leaves"))
        capacity = _count(f"{where}.capacity", sd["capacity"], 1)
        if capacity != self.capacity:
            raise CheckpointError(
                f"{where}.capacity: expected {self.capacity} like this tree, got {capacity}"
            )
        leaves = _checked_array(f"{where}.leaves", sd["leaves"], (capacity,), np.dtype(np.float64))
        bad = ~(leaves >= 0) | ~(leaves <= self.max_value)  # NaN fails both
        if bad.any():
            raise CheckpointError(
                f"{where}.leaves: expected values in [0, {self.max_value:.6g}], got "
                f"{leaves[bad][0]} at index {int(np.flatnonzero(bad)[0])}"
            )
        s, m, lo = self._sum, self._min, self._leaf0
        s[:] = 0.0
        m[:] = np.inf
        s[lo : lo + capacity] = leaves
        m[lo : lo + capacity] = np.where(leaves > 0, leaves, np.inf)
        while lo > 1:  # level by level, the same pairwise sums as incremental updates
            s[lo >> 1 : lo] = s[lo : 2 * lo : 2] + s[lo + 1 : 2 * lo : 2]
            m[lo >> 1 : lo] = np.minimum(m[lo : 2 * lo : 2], m[lo + 1 : 2 * lo : 2])
            lo >>= 1
