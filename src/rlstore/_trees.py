"""Private helpers over small tensor trees (a tensor, a one-level dict, a tuple, nested).

On-policy buffers store observations that may be dicts of arrays and recurrent states that may
be tuples of tensors (LSTM ``(h, c)``); these helpers apply one function to every tensor leaf,
convert inputs to tensors with a named error, and turn trees into checkpointable nested dicts.
Used by :mod:`rlstore.buffers.rollout`, :mod:`rlstore.compat.src_ppo` and
:mod:`rlstore.compat.pytorchrl`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlstore.errors import SpecError

__all__ = ["as_tensor", "tree_map", "tree_leaves", "tree_to_state", "tree_from_state"]


def as_tensor(name: str, x: Any, device: torch.device | None = None) -> torch.Tensor:
    """``x`` (tensor, array, nested list, scalar) as a detached tensor, on ``device`` if given.

    Tensors keep their dtype and are not copied unless they move device; anything else goes
    through :func:`numpy.asarray` (numpy's dtype rules).

    Raises:
        SpecError: ``x`` cannot be converted (the message names ``name`` and the type).
    """
    if isinstance(x, torch.Tensor):
        x = x.detach()
        return x if device is None else x.to(device)
    try:
        return torch.as_tensor(np.asarray(x), device=device)
    except Exception as exc:  # numpy / torch raise TypeError, ValueError or RuntimeError
        raise SpecError(f"{name}: expected an array or tensor, got {type(x).__name__}") from exc


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Apply ``fn`` to every leaf of a dict / tuple tree (dicts and tuples keep their shape)."""
    if isinstance(tree, dict):
        return {k: tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(tree_map(fn, v) for v in tree)
    return fn(tree)


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of a dict / tuple tree in :func:`tree_map` order."""
    out: list[Any] = []
    tree_map(out.append, tree)
    return out


def tree_to_state(tree: Any) -> Any:
    """Tree -> checkpointable nested dict of detached CPU copies.

    Tuples become ``{"tuple:0": .., "tuple:1": ..}`` so that :func:`tree_from_state` can rebuild
    them (``state_dict`` leaves must be arrays/tensors inside dicts).
    """
    if isinstance(tree, dict):
        return {k: tree_to_state(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return {f"tuple:{i}": tree_to_state(v) for i, v in enumerate(tree)}
    return tree.detach().cpu().clone()


def tree_from_state(tree: Any, device: torch.device) -> Any:
    """Inverse of :func:`tree_to_state`: tensors on ``device`` (from tensors or arrays)."""
    if isinstance(tree, dict):
        if tree and all(k.startswith("tuple:") for k in tree):
            return tuple(tree_from_state(tree[f"tuple:{i}"], device) for i in range(len(tree)))
        return {k: tree_from_state(v, device) for k, v in tree.items()}
    return torch.as_tensor(tree).to(device)
