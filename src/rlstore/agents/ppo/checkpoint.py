"""PPO checkpoints: save an agent (and everything needed to resume training), load agents back.

A checkpoint is one ``checkpoint_NNNN.pt`` file (``torch.save`` of a dict of tensors, strings
and numbers), written atomically: a temporary sibling is written, flushed and fsynced, then
``os.replace``-d over the final name, so the previous checkpoint stays loadable until the new
one is complete. Its keys:

* ``format_version``, ``agent_class``, ``config`` (the :class:`TrainConfig` as a dict),
  ``checkpoint_num``, ``update`` (1-based number of updates done), ``global_step``;
* ``model``: the agent's ``state_dict``;
* ``resume`` (only when training state was given): optimizer, scheduler and rollout-buffer state
  (its minibatch RNG), the :class:`~rlstore.agents.ppo.trainer.RolloutState` (current
  observation, recurrent memory, episode counters and history), the torch / numpy / Python
  global RNG states, the per-update log, and the pickled sub-environments of a
  ``SyncVectorEnv`` (so a resumed run continues the exact same episodes).

Loading uses ``torch.load(weights_only=True)``; only :func:`restore_training` unpickles the
stored environments, so resume only from checkpoints you wrote yourself.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import sys
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from rlstore.agents.ppo.config import OnlineTrainConfig, RunConfig, TrainConfig
from rlstore.agents.ppo.models import PPOAgent, get_agent
from rlstore.errors import CheckpointError

__all__ = [
    "FORMAT_VERSION",
    "store_model_checkpoint",
    "read_checkpoint",
    "load_saved_checkpoint",
    "load_all_agents_from_checkpoints",
    "latest_checkpoint",
    "restore_training",
]

FORMAT_VERSION = 1
_NAME = re.compile(r"^checkpoint_(\d+)\.pt$")


def checkpoint_path(folder: str | Path, checkpoint_num: int) -> Path:
    """``folder / "checkpoint_{num:04d}.pt"``."""
    return Path(folder) / f"checkpoint_{checkpoint_num:04d}.pt"


def _atomic_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if hasattr(os, "O_DIRECTORY"):  # persist the rename itself
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _rng_states() -> dict[str, Any]:
    state = np.random.get_state()  # noqa: NPY002 - saving the legacy global RNG
    name, keys, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], state)
    return {
        "torch": torch.get_rng_state(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": random.getstate(),
    }


def _set_rng_states(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    name, keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))  # noqa: NPY002
    random.setstate(rng["python"])


def _env_states(envs: Any) -> torch.Tensor | None:
    subs = getattr(envs, "envs", None)
    if subs is None:
        return None
    try:
        blob = pickle.dumps(subs)
    except Exception:  # noqa: BLE001 - any env that cannot be pickled: resume resets envs
        return None
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


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
    """Write ``checkpoint_folder/checkpoint_{checkpoint_num:04d}.pt`` atomically.

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
        from rlstore.agents.ppo.trainer import train_config_from_parts

        env_cfg = agent.environment_config
        if env_cfg is None:
            raise CheckpointError("agent.environment_config: needed to rebuild the agent, got None")
        model_cfg = getattr(agent, "lstm_config", None) or getattr(
            agent, "transformer_config", None
        )
        config = train_config_from_parts(run_config, online_config, env_cfg, model_cfg)
    payload: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "agent_class": type(agent).__name__,
        "config": config.to_dict(),
        "checkpoint_num": int(checkpoint_num),
        "update": int(update),
        "global_step": int(getattr(state, "global_step", 0)),
        "model": agent.state_dict(),
    }
    if optimizer is not None:
        payload["resume"] = {
            "optimizer": optimizer.state_dict(),
            "scheduler": None if scheduler is None else scheduler.state_dict(),
            "buffer": None if buffer is None else buffer.state_dict(),
            "state": None if state is None else state.state_dict(),
            "rng": _rng_states(),
            "envs": _env_states(envs),
            "updates_log": list(updates_log or []),
        }
    _atomic_save(payload, checkpoint_path(checkpoint_folder, checkpoint_num))
    return checkpoint_num + 1


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint dict (``weights_only``); :class:`CheckpointError` if unreadable."""
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"path: checkpoint file {str(p)!r} does not exist")
    try:
        payload = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - truncated / corrupted / foreign files
        raise CheckpointError(
            f"path: {str(p)!r} is not a readable rlstore checkpoint ({err})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format_version") != FORMAT_VERSION:
        got = payload.get("format_version") if isinstance(payload, dict) else type(payload).__name__
        raise CheckpointError(
            f"format_version: expected {FORMAT_VERSION} in {str(p)!r}, got {got!r}"
        )
    return payload


def _agent_from_payload(payload: dict[str, Any], num_envs: int) -> PPOAgent:
    from rlstore.agents.ppo.trainer import make_vector_env

    cfg = TrainConfig.model_validate(payload["config"])
    envs = make_vector_env(cfg.environment, num_envs)
    try:
        agent = get_agent(cfg.selected_model_config(), envs, cfg.environment, cfg.online)
    finally:
        envs.close()
    if type(agent).__name__ != payload["agent_class"]:
        raise CheckpointError(
            f"agent_class: config builds {type(agent).__name__}, checkpoint holds "
            f"{payload['agent_class']}"
        )
    agent.load_state_dict(payload["model"])
    agent.train_config = cfg
    return agent


def load_saved_checkpoint(path: str | Path, num_envs: int = 10) -> PPOAgent:
    """Rebuild the agent stored in the checkpoint file ``path``.

    Args:
        path: a ``checkpoint_NNNN.pt`` file.
        num_envs: number of envs of the temporary vector env used to read the spaces.

    Returns:
        The agent with the stored parameters; ``agent.train_config`` is the run's
        :class:`TrainConfig` and ``agent.environment_config`` its environment config.
    """
    return _agent_from_payload(read_checkpoint(path), num_envs)


def _list_checkpoints(folder: str | Path) -> list[tuple[int, Path]]:
    d = Path(folder)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found)


def latest_checkpoint(folder: str | Path) -> Path | None:
    """The highest-numbered ``checkpoint_NNNN.pt`` in ``folder`` (None if there is none)."""
    found = _list_checkpoints(folder)
    return found[-1][1] if found else None


def load_all_agents_from_checkpoints(
    checkpoint_folder_path: str | Path, num_envs: int = 10
) -> list[PPOAgent]:
    """Every checkpoint of a folder (a run's ``checkpoints/``), in checkpoint order.

    Raises:
        CheckpointError: the folder holds no checkpoint.
    """
    found = _list_checkpoints(checkpoint_folder_path)
    if not found:
        raise CheckpointError(
            f"checkpoint_folder_path: no checkpoint_NNNN.pt in {str(checkpoint_folder_path)!r}"
        )
    return [load_saved_checkpoint(p, num_envs) for _, p in found]


def restore_training(
    path: str | Path,
    agent: PPOAgent,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    buffer: Any,
    state: Any,
    envs: Any,
) -> tuple[int, int, list[dict[str, float]]]:
    """Load a resumable checkpoint into freshly built training objects (in place).

    Returns:
        ``(updates_done, next_checkpoint_num, updates_log)``.

    Raises:
        CheckpointError: not resumable, or built for another agent / batch shape.
    """
    payload = read_checkpoint(path)
    res = payload.get("resume")
    if res is None:
        raise CheckpointError(f"resume: {str(path)!r} holds no training state (model only)")
    if payload["agent_class"] != type(agent).__name__:
        raise CheckpointError(
            f"agent_class: expected {type(agent).__name__}, "
            f"checkpoint holds {payload['agent_class']}"
        )
    agent.load_state_dict(payload["model"])
    optimizer.load_state_dict(res["optimizer"])
    if scheduler is not None and res["scheduler"] is not None:
        scheduler.load_state_dict(res["scheduler"])
    if buffer is not None and res["buffer"] is not None:
        buffer.load_state_dict(res["buffer"])
    if state is not None and res["state"] is not None:
        state.load_state_dict(res["state"])
    if res["envs"] is not None and hasattr(envs, "envs"):
        subs = pickle.loads(res["envs"].numpy().tobytes())  # noqa: S301 - own checkpoint
        if len(subs) != len(envs.envs):
            raise CheckpointError(
                f"envs: expected {len(subs)} envs like the run, got {len(envs.envs)}"
            )
        for old in envs.envs:
            old.close()
        envs.envs = subs
    else:
        print(
            "rlstore: the checkpoint has no environment state; envs restart from a reset, so "
            "the resumed curve differs from an uninterrupted run",
            file=sys.stderr,
        )
    _set_rng_states(res["rng"])
    return int(payload["update"]), int(payload["checkpoint_num"]) + 1, list(res["updates_log"])
