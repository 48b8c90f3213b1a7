"""PPO, readable top to bottom: the training loop and the run-folder entry points (Schulman et
al. 2017; CleanRL's ``ppo.py``).

One update: :func:`~rlstore.agents.rollout.run_rollout` collects ``num_steps`` steps of every
env into a :class:`~rlstore.buffers.rollout.RolloutBuffer`, which computes the GAE returns
(``rlstore.returns.gae``); :func:`ppo_update` runs epochs of minibatches through
:func:`ppo_loss`; all inside the :class:`~rlstore.agents.run.TrainingRun` frame every trainer
shares (run folder, logging, curves, seeding, evaluation). The pieces it uses:

* :mod:`rlstore.agents.ppo_update`: :class:`PPOScheduler` (learning-rate decay),
  :func:`ppo_loss` (the clipped loss), :func:`ppo_update` (epochs of minibatches);
* :mod:`rlstore.agents.ppo_config`: :class:`TrainConfig` (run, environment, online, model);
* :mod:`rlstore.agents.networks`: :class:`FCAgent`, :class:`LSTMPPOAgent`,
  :class:`TransformerPPOAgent` (:func:`get_agent`);
* :mod:`rlstore.agents.envs`: :func:`make_vector_env` (Gymnasium vector envs);
* :mod:`rlstore.agents.rollout`: :func:`run_rollout`, :class:`RolloutState`, the episode log
  and the evaluation episodes (:func:`evaluate_agent`);
* :mod:`rlstore.agents.ppo_checkpoint`: safetensors + JSON checkpoints, exact resume;
* :mod:`rlstore.agents.sampling`: :func:`sample_from_agents` (trajectories of trained agents).

Environments are in ``AutoresetMode.SAME_STEP``: every step is a real transition, and a
truncated episode bootstraps from ``V(info["final_obs"])``. Programmatic entry (used by
``rlstore train``, ``rlstore probe`` and the learning tests)::

    from rlstore.agents.ppo import EnvironmentConfig, OnlineTrainConfig, RunConfig, train_ppo

    agent, stats = train_ppo(
        RunConfig(seed=0, track=False),
        OnlineTrainConfig(total_timesteps=20_000, num_envs=8, num_steps=32),
        EnvironmentConfig(env_id="CartPole-v1"),
        model_config=None,          # None: FC agent; LSTMModelConfig / TransformerModelConfig
    )
    stats.mean_return(last=20), stats.steps_per_second

``train_ppo`` writes nothing unless ``run_dir`` is given (then: TensorBoard logs, checkpoints
and ``learning_curve.png``); :func:`ppo_runner` also creates the run folder and its
``config.yaml``. Importing this module imports neither matplotlib, TensorBoard nor wandb.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import torch

from rlstore.agents.config import folder_runner
from rlstore.agents.envs import make_env, make_vector_env
from rlstore.agents.networks import (
    FCAgent,
    LSTMPPOAgent,
    PPOAgent,
    TransformerPPOAgent,
    get_agent,
    layer_init,
)
from rlstore.agents.ppo_checkpoint import (
    latest_checkpoint,
    load_all_agents_from_checkpoints,
    load_saved_checkpoint,
    restore_training,
    store_model_checkpoint,
)
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    LSTMModelConfig,
    ModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TrainConfig,
    TransformerModelConfig,
    load_train_config,
    train_config_from_parts,
)
from rlstore.agents.ppo_update import PPOLoss, PPOScheduler, ppo_loss, ppo_update
from rlstore.agents.rollout import (
    RolloutState,
    evaluate_agent,
    evaluate_in_run,
    finish_stats,
    log_update,
    run_rollout,
)
from rlstore.agents.run import (
    EVAL_SEED_OFFSET,
    TrainingRun,
    TrainStats,
    adam,
    create_run_dir,
    evaluation_due,
)
from rlstore.agents.run_checkpoint import checkpoint_schedule
from rlstore.agents.sampling import load_trajectories, sample_from_agents
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError

__all__ = [
    # this module
    "PPOScheduler", "PPOLoss", "ppo_loss", "ppo_update", "TrainResult", "train_ppo",
    "build_learner", "DEFAULT_CONFIGS", "CONTINUOUS_FALLBACK", "load_config", "runner",
    "ppo_runner",
    # the pieces it trains with, importable from here as well
    "TrainConfig", "load_train_config", "RunConfig", "EnvironmentConfig", "OnlineTrainConfig",
    "LSTMModelConfig", "TransformerModelConfig", "PPOAgent", "FCAgent", "LSTMPPOAgent",
    "TransformerPPOAgent", "get_agent", "layer_init", "make_vector_env", "RolloutState",
    "run_rollout", "log_update", "finish_stats", "evaluate_agent", "evaluate_in_run",
    "TrainStats", "store_model_checkpoint", "load_saved_checkpoint",
    "load_all_agents_from_checkpoints", "sample_from_agents", "load_trajectories",
    "EVAL_SEED_OFFSET",
]  # fmt: skip


# ----------------------------------------------------------------- the training loop


class TrainResult(NamedTuple):
    """``(agent, stats)`` returned by :func:`train_ppo`."""

    agent: PPOAgent
    stats: TrainStats


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
    discard_unstarted: bool = False,
) -> TrainResult:
    """Train a PPO agent; returns ``(agent, stats)``.

    Args:
        run_config, online_config, environment_config: see :mod:`rlstore.agents.ppo_config`.
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
            A larger ``online_config.total_timesteps`` than the run had extends its budget:
            the learning-rate decay (and ``anneal_clip``) is then defined over the new number
            of updates, i.e. from the resume point on, update ``u`` trains with the rate a run
            planned with the new budget would use at ``u`` (a finished 40k-step run decayed to
            0, extended to 80k steps, continues at half the initial rate, decaying to
            ``end_learning_rate`` at 80k). The same budget resumes bit for bit.
        discard_unstarted: remove ``run_dir`` when training fails before its first update
            (for a run folder created for this run, see :func:`runner`).

    Evaluation: with ``run_config.eval_episodes > 0``, :func:`evaluate_in_run` runs that many
    deterministic episodes after the update in which the env step count crosses a multiple of
    ``run_config.eval_interval`` and after the last one (video under ``run_dir/videos/`` with
    ``run_config.video``); the mean is logged as ``eval/mean_return``, stored in the update's
    entry of ``stats.updates`` and in ``stats.evaluations``. It draws nothing from the
    training RNGs.

    Returns:
        :class:`TrainResult` ``(agent, stats)``.
    """
    stats = TrainStats(run_dir=None if run_dir is None else Path(run_dir))
    try:
        return _train(
            run_config, online_config, environment_config, model_config, envs,
            trajectory_writer, stats, resume,
        )  # fmt: skip
    except BaseException:
        if discard_unstarted and run_dir is not None and not stats.updates:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _train(
    run_config: RunConfig,
    online_config: OnlineTrainConfig,
    environment_config: EnvironmentConfig,
    model_config: ModelConfig,
    envs: gym.vector.VectorEnv | None,
    trajectory_writer: Any,
    stats: TrainStats,
    resume: bool,
) -> TrainResult:

    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    oc, rc = online_config, run_config
    with TrainingRun(rc, stats.run_dir, stats) as run:
        own_envs = envs is None
        if envs is None:
            envs = make_vector_env(environment_config, oc.num_envs)
        try:
            if envs.num_envs != oc.num_envs:
                raise ConfigError(f"envs: expected online_config.num_envs = {oc.num_envs} envs, "
                                  f"got {envs.num_envs}")  # fmt: skip
            agent, optimizer, scheduler, buffer = build_learner(cfg, envs)
            num_updates = oc.num_updates
            state = RolloutState.start(agent, envs, rc.seed)
            ckpt_dir, start_update, ckpt_num = run.ckpt_dir, 0, 0
            if resume:
                if ckpt_dir is None or (path := latest_checkpoint(ckpt_dir)) is None:
                    raise ConfigError(f"resume: no checkpoint found under {ckpt_dir}")
                start_update, ckpt_num, stats.updates = restore_training(
                    path, agent, optimizer, scheduler, buffer, state, envs, cfg
                )
                if start_update > num_updates:
                    raise ConfigError(
                        f"online.total_timesteps: expected at least "
                        f"{start_update * oc.batch_size} (the {start_update} updates the run "
                        f"has done), got {oc.total_timesteps}"
                    )
                if scheduler.num_updates != num_updates:  # an extended budget
                    scheduler.replan(num_updates)
            logger = run.start(num_updates * oc.batch_size, state.global_step,
                               environment_config.env_id, cfg.to_dict())  # fmt: skip
            n_logged = len(state.episode_returns)
            ckpt_at = checkpoint_schedule(num_updates, oc.num_checkpoints) if ckpt_dir else set()
            for update in range(start_update, num_updates):
                run_rollout(agent, buffer, oc.num_steps, envs, state, trajectory_writer)
                info = ppo_update(agent, buffer, oc, optimizer, scheduler)
                buffer.reset()
                step = state.global_step
                info.update(global_step=float(step), sps=run.sps(step))
                if evaluation_due(rc, step, step - oc.batch_size, update + 1 == num_updates):
                    info["eval/mean_return"] = evaluate_in_run(
                        agent, environment_config, rc, stats, logger, step
                    )
                stats.updates.append(info)
                n_logged = log_update(logger, update + 1, state, info, n_logged)
                if ckpt_dir is not None and update + 1 in ckpt_at:
                    ckpt_num = store_model_checkpoint(
                        agent, oc, rc, ckpt_num, ckpt_dir, config=cfg, optimizer=optimizer,
                        scheduler=scheduler, buffer=buffer, state=state, envs=envs,
                        update=update + 1, updates_log=stats.updates,
                    )  # fmt: skip
        finally:
            if own_envs:
                envs.close()
    finish_stats(run, state, num_updates, _title(cfg))
    return TrainResult(agent, stats)


def build_learner(
    cfg: TrainConfig, envs: gym.vector.VectorEnv
) -> tuple[PPOAgent, torch.optim.Optimizer, PPOScheduler, RolloutBuffer]:
    """The agent of ``cfg`` for ``envs`` on ``cfg.run.device``, its Adam optimizer and learning
    rate schedule over the run's updates, and the rollout buffer (GAE; the advantages are
    normalized by the loss, per minibatch) that PPO and PPO+D train with."""
    oc, rc = cfg.online, cfg.run
    agent = get_agent(cfg.selected_model_config(), envs, cfg.environment, oc).to(rc.device)
    agent.device = torch.device(rc.device)
    end_lr = oc.end_learning_rate if oc.decay_lr else oc.learning_rate
    optimizer = adam(agent.parameters(), oc.learning_rate, eps=oc.adam_eps)
    scheduler = PPOScheduler(optimizer, oc.learning_rate, end_lr, oc.num_updates)
    buffer = RolloutBuffer(oc.num_steps, oc.num_envs, gamma=oc.gamma, lam=oc.gae_lambda,
                           advantage_normalization="none", device=rc.device,
                           seed=rc.seed)  # fmt: skip
    return agent, optimizer, scheduler, buffer


def _title(cfg: TrainConfig) -> str:
    """The learning curve's title: algorithm, agent, env id and seed."""
    return f"PPO ({cfg.agent}) on {cfg.environment.env_id}, seed {cfg.run.seed}"


