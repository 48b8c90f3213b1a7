"""``CartPoleNoVel-v1``: CartPole-v1 with both velocities zeroed, a standard memory task.

RL-Zoo's ``CartPoleNoVel`` (used by sb3-contrib to benchmark ``RecurrentPPO``): the observation
keeps its 4 entries ``[x, 0, theta, 0]`` (cart velocity ``obs[1]`` and pole angular velocity
``obs[3]`` are zeroed), so a policy must infer both velocities from consecutive positions.
Dynamics, rewards, the 500-step limit and the reward threshold 475 are CartPole-v1's. A
feed-forward PPO agent stays far below the threshold; a recurrent one can solve it.

Registered when :mod:`rlstore.envs` is imported (idempotent)::

    >>> import gymnasium as gym
    >>> import rlstore.envs
    >>> env = gym.make("CartPoleNoVel-v1")
    >>> obs, _ = env.reset(seed=0)
    >>> obs[[1, 3]].tolist()
    [0.0, 0.0]
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["CartPoleNoVel", "MASKED_IDS", "register_masked"]

#: Gymnasium ids registered by :func:`register_masked`.
MASKED_IDS: tuple[str, ...] = ("CartPoleNoVel-v1",)


class CartPoleNoVel(CartPoleEnv):
    """CartPole whose observations have the velocities (entries 1 and 3) set to 0 (the
    observation space stays CartPole's, as in RL-Zoo)."""

    @staticmethod
    def _mask(obs: np.ndarray) -> np.ndarray:
        out = np.array(obs, dtype=np.float32, copy=True)
        out[[1, 3]] = 0.0
        return out

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return self._mask(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return self._mask(obs), reward, terminated, truncated, info


def register_masked() -> None:
    """Register ``CartPoleNoVel-v1`` (500 steps, reward threshold 475); idempotent."""
    if MASKED_IDS[0] not in gym.registry:
        gym.register(
            id=MASKED_IDS[0],
            entry_point="rlstore.envs.masked:CartPoleNoVel",
            max_episode_steps=500,
            reward_threshold=475.0,
        )
