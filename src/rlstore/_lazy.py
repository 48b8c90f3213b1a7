"""Modules imported on their first use: numba's compiled kernels add ~0.5 s to ``import
rlstore``, so the estimators and the sum tree load theirs only when first called."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any


def lazy_module(name: str) -> Callable[[], Any]:
    """A function returning the module ``name``, which it imports on its first call."""
    return functools.cache(lambda: importlib.import_module(name))
