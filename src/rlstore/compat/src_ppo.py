"""DecisionTransformerInterpretability's ``src.ppo`` (``agent``, ``memory``, ``train``,
``runner``, ``utils``, ``my_probe_envs``) as one namespace over :mod:`rlstore.agents.ppo`.
The agents are rlstore's with the original's call forms added: ``rollout(memory, num_steps,
envs, trajectory_writer=None, sampling_method="basic")`` runs rlstore's rollout into a
``RolloutBuffer`` that :class:`Memory` then serves; ``learn(memory, args, optimizer, scheduler,
track)`` runs rlstore's PPO update on it. Differences: envs must autoreset in the same step
(:func:`~rlstore.agents.ppo.make_vector_env`); truncated episodes bootstrap; checkpoints are
rlstore's safetensors + JSON folders; ``make_optimizer``'s Adam minimizes the loss (the
original's ascended an objective: ``learn`` refuses ``maximize=True``); the observation helpers
are :mod:`rlstore.agents.obs`'s (images: channels-first float32 tensors in [0, 1]; MiniGrid
dicts: flat); Probe6 / Probe7 are :mod:`rlstore.envs.probes`'s (Probe6 rewards ``a == t mod
2``, the original's stated intent); ``device`` defaults are ``"cpu"`` (read: ``torch.device``).

    >>> from rlstore.agents.ppo import EnvironmentConfig, OnlineTrainConfig, make_vector_env
    >>> env_cfg = EnvironmentConfig(env_id="CartPole-v1")
    >>> args = OnlineTrainConfig(total_timesteps=64, num_envs=2, num_steps=16)
    >>> envs = make_vector_env(env_cfg, args.num_envs)
    >>> memory, agent = Memory(envs, args, "cpu"), get_agent(None, envs, env_cfg, args)
    >>> optimizer, scheduler = agent.make_optimizer(args.num_updates, 2.5e-4, 0.0)
    >>> for _ in range(args.num_updates):
    ...     agent.rollout(memory, args.num_steps, envs)
    ...     agent.learn(memory, args, optimizer, scheduler, False)
    ...     memory.reset()
    >>> memory.global_step
    64
"""

from __future__ import annotations

import argparse
import functools
import os
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

import rlstore.agents.ppo as ppo
from rlstore.agents.obs import get_obs_preprocessor, get_obs_shape, preprocess_images
from rlstore.agents.ppo import PPOScheduler, RolloutState, ppo_update, sample_from_agents
from rlstore.agents.ppo_checkpoint import checkpoint_path
from rlstore.agents.ppo_config import ModelConfig
from rlstore.agents.rollout import run_rollout
from rlstore.agents.run import adam, set_global_seeds  # the ones every trainer uses
from rlstore.compat.src_ppo_memory import (
    Memory,
    Minibatch,
    TrajectoryMinibatch,
    compute_advantages_vectorized,
    process_memory_vars_to_log,
    shift_rows,
    wandb_run,
)
from rlstore.envs import probes
from rlstore.errors import ConfigError

__all__ = [
    "PPOAgent", "FCAgent", "LSTMPPOAgent", "TransformerPPOAgent", "PPOScheduler", "get_agent",
    "load_saved_checkpoint", "load_all_agents_from_checkpoints", "sample_from_agents",
    "compute_advantages_vectorized", "shift_rows",
    "Memory", "Minibatch", "TrajectoryMinibatch", "process_memory_vars_to_log",
    "Probe1", "Probe2", "Probe3", "Probe4", "Probe5", "Probe6", "Probe7",
    "combine_args", "ppo_runner", "train_ppo", "prepare_video_dir", "check_and_upload_new_video",
    "get_obs_preprocessor", "get_obs_shape", "parse_args", "preprocess_images",
    "set_global_seeds", "store_model_checkpoint",
]  # fmt: skip


