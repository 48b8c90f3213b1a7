"""Helpers shared by several test modules (on sys.path through pytest's ``pythonpath``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np


def flat_state(buf: Any) -> dict[str, bytes | str]:
    """Every leaf of state_dict: arrays as dtype/shape/bytes, scalars as JSON."""
    out: dict[str, bytes | str] = {}

    def walk(prefix: str, x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(f"{prefix}/{k}", v)
        elif hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor: as an array
            walk(prefix, x.detach().cpu().numpy())
        elif isinstance(x, np.ndarray):
            out[prefix] = f"{x.dtype}{x.shape}".encode() + x.tobytes()
        else:
            out[prefix] = json.dumps(x)

    walk("", buf.state_dict())
    return out
