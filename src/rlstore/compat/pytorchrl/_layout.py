"""Layout-C plumbing of the PyTorchRL buffers (:mod:`rlstore.compat.pytorchrl`): sample checks,
the ``(size + 1, N, ...)`` view, conversion to layout A, minibatch gathering."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import torch

from rlstore._trees import as_tensor, cast_lossless, check_real, tree_map
from rlstore.compat.pytorchrl import protocols as K
from rlstore.errors import ConfigError, SpecError
from rlstore.minibatches import RolloutBatch, column_index_plan, flat_index_plan

Data = dict[str, Any]
SCALARS = (K.REW, K.VAL, K.LOGP, K.IREW, K.IVAL)  # one float32 per env
_FIELDS = {K.OBS: "obs", K.RHS: "hidden", K.ACT: "actions", K.REW: "rewards", K.VAL: "values",
           K.LOGP: "logprobs", K.IREW: "int_rewards", K.IVAL: "int_values"}  # fmt: skip


def row_specs(
    sample: Mapping[str, Any], device: torch.device, recurrent: bool, num_envs: int | None
) -> Data:
    """Per stored key a zero ``(N, ...)`` row of the stored shape and dtype (the first sample's,
    validated; float32 :data:`SCALARS`, bool ``Truncated``, the intrinsic pair only if both)."""
    specs: Data = {}
    intrinsic = sample.get(K.IREW) is not None and sample.get(K.IVAL) is not None
    for k in (K.OBS, K.RHS, K.DONE, K.ACT, *SCALARS):
        if sample.get(k) is None or (k in (K.IREW, K.IVAL) and not intrinsic):
            continue
        dtype = torch.float32 if k in SCALARS else None
        row = tree_map(lambda v, k=k: check_real(k, as_tensor(k, v, device)), sample[k])  # type: ignore[misc]
        specs[k] = tree_map(lambda v, d=dtype: torch.zeros_like(v, dtype=d), row)  # type: ignore[misc]
    for k in (K.OBS, K.DONE, K.ACT, K.REW, K.VAL, K.LOGP, *([K.RHS] if recurrent else [])):
        if k not in specs:
            raise SpecError(f"sample: missing key {k!r} (got keys {sorted(sample)})")
    if isinstance(specs[K.VAL], dict):
        raise SpecError(f"{K.VAL}: multiple critics (a dict of values) are not supported")
    n = specs[K.DONE].shape[0] if specs[K.DONE].dim() else 0
    if num_envs is not None and n != num_envs:
        raise SpecError(
            f"{K.DONE}: expected a leading env axis of {num_envs} (envs.num_envs), "
            f"got shape {tuple(specs[K.DONE].shape)}"
        )
    for k, row in specs.items():
        for leaf in row.values() if isinstance(row, dict) else (row,):
            if leaf.shape[:1] != (n,) or (k in (K.DONE, *SCALARS) and leaf.numel() != n):
                raise SpecError(
                    f"{k}: expected a leading env axis of {n} (one value per env for flags and "
                    f"scalars), got shape {tuple(leaf.shape)}"
                )
    specs[K.TRUNC] = torch.zeros_like(specs[K.DONE], dtype=torch.bool)
    return specs


def check_like(device: torch.device, key: str, value: Any, row: Any) -> Any:
    """A copy of ``value`` with the keys, shape and (losslessly) dtype of ``row``."""
    if isinstance(row, dict):
        if not isinstance(value, Mapping) or set(value) != set(row):
            raise SpecError(f"{key}: expected a dict with keys {sorted(row)}, got {value!r}")
        return {x: check_like(device, f"{key}[{x!r}]", value[x], row[x]) for x in row}
    v = as_tensor(key, value, device)
    if tuple(v.shape) != tuple(row.shape):
        raise SpecError(f"{key}: expected shape {tuple(row.shape)}, got {tuple(v.shape)}")
    return cast_lossless(key, v, row.dtype).detach().clone()


def check_sample(
    sample: Mapping[str, Any],
    specs: Data,
    nxt: Data,
    fresh: bool,
    device: torch.device,
    recurrent: bool,
) -> tuple[Data, Data]:
    """The checked values of ``sample`` by key and the ``RolloutBuffer.add`` arguments after
    obs/action; ``fresh`` (a rollout's first step) checks the slot-0 keys into ``nxt``."""
    keys = [k for k in (K.DONE, K.OBS, K.RHS, K.ACT, *SCALARS) if k in specs]
    got = {}
    for k in [k for k in keys if k != K.RHS or recurrent]:
        src = K.SHIFTED.get(k, k)
        if src not in sample:
            raise SpecError(f"sample: missing key {src!r} (got keys {sorted(sample)})")
        got[src] = check_like(device, src, sample[src], specs[k])
        if k in K.SHIFTED and fresh and sample.get(k) is not None:
            nxt[k] = check_like(device, k, sample[k], specs[k])
    N = specs[K.DONE].shape[0]
    done = got[K.DONE2].reshape(N) != 0
    trunc, fval = torch.zeros_like(done), None
    if K.TRUNC2 in sample:
        if K.FVAL not in sample:
            raise SpecError(f"sample: {K.TRUNC2!r} needs {K.FVAL!r} = V(final observation)")
        trunc = done & check_like(device, K.TRUNC2, sample[K.TRUNC2], specs[K.TRUNC]).reshape(N)
    if K.FVAL in sample:
        fval = check_like(device, K.FVAL, sample[K.FVAL], specs[K.VAL]).reshape(N)
    f = {k: got[k].reshape(N) for k in SCALARS if k in got}
    args = {"logp": f[K.LOGP], "value": f[K.VAL], "reward": f[K.REW], "final_value": fval,
            "terminated": done & ~trunc, "truncated": trunc, "int_reward": f.get(K.IREW),
            "int_value": f.get(K.IVAL)}  # fmt: skip
    return got, args


def column(row: Any, length: int, parts: Sequence[tuple[int, Any]]) -> Any:
    """A ``(length, *row.shape)`` zero tensor like ``row`` (or a dict of them), each ``(start,
    rows)`` of ``parts`` written from ``start`` on."""
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
    """The ``(size + 1, N, ...)`` view of the transitions ``b`` (None: ``L = 0``; ``(1, N, ...)``
    hidden zeros for feed-forward actors), ``nxt`` in slot ``L``, ``done0`` in slot 0."""
    L, S = 0 if b is None else b.num_steps, size + 1
    out: Data = {}
    for k, name in _FIELDS.items():
        if k not in specs:
            continue
        parts = [] if b is None else [(0, getattr(b, name))]
        if k == K.RHS and isinstance(specs[K.RHS], dict) and b is not None:
            parts = [(0, dict(zip(specs[K.RHS], b.hidden, strict=True)))]  # type: ignore[arg-type]
        if k in nxt:
            parts.append((L, nxt[k]))
        full = k != K.RHS or recurrent
        out[k] = column(specs[k], S if full else 1, parts if full else [])
    flags = [] if b is None else [(0, done0), (1, b.dones[: L - 1])]
    out[K.DONE] = column(specs[K.DONE], S, [*flags, (L, nxt[K.DONE])])
    out[K.TRUNC] = column(specs[K.TRUNC], S, [] if b is None else [(1, b.truncated)])
    out[K.FVAL] = column(specs[K.VAL], S, [] if b is None else [(1, b.final_values)])
    for k, like in ((K.RET, K.REW), (K.ADV, K.VAL), (K.IRET, K.IREW), (K.IADV, K.IVAL)):
        if like in specs:
            out[k] = column(specs[like], S, [])
    return out


def take(x: Any, i: int) -> Any:
    """Row ``i`` of a tensor or of each tensor of a dict (the last row if ``i`` is past it)."""
    return tree_map(lambda t: t[min(i, len(t) - 1)], x)


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
    """Layout C -> A: ``(values[:L], next_values, terminated, truncated)``, each ``(L, N*)``; a
    truncated transition bootstraps from ``final_values``."""
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
    """Flat time-major indices ``t * N + n`` per minibatch: :func:`~rlstore.minibatches.
    flat_index_plan`, or (``recurrent``) :func:`~rlstore.minibatches.column_index_plan`."""
    if not recurrent:
        yield from flat_index_plan(L * num_envs, num_minibatches=num_mini_batch,
                                   mini_batch_size=mini_batch_size, num_epochs=num_epochs,
                                   shuffle=shuffle, device=device)  # fmt: skip
        return
    if mini_batch_size is not None and num_mini_batch is not None:
        if mini_batch_size != L * (num_envs // num_mini_batch):
            raise ConfigError(
                f"mini_batch_size={mini_batch_size} conflicts with "
                f"num_mini_batch={num_mini_batch} whole env columns of {L} steps"
            )
    yield from column_index_plan(L, num_envs, num_minibatches=num_mini_batch or 1,
                                 num_epochs=num_epochs, shuffle=shuffle, device=device)  # fmt: skip


def gather(data: Data, idx: torch.Tensor, L: int, recurrent: bool) -> Data:
    """Rows ``idx`` of every stored key (``RecurrentHiddenStates`` of each sequence's first
    step), without ``Truncated`` / ``FinalValue``."""
    batch: Data = {}
    for k, v in data.items():
        if v is None or k in (K.TRUNC, K.FVAL):
            continue
        sel, length = idx.reshape(-1), L
        if k == K.RHS:  # the state before the first step of each sequence (time-major)
            first = idx[0] if idx.dim() == 2 else idx
            sel, length = (first if recurrent else torch.zeros_like(first)), 0
        batch[k] = tree_map(partial(rows, idx=sel, length=length or None), v)
    return batch
