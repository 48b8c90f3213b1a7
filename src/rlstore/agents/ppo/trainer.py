"""The PPO training loop, readable top to bottom: envs -> rollout -> GAE -> update -> log.

Programmatic entry (used by ``rlstore train``, ``rlstore probe`` and the learning tests)::

    from rlstore.agents.ppo.config import EnvironmentConfig, OnlineTrainConfig, RunConfig
    from rlstore.agents.ppo.trainer import train_ppo

    agent, stats = train_ppo(
        RunConfig(seed=0, track=False),
        OnlineTrainConfig(total_timesteps=20_000, num_envs=8, num_steps=32),
        EnvironmentConfig(env_id="CartPole-v1"),
        model_config=None,          # None: FC agent; LSTMModelConfig / TransformerModelConfig
    )
    stats.mean_return(last=20), stats.steps_per_second

``train_ppo`` writes nothing unless ``run_dir`` is given (then: TensorBoard logs, checkpoints
and ``learning_curve.png``); :func:`ppo_runner` also creates the run folder and its
``config.yaml``. Environments are Gymnasium vector envs in ``AutoresetMode.SAME_STEP``: every
step is a real transition, and a truncated episode bootstraps from ``V(info["final_obs"])``.
Returns come from the :class:`~rlstore.buffers.rollout.RolloutBuffer` (``rlstore.returns.gae``).

Env construction and rollout collection live in :mod:`rlstore.agents.ppo.rollout`; the run
folder, logging, plotting, seeding and evaluation in :mod:`rlstore.agents.run` (shared by every
trainer). ``TrainStats``, ``RunLogger``, ``make_vector_env`` and ``run_rollout`` are
re-exported here.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rlstore.agents.ppo.config import (
    EnvironmentConfig,
    LSTMModelConfig,
    ModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TrainConfig,
    TransformerModelConfig,
)
from rlstore.agents.ppo.models import PPOAgent, get_agent
from rlstore.agents.ppo.rollout import (
    SAMPLING_METHODS,
    RolloutState,
    check_env_id,
    make_vector_env,
    run_rollout,
)
from rlstore.agents.run import (
    RunLogger,
    TrainStats,
    checkpoint_schedule,
    create_run_dir,
    plot_learning_curve,
    set_global_seeds,
)
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = [
    "SAMPLING_METHODS",
    "RolloutState",
    "RunLogger",
    "TrainStats",
    "TrainResult",
    "make_vector_env",
    "run_rollout",
    "train_ppo",
    "ppo_runner",
    "train_config_from_parts",
]


class TrainResult(NamedTuple):
    """``(agent, stats)`` returned by :func:`train_ppo`."""

    agent: PPOAgent
    stats: TrainStats


def train_config_from_parts(
    run_config: RunConfig,
    online_config: OnlineTrainConfig,
    environment_config: EnvironmentConfig,
    model_config: ModelConfig,
) -> TrainConfig:
    """Bundle the four configs (DecisionTransformerInterpretability's split) into a TrainConfig."""
    parts: dict[str, Any] = {
        "run": run_config,
        "environment": environment_config,
        "online": online_config,
        "agent": "fc",
    }
    if isinstance(model_config, LSTMModelConfig):
        parts.update(agent="lstm", lstm=model_config)
    elif isinstance(model_config, TransformerModelConfig):
        parts.update(agent="transformer", transformer=model_config)
    elif model_config is not None:
        raise ConfigError(
            f"model_config: expected None, LSTMModelConfig or TransformerModelConfig, "
            f"got {type(model_config).__name__}"
        )
    return TrainConfig.model_validate(parts)


_LOSSES = ("loss", "pg_loss", "v_loss", "entropy", "approx_kl", "old_approx_kl", "clipfrac",
           "explained_variance")  # fmt: skip


def _log_update(
    logger: RunLogger, update: int, state: RolloutState, info: dict[str, float], n_logged: int
) -> int:
    """Log the episodes finished since the ``n_logged`` first and the update's diagnostics;
    returns the number of episodes logged so far."""
    for i in range(n_logged, len(state.episode_returns)):
        logger.episode(state.episode_returns[i], state.episode_lengths[i],
                       state.episode_end_steps[i])  # fmt: skip
    values = {f"losses/{k}": info[k] for k in _LOSSES if k in info}
    values.update({"charts/learning_rate": info["lr"], "charts/SPS": info["sps"]})
    logger.scalars(values, state.global_step)
    recent = state.episode_returns[-20:]
    ret = f"{np.mean(recent):.1f}" if recent else "-"
    logger.progress(state.global_step, sps=f"{info['sps']:.0f}", ret=ret, upd=update)
    return len(state.episode_returns)


def _title(cfg: TrainConfig) -> str:
    """The learning curve's title: algorithm, agent, env id and seed."""
    return f"PPO ({cfg.agent}) on {cfg.environment.env_id}, seed {cfg.run.seed}"


def train_ppo(
    run_config: RunConfig,
    online_config: OnlineTrainConfig,
    environment_config: EnvironmentConfig,
    model_config: ModelConfig = None,
    envs: gym.vector.VectorEnv | None = None,
    trajectory_writer: Any = None,
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
) -> TrainResult:
    """Train a PPO agent; returns ``(agent, stats)``.

    Args:
        run_config, online_config, environment_config: see :mod:`rlstore.agents.ppo.config`.
        model_config: None (FC agent), :class:`LSTMModelConfig` or :class:`TransformerModelConfig`.
        envs: a vector env in SAME_STEP autoreset mode with ``online_config.num_envs`` envs
            (default: :func:`make_vector_env`, closed at the end).
        trajectory_writer: optional, receives every step (``accumulate_trajectory``).
        run_dir: folder for TensorBoard logs (if ``run_config.track``), ``checkpoints/`` and
            ``learning_curve.png``; None writes nothing.
        resume: continue from the latest checkpoint in ``run_dir/checkpoints`` (model,
            optimizer, scheduler, buffer RNG, global RNGs, env states, episode history,
            observation / reward normalization statistics), so the
            run continues the learning curve it would have had without the interruption.

    Returns:
        :class:`TrainResult` ``(agent, stats)``.
    """
    from rlstore.agents.ppo.checkpoint import (
        latest_checkpoint,
        restore_training,
        store_model_checkpoint,
    )

    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    oc = online_config
    threads_before = torch.get_num_threads()
    torch.set_num_threads(run_config.torch_threads)
    set_global_seeds(run_config.seed)
    own_envs = envs is None
    if envs is None:
        envs = make_vector_env(environment_config, oc.num_envs)
    if envs.num_envs != oc.num_envs:
        raise ConfigError(
            f"envs: expected online_config.num_envs = {oc.num_envs} envs, got {envs.num_envs}"
        )
    agent = get_agent(model_config, envs, environment_config, oc).to(run_config.device)
    agent.device = torch.device(run_config.device)
    num_updates = oc.num_updates
    end_lr = oc.end_learning_rate if oc.decay_lr else oc.learning_rate
    optimizer, scheduler = agent.make_optimizer(num_updates, oc.learning_rate, end_lr, oc.adam_eps)
    buffer = RolloutBuffer(
        oc.num_steps, oc.num_envs, gamma=oc.gamma, lam=oc.gae_lambda,
        advantage_normalization="none", device=run_config.device, seed=run_config.seed,
    )  # fmt: skip
    state = RolloutState.start(agent, envs, run_config.seed)
    stats = TrainStats(run_dir=None if run_dir is None else Path(run_dir))
    ckpt_dir = None if run_dir is None else Path(run_dir) / "checkpoints"
    start_update, ckpt_num = 0, 0
    if resume:
        if ckpt_dir is None or (path := latest_checkpoint(ckpt_dir)) is None:
            raise ConfigError(f"resume: no checkpoint found under {ckpt_dir}")
        start_update, ckpt_num, stats.updates = restore_training(
            path, agent, optimizer, scheduler, buffer, state, envs
        )
    rc = run_config
    logger = RunLogger(
        run_dir, total_steps=num_updates * oc.batch_size, initial_step=state.global_step,
        desc=environment_config.env_id, track=rc.track, progress_bar=rc.progress_bar,
        wandb=rc.wandb, wandb_project=rc.wandb_project_name, wandb_entity=rc.wandb_entity,
        exp_name=rc.exp_name, config=cfg.to_dict(),
    )  # fmt: skip
    n_logged = len(state.episode_returns)
    ckpt_at = checkpoint_schedule(num_updates, oc.num_checkpoints) if ckpt_dir else set()
    t0, step0 = time.perf_counter(), state.global_step
    try:
        for update in range(start_update, num_updates):
            agent.rollout(buffer, oc.num_steps, envs, state, trajectory_writer)
            info = agent.learn(buffer, oc, optimizer, scheduler)
            buffer.reset()
            elapsed = time.perf_counter() - t0
            info.update(global_step=float(state.global_step),
                        sps=(state.global_step - step0) / max(elapsed, 1e-9))  # fmt: skip
            stats.updates.append(info)
            n_logged = _log_update(logger, update + 1, state, info, n_logged)
            if ckpt_dir is not None and update + 1 in ckpt_at:
                ckpt_num = store_model_checkpoint(
                    agent, oc, run_config, ckpt_num, ckpt_dir, config=cfg, optimizer=optimizer,
                    scheduler=scheduler, buffer=buffer, state=state, envs=envs, update=update + 1,
                    updates_log=stats.updates,
                )  # fmt: skip
    finally:
        stats.wall_time = time.perf_counter() - t0
        logger.close()
        torch.set_num_threads(threads_before)
        if own_envs:
            envs.close()
    stats.global_step, stats.num_updates = state.global_step, num_updates
    stats.episode_returns = list(state.episode_returns)
    stats.episode_lengths = list(state.episode_lengths)
    stats.episode_end_steps = list(state.episode_end_steps)
    stats.steps_per_second = (state.global_step - step0) / max(stats.wall_time, 1e-9)
    if run_dir is not None:
        plot_learning_curve(stats, Path(run_dir) / "learning_curve.png", _title(cfg))
    return TrainResult(agent, stats)


def ppo_runner(
    run_config: RunConfig,
    environment_config: EnvironmentConfig,
    online_config: OnlineTrainConfig,
    model_config: ModelConfig = None,
    *,
    resume_dir: str | Path | None = None,
) -> TrainResult:
    """Create the run folder ``<runs_dir>/<exp_name>`` (a ``-<k>`` suffix if it exists), write
    the resolved ``config.yaml``, train with logging and checkpoints, return ``(agent, stats)``.

    With ``resume_dir``, the configs are ignored: the run folder's ``config.yaml`` is loaded
    and training continues from its latest checkpoint (see :func:`train_ppo`).
    """
    if resume_dir is not None:
        run_dir = Path(resume_dir)
        from rlstore.agents.ppo.config import load_train_config

        cfg = load_train_config(run_dir / "config.yaml")
        return train_ppo(
            cfg.run, cfg.online, cfg.environment, cfg.selected_model_config(),
            run_dir=run_dir, resume=True,
        )  # fmt: skip
    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    check_env_id(environment_config)  # before the run folder exists
    run_dir = create_run_dir(run_config.runs_dir, run_config.exp_name)
    cfg.to_yaml(run_dir / "config.yaml")
    logger.info("writing %s", run_dir)
    return train_ppo(run_config, online_config, environment_config, model_config, run_dir=run_dir)