# ----------------------------------------------------------------- run folders (rlstore train)


def _packaged_configs() -> dict[str, str]:
    """Env id -> packaged ``ppo_<agent>_<EnvId>.yaml``, preferring fc, then lstm, transformer."""
    names = sorted(p.name for p in resources.files("rlstore").joinpath("configs").iterdir())
    found: dict[str, str] = {}
    for agent in ("fc", "lstm", "transformer"):
        for name in names:
            if name.startswith(f"ppo_{agent}_") and name.endswith(".yaml"):
                found.setdefault(name[len(f"ppo_{agent}_") : -len(".yaml")], name)
    return {"CartPole-v1": found.pop("CartPole-v1"), **found}  # the default first


DEFAULT_CONFIGS: dict[str, str] = _packaged_configs()
"""Env id -> the packaged config ``rlstore/configs/ppo_<agent>_<EnvId>.yaml`` tuned for it (the
first entry, CartPole-v1, is ``rlstore train``'s default and the fallback of envs without one)."""

CONTINUOUS_FALLBACK = "Pendulum-v1"
"""The env whose packaged config stands in for an env with continuous (``Box``) actions and no
config of its own: CartPole-v1's discrete-tuned settings reach only about -270 on Pendulum-v1
after 500k steps, Pendulum-v1's -190 to -220 after 100k (``ppo_fc_Pendulum-v1.yaml``)."""

