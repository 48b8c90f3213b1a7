"""PPO checkpoints: save an agent (and everything needed to resume training), load agents back.

A checkpoint is the folder ``checkpoints/checkpoint_NNNN/`` written by
:func:`rlstore.checkpoint.save_state` (prefix ``ppo_``): tensors in ``ppo_state.safetensors``,
everything else in the checksummed JSON sidecar ``ppo_metadata.json``, committed atomically by
the project's one atomic writer (a killed save leaves the previous checkpoint loadable). Its state:

* ``format``, ``agent_class``, ``config`` (the :class:`TrainConfig` as a dict),
  ``checkpoint_num``, ``update`` (1-based number of updates done), ``global_step``;
* ``model``: the agent's ``state_dict``; ``normalizer``: the statistics of its observation /
  reward normalization (:class:`~rlstore.agents.obs.RunNormalizer`), also in
  model-only checkpoints so that loaded agents see observations as in training;
* ``resume`` (only when training state was given): optimizer tensors and settings, scheduler and
  rollout-buffer state, the :class:`~rlstore.agents.rollout.RolloutState`, the global RNG
  states (torch as a uint8 tensor, numpy and Python as JSON), the per-update log, and the
  environments as a JSON spec plus what replays their current episodes
  (:mod:`rlstore.agents.envs`), so a resumed run continues the exact same episodes.

Loading never executes code from the folder: no pickle, no ``torch.load``, no names resolved
to callables; every entry is checked (keys, shapes, dtypes, ranges) before any live object
changes, and anything else is a :class:`CheckpointError`. The ``checkpoint_NNNN.pt`` files of
earlier rlstore versions (pickle inside) are refused, not read.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from rlstore._checks import check_keys
from rlstore.agents.envs import env_state, has_episode_logs, make_vector_env, restore_envs
from rlstore.agents.networks import PPOAgent, get_agent
from rlstore.agents.ppo_config import (
    OnlineTrainConfig,
    RunConfig,
    TrainConfig,
    train_config_from_parts,
)
from rlstore.agents.run_checkpoint import (
    check_global_rng_state,
    check_like,
    check_module_state,
    check_optimizer_state,
    check_resumed_config,
    check_updates_log,
    checkpoint_path,
    global_rng_state,
    list_checkpoints,
    optimizer_state,
    set_global_rng_state,
)
from rlstore.agents.run_checkpoint import latest_checkpoint as _latest_checkpoint
from rlstore.checkpoint import load_state, metadata_file_path, save_state
from rlstore.errors import CheckpointError, RLStoreError

__all__ = [
    "FORMAT",
    "store_model_checkpoint",
    "read_checkpoint",
    "load_saved_checkpoint",
    "load_all_agents_from_checkpoints",
    "latest_checkpoint",
    "restore_training",
]

FORMAT = "rlstore.ppo/2"
"""Value of the ``format`` entry of every PPO checkpoint this version writes and reads."""
PREFIX = "ppo_"


def store_model_checkpoint(
    agent: PPOAgent,
    online_config: OnlineTrainConfig,
    run_config: RunConfig,
    checkpoint_num: int,
    checkpoint_folder: str | Path,
    *,
    config: TrainConfig | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    buffer: Any = None,
    state: Any = None,
    envs: Any = None,
    update: int = 0,
    updates_log: list[dict[str, float]] | None = None,
) -> int:
    """Write the folder ``checkpoint_folder/checkpoint_{checkpoint_num:04d}`` atomically.

    Args:
        agent: the agent (its ``state_dict`` is stored).
        online_config, run_config: stored in the checkpoint's config (with ``config`` taking
            precedence when given: it also records the environment and model configs).
        checkpoint_num: number of this checkpoint (0, 1, ...).
        checkpoint_folder: where to write.
        config: the full :class:`TrainConfig` of the run.
        optimizer, scheduler, buffer, state, envs: training state; when ``optimizer`` is given
            the checkpoint can be resumed (:func:`restore_training`).
        update: number of updates done. updates_log: per-update diagnostics so far.

    Returns:
        ``checkpoint_num + 1``, the number of the next checkpoint.
    """
    if config is None:
        env_cfg = agent.environment_config
        if env_cfg is None:
            raise CheckpointError("agent.environment_config: needed to rebuild the agent, got None")
        model_cfg = getattr(agent, "lstm_config", None) or getattr(
            agent, "transformer_config", None
        )
        config = train_config_from_parts(run_config, online_config, env_cfg, model_cfg)
    payload: dict[str, Any] = {
        "format": FORMAT,
        "agent_class": type(agent).__name__,
        "config": config.to_dict(),
        "checkpoint_num": int(checkpoint_num),
        "update": int(update),
        "global_step": int(getattr(state, "global_step", 0)),
        "model": dict(agent.state_dict()),
        "normalizer": agent.normalizer.state_dict(),
    }
    if optimizer is not None:
        envs_state = None if envs is None else env_state(envs, config.environment)
        payload["resume"] = {
            "optimizer": optimizer_state(optimizer),
            "scheduler": None if scheduler is None else scheduler.state_dict(),
            "buffer": None if buffer is None else buffer.state_dict(),
            "state": None if state is None else state.state_dict(),
            "rng": global_rng_state(),
            "envs": envs_state,
            "updates_log": list(updates_log or []),
        }
    save_state(
        checkpoint_path(checkpoint_folder, checkpoint_num),
        payload,
        prefix=PREFIX,
        metadata={k: payload[k] for k in ("format", "agent_class", "checkpoint_num", "update",
                                          "global_step")},
    )  # fmt: skip
    return checkpoint_num + 1


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint folder's state (no code is executed); :class:`CheckpointError` if
    it is missing, damaged, of another format, or an old pickle-based ``.pt`` file."""
    p = Path(path)
    if p.suffix == ".pt":  # checkpoint_NNNN.pt of an earlier rlstore, or any torch.save file
        raise CheckpointError(
            f"path: {str(p)!r} is a checkpoint of an earlier rlstore (pickle inside); it is "
            "not loaded because loading it could run code: retrain, or load it yourself with "
            "torch.load only if you trust its origin"
        )
    if not metadata_file_path(p, PREFIX).is_file():
        raise CheckpointError(
            f"path: checkpoint folder {str(p)!r} does not exist or holds no {PREFIX}metadata.json"
        )
    try:
        payload = load_state(p, prefix=PREFIX)
    except RLStoreError as err:
        raise CheckpointError(
            f"path: {str(p)!r} is not a readable rlstore checkpoint ({err})"
        ) from None
    if payload.get("format") != FORMAT:
        raise CheckpointError(
            f"format: expected {FORMAT!r} in {str(p)!r}, got {payload.get('format')!r}"
        )
    for key in ("checkpoint_num", "update", "global_step"):
        if type(payload.get(key)) is not int or payload[key] < 0:
            raise CheckpointError(
                f"{key}: expected an int >= 0 in {str(p)!r}, got {payload.get(key)!r}"
            )
    if not isinstance(payload.get("config"), dict) or not isinstance(
        payload.get("agent_class"), str
    ):
        raise CheckpointError(f"config / agent_class: missing or malformed in {str(p)!r}")
    return payload


