"""What every rlstore trainer shares: the frame a run runs in, seeding and evaluation (the
algorithm-agnostic pieces of checkpoints are in :mod:`rlstore.agents.run_checkpoint`). A trainer
(``rlstore.agents.ppo``; SAC and DQN the same way) imports from here:

* :class:`TrainingRun`, the frame every trainer runs in (threads, seeds, logger, clock, the
  episode and update records, the final statistics and curve);
* :func:`set_global_seeds` and :func:`adam`;
* :func:`evaluate` (deterministic episodes, optional video) and the evaluation schedule every
  trainer follows (``run.eval_episodes``, ``run.eval_interval`` in env steps, ``run.video``):
  :func:`evaluation_due` and :func:`run_evaluation`;
* re-exported from :mod:`rlstore.agents.run_output` (what a run produces): :class:`TrainStats`,
  the run folder (:func:`safe_name`, :func:`create_run_dir`), :class:`RunLogger` (TensorBoard
  ``run_dir/tb``, offline W&B, the tqdm bar) and :func:`plot_learning_curve`.

Optional packages (tensorboard, wandb, tqdm, matplotlib, moviepy) are imported only when a run
asks for them. Nothing here imports an algorithm module."""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlstore.agents.config import RunConfig
from rlstore.agents.run_output import (
    RunLogger,
    TrainStats,
    create_run_dir,
    plot_learning_curve,
    safe_name,
)
from rlstore.errors import ConfigError

__all__ = [
    "TrainingRun",
    "TrainStats",
    "set_global_seeds",
    "adam",
    "safe_name",
    "create_run_dir",
    "RunLogger",
    "plot_learning_curve",
    "check_video_support",
    "evaluate",
    "EVAL_SEED_OFFSET",
    "due",
    "evaluation_due",
    "run_evaluation",
]


# ----------------------------------------------------------------- seeding


