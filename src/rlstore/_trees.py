"""Private helpers over small tensor trees (a tensor, a one-level dict, a tuple, nested).

On-policy buffers store observations that may be dicts of arrays and recurrent states that may
be tuples of tensors (LSTM ``(h, c)``); these helpers apply one function to every tensor leaf,
convert inputs to tensors (:func:`as_tensor`) or numpy arrays (:func:`to_numpy`) with a named
error, and turn trees into checkpointable nested dicts. This is the one tree walker and the one
boundary conversion of the package: buffers, minibatches, the vector adapter, the estimators,
checkpoints and the compatibility facades use it.

The walker is hand-written rather than ``optree`` / ``torch.utils._pytree``: those sort dict keys,
while callers rely on insertion order (leaf order, checkpoint keys).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from rlstore.errors import SpecError

__all__ = [
    "as_tensor",
    "to_numpy",
    "check_real",
    "cast_lossless",
    "check_exact_ints",
    "tree_map",
    "tree_leaves",
    "flat_items",
    "real_array",
    "flag_array",
    "tree_to_state",
    "tree_from_state",
]


def _check_has_data(name: str, x: torch.Tensor) -> None:
    if x.is_meta:
        raise SpecError(f"{name}: expected a tensor with data, got one on the 'meta' device")


def as_tensor(name: str, x: Any, device: torch.device | None = None) -> torch.Tensor:
    """``x`` (tensor, array, nested list, scalar) as a detached tensor, on ``device`` if given.

    Tensors keep their dtype and are not copied unless they move device; anything else goes
    through :func:`numpy.asarray` (numpy's dtype rules).

    Raises:
        SpecError: ``x`` cannot be converted (the message names ``name`` and the type).
    """
    if isinstance(x, torch.Tensor):
        _check_has_data(name, x)
        x = x.detach()  # a tensor that requires grad is stored detached
        return x if device is None else x.to(device)
    try:
        arr = np.asarray(x)
        if arr.dtype.kind not in "biufc":  # strings, objects, dates: not numbers
            raise TypeError(arr.dtype)
        return torch.as_tensor(arr, device=device)
    except Exception as exc:  # numpy / torch raise TypeError, ValueError or RuntimeError
        raise SpecError(f"{name}: expected an array or tensor, got {type(x).__name__}") from exc


def to_numpy(name: str, x: Any) -> np.ndarray:
    """``x`` (array, tensor, nested list, scalar) as a numpy array, zero-copy where possible.

    Arrays are returned as they are; tensors are detached and moved to the CPU (a view of a CPU
    tensor, bfloat16 widened to float32, which numpy lacks); anything else goes through
    :func:`numpy.asarray`.

    Raises:
        SpecError: ``x`` is a mapping or cannot be converted (the message names ``name``).
    """
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, torch.Tensor):
        _check_has_data(name, x)
        if x.requires_grad:
            x = x.detach()
        if not x.is_cpu:
            x = x.cpu()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.numpy()
    if isinstance(x, Mapping):
        raise SpecError(f"{name}: expected an array or tensor, got a dict")
    try:
        return np.asarray(x)
    except (TypeError, ValueError, RuntimeError) as exc:  # RuntimeError: lists of torch tensors
        raise SpecError(f"{name}: expected an array or tensor, got {type(x).__name__}") from exc


def real_array(name: str, x: Any) -> np.ndarray:
    """``x`` through :func:`to_numpy`, holding finite real numbers (bool, int, uint or float).

    Raises:
        SpecError: naming ``name``: dicts, strings, objects, ragged lists, complex, NaN/inf.
    """
    a = to_numpy(name, x)
    if a.dtype.kind not in "biuf":
        raise SpecError(f"{name}: expected real numbers, got dtype {a.dtype}")
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise SpecError(f"{name}: expected finite values, got NaN/inf")
    return a


def flag_array(name: str, x: Any, n: int) -> np.ndarray:
    """``x`` as a new bool array of shape ``(n,)``: bools, or numbers that are exactly 0 or 1.

    Raises:
        SpecError: naming ``name``: another shape, 0.5 / 2 / -1 / NaN, strings, complex.
    """
    a = to_numpy(name, x)
    if a.shape != (n,):
        raise SpecError(f"{name}: expected shape ({n},), got {a.shape}")
    if a.dtype.kind == "b":
        return a.astype(bool, copy=True)
    if a.dtype.kind not in "iuf" or not np.isin(a, (0, 1)).all():  # NaN is never in (0, 1)
        shown = a.ravel()[:4].tolist()  # a few values, not a whole rollout
        raise SpecError(f"{name}: expected bools (or exact 0/1), got {a.dtype} values {shown}")
    return a != 0


def tree_map(
    fn: Callable[..., Any], tree: Any, *rest: Any, path: tuple[Any, ...] | None = None
) -> Any:
    """Apply ``fn`` to every leaf of a mapping / tuple tree, in insertion order.

    Mappings come back as dicts with the same keys in the same order, tuples as tuples; anything
    else (a tensor, an array, None) is a leaf. With ``rest`` (trees shaped like ``tree``),
    ``fn`` gets the leaves at the same place in every tree: ``tree_map(np.stack, *trees)``-style
    maps over a list of trees (keys are taken from ``tree``). With ``path`` (the root's, usually
    ``()``), ``fn`` gets each leaf's path first: ``fn((*path, key_or_index, ...), leaf, *rest)``.
    """

    def sub(k: Any, v: Any) -> Any:
        return tree_map(fn, v, *(r[k] for r in rest), path=None if path is None else (*path, k))

    if isinstance(tree, Mapping):
        return {k: sub(k, v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(sub(i, v) for i, v in enumerate(tree))
    return fn(tree, *rest) if path is None else fn(path, tree, *rest)


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of a dict / tuple tree in :func:`tree_map` order."""
    out: list[Any] = []
    tree_map(out.append, tree)
    return out


def flat_items(tree: Any) -> dict[str, Any]:
    """``{"a/b/0": leaf}``: the leaves of a dict / tuple tree under their ``'/'``-joined key
    paths (keys as ``str``), in :func:`tree_map` order."""
    out: dict[str, Any] = {}
    tree_map(lambda p, x: out.__setitem__("/".join(map(str, p)), x), tree, path=())
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
    """Inverse of :func:`tree_to_state`: tensors on ``device`` (from tensors or arrays), copies
    that share no memory with ``tree`` (the caller's state dict stays its own)."""
    if isinstance(tree, dict):
        if tree and all(k.startswith("tuple:") for k in tree):
            return tuple(tree_from_state(tree[f"tuple:{i}"], device) for i in range(len(tree)))
        return {k: tree_from_state(v, device) for k, v in tree.items()}
    return torch.as_tensor(tree).to(device, copy=True)


def check_real(name: str, t: torch.Tensor, *, finite: bool = True) -> torch.Tensor:
    """``t`` itself if it holds real numbers (bool / int / float), finite floats if ``finite``.

    Raises:
        SpecError: a complex (or other non-real) dtype, or NaN / inf in a float tensor.
    """
    if t.is_complex() or not (t.is_floating_point() or t.dtype == torch.bool or _is_int(t.dtype)):
        raise SpecError(f"{name}: expected real numbers (bool, int or float), got dtype {t.dtype}")
    if finite and t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise SpecError(f"{name}: expected finite values, got {bad} NaN/inf entries")
    return t


def _is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def cast_lossless(
    name: str, t: torch.Tensor, dtype: torch.dtype, *, finite: bool = True
) -> torch.Tensor:
    """``t`` (checked by :func:`check_real`) converted to ``dtype`` only if no value changes.

    Accepted: any widening, float narrowing that stays finite, ints into floats that hold them
    exactly (:func:`check_exact_ints`), ints (or integral floats) that fit an int dtype, 0/1
    values into bool. Rejected with a :class:`SpecError` naming ``name``:
    fractional values into an int field (0.5 is never stored as 0), out-of-range ints, float
    overflow (1e300 is never stored as float32 inf), complex numbers, NaN / inf when ``finite``.
    """
    check_real(name, t, finite=finite)
    if t.dtype == dtype:
        return t
    if dtype == torch.bool:
        if not bool(((t == 0) | (t == 1)).all()):
            raise SpecError(f"{name}: expected bool or 0/1 values, got dtype {t.dtype}")
        return t != 0
    if _is_int(dtype):
        if t.is_floating_point() and not bool((t == t.trunc()).all()):
            raise SpecError(
                f"{name}: expected integral values for dtype {dtype}, got fractional {t.dtype}"
            )
        info = torch.iinfo(dtype)
        if t.numel() and t.dtype != torch.bool:
            lo, hi = t.min().item(), t.max().item()
            if lo < info.min or hi > info.max:
                raise SpecError(
                    f"{name}: expected values of dtype {dtype} in [{info.min}, {info.max}], "
                    f"got values in [{lo}, {hi}]"
                )
        return t.to(dtype)
    out = t.to(dtype)
    if t.dtype != torch.bool and not t.is_floating_point() and not t.is_complex():
        bits = round(-math.log2(torch.finfo(dtype).eps)) + 1  # the float's significand bits
        check_exact_ints(name, t, out, bits, t.element_size() * 8)
    if finite and out.numel() and not bool(torch.isfinite(out).all()):
        raise SpecError(f"{name}: expected values that fit {dtype}, got overflow from {t.dtype}")
    return out


def check_exact_ints(name: str, ints: Any, floats: Any, bits: int, int_bits: int) -> None:
    """SpecError unless every integer of ``ints`` (an integer array or tensor, ``int_bits``
    wide) equals its float conversion ``floats`` (same shape; a float of ``bits`` significand
    bits): integers up to ``2**bits`` in magnitude always do, larger ones are compared exactly
    (``2**24 + 1`` is never stored as float32 ``16777216.0``, nor ``70000`` as float16 ``inf``).
    """
    if int_bits - 1 <= bits:  # (int16 -> float32, uint8 -> float16: always exact)
        return
    big = (ints > 2**bits) | (ints < -(2**bits))
    if not bool(big.any()):
        return
    for v, f in zip(ints[big].tolist(), floats[big].tolist(), strict=True):
        if not (math.isfinite(f) and int(f) == v):
            raise SpecError(
                f"{name}: expected integers exactly representable in {floats.dtype} "
                f"(|x| <= 2**{bits}), got {v} (would be stored as {f!r})"
            )
