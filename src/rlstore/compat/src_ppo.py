"""DecisionTransformerInterpretability's ``src.ppo`` (``agent``, ``memory``, ``train``,
``runner``, ``utils``, ``my_probe_envs``) as one namespace over rlstore's PPO trainer
(:mod:`rlstore.agents.ppo`). The agents are rlstore's with the original's call forms added:
``rollout(memory, num_steps, envs, trajectory_writer=None, sampling_method="basic")`` runs
rlstore's rollout loop into a ``RolloutBuffer`` that ``memory`` (:class:`Memory`) then serves,
``memory.state`` carrying the env and recurrent state between rollouts; ``learn(memory, args,
optimizer, scheduler, track)`` runs rlstore's PPO update on it (with ``track``, its losses go to
``memory.vars_to_log``). Differences: envs must autoreset in the same step
(:func:`~rlstore.agents.ppo.make_vector_env`); truncated episodes bootstrap; checkpoints are
rlstore's safetensors + JSON folders.

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
import os
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import rlstore.agents.ppo as ppo
from rlstore.agents.obs import get_obs_preprocessor, get_obs_shape, preprocess_images
from rlstore.agents.ppo import PPOScheduler, RolloutState, ppo_update, sample_from_agents
from rlstore.agents.ppo_checkpoint import checkpoint_path
from rlstore.agents.ppo_config import ModelConfig
from rlstore.agents.rollout import run_rollout
from rlstore.agents.run import set_global_seeds  # the one every trainer seeds with
from rlstore.compat.src_ppo_gae import compute_advantages_vectorized, shift_rows
from rlstore.compat.src_ppo_memory import (
    Memory,
    Minibatch,
    TrajectoryMinibatch,
    process_memory_vars_to_log,
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
    ``rollout`` / ``learn`` forms (module doc) and ``preprocess_obs``. Abstract, like the
    original's."""

    def make_optimizer(
        self, num_updates: int, initial_lr: float, end_lr: float, eps: float = 1e-5
    ) -> tuple[torch.optim.Optimizer, PPOScheduler]:
        """Adam over all parameters plus a :class:`PPOScheduler` decaying its rate linearly."""
        optimizer = torch.optim.Adam(self.parameters(), lr=initial_lr, eps=eps)
        return optimizer, PPOScheduler(optimizer, initial_lr, end_lr, num_updates)

    def rollout(
        self,
        memory: Memory,
        num_steps: int,
        envs: Any,
        trajectory_writer: Any = None,
        sampling_method: str = "basic",
        **kwargs: Any,
    ) -> None:
        """Collect ``num_steps`` steps of every env into ``memory`` (emptied by
        ``memory.reset()`` since its last rollout), returns computed; ``sampling_method``:
        ``basic``, ``greedy``, ``temperature`` (kwarg ``temperature``), ``topk`` (``k``)."""
        _check_memory(memory)
        if memory.experiences:
            raise ConfigError("memory: holds the steps of a rollout; call memory.reset() first")
        buffer = memory.rollout_buffer(num_steps)
        if memory.state is None:  # the first rollout: reset the envs and the agent's memory
            memory.state = RolloutState.start(self, envs, getattr(memory.args, "seed", None))
        run_rollout(
            self, buffer, num_steps, envs, memory.state, trajectory_writer, sampling_method, kwargs
        )
        memory.record_rollout(buffer, memory.state)

    def learn(
        self,
        memory: Memory,
        args: Any,
        optimizer: torch.optim.Optimizer,
        scheduler: PPOScheduler | None,
        track: bool = False,
    ) -> None:
        """rlstore's PPO update (:func:`~rlstore.agents.ppo.ppo_update`) on the rollout in
        ``memory``; returns None. With ``track`` its losses and diagnostics go to
        ``memory.add_vars_to_log``."""
        _check_memory(memory)
        stats = ppo_update(self, memory._rollout(), args, optimizer, scheduler)
        if track:
            memory.add_vars_to_log(**stats)

    def preprocess_obs(self, obs: Any) -> torch.Tensor:
        """Raw observations of ``envs`` ``(N, ...)`` -> what the networks read: float32
        ``(N, *obs_shape)`` on the agent's device, normalized when normalization is on (its
        statistics are not updated)."""
        return self.normalizer.obs(self.preprocess(obs, self.device), False)


