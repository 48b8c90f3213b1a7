"""SAC checkpoints: what :func:`rlstore.agents.sac.train_sac` saves and how a run resumes.

A checkpoint is the folder ``run_dir/checkpoints/checkpoint_NNNN/``:

* ``buffer_state.safetensors`` + ``buffer_metadata.json``: the replay buffer
  (:func:`rlstore.checkpoint.save`: contents, cursor, sampler RNG state), written first;
* ``sac_state.safetensors`` + ``sac_metadata.json`` (:func:`rlstore.checkpoint.save_state`,
  atomic; its sidecar commits the checkpoint: a folder without it is never resumed from):
  ``format``, ``config``, ``counters`` (vector steps, gradient steps, checkpoint number),
  ``model`` (actor, critics, target critics, ``log_alpha``), ``optimizers``, the global RNG
  states, the envs as a JSON spec plus the actions of their current episodes
  (:mod:`rlstore.agents.envs`), the current observations and episode returns /
  lengths, and the history (episodes, evaluations, logged updates).

Resuming checks everything read before anything changes (:class:`CheckpointError`), rebuilds
the envs' current episodes by replaying their actions (they must reproduce the saved
observations) and continues the run bit for bit on CPU. Nothing loaded is unpickled or
imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlstore._checks import check_keys
from rlstore.agents.replay_checkpoint import (
    load_replay_checkpoint,
    restore_replay_checkpoint,
    save_replay_checkpoint,
)
from rlstore.agents.run import TrainStats
from rlstore.agents.run_checkpoint import (
    check_like,
    check_optimizer_state,
    check_updates_log,
    checkpoint_path,
    optimizer_state,
)
from rlstore.buffers.replay import ReplayBuffer
from rlstore.errors import CheckpointError

if TYPE_CHECKING:
    from rlstore.agents.sac import SACAgent, SACTrainConfig

__all__ = ["FORMAT", "PREFIX", "LoopState", "save_checkpoint", "restore_checkpoint"]

FORMAT = "rlstore.sac/2"
"""``format`` entry of the SAC checkpoints this version writes and reads (2: the critics read
actions normalized to ``[-1, 1]``, the log-probs are those of the normalized action)."""
PREFIX = "sac_"
Optimizers = dict[str, torch.optim.Optimizer]


@dataclass
class LoopState:
    """What carries over between the vector steps of :func:`rlstore.agents.sac.train_sac` (and
    into checkpoints)."""

    obs: np.ndarray  # (N, obs_dim): the observations to act on next
    ep_return: np.ndarray  # (N,) float64: returns of the running episodes so far
    ep_length: np.ndarray  # (N,) int64
    iteration: int = 0  # vector steps done (env steps = iteration * N)
    num_updates: int = 0  # gradient steps done
    checkpoint_num: int = 0  # number of the next checkpoint
    noise: np.ndarray | None = None  # (N, A) float32: Ornstein-Uhlenbeck state (ou_noise_std)


def _payload(cfg: SACTrainConfig, agent: SACAgent, state: LoopState, stats: TrainStats) -> dict:
    """The checkpoint's entries that have the same structure in every checkpoint of a run."""
    return {
        "counters": {k: getattr(state, k) for k in ("iteration", "num_updates", "checkpoint_num")},
        "obs": np.array(state.obs, copy=True),
        "episode": {
            "return": state.ep_return.copy(),
            "length": state.ep_length.copy(),
            **({} if state.noise is None else {"noise": state.noise.copy()}),
        },
        "history": {
            "episode_returns": list(stats.episode_returns),
            "episode_lengths": list(stats.episode_lengths),
            "episode_end_steps": list(stats.episode_end_steps),
            "eval_steps": [s for s, _ in stats.evaluations],
            "eval_returns": [r for _, r in stats.evaluations],
        },
    }


def save_checkpoint(
    ckpt_dir: Path, cfg: SACTrainConfig, agent: SACAgent, opts: Optimizers,
    buffer: ReplayBuffer, envs: Any, state: LoopState, stats: TrainStats,
) -> None:  # fmt: skip
    """Write ``ckpt_dir/checkpoint_NNNN/``: the buffer first, then the SAC state, whose sidecar
    commits the checkpoint (a folder without ``sac_metadata.json`` is never resumed from)."""
    folder = checkpoint_path(ckpt_dir, state.checkpoint_num)
    payload = {
        **_payload(cfg, agent, state, stats),
        "optimizers": {k: optimizer_state(o) for k, o in opts.items()},
        "updates": [dict(u) for u in stats.updates],
    }
    meta = {"global_step": state.iteration * cfg.sac.num_envs}
    save_replay_checkpoint(folder, PREFIX, FORMAT, cfg, agent, buffer, envs, payload, meta)
    state.checkpoint_num += 1


def restore_checkpoint(
    path: Path, cfg: SACTrainConfig, agent: SACAgent, opts: Optimizers,
    buffer: ReplayBuffer, envs: Any, state: LoopState, stats: TrainStats,
) -> None:  # fmt: skip
    """Load checkpoint ``path`` into the freshly built objects of a run of ``cfg``.

    Everything read is checked (:class:`CheckpointError`) before anything changes; the buffer
    checks its own state whole and the envs' replayed episodes must reproduce the saved
    observations."""
    where = f"resume: {str(path)!r}"
    sd, buffer_sd = load_replay_checkpoint(path, PREFIX, FORMAT, cfg, agent, "SAC")
    for key, ref in _payload(cfg, agent, state, TrainStats()).items():
        check_like(key, sd.get(key), ref)  # same keys, shapes, dtypes; lists of numbers
    h, ep, updates = sd["history"], sd["episode"], sd.get("updates")
    if (
        len(h["eval_steps"]) != len(h["eval_returns"])
        or len(h["episode_returns"]) != len(h["episode_lengths"])
        or len(h["episode_returns"]) != len(h["episode_end_steps"])
    ):
        raise CheckpointError(f"{where}: history lists of unequal lengths")
    check_updates_log(updates, f"{where}: updates")
    check_keys(f"{where}: optimizers", sd.get("optimizers"), opts)
    opt_sd = {
        k: check_optimizer_state(sd["optimizers"][k], o, f"optimizers.{k}") for k, o in opts.items()
    }
    optimizers = [(o, opt_sd[k]) for k, o in opts.items()]
    restore_replay_checkpoint(sd, buffer_sd, cfg, agent, buffer, envs, optimizers)
    state.obs, state.ep_return, state.ep_length = sd["obs"], ep["return"], ep["length"]
    state.noise = ep.get("noise")
    state.iteration, state.num_updates = sd["counters"]["iteration"], sd["counters"]["num_updates"]
    state.checkpoint_num = sd["counters"]["checkpoint_num"] + 1
    stats.episode_returns = [float(x) for x in h["episode_returns"]]
    stats.episode_lengths, stats.episode_end_steps = h["episode_lengths"], h["episode_end_steps"]
    stats.evaluations = [
        (int(s), float(r)) for s, r in zip(h["eval_steps"], h["eval_returns"], strict=True)
    ]
    stats.updates = [dict(u) for u in sd["updates"]]
