"""What the checkpoints of the replay trainers (DQN: :mod:`.dqn_checkpoint`, SAC:
:mod:`.sac_checkpoint`) share: a folder ``checkpoint_NNNN/`` holds the replay buffer
(``buffer_*``, :func:`rlstore.checkpoint.save`, written first) and the trainer's state
(``<prefix>*``, :func:`rlstore.checkpoint.save_state`, the commit point: a folder without it is
never resumed from). Beside its own entries the state holds ``format``, ``config``, the networks
(``model``, CPU tensors), the global RNG states (``rng``) and what replays the envs' current
episodes (``envs``, :mod:`rlstore.agents.envs`).

A resume checks the shared entries (:func:`load_replay_checkpoint`), the trainer checks its own,
and only then does anything change (:func:`restore_replay_checkpoint`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlstore.agents.config import AlgorithmTrainConfig
from rlstore.agents.envs import env_state, restore_envs
from rlstore.agents.run_checkpoint import (
    RAW_OBS,
    check_global_rng_state,
    check_module_state,
    check_resumed_config,
    global_rng_state,
    set_global_rng_state,
)
from rlstore.buffers.replay import ReplayBuffer
from rlstore.checkpoint import load_state, read_metadata, save, save_state
from rlstore.errors import CheckpointError, RLStoreError

__all__ = [
    "BUFFER_PREFIX", "save_replay_checkpoint", "load_replay_checkpoint",
    "restore_replay_checkpoint",
]  # fmt: skip

BUFFER_PREFIX = "buffer_"


def save_replay_checkpoint(
    folder: Path, prefix: str, fmt: str, cfg: AlgorithmTrainConfig, agent: torch.nn.Module,
    buffer: ReplayBuffer, envs: Any, entries: dict[str, Any], metadata: dict[str, Any],
    *, link_buffer: bool = False,
) -> None:  # fmt: skip
    """Write the buffer, then the trainer's state: ``entries`` and the shared ones (module
    docstring; with ``link_buffer`` also ``buffer_save_id``, the ``save_id`` of the buffer
    written with it); the sidecar's metadata is ``format`` and ``metadata``."""
    save(buffer, folder, prefix=BUFFER_PREFIX)
    if link_buffer:
        save_id = read_metadata(folder, prefix=BUFFER_PREFIX)["save_id"]
        entries = {**entries, "buffer_save_id": save_id}
    state = {
        **entries,
        "format": fmt,
        "config": cfg.to_dict(),
        "model": {k: v.detach().cpu() for k, v in agent.state_dict().items()},
        "rng": global_rng_state(),
        "envs": env_state(envs, cfg.environment),
    }
    save_state(folder, state, prefix=prefix, metadata={"format": fmt, **metadata})


def load_replay_checkpoint(
    path: Path, prefix: str, fmt: str, cfg: AlgorithmTrainConfig, agent: torch.nn.Module,
    label: str,
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The trainer state and the buffer state of checkpoint ``path``, the shared entries
    checked: ``format``, ``config`` (a resumed run keeps it; only a larger budget may
    change), the networks' names, shapes and dtypes and the RNG states. CheckpointError (naming
    the entry, ``label`` the algorithm) otherwise; nothing changes here."""
    where = f"resume: {str(path)!r}"
    try:
        sd, buffer_sd = load_state(path, prefix=prefix), load_state(path, prefix=BUFFER_PREFIX)
    except RLStoreError as err:
        raise CheckpointError(f"{where} is not a readable {label} checkpoint ({err})") from None
    if sd.get("format") != fmt:
        raise CheckpointError(f"{where}: format: expected {fmt!r}, got {sd.get('format')!r}")
    section = cfg.section()
    saved = type(cfg).fill_legacy(sd.get("config"))  # written before a field existed
    check_resumed_config(saved, cfg.to_dict(), ("environment", section), where)
    check_module_state(sd.get("model"), agent)
    check_global_rng_state(sd.get("rng"), "rng")
    return sd, buffer_sd


def restore_replay_checkpoint(
    sd: dict[str, Any], buffer_sd: dict[str, Any], cfg: AlgorithmTrainConfig,
    agent: torch.nn.Module, buffer: ReplayBuffer, envs: Any,
    optimizers: list[tuple[torch.optim.Optimizer, dict[str, Any]]], obs_view: Any = RAW_OBS,
) -> None:  # fmt: skip
    """Load a checkpoint whose entries are all checked (:func:`load_replay_checkpoint` and the
    trainer's own checks) into the run's objects: the buffer (checked whole by itself), the
    envs' current episodes (replayed; they must reproduce the saved observations
    ``sd["obs"]``, both seen through ``obs_view.preprocess``: raw by default), the networks,
    ``optimizers`` (each with its checked state), then the global RNG states."""
    buffer.load_state_dict(buffer_sd)
    next_obs = obs_view.preprocess(sd["obs"], None)
    restore_envs(envs, cfg.environment, sd.get("envs"), obs_view, next_obs)
    agent.load_state_dict(sd["model"])
    for optimizer, state in optimizers:
        optimizer.load_state_dict(state)
    set_global_rng_state(sd["rng"])
