"""What the asynchronous learners (IMPALA, Ape-X) share around their update: episode records
from the collectors and the learner checkpoints (their evaluation is every trainer's:
:func:`rlstore.agents.run.run_evaluation`).

A learner checkpoint (``run_dir/checkpoints/checkpoint_NNNN/``, :func:`rlstore.checkpoint.
save_state`, no pickle) holds the networks, the optimizer, the counters and the episode history.
Collectors and the environments they run are not saved: a resumed run starts fresh collectors
(new episodes) from the saved weights; Ape-X's replay comes back from its shards' own periodic
checkpoints (``<run>/replay``). What is lost is bounded by what was collected since them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlstore.agents.run import RunLogger, TrainStats
from rlstore.agents.run_checkpoint import (
    check_module_state,
    check_optimizer_state,
    check_resumed_config,
    optimizer_state,
)
from rlstore.checkpoint import load_state, save_state
from rlstore.errors import CheckpointError

__all__ = ["record_episodes", "save_learner", "restore_learner"]

COUNTERS = ("global_step", "num_updates", "version", "checkpoint_num")
_HISTORY = ("episode_returns", "episode_lengths", "episode_end_steps", "evaluations")


def record_episodes(
    stats: TrainStats, logger: RunLogger, episodes: list[tuple[int, float, int, int]], base: int
) -> None:
    """Append the collectors' finished episodes ``(collector, return, length, step)`` (``step``
    counted from ``base``, the steps of the run before this process) and log them."""
    for _, ret, length, step in episodes:
        stats.episode_returns.append(ret)
        stats.episode_lengths.append(length)
        stats.episode_end_steps.append(base + step)
        logger.episode(ret, length, base + step)


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
    path: Path, prefix: str, fmt: str, config: dict[str, Any], sections: tuple[str, ...],
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, stats: TrainStats,
) -> dict[str, int]:  # fmt: skip
    """Load a :func:`save_learner` folder into fresh objects; every entry is checked before the
    first object changes (CheckpointError naming it). Returns the counters."""
    sd = load_state(path, prefix=prefix)
    if sd.get("format") != fmt:
        raise CheckpointError(f"format: expected {fmt!r} in {path}, got {sd.get('format')!r}")
    check_resumed_config(sd.get("config"), config, sections, str(path))
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