class PPOAgent(ppo.PPOAgent):
    """rlstore's :class:`~rlstore.agents.ppo.PPOAgent` with the original's ``make_optimizer``,
    ``rollout`` / ``learn`` (module doc) and ``preprocess_obs``. Abstract, like the original."""

    def make_optimizer(
        self, num_updates: int, initial_lr: float, end_lr: float, eps: float = 1e-5
    ) -> tuple[torch.optim.Optimizer, PPOScheduler]:
        """Adam over all parameters plus a :class:`PPOScheduler` decaying its rate linearly."""
        optimizer = adam(self.parameters(), initial_lr, eps=eps)  # PPO's own (fused) Adam
        return optimizer, PPOScheduler(optimizer, initial_lr, end_lr, num_updates)

    def rollout(
        self, memory: Memory, num_steps: int, envs: Any, trajectory_writer: Any = None,
        sampling_method: str = "basic", **kwargs: Any,
    ) -> None:  # fmt: skip
        """Collect ``num_steps`` steps of every env into ``memory`` (emptied by
        ``memory.reset()`` since its last rollout), returns computed; ``sampling_method``:
        ``basic``, ``greedy``, ``temperature`` (kwarg ``temperature``), ``topk`` (``k``)."""
        if _memory(memory).experiences:
            raise ConfigError("memory: holds the steps of a rollout; call memory.reset() first")
        buffer = memory.rollout_buffer(num_steps)
        if memory.state is None:  # the first rollout: reset the envs and the agent's memory
            memory.state = RolloutState.start(self, envs, getattr(memory.args, "seed", None))
        run_rollout(self, buffer, num_steps, envs, memory.state, trajectory_writer,
                    sampling_method, kwargs)  # fmt: skip
        memory.record_rollout(buffer, memory.state)

    def learn(
        self, memory: Memory, args: Any, optimizer: torch.optim.Optimizer,
        scheduler: PPOScheduler | None, track: bool = False,
    ) -> None:  # fmt: skip
        """:func:`~rlstore.agents.ppo.ppo_update` on the rollout in ``memory``; with ``track``
        its losses and diagnostics go to ``memory.add_vars_to_log``."""
        if any(group.get("maximize") for group in optimizer.param_groups):
            raise ConfigError(
                "optimizer: expected one that minimizes (learn minimizes the PPO "
                "loss; the original maximized an objective), got maximize=True"
            )
        stats = ppo_update(self, _memory(memory)._rollout(), args, optimizer, scheduler)
        if track:
            memory.add_vars_to_log(**stats)

    def preprocess_obs(self, obs: Any) -> torch.Tensor:
        """Raw observations ``(N, ...)`` as the networks read them: float32 on the agent's
        device, normalized when normalization is on (statistics not updated)."""
        return self.normalizer.obs(self.preprocess(obs, self.device), False)


def _memory(memory: Any) -> Memory:
    if not isinstance(memory, Memory):
        raise ConfigError(
            f"memory: expected a Memory, got {type(memory).__name__} (rlstore's own loop over a "
            "RolloutBuffer is rlstore.agents.ppo.run_rollout / ppo_update)"
        )
    return memory


_CORE = (ppo.FCAgent, ppo.LSTMPPOAgent, ppo.TransformerPPOAgent)
FCAgent, LSTMPPOAgent, TransformerPPOAgent = _AGENTS = tuple(
    type(c.__name__, (PPOAgent, c), {"__doc__": c.__doc__, "__module__": __name__}) for c in _CORE
)
_BY_CORE: dict[type, type] = dict(zip(_CORE, _AGENTS, strict=True))


def _compat_agent(agent: Any) -> PPOAgent:
    """An agent built by rlstore with the original's call forms (the compat classes add methods
    only, so switching the class is exact)."""
    if not isinstance(agent, PPOAgent):
        agent.__class__ = _BY_CORE[type(agent)]
    return agent


def _compat(fn: Callable[..., Any], pick: Callable[[Any], Any] = lambda r: r) -> Any:
    """``fn`` of :mod:`rlstore.agents.ppo` (its signature) returning compat agents."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        out = pick(fn(*args, **kwargs))
        return [_compat_agent(a) for a in out] if isinstance(out, list) else _compat_agent(out)

    return call


get_agent = _compat(ppo.get_agent)
load_saved_checkpoint = _compat(ppo.load_saved_checkpoint)
load_all_agents_from_checkpoints = _compat(ppo.load_all_agents_from_checkpoints)
train_ppo = _compat(ppo.train_ppo, lambda result: result.agent)
train_ppo.__doc__ = "Train with :func:`rlstore.agents.ppo.train_ppo`; returns the agent."


def ppo_runner(
    run_config: ppo.RunConfig, environment_config: ppo.EnvironmentConfig,
    online_config: ppo.OnlineTrainConfig, model_config: ModelConfig,
) -> None:  # fmt: skip
    """:func:`rlstore.agents.ppo.ppo_runner` (run folder ``<runs_dir>/<exp_name>``: config,
    logs, checkpoints, learning curve); returns None."""
    ppo.ppo_runner(run_config, environment_config, online_config, model_config)


def store_model_checkpoint(
    agent: ppo.PPOAgent, online_config: ppo.OnlineTrainConfig, run_config: ppo.RunConfig,
    checkpoint_num: int, checkpoint_artifact: Any,
) -> int:  # fmt: skip
    """Write checkpoint ``checkpoint_num`` into a folder or, for a ``wandb.Artifact`` (anything
    with ``add_dir``), under ``<runs_dir>/<exp_name>/checkpoints`` and add it to the artifact;
    returns ``checkpoint_num + 1``."""
    folder = checkpoint_artifact
    if hasattr(checkpoint_artifact, "add_dir"):
        folder = Path(run_config.runs_dir) / run_config.exp_name / "checkpoints"
    elif not isinstance(checkpoint_artifact, str | os.PathLike):
        raise ConfigError("checkpoint_artifact: expected a folder (str or path) or a "
                          f"wandb.Artifact, got {type(checkpoint_artifact).__name__}")  # fmt: skip
    out = ppo.store_model_checkpoint(agent, online_config, run_config, checkpoint_num, folder)
    if folder is not checkpoint_artifact:
        path = checkpoint_path(folder, checkpoint_num)
        checkpoint_artifact.add_dir(str(path), name=path.name)
    return out


class _OriginalReset:
    """The original's probe ``reset(seed=None, return_info=True, options=None)``: ``(obs,
    info)``, or ``obs`` alone with ``return_info=False``."""

    def reset(self, seed: int | None = None, return_info: bool = True, options: Any = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)  # type: ignore[misc]
        return (obs, info) if return_info else obs


Probe1, Probe2, Probe3, Probe4, Probe5, Probe6, Probe7 = (
    type(c.__name__, (_OriginalReset, c), {"__doc__": c.__doc__, "__module__": __name__})
    for c in (probes.Probe1, probes.Probe2, probes.Probe3, probes.Probe4, probes.Probe5,
              probes.Probe6, probes.Probe7)
)  # fmt: skip


def combine_args(
    run_config: ppo.RunConfig, environment_config: ppo.EnvironmentConfig,
    online_config: ppo.OnlineTrainConfig, transformer_model_config: ModelConfig = None,
) -> dict[str, Any]:  # fmt: skip
    """All settings of the configs in one flat dict, later configs winning, plus
    ``online_config``'s derived ``batch_size``, ``minibatch_size`` and ``num_updates``."""
    args: dict[str, Any] = {}
    for cfg in (run_config, environment_config, online_config, transformer_model_config):
        args |= {} if cfg is None else cfg.to_dict()
    return args | {k: getattr(online_config, k) for k in ("batch_size", "minibatch_size",
                                                           "num_updates")}  # fmt: skip


