"""Input contract of :mod:`rlstore.returns` (private): validation and zero-copy conversion.

``_prepare`` checks shapes, dtypes and flags (raising :class:`~rlstore.errors.SpecError` that name
the argument), views CPU tensors as numpy arrays without copying, and returns contiguous
``(T, N)`` arrays of one compute dtype (float32 or float64), ``bool`` flags, and an ``_Out`` that
gives results back in the caller's type, dtype and device. Hot paths (contiguous 2-D numpy or CPU
tensor inputs of one float dtype with bool flags) skip every copy and most checks' overhead.

``_check_*`` validate the scalar hyperparameters (``gamma``, ``lam``, clipping thresholds, ``n``,
``eps``): real numbers in range, never strings, bools or NaN, else
:class:`~rlstore.errors.ConfigError` naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlstore._checks import check_count, real_number
from rlstore._trees import to_numpy
from rlstore.errors import ConfigError, SpecError

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_TORCH_FLOAT = {2: torch.float16, 4: torch.float32}  # wider: float64 (torch has no longdouble)


class _Out:
    """Gives results back in the caller's type, dtype and device (torch if any input was).

    The torch dtype is the promotion of the floating-point inputs: the tensors' dtypes and the
    dtypes of the ``arrays`` given beside them (numpy float64 makes a float64 tensor)."""

    __slots__ = ("device", "on_cpu", "torch_dtype", "np_dtype")

    def __init__(
        self, tensors: list[torch.Tensor], np_dtype: np.dtype, arrays: Sequence[np.ndarray] = ()
    ) -> None:
        self.np_dtype = np_dtype
        self.device: torch.device | None = None
        self.on_cpu = True
        self.torch_dtype = torch.get_default_dtype()
        if not tensors:
            return
        self.device = tensors[0].device
        self.on_cpu = tensors[0].is_cpu
        dt: torch.dtype | None = None
        dtypes = [t.dtype for t in tensors] + [
            _TORCH_FLOAT.get(a.dtype.itemsize, torch.float64) for a in arrays
        ]
        for tdt in dtypes:
            if tdt is not dt and tdt.is_floating_point:
                dt = tdt if dt is None else torch.promote_types(dt, tdt)
        if dt is not None:
            self.torch_dtype = dt

    def __call__(self, arr: np.ndarray, shape: tuple[int, ...]) -> Any:
        if arr.shape != shape:
            arr = arr.reshape(shape)
        if self.device is None:
            return arr if arr.dtype == self.np_dtype else arr.astype(self.np_dtype)
        out = torch.from_numpy(arr)
        if out.dtype != self.torch_dtype or not self.on_cpu:
            out = out.to(device=self.device, dtype=self.torch_dtype)
        return out


def _prepare_fast(
    floats: Sequence[tuple[str, Any]], flags: Sequence[tuple[str, Any]]
) -> tuple[list[np.ndarray], list[np.ndarray], _Out, tuple[int, ...]] | None:
    """The hot path of :func:`_prepare`: C-contiguous 2-D numpy float32/float64 of one dtype and
    shape with bool flags need no conversion; anything else returns None (the general path)."""
    a0 = floats[0][1]
    if type(a0) is not np.ndarray or a0.ndim != 2:
        return None
    dt, shape = a0.dtype, a0.shape
    if dt != _F32 and dt != _F64:
        return None
    farrs = []
    for _, a in floats:
        if type(a) is not np.ndarray or a.dtype != dt or a.shape != shape:
            return None
        if not a.flags.c_contiguous:
            return None
        farrs.append(a)
    barrs = []
    for _, f in flags:
        if type(f) is not np.ndarray or f.dtype != np.bool_ or f.shape != shape:
            return None
        if not f.flags.c_contiguous:
            return None
        barrs.append(f)
    return farrs, barrs, _NUMPY_OUT[dt.char], shape


def _prepare_fast_torch(
    floats: Sequence[tuple[str, Any]], flags: Sequence[tuple[str, Any]]
) -> tuple[list[np.ndarray], list[np.ndarray], _Out, tuple[int, ...]] | None:
    """Hot path for CPU tensors: 2-D contiguous float32/float64 of one dtype without grad and
    bool flags are viewed with ``.numpy()`` (zero-copy); anything else returns None."""
    t0 = floats[0][1]
    if type(t0) is not torch.Tensor or t0.dim() != 2:
        return None
    dt, shape = t0.dtype, t0.shape
    out = _TORCH_CPU_OUT.get(dt)
    if out is None:
        return None
    farrs = []
    for _, t in floats:
        if type(t) is not torch.Tensor or t.dtype is not dt or t.shape != shape:
            return None
        if t.requires_grad or not t.is_cpu or not t.is_contiguous():
            return None
        farrs.append(t.numpy())
    barrs = []
    for _, f in flags:
        if type(f) is not torch.Tensor or f.dtype is not torch.bool or f.shape != shape:
            return None
        if not f.is_cpu or not f.is_contiguous():
            return None
        barrs.append(f.numpy())
    return farrs, barrs, out, tuple(shape)


def _prepare(
    floats: Sequence[tuple[str, Any]], flags: Sequence[tuple[str, Any]]
) -> tuple[list[np.ndarray], list[np.ndarray], _Out, tuple[int, ...]]:
    """Validate shapes/dtypes/flags; return contiguous (T, N) float arrays, bool flags, output.

    No copies for contiguous inputs of one float dtype with bool flags (the hot path).
    """
    fast = _prepare_fast(floats, flags)
    if fast is not None:
        return fast
    fast = _prepare_fast_torch(floats, flags)
    if fast is not None:
        return fast
    tensors = [x for _, x in floats if isinstance(x, torch.Tensor)]
    tensors += [x for _, x in flags if isinstance(x, torch.Tensor)]
    arrs = [to_numpy(n, x) for n, x in floats]  # zero-copy views of CPU tensors
    # the non-tensor float inputs beside tensors take part in the output's torch dtype
    beside = [a for (_, x), a in zip(floats, arrs, strict=True) if not isinstance(x, torch.Tensor)]
    beside = [a for a in beside if a.dtype.kind == "f"]
    if tensors:  # the numpy hot path if it applies
        flags = [(n, to_numpy(n, x)) for n, x in flags]
        fast = _prepare_fast([(n, a) for (n, _), a in zip(floats, arrs, strict=True)], flags)
        if fast is not None:
            return fast[0], fast[1], _Out(tensors, fast[2].np_dtype, beside), fast[3]
    ref_name = floats[0][0]
    shape = arrs[0].shape
    if len(shape) not in (1, 2):
        raise SpecError(f"{ref_name}: expected shape (T,) or (T, N), got {shape}")
    dt0 = arrs[0].dtype
    same = True
    for (name, _), a in zip(floats, arrs, strict=True):
        if a.shape != shape:
            raise SpecError(f"{name}: expected shape {shape} like {ref_name}, got {a.shape}")
        if a.dtype != dt0:
            same = False
    if same and dt0.kind == "f":
        out_dt = dt0
    else:
        fdts = []
        for (name, _), a in zip(floats, arrs, strict=True):
            kind = a.dtype.kind
            if kind == "f":
                fdts.append(a.dtype)
            elif kind not in "biu":
                raise SpecError(f"{name}: expected a real (float/int/bool) dtype, got {a.dtype}")
        out_dt = np.result_type(*fdts) if fdts else _F64
    comp_dt = _F32 if out_dt.itemsize <= 4 else _F64  # float16 in float32, longdouble in float64
    shape2 = shape if len(shape) == 2 else (shape[0], 1)
    farrs = [np.ascontiguousarray(a, dtype=comp_dt) for a in arrs]
    barrs = []
    for name, x in flags:
        f = to_numpy(name, x)
        if f.shape != shape:
            raise SpecError(f"{name}: expected shape {shape} like {ref_name}, got {f.shape}")
        barrs.append(np.ascontiguousarray(check_flags(name, f)))
    if shape2 is not shape:
        farrs = [a.reshape(shape2) for a in farrs]
        barrs = [a.reshape(shape2) for a in barrs]
    return farrs, barrs, _Out(tensors, out_dt, beside), shape


def check_flags(name: str, f: np.ndarray) -> np.ndarray:
    """``f`` as bool: bools, or real numbers that are exactly 0 or 1 (not 0.5, 2, NaN, "a")."""
    if f.dtype == np.bool_:
        return f
    if f.dtype.kind not in "biuf":
        raise SpecError(f"{name}: expected bool or 0/1 flags, got dtype {f.dtype}")
    ok = (f == 0) | (f == 1)
    if not ok.all():
        bad = f[~ok].ravel()[0].item()  # 0.5, not np.float64(0.5)
        raise SpecError(f"{name}: expected bool or 0/1 flags, got a value {bad!r}")
    return f != 0


_NUMPY_OUT = {"f": _Out([], _F32), "d": _Out([], _F64)}
_TORCH_CPU_OUT = {
    torch.float32: _Out([torch.empty(0, dtype=torch.float32)], _F32),
    torch.float64: _Out([torch.empty(0, dtype=torch.float64)], _F64),
}


def _check_unit(name: str, value: Any) -> float:
    """A discount or lambda: a real number in ``[0, 1]``."""
    if type(value) is float and 0.0 <= value <= 1.0:  # the common case, kept cheap (NaN fails)
        return value
    expected = "a number in [0, 1]"
    v = real_number(name, value, expected=expected)
    if not 0.0 <= v <= 1.0:
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    return v


def _check_positive(name: str, value: Any) -> float:
    """A clipping threshold: a real number ``> 0``; ``inf`` disables clipping."""
    if type(value) is float and value > 0.0:  # the common case, kept cheap (NaN fails)
        return value
    expected = "a number > 0 (inf allowed)"
    v = real_number(name, value, expected=expected)
    if not v > 0.0:
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    return v


def _check_eps(name: str, value: Any) -> float:
    """A finite real number ``>= 0`` (added to a standard deviation)."""
    if type(value) is float and 0.0 <= value < math.inf:  # the common case (NaN fails)
        return value
    expected = "a finite number >= 0"
    v = real_number(name, value, expected=expected)
    if not 0.0 <= v < math.inf:
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    return v


def _check_count(name: str, value: Any) -> int:
    """A window length: an int (Python or numpy, not bool) ``>= 1``."""
    return check_count(name, value, error=ConfigError)