def _check_memory(memory: Any) -> None:
    if not isinstance(memory, Memory):
        raise ConfigError(
            f"memory: expected a Memory, got {type(memory).__name__} (rlstore's own loop over a "
            "RolloutBuffer is rlstore.agents.ppo.run_rollout / ppo_update)"
        )


class FCAgent(PPOAgent, ppo.FCAgent):
    __doc__ = ppo.FCAgent.__doc__


class LSTMPPOAgent(PPOAgent, ppo.LSTMPPOAgent):
    __doc__ = ppo.LSTMPPOAgent.__doc__


class TransformerPPOAgent(PPOAgent, ppo.TransformerPPOAgent):
    __doc__ = ppo.TransformerPPOAgent.__doc__


_COMPAT_CLASSES: dict[type, type] = {
    ppo.FCAgent: FCAgent,
    ppo.LSTMPPOAgent: LSTMPPOAgent,
    ppo.TransformerPPOAgent: TransformerPPOAgent,
}


def _compat_agent(agent: Any) -> PPOAgent:
    """Give an agent built by rlstore the original's call forms (the compat classes add
    methods only, so switching the class is exact)."""
    if not isinstance(agent, PPOAgent):
        agent.__class__ = _COMPAT_CLASSES[type(agent)]
    return agent


def get_agent(
    model_config: ModelConfig,
    envs: gym.vector.VectorEnv,
    environment_config: ppo.EnvironmentConfig,
    online_config: ppo.OnlineTrainConfig,
) -> PPOAgent:
    """:func:`rlstore.agents.ppo.get_agent`, as the compat agent."""
    return _compat_agent(ppo.get_agent(model_config, envs, environment_config, online_config))


def load_saved_checkpoint(path: str | Path, num_envs: int = 10) -> PPOAgent:
    """:func:`rlstore.agents.ppo.load_saved_checkpoint`, as the compat agent."""
    return _compat_agent(ppo.load_saved_checkpoint(path, num_envs))


def load_all_agents_from_checkpoints(
    checkpoint_folder_path: str | Path, num_envs: int = 10
) -> list[PPOAgent]:
    """:func:`rlstore.agents.ppo.load_all_agents_from_checkpoints`, as compat agents."""
    agents = ppo.load_all_agents_from_checkpoints(checkpoint_folder_path, num_envs)
    return [_compat_agent(a) for a in agents]


def train_ppo(
    run_config: ppo.RunConfig,
    online_config: ppo.OnlineTrainConfig,
    environment_config: ppo.EnvironmentConfig,
    model_config: ModelConfig,
    envs: gym.vector.VectorEnv,
    trajectory_writer: Any = None,
) -> PPOAgent:
    """Train with :func:`rlstore.agents.ppo.train_ppo` (writes nothing) and return the agent."""
    result = ppo.train_ppo(
        run_config, online_config, environment_config, model_config, envs, trajectory_writer
    )
    return _compat_agent(result.agent)


def ppo_runner(
    run_config: ppo.RunConfig,
    environment_config: ppo.EnvironmentConfig,
    online_config: ppo.OnlineTrainConfig,
    model_config: ModelConfig,
) -> None:
    """:func:`rlstore.agents.ppo.ppo_runner`: train into the run folder
    ``<runs_dir>/<exp_name>`` (config, logs, checkpoints, learning curve); returns None."""
    ppo.ppo_runner(run_config, environment_config, online_config, model_config)


def store_model_checkpoint(
    agent: ppo.PPOAgent,
    online_config: ppo.OnlineTrainConfig,
    run_config: ppo.RunConfig,
    checkpoint_num: int,
    checkpoint_artifact: Any,
) -> int:
    """Write checkpoint ``checkpoint_num`` of ``agent`` into a folder or, for a
    ``wandb.Artifact`` (anything with ``add_dir``), under ``<runs_dir>/<exp_name>/checkpoints``
    and add it to the artifact; returns ``checkpoint_num + 1``."""
    folder = checkpoint_artifact
    if hasattr(checkpoint_artifact, "add_dir"):
        folder = Path(run_config.runs_dir) / run_config.exp_name / "checkpoints"
    elif not isinstance(checkpoint_artifact, str | os.PathLike):
        raise ConfigError(
            "checkpoint_artifact: expected a folder (str or path) or a wandb.Artifact, "
            f"got {type(checkpoint_artifact).__name__}"
        )
    out = ppo.store_model_checkpoint(agent, online_config, run_config, checkpoint_num, folder)
    if folder is not checkpoint_artifact:
        path = checkpoint_path(folder, checkpoint_num)
        checkpoint_artifact.add_dir(str(path), name=path.name)
    return out