def _config_of(payload: dict[str, Any]) -> TrainConfig:
    try:
        return TrainConfig.model_validate(TrainConfig.fill_legacy(payload["config"]))
    except (RLStoreError, ValueError) as err:
        raise CheckpointError(f"config: not a valid TrainConfig ({err})") from None


def _agent_from_payload(payload: dict[str, Any], num_envs: int) -> PPOAgent:
    cfg = _config_of(payload)
    envs = make_vector_env(cfg.environment, num_envs)
    try:
        agent = get_agent(cfg.selected_model_config(), envs, cfg.environment, cfg.online)
    finally:
        envs.close()
    if type(agent).__name__ != payload["agent_class"]:
        raise CheckpointError(
            f"agent_class: config builds {type(agent).__name__}, checkpoint holds "
            f"{payload['agent_class']!r}"
        )
    check_module_state(payload["model"], agent)
    _load_normalizer(payload, agent)
    agent.load_state_dict(payload["model"])
    agent.train_config = cfg
    return agent


def _load_normalizer(payload: dict[str, Any], agent: PPOAgent) -> None:
    """Restore ``agent.normalizer`` from the checkpoint (checked first; a checkpoint written
    before normalization existed has none, which is right for a config with it off)."""
    saved = payload.get("normalizer", {"obs": None, "reward": None})
    agent.normalizer.load_state_dict(saved)


