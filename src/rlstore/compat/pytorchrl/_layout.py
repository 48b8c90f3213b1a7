"""Layout-C plumbing of the PyTorchRL buffers: layout conversion, index plans, row gathering.

Layout C (see :mod:`rlstore.compat.pytorchrl`): every stored tensor is ``(size + 1, N, ...)``;
``Done[t + 1]`` is the done flag of transition ``t`` and slot ``L`` holds the bootstrap state.
These helpers are pure functions over such tensors (or one-level dicts of them); the buffer
classes call them with their ``data`` dict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, cast

import torch

from rlstore.compat.pytorchrl.protocols import FVAL, RHS, TRUNC
from rlstore.errors import ConfigError
from rlstore.minibatches import column_index_plan, flat_index_plan

__all__ = ["Data", "map_dict", "carry_over", "rows", "layout_a", "index_plan", "gather"]

Data = dict[str, Any]


def map_dict(x: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``fn(x)``, or ``{k: fn(v)}`` when ``x`` is a (one-level) dict of tensors."""
    return {k: fn(v) for k, v in x.items()} if isinstance(x, dict) else fn(x)


def carry_over(t: torch.Tensor, last: int) -> torch.Tensor:
    """Copy slot ``last`` over slot 0 in place (the next rollout starts from the bootstrap)."""
    return t[0].copy_(t[last])


def rows(
    t: torch.Tensor, idx: torch.Tensor, length: int | None = None, slot0: Any = None
) -> torch.Tensor:
    """Rows ``idx`` of ``t[:length]`` flattened time-major over its two leading axes.

    ``slot0`` (``t[0]`` as it was when a batch generator started) replaces the rows of time
    step 0, which ``after_gradients`` may have overwritten since.
    """
    src = t if length is None else t[:length]
    out = src.reshape(-1, *t.shape[2:])[idx]
    if slot0 is not None:
        at0 = idx < t.shape[1]
        if bool(at0.any()):
            out[at0] = slot0[idx[at0]]
    return out


def layout_a(
    L: int,
    values: torch.Tensor,
    dones: torch.Tensor,
    truncated: torch.Tensor | None,
    final_values: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layout C -> A for ``L`` transitions.

    Args:
        L: number of stored transitions (slot ``L`` holds the bootstrap value).
        values: ``(size + 1, N, *)`` ``Value``; ``values[L]`` is ``V(Observation[L])``.
        dones: ``(size + 1, N, 1)`` ``Done`` (``dones[t + 1]`` ends transition ``t``).
        truncated: ``(size + 1, N, 1)`` ``Truncated`` extension channel, or None.
        final_values: ``(size + 1, N, *)`` ``FinalValue`` (``V(final_obs)`` at ``t + 1``), or
            None.

    Returns:
        ``(values[:L], next_values, terminated, truncated)``, each ``(L, N*)``; a truncated
        transition bootstraps from ``final_values`` and counts as not terminated.
    """
    v = values[:L].reshape(L, -1)
    nv = values[1 : L + 1].reshape(L, -1)
    done = dones[1 : L + 1].reshape(L, -1) != 0
    trunc = torch.zeros_like(done)
    if truncated is not None:
        trunc = done & (truncated[1 : L + 1].reshape(L, -1) != 0)
        if final_values is not None:
            nv = torch.where(trunc, final_values[1 : L + 1].reshape(L, -1).to(nv.dtype), nv)
    return v, nv, done & ~trunc, trunc


def index_plan(
    L: int,
    num_envs: int,
    device: torch.device,
    recurrent: bool,
    num_mini_batch: int | None,
    mini_batch_size: int | None,
    num_epochs: int,
    shuffle: bool,
) -> Iterator[torch.Tensor]:
    """Flat time-major indices ``t * N + n`` per minibatch, from :mod:`rlstore.minibatches`.

    Feed-forward (``recurrent=False``): 1-D index tensors of shuffled single steps
    (:func:`~rlstore.minibatches.flat_minibatches`). Recurrent: ``(L, E)`` index tensors of
    ``E`` whole env columns (:func:`~rlstore.minibatches.recurrent_minibatches`).
    Errors (sizes that do not divide) are raised when the generator is first advanced.
    """
    if not recurrent:
        yield from flat_index_plan(
            L * num_envs,
            num_minibatches=num_mini_batch,
            mini_batch_size=mini_batch_size,
            num_epochs=num_epochs,
            shuffle=shuffle,
            device=device,
        )
        return
    if (
        mini_batch_size is not None
        and num_mini_batch is not None
        and (mini_batch_size != L * (num_envs // num_mini_batch))
    ):
        raise ConfigError(
            f"mini_batch_size={mini_batch_size} conflicts with "
            f"num_mini_batch={num_mini_batch} whole env columns of {L} steps"
        )
    n_mb = num_mini_batch or 1
    yield from column_index_plan(
        L, num_envs, num_minibatches=n_mb, num_epochs=num_epochs, shuffle=shuffle, device=device
    )


def gather(data: Data, idx: torch.Tensor, L: int, slot0: Data, recurrent: bool) -> Data:
    """One minibatch dict: rows ``idx`` (an :func:`index_plan` entry) of every stored key.

    ``RecurrentHiddenStates`` is taken at the first step of each sequence only (feed-forward
    actors store a single placeholder row, row 0). ``slot0`` holds copies of slot 0 taken when
    the generator started (see :func:`rows`). The extension keys ``Truncated`` /
    ``FinalValue`` are not part of minibatches.
    """
    batch: Data = {}
    for k, v in data.items():
        if v is None or k in (TRUNC, FVAL):
            continue
        sel, length = idx.reshape(-1), cast(int | None, L)
        if k == RHS:  # the state before the first step of each sequence (time-major)
            first = idx[0] if idx.dim() == 2 else idx
            sel = first if recurrent else torch.zeros_like(first)
            length = None
        if k in slot0 and isinstance(v, dict):
            batch[k] = {x: rows(v[x], sel, length, slot0[k][x]) for x in v}
        else:
            batch[k] = map_dict(v, partial(rows, idx=sel, length=length, slot0=slot0.get(k)))
    return batch
