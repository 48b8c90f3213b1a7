"""PPO agents, configs, trainer and checkpoints (``rlstore train`` / ``rlstore probe``).

The public names are imported lazily on first access, so ``import rlstore.agents.ppo`` (and
``rlstore.agents.ppo.config`` from the CLI) costs nothing until something is used; nothing here
imports matplotlib, tensorboard or wandb (the trainer imports them only when a run asks)::

    from rlstore.agents.ppo import EnvironmentConfig, OnlineTrainConfig, RunConfig, train_ppo

    agent, stats = train_ppo(
        RunConfig(seed=0, track=False),
        OnlineTrainConfig(total_timesteps=20_000, num_envs=8, num_steps=32),
        EnvironmentConfig(env_id="CartPole-v1"),
    )
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlstore.agents.envs import make_vector_env
    from rlstore.agents.networks import (
        FCAgent,
        LSTMPPOAgent,
        PPOAgent,
        TransformerPPOAgent,
        get_agent,
        layer_init,
    )
    from rlstore.agents.ppo.checkpoint import (
        load_all_agents_from_checkpoints,
        load_saved_checkpoint,
        store_model_checkpoint,
    )
    from rlstore.agents.ppo.loss import ppo_loss
    from rlstore.agents.ppo.rollout import RolloutState
    from rlstore.agents.ppo.sampling import load_trajectories, sample_from_agents
    from rlstore.agents.ppo.schedule import PPOScheduler
    from rlstore.agents.ppo.trainer import TrainResult, TrainStats, ppo_runner, train_ppo
    from rlstore.agents.ppo_config import (
        EnvironmentConfig,
        LSTMModelConfig,
        OnlineTrainConfig,
        RunConfig,
        TrainConfig,
        TransformerModelConfig,
        load_train_config,
    )

_EXPORTS: dict[str, str] = {
    "train_ppo": "trainer",
    "ppo_runner": "trainer",
    "TrainStats": "trainer",
    "TrainResult": "trainer",
    "TrainConfig": "rlstore.agents.ppo_config",
    "load_train_config": "rlstore.agents.ppo_config",
    "RunConfig": "rlstore.agents.ppo_config",
    "EnvironmentConfig": "rlstore.agents.ppo_config",
    "OnlineTrainConfig": "rlstore.agents.ppo_config",
    "LSTMModelConfig": "rlstore.agents.ppo_config",
    "TransformerModelConfig": "rlstore.agents.ppo_config",
    "PPOAgent": "rlstore.agents.networks",
    "FCAgent": "rlstore.agents.networks",
    "LSTMPPOAgent": "rlstore.agents.networks",
    "TransformerPPOAgent": "rlstore.agents.networks",
    "get_agent": "rlstore.agents.networks",
    "layer_init": "rlstore.agents.networks",
    "PPOScheduler": "schedule",
    "ppo_loss": "loss",
    "make_vector_env": "rlstore.agents.envs",
    "RolloutState": "rollout",
    "store_model_checkpoint": "checkpoint",
    "load_saved_checkpoint": "checkpoint",
    "load_all_agents_from_checkpoints": "checkpoint",
    "sample_from_agents": "sampling",
    "load_trajectories": "sampling",
}

__all__ = [
    "train_ppo",
    "ppo_runner",
    "TrainStats",
    "TrainResult",
    "TrainConfig",
    "load_train_config",
    "RunConfig",
    "EnvironmentConfig",
    "OnlineTrainConfig",
    "LSTMModelConfig",
    "TransformerModelConfig",
    "PPOAgent",
    "FCAgent",
    "LSTMPPOAgent",
    "TransformerPPOAgent",
    "get_agent",
    "layer_init",
    "PPOScheduler",
    "ppo_loss",
    "make_vector_env",
    "RolloutState",
    "store_model_checkpoint",
    "load_saved_checkpoint",
    "load_all_agents_from_checkpoints",
    "sample_from_agents",
    "load_trajectories",
]


def __getattr__(name: str) -> Any:
    """Import ``name`` from its submodule on first access (PEP 562) and cache it here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    full = module if module.startswith("rlstore.") else f"{__name__}.{module}"
    value = getattr(importlib.import_module(full), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
