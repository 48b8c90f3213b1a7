"""The PPO training loop, readable top to bottom: envs -> rollout -> GAE -> update -> log.

Programmatic entry (used by ``rlstore train``, ``rlstore probe`` and the learning tests)::

    from rlstore.agents.ppo_config import EnvironmentConfig, OnlineTrainConfig, RunConfig
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

One update: :func:`~rlstore.agents.ppo.rollout.run_rollout` (env construction and rollout
collection live in :mod:`rlstore.agents.ppo.rollout`), then
:func:`~rlstore.agents.ppo.loss.ppo_update` (the loss and the update, in
:mod:`rlstore.agents.ppo.loss`), inside the :class:`~rlstore.agents.run.TrainingRun` frame every
trainer shares (run folder, logging, plotting, seeding, evaluation). ``TrainStats``,
``RunLogger``, ``make_vector_env`` and ``run_rollout`` are re-exported here.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rlstore.agents.envs import make_env, make_vector_env
from rlstore.agents.networks import PPOAgent, get_agent
from rlstore.agents.ppo.checkpoint import (
    latest_checkpoint,
    read_checkpoint,
    restore_training,
    store_model_checkpoint,
)
from rlstore.agents.ppo.loss import ppo_update
from rlstore.agents.ppo.rollout import SAMPLING_METHODS, RolloutState, run_rollout
from rlstore.agents.ppo.schedule import PPOScheduler
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    ModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TrainConfig,
    load_train_config,
    train_config_from_parts,
)
from rlstore.agents.run import (
    EVAL_SEED_OFFSET,
    RunLogger,
    TrainingRun,
    TrainStats,
    create_run_dir,
    evaluate,
    evaluation_due,
    run_evaluation,
)
from rlstore.agents.run_checkpoint import checkpoint_schedule
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
    "runner",
    "load_config",
    "DEFAULT_CONFIGS",
    "evaluate_agent",
    "deterministic_policy",
    "evaluate_in_run",
    "EVAL_SEED_OFFSET",
    "log_update",
]


class TrainResult(NamedTuple):
    """``(agent, stats)`` returned by :func:`train_ppo`."""

    agent: PPOAgent
    stats: TrainStats


_LOSSES = ("loss", "pg_loss", "v_loss", "entropy", "approx_kl", "old_approx_kl", "clipfrac",
           "explained_variance")  # fmt: skip


def log_update(
    logger: RunLogger,
    update: int,
    state: RolloutState,
    info: dict[str, float],
    n_logged: int,
    **progress: str,
) -> int:
    """Log the episodes finished since the ``n_logged`` first and the update's diagnostics
    (``progress``: more fields for the bar); returns the number of episodes logged so far."""
    for i in range(n_logged, len(state.episode_returns)):
        logger.episode(state.episode_returns[i], state.episode_lengths[i],
                       state.episode_end_steps[i])  # fmt: skip
    values = {f"losses/{k}": info[k] for k in _LOSSES if k in info}
    values.update({"charts/learning_rate": info["lr"], "charts/SPS": info["sps"]})
    logger.scalars(values, state.global_step)
    recent = state.episode_returns[-20:]
    ret = f"{np.mean(recent):.1f}" if recent else "-"
    logger.progress(state.global_step, sps=f"{info['sps']:.0f}", ret=ret, upd=update, **progress)
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
    discard_unstarted: bool = False,
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
                    path, agent, optimizer, scheduler, buffer, state, envs
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
    optimizer = torch.optim.Adam(agent.parameters(), lr=oc.learning_rate, eps=oc.adam_eps)
    scheduler = PPOScheduler(optimizer, oc.learning_rate, end_lr, oc.num_updates)
    buffer = RolloutBuffer(oc.num_steps, oc.num_envs, gamma=oc.gamma, lam=oc.gae_lambda,
                           advantage_normalization="none", device=rc.device,
                           seed=rc.seed)  # fmt: skip
    return agent, optimizer, scheduler, buffer


def finish_stats(run: TrainingRun, state: RolloutState, num_updates: int, title: str) -> None:
    """Fill ``run.stats`` at the end of a PPO-style run from the rollout ``state`` (whose
    episode history spans a resumed run's earlier part; the evaluations are read back from
    ``stats.updates``, which a resumed run restores from its checkpoint) and plot the curve."""
    stats = run.stats
    stats.episode_returns = list(state.episode_returns)
    stats.episode_lengths = list(state.episode_lengths)
    stats.episode_end_steps = list(state.episode_end_steps)
    stats.evaluations = [(int(u["global_step"]), u["eval/mean_return"])
                         for u in stats.updates if "eval/mean_return" in u]  # fmt: skip
    run.finish(state.global_step, num_updates, title)


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
first entry, CartPole-v1, is ``rlstore train``'s default)."""

load_config = load_train_config


