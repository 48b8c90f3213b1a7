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


def rollout_step(num_envs: int, **over: Any) -> dict[str, Any]:
    """Keyword arguments of one valid ``RolloutBuffer.add`` (obs ``(N, 3)``, discrete actions),
    with ``over`` replacing any of them."""
    import torch

    args = dict(
        obs=torch.zeros(num_envs, 3),
        action=torch.zeros(num_envs, dtype=torch.long),
        logp=torch.zeros(num_envs),
        value=torch.zeros(num_envs),
        reward=torch.ones(num_envs),
        terminated=torch.zeros(num_envs, dtype=torch.bool),
        truncated=torch.zeros(num_envs, dtype=torch.bool),
    )
    return args | over
