"""Compiled walks of the 4-ary sum tree behind :class:`rlstore.samplers.sum_tree.SumTree` (private).

Layout (see the :mod:`~rlstore.samplers.sum_tree` docstring): one flat float64 array ``s``,
level by level from the leaves (level 0, offset 0) to the root (the last element); level ``l``
starts at ``offs[l]``, and node ``j`` of level ``l >= 1`` sums the ``FANOUT = 4`` nodes
``4j ... 4j + 3`` of level ``l - 1`` (32 bytes, half of one 64-byte cache line), so a walk
reads one line per level (10 levels at 2**20 leaves). Inside a node the sums are those of a
binary tree, spelled out by :func:`_sum_node` and :func:`descend`: ``(c0 + c1) + (c2 + c3)``,
so every stored node and every choice of :func:`descend` is bit for bit what a binary sum tree
over the same leaves holds and chooses (the binary level that is not stored is recomputed
from the children it sums). The min tree ``m`` has the same layout without the leaf level
(node ``j`` of level ``l`` at ``m[offs[l] - offs[1] + j]``); its level 1 reads the leaves, an
empty (0) leaf counting as ``inf``.

Why 4: measured interleaved (CPU time) at 10**5 to 2**24 leaves, batches of 256, the descent
is bound by the additions per node as much as by cache misses once the tree is compact: 8
children (one full line, 7 levels at 2**20) took ~1.2x the time of 4 (and 16 more again);
updates cost ~5% more with 4.
"""

from __future__ import annotations

import numpy as np
from numba import njit

FANOUT = 4  # children per node (32 bytes); the kernels spell out the 4


