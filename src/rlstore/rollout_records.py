"""The typed records of a time-major on-policy rollout: :class:`RolloutBatch` (a whole rollout,
``(T, N, ...)``, as ``RolloutBuffer.get()`` returns it) and the minibatches drawn from it,
:class:`Minibatch` (flat or recurrent) and :class:`TrajectoryMinibatch` (Transformer windows),
one base of their shared fields. The generators that build the minibatches are in
:mod:`rlstore.minibatches`, which re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Obs", "Hidden", "TimeMajor", "Minibatch", "TrajectoryMinibatch", "RolloutBatch"]

Obs = torch.Tensor | dict[str, torch.Tensor]
Hidden = torch.Tensor | tuple[torch.Tensor, ...]


class TimeMajor:
    """``num_steps`` / ``num_envs`` of a time-major record whose ``rewards`` are ``(T, N)``."""

    rewards: Any

    @property
    def num_steps(self) -> int:
        """T, the number of steps per env."""
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        """N, the number of env columns."""
        return int(self.rewards.shape[1])


@dataclass(frozen=True, eq=False)
class _PPOTargets:
    """The fields every PPO minibatch starts with (shapes: see the subclasses)."""

    obs: Obs
    actions: torch.Tensor
    logprobs: torch.Tensor
    advantages: torch.Tensor
    values: torch.Tensor
    returns: torch.Tensor


@dataclass(frozen=True, eq=False)
class Minibatch(_PPOTargets):
    """One PPO minibatch (field names follow DecisionTransformerInterpretability's
    ``src.ppo.memory.Minibatch``).

    Flat minibatches: every field is ``(B, *field_shape)``, ``mask`` is None and
    ``recurrence_memory`` is the stored per-step hidden state ``(B, ...)`` (or None).
    Recurrent minibatches: fields are time-major ``(L, B, *field_shape)``; ``mask`` ``(L, B)``
    bool is False exactly on padding; ``recurrence_memory`` is the hidden state before the first
    step of each sequence, ``(B, ...)`` per tensor; ``episode_starts`` ``(L, B)`` bool is True
    where a step begins a new episode (reset the recurrent state before that step).
    ``indices`` holds the flat rollout index ``t * N + n`` of each entry (-1 on padding).
    ``int_values`` / ``int_returns`` are set when the buffer has an intrinsic stream.
    """

    recurrence_memory: Hidden | None = None
    mask: torch.Tensor | None = None
    episode_starts: torch.Tensor | None = None
    int_values: torch.Tensor | None = None
    int_returns: torch.Tensor | None = None
    indices: torch.Tensor | None = None


@dataclass(frozen=True, eq=False)
class TrajectoryMinibatch(_PPOTargets):
    """Windows of past steps for Transformer agents (field names of
    DecisionTransformerInterpretability's ``TrajectoryMinibatch``, plus ``mask``).

    ``obs`` ``(B, W, *obs_shape)``, ``actions`` ``(B, W, *act_shape)``, ``timesteps`` ``(B, W)``
    int64 (step index within the episode), ``rewards`` ``(B, W)`` and ``mask`` ``(B, W)`` bool,
    with ``W = timesteps`` window length; the last column is the target step and padding is on
    the left (zeros, mask False). ``logprobs``, ``advantages``, ``values``, ``returns`` and
    ``indices`` are ``(B,)`` values of the target step (DecisionTransformerInterpretability's
    semantics: the loss is taken on the last step of each window). ``rewards[:, -1]`` is the
    original's per-target reward.
    """

    timesteps: torch.Tensor
    rewards: torch.Tensor
    mask: torch.Tensor | None = None
    indices: torch.Tensor | None = None
    int_values: torch.Tensor | None = None
    int_returns: torch.Tensor | None = None


@dataclass(frozen=True, eq=False)
class RolloutBatch(TimeMajor):
    """A whole rollout, every field ``(T, N, *field_shape)`` (read-only views of the buffer).

    ``advantages`` / ``returns`` are None until returns are computed; with an intrinsic stream,
    ``advantages`` is the combined ``ext_coef * A_ext + int_coef * A_int`` and ``returns`` the
    extrinsic value target. ``episode_time`` ``(T, N)`` int64 is the step index of each step
    within its episode (0 at an episode's first step). ``final_obs`` (like ``obs``, or None
    when no add gave one) holds the true successor observation of truncated-not-terminated
    steps (zeros elsewhere) and ``final_obs_given`` ``(T, N)`` bool marks where one was given.
    """

    obs: Obs
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_values: torch.Tensor
    episode_time: torch.Tensor
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    hidden: Hidden | None = None
    int_rewards: torch.Tensor | None = None
    int_values: torch.Tensor | None = None
    int_advantages: torch.Tensor | None = None
    int_returns: torch.Tensor | None = None
    final_obs: Obs | None = None
    final_obs_given: torch.Tensor | None = None

    @property
    def dones(self) -> torch.Tensor:
        """``terminated | truncated``, ``(T, N)`` bool."""
        return self.terminated | self.truncated