load_config = load_train_config


def _train_in_folder(cfg: TrainConfig, *, run_dir: Path, resume: bool) -> TrainResult:
    """:func:`train_ppo` of ``cfg`` in ``run_dir``; a new run that fails before its first
    update removes the folder again."""
    return train_ppo(
        cfg.run, cfg.online, cfg.environment, cfg.selected_model_config(),
        run_dir=run_dir, resume=resume, discard_unstarted=not resume,
    )  # fmt: skip


runner = folder_runner(_train_in_folder)
"""``runner(cfg, *, run_dir, resume)``: train ``cfg`` in the run folder ``run_dir`` (what
``rlstore train`` calls; :func:`rlstore.agents.config.folder_runner`). A resumed run keeps
its ``config.yaml`` but for a larger ``online.total_timesteps``, which extends it (the
learning-rate schedule continues as :func:`train_ppo` documents)."""


def ppo_runner(
    run_config: RunConfig,
    environment_config: EnvironmentConfig,
    online_config: OnlineTrainConfig,
    model_config: ModelConfig = None,
    *,
    resume_dir: str | Path | None = None,
) -> TrainResult:
    """Create the run folder ``<runs_dir>/<exp_name>`` (a ``-<k>`` suffix if it exists) once the
    environment builds, then :func:`runner`: write the resolved ``config.yaml``, train with
    logging, evaluation and checkpoints, return ``(agent, stats)``.

    With ``resume_dir``, the configs are ignored: the run folder's ``config.yaml`` is loaded
    and training continues from its latest checkpoint (see :func:`train_ppo`).
    """
    if resume_dir is not None:
        cfg = load_train_config(Path(resume_dir) / "config.yaml", run_file=True)
        return runner(cfg, run_dir=Path(resume_dir), resume=True)
    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    make_env(environment_config).close()  # a failing env build leaves no run folder behind
    run_dir = create_run_dir(run_config.runs_dir, run_config.exp_name)
    return runner(cfg, run_dir=run_dir, resume=False)
