"""The base of the PPO agents (:class:`PPOAgent`) and the layers every architecture builds
from (:func:`layer_init`, :func:`mlp`); the architectures and :func:`get_agent` are in
:mod:`rlstore.agents.networks`, which re-exports these names.
"""

from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from functools import partial
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlstore.agents.config import EnvironmentConfig
from rlstore.agents.gsde import GSDEConfig, GSDEDistribution, sample_exploration
from rlstore.agents.obs import RunNormalizer, get_obs_preprocessor, get_obs_shape
from rlstore.agents.ppo_config import OnlineTrainConfig, TrainConfig
from rlstore.errors import ConfigError

__all__ = ["ACTIVATIONS", "Memory", "layer_init", "mlp", "MultiCategorical", "PPOAgent"]

Memory = Any
"""Per-env recurrent memory of an agent during rollouts (None, LSTM ``(h, c)``, window dict)."""


Layer = TypeVar("Layer", nn.Linear, nn.Conv2d)


def layer_init(
    layer: Layer, std: float = math.sqrt(2), bias_const: float = 0.0, *, enabled: bool = True
) -> Layer:
    """Orthogonal weights with gain ``std``, constant biases (CleanRL init); returns ``layer``.
    ``enabled`` False: ``layer`` as PyTorch initialized it (a config's ``ortho_init: false``)."""
    if enabled:
        nn.init.orthogonal_(layer.weight, std)
        if layer.bias is not None:
            nn.init.constant_(layer.bias, bias_const)
    return layer


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}
"""Hidden-layer activations by config name."""


def mlp(
    in_dim: int,
    hidden: int,
    out_dim: int,
    out_std: float,
    depth: int = 2,
    *,
    activation: str = "tanh",
    ortho_init: bool = True,
) -> nn.Sequential:
    """``depth`` hidden layers of width ``hidden`` (``activation``: tanh or relu), then a linear
    output. ``ortho_init``: CleanRL init (orthogonal, gain sqrt(2), the output gain ``out_std``:
    0.01 for policy logits, 1.0 for values); off: PyTorch's default init."""
    init = partial(layer_init, enabled=ortho_init)
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [init(nn.Linear(in_dim if i == 0 else hidden, hidden)), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers, init(nn.Linear(hidden, out_dim), std=out_std))


def _spaces(envs: Any) -> tuple[gym.Space, gym.Space]:
    obs_space = getattr(envs, "single_observation_space", None)
    act_space = getattr(envs, "single_action_space", None)
    if obs_space is None or act_space is None:
        raise ConfigError(
            f"envs: expected a gymnasium vector env (single_observation_space, "
            f"single_action_space), got {type(envs).__name__}"
        )
    return obs_space, act_space


