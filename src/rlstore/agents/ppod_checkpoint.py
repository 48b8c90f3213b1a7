"""PPO+D checkpoints (:mod:`rlstore.agents.ppod`): PPO's checkpoint folder plus the demos.

``checkpoints/checkpoint_NNNN/`` holds

* ``ppod_state.safetensors`` + ``ppod_metadata.json`` (written first): the ``ppod`` config, the
  :class:`~rlstore.buffers.demos.DemoStore` (demos, rho / phi, thresholds, its RNG), the
  :class:`~rlstore.buffers.demo_mixer.DemoMixer` (replays in progress, the open env episodes),
  the real envs' raw observations, the observation the agent acts on next (a demo frame for a
  replaying slot) and the supplementary files already added;
* PPO's ``ppo_*`` files (:mod:`rlstore.agents.ppo_checkpoint`, the commit point), whose rollout
  state holds the *real* envs' observation, so that PPO's env replay checks what it replays.

Loading executes nothing from the folder and refuses a ``ppod`` config other than the run's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlstore.agents.ppo_checkpoint import (
    latest_checkpoint,
    restore_training,
    store_model_checkpoint,
)
from rlstore.agents.run_checkpoint import checkpoint_path
from rlstore.checkpoint import load_state, save_state
from rlstore.errors import CheckpointError, ConfigError, RLStoreError

if TYPE_CHECKING:
    from rlstore.agents.networks import PPOAgent
    from rlstore.agents.ppod import DemoRollout, PPODTrainConfig
    from rlstore.agents.rollout import RolloutState

__all__ = ["FORMAT", "PREFIX", "save", "restore"]

FORMAT = "rlstore.ppod/1"
"""The ``format`` entry of the PPO+D demo state this version writes and reads."""
PREFIX = "ppod_"


def save(
    ckpt_dir: Path,
    ckpt_num: int,
    cfg: PPODTrainConfig,
    agent: PPOAgent,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    buffer: Any,
    state: RolloutState,
    envs: Any,
    mix: DemoRollout,
    update: int,
    updates_log: list[dict[str, float]],
) -> int:
    """Write checkpoint ``ckpt_num`` (demo state first, then PPO's); returns the next number."""
    payload = {
        "format": FORMAT,
        "ppod": cfg.ppod.to_dict(),
        "store": mix.store.state_dict(),
        "mixer": mix.mixer.state_dict(),
        "env_obs": np.array(mix.env_obs),
        "next_obs": state.next_obs.cpu(),
        "seen": sorted(mix.seen),
    }
    save_state(checkpoint_path(ckpt_dir, ckpt_num), payload, prefix=PREFIX,
               metadata={"format": FORMAT, "update": update})  # fmt: skip
    real = dataclasses.replace(state, next_obs=mix.real_obs())
    return store_model_checkpoint(
        agent, cfg.online, cfg.run, ckpt_num, ckpt_dir, config=cfg.ppo_config(),
        optimizer=optimizer, scheduler=scheduler, buffer=buffer, state=real, envs=envs,
        update=update, updates_log=updates_log,
    )  # fmt: skip


def restore(
    ckpt_dir: Path | None,
    cfg: PPODTrainConfig,
    agent: PPOAgent,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    buffer: Any,
    state: RolloutState,
    envs: Any,
    mix: DemoRollout,
) -> tuple[int, int, list[dict[str, float]]]:
    """Load the latest checkpoint of ``ckpt_dir`` into fresh training objects; returns
    ``(updates_done, next_checkpoint_num, updates_log)`` (:func:`restore_training`).

    Raises:
        ConfigError: no checkpoint. CheckpointError: a damaged one, or one of another config.
    """
    if ckpt_dir is None or (path := latest_checkpoint(ckpt_dir)) is None:
        raise ConfigError(f"resume: no checkpoint found under {ckpt_dir}")
    sd = load_state(path, prefix=PREFIX)
    if sd.get("format") != FORMAT:
        raise CheckpointError(f"format: expected {FORMAT!r} in {path}, got {sd.get('format')!r}")
    if sd.get("ppod") != cfg.ppod.to_dict():
        raise CheckpointError(
            f"ppod: a resumed run keeps its config; {path} has {sd.get('ppod')!r}, "
            f"the run {cfg.ppod.to_dict()!r}"
        )
    next_obs, env_obs, seen = sd.get("next_obs"), sd.get("env_obs"), sd.get("seen")
    if (
        not isinstance(next_obs, torch.Tensor)
        or next_obs.shape != state.next_obs.shape
        or next_obs.dtype != state.next_obs.dtype
        or not isinstance(env_obs, np.ndarray)
        or env_obs.shape != mix.env_obs.shape
        or not (isinstance(seen, list) and all(isinstance(s, str) for s in seen))
    ):
        raise CheckpointError(f"{path}: next_obs / env_obs / seen: malformed")
    try:
        mix.store.load_state_dict(sd["store"])
        mix.mixer.load_state_dict(sd["mixer"])
    except (KeyError, RLStoreError) as exc:
        raise CheckpointError(f"{path}: demo state: {exc}") from exc
    mix.env_obs = env_obs.astype(mix.env_obs.dtype)
    mix.seen = set(seen)
    out = restore_training(path, agent, optimizer, scheduler, buffer, state, envs, cfg)
    if int(out[0]) > cfg.online.num_updates:
        raise ConfigError(
            f"online.total_timesteps: expected at least {out[0] * cfg.online.batch_size} "
            f"(the {out[0]} updates the run has done), got {cfg.online.total_timesteps}"
        )
    if scheduler.num_updates != cfg.online.num_updates:  # an extended budget
        scheduler.replan(cfg.online.num_updates)
    state.next_obs = next_obs.to(state.next_obs.device)
    return out
