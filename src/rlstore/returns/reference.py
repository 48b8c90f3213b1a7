"""Plain-Python loop twins of the estimators in :mod:`rlstore.returns`: ``f_reference`` for ``f``.

Obviously-correct, slow (one Python step per element), float64. They follow the conventions of
:mod:`rlstore.returns` literally, one env column at a time, and exist to test the fast paths;
they are not part of the public API (no ``__all__``, no re-export) and do not validate their
inputs. Inputs are anything ``np.asarray`` accepts (CPU tensors included); outputs are float64
numpy arrays of the input shape.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _cols(*arrays: Any) -> tuple[tuple[int, ...], int, int, list[list[list[float]]]]:
    """Return (shape, T, N, [per array: per column: list of floats])."""
    arrs = [np.asarray(a, dtype=np.float64) for a in arrays]
    shape = arrs[0].shape
    a2 = [a.reshape(shape[0], -1) for a in arrs]
    T, N = a2[0].shape
    return shape, T, N, [[a[:, n].tolist() for n in range(N)] for a in a2]


def discount_cumsum_reference(x: Any, discount: float) -> np.ndarray:
    """``y[t] = sum_{j >= t} discount**(j-t) * x[j]`` by an explicit double loop (O(T^2))."""
    shape, T, N, (xs,) = _cols(x)
    out = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            out[t, n] = sum(discount ** (j - t) * xs[n][j] for j in range(t, T))
    return out.reshape(shape)


def gae_reference(
    rewards: Any,
    values: Any,
    next_values: Any,
    terminated: Any,
    truncated: Any,
    *,
    gamma: float = 0.99,
    lam: float = 0.95,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE by the textbook backward loop, one env column at a time."""
    shape, T, N, (r, v, nv, te, tr) = _cols(rewards, values, next_values, terminated, truncated)
    adv = np.zeros((T, N))
    for n in range(N):
        last = 0.0
        for t in reversed(range(T)):
            if te[n][t]:
                delta = r[n][t] - v[n][t]
                last = delta
            elif tr[n][t]:
                delta = r[n][t] + gamma * nv[n][t] - v[n][t]
                last = delta
            else:
                delta = r[n][t] + gamma * nv[n][t] - v[n][t]
                last = delta + gamma * lam * last
            adv[t, n] = last
    vals = np.asarray(values, dtype=np.float64).reshape(T, N)
    return adv.reshape(shape), (adv + vals).reshape(shape)


def td_lambda_reference(
    rewards: Any,
    next_values: Any,
    terminated: Any,
    truncated: Any,
    *,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """TD(lambda) returns by the backward loop ``G = r + g*((1-l)*V' + l*G_next)``."""
    shape, T, N, (r, nv, te, tr) = _cols(rewards, next_values, terminated, truncated)
    out = np.zeros((T, N))
    for n in range(N):
        g_next = 0.0
        for t in reversed(range(T)):
            if te[n][t]:
                g = r[n][t]
            else:
                if tr[n][t] or t == T - 1:
                    g_next = nv[n][t]
                g = r[n][t] + gamma * ((1.0 - lam) * nv[n][t] + lam * g_next)
            out[t, n] = g
            g_next = g
    return out.reshape(shape)


def vtrace_reference(
    behaviour_logp: Any,
    target_logp: Any,
    rewards: Any,
    values: Any,
    next_values: Any,
    terminated: Any,
    truncated: Any,
    *,
    gamma: float = 0.99,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace by the recursive backward loop (IMPALA eq. 1 / Remark 1), one column at a time."""
    shape, T, N, cols = _cols(
        behaviour_logp, target_logp, rewards, values, next_values, terminated, truncated
    )
    bl, tl, r, v, nv, te, tr = cols
    vs = np.zeros((T, N))
    pg = np.zeros((T, N))
    for n in range(N):
        u_next = 0.0  # u_{t+1} = vs_{t+1} - values[t+1], only read while the episode goes on
        for t in reversed(range(T)):
            ratio = math.exp(tl[n][t] - bl[n][t])
            rho = min(ratio, rho_bar)
            c = lam * min(ratio, c_bar)
            if te[n][t]:
                u = rho * (r[n][t] - v[n][t])
                q = r[n][t]
            elif tr[n][t] or t == T - 1:
                # trace cut: v_{t+1} is the bootstrap value V(x_{t+1}) = next_values[t] itself
                u = rho * (r[n][t] + gamma * nv[n][t] - v[n][t])
                q = r[n][t] + gamma * nv[n][t]
            else:
                u = rho * (r[n][t] + gamma * nv[n][t] - v[n][t]) + gamma * c * u_next
                # rlax's lambda mix: lam * v_{t+1} + (1 - lam) * V(x_{t+1})
                q = r[n][t] + gamma * (lam * (nv[n][t] + u_next) + (1.0 - lam) * nv[n][t])
            pg[t, n] = min(ratio, pg_rho_bar) * (q - v[n][t])
            vs[t, n] = v[n][t] + u
            u_next = u
    return vs.reshape(shape), pg.reshape(shape)


def nstep_reference(
    rewards: Any,
    next_values: Any,
    terminated: Any,
    truncated: Any,
    *,
    n: int,
    gamma: float,
) -> np.ndarray:
    """n-step targets by an explicit forward window per step (O(T * n))."""
    shape, T, N, (r, nv, te, tr) = _cols(rewards, next_values, terminated, truncated)
    out = np.zeros((T, N))
    for col in range(N):
        for t in range(T):
            g = 0.0
            for k in range(n):
                j = t + k
                g += gamma**k * r[col][j]
                if te[col][j]:
                    break
                if tr[col][j] or k == n - 1 or j == T - 1:
                    g += gamma ** (k + 1) * nv[col][j]
                    break
            out[t, col] = g
    return out.reshape(shape)


def normalize_advantages_reference(
    adv: Any, *, mask: Any | None = None, eps: float = 1e-8
) -> np.ndarray:
    """``(adv - mean) / (pop_std + eps)`` over the masked entries by explicit sums; 0 elsewhere."""
    a = np.asarray(adv, dtype=np.float64)
    flat = a.ravel().tolist()
    m = [True] * len(flat) if mask is None else [bool(x) for x in np.asarray(mask).ravel()]
    sel = [x for x, keep in zip(flat, m, strict=True) if keep]
    mean = sum(sel) / len(sel)
    std = math.sqrt(sum((x - mean) ** 2 for x in sel) / len(sel))
    out = [(x - mean) / (std + eps) if keep else 0.0 for x, keep in zip(flat, m, strict=True)]
    return np.asarray(out).reshape(a.shape)
