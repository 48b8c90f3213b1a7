"""Compiled loops over gathered windows of n-step and sequence replay (private, numba).

A window is ``W`` consecutive rows of one env column, gathered batch-major: arrays ``(B, W, ...)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def mark_jumps(obs, nxt, ends):
    """``ends[b, k] |= any(nxt[b, k] != obs[b, k + 1])`` for ``k < W - 1`` (a stream that does not
    continue); ``obs``, ``nxt``: ``(B, W, F)``, ``ends``: ``(B, W)`` bool, updated in place."""
    B, W, F = obs.shape
    for b in range(B):
        for k in range(W - 1):
            if not ends[b, k]:
                for f in range(F):
                    if nxt[b, k, f] != obs[b, k + 1, f]:
                        ends[b, k] = True
                        break


@njit(cache=True, nogil=True)
def nstep_sums(reward, ends, term, trunc, avail, powers, g, disc):
    """Per window ``b`` of ``W`` rows: ``m = steps[b]`` rows up to the first ``k`` with
    ``ends[b, k]`` or ``k = min(W, avail[b]) - 1``; ``g[b] = sum_{k<m} powers[k] * reward[b, k]``;
    ``disc[b] = 0`` if ``term[b, m - 1]`` else ``powers[m]`` (into ``g``, ``disc``). Returns
    ``(steps, pick, term_out, trunc_out)``: ``m``, ``pick[b] = b * W + m - 1`` (the flat row of
    the last step) and its flags."""
    B, W = reward.shape
    steps, pick = np.empty(B, np.int64), np.empty(B, np.int64)
    term_out, trunc_out = np.empty(B, np.bool_), np.empty(B, np.bool_)
    for b in range(B):
        stop = min(W, avail[b]) - 1
        acc = 0.0
        k = 0
        while True:
            acc += powers[k] * reward[b, k]
            if ends[b, k] or k >= stop:
                break
            k += 1
        g[b] = acc
        disc[b] = 0.0 if term[b, k] else powers[k + 1]
        steps[b] = k + 1
        pick[b] = b * W + k
        term_out[b] = term[b, k]
        trunc_out[b] = trunc[b, k]
    return steps, pick, term_out, trunc_out


@njit(cache=True, nogil=True)
def window_indices(idx, envs, rows, n):
    """``(flat, avail)``: flat indices ``flat[b * n + k]`` of rows ``row + k`` of column
    ``idx[b] % envs``, clamped to the newest row ``rows - 1``; ``avail[b] = rows - row``: the rows
    from ``row`` on."""
    flat, avail = np.empty(idx.shape[0] * n, np.int64), np.empty(idx.shape[0], np.int64)
    for b in range(idx.shape[0]):
        row, col = idx[b] // envs, idx[b] % envs
        avail[b] = rows - row
        for k in range(n):
            flat[b * n + k] = min(row + k, rows - 1) * envs + col
    return flat, avail
