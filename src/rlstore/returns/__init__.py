"""Return and advantage estimators: pure functions over time-major arrays.

Conventions (stated once here, used by every estimator and buffer in rlstore):

* **Time-major.** Every input is ``(T,)`` (one env) or ``(T, N)`` (``N`` envs, independent
  columns). All inputs of one call have the same shape; the outputs have that shape too.
* **Transition-aligned flags.** ``terminated[t]`` and ``truncated[t]`` describe the transition
  ``obs[t] -> successor``; ``done = terminated | truncated``. Flags are ``bool`` or 0/1 numbers.
  If both are set, termination wins.
* **next_values.** ``next_values[t]`` is V of the *true* successor of step ``t``: ``values[t+1]``
  while the episode goes on, ``V(final_obs)`` on truncation (never the reset observation),
  anything on termination (it is never read: NaN is fine), and the bootstrap ``V(next_obs)`` at
  ``t = T-1``.
* **Termination** removes the bootstrap; **truncation** bootstraps from ``next_values[t]``; both
  cut the lambda-trace. The last row ``t = T-1`` always cuts the trace (there is no data after it)
  and bootstraps unless terminated.
* **Types.** numpy arrays or torch tensors (any device) in, the same type out, on the device of
  the first tensor argument. The output dtype is the promotion of the floating-point inputs,
  tensors and arrays alike (integer or bool rewards are cast to it); float32 stays float32.
  float16/bfloat16 are computed in float32 and cast back, wider floats (longdouble) in float64.
  Outputs carry no autograd history (targets are constants).
* **Errors.** Arrays of the wrong shape, dtype or flag values raise
  :class:`~rlstore.errors.SpecError`; hyperparameters (``gamma``, ``lam``, ``discount``, clipping
  thresholds, ``n``, ``eps``) must be real numbers (Python or numpy scalars) in range, else
  :class:`~rlstore.errors.ConfigError` (strings, bools and NaN included). Both name the argument.
* **Cost.** Linear time and memory in ``T``: compiled (numba, compiled lazily on first use and
  cached on disk) backward scans, the env loop innermost over contiguous memory; CPU tensors are
  viewed zero-copy as numpy arrays. ``nstep`` is ``O(T * n)``.

Layout: this module holds the public estimators; ``_io`` checks the inputs and converts between
numpy and torch, ``_kernels`` holds the compiled scans. Each estimator ``f`` has a plain-Python
loop twin ``f_reference`` (float64 numpy out) in :mod:`rlstore.returns.reference`, an
obviously-correct reference for tests, not part of the public API.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import torch

from rlstore._lazy import lazy_module
from rlstore._trees import to_numpy
from rlstore.errors import SpecError
from rlstore.returns._io import (
    _check_count,
    _check_eps,
    _check_positive,
    _check_unit,
    _prepare,
    check_flags,
)

__all__ = [
    "discount_cumsum",
    "gae",
    "td_lambda",
    "vtrace",
    "nstep",
    "normalize_advantages",
]

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)

_k = lazy_module("rlstore.returns._kernels")  # the compiled scans


# --------------------------------------------------------------------------- fast estimators


def discount_cumsum(x: ArrayT, discount: float) -> ArrayT:
    """Discounted cumulative sum along time: ``y[t] = sum_{j >= t} discount**(j-t) * x[j]``.

    No episode boundaries (use :func:`gae` / :func:`td_lambda` for those); Spinning Up's
    ``discount_cumsum`` (``lfilter`` over the reversed sequence), in linear time.

    Args:
        x: ``(T,)`` or ``(T, N)`` rewards (or TD residuals), float/int, numpy or torch.
        discount: factor in ``[0, 1]``.

    Returns:
        ``y`` with the shape, type and device of ``x``; ``y[T-1] = x[T-1]``.

    Example:
        >>> discount_cumsum(np.array([1.0, 2.0, 3.0]), 0.5)
        array([2.75, 3.5 , 3.  ])
    """
    d = _check_unit("discount", discount)
    (xa,), _, out, shape = _prepare([("x", x)], [])
    y = np.empty_like(xa)
    _k().discount_cumsum_kernel(xa, xa.dtype.type(d), y)
    return out(y, shape)


def gae(
    rewards: ArrayT,
    values: ArrayT,
    next_values: ArrayT,
    terminated: ArrayT,
    truncated: ArrayT,
    *,
    gamma: float = 0.99,
    lam: float = 0.95,
) -> tuple[ArrayT, ArrayT]:
    """Generalized advantage estimation (Schulman et al. 2015) with termination/truncation.

    Recurrence, per env column, for ``t = T-1 .. 0`` (``A_T = 0``)::

        delta_t = r_t + gamma * (1 - term_t) * next_values_t - values_t
        A_t     = delta_t + gamma * lam * (1 - done_t) * A_{t+1}
        R_t     = A_t + values_t          (the TD(lambda) return, the value target)

    Args:
        rewards: ``(T,)`` or ``(T, N)`` ``r_t`` of transition ``t``.
        values: same shape, ``V(obs[t])``.
        next_values: same shape, ``V`` of the true successor of step ``t`` (see module doc).
        terminated: same shape, bool or 0/1.
        truncated: same shape, bool or 0/1.
        gamma: discount in ``[0, 1]``.
        lam: GAE lambda in ``[0, 1]``; 0 gives one-step TD residuals, 1 Monte-Carlo.

    Returns:
        ``(advantages, returns)``, each with the shape of ``rewards``, for ``t = 0 .. T-1``.

    Example:
        >>> r = np.ones(3); v = np.zeros(3); f = np.zeros(3, bool)
        >>> adv, ret = gae(r, v, v, f, f, gamma=0.5, lam=1.0)
        >>> adv.tolist()
        [1.75, 1.5, 1.0]
    """
    g = _check_unit("gamma", gamma)
    lm = _check_unit("lam", lam)
    (r, v, nv), (te, tr), out, shape = _prepare(
        [("rewards", rewards), ("values", values), ("next_values", next_values)],
        [("terminated", terminated), ("truncated", truncated)],
    )
    adv = np.empty_like(r)
    ret = np.empty_like(r)
    s = r.dtype.type
    _k().gae_kernel(r, v, nv, te, tr, s(g), s(lm), adv, ret)
    return out(adv, shape), out(ret, shape)


def td_lambda(
    rewards: ArrayT,
    next_values: ArrayT,
    terminated: ArrayT,
    truncated: ArrayT,
    *,
    gamma: float,
    lam: float,
) -> ArrayT:
    """TD(lambda) returns, mixing ``next_values`` with the next return (no ``values`` needed).

    Recurrence, per env column, for ``t = T-1 .. 0``::

        G'_{t+1} = next_values_t               if done_t or t == T-1   (trace cut)
                 = G_{t+1}                      otherwise
        G_t      = r_t + gamma * (1 - term_t) * ((1 - lam) * next_values_t + lam * G'_{t+1})

    ``next_values_t`` is the ``V(x_{t+1})`` of the lambda-mix, so whenever
    ``values[t+1] == next_values[t]`` inside episodes this equals ``gae(...)[1]``.

    Args:
        rewards: ``(T,)`` or ``(T, N)``.
        next_values: same shape (see module doc).
        terminated: same shape, bool or 0/1.
        truncated: same shape, bool or 0/1.
        gamma: discount in ``[0, 1]``.
        lam: lambda in ``[0, 1]``; 0 gives ``r + gamma*V'``, 1 the Monte-Carlo return.

    Returns:
        ``G`` with the shape of ``rewards``.

    Example:
        >>> f = np.zeros(3, dtype=bool)
        >>> td_lambda(np.ones(3), np.zeros(3), f, f, gamma=0.5, lam=1.0).tolist()
        [1.75, 1.5, 1.0]
    """
    g = _check_unit("gamma", gamma)
    lm = _check_unit("lam", lam)
    (r, nv), (te, tr), out, shape = _prepare(
        [("rewards", rewards), ("next_values", next_values)],
        [("terminated", terminated), ("truncated", truncated)],
    )
    res = np.empty_like(r)
    s = r.dtype.type
    _k().td_lambda_kernel(r, nv, te, tr, s(g), s(lm), res)
    return out(res, shape)


def vtrace(
    behaviour_logp: ArrayT,
    target_logp: ArrayT,
    rewards: ArrayT,
    values: ArrayT,
    next_values: ArrayT,
    terminated: ArrayT,
    truncated: ArrayT,
    *,
    gamma: float = 0.99,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
) -> tuple[ArrayT, ArrayT]:
    """V-trace targets and policy-gradient advantages (Espeholt et al. 2018, IMPALA section 4).

    With ``ratio_t = exp(target_logp_t - behaviour_logp_t)``, ``rho_t = min(rho_bar, ratio_t)``,
    ``c_t = lam * min(c_bar, ratio_t)``, ``gamma_t = gamma * (1 - term_t)``, per env column for
    ``t = T-1 .. 0`` (``u_T = 0``)::

        u'_{t+1} = 0 if done_t else u_{t+1}              (trace cut at any episode end)
        delta_t  = rho_t * (r_t + gamma_t * next_values_t - values_t)
        u_t      = delta_t + gamma * c_t * u'_{t+1}       (u_t = vs_t - values_t)
        vs_t     = values_t + u_t
        pg_adv_t = min(pg_rho_bar, ratio_t)
                   * (r_t + gamma_t * (next_values_t + lam * u'_{t+1}) - values_t)

    Truncation is handled like :func:`gae` (bootstrap from ``next_values``, trace cut). The PG
    target uses rlax's lambda mix ``lam * v_{t+1} + (1 - lam) * V(x_{t+1})``; with ``lam = 1`` it
    is the paper's ``r_t + gamma_t * v_{t+1}``. On-policy (equal log-probs, ``rho_bar, c_bar >=
    1``) ``vs - values == gae(...)[0]`` for any data, and ``vs == td_lambda(...)`` when
    ``next_values[t] == values[t+1]`` inside episodes (IMPALA Remark 1 for ``lam = 1``).

    Args:
        behaviour_logp: ``(T,)`` or ``(T, N)`` ``log mu(a_t|x_t)`` of the acting policy.
        target_logp: same shape, ``log pi(a_t|x_t)`` of the learner policy.
        rewards, values, next_values, terminated, truncated: as in :func:`gae`.
        gamma: discount in ``[0, 1]``.
        lam: trace lambda in ``[0, 1]`` (multiplies ``c``).
        rho_bar, c_bar, pg_rho_bar: clipping thresholds ``> 0`` (``inf`` disables clipping).

    Returns:
        ``(vs, pg_advantages)``, each with the shape of ``rewards``.

    Example:
        >>> import torch
        >>> T, N = 128, 8
        >>> logp_mu, logp_pi = torch.randn(T, N), torch.randn(T, N)
        >>> r, v, nv = torch.randn(T, N), torch.randn(T, N), torch.randn(T, N)
        >>> term = torch.rand(T, N) < 0.01
        >>> vs, pg_adv = vtrace(logp_mu, logp_pi, r, v, nv, term, torch.zeros_like(term))
        >>> vs.shape, vs.dtype
        (torch.Size([128, 8]), torch.float32)
    """
    g = _check_unit("gamma", gamma)
    lm = _check_unit("lam", lam)
    rb = _check_positive("rho_bar", rho_bar)
    cb = _check_positive("c_bar", c_bar)
    pb = _check_positive("pg_rho_bar", pg_rho_bar)
    (r, bl, tl, v, nv), (te, tr), out, shape = _prepare(
        [
            ("rewards", rewards),
            ("behaviour_logp", behaviour_logp),
            ("target_logp", target_logp),
            ("values", values),
            ("next_values", next_values),
        ],
        [("terminated", terminated), ("truncated", truncated)],
    )
    vs = np.empty_like(r)
    pg = np.subtract(tl, bl)  # holds the ratios, then (in place) the PG advantages
    with np.errstate(over="ignore"):  # a log-ratio > 88 is inf in float32: clipped, not a warning
        np.exp(pg, out=pg)
    s = r.dtype.type
    _k().vtrace_kernel(pg, r, v, nv, te, tr, s(g), s(lm), s(rb), s(cb), s(pb), vs, pg)
    return out(vs, shape), out(pg, shape)


def nstep(
    rewards: ArrayT,
    next_values: ArrayT,
    terminated: ArrayT,
    truncated: ArrayT,
    *,
    n: int,
    gamma: float,
) -> ArrayT:
    """n-step bootstrapped targets, cut at episode ends and at the end of the rollout.

    For each ``t`` let ``m`` be the number of transitions used: ``n``, or fewer when an episode
    ends (``done``) at ``t+m-1`` or the rollout ends (``t+m-1 = T-1``). Then::

        G_t = sum_{k<m} gamma**k * r_{t+k} + gamma**m * (1 - term_{t+m-1}) * next_values_{t+m-1}

    Args:
        rewards: ``(T,)`` or ``(T, N)``.
        next_values: same shape (see module doc); read only at the last step of each window.
        terminated: same shape, bool or 0/1.
        truncated: same shape, bool or 0/1.
        n: window length ``>= 1`` (``n = 1`` is the one-step TD target).
        gamma: discount in ``[0, 1]``.

    Returns:
        ``G`` with the shape of ``rewards``. Cost ``O(T * n)``.
    """
    steps = _check_count("n", n)
    g = _check_unit("gamma", gamma)
    (r, nv), (te, tr), out, shape = _prepare(
        [("rewards", rewards), ("next_values", next_values)],
        [("terminated", terminated), ("truncated", truncated)],
    )
    res = np.empty_like(r)
    _k().nstep_kernel(r, nv, te, tr, steps, r.dtype.type(g), res)
    return out(res, shape)


def normalize_advantages(adv: ArrayT, *, mask: ArrayT | None = None, eps: float = 1e-8) -> ArrayT:
    """Standardize advantages: ``(adv - mean) / (std + eps)`` with the population std (ddof=0).

    ddof=0 (Spinning Up's choice) is defined for a single element and for masks selecting one
    entry; for the minibatch sizes PPO uses it differs from CleanRL/SB3's unbiased std by a factor
    ``sqrt((n-1)/n)``. The result has mean 0 and (population) std ``std / (std + eps)`` ~ 1.

    Args:
        adv: any shape, float, numpy or torch (any device; computed there, float16/bfloat16
            in float32).
        mask: optional bool (or 0/1) array of the same shape; the statistics use the entries where
            it is true (e.g. unpadded steps of recurrent sequences), and the masked-out entries of
            the result are 0.
        eps: added to the std, finite and ``>= 0``.

    Returns:
        Normalized advantages, same shape, type, dtype and device as ``adv``, without autograd
        history.
    """
    e = _check_eps("eps", eps)
    if isinstance(adv, torch.Tensor):
        return _normalize_torch(adv, mask, e)
    return _normalize_numpy(to_numpy("adv", adv), mask, e)


def _mask_like(shape: Any, mask: Any) -> np.ndarray:
    """``mask`` as a numpy array of ``shape`` (SpecError naming it otherwise)."""
    m = to_numpy("mask", mask)
    if m.shape != tuple(shape):
        raise SpecError(f"mask: expected shape {tuple(shape)} like adv, got {m.shape}")
    return m


def _normalize_torch(adv: torch.Tensor, mask: Any, eps: float) -> torch.Tensor:
    if not adv.is_floating_point():
        raise SpecError(f"adv: expected a floating-point dtype, got {adv.dtype}")
    x = adv.detach()  # a constant like every estimator output: no autograd history
    x = x if x.dtype in (torch.float32, torch.float64) else x.float()  # half: in float32
    if mask is None:
        if adv.numel() == 0:
            raise SpecError("adv: expected at least one element, got an empty array")
        return ((x - x.mean()) / (x.std(correction=0) + eps)).to(adv.dtype)
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        m = mask
    else:  # checked on the CPU (0/1 numbers only), a copy back
        m = torch.tensor(check_flags("mask", _mask_like(adv.shape, mask)))
    if tuple(m.shape) != tuple(adv.shape):
        raise SpecError(f"mask: expected shape {tuple(adv.shape)} like adv, got {tuple(m.shape)}")
    m = m.to(adv.device)
    if not bool(m.any()):
        raise SpecError("mask: expected at least one true entry, got none")
    sel = x[m]
    normed = (x - sel.mean()) / (sel.std(correction=0) + eps)
    return torch.where(m, normed, x.new_zeros(())).to(adv.dtype)


def _normalize_numpy(adv: np.ndarray, mask: Any, eps: float) -> np.ndarray:
    if adv.dtype.kind != "f":
        raise SpecError(f"adv: expected a floating-point dtype, got {adv.dtype}")
    x = adv.astype(np.float32) if adv.dtype.itemsize < 4 else adv  # float16: in float32
    if mask is None:
        if adv.size == 0:
            raise SpecError("adv: expected at least one element, got an empty array")
        return ((x - x.mean()) / (x.std() + eps)).astype(adv.dtype, copy=False)
    m = check_flags("mask", _mask_like(adv.shape, mask))
    if not m.any():
        raise SpecError("mask: expected at least one true entry, got none")
    sel = x[m]
    normed = (x - sel.mean()) / (sel.std() + eps)
    return np.where(m, normed, 0.0).astype(adv.dtype, copy=False)
