"""Helpers shared by the checkpoint integrity tests: small saved buffers and state equality."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from rlstore.checkpoint._tree import _flatten


def state_equal(a: Any, b: Any) -> bool:
    """Exact equality of two state dicts: same arrays (dtype, shape, bytes), same JSON rest."""
    arrays_a, schema_a, tree_a = _flatten(a)
    arrays_b, schema_b, tree_b = _flatten(b)
    return (
        schema_a == schema_b
        and json.dumps(tree_a, sort_keys=True) == json.dumps(tree_b, sort_keys=True)
        and all(arrays_a[k].tobytes() == arrays_b[k].tobytes() for k in arrays_a)
    )


def replay_buffer(num_envs: int = 2, seed: int = 7) -> Any:
    """A wrapped-around ReplayBuffer with terminations, truncations and a discontinuity."""
    from rlstore.buffers.replay import ReplayBuffer

    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(12, num_envs=num_envs, seed=seed)
    obs = rng.standard_normal((num_envs, 3)).astype(np.float32)
    for t in range(9):
        nxt = rng.standard_normal((num_envs, 3)).astype(np.float32)
        term = np.zeros(num_envs, bool)
        trunc = np.zeros(num_envs, bool)
        term[0], trunc[-1] = t % 3 == 2, t % 4 == 3
        buf.add(obs, rng.integers(0, 4, num_envs), rng.random(num_envs), nxt, term, trunc)
        obs = nxt if t != 5 else rng.standard_normal((num_envs, 3)).astype(np.float32)
    buf.sample(4)
    return buf


def rollout_buffer(seed: int = 4) -> Any:
    """A half-filled RolloutBuffer with hidden states and an intrinsic stream."""
    from rlstore.buffers.rollout import IntrinsicConfig, RolloutBuffer

    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    rb = RolloutBuffer(4, 2, gamma=0.9, lam=0.8, intrinsic=IntrinsicConfig(), seed=seed)
    for _ in range(2):
        rb.add(
            rng.standard_normal((2, 3)).astype(np.float32),
            rng.integers(0, 3, 2),
            rng.standard_normal(2),
            rng.standard_normal(2),
            rng.standard_normal(2),
            rng.random(2) < 0.3,
            rng.random(2) < 0.2,
            final_value=rng.standard_normal(2),
            hidden=torch.randn(2, 5, generator=g),
            int_reward=rng.random(2),
            int_value=rng.standard_normal(2),
        )
    return rb


def velora_buffer(seed: int = 5) -> Any:
    from rlstore.compat.velora import ReplayBuffer

    buf = ReplayBuffer(10, state_dim=3, action_dim=2, hidden_dim=4, seed=seed)
    g = torch.Generator().manual_seed(seed)
    for t in range(13):
        buf.add(
            torch.randn(3, generator=g),
            torch.randn(2, generator=g),
            float(t),
            torch.randn(3, generator=g),
            t % 4 == 3,
            torch.randn(4, generator=g),
        )
    return buf


def simple_buffer(seed: int = 6) -> Any:
    from rlstore.compat.simple_replay import SimpleReplayBuffer

    buf = SimpleReplayBuffer(3, 2, 8, 4, seed=seed)
    rng = np.random.default_rng(seed)
    for t in range(11):
        buf.store(
            {
                "obs": rng.standard_normal(3),
                "act": rng.standard_normal(2),
                "rew": float(t),
                "next_obs": rng.standard_normal(3),
                "done": t % 5 == 4,
            }
        )
    buf.sample_batch()
    return buf
