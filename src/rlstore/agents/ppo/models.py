"""PPO agents: a common base (rollout + learn over a RolloutBuffer) and three architectures.

* :class:`FCAgent`: separate actor / critic MLPs (2 x ``hidden_size``, tanh), discrete
  (categorical) or continuous (diagonal Gaussian, state-independent log-std) actions.
* :class:`LSTMPPOAgent`: obs encoder -> LSTM -> MLP head, separately for actor and critic;
  trained on sequences of at most ``recurrence`` steps that never cross an episode boundary
  (stored hidden state at their start).
* :class:`TransformerPPOAgent`: causal attention over the last ``n_ctx`` steps of the episode
  (across rollouts), separately for actor and critic; trained on the stored windows.

The base class :class:`PPOAgent` (rollout + learn) lives in :mod:`rlstore.agents.ppo.agent_base`
and the LSTM / transformer agents in :mod:`rlstore.agents.ppo.sequence_agents`; this module holds
the FC agent and :func:`get_agent` and re-exports the others, so ``rlstore.agents.ppo.models``
stays the one import path for every agent.
"""

from __future__ import annotations

from typing import Any

import torch

from rlstore.agents.ppo.agent_base import Memory, PPOAgent, layer_init, mlp
from rlstore.agents.ppo.config import (
    EnvironmentConfig,
    LSTMModelConfig,
    ModelConfig,
    OnlineTrainConfig,
    TransformerModelConfig,
)
from rlstore.agents.ppo.normalization import RunNormalizer
from rlstore.agents.ppo.sequence_agents import LSTMPPOAgent, TransformerPPOAgent
from rlstore.errors import ConfigError

__all__ = [
    "Memory",
    "layer_init",
    "PPOAgent",
    "FCAgent",
    "LSTMPPOAgent",
    "TransformerPPOAgent",
    "get_agent",
]


class FCAgent(PPOAgent):
    """Feed-forward agent (CleanRL ``ppo.py`` / ``ppo_continuous_action.py`` networks).

    Args:
        envs: vector env (spaces). environment_config: kept for checkpoints.
        fc_model_config: unused (kept for DecisionTransformerInterpretability's signature). device:
        parameter device. hidden_dim: width of the two tanh hidden layers of actor and critic.
    """

    def __init__(
        self,
        envs: Any,
        environment_config: EnvironmentConfig | None = None,
        fc_model_config: Any = None,
        device: torch.device | str = "cpu",
        hidden_dim: int = 64,
    ) -> None:
        super().__init__(envs, device)
        self.environment_config = environment_config
        self.critic = mlp(self.obs_dim, hidden_dim, 1, 1.0)
        self.actor = mlp(self.obs_dim, hidden_dim, self.action_dim, 0.01)
        self._make_log_std()
        self.to(self.device)

    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        x = obs.reshape(obs.shape[0], -1)
        return self.actor(x), self.critic(x).squeeze(-1), None, memory

    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        x = mb.obs.reshape(mb.obs.shape[0], -1)
        return self.actor(x), self.critic(x).squeeze(-1), None


def get_agent(
    model_config: ModelConfig,
    envs: Any,
    environment_config: EnvironmentConfig,
    online_config: OnlineTrainConfig,
) -> PPOAgent:
    """Build the agent selected by ``model_config``'s type.

    ``None`` -> :class:`FCAgent` (``online_config.hidden_size``); :class:`LSTMModelConfig` ->
    :class:`LSTMPPOAgent`; :class:`TransformerModelConfig` -> :class:`TransformerPPOAgent`.
    ``agent.normalizer`` follows ``online_config.normalize_obs`` / ``normalize_reward``.
    """
    agent: PPOAgent
    if model_config is None:
        agent = FCAgent(envs, environment_config, hidden_dim=online_config.hidden_size)
    elif isinstance(model_config, LSTMModelConfig):
        agent = LSTMPPOAgent(envs, environment_config, model_config)
    elif isinstance(model_config, TransformerModelConfig):
        agent = TransformerPPOAgent(envs, environment_config, model_config)
    else:
        raise ConfigError(
            "model_config: expected None (FC agent), LSTMModelConfig or TransformerModelConfig, "
            f"got {type(model_config).__name__}"
        )
    agent.normalizer = RunNormalizer.from_config(
        online_config, agent.single_observation_space, agent.obs_shape
    )
    return agent
