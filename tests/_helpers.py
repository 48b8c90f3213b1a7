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


def event_stream(codes: np.ndarray) -> dict[str, np.ndarray]:
    """``(T, N)`` transition arrays of a stream with events 0 continue, 1 terminated,
    2 truncated, 3 jump (the next obs does not continue this next_obs), 4 a jump in the sign of
    zero only (next_obs ``[env, 0.0]``, the next obs ``[env, -0.0]``): ``obs = [env, counter]``
    (distinct but for those zeros), ``action = t * N + env``; no reward or extras (the caller
    adds them)."""
    t_len, n = codes.shape
    counter = iter(range(1, 10**6))
    cur = [float(next(counter)) for _ in range(n)]
    obs, nxt = np.zeros((t_len, n, 2), np.float32), np.zeros((t_len, n, 2), np.float32)
    obs[..., 0] = nxt[..., 0] = np.arange(n)
    for t in range(t_len):
        for e in range(n):
            obs[t, e, 1] = cur[e]
            nxt[t, e, 1] = next(counter)
            if codes[t, e] == 4:  # a jump in the bytes only: -0.0 does not continue 0.0
                nxt[t, e, 1], cur[e] = 0.0, -0.0
            else:
                cur[e] = next(counter) if codes[t, e] else nxt[t, e, 1]
    return dict(obs=obs, action=np.arange(t_len * n).reshape(t_len, n), next_obs=nxt,
                terminated=codes == 1, truncated=codes == 2)  # fmt: skip


def register_test_env(env_id: str, entry_point: Any, **kwargs: Any) -> str:
    """Register a test env with gymnasium once (a module imported twice keeps the first);
    returns ``env_id``."""
    import gymnasium as gym

    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point, **kwargs)
    return env_id
