"""Acting with a :class:`~rlstore.agents.networks.PPOAgent` (PPO, PPO+D, trajectory sampling,
the seed-004 facade): training rollouts, their episode log, and evaluation episodes.

:func:`run_rollout` steps vector envs (:func:`rlstore.agents.envs.make_vector_env`) with an
agent into a :class:`~rlstore.buffers.rollout.RolloutBuffer`, bootstrapping truncated episodes
from ``V(info["final_obs"])``, and computes the GAE returns (``rlstore.returns.gae`` via the
buffer); :class:`RolloutState` is what carries over between rollouts (and into checkpoints).
:func:`log_update` and :func:`finish_stats` report its episodes to the run
(:mod:`rlstore.agents.run`); :func:`evaluate_agent` / :func:`evaluate_in_run` play the
deterministic policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlstore.agents.config import EnvironmentConfig, RunConfig
from rlstore.agents.envs import make_env
from rlstore.agents.networks import Memory, PPOAgent, deterministic_policy
from rlstore.agents.run import RunLogger, TrainingRun, TrainStats, evaluate, run_evaluation
from rlstore.agents.run_checkpoint import check_like
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import CheckpointError, ConfigError

__all__ = [
    "SAMPLING_METHODS",
    "RolloutState",
    "run_rollout",
    "log_update",
    "finish_stats",
    "evaluate_agent",
    "evaluate_in_run",
]

SAMPLING_METHODS: tuple[str, ...] = ("basic", "greedy", "temperature", "topk")
"""Action selection of :func:`run_rollout`: sample pi (training), its mode, a temperature, top-k."""


@dataclass
class RolloutState:
    """What carries over between rollouts: the current observation, the agent's recurrent
    memory, per-env episode counters and the finished-episode history.

    Attributes:
        next_obs: ``(N, *obs_shape)`` float32, preprocessed (and normalized, see
            ``agent.normalizer``) observation to act on next.
        memory: the agent's recurrent memory (see ``PPOAgent.initial_memory``).
        episode_time: ``(N,)`` int64 step index of ``next_obs`` within its episode.
        episode_return: ``(N,)`` float64 return so far of the running episodes.
        global_step: env steps taken so far (summed over envs).
        episode_returns, episode_lengths, episode_end_steps: one entry per finished episode.
    """

    next_obs: torch.Tensor
    memory: Memory
    episode_time: torch.Tensor
    episode_return: np.ndarray
    global_step: int = 0
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episode_end_steps: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, agent: PPOAgent, envs: gym.vector.VectorEnv, seed: int | None) -> RolloutState:
        """Reset ``envs`` (env i gets ``seed + i``) and the agent's memory."""
        mode = envs.metadata.get("autoreset_mode")
        if mode is not None and mode != gym.vector.AutoresetMode.SAME_STEP:
            raise ConfigError(
                f"envs: expected autoreset_mode SAME_STEP (see make_vector_env), got {mode}; "
                "NEXT_STEP would store the reset pseudo-steps as transitions"
            )
        obs, _ = envs.reset(seed=seed)
        n = envs.num_envs
        first = agent.normalizer.obs(agent.preprocess(obs, agent.device), agent.training)
        return cls(
            next_obs=first,
            memory=agent.initial_memory(n),
            episode_time=torch.zeros(n, dtype=torch.int64, device=agent.device),
            episode_return=np.zeros(n, dtype=np.float64),
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything as CPU tensors / arrays / JSON lists (for ``rlstore.checkpoint.save_state``).

        The memory is stored as ``{"kind": "none" | "tuple" | "dict", "items": {...}}``.
        """
        mem = self.memory
        if mem is None:
            memory: dict[str, Any] = {"kind": "none", "items": {}}
        elif isinstance(mem, tuple):
            memory = {"kind": "tuple", "items": {str(i): t.cpu() for i, t in enumerate(mem)}}
        else:
            memory = {"kind": "dict", "items": {k: t.cpu() for k, t in mem.items()}}
        return {
            "next_obs": self.next_obs.cpu(),
            "memory": memory,
            "episode_time": self.episode_time.cpu(),
            "episode_return": self.episode_return.copy(),
            "global_step": self.global_step,
            "episode_returns": list(self.episode_returns),
            "episode_lengths": list(self.episode_lengths),
            "episode_end_steps": list(self.episode_end_steps),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output of a run with the same agent and env count.

        Every entry is checked against this state (keys, shapes, dtypes, counts) before
        anything changes.

        Raises:
            CheckpointError: a missing, extra or malformed entry.
        """
        mine = self.state_dict()
        check_like("state", sd, mine)
        kind, items = sd["memory"]["kind"], sd["memory"]["items"]
        device = self.next_obs.device
        n_ep = len(sd["episode_returns"])
        if len(sd["episode_lengths"]) != n_ep or len(sd["episode_end_steps"]) != n_ep:
            raise CheckpointError("state: expected one length and end step per episode return")
        self.next_obs = sd["next_obs"].to(device)
        if kind == "tuple":
            self.memory = tuple(items[str(i)].to(device) for i in range(len(items)))
        elif kind == "dict":
            self.memory = {k: items[k].to(device) for k in mine["memory"]["items"]}
        self.episode_time = sd["episode_time"].to(self.episode_time.device)
        self.episode_return = sd["episode_return"].copy()
        self.global_step = sd["global_step"]
        self.episode_returns = [float(x) for x in sd["episode_returns"]]
        self.episode_lengths = list(sd["episode_lengths"])
        self.episode_end_steps = list(sd["episode_end_steps"])


def _select_action(
    agent: PPOAgent, params: torch.Tensor, dist: Any, method: str, kwargs: dict[str, Any]
) -> torch.Tensor:
    """Sample an action: ``basic`` from pi, ``greedy`` its mode, ``temperature``/``topk``."""
    if method == "basic":
        return dist.sample()
    if method == "greedy":
        return agent.greedy(params)
    if method == "temperature":
        temp = float(kwargs.get("temperature", 1.0))
        if not temp > 0:
            raise ConfigError(f"temperature: expected > 0, got {temp}")
        if agent.discrete:
            return agent.distribution(params / temp).sample()
        if agent.sde is not None:  # gSDE: the same matrices, noise scaled
            return dist.mean + temp * dist.noise()
        return params + temp * agent.actor_logstd.exp() * torch.randn_like(params)
    if method == "topk":
        if not agent.discrete or agent.action_nvec is not None:
            raise ConfigError("sampling_method: 'topk' needs a Discrete action space")
        k = int(kwargs.get("k", 1))
        if not 1 <= k <= params.shape[-1]:
            raise ConfigError(f"k: expected 1 <= k <= {params.shape[-1]}, got {k}")
        kth = params.topk(k, dim=-1).values[..., -1:]
        masked = params.masked_fill(params < kth, float("-inf"))
        return torch.distributions.Categorical(logits=masked).sample()
    raise ConfigError(f"sampling_method: expected one of {SAMPLING_METHODS}, got {method!r}")


def _stack_final_obs(final_obs: np.ndarray, idx: np.ndarray) -> Any:
    items = [final_obs[i] for i in idx]
    if isinstance(items[0], dict):
        return {k: np.stack([o[k] for o in items]) for k in items[0]}
    return np.stack(items)


def run_rollout(
    agent: PPOAgent,
    buffer: RolloutBuffer,
    num_steps: int,
    envs: gym.vector.VectorEnv,
    state: RolloutState,
    trajectory_writer: Any = None,
    sampling_method: str = "basic",
    sampling_kwargs: dict[str, Any] | None = None,
    *,
    mix: Any = None,
) -> RolloutState:
    """Collect ``num_steps`` steps of every env into ``buffer`` and compute GAE returns.

    Per step: act on ``state.next_obs`` (no grad), step the envs, store
    ``(obs, action, logp, value, reward, terminated, truncated)`` with ``final_value =
    V(final_obs)`` for truncated envs and the agent's pre-step hidden state, reset the memory
    of finished envs. At the end: ``buffer.compute_returns(V(next_obs))``.

    gSDE (``agent.sde``): the exploration matrices are drawn (torch's global RNG) at the first
    step and every ``agent.sde.sample_freq`` steps after it (-1: never again in this rollout),
    and an action is ``mean + features @ W`` (:mod:`rlstore.agents.gsde`). Nothing of them
    outlives the rollout: a resumed run draws the same ones from the restored global RNG.

    With ``agent.normalizer`` on, observations (what the agent sees and what is stored) and the
    stored rewards are normalized; its statistics are updated only when ``agent.training``.

    ``mix`` (PPO+D, :mod:`rlstore.agents.ppod`): called after every env step as ``mix(action,
    logp, value, reward, terminated, truncated, next_raw)``, it returns them with demo replays
    mixed in plus ``from_demo`` ``(N,)`` bool; demo steps count in no episode statistics.
    """
    kwargs = sampling_kwargs or {}
    obs, memory, ep_time = state.next_obs, state.memory, state.episode_time
    n = envs.num_envs
    no_demo = np.zeros(n, dtype=bool)
    every = agent.sde.sample_freq if agent.sde is not None else -1
    exploration = None
    for t in range(num_steps):
        if t == 0 or (every > 0 and t % every == 0):
            exploration = agent.sample_exploration(n)  # gSDE's matrices; None without gSDE
        with torch.no_grad():
            params, value, hidden, new_memory = agent._step(obs, memory, ep_time)
            dist = agent.distribution(params, exploration)
            action = _select_action(agent, params, dist, sampling_method, kwargs)
            logp = dist.log_prob(action)
        env_action = agent.env_action(action)
        next_raw, reward, terminated, truncated, info = envs.step(env_action)
        from_demo = no_demo
        if mix is not None:
            action, logp, reward, terminated, truncated, next_raw, from_demo = mix(
                action, logp, value, reward, terminated, truncated, next_raw
            )
        norm = agent.normalizer  # statistics updated in train() mode, frozen in eval()
        next_obs = norm.obs(agent.preprocess(next_raw, agent.device), agent.training)
        done = terminated | truncated
        final_value = None
        boot = truncated & ~terminated
        if boot.any():  # bootstrap from the real successor, not the reset observation
            idx = np.flatnonzero(boot)
            succ = next_obs.clone()
            final = agent.preprocess(_stack_final_obs(info["final_obs"], idx), agent.device)
            succ[torch.as_tensor(idx)] = norm.obs(final, update=False)
            with torch.no_grad():
                final_value = agent.get_value(succ, new_memory, ep_time + 1)
        buffer.add(
            obs, action, logp, value, norm.reward(reward, done, agent.training),
            terminated, truncated,
            final_value=final_value, hidden=hidden,
        )  # fmt: skip
        if trajectory_writer is not None:
            trajectory_writer.accumulate_trajectory(
                next_raw, reward, terminated, truncated, env_action, info
            )
        state.episode_return += np.where(from_demo, 0.0, reward)  # raw rewards, never scaled
        state.global_step += n
        ep_time = ep_time + 1
        if done.any():
            for i in np.flatnonzero(done & ~from_demo):
                state.episode_returns.append(float(state.episode_return[i]))
                state.episode_lengths.append(int(ep_time[i]))
                state.episode_end_steps.append(state.global_step)
            state.episode_return[done] = 0.0
            done_t = torch.as_tensor(done, device=agent.device)
            ep_time = torch.where(done_t, torch.zeros_like(ep_time), ep_time)
            new_memory = agent.reset_memory(new_memory, done_t)
        obs, memory = next_obs, new_memory
    with torch.no_grad():
        last_value = agent.get_value(obs, memory, ep_time)
    buffer.compute_returns(last_value)
    state.next_obs, state.memory, state.episode_time = obs, memory, ep_time
    return state


# ----------------------------------------------------------------- the run's episode log


_LOSSES = ("loss", "pg_loss", "v_loss", "entropy", "approx_kl", "old_approx_kl", "clipfrac",
           "explained_variance")  # fmt: skip


def log_update(
    logger: RunLogger,
    update: int,
    state: RolloutState,
    info: dict[str, float],
    n_logged: int,
    **progress: str,
) -> int:
    """Log the episodes finished since the ``n_logged`` first and the update's diagnostics
    (``progress``: more fields for the bar); returns the number of episodes logged so far."""
    for i in range(n_logged, len(state.episode_returns)):
        logger.episode(state.episode_returns[i], state.episode_lengths[i],
                       state.episode_end_steps[i])  # fmt: skip
    values = {f"losses/{k}": info[k] for k in _LOSSES if k in info}
    values.update({"charts/learning_rate": info["lr"], "charts/SPS": info["sps"]})
    logger.scalars(values, state.global_step)
    recent = state.episode_returns[-20:]
    ret = f"{np.mean(recent):.1f}" if recent else "-"
    logger.progress(state.global_step, sps=f"{info['sps']:.0f}", ret=ret, upd=update, **progress)
    return len(state.episode_returns)


def finish_stats(run: TrainingRun, state: RolloutState, num_updates: int, title: str) -> None:
    """Fill ``run.stats`` at the end of a PPO-style run from the rollout ``state`` (whose
    episode history spans a resumed run's earlier part; the evaluations are read back from
    ``stats.updates``, which a resumed run restores from its checkpoint) and plot the curve."""
    stats = run.stats
    stats.episode_returns = list(state.episode_returns)
    stats.episode_lengths = list(state.episode_lengths)
    stats.episode_end_steps = list(state.episode_end_steps)
    stats.evaluations = [(int(u["global_step"]), u["eval/mean_return"])
                         for u in stats.updates if "eval/mean_return" in u]  # fmt: skip
    run.finish(state.global_step, num_updates, title)


# ----------------------------------------------------------------- evaluation episodes


@contextmanager
def _frozen(agent: PPOAgent) -> Iterator[tuple[Callable[[], None], Callable[[np.ndarray], Any]]]:
    """:func:`deterministic_policy` of ``agent`` in ``eval()`` mode (observation statistics
    frozen), its training mode restored on exit."""
    was_training = agent.training
    agent.eval()
    try:
        yield deterministic_policy(agent)
    finally:
        agent.train(was_training)


def evaluate_agent(
    agent: PPOAgent,
    environment_config: EnvironmentConfig,
    episodes: int,
    seed: int,
    *,
    video_dir: str | Path | None = None,
) -> list[float]:
    """Returns of ``episodes`` deterministic episodes of ``agent`` (greedy action for discrete
    spaces, the mean for continuous ones; ``eval()`` mode, so observation statistics are frozen;
    recurrent memory reset at each episode start) on one env built like the training envs, via
    :func:`rlstore.agents.run.evaluate` (episode i reset with ``seed + i``; ``video_dir``
    records them)."""
    render = None if video_dir is None else "rgb_array"
    with _frozen(agent) as (begin, act):
        return evaluate(act, lambda: make_env(environment_config, render), episodes, seed,
                        video_dir=video_dir, begin_episode=begin)  # fmt: skip


def evaluate_in_run(
    agent: PPOAgent,
    environment_config: EnvironmentConfig,
    rc: RunConfig,
    stats: TrainStats,
    logger: RunLogger,
    step: int,
) -> float:
    """The run's evaluation of ``agent`` at env step ``step`` (PPO's and PPO+D's):
    :func:`rlstore.agents.run.run_evaluation` of the deterministic policy, as
    :func:`evaluate_agent` plays it; returns the mean return."""
    with _frozen(agent) as (begin, act):
        return run_evaluation(rc, stats, logger, step, act,
                              lambda render: make_env(environment_config, render),
                              begin_episode=begin)  # fmt: skip