def _boolean(text: str) -> bool:
    """``true``/``1`` or ``false``/``0`` (any case); a ValueError (argparse's usage error) else."""
    if text.lower() not in ("true", "1", "false", "0"):
        raise ValueError(text)
    return text.lower() in ("true", "1")


_FLAG_TYPES: dict[Any, Callable[[str], Any]] = {bool: _boolean, int: int, float: float, str: str}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """One ``--<field>`` per bool / int / float / str field of the run, environment and online
    configs (booleans: ``--track`` or ``--track false``), checked by the configs (ConfigError;
    argparse's SystemExit for unknown flags or values of the wrong type)."""
    parser = argparse.ArgumentParser(description="Train a PPO agent (rlstore).")
    configs = (ppo.RunConfig, ppo.EnvironmentConfig, ppo.OnlineTrainConfig)
    for cfg in configs:
        for name, field in cfg.model_fields.items():
            inner = [a for a in typing.get_args(field.annotation) if a is not type(None)]
            optional = type(None) in typing.get_args(field.annotation) and len(inner) == 1
            kind = _FLAG_TYPES.get(inner[0] if optional else field.annotation)
            flag: dict[str, Any] = {"nargs": "?", "const": True} if field.annotation is bool else {}
            if typing.get_origin(field.annotation) is typing.Literal:  # online.encoder
                kind, flag = str, {"choices": typing.get_args(field.annotation)}
            if kind is not None:
                default = field.get_default(call_default_factory=True)
                parser.add_argument(f"--{name}", type=kind, default=default,
                                    help=field.description, **flag)  # fmt: skip
    args = parser.parse_args(argv)
    for cfg in configs:  # the configs' own checks (ranges, ids), before anything uses it
        cfg.from_dict({k: getattr(args, k) for k in cfg.model_fields if hasattr(args, k)})
    return args


def prepare_video_dir(video_path: str | os.PathLike[str]) -> None:
    """Create ``video_path`` (and parents) if needed and delete the ``.mp4`` files in it, so
    that :func:`check_and_upload_new_video` sees only this run's videos."""
    Path(video_path).mkdir(parents=True, exist_ok=True)
    for video in Path(video_path).glob("*.mp4"):
        video.unlink()


def check_and_upload_new_video(
    video_path: str | os.PathLike[str], videos: Sequence[str], step: int | None = None
) -> list[str]:
    """Log every ``.mp4`` in ``video_path`` not in ``videos`` to the active wandb run (at
    ``step``; ConfigError without one); returns the names of all ``.mp4`` files there, sorted."""
    current = sorted(p.name for p in Path(video_path).glob("*.mp4"))
    if new := sorted(set(current) - set(videos)):
        wandb = wandb_run("check_and_upload_new_video")
        for name in new:
            video = wandb.Video(str(Path(video_path) / name), fps=4, format="mp4", caption=name)
            wandb.log({"video": video}, step=step)
    return current
