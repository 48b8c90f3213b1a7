"""Layout-C plumbing of the PyTorchRL buffers: sample checks, the view, conversion, gathering.

Layout C (see :mod:`rlstore.compat.pytorchrl`): every tensor of the ``data`` view is
``(size + 1, N, ...)``; ``Done[t + 1]`` is the done flag of transition ``t`` and slot ``L``
holds the bootstrap state. These helpers are pure functions over such tensors (or one-level
dicts of them) and over the :class:`~rlstore.minibatches.RolloutBatch` of the stored steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import torch

from rlstore._trees import as_tensor, cast_lossless, check_real
from rlstore.compat.pytorchrl.protocols import (
    ACT,
    ADV,
    DONE,
    FVAL,
    IADV,
    IRET,
    IREW,
    IVAL,
    LOGP,
    OBS,
    RET,
    REW,
    RHS,
    TRUNC,
    VAL,
)  # fmt: skip
from rlstore.errors import ConfigError, SpecError
from rlstore.minibatches import RolloutBatch, column_index_plan, flat_index_plan

__all__ = [
    "Data", "SCALARS", "map_dict", "take", "row_specs", "check_like", "column", "view", "rows",
    "layout_a", "index_plan", "gather",
]  # fmt: skip

Data = dict[str, Any]
SCALARS = (REW, VAL, LOGP, IREW, IVAL)
"""Keys with one float32 per env (stored by RolloutBuffer)."""
_FIELDS = {OBS: "obs", RHS: "hidden", ACT: "actions", REW: "rewards", VAL: "values",
           LOGP: "logprobs", IREW: "int_rewards", IVAL: "int_values"}  # fmt: skip


def map_dict(x: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``fn(x)``, or ``{k: fn(v)}`` when ``x`` is a (one-level) dict of tensors."""
    return {k: fn(v) for k, v in x.items()} if isinstance(x, dict) else fn(x)


def row_specs(
    sample: Mapping[str, Any], device: torch.device, recurrent: bool, num_envs: int | None
) -> Data:
    """Per stored key one zero ``(N, ...)`` row with the stored shape and dtype (from the first
    sample, validated): the sample's dtype, float32 for :data:`SCALARS`, bool for ``Truncated``.
    ``IntrinsicReward`` / ``IntrinsicValue`` are stored when the sample has both."""
    specs: Data = {}
    intrinsic = sample.get(IREW) is not None and sample.get(IVAL) is not None
    for k in (OBS, RHS, DONE, ACT, *SCALARS):
        if sample.get(k) is None or (k in (IREW, IVAL) and not intrinsic):
            continue
        dtype = torch.float32 if k in SCALARS else None
        row = map_dict(sample[k], lambda v, k=k: check_real(k, as_tensor(k, v, device)))  # type: ignore[misc]
        specs[k] = map_dict(row, lambda v, d=dtype: torch.zeros_like(v, dtype=d))  # type: ignore[misc]
    for k in (OBS, DONE, ACT, REW, VAL, LOGP, *([RHS] if recurrent else [])):
        if k not in specs:
            raise SpecError(f"sample: missing key {k!r} (got keys {sorted(sample)})")
    if isinstance(specs[VAL], dict):
        raise SpecError(f"{VAL}: multiple critics (a dict of values) are not supported")
    n = specs[DONE].shape[0] if specs[DONE].dim() else 0
    if num_envs is not None and n != num_envs:
        raise SpecError(
            f"{DONE}: expected a leading env axis of {num_envs} (envs.num_envs), "
            f"got shape {tuple(specs[DONE].shape)}"
        )
    for k in (DONE, *SCALARS):
        if k in specs and specs[k].numel() != n:
            raise SpecError(f"{k}: expected one value per env ({n}), got {tuple(specs[k].shape)}")
    specs[TRUNC] = torch.zeros_like(specs[DONE], dtype=torch.bool)
    return specs


def check_like(device: torch.device, key: str, value: Any, row: Any) -> Any:
    """A copy of ``value`` like ``row`` (a :func:`row_specs` entry): its keys and shape, and
    its dtype if the conversion is lossless (no 0.5 into an int field, no NaN / inf, no float32
    overflow, no complex)."""
    if isinstance(row, dict):
        if not isinstance(value, Mapping) or set(value) != set(row):
            raise SpecError(f"{key}: expected a dict with keys {sorted(row)}, got {value!r}")
        return {x: check_like(device, f"{key}[{x!r}]", value[x], row[x]) for x in row}
    v = as_tensor(key, value, device)
    if tuple(v.shape) != tuple(row.shape):
        raise SpecError(f"{key}: expected shape {tuple(row.shape)}, got {tuple(v.shape)}")
    return cast_lossless(key, v, row.dtype).detach().clone()


