"""Checks of scalar arguments at the public boundary: counts, real numbers, devices, files,
the keys of a loaded state.

One place for the rules every constructor and estimator applies to its plain arguments, so that
``True`` is never a capacity, ``"0.9"`` never a discount and ``"cpu:x"`` never reaches torch's
own error. Array arguments are checked against their field specs in :mod:`rlstore.specs`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlstore.errors import CapacityError, CheckpointError, ConfigError, RLStoreError

__all__ = ["as_device", "check_count", "check_keys", "real_number", "read_file"]


def check_keys(
    name: str, value: Any, keys: Iterable[str], error: type[RLStoreError] = CheckpointError
) -> Mapping[str, Any]:
    """``value`` if it is a mapping with exactly ``keys`` (any order).

    Raises:
        error (:class:`CheckpointError` unless given): naming ``name``, the keys expected and
        those missing or unknown (never the values: a loaded state may hold large arrays).
    """
    want = sorted(keys)
    if not isinstance(value, Mapping):
        raise error(f"{name}: expected keys {want} in a dict, got {type(value).__name__}")
    missing = [k for k in want if k not in value]
    unknown = sorted(str(k) for k in value if k not in want)
    if missing or unknown:
        raise error(f"{name}: expected keys {want}; missing {missing}, unknown {unknown}")
    return value


def check_count(
    name: str, value: Any, *, minimum: int = 1, error: type[RLStoreError] = CapacityError
) -> int:
    """``value`` as an int ``>= minimum``: Python or numpy ints only (not bools, floats, strings).

    Raises:
        error (:class:`CapacityError` unless given): naming ``name``, the expectation and what
        arrived.
    """
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, np.integer))
        or value < minimum
    ):
        raise error(f"{name}: expected an int >= {minimum}, got {value!r}")
    return int(value)


def real_number(
    name: str,
    value: Any,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    expected: str | None = None,
) -> float:
    """``value`` as a float if it is a real number in ``[low, high]``.

    Python and numpy scalars and 0-d arrays/tensors of a real dtype are accepted; strings, bools,
    complex numbers, NaN and anything else are not.

    Raises:
        ConfigError: naming ``name``, what was ``expected`` (default: the range) and what arrived.
    """
    expected = expected or f"a number in [{low}, {high}]"
    x = value
    if isinstance(x, (np.ndarray, torch.Tensor)) and x.ndim == 0:
        x = x.item()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise ConfigError(f"{name}: expected {expected}, got {value!r} ({type(value).__name__})")
    try:
        v = float(x)
    except OverflowError:  # a Python int too large for a float
        v = math.copysign(math.inf, x)
    if math.isnan(v) or not low <= v <= high:
        raise ConfigError(f"{name}: expected {expected}, got {value!r}")
    return v


def as_device(device: Any, name: str = "device") -> torch.device:
    """``device`` (a string such as ``"cpu"`` / ``"cuda:0"`` or a :class:`torch.device`) parsed.

    Raises:
        ConfigError: not a device torch understands (names ``name``).
    """
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except (RuntimeError, ValueError):
            pass
    raise ConfigError(f"{name}: expected a device string like 'cpu' or 'cuda:0', got {device!r}")


def read_file(path: Path, what: str, error: type[RLStoreError], arg: str | None = None) -> bytes:
    """The bytes of the file ``path``; errors name ``what`` it is and, if given, the argument
    ``arg`` that named it (else they start with the path).

    Raises:
        error: no such file (``... is missing (the file does not exist)``), or unreadable.
    """
    lead = f"{arg}: " if arg else f"{path}: "
    shown = f" {str(path)!r}" if arg else ""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{lead}{what}{shown} is missing (the file does not exist)") from None
    except (OSError, ValueError) as exc:  # a folder, unreadable, or a NUL byte in the path
        raise error(f"{lead}cannot read {what}{shown} ({exc})") from exc
