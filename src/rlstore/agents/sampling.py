"""Sample trajectories from trained PPO agents and write them to a file rlstore can read back.

``sample_from_agents(agents, rollout_length, trajectory_path, num_envs, sampling_method)`` runs
every agent for ``rollout_length`` steps in each of ``num_envs`` fresh copies of its environment
(``agent.environment_config``, vector env in SAME_STEP autoreset mode) through the training
rollout loop (:func:`~rlstore.agents.rollout.run_rollout`) with a :class:`TrajectoryWriter`
attached, and returns one :class:`Trajectories` record per agent. Sampling methods:

* ``basic``: sample from pi (gSDE agents: their exploration matrices are drawn at the start
  and every ``sde_sample_freq`` steps, as in training: with -1, one per env for the whole
  ``rollout_length``; ``temperature`` scales that noise);
* ``greedy``: the mode (argmax of the logits; the mean of a Gaussian);
* ``temperature``: sample from ``softmax(logits / temperature)`` (Gaussian: std x temperature);
  needs ``temperature > 0``;
* ``topk``: sample from pi restricted to the ``k`` most likely actions (discrete only); needs
  ``1 <= k <= num_actions``.

File format (``trajectory_path`` is a folder; written atomically by
:func:`rlstore.checkpoint.save_state` with prefix ``trajectories_``)::

    trajectories_state.safetensors   agent_<i>/observations (T, N, *obs_shape) (dict observations:
                                     agent_<i>/observations/<key>), agent_<i>/actions (T, N, ...),
                                     agent_<i>/rewards (T, N) float32, agent_<i>/terminated and
                                     agent_<i>/truncated (T, N) bool
    trajectories_metadata.json       env id, sampling method and its arguments, seed, per agent

Arrays are time-major and transition-aligned (rlstore conventions): ``observations[t, n]`` is
the raw observation env ``n`` acted on at step ``t``, ``actions[t, n]`` what it did (as passed
to ``env.step``), and ``rewards / terminated / truncated[t, n]`` describe that transition. After
a ``done`` the next row starts a new episode (its reset observation). Non-numeric observation
entries (MiniGrid's ``mission`` text) are not stored.

Example::

    agent, _ = train_ppo(RunConfig(track=False), OnlineTrainConfig(total_timesteps=2048),
                         EnvironmentConfig(env_id="CartPole-v1"))
    trajs = sample_from_agents([agent], rollout_length=500, trajectory_path="trajs",
                               num_envs=4, sampling_method="greedy")
    again = load_trajectories("trajs")
    again[0].episode_returns()
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlstore.agents.envs import make_vector_env
from rlstore.agents.obs import numeric_obs
from rlstore.agents.rollout import SAMPLING_METHODS, RolloutState, run_rollout
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.checkpoint import load_state, read_metadata, save_state
from rlstore.errors import CheckpointError, ConfigError
from rlstore.minibatches import TimeMajor

__all__ = [
    "SAMPLING_METHODS",
    "Trajectories",
    "TrajectoryWriter",
    "sample_from_agents",
    "save_trajectories",
    "load_trajectories",
    "check_sampling_args",
]

_PREFIX = "trajectories_"
_FORMAT = "rlstore.trajectories/1"

Obs = np.ndarray | dict[str, np.ndarray]


@dataclass(frozen=True)
class Trajectories(TimeMajor):
    """Time-major trajectories of one agent in ``N`` envs over ``T`` steps (see module doc).

    Attributes:
        observations: ``(T, N, *obs_shape)`` or a dict of such arrays (raw env observations).
        actions: ``(T, N, *action_shape)`` env actions.
        rewards: ``(T, N)`` float32.
        terminated: ``(T, N)`` bool.
        truncated: ``(T, N)`` bool.
        info: JSON-able description (``env_id``, ``sampling_method``, ``sampling_kwargs``,
            ``seed``, ...).
    """

    observations: Obs
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    def _episodes(self) -> list[tuple[int, int, int]]:
        """``(env, start, end)`` (end inclusive) of every episode that ended inside the data."""
        done = self.terminated | self.truncated
        out: list[tuple[int, int, int]] = []
        for n in range(self.num_envs):
            start = 0
            for t in np.flatnonzero(done[:, n]):
                out.append((n, start, int(t)))
                start = int(t) + 1
        return out

    def episode_returns(self) -> np.ndarray:
        """Undiscounted returns of the episodes that ended inside the data, env by env, float64."""
        return np.array(
            [self.rewards[s : e + 1, n].sum(dtype=np.float64) for n, s, e in self._episodes()],
            dtype=np.float64,
        )

    def episode_lengths(self) -> np.ndarray:
        """Lengths of the episodes that ended inside the data (same order), int64."""
        return np.array([e - s + 1 for _, s, e in self._episodes()], dtype=np.int64)


def _stack(rows: list[Obs]) -> Obs:
    if isinstance(rows[0], dict):
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}  # type: ignore[index]
    return np.stack(rows)  # type: ignore[arg-type]


class TrajectoryWriter:
    """Collects the steps of one vectorized rollout (as DecisionTransformerInterpretability's
    ``TrajectoryWriter``).

    The agent's rollout calls :meth:`accumulate_trajectory` once per vector step with the
    step's outputs; with SAME_STEP autoreset ``next_obs`` is the observation acted on next (the
    reset observation after a ``done``), so the writer only needs the first observation from
    :meth:`start`.

    Args:
        info: JSON-able description stored with the trajectories.
    """

    def __init__(self, info: Mapping[str, Any] | None = None) -> None:
        self.info = dict(info or {})
        self._obs: list[Obs] = []
        self._actions: list[np.ndarray] = []
        self._rewards: list[np.ndarray] = []
        self._terminated: list[np.ndarray] = []
        self._truncated: list[np.ndarray] = []

    def start(self, first_obs: Any) -> None:
        """Record the observations of the reset that starts the rollout ``(N, *obs_shape)``."""
        self._obs = [numeric_obs(first_obs)]

    def accumulate_trajectory(
        self,
        next_obs: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        action: Any,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one vector step: ``action`` taken on the current observation, then the
        ``reward``, ``terminated``, ``truncated`` flags ``(N,)`` and the next observation."""
        if not self._obs:
            raise ConfigError("TrajectoryWriter: call start(first_obs) before accumulating steps")
        self._actions.append(np.array(action, copy=True))
        self._rewards.append(np.asarray(reward, dtype=np.float32).copy())
        self._terminated.append(np.asarray(terminated, dtype=bool).copy())
        self._truncated.append(np.asarray(truncated, dtype=bool).copy())
        self._obs.append(numeric_obs(next_obs))

    def finish(self) -> Trajectories:
        """The recorded steps as :class:`Trajectories` (the final next-observation is dropped)."""
        if not self._actions:
            raise ConfigError("TrajectoryWriter: no steps recorded")
        return Trajectories(
            observations=_stack(self._obs[:-1]),
            actions=np.stack(self._actions),
            rewards=np.stack(self._rewards),
            terminated=np.stack(self._terminated),
            truncated=np.stack(self._truncated),
            info=dict(self.info),
        )