class _OriginalReset:
    """The original's probe ``reset(seed=None, return_info=True, options=None)``: ``(obs,
    info)``, or ``obs`` alone with ``return_info=False``; otherwise rlstore's probe."""

    def reset(self, seed: int | None = None, return_info: bool = True, options: Any = None) -> Any:
        obs, info = super().reset(seed=seed, options=options)  # type: ignore[misc]
        return (obs, info) if return_info else obs


Probe1, Probe2, Probe3, Probe4, Probe5, Probe6, Probe7 = (
    type(c.__name__, (_OriginalReset, c), {"__doc__": c.__doc__, "__module__": __name__})
    for c in (probes.Probe1, probes.Probe2, probes.Probe3, probes.Probe4, probes.Probe5,
              probes.Probe6, probes.Probe7)
)  # fmt: skip


def combine_args(
    run_config: ppo.RunConfig,
    environment_config: ppo.EnvironmentConfig,
    online_config: ppo.OnlineTrainConfig,
    transformer_model_config: ModelConfig = None,
) -> dict[str, Any]:
    """All settings of the configs in one flat dict, later configs winning, with
    ``online_config``'s derived ``batch_size``, ``minibatch_size`` and ``num_updates``."""
    args: dict[str, Any] = {}
    for cfg in (run_config, environment_config, online_config, transformer_model_config):
        if cfg is not None:
            args |= cfg.to_dict()
    args |= {k: getattr(online_config, k) for k in ("batch_size", "minibatch_size", "num_updates")}
    return args


_ARG_CONFIGS = (ppo.RunConfig, ppo.EnvironmentConfig, ppo.OnlineTrainConfig)


def _flag_type(annotation: Any) -> Any:
    """The argparse ``type`` for a config field: bool / int / float / str (Optional too), or
    None for fields that have no command-line form (``env_kwargs``)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    base = args[0] if union and len(args) == 1 else annotation
    if base is bool:
        return _boolean
    return base if base in (int, float, str) else None


def _boolean(text: str) -> bool:
    """``true``/``1`` or ``false``/``0`` (any case); a ValueError (argparse's usage error) else."""
    if text.lower() not in ("true", "1", "false", "0"):
        raise ValueError(text)
    return text.lower() in ("true", "1")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """One ``--<field>`` per field of the run, environment and online configs (their defaults;
    booleans as ``--track`` or ``--track false``), parsed from ``argv`` and checked by the
    configs (ConfigError naming the field; argparse's SystemExit for unknown flags)."""
    parser = argparse.ArgumentParser(description="Train a PPO agent (rlstore).")
    for cfg in _ARG_CONFIGS:
        for name, field in cfg.model_fields.items():
            kind = _flag_type(field.annotation)
            if kind is not None:
                extra: dict[str, Any] = (
                    {"nargs": "?", "const": True} if field.annotation is bool else {}
                )
                parser.add_argument(f"--{name}", type=kind, default=field.get_default(
                    call_default_factory=True), help=field.description, **extra)  # fmt: skip
    args = parser.parse_args(argv)
    for cfg in _ARG_CONFIGS:  # the configs' own checks (ranges, ids), before anything uses it
        cfg.from_dict({k: getattr(args, k) for k in cfg.model_fields if hasattr(args, k)})
    return args


def prepare_video_dir(video_path: str | os.PathLike[str]) -> None:
    """Create ``video_path`` (and parents) if needed and delete the ``.mp4`` files in it, so
    that :func:`check_and_upload_new_video` sees only this run's videos."""
    folder = Path(video_path)
    folder.mkdir(parents=True, exist_ok=True)
    for video in folder.glob("*.mp4"):
        video.unlink()


def check_and_upload_new_video(
    video_path: str | os.PathLike[str], videos: Sequence[str], step: int | None = None
) -> list[str]:
    """Log every ``.mp4`` in ``video_path`` not in ``videos`` to the active wandb run (at
    ``step``; ConfigError without one); returns the names of all ``.mp4`` files there, sorted."""
    current = sorted(p.name for p in Path(video_path).glob("*.mp4"))
    seen = set(videos)
    new = [name for name in current if name not in seen]
    if new:
        wandb = wandb_run("check_and_upload_new_video")
        for name in new:
            video = wandb.Video(str(Path(video_path) / name), fps=4, format="mp4", caption=name)
            wandb.log({"video": video}, step=step)
    return current