def load_saved_checkpoint(path: str | Path, num_envs: int = 10) -> PPOAgent:
    """Rebuild the agent stored in the checkpoint folder ``path``.

    Args:
        path: a ``checkpoint_NNNN`` folder.
        num_envs: number of envs of the temporary vector env used to read the spaces.

    Returns:
        The agent with the stored parameters; ``agent.train_config`` is the run's
        :class:`TrainConfig` and ``agent.environment_config`` its environment config.
    """
    return _agent_from_payload(read_checkpoint(path), num_envs)


def latest_checkpoint(folder: str | Path) -> Path | None:
    """The latest committed PPO checkpoint in ``folder`` (:func:`rlstore.agents.run_checkpoint.
    latest_checkpoint` with this module's prefix)."""
    return _latest_checkpoint(folder, PREFIX)


def load_all_agents_from_checkpoints(
    checkpoint_folder_path: str | Path, num_envs: int = 10
) -> list[PPOAgent]:
    """Every checkpoint of a folder (a run's ``checkpoints/``), in checkpoint order.

    Raises:
        CheckpointError: the folder holds no checkpoint.
    """
    found = list_checkpoints(checkpoint_folder_path, PREFIX)
    if not found:
        raise CheckpointError(
            f"checkpoint_folder_path: no checkpoint_NNNN folder in {str(checkpoint_folder_path)!r}"
        )
    return [load_saved_checkpoint(p, num_envs) for _, p in found]


_RESUME_KEYS = {"optimizer", "scheduler", "buffer", "state", "rng", "envs", "updates_log"}


def restore_training(
    path: str | Path,
    agent: PPOAgent,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    buffer: Any,
    state: Any,
    envs: Any,
    config: Any = None,
) -> tuple[int, int, list[dict[str, float]]]:
    """Load a resumable checkpoint into freshly built training objects (in place).

    ``config``: the resuming run's config (a ``TrainConfig``-like object with ``to_dict()``);
    its ``environment``, ``online`` and selected model sections must equal the checkpoint's,
    except a larger ``online.total_timesteps`` (an extended run).

    The model, optimizer, scheduler, RNG states, log and normalizer are checked before the first
    object changes; the buffer and rollout state check their parts as they load (all or nothing
    each), and the environments are rebuilt by replaying their saved episodes
    (:func:`rlstore.agents.envs.restore_envs`). A failure in those last steps leaves the objects
    partly restored: discard them, as :func:`~rlstore.agents.ppo.train_ppo` does.

    Returns:
        ``(updates_done, next_checkpoint_num, updates_log)``.

    Raises:
        CheckpointError: not resumable, malformed, or built for another agent / batch shape.
    """
    payload = read_checkpoint(path)
    res = payload.get("resume")
    if res is None:
        raise CheckpointError(f"resume: {str(path)!r} holds no training state (model only)")
    check_keys(f"resume ({str(path)!r})", res, _RESUME_KEYS)
    if payload["agent_class"] != type(agent).__name__:
        raise CheckpointError(
            f"agent_class: expected {type(agent).__name__}, "
            f"checkpoint holds {payload['agent_class']!r}"
        )
    check_module_state(payload["model"], agent)
    opt_state = check_optimizer_state(res["optimizer"], optimizer)
    check_global_rng_state(res["rng"])
    log = res["updates_log"]
    check_updates_log(log, "resume.updates_log")
    if scheduler is not None and res["scheduler"] is not None:
        check_like("resume.scheduler", res["scheduler"], scheduler.state_dict())
    cfg = _config_of(payload)
    if config is not None:
        now = config.to_dict()
        sections = ("environment", "online", *([now["agent"]] if now.get("agent") in now else []))
        check_resumed_config(cfg.to_dict(), now, sections, str(path))
    _load_normalizer(payload, agent)  # checks everything before it changes; needed by restore_envs
    if buffer is not None and res["buffer"] is not None:
        buffer.load_state_dict(res["buffer"])
    if state is not None and res["state"] is not None:
        state.load_state_dict(res["state"])
    if res["envs"] is not None and state is not None and has_episode_logs(envs):
        restore_envs(envs, cfg.environment, res["envs"], agent, state.next_obs)
    else:
        warnings.warn(
            "the checkpoint has no environment state; envs restart from a reset, so "
            "the resumed curve differs from an uninterrupted run",
            stacklevel=2,
        )
    agent.load_state_dict(payload["model"])
    optimizer.load_state_dict(opt_state)
    if scheduler is not None and res["scheduler"] is not None:
        scheduler.load_state_dict(res["scheduler"])
    set_global_rng_state(res["rng"])
    return payload["update"], payload["checkpoint_num"] + 1, [dict(u) for u in log]