def set_global_seeds(seed: int | None) -> None:
    """Seed Python's ``random``, NumPy's legacy global RNG and torch (CPU and all CUDA devices).

    rlstore's own components take explicit seeds / generators; this is for third-party code
    (and torch's default generator used by ``nn.Module`` initialisation and ``Categorical``).

    Args:
        seed: an int in ``[0, 2**32 - 1]``; None leaves the generators as they are.

    Raises:
        ConfigError: ``seed`` is not an int in range.
    """
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ConfigError(f"seed: expected an int in [0, 2**32 - 1], got {type(seed).__name__}")
    if not 0 <= int(seed) <= 2**32 - 1:
        raise ConfigError(f"seed: expected an int in [0, 2**32 - 1], got {seed}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the legacy global RNG is exactly what this seeds
    torch.manual_seed(seed)  # also seeds every CUDA device


def adam(params: Any, lr: float, eps: float = 1e-8) -> torch.optim.Optimizer:
    """``torch.optim.Adam(params, lr=lr, eps=eps)`` with torch's fused kernel where it has one
    for the parameters' device (CPU since torch 2.4): the same update in one kernel, about 3x
    faster than the per-tensor loop at the sizes of rlstore's networks (PPO's CartPole agent:
    ~6% of a whole training run)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except RuntimeError:  # an older torch without a fused kernel for this device
        return torch.optim.Adam(params, lr=lr, eps=eps)


class TrainingRun:
    """The frame one training run runs in, shared by every trainer (a context manager).

    Entering checks that evaluation videos can be recorded (``run.video`` with a run folder:
    before any work, not after it), sets torch's thread count to ``run.torch_threads`` and
    seeds the global RNGs with ``run.seed``. Leaving, however the run ends (a refused resume
    included), records the wall time since :meth:`start`, closes the logger and restores the
    thread count::

        with TrainingRun(cfg.run, run_dir) as run:
            ...  # envs, agent, buffer; on resume, restore into run.stats
            run.start(total_steps, step0, "DQN CartPole-v1", cfg.to_dict())
            for ...:
                run.episode(ret, length, step)       # each finished episode
                run.update(step, row, scalars)       # each update: stats, logs, progress bar
        stats = run.finish(step, num_updates, "DQN on CartPole-v1, seed 1")

    Attributes:
        stats: the run's :class:`TrainStats`. logger: its :class:`RunLogger` (after
            :meth:`start`). ckpt_dir: ``run_dir/checkpoints`` (None without a run folder).
    """

    def __init__(
        self, rc: RunConfig, run_dir: str | Path | None, stats: TrainStats | None = None
    ) -> None:
        self.rc = rc
        self.run_dir = None if run_dir is None else Path(run_dir)
        self.ckpt_dir = None if self.run_dir is None else self.run_dir / "checkpoints"
        self.stats = TrainStats(run_dir=self.run_dir) if stats is None else stats
        self.logger: RunLogger | None = None
        self.total_steps, self.step0, self.t0 = 0, 0, 0.0
        self._threads = torch.get_num_threads()

    def __enter__(self) -> TrainingRun:
        if self.rc.video and self.run_dir is not None:
            check_video_support()
        set_global_seeds(self.rc.seed)  # before the threads: nothing to undo if it refuses
        self._threads = torch.get_num_threads()
        torch.set_num_threads(self.rc.torch_threads)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.logger is not None:
            self.stats.wall_time = time.perf_counter() - self.t0
            self.logger.close()
        torch.set_num_threads(self._threads)

    def start(
        self, total_steps: int, initial_step: int, desc: str, config: dict[str, Any]
    ) -> RunLogger:
        """Open the logger (the bar runs from ``initial_step`` to ``total_steps``) and start the
        clock that ``sps`` and the wall time count from; returns the logger."""
        rc = self.rc
        self.logger = RunLogger(
            self.run_dir, total_steps=total_steps, initial_step=initial_step, desc=desc,
            track=rc.track, progress_bar=rc.progress_bar, wandb=rc.wandb,
            wandb_project=rc.wandb_project_name, wandb_entity=rc.wandb_entity,
            exp_name=rc.exp_name, config=config,
        )  # fmt: skip
        self.total_steps, self.step0, self.t0 = total_steps, initial_step, time.perf_counter()
        return self.logger

    def sps(self, step: int) -> float:
        """Env steps per second since :meth:`start`."""
        return (step - self.step0) / max(time.perf_counter() - self.t0, 1e-9)

    def episode(self, ret: float, length: int, step: int) -> None:
        """Record one finished training episode (``stats`` and the logs)."""
        self.stats.episode_returns.append(ret)
        self.stats.episode_lengths.append(length)
        self.stats.episode_end_steps.append(step)
        assert self.logger is not None, "start() first"
        self.logger.episode(ret, length, step)

    def update(self, step: int, row: dict[str, float], scalars: Mapping[str, float]) -> None:
        """Record one update: ``row`` (with ``global_step`` and ``sps``) into ``stats.updates``,
        ``scalars`` into the logs, and the bar to ``step`` with the speed and the mean return of
        the last 20 episodes."""
        self.stats.updates.append(row)
        assert self.logger is not None, "start() first"
        self.logger.scalars(scalars, step)
        recent = self.stats.episode_returns[-20:]
        self.logger.progress(min(step, self.total_steps), sps=f"{row['sps']:.0f}",
                             ret=f"{np.mean(recent):.1f}" if recent else "-")  # fmt: skip

    def evaluate(
        self,
        step: int,
        act: Callable[[np.ndarray], Any],
        make_env: Callable[[str | None], gym.Env],
        **kwargs: Any,
    ) -> float:
        """:func:`run_evaluation` of this run at env step ``step``; returns the mean return."""
        assert self.logger is not None, "start() first"
        return run_evaluation(self.rc, self.stats, self.logger, step, act, make_env, **kwargs)

    def finish(self, step: int, num_updates: int, title: str) -> TrainStats:
        """After the ``with`` block: fill the run's totals into ``stats`` and, with a run folder,
        plot ``learning_curve.png`` titled ``title``; returns ``stats``."""
        stats = self.stats
        stats.global_step, stats.num_updates = step, num_updates
        stats.steps_per_second = (step - self.step0) / max(stats.wall_time, 1e-9)
        if self.run_dir is not None:
            plot_learning_curve(stats, self.run_dir / "learning_curve.png", title)
        return stats


# ----------------------------------------------------------------- evaluation


def check_video_support() -> None:
    """Raise :class:`ConfigError` naming the missing extra unless videos can be recorded
    (gymnasium's ``RecordVideo`` needs moviepy); trainers call it before a run starts."""
    try:
        import moviepy  # noqa: F401
    except ImportError:
        raise ConfigError(
            "video: recording evaluation videos needs the moviepy package, which is not "
            "installed (pip install moviepy)"
        ) from None


def evaluate(
    act: Callable[[np.ndarray], np.ndarray],
    make_env: Callable[[], gym.Env],
    episodes: int,
    seed: int,
    *,
    video_dir: str | Path | None = None,
    begin_episode: Callable[[], None] | None = None,
) -> list[float]:
    """Run ``episodes`` whole episodes on one env and return their (undiscounted) returns.

    Args:
        act: maps ONE observation (no batch axis) to ONE action, deterministically (greedy /
            mean action); it must not draw from the global RNGs, so that a run with evaluation
            is the same run as without.
        make_env: builds the env (closed at the end); with ``video_dir`` it must use
            ``render_mode="rgb_array"``.
        episodes: number of episodes, >= 1. Episode ``i`` starts with ``reset(seed=seed + i)``.
        seed: seed of the first episode.
        video_dir: record every episode there with gymnasium's ``RecordVideo`` (needs moviepy).
        begin_episode: called before each episode (recurrent agents reset their memory).

    An env without a time limit of its own (``spec.max_episode_steps`` unset, e.g.
    CliffWalking-v1) ends an episode after :data:`EVAL_STEP_CAP` steps with a warning: a greedy
    policy caught in a loop would otherwise never return.

    Raises:
        ConfigError: ``episodes`` < 1, or ``video_dir`` without the moviepy package.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"episodes: expected an int >= 1, got {episodes!r}")
    if video_dir is not None:
        check_video_support()
    env = make_env()
    try:
        if video_dir is not None:
            if env.render_mode != "rgb_array":
                raise ConfigError(
                    f"make_env: expected an env with render_mode='rgb_array' for video, "
                    f"got {env.render_mode!r}"
                )
            env = gym.wrappers.RecordVideo(
                env, str(video_dir), episode_trigger=lambda _: True, disable_logger=True
            )
        returns = []
        cap = EVAL_STEP_CAP if getattr(env.spec, "max_episode_steps", None) is None else None
        for i in range(episodes):
            if begin_episode is not None:
                begin_episode()
            obs, _ = env.reset(seed=seed + i)
            total, done, steps = 0.0, False, 0
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total, steps = total + float(reward), steps + 1
                done = bool(terminated or truncated)
                if not done and steps == cap:
                    msg = f"evaluation: episode {i} cut after {cap} steps (no time limit of its own"
                    warnings.warn(msg + "; set environment.max_steps)", stacklevel=2)
                    done = True
            returns.append(total)
        return returns
    finally:
        env.close()


EVAL_STEP_CAP = 100_000
"""Steps after which :func:`evaluate` ends an episode of an env that has no time limit."""

EVAL_SEED_OFFSET = 1_000_000
"""Evaluation episode i of every trainer resets with seed ``run.seed + EVAL_SEED_OFFSET + i``."""


def due(step: int, before: int, every: int) -> bool:
    """True when ``step`` crossed a multiple of ``every`` since ``before`` (``every`` 0: never)."""
    return every > 0 and step // every > before // every


def evaluation_due(rc: RunConfig, step: int, before: int, last: bool) -> bool:
    """Whether a trainer evaluates now, at env step ``step`` (``before``: the step count at
    its previous check; ``last``: the run's last update): ``rc.eval_episodes`` > 0 and the
    count crossed a multiple of ``rc.eval_interval``, or the run ends."""
    return rc.eval_episodes > 0 and (last or due(step, before, rc.eval_interval))


def run_evaluation(
    rc: RunConfig,
    stats: TrainStats,
    logger: RunLogger,
    step: int,
    act: Callable[[np.ndarray], Any],
    make_env: Callable[[str | None], gym.Env],
    *,
    begin_episode: Callable[[], None] | None = None,
) -> float:
    """The run's evaluation at env step ``step`` (every trainer's): :func:`evaluate` of
    ``rc.eval_episodes`` episodes from seed ``rc.seed + EVAL_SEED_OFFSET``, recorded under
    ``<run folder>/videos/step_<step>/`` with ``rc.video`` (and a run folder); the mean is
    appended to ``stats.evaluations``, logged as ``eval/mean_return`` and returned.
    ``make_env(render_mode)`` builds the env (``"rgb_array"`` when recording, else None)."""
    video = None if not rc.video or stats.run_dir is None else (
        stats.run_dir / "videos" / f"step_{step}")  # fmt: skip
    returns = evaluate(act, lambda: make_env(None if video is None else "rgb_array"),
                       rc.eval_episodes, rc.seed + EVAL_SEED_OFFSET, video_dir=video,
                       begin_episode=begin_episode)  # fmt: skip
    mean = float(np.mean(returns))
    stats.evaluations.append((step, mean))
    logger.scalars({"eval/mean_return": mean}, step)
    return mean
