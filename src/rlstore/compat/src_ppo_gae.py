"""DecisionTransformerInterpretability's ``src.ppo`` GAE helpers on CleanRL-style layout-B flags.

``compute_advantages_vectorized`` (linear time and memory, via :func:`rlstore.returns.gae`) and
its ``shift_rows`` utility; re-exported by :mod:`rlstore.compat.src_ppo`.

**Layout B.** The ``done`` stored with step ``t`` says that ``obs[t]`` *starts* a new episode
(it is the ``next_done`` returned by the previous env step), and the flag of the last
transition is carried separately as ``next_done``. rlstore is transition-aligned (layout A), so
``done_A[t] = dones[t + 1]`` for ``t < T - 1`` and ``done_A[T - 1] = next_done``. Layout B has
no truncation channel: every done is a termination (no bootstrap).

Example::

    >>> import torch
    >>> T, N = 3, 2
    >>> rewards, values = torch.ones(T, N), torch.zeros(T, N)
    >>> dones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # env 1: obs 1 starts anew
    >>> adv = compute_advantages_vectorized(torch.zeros(N), torch.zeros(N), rewards, values,
    ...                                     dones, torch.device("cpu"), 1.0, 1.0)
    >>> adv[:, 1].tolist()   # env 1: the first transition ended its episode
    [1.0, 2.0, 1.0]
"""

from __future__ import annotations

import numpy as np
import torch

from rlstore import returns as R
from rlstore.errors import SpecError

__all__ = ["compute_advantages_vectorized", "shift_rows"]


def shift_rows(arr: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """Row ``i`` of the result is ``arr`` shifted right by ``i`` (zeros in front):
    ``out[i, j, ...] = arr[j - i, ...]`` for ``j >= i``, else 0; ``(L, L, *batch)``, numpy or
    torch like ``arr``. The original's closed-form GAE used it; kept as the documented utility."""
    if arr.ndim < 1:
        raise SpecError(
            f"arr: expected at least 1 dimension (L, ...), got shape {tuple(arr.shape)}"
        )
    L = arr.shape[0]
    src = np.arange(L)[None, :] - np.arange(L)[:, None]
    keep, idx = (src >= 0).reshape(L, L, *([1] * (arr.ndim - 1))), np.clip(src, 0, None)
    if isinstance(arr, torch.Tensor):
        zero = torch.zeros((), dtype=arr.dtype, device=arr.device)
        return torch.where(torch.from_numpy(keep).to(arr.device), arr[torch.from_numpy(idx)], zero)
    a = np.asarray(arr)
    return np.where(keep, a[idx], np.zeros((), dtype=a.dtype))


def _layout_b_to_a(dones: torch.Tensor, next_done: torch.Tensor) -> torch.Tensor:
    """``done_A[t] = dones[t + 1]`` (``next_done`` at ``T - 1``), as bool ``(T, N)``."""
    return torch.cat([dones[1:], next_done.reshape(1, *dones.shape[1:])]) != 0


def compute_advantages_vectorized(
    next_value: torch.Tensor,
    next_done: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    device: torch.device | str,
    gamma: float,
    gae_lambda: float,
) -> torch.Tensor:
    """GAE advantages ``(T, N)`` on ``device`` from layout-B ``dones`` ``(T, N)`` and
    ``next_done`` / ``next_value`` ``(N,)`` (every done a termination), by
    :func:`rlstore.returns.gae` in linear time (the original's closed form cost O(T^2 N))."""
    rewards, values, dones = (torch.as_tensor(x) for x in (rewards, values, dones))
    next_value, next_done = torch.as_tensor(next_value), torch.as_tensor(next_done)
    if rewards.dim() != 2:
        raise SpecError(f"rewards: expected shape (T, N), got {tuple(rewards.shape)}")
    T, N = rewards.shape
    for name, x, shape in (
        ("values", values, (T, N)),
        ("dones", dones, (T, N)),
        ("next_value", next_value, (N,)),
        ("next_done", next_done, (N,)),
    ):
        if tuple(x.shape) != shape:
            raise SpecError(f"{name}: expected shape {shape} like rewards, got {tuple(x.shape)}")
    done_a = _layout_b_to_a(dones, next_done.to(dones.device))
    next_values = torch.cat([values[1:], next_value.reshape(1, N).to(values)])
    adv, _ = R.gae(
        rewards, values, next_values, done_a, torch.zeros_like(done_a), gamma=gamma, lam=gae_lambda
    )
    return adv.to(device)