def check_sampling_args(
    sampling_method: str, temperature: float | None, k: int | None
) -> dict[str, Any]:
    """Validate a sampling method and its arguments; returns the ``sampling_kwargs`` of
    ``run_rollout``.

    Raises:
        ConfigError: unknown method, a missing or out-of-range ``temperature`` / ``k``, or an
            argument given to a method that does not use it (never silently ignored).
    """
    if sampling_method not in SAMPLING_METHODS:
        raise ConfigError(
            f"sampling_method: expected one of {SAMPLING_METHODS}, got {sampling_method!r}"
        )
    if temperature is not None and sampling_method != "temperature":
        raise ConfigError(
            f"temperature: only used by sampling_method='temperature', got it with "
            f"{sampling_method!r}"
        )
    if k is not None and sampling_method != "topk":
        raise ConfigError(
            f"k: only used by sampling_method='topk', got it with {sampling_method!r}"
        )
    if sampling_method == "temperature":
        if temperature is None or not np.isfinite(temperature) or temperature <= 0:
            raise ConfigError(
                f"temperature: expected a finite float > 0 for sampling_method='temperature', "
                f"got {temperature!r}"
            )
        return {"temperature": float(temperature)}
    if sampling_method == "topk":
        if k is None or isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
            raise ConfigError(f"k: expected an int >= 1 for sampling_method='topk', got {k!r}")
        return {"k": int(k)}
    return {}


