"""Resolve ``"package.module:Qual.Name"`` strings (lazy registries of config and checkpoint)."""

from __future__ import annotations

import importlib
from typing import Any


def import_target(target: str) -> Any:
    """Import ``module:qualname`` and return the object; ImportError/AttributeError propagate."""
    module_name, _, qualname = target.partition(":")
    attr: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        attr = getattr(attr, part)
    return attr