def column(row: Any, length: int, parts: Sequence[tuple[int, Any]]) -> Any:
    """A ``(length, *row.shape)`` zero tensor like ``row`` (or a dict of them, like a dict
    ``row``) with each ``(start, value)`` of ``parts`` written from row ``start`` on (``value``
    is one row or a stack of rows, converted to ``row``'s dtype)."""
    if isinstance(row, dict):
        return {k: column(row[k], length, [(s, v[k]) for s, v in parts]) for k in row}
    out = row.new_zeros(length, *row.shape)
    for start, value in parts:
        value = value.reshape(-1, *row.shape)
        out[start : start + value.shape[0]] = value
    return out


def view(
    specs: Data, b: RolloutBatch | None, size: int, nxt: Data, done0: Any, recurrent: bool
) -> Data:
    """The layout-C ``data`` view: ``(size + 1, N, ...)`` per stored key (``(1, N, ...)`` zeros
    for the hidden state of a feed-forward actor), zeros past the filled rows.

    Args:
        specs: :func:`row_specs` of the buffer.
        b: the ``L`` stored transitions (None when ``L = 0``).
        size: the capacity. nxt: ``Observation`` / ``RecurrentHiddenStates`` / ``Done`` of
            slot ``L``. done0: ``Done`` of slot 0. recurrent: the actor is recurrent.
    """
    L, S = 0 if b is None else b.num_steps, size + 1
    out: Data = {}
    for k, name in _FIELDS.items():
        if k not in specs:
            continue
        parts = [] if b is None else [(0, getattr(b, name))]
        if k == RHS and isinstance(specs[RHS], dict) and b is not None:
            parts = [(0, dict(zip(specs[RHS], b.hidden, strict=True)))]  # type: ignore[arg-type]
        if k in nxt:
            parts.append((L, nxt[k]))
        full = k != RHS or recurrent
        out[k] = column(specs[k], S if full else 1, parts if full else [])
    flags = [] if b is None else [(0, done0), (1, b.dones[: L - 1])]
    out[DONE] = column(specs[DONE], S, [*flags, (L, nxt[DONE])])
    out[TRUNC] = column(specs[TRUNC], S, [] if b is None else [(1, b.truncated)])
    out[FVAL] = column(specs[VAL], S, [] if b is None else [(1, b.final_values)])
    for k, like in ((RET, REW), (ADV, VAL), (IRET, IREW), (IADV, IVAL)):
        if like in specs:
            out[k] = column(specs[like], S, [])
    return out


def take(x: Any, i: int) -> Any:
    """Row ``i`` of a tensor or of each tensor of a dict (the last row if ``i`` is past it)."""
    return map_dict(x, lambda t: t[min(i, len(t) - 1)])


def rows(t: torch.Tensor, idx: torch.Tensor, length: int | None = None) -> torch.Tensor:
    """Rows ``idx`` of ``t[:length]`` flattened time-major over its two leading axes."""
    src = t if length is None else t[:length]
    return src.reshape(-1, *t.shape[2:])[idx]


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
    (:func:`~rlstore.minibatches.flat_index_plan`). Recurrent: ``(L, E)`` index tensors of
    ``E`` whole env columns (:func:`~rlstore.minibatches.column_index_plan`).
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
    if mini_batch_size is not None and num_mini_batch is not None:
        if mini_batch_size != L * (num_envs // num_mini_batch):
            raise ConfigError(
                f"mini_batch_size={mini_batch_size} conflicts with "
                f"num_mini_batch={num_mini_batch} whole env columns of {L} steps"
            )
    n_mb = num_mini_batch or 1
    yield from column_index_plan(
        L, num_envs, num_minibatches=n_mb, num_epochs=num_epochs, shuffle=shuffle, device=device
    )


def gather(data: Data, idx: torch.Tensor, L: int, recurrent: bool) -> Data:
    """One minibatch dict: rows ``idx`` (an :func:`index_plan` entry) of every stored key.

    ``RecurrentHiddenStates`` is taken at the first step of each sequence only (feed-forward
    actors have a single placeholder row, row 0). The extension keys ``Truncated`` /
    ``FinalValue`` are not part of minibatches.
    """
    batch: Data = {}
    for k, v in data.items():
        if v is None or k in (TRUNC, FVAL):
            continue
        sel, length = idx.reshape(-1), L
        if k == RHS:  # the state before the first step of each sequence (time-major)
            first = idx[0] if idx.dim() == 2 else idx
            sel, length = (first if recurrent else torch.zeros_like(first)), 0
        batch[k] = map_dict(v, partial(rows, idx=sel, length=length or None))
    return batch