def sample_from_agents(
    agents: Sequence[Any],
    rollout_length: int = 2000,
    trajectory_path: str | os.PathLike[str] | None = None,
    num_envs: int = 1,
    sampling_method: str = "basic",
    *,
    temperature: float | None = None,
    k: int | None = None,
    seed: int = 0,
    environment_config: Any = None,
) -> list[Trajectories]:
    """Roll out each agent and (optionally) write all trajectories to ``trajectory_path``.

    Args:
        agents: PPO agents (``rlstore.agents.networks.PPOAgent``), e.g. from
            ``load_all_agents_from_checkpoints``.
        rollout_length: steps per env, T >= 1.
        trajectory_path: folder to write (see module doc); None keeps them in memory only.
        num_envs: envs per agent, N >= 1.
        sampling_method: ``basic``, ``greedy``, ``temperature`` or ``topk``.
        temperature: required by (and only by) ``temperature``.
        k: required by (and only by) ``topk``.
        seed: env i of every agent is reset with ``seed + i``; action sampling uses a torch RNG
            seeded with ``seed`` (the CPU RNG, and the CUDA RNG of a CUDA agent's device: restored
            afterwards; no other device's RNG is touched).
        environment_config: an ``EnvironmentConfig`` to use for every agent instead of
            ``agent.environment_config``.

    Returns:
        One :class:`Trajectories` per agent, arrays ``(rollout_length, num_envs, ...)``.

    Raises:
        ConfigError: bad arguments, an agent without an environment config, or an action space
            the method does not support (``topk`` on continuous actions).
    """
    kwargs = check_sampling_args(sampling_method, temperature, k)
    for name, value in (("rollout_length", rollout_length), ("num_envs", num_envs)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ConfigError(f"{name}: expected an int >= 1, got {value!r}")
    if not isinstance(agents, Sequence) or len(agents) == 0:
        raise ConfigError(f"agents: expected a non-empty sequence of agents, got {agents!r}")

    results: list[Trajectories] = []
    for i, agent in enumerate(agents):
        env_cfg = environment_config or getattr(agent, "environment_config", None)
        if env_cfg is None:
            raise ConfigError(
                f"agents[{i}]: has no environment_config; pass environment_config=... "
                "to sample_from_agents"
            )
        if sampling_method == "topk" and (not agent.discrete or agent.action_nvec is not None):
            raise ConfigError(f"sampling_method: 'topk' needs Discrete actions (agents[{i}])")
        envs = make_vector_env(env_cfg, int(num_envs))
        writer = TrajectoryWriter(
            {
                "agent_index": i,
                "agent_class": type(agent).__name__,
                "env_id": env_cfg.env_id,
                "sampling_method": sampling_method,
                "sampling_kwargs": kwargs,
                "seed": int(seed),
            }
        )
        was_training = agent.training
        try:
            buffer = RolloutBuffer(int(rollout_length), int(num_envs), device=agent.device)
            agent.eval()
            cuda = [agent.device] if agent.device.type == "cuda" else []  # the RNGs it uses
            with torch.random.fork_rng(devices=cuda):
                torch.random.default_generator.manual_seed(seed)
                if cuda:  # the agent's device only, restored after
                    with torch.cuda.device(agent.device):
                        torch.cuda.manual_seed(seed)
                writer.start(envs.reset(seed=seed)[0])
                state = RolloutState.start(agent, envs, seed)  # same seeds: same first obs
                run_rollout(
                    agent, buffer, int(rollout_length), envs, state, writer, sampling_method, kwargs
                )
        finally:
            agent.train(was_training)
            envs.close()
        results.append(writer.finish())
    if trajectory_path is not None:
        save_trajectories(trajectory_path, results)
    return results


def save_trajectories(path: str | os.PathLike[str], trajectories: Sequence[Trajectories]) -> None:
    """Write ``trajectories`` (one record per agent) to the folder ``path`` (atomic)."""
    state: dict[str, Any] = {}
    for i, tr in enumerate(trajectories):
        state[f"agent_{i}"] = {
            "observations": tr.observations,
            "actions": tr.actions,
            "rewards": tr.rewards,
            "terminated": tr.terminated,
            "truncated": tr.truncated,
            "info": tr.info,
        }
    save_state(
        path,
        state,
        prefix=_PREFIX,
        metadata={"format": _FORMAT, "num_agents": len(trajectories)},
    )


def load_trajectories(path: str | os.PathLike[str]) -> list[Trajectories]:
    """Read what :func:`sample_from_agents` / :func:`save_trajectories` wrote to ``path``.

    Raises:
        CheckpointError: missing or corrupted files, or not a trajectories file.
    """
    meta = read_metadata(path, prefix=_PREFIX).get("metadata") or {}
    if meta.get("format") != _FORMAT:
        raise CheckpointError(
            f"{path}: expected a trajectories file (format {_FORMAT!r}), got {meta.get('format')!r}"
        )
    state = load_state(path, prefix=_PREFIX)
    out = []
    for i in range(int(meta["num_agents"])):
        rec = state.get(f"agent_{i}")
        if rec is None:
            raise CheckpointError(f"{path}: agent_{i} is missing from the trajectories file")
        tr = Trajectories(
            observations=rec["observations"],
            actions=np.asarray(rec["actions"]),
            rewards=np.asarray(rec["rewards"]),
            terminated=np.asarray(rec["terminated"]),
            truncated=np.asarray(rec["truncated"]),
            info=dict(rec.get("info") or {}),
        )
        shape = tr.rewards.shape
        for name in ("terminated", "truncated"):
            if getattr(tr, name).shape != shape:
                raise CheckpointError(
                    f"{path}: agent_{i}/{name}: expected shape {shape} like rewards, "
                    f"got {getattr(tr, name).shape}"
                )
        out.append(tr)
    return out
