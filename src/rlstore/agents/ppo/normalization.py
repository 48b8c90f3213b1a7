"""Observation and reward normalization of a PPO run (``online.normalize_obs`` /
``online.normalize_reward``), Stable-Baselines3 ``VecNormalize`` semantics.

* observations: a :class:`~rlstore.normalize.RunningMeanStd` over preprocessed observations
  (for a non-image ``Box`` space: the raw values as float32), updated from every training step's
  batch ``(N, *obs_shape)`` (the reset observations included) *before* normalizing it;
  the agent sees and stores ``clip((x - mean) / sqrt(var + 1e-8), -clip_obs, clip_obs)``;
  final observations of truncated episodes are normalized without an update.
* rewards: a :class:`~rlstore.normalize.DiscountedReturnNormalizer` with the run's ``gamma``
  whose per-env sums restart at episode ends (``dones``); the stored reward is
  ``clip(r / (std + 1e-8), -clip_reward, clip_reward)``. Episode returns stay raw.

Statistics are updated only while ``update`` is true (the rollout passes ``agent.training``):
evaluation and sampling in ``eval()`` mode use them frozen. :meth:`RunNormalizer.state_dict` goes
into every checkpoint (also model-only ones, so loaded agents sample as they trained).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlstore.agents.ppo.config import OnlineTrainConfig
from rlstore.errors import CheckpointError, ConfigError
from rlstore.normalize import DiscountedReturnNormalizer, RunningMeanStd

__all__ = ["RunNormalizer"]


class RunNormalizer:
    """Observation and reward normalization; with no arguments both are off (identity).

    Args:
        obs_shape: shape of one preprocessed observation; ``None``: observations unchanged.
        gamma: discount of the reward normalizer's running return; ``None``: rewards unchanged.
        clip_obs, clip_reward: clip ranges of the normalized values.
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...] | None = None,
        gamma: float | None = None,
        *,
        clip_obs: float = 10.0,
        clip_reward: float = 10.0,
    ) -> None:
        self.obs_rms = None if obs_shape is None else RunningMeanStd(tuple(obs_shape))
        self.reward_norm = None if gamma is None else DiscountedReturnNormalizer(gamma)
        self.clip_obs, self.clip_reward = float(clip_obs), float(clip_reward)

    @classmethod
    def from_config(
        cls, online_config: OnlineTrainConfig, obs_space: gym.Space, obs_shape: tuple[int, ...]
    ) -> RunNormalizer:
        """The normalizer ``online_config`` asks for.

        Raises:
            ConfigError: ``normalize_obs`` with an observation space that is not a ``Box``.
        """
        oc = online_config
        if oc.normalize_obs and not isinstance(obs_space, gym.spaces.Box):
            raise ConfigError(
                f"online.normalize_obs: expected a Box observation space, got {obs_space!r}; "
                "turn normalize_obs off for this environment"
            )
        return cls(
            tuple(obs_shape) if oc.normalize_obs else None,
            oc.gamma if oc.normalize_reward else None,
            clip_obs=oc.clip_obs,
            clip_reward=oc.clip_reward,
        )

    def obs(self, x: torch.Tensor, update: bool) -> torch.Tensor:
        """Normalized ``x`` ``(N, *obs_shape)`` (same dtype and device); ``update`` first adds
        ``x`` to the statistics."""
        if self.obs_rms is None:
            return x
        if update:
            self.obs_rms.update(x)
        return self.obs_rms.normalize(x, clip=self.clip_obs)

    def reward(self, reward: np.ndarray, done: np.ndarray, update: bool) -> np.ndarray:
        """Scaled rewards ``(N,)`` of one step; ``update`` first advances the running returns
        (reset where ``done``) and their std."""
        if self.reward_norm is None:
            return reward
        if update:
            self.reward_norm.update(reward[None], np.asarray(done, dtype=bool)[None])
        return np.clip(self.reward_norm.scale(reward), -self.clip_reward, self.clip_reward)

    def state_dict(self) -> dict[str, Any]:
        """``{"obs": RunningMeanStd state or None, "reward": DiscountedReturnNormalizer state
        or None}`` (copies)."""
        return {
            "obs": None if self.obs_rms is None else self.obs_rms.state_dict(),
            "reward": None if self.reward_norm is None else self.reward_norm.state_dict(),
        }

    def load_state_dict(self, sd: Any) -> None:
        """Restore :meth:`state_dict` of a normalizer with the same settings; everything is
        checked before anything changes.

        Raises:
            CheckpointError: missing or extra parts, or malformed statistics.
        """
        if not isinstance(sd, dict) or set(sd) != {"obs", "reward"}:
            raise CheckpointError(f"normalizer: expected keys ['obs', 'reward'], got {sd!r}")
        obs_rms, reward_norm = None, None
        for key, mine in (("obs", self.obs_rms), ("reward", self.reward_norm)):
            if (sd[key] is None) != (mine is None):
                raise CheckpointError(
                    f"normalizer.{key}: checkpoint has {'no ' if sd[key] is None else ''}"
                    f"statistics, this run's config {'asks for' if mine else 'has none'}"
                )
        if self.obs_rms is not None:
            obs_rms = RunningMeanStd(self.obs_rms.shape)
            obs_rms.load_state_dict(sd["obs"])
        if self.reward_norm is not None:
            reward_norm = DiscountedReturnNormalizer(self.reward_norm.gamma)
            reward_norm.load_state_dict(sd["reward"])
        self.obs_rms, self.reward_norm = obs_rms, reward_norm
