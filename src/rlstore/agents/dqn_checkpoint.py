"""DQN checkpoints (:mod:`rlstore.agents.dqn`): one folder ``checkpoint_NNNN/`` per checkpoint.

* ``buffer_state.safetensors`` + ``buffer_metadata.json``: the replay buffer with its sampler
  (priorities, RNG), by :func:`rlstore.checkpoint.save`; written first;
* ``dqn_state.safetensors`` + ``dqn_metadata.json`` (:func:`rlstore.checkpoint.save_state`, the
  commit point: a folder counts as a checkpoint once it exists): both networks, the optimizer,
  the counters, the global RNG states, the current observations and episode accumulators, the
  episode history, what replays the envs' current episodes
  (:mod:`rlstore.agents.envs`), and the ``save_id`` of the buffer save it belongs to.

Loading executes nothing from the folder; every entry is checked before the first live object
changes, and anything wrong is a :class:`~rlstore.errors.CheckpointError` naming it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rlstore._trees import flat_items
from rlstore.agents.obs import numeric_obs
from rlstore.agents.replay_checkpoint import (
    BUFFER_PREFIX,
    load_replay_checkpoint,
    restore_replay_checkpoint,
    save_replay_checkpoint,
)
from rlstore.agents.run import TrainStats
from rlstore.agents.run_checkpoint import RAW_OBS, check_optimizer_state, optimizer_state
from rlstore.buffers.replay import ReplayBuffer
from rlstore.checkpoint import read_metadata
from rlstore.errors import CheckpointError, SpecError

if TYPE_CHECKING:
    from rlstore.agents.dqn import DQNAgent, DQNTrainConfig

__all__ = ["FORMAT", "PREFIX", "Progress", "restore_checkpoint", "save_checkpoint"]

FORMAT = "rlstore.dqn/1"
"""The ``format`` entry of the DQN checkpoints this version writes and reads."""
PREFIX = "dqn_"


class Progress(NamedTuple):
    """Counters and per-env episode accumulators carried between periods (and checkpoints)."""

    period: int
    global_step: int
    num_updates: int
    checkpoint_num: int
    obs: np.ndarray | dict[str, np.ndarray]
    """The envs' current raw observations (:func:`~rlstore.agents.obs.numeric_obs`)."""
    episode_return: np.ndarray
    episode_length: np.ndarray


def save_checkpoint(
    folder: Path,
    cfg: DQNTrainConfig,
    prog: Progress,
    agent: DQNAgent,
    optimizer: torch.optim.Optimizer,
    buffer: ReplayBuffer,
    envs: Any,
    stats: TrainStats,
) -> None:
    """Write one checkpoint folder: the buffer first, then the DQN state (the commit point)."""
    counters = {k: getattr(prog, k) for k in _COUNTERS}
    payload = {
        "counters": counters,
        "obs": numeric_obs(prog.obs),
        "episode_return": prog.episode_return.copy(),
        "episode_length": prog.episode_length.copy(),
        "epsilon": float(agent.epsilon),
        "optimizer": optimizer_state(optimizer),
        "history": {
            k: [list(e) if isinstance(e, tuple) else e for e in getattr(stats, k)] for k in _HISTORY
        },  # fmt: skip
    }
    save_replay_checkpoint(folder, PREFIX, FORMAT, cfg, agent, buffer, envs, payload, counters,
                           link_buffer=True)  # fmt: skip


_COUNTERS = ("period", "global_step", "num_updates", "checkpoint_num")
_HISTORY = ("episode_returns", "episode_lengths", "episode_end_steps", "updates", "evaluations")


def restore_checkpoint(
    path: Path,
    cfg: DQNTrainConfig,
    agent: DQNAgent,
    optimizer: torch.optim.Optimizer,
    buffer: ReplayBuffer,
    envs: Any,
    stats: TrainStats,
) -> Progress:
    """Load a checkpoint folder into freshly built training objects; every entry is checked
    before the first object changes (CheckpointError naming it)."""
    sd, buffer_sd = load_replay_checkpoint(path, PREFIX, FORMAT, cfg, agent, "DQN")
    if read_metadata(path, prefix=BUFFER_PREFIX).get("save_id") != sd.get("buffer_save_id"):
        raise CheckpointError(f"buffer_save_id: {path} holds a replay buffer of another save")
    opt = check_optimizer_state(sd.get("optimizer"), optimizer)
    counters = sd.get("counters")
    if (
        not isinstance(counters, dict)
        or set(counters) != set(_COUNTERS)
        or not all(type(counters[k]) is int and counters[k] >= 0 for k in _COUNTERS)
    ):
        raise CheckpointError(f"counters: expected ints >= 0 for {list(_COUNTERS)}")
    n = envs.num_envs
    _check_obs(sd.get("obs"), envs, agent)
    for key, kind in (("episode_return", "f"), ("episode_length", "i")):
        v = sd.get(key)
        if not isinstance(v, np.ndarray) or v.shape != (n,) or v.dtype.kind != kind:
            raise CheckpointError(f"{key}: expected a {kind}-kind array of shape {(n,)}")
    hist = sd.get("history")
    if not isinstance(hist, dict) or not all(isinstance(hist.get(k), list) for k in _HISTORY):
        raise CheckpointError(f"history: expected the lists {list(_HISTORY)}")
    updates = [list(u.values()) if isinstance(u, dict) else None for u in hist["updates"]]
    rows = [*(hist[k] for k in _HISTORY[:3]), *hist["evaluations"], *updates]
    if not all(isinstance(r, list) and all(type(x) in (int, float) for x in r) for r in rows):
        raise CheckpointError("history: expected lists of numbers (and of {name: number})")
    eps = sd.get("epsilon")
    if type(eps) is not float or not 0.0 <= eps <= 1.0:
        raise CheckpointError(f"epsilon: expected a float in [0, 1], got {eps!r}")
    view = SimpleNamespace(normalizer=RAW_OBS.normalizer, preprocess=agent.preprocess)
    restore_replay_checkpoint(sd, buffer_sd, cfg, agent, buffer, envs, [(optimizer, opt)], view)
    agent.epsilon = eps
    stats.episode_returns, stats.episode_lengths = hist["episode_returns"], hist["episode_lengths"]
    stats.episode_end_steps, stats.updates = hist["episode_end_steps"], hist["updates"]
    stats.evaluations = [(int(s), float(m)) for s, m in hist["evaluations"]]
    c = counters
    return Progress(c["period"], c["global_step"], c["num_updates"], c["checkpoint_num"] + 1,
                     sd["obs"], sd["episode_return"], sd["episode_length"])  # fmt: skip


def _check_obs(obs: Any, envs: Any, agent: DQNAgent) -> None:
    """CheckpointError unless ``obs`` is a batch of the envs' raw observations: the arrays (keys,
    shapes, dtypes) of ``numeric_obs`` of one, with values the agent's preprocessor takes."""
    empty = gym.vector.utils.create_empty_array(envs.single_observation_space, envs.num_envs)
    want = {k: (v.shape, v.dtype) for k, v in flat_items(numeric_obs(empty)).items()}
    got = flat_items(obs) if isinstance(obs, dict) else {"": obs}
    if set(got) != set(want) or not all(
        isinstance(v, np.ndarray) and (v.shape, v.dtype) == want[k] for k, v in got.items()
    ):  # fmt: skip
        shown = {k: (tuple(s), str(d)) for k, (s, d) in want.items()}
        raise CheckpointError(f"obs: expected arrays (shape, dtype) {shown}")
    try:
        agent.preprocess(obs)
    except SpecError as err:
        raise CheckpointError(f"obs: {err}") from None