def level_offsets(capacity: int) -> np.ndarray:
    """Start of each level in the flat array, leaves first, then a last entry (the size).

    Every level but the root's is padded to a multiple of ``FANOUT`` nodes (so that each node's
    children sit in one cache line); there is at least one level above the leaves.
    """
    offs, n, size = [0], capacity, 0
    while True:
        n = -(-n // FANOUT) * FANOUT  # padded level
        size += n
        offs.append(size)
        n //= FANOUT
        if n == 1:
            offs.append(size + 1)  # the root
            return np.array(offs, dtype=np.int64)


@njit(cache=True, nogil=True, inline="always")
def _sum_node(a):  # pragma: no cover - compiled
    """The sum of the 4 children ``a``, in the binary tree's order."""
    return (a[0] + a[1]) + (a[2] + a[3])


@njit(cache=True, nogil=True, inline="always")
def _recompute(s, m, offs, level, p):  # pragma: no cover - compiled
    """Node ``p`` of ``level`` (>= 1): the sum and the min of its children."""
    c0 = offs[level - 1] + p * FANOUT
    a = s[c0 : c0 + FANOUT]
    s[offs[level] + p] = _sum_node(a)
    low = np.inf
    if level == 1:  # the children are leaves: 0 is empty, not a minimum
        for c in range(FANOUT):
            if a[c] > 0:
                low = min(low, a[c])
    else:
        c0 -= offs[1]
        for c in range(FANOUT):
            low = min(low, m[c0 + c])
    m[offs[level] - offs[1] + p] = low


@njit(cache=True, nogil=True)
def set_leaves(s, m, offs, slots, vals):  # pragma: no cover - compiled
    """Write ``vals`` at the sorted, distinct leaves ``slots``, then recompute their ancestors
    one level at a time, each shared ancestor once."""
    k = slots.shape[0]
    nodes = np.empty(k, np.int64)
    for i in range(k):
        s[slots[i]] = vals[i]
        nodes[i] = slots[i]
    for level in range(1, offs.shape[0] - 1):
        j = 0
        for i in range(k):
            p = nodes[i] // FANOUT
            if j == 0 or nodes[j - 1] != p:  # sorted: repeats are adjacent
                nodes[j] = p
                j += 1
        k = j
        for i in range(k):
            _recompute(s, m, offs, level, nodes[i])


@njit(cache=True, nogil=True)
def rebuild(s, m, offs):  # pragma: no cover - compiled
    """Recompute every parent from the leaves, level by level (a checkpoint's load)."""
    for level in range(1, offs.shape[0] - 1):
        for p in range((offs[level] - offs[level - 1]) // FANOUT):  # the padding keeps 0 / inf
            _recompute(s, m, offs, level, p)


@njit(cache=True, nogil=True)
def descend(s, offs, mass, out):  # pragma: no cover - compiled
    """For each mass the leaf reached from the root down the binary tree: right when the mass
    is past the left subtree's sum (subtracting it) and the right subtree is not empty, else
    left; two binary levels per node of 4 children.

    All queries advance one level at a time (level-major), so the loads of one level are
    independent of each other and overlap in the memory system; one query walked to its leaf
    at a time is a chain of dependent cache misses on a large tree.
    """
    k = mass.shape[0]
    x = mass.copy()
    for i in range(k):
        out[i] = 0
    for level in range(offs.shape[0] - 2, 0, -1):
        base = offs[level - 1]
        for i in range(k):  # branchless: the data decide (a bool is 0 or 1)
            j = out[i] * FANOUT
            a = s[base + j : base + j + FANOUT]
            xi = x[i]
            left = a[0] + a[1]
            r2 = (xi >= left) & (a[2] + a[3] > 0)
            xi -= left * r2
            c = 2 * r2
            left = a[c]
            r1 = (xi >= left) & (a[c + 1] > 0)
            x[i] = xi - left * r1
            out[i] = j + c + r1


@njit(cache=True, nogil=True)
def window_leaves(gone_lo, gone_hi, new_lo, new_hi, cap, top):  # pragma: no cover - compiled
    """The leaf writes of a sampler's window move: ids ``[gone_lo, gone_hi)`` leave (value 0),
    ids ``[new_lo, new_hi)`` enter (value ``top``); id ``i`` sits in slot ``i % cap`` and a new
    id wins a slot it shares with a gone one. Returns ``(sorted distinct slots, values)``."""
    k_new = new_hi - new_lo
    first = new_lo % cap
    slots = np.empty(gone_hi - gone_lo + k_new, np.int64)
    vals = np.empty(slots.shape[0])
    k = 0
    for i in range(gone_lo, gone_hi):
        if (i % cap - first) % cap >= k_new:  # not taken by a new id
            slots[k] = i % cap
            vals[k] = 0.0
            k += 1
    for i in range(new_lo, new_hi):
        slots[k] = i % cap
        vals[k] = top
        k += 1
    order = np.argsort(slots[:k])
    return slots[:k][order], vals[:k][order]


@njit(cache=True, nogil=True)
def last_writes(ids, cap):  # pragma: no cover - compiled
    """``(sorted distinct slots ids % cap, position in ids of the LAST id of each slot)``: the
    one rule for repeated slots in a batch (last write wins)."""
    slots = ids % cap
    k = slots.shape[0]
    ordered = True  # a stratified draw comes in slot order: then there is nothing to sort
    for j in range(1, k):
        if slots[j] < slots[j - 1]:
            ordered = False
            break
    # stable: equal slots keep their batch order
    order = np.arange(k) if ordered else np.argsort(slots, kind="mergesort")
    n = 0
    for j in range(k):
        if j + 1 == k or slots[order[j + 1]] != slots[order[j]]:
            order[n] = order[j]
            n += 1
    last = order[:n].copy()
    return slots[last], last


@njit(cache=True, nogil=True)
def priority_leaves(ids, pri, lo, hi, cap, eps, alpha):  # pragma: no cover - compiled
    """The leaf writes of ``PrioritizedSampler.update_priorities``: the ids in ``[lo, hi)``
    (older ones are ignored), the last priority of each slot, stored as ``(p + eps) ** alpha``.

    Returns ``(status, slots, stored, raw_max, top, p_top)``: status 1 when a priority is
    negative or not finite, 2 when an id is outside ``[0, hi)`` (then nothing else is computed;
    the caller explains), else 0 with the sorted distinct ``slots``, their ``stored`` values,
    the largest ``p + eps``, the largest stored value and its priority ``p``.
    """
    k = ids.shape[0]
    none = np.empty(0, np.int64)
    for i in range(k):
        if not 0 <= pri[i] < np.inf:  # NaN fails too
            return 1, none, np.empty(0), 0.0, 0.0, 0.0
    n_live = 0
    for i in range(k):
        if ids[i] < 0 or ids[i] >= hi:
            return 2, none, np.empty(0), 0.0, 0.0, 0.0
        n_live += ids[i] >= lo
    pos = np.arange(k)
    if n_live < k:  # some ids were overwritten since they were drawn
        pos = pos[ids >= lo]
    slots, last = last_writes(ids[pos], cap)
    stored = np.empty(slots.shape[0])
    raw_max = top = -1.0
    p_top = 0.0
    for j in range(slots.shape[0]):
        p = pri[pos[last[j]]]
        raw = p + eps
        stored[j] = raw**alpha  # inf when too large: the caller refuses it
        raw_max = max(raw_max, raw)
        if stored[j] > top:
            top, p_top = stored[j], p
    return 0, slots, stored, raw_max, top, p_top


@njit(cache=True, nogil=True)
def draw(s, offs, u, total, p_min, beta, lo, cap):  # pragma: no cover - compiled
    """A stratified prioritized draw: mass ``(i + u[i]) * total / B`` in segment ``i``, its leaf
    by :func:`descend`, the id ``lo + (slot - lo) % cap`` living in that slot and the weight
    ``(p_min / p_slot) ** beta`` (computed in float32). Returns ``(ids, weights)``."""
    b = u.shape[0]
    seg = total / b
    mass = np.empty(b)
    for i in range(b):
        mass[i] = (i + u[i]) * seg
    ids = np.empty(b, np.int64)
    weights = np.empty(b, np.float32)
    descend(s, offs, mass, ids)
    b32 = np.float32(beta)
    for i in range(b):
        slot = ids[i]
        weights[i] = np.float32(p_min / s[slot]) ** b32  # powf: the float32 result, half the time
        ids[i] = lo + (slot - lo) % cap
    return ids, weights
