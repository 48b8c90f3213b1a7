"""Generalized state-dependent exploration (gSDE; Raffin et al. 2021, "Smooth Exploration for
Robotic Reinforcement Learning"; Stable-Baselines3's ``StateDependentNoiseDistribution`` with
``use_expln=False``, ``learn_features=False``, no squashing) for the PPO FC agent's ``Box``
actions.

The exploration noise is a function of the actor's latent features ``z`` (the input of its last
layer, ``(..., L)``): ``eps = z @ W`` with one matrix ``W`` ``(L, A)`` per env, drawn as
``W_ij ~ N(0, sigma_ij^2)``, ``sigma = exp(log_std)`` (``log_std`` ``(L, A)``, or ``(L, 1)``
shared by the action dims), and held fixed between draws: the same state gives the same action
until the next draw, so the noise is smooth along a trajectory. The rollout draws new matrices
at its start and every ``sde_sample_freq`` steps (:func:`rlstore.agents.rollout.run_rollout`).

Given ``z`` the action ``mean + z @ W`` is Gaussian per action dim with
``var_j = sum_i z_i^2 sigma_ij^2`` (the ``W_ij`` are independent), so the log-probability of a
stored action under the current parameters does not need ``W``::

    pi(a | s) = prod_j Normal(a_j; mean_j, sqrt(((z**2) @ (sigma**2))_j + 1e-6))

(log-probability and entropy summed over the action dims). ``z`` is detached in the variance
and the noise: the features are trained by the mean's gradient only (SB3's default).

Example::

    >>> import torch
    >>> log_std = torch.zeros(3, 2)                       # L = 3 features, A = 2 actions
    >>> W = sample_exploration(log_std, action_dim=2, num_envs=4)
    >>> d = GSDEDistribution(torch.zeros(4, 2), torch.ones(4, 3), log_std, W)
    >>> d.sample().shape, d.log_prob(d.sample()).shape
    (torch.Size([4, 2]), torch.Size([4]))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rlstore._checks import check_count
from rlstore.errors import ConfigError, SpecError

__all__ = ["EPSILON", "GSDEConfig", "gsde_std", "sample_exploration", "GSDEDistribution"]

EPSILON = 1e-6
"""Added to the variance (SB3's ``epsilon``): keeps the log-probability finite where ``z = 0``."""


@dataclass(frozen=True)
class GSDEConfig:
    """The gSDE settings of an agent (``online.sde_sample_freq`` / ``online.full_std``).

    Attributes:
        sample_freq: draw new exploration matrices every ``sample_freq`` rollout steps; -1: only
            at the start of each rollout.
        full_std: one ``log_std`` per (feature, action dim), ``(L, A)``; False: per feature,
            ``(L, 1)``.

    Raises:
        ConfigError: ``sample_freq`` not -1 or an int >= 1, ``full_std`` not a bool.
    """

    sample_freq: int = -1
    full_std: bool = True

    def __post_init__(self) -> None:
        f = self.sample_freq  # 0 acted as -1 and 2.5 redrew every 5 steps, silently
        if isinstance(f, bool) or not isinstance(f, int | np.integer) or not (f == -1 or f >= 1):
            raise ConfigError(f"sample_freq: expected -1 or an int >= 1, got {f!r}")
        if not isinstance(self.full_std, bool):
            raise ConfigError(f"full_std: expected a bool, got {self.full_std!r}")


def gsde_std(log_std: torch.Tensor, action_dim: int) -> torch.Tensor:
    """``sigma = exp(log_std)`` ``(L, A)`` from ``log_std`` ``(L, A)`` or ``(L, 1)`` (broadcast).

    Raises:
        SpecError: ``log_std`` of another shape.
    """
    if log_std.dim() != 2 or log_std.shape[1] not in (1, action_dim):
        raise SpecError(
            f"log_std: expected (L, {action_dim}) or (L, 1), got {tuple(log_std.shape)}"
        )
    return log_std.exp().expand(log_std.shape[0], action_dim)


def sample_exploration(log_std: torch.Tensor, action_dim: int, num_envs: int) -> torch.Tensor:
    """``num_envs`` exploration matrices ``(num_envs, L, A)``, entries ``N(0, sigma^2)``
    independent, drawn from torch's global RNG (which checkpoints save); no gradient.

    Raises:
        ConfigError: ``num_envs`` not an int >= 1. SpecError: as :func:`gsde_std`.
    """
    num_envs = check_count("num_envs", num_envs, error=ConfigError)
    with torch.no_grad():
        std = gsde_std(log_std, action_dim)
        return torch.randn(num_envs, *std.shape, dtype=std.dtype, device=std.device) * std


class GSDEDistribution:
    """The gSDE action distribution of one batch.

    Args:
        mean: ``(..., A)`` the deterministic action.
        latent: ``(..., L)`` the actor's features (detached here).
        log_std: ``(L, A)`` or ``(L, 1)``.
        exploration: ``(..., L, A)`` the matrices :meth:`sample` uses (one per row of
            ``latent``); None where only :meth:`log_prob` / :meth:`entropy` are needed.

    Raises:
        SpecError: ``latent`` not ``(..., L)`` with ``mean``'s leading axes, ``exploration``
            not ``(..., L, A)``, ``log_std`` as :func:`gsde_std`.
    """

    def __init__(
        self,
        mean: torch.Tensor,
        latent: torch.Tensor,
        log_std: torch.Tensor,
        exploration: torch.Tensor | None = None,
    ) -> None:
        sigma = gsde_std(log_std, mean.shape[-1])
        if latent.shape[:-1] != mean.shape[:-1] or latent.shape[-1] != sigma.shape[0]:
            raise SpecError(
                f"latent: expected {(*mean.shape[:-1], sigma.shape[0])} (mean's rows, L = "
                f"log_std's rows), got {tuple(latent.shape)}"
            )
        if exploration is not None and exploration.shape[-2:] != sigma.shape:
            raise SpecError(
                f"exploration: expected (..., {sigma.shape[0]}, {sigma.shape[1]}), got "
                f"{tuple(exploration.shape)}"
            )
        self.mean = mean
        self.latent = latent.detach()
        self.exploration = exploration
        var = (self.latent**2) @ (sigma**2)
        self.normal = torch.distributions.Normal(mean, (var + EPSILON).sqrt(), validate_args=False)

    @property
    def stddev(self) -> torch.Tensor:
        """``(..., A)`` ``sqrt((z**2) @ (sigma**2) + EPSILON)``."""
        return self.normal.scale

    def noise(self) -> torch.Tensor:
        """``z @ W`` ``(..., A)`` with the exploration matrices."""
        if self.exploration is None:
            raise ConfigError("exploration: expected gSDE matrices to sample with, got None")
        return (self.latent.unsqueeze(-2) @ self.exploration).squeeze(-2)

    def sample(self) -> torch.Tensor:
        """``mean + z @ W`` (deterministic given the matrices)."""
        return self.mean + self.noise()

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """``(...,)`` summed over the action dims."""
        return self.normal.log_prob(actions).sum(-1)

    def entropy(self) -> torch.Tensor:
        """``(...,)`` summed over the action dims."""
        return self.normal.entropy().sum(-1)
