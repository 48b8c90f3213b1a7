"""Compiled backward scans behind :mod:`rlstore.returns` (private).

Every kernel takes C-contiguous ``(T, N)`` arrays of one float dtype (float32 or float64), ``bool``
flag arrays of the same shape, scalars of the *same* float dtype (so that float32 inputs are
computed in float32, not promoted to float64), and preallocated outputs. The time loop
runs backwards in the outer loop and the env loop innermost, over contiguous memory.

Terminated steps never read ``next_values`` (a select, not a multiplication by zero), so a NaN or
inf placed there after a termination cannot leak into any result. The trace is cut by multiplying
the carry with a selected 0 (shorter dependency chain than a select on the carry): a NaN in
``rewards`` or ``values`` therefore propagates backwards across episode ends, which only makes a
corrupt input louder; so does a NaN importance ratio (``min(rho, rho_bar)``, never
``min(rho_bar, rho)``, which would clip NaN to ``rho_bar``). ``fastmath={"contract"}`` only allows
fused multiply-adds.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def discount_cumsum_kernel(x, discount, out):
    """out[t] = x[t] + discount * out[t + 1], out[T-1] = x[T-1]; x, out: (T, N)."""
    T, N = x.shape
    if T == 0:
        return
    for n in range(N):
        out[T - 1, n] = x[T - 1, n]
    for t in range(T - 2, -1, -1):
        for n in range(N):
            out[t, n] = x[t, n] + discount * out[t + 1, n]


@njit(cache=True, nogil=True, fastmath={"contract"})
def gae_kernel(rewards, values, next_values, terminated, truncated, gamma, lam, adv, ret):
    """GAE backward scan; adv/ret are written in place."""
    T, N = rewards.shape
    zero = rewards.dtype.type(0.0)
    gl = gamma * lam
    if N == 1:  # scalar carry kept in a register (single-env rollouts)
        a = zero
        for t in range(T - 1, -1, -1):
            term = terminated[t, 0]
            boot = zero if term else gamma * next_values[t, 0]
            c = zero if (term | truncated[t, 0]) else gl
            a = rewards[t, 0] + boot - values[t, 0] + c * a
            adv[t, 0] = a
            ret[t, 0] = a + values[t, 0]
        return
    if T == 0:
        return
    # the carry A_{t+1} is read back from adv[t+1] (one written array per loop: LLVM vectorizes
    # the env loop, ~25% faster than a separate carry array); returns in a second pass
    for n in range(N):
        term = terminated[T - 1, n]
        boot = zero if term else gamma * next_values[T - 1, n]
        adv[T - 1, n] = rewards[T - 1, n] + boot - values[T - 1, n]
    for t in range(T - 2, -1, -1):
        for n in range(N):
            term = terminated[t, n]
            boot = zero if term else gamma * next_values[t, n]
            c = zero if (term | truncated[t, n]) else gl
            adv[t, n] = rewards[t, n] + boot - values[t, n] + c * adv[t + 1, n]
    for t in range(T):
        for n in range(N):
            ret[t, n] = adv[t, n] + values[t, n]


@njit(cache=True, nogil=True)
def td_lambda_kernel(rewards, next_values, terminated, truncated, gamma, lam, out):
    """TD(lambda) backward scan: G_t = r_t + gamma*(1-term)*((1-lam)*nv_t + lam*G'_{t+1})."""
    T, N = rewards.shape
    zero = rewards.dtype.type(0.0)
    one_m_lam = rewards.dtype.type(1.0) - lam
    g = np.zeros(N, dtype=rewards.dtype)  # G_{t+1}
    for t in range(T - 1, -1, -1):
        last_step = t == T - 1
        for n in range(N):
            term = terminated[t, n]
            cut = last_step or truncated[t, n]
            nv = zero if term else next_values[t, n]
            g_next = nv if cut else g[n]
            val = rewards[t, n] + (zero if term else gamma * (one_m_lam * nv + lam * g_next))
            g[n] = val
            out[t, n] = val


@njit(cache=True, nogil=True, fastmath={"contract"})
def vtrace_kernel(
    ratio,
    rewards,
    values,
    next_values,
    terminated,
    truncated,
    gamma,
    lam,
    rho_bar,
    c_bar,
    pg_rho_bar,
    vs,
    pg_adv,
):
    """V-trace backward scan (IMPALA eq. 1, recursive form) with rlax's lambda-mixed PG target.

    ``ratio = exp(target_logp - behaviour_logp)`` is computed by the caller (numpy's SIMD exp is
    several times faster than a scalar one here); ``pg_adv`` may alias ``ratio`` (each entry is
    read before it is written).
    """
    T, N = rewards.shape
    zero = rewards.dtype.type(0.0)
    gl = gamma * lam
    acc = np.zeros(N, dtype=rewards.dtype)  # u_{t+1} = v_{t+1} - V(x_{t+1})
    for t in range(T - 1, -1, -1):
        for n in range(N):
            term = terminated[t, n]
            rho = ratio[t, n]
            v = values[t, n]
            r = rewards[t, n]
            gnv = zero if term else gamma * next_values[t, n]
            m = zero if (term | truncated[t, n]) else gl
            u_next = m * acc[n]  # gamma * lam * u_{t+1}, 0 at episode ends
            a = min(rho, rho_bar) * (r + gnv - v) + min(rho, c_bar) * u_next
            pg_adv[t, n] = min(rho, pg_rho_bar) * (r + gnv + u_next - v)
            acc[n] = a
            vs[t, n] = v + a


@njit(cache=True, nogil=True)
def nstep_kernel(rewards, next_values, terminated, truncated, n_steps, gamma, out):
    """n-step bootstrapped targets, windows cut at episode ends and at the rollout end."""
    T, N = rewards.shape
    zero = rewards.dtype.type(0.0)
    one = rewards.dtype.type(1.0)
    acc = np.zeros(N, dtype=rewards.dtype)
    disc = np.ones(N, dtype=rewards.dtype)
    alive = np.ones(N, dtype=np.bool_)
    for t in range(T):
        for n in range(N):
            acc[n] = zero
            disc[n] = one
            alive[n] = True
        kmax = min(n_steps, T - t)
        for k in range(kmax):
            j = t + k
            last = k == kmax - 1
            for n in range(N):
                if alive[n]:
                    acc[n] += disc[n] * rewards[j, n]
                    disc[n] *= gamma
                    if terminated[j, n]:
                        alive[n] = False
                    elif last or truncated[j, n]:
                        acc[n] += disc[n] * next_values[j, n]
                        alive[n] = False
        for n in range(N):
            out[t, n] = acc[n]
