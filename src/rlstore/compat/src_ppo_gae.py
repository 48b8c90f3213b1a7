"""DecisionTransformerInterpretability's ``src.ppo.compute_adv_vectorized``:
``compute_advantages_vectorized`` (in linear time, via :func:`rlstore.returns.gae`) and its
``shift_rows`` utility, on CleanRL's layout-B flags.

**Layout B.** The ``done`` stored with step ``t`` says that ``obs[t]`` *starts* an episode (the
``next_done`` of the previous env step); the flag of the last transition is ``next_done``.
rlstore is transition-aligned: ``done_A[t] = dones[t + 1]``, ``done_A[T - 1] = next_done``.
Every done is a termination (no truncation channel).

    >>> import torch
    >>> rewards, values = torch.ones(3, 2), torch.zeros(3, 2)
    >>> dones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # env 1: obs 1 starts anew
    >>> adv = compute_advantages_vectorized(torch.zeros(2), torch.zeros(2), rewards, values,
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
    """``out[i, j, ...] = arr[j - i, ...]`` for ``j >= i``, else 0: ``(L, L, *batch)``, numpy or
    torch like ``arr`` (the original's closed-form GAE used it)."""
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
    ``next_done`` / ``next_value`` ``(N,)`` in linear time (the original's closed form cost
    O(T^2 N))."""
    rewards, values, dones = (torch.as_tensor(x) for x in (rewards, values, dones))
    next_value, next_done = torch.as_tensor(next_value), torch.as_tensor(next_done)
    if rewards.dim() != 2:
        raise SpecError(f"rewards: expected shape (T, N), got {tuple(rewards.shape)}")
    T, N = rewards.shape
    want = {"values": (values, (T, N)), "dones": (dones, (T, N)),
            "next_value": (next_value, (N,)), "next_done": (next_done, (N,))}  # fmt: skip
    for name, (x, shape) in want.items():
        if tuple(x.shape) != shape:
            raise SpecError(f"{name}: expected shape {shape} like rewards, got {tuple(x.shape)}")
    done_a = torch.cat([dones[1:], next_done.to(dones.device).reshape(1, N)]) != 0
    next_values = torch.cat([values[1:], next_value.reshape(1, N).to(values)])
    adv, _ = R.gae(
        rewards, values, next_values, done_a, torch.zeros_like(done_a), gamma=gamma, lam=gae_lambda
    )
    return adv.to(device)