class MultiCategorical:
    """Independent categoricals over the sub-actions of a ``MultiDiscrete`` space (CleanRL's
    ``ppo_multidiscrete.py``): ``logits`` ``(..., sum(nvec))`` split into ``len(nvec)`` groups;
    actions are ``(..., len(nvec))`` int64 indices; log-prob and entropy are summed over the
    sub-actions."""

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...]) -> None:
        self.parts = [
            torch.distributions.Categorical(logits=x, validate_args=False)
            for x in logits.split(list(nvec), dim=-1)
        ]

    def sample(self) -> torch.Tensor:
        return torch.stack([d.sample() for d in self.parts], dim=-1)

    def mode(self) -> torch.Tensor:
        return torch.stack([d.logits.argmax(-1) for d in self.parts], dim=-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return torch.stack(
            [d.log_prob(action[..., i]) for i, d in enumerate(self.parts)], dim=-1
        ).sum(-1)

    def entropy(self) -> torch.Tensor:
        return torch.stack([d.entropy() for d in self.parts], dim=-1).sum(-1)


class PPOAgent(nn.Module, metaclass=ABCMeta):
    """Base of the PPO agents: spaces, observation preprocessing, action distributions.

    Abstract (``ABCMeta``, which ``nn.Module``'s plain ``type`` metaclass accepts): a class
    that does not implement ``_step`` and ``_evaluate`` cannot be instantiated (TypeError).

    Args:
        envs: a gymnasium vector env (only its single observation / action spaces are kept).
        device: torch device of the parameters.

    Attributes:
        obs_shape: shape of one preprocessed observation (``get_obs_shape``).
        discrete: True for ``Discrete`` and ``MultiDiscrete`` actions (logits), False for
            ``Box`` (Gaussian).
        action_dim: number of logits (discrete: ``n``, multi-discrete: ``sum(nvec)``) or action
            vector size (continuous).
        action_nvec: ``MultiDiscrete``'s ``nvec`` as a tuple (actions ``(..., len(nvec))``, one
            index per sub-action); None for ``Discrete`` (actions ``(...,)``) and ``Box``.
        action_start: what :meth:`env_action` adds to the indices (the space's ``start``).
        environment_config: set by :func:`get_agent` (used to rebuild envs from checkpoints).
        sde: the gSDE settings (:mod:`rlstore.agents.gsde`) of an agent that explores with
            state-dependent noise (FC agent, ``Box`` actions), else None.
        normalizer: observation / reward normalization
            (:class:`~rlstore.agents.obs.RunNormalizer`, off unless :func:`get_agent`
            got ``normalize_obs`` / ``normalize_reward``); its statistics are updated by rollouts
            in ``train()`` mode only.
    """

    actor: nn.Module
    critic: nn.Module

    def __init__(self, envs: Any, device: torch.device | str = "cpu") -> None:
        super().__init__()
        obs_space, act_space = _spaces(envs)
        self.single_observation_space = obs_space
        self.single_action_space = act_space
        self.obs_shape = tuple(get_obs_shape(obs_space))
        self.obs_dim = int(np.prod(self.obs_shape))
        self.preprocess = get_obs_preprocessor(obs_space)
        self.normalizer = RunNormalizer()  # off; get_agent sets the configured one
        self.device = torch.device(device)
        self.action_nvec: tuple[int, ...] | None = None
        self.action_start: Any = 0
        if isinstance(act_space, gym.spaces.Discrete):
            self.discrete, self.action_dim = True, int(act_space.n)
            self.action_start = int(act_space.start)
        elif isinstance(act_space, gym.spaces.MultiDiscrete) and act_space.nvec.ndim == 1:
            self.action_nvec = tuple(int(n) for n in act_space.nvec)
            self.discrete, self.action_dim = True, sum(self.action_nvec)
            self.action_start = np.asarray(act_space.start, dtype=np.int64)
        elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
            self.discrete, self.action_dim = False, int(act_space.shape[0])
        else:
            raise ConfigError(
                "envs.single_action_space: expected Discrete, a 1-D MultiDiscrete or a 1-D Box, "
                f"got {act_space!r}"
            )
        self.sde: GSDEConfig | None = None
        self.environment_config: EnvironmentConfig | None = None
        self.train_config: TrainConfig | None = None  # set by load_saved_checkpoint

    layer_init = staticmethod(layer_init)

    # ----------------------------------------------------------------- distributions

    def _make_log_std(self, sde: GSDEConfig | None = None, latent_dim: int = 0) -> None:
        """The continuous actions' ``actor_logstd``: ``(action_dim,)``, or with ``sde`` gSDE's
        ``(latent_dim, action_dim)`` (``(latent_dim, 1)`` without ``full_std``); zeros."""
        if sde is not None and self.discrete:
            raise ConfigError(
                "sde (online.use_sde): expected a Box action space for gSDE, got "
                f"{self.single_action_space!r}"
            )
        self.sde = sde
        if sde is not None:
            shape = (latent_dim, self.action_dim if sde.full_std else 1)
            self.actor_logstd = nn.Parameter(torch.zeros(shape))
        elif not self.discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(self.action_dim))

    def sample_exploration(self, num_envs: int) -> torch.Tensor | None:
        """New gSDE exploration matrices ``(num_envs, L, A)`` (torch's global RNG); None for an
        agent without gSDE."""
        if self.sde is None:
            return None
        return sample_exploration(self.actor_logstd, self.action_dim, num_envs)

    def distribution(self, params: torch.Tensor, exploration: torch.Tensor | None = None) -> Any:
        """Action distribution from the actor output ``params`` ``(..., P)``.

        Discrete: ``Categorical(logits=params)``. Multi-discrete: :class:`MultiCategorical`
        (one categorical per sub-action). Continuous: ``Independent(Normal(params,
        exp(log_std)), 1)`` (log-prob and entropy summed over action dims). gSDE: ``params`` is
        the mean and the actor's features side by side, ``(..., A + L)``, and the result a
        :class:`~rlstore.agents.gsde.GSDEDistribution` that samples with ``exploration``
        (``(..., L, A)``, :meth:`sample_exploration`).
        """
        if self.action_nvec is not None:
            return MultiCategorical(params, self.action_nvec)
        if self.discrete:
            return torch.distributions.Categorical(logits=params, validate_args=False)
        if self.sde is not None:
            a = self.action_dim
            return GSDEDistribution(
                params[..., :a], params[..., a:], self.actor_logstd, exploration
            )
        std = self.actor_logstd.exp().expand_as(params)
        return torch.distributions.Independent(
            torch.distributions.Normal(params, std, validate_args=False), 1, validate_args=False
        )

    def greedy(self, params: torch.Tensor) -> torch.Tensor:
        """The deterministic action of the actor output ``params``: the most likely index
        (of each sub-action) for discrete actions, the mean for continuous ones."""
        if self.action_nvec is not None:
            return MultiCategorical(params, self.action_nvec).mode()
        return params.argmax(-1) if self.discrete else params[..., : self.action_dim]

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """Tensor actions -> what ``envs.step`` takes (offset by the space's start / clipped)."""
        a = action.cpu().numpy()
        if self.discrete:
            return a + self.action_start
        space = self.single_action_space
        assert isinstance(space, gym.spaces.Box)  # checked in __init__ (type narrowing only)
        return np.clip(a, space.low, space.high).astype(space.dtype)

    # ----------------------------------------------------------------- per-agent hooks

    def initial_memory(self, num_envs: int) -> Memory:
        """Recurrent memory at the start of training (``None`` for memoryless agents)."""
        return None

    def reset_memory(self, memory: Memory, done: torch.Tensor) -> Memory:
        """Memory after a step whose envs ``done`` (``(N,)`` bool) start new episodes."""
        return memory

    @abstractmethod
    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        """One env step: ``obs`` ``(N, *obs_shape)`` -> actor params ``(N, P)`` (``P = A``; gSDE:
        ``A + L``, :meth:`distribution`), value ``(N,)``,
        the hidden state to store with the step (or None) and the memory after the step."""

    @abstractmethod
    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Training minibatch -> actor params ``(*B, P)``, values ``(*B,)``, mask or None."""

    def get_value(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> torch.Tensor:
        """``V(obs)`` ``(N,)`` for the next step given ``memory`` (memory is not changed)."""
        return self._step(obs, memory, episode_time)[1]

    def minibatches(self, memory: Any, args: OnlineTrainConfig) -> Any:
        """One epoch of minibatches for this agent (flat shuffled steps by default)."""
        return memory.minibatches(num_minibatches=args.num_minibatches, num_epochs=1)
