"""What the asynchronous learners (IMPALA, Ape-X) share around their update: the config fields
of their collectors (:class:`LearnerConfig`), the counters, resume, the collectors' start,
weights and episode records, the evaluation and checkpoint schedules by env steps and the
learner checkpoints (:class:`LearnerRun`, inside the :class:`~rlstore.agents.run.TrainingRun`
frame every trainer has).

A learner checkpoint (``run_dir/checkpoints/checkpoint_NNNN/``, :func:`rlstore.checkpoint.
save_state`, no pickle) holds the networks, the optimizer, the counters and the episode history.
Collectors and the environments they run are not saved: a resumed run starts fresh collectors
(new episodes) from the saved weights; Ape-X's replay comes back from its shards' own periodic
checkpoints (``<run>/replay``). What is lost is bounded by what was collected since them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field

from rlstore.agents.config import AlgorithmConfig, AlgorithmTrainConfig, BaseConfig
from rlstore.agents.envs import make_env
from rlstore.agents.run import TrainingRun, TrainStats, due, evaluation_due
from rlstore.agents.run_checkpoint import (
    check_module_state,
    check_optimizer_state,
    check_resumed_config,
    checkpoint_path,
    latest_checkpoint,
    optimizer_state,
)
from rlstore.checkpoint import load_state, save_state
from rlstore.errors import CheckpointError, ConfigError

__all__ = ["LearnerConfig", "LearnerRun", "save_learner", "restore_learner"]

COUNTERS = ("global_step", "num_updates", "version", "checkpoint_num")
_HISTORY = ("episode_returns", "episode_lengths", "episode_end_steps", "evaluations")


class LearnerConfig(AlgorithmConfig):
    """The fields IMPALA's and Ape-X's sections share: their collectors, Ray and checkpoints
    (the algorithm's own fields follow them)."""

    num_collectors: int = Field(2, ge=1)
    """Collector actors (K)."""
    num_envs: int = Field(4, ge=1)
    """Vectorized envs per collector."""
    fragment_length: int = Field(32, ge=1)
    """Steps per env in one fragment (T)."""
    gamma: float = Field(0.99, ge=0, le=1)
    """Discount factor."""
    address: str | None = None
    """Ray cluster to join (``rlstore train --address``); None starts a local instance."""
    collector_cpus: float = Field(0.0, ge=0)
    """Ray CPUs reserved per collector, and per replay shard for Ape-X (0: no reservation, fine
    on small machines)."""
    timeout_s: float = Field(120.0, gt=0)
    """Deadline of every remote call, and IMPALA's longest wait for a fragment, before the run
    fails with an error (Ape-X's blocked rate limiter waits at most half of it)."""
    checkpoint_interval: int = Field(0, ge=0)
    """Env steps between learner checkpoints (also one at the end); 0: none."""


class LearnerRun:
    """One asynchronous learner's run inside ``run`` (a :class:`TrainingRun`): resumes from the
    latest checkpoint (``resume``) and opens the run's logger.

    ``cfg`` is the run's whole config; its algorithm section (a :class:`LearnerConfig`:
    ``"impala"``, ``"apex"``) also names the checkpoint files (``<section>_*``, format
    ``rlstore.<section>/1``); ``label`` names the algorithm in messages and on the bar.
    ``counters``: ``global_step`` (env steps of the whole run), ``num_updates``, ``version``
    (published weights), ``checkpoint_num``.
    """

    def __init__(
        self, run: TrainingRun, cfg: AlgorithmTrainConfig, label: str, model: torch.nn.Module,
        optimizer: torch.optim.Optimizer, resume: bool,
    ) -> None:  # fmt: skip
        section = cfg.section()
        self.run, self.cfg, self.sc = run, cfg, getattr(cfg, section)
        self.model, self.optimizer = model, optimizer
        self.prefix, self.format = f"{section}_", f"rlstore.{section}/1"
        self.counters = {"global_step": 0, "num_updates": 0, "version": 0, "checkpoint_num": 0}
        if resume:
            path = None if run.ckpt_dir is None else latest_checkpoint(run.ckpt_dir, self.prefix)
            if path is None:
                raise ConfigError(f"resume: no {label} checkpoint found under {run.ckpt_dir}")
            self.counters = restore_learner(path, self.prefix, self.format, cfg,
                                            ("environment", section), model, optimizer,
                                            run.stats)  # fmt: skip
            self.counters["checkpoint_num"] += 1
        self.env = cfg.environment
        self.base = self.step = self.before = self.counters["global_step"]
        run.start(self.sc.total_timesteps, self.base, f"{label} {self.env.env_id}", cfg.to_dict())

    def start_collectors(self, make_policy: Callable[..., Any], sink: Any) -> Any:
        """Start the section's ``num_collectors`` collectors (a :class:`~rlstore.distributed.
        collector.CollectorPool` pushing into ``sink``; ``make_policy(index, envs)`` builds a
        collector's policy; env seeds from ``run.seed + version``) and publish the current
        weights to them."""
        from rlstore.distributed.collector import CollectorPool

        sc, seed = self.sc, self.cfg.run.seed + self.counters["version"]
        args = {"make_policy": make_policy, "environment": self.env, "num_envs": sc.num_envs,
                "fragment_length": sc.fragment_length, "seed": seed}  # fmt: skip
        pool = CollectorPool(sc.num_collectors, lambda i: args, sink, num_cpus=sc.collector_cpus,
                             run_dir=self.run.run_dir, timeout_s=sc.timeout_s)  # fmt: skip
        self.publish(pool, new_version=False)
        return pool

    def publish(self, pool: Any, *, new_version: bool = True) -> None:
        """Publish the model's weights to the collectors of ``pool``, as a new version unless
        ``new_version`` is False."""
        from rlstore.distributed.collector import module_weights

        self.counters["version"] += int(new_version)
        pool.publish(self.counters["version"], module_weights(self.model))

    @property
    def done(self) -> bool:
        """Whether the run has collected its ``total_timesteps``."""
        return self.step >= self.sc.total_timesteps

    def collect(self, pool: Any) -> int:
        """Take the collectors' step count and finished episodes ``(collector, return, length,
        step)`` from ``pool`` (a :class:`~rlstore.distributed.collector.CollectorPool`) into the
        run, restart dead collectors; returns the run's env step."""
        collected, episodes = pool.drain()
        for _, ret, length, step in episodes:
            self.run.episode(ret, length, self.base + step)
        pool.check()
        self.before, self.step = self.step, self.base + collected
        return self.step

    def after_update(self, act: Callable[[np.ndarray], Any]) -> None:
        """The run's greedy evaluation (``act``: one observation -> its action) and learner
        checkpoint when the env steps since the last :meth:`collect` crossed their interval, or
        the run is done."""
        run, step, c = self.run, self.step, self.counters
        if evaluation_due(run.rc, step, self.before, self.done):
            run.evaluate(step, act, lambda render: make_env(self.env, render))
        every = self.sc.checkpoint_interval
        if run.ckpt_dir is not None and every and (due(step, self.before, every) or self.done):
            c["global_step"] = step
            save_learner(checkpoint_path(run.ckpt_dir, c["checkpoint_num"]), self.prefix,
                         self.format, self.cfg.to_dict(), c, self.model, self.optimizer,
                         run.stats)  # fmt: skip
            c["checkpoint_num"] += 1


def save_learner(
    folder: Path, prefix: str, fmt: str, config: dict[str, Any], counters: dict[str, int],
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, stats: TrainStats,
) -> None:  # fmt: skip
    """Write one learner checkpoint folder (see the module docstring)."""
    payload = {
        "format": fmt,
        "config": config,
        "counters": dict(counters),
        "model": dict(model.state_dict()),
        "optimizer": optimizer_state(optimizer),
        "history": {
            k: [list(e) if isinstance(e, tuple) else e for e in getattr(stats, k)] for k in _HISTORY
        },  # fmt: skip
    }
    save_state(folder, payload, prefix=prefix, metadata={"format": fmt, **counters})


def restore_learner(
    path: Path, prefix: str, fmt: str, config: BaseConfig, sections: tuple[str, ...],
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, stats: TrainStats,
) -> dict[str, int]:  # fmt: skip
    """Load a :func:`save_learner` folder into fresh objects; every entry is checked before the
    first object changes (CheckpointError naming it). Returns the counters."""
    sd = load_state(path, prefix=prefix)
    if sd.get("format") != fmt:
        raise CheckpointError(f"format: expected {fmt!r} in {path}, got {sd.get('format')!r}")
    saved = type(config).fill_legacy(sd.get("config"))  # written before a field existed
    check_resumed_config(saved, config.to_dict(), sections, str(path))
    check_module_state(sd.get("model"), model)
    opt = check_optimizer_state(sd.get("optimizer"), optimizer)
    c = sd.get("counters")
    if not isinstance(c, dict) or set(c) != set(COUNTERS) or not all(
            type(c[k]) is int and c[k] >= 0 for k in COUNTERS):  # fmt: skip
        raise CheckpointError(f"counters: expected ints >= 0 for {list(COUNTERS)}")
    hist = sd.get("history")
    if not isinstance(hist, dict) or not all(isinstance(hist.get(k), list) for k in _HISTORY):
        raise CheckpointError(f"history: expected the lists {list(_HISTORY)}")
    rows = [*(hist[k] for k in _HISTORY[:3]), *hist["evaluations"]]
    if not all(isinstance(r, list) and all(type(x) in (int, float) for x in r) for r in rows):
        raise CheckpointError("history: expected lists of numbers")
    model.load_state_dict(sd["model"])
    optimizer.load_state_dict(opt)
    stats.episode_returns = [float(x) for x in hist["episode_returns"]]
    stats.episode_lengths = hist["episode_lengths"]
    stats.episode_end_steps = hist["episode_end_steps"]
    stats.evaluations = [(int(s), float(m)) for s, m in hist["evaluations"]]
    return dict(c)