def runner(cfg: TrainConfig, *, run_dir: Path, resume: bool) -> TrainResult:
    """Train ``cfg`` in the run folder ``run_dir`` (what ``rlstore train`` calls).

    ``resume=False``: ``run_dir`` is a fresh folder (:func:`rlstore.agents.run.create_run_dir`);
    ``config.yaml`` is written and training starts; if it fails before its first update the
    folder is removed again. ``resume=True``: continue from the latest checkpoint of
    ``run_dir``; ``cfg`` must be the folder's ``config.yaml``, except for a larger
    ``online.total_timesteps``, which extends the run (the folder's ``config.yaml`` is updated;
    the learning-rate schedule continues as :func:`train_ppo` documents).

    Raises:
        ConfigError: with ``resume``, ``cfg`` differs from the run's config in another key, or
            asks for fewer steps than the run has done.
    """
    run_dir = Path(run_dir)
    if resume:
        saved = load_train_config(run_dir / "config.yaml")
        budget = {"total_timesteps": cfg.online.total_timesteps}
        if cfg != saved.model_copy(update={"online": saved.online.model_copy(update=budget)}):
            raise ConfigError(
                "cfg: a resumed run keeps its config.yaml; only online.total_timesteps may change"
            )
        if cfg != saved:
            path = latest_checkpoint(run_dir / "checkpoints")
            done = 0 if path is None else read_checkpoint(path)["global_step"]
            if cfg.online.num_updates * cfg.online.batch_size < done:
                raise ConfigError(
                    f"online.total_timesteps: expected at least {done} (the steps the run has "
                    f"done), got {cfg.online.total_timesteps}"
                )
            cfg.to_yaml(run_dir / "config.yaml")
            logger.info("extending %s to %d steps", run_dir, cfg.online.total_timesteps)
    else:
        cfg.to_yaml(run_dir / "config.yaml")
        logger.info("writing %s", run_dir)
    return train_ppo(
        cfg.run, cfg.online, cfg.environment, cfg.selected_model_config(),
        run_dir=run_dir, resume=resume, discard_unstarted=not resume,
    )  # fmt: skip


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
        cfg = load_train_config(Path(resume_dir) / "config.yaml")
        return runner(cfg, run_dir=Path(resume_dir), resume=True)
    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    make_env(environment_config).close()  # a failing env build leaves no run folder behind
    run_dir = create_run_dir(run_config.runs_dir, run_config.exp_name)
    return runner(cfg, run_dir=run_dir, resume=False)


def deterministic_policy(
    agent: PPOAgent,
) -> tuple[Callable[[], None], Callable[[np.ndarray], np.ndarray]]:
    """``(begin_episode, act)`` of ``agent``'s deterministic policy on one env: the greedy
    action (discrete) or the mean (continuous) of one raw observation; ``begin_episode``
    resets the recurrent memory (used by :func:`evaluate_agent`, :func:`evaluate_in_run` and
    ``rlstore demo-record --run``; call ``agent.eval()`` first to freeze observation
    statistics)."""
    carry: dict[str, Any] = {}

    def begin() -> None:
        carry["memory"] = agent.initial_memory(1)
        carry["t"] = torch.zeros(1, dtype=torch.int64, device=agent.device)

    def act(obs: np.ndarray) -> np.ndarray:
        x = agent.normalizer.obs(agent.preprocess(obs, agent.device).unsqueeze(0), False)
        with torch.no_grad():
            params, _, _, carry["memory"] = agent._step(x, carry["memory"], carry["t"])
        carry["t"] = carry["t"] + 1
        return agent.env_action(params.argmax(-1) if agent.discrete else params)[0]

    return begin, act


@contextmanager
def _frozen(agent: PPOAgent) -> Iterator[tuple[Callable[[], None], Callable[[np.ndarray], Any]]]:
    """:func:`deterministic_policy` of ``agent`` in ``eval()`` mode (observation statistics
    frozen), its training mode restored on exit."""
    was_training = agent.training
    agent.eval()
    try:
        yield deterministic_policy(agent)
    finally:
        agent.train(was_training)


def evaluate_agent(
    agent: PPOAgent,
    environment_config: EnvironmentConfig,
    episodes: int,
    seed: int,
    *,
    video_dir: str | Path | None = None,
) -> list[float]:
    """Returns of ``episodes`` deterministic episodes of ``agent`` (greedy action for discrete
    spaces, the mean for continuous ones; ``eval()`` mode, so observation statistics are frozen;
    recurrent memory reset at each episode start) on one env built like the training envs, via
    :func:`rlstore.agents.run.evaluate` (episode i reset with ``seed + i``; ``video_dir``
    records them)."""
    render = None if video_dir is None else "rgb_array"
    with _frozen(agent) as (begin, act):
        return evaluate(act, lambda: make_env(environment_config, render), episodes, seed,
                        video_dir=video_dir, begin_episode=begin)  # fmt: skip


def evaluate_in_run(
    agent: PPOAgent,
    environment_config: EnvironmentConfig,
    rc: RunConfig,
    stats: TrainStats,
    logger: RunLogger,
    step: int,
) -> float:
    """The run's evaluation of ``agent`` at env step ``step`` (PPO's and PPO+D's):
    :func:`rlstore.agents.run.run_evaluation` of the deterministic policy, as
    :func:`evaluate_agent` plays it; returns the mean return."""
    with _frozen(agent) as (begin, act):
        return run_evaluation(rc, stats, logger, step, act,
                              lambda render: make_env(environment_config, render),
                              begin_episode=begin)  # fmt: skip
