"""The PPO agent base class: spaces, action distributions, optimizer, rollout and update.

Every agent implements ``_step(obs, memory) -> (dist_params, value, stored_hidden, new_memory)`` for
one vectorized env step and ``_evaluate(minibatch) -> (dist_params, value, mask)`` for a training
minibatch; :class:`PPOAgent` does the rest (``rollout`` via
:func:`rlstore.agents.ppo.rollout.run_rollout` and ``learn``, the API of
DecisionTransformerInterpretability's ``src.ppo``). The concrete architectures live in
:mod:`rlstore.agents.ppo.models` (FC, :func:`get_agent`) and
:mod:`rlstore.agents.ppo.sequence_agents` (LSTM, transformer).
"""

from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlstore.agents.ppo.config import EnvironmentConfig, OnlineTrainConfig, TrainConfig
from rlstore.agents.ppo.loss import ppo_update
from rlstore.agents.ppo.normalization import RunNormalizer
from rlstore.agents.ppo.obs import get_obs_preprocessor, get_obs_shape
from rlstore.agents.ppo.rollout import run_rollout
from rlstore.agents.ppo.schedule import PPOScheduler
from rlstore.errors import ConfigError

Memory = Any
"""Per-env recurrent memory of an agent during rollouts (None, LSTM ``(h, c)``, window dict)."""

__all__ = ["ACTIVATIONS", "Memory", "layer_init", "mlp", "PPOAgent"]


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std``, constant biases (CleanRL init); returns ``layer``."""
    nn.init.orthogonal_(layer.weight, std)
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
    init = layer_init if ortho_init else (lambda layer, std=0.0: layer)
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


class PPOAgent(nn.Module, metaclass=ABCMeta):
    """Base of the PPO agents: spaces, action distributions, optimizer, rollout and learn.

    Abstract (``ABCMeta``, which ``nn.Module``'s plain ``type`` metaclass accepts): a class
    that does not implement ``_step`` and ``_evaluate`` cannot be instantiated (TypeError).

    Args:
        envs: a gymnasium vector env (only its single observation / action spaces are kept).
        device: torch device of the parameters.

    Attributes:
        obs_shape: shape of one preprocessed observation (``get_obs_shape``).
        discrete: True for ``Discrete`` actions, False for ``Box`` (Gaussian).
        action_dim: number of actions (discrete) or action vector size (continuous).
        environment_config: set by :func:`get_agent` (used to rebuild envs from checkpoints).
        normalizer: observation / reward normalization
            (:class:`~rlstore.agents.ppo.normalization.RunNormalizer`, off unless :func:`get_agent`
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
        if isinstance(act_space, gym.spaces.Discrete):
            self.discrete, self.action_dim = True, int(act_space.n)
            self.action_start = int(act_space.start)
        elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
            self.discrete, self.action_dim = False, int(act_space.shape[0])
            self.action_start = 0
        else:
            raise ConfigError(
                f"envs.single_action_space: expected Discrete or a 1-D Box, got {act_space!r}"
            )
        self.environment_config: EnvironmentConfig | None = None
        self.train_config: TrainConfig | None = None  # set by load_saved_checkpoint

    layer_init = staticmethod(layer_init)

    # ----------------------------------------------------------------- distributions

    def _make_log_std(self) -> None:
        if not self.discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(self.action_dim))

    def distribution(self, params: torch.Tensor) -> torch.distributions.Distribution:
        """Action distribution from the actor output ``(..., action_dim)``.

        Discrete: ``Categorical(logits=params)``. Continuous: ``Independent(Normal(params,
        exp(log_std)), 1)`` (log-prob and entropy summed over action dims).
        """
        if self.discrete:
            return torch.distributions.Categorical(logits=params, validate_args=False)
        std = self.actor_logstd.exp().expand_as(params)
        return torch.distributions.Independent(
            torch.distributions.Normal(params, std, validate_args=False), 1, validate_args=False
        )

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """Tensor actions -> what ``envs.step`` takes (offset by the space's start / clipped)."""
        a = action.cpu().numpy()
        if self.discrete:
            return a + self.action_start if self.action_start else a
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
        """One env step: ``obs`` ``(N, *obs_shape)`` -> actor params ``(N, A)``, value ``(N,)``,
        the hidden state to store with the step (or None) and the memory after the step."""

    @abstractmethod
    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Training minibatch -> actor params ``(*B, A)``, values ``(*B,)``, mask or None."""

    def get_value(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> torch.Tensor:
        """``V(obs)`` ``(N,)`` for the next step given ``memory`` (memory is not changed)."""
        return self._step(obs, memory, episode_time)[1]

    # ----------------------------------------------------------------- optimizer

    def make_optimizer(
        self, num_updates: int, initial_lr: float, end_lr: float, eps: float = 1e-5
    ) -> tuple[torch.optim.Optimizer, PPOScheduler]:
        """Adam over all parameters plus a :class:`PPOScheduler` decaying its rate linearly."""
        optimizer = torch.optim.Adam(self.parameters(), lr=initial_lr, eps=eps)
        return optimizer, PPOScheduler(optimizer, initial_lr, end_lr, num_updates)

    # ----------------------------------------------------------------- rollout / learn

    def rollout(
        self,
        memory: Any,
        num_steps: int,
        envs: Any,
        state: Any,
        trajectory_writer: Any = None,
        sampling_method: str = "basic",
        **sampling_kwargs: Any,
    ) -> Any:
        """Collect ``num_steps`` vectorized steps into the RolloutBuffer ``memory`` and compute
        its returns (GAE via ``memory.compute_returns``); see :func:`run_rollout`.

        Args:
            memory: a ``rlstore.buffers.rollout.RolloutBuffer`` of ``num_steps`` x ``num_envs``.
            num_steps: steps per env, T.
            envs: the vector env ``state`` was started on (``autoreset_mode`` SAME_STEP).
            state: from :meth:`RolloutState.start` or the previous rollout.
            trajectory_writer: optional object with ``accumulate_trajectory(next_obs, reward,
                terminated, truncated, action, info)`` (DecisionTransformerInterpretability's
                ``TrajectoryWriter``).
            sampling_method: ``basic`` (sample pi), ``greedy``, ``temperature`` (kwarg
                ``temperature``) or ``topk`` (kwarg ``k``); only ``basic`` is valid for training.

        Returns:
            The updated state (also mutated in place).
        """
        return run_rollout(
            self,
            memory,
            num_steps,
            envs,
            state,
            trajectory_writer,
            sampling_method,
            sampling_kwargs,
        )

    def learn(
        self,
        memory: Any,
        args: OnlineTrainConfig,
        optimizer: torch.optim.Optimizer,
        scheduler: PPOScheduler | None,
        track: bool = False,
    ) -> dict[str, float]:
        """PPO update on the rollout in ``memory`` (returns already computed): :func:`rlstore.
        agents.ppo.loss.ppo_update`, which says what it does and returns; a method for
        DecisionTransformerInterpretability's API (``track`` is accepted for its signature)."""
        return ppo_update(self, memory, args, optimizer, scheduler)

    def minibatches(self, memory: Any, args: OnlineTrainConfig) -> Any:
        """One epoch of minibatches for this agent (flat shuffled steps by default)."""
        return memory.minibatches(num_minibatches=args.num_minibatches, num_epochs=1)
