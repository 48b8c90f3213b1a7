"""The PPO training loop, readable top to bottom: envs -> rollout -> GAE -> update -> log.

Programmatic entry (used by ``rlstore train``, ``rlstore probe`` and the learning tests)::

    from rlstore.agents.ppo.config import EnvironmentConfig, OnlineTrainConfig, RunConfig
    from rlstore.agents.ppo.trainer import train_ppo

    agent, stats = train_ppo(
        RunConfig(seed=0, track=False),
        OnlineTrainConfig(total_timesteps=20_000, num_envs=8, num_steps=32),
        EnvironmentConfig(env_id="CartPole-v1"),
        model_config=None,          # None: FC agent; LSTMModelConfig / TransformerModelConfig
    )
    stats.mean_return(last=20), stats.steps_per_second

``train_ppo`` writes nothing unless ``run_dir`` is given (then: TensorBoard logs, checkpoints
and ``learning_curve.png``); :func:`ppo_runner` also creates the run folder and its
``config.yaml``. Environments are Gymnasium vector envs in ``AutoresetMode.SAME_STEP``: every
step is a real transition, and a truncated episode bootstraps from ``V(info["final_obs"])``.
Returns come from the :class:`~rlstore.buffers.rollout.RolloutBuffer` (``rlstore.returns.gae``).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from rlstore.agents.ppo.config import (
    EnvironmentConfig,
    LSTMModelConfig,
    ModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TrainConfig,
    TransformerModelConfig,
)
from rlstore.agents.ppo.models import Memory, PPOAgent, get_agent
from rlstore.agents.ppo.obs import set_global_seeds
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError

__all__ = [
    "RolloutState",
    "TrainStats",
    "TrainResult",
    "make_vector_env",
    "run_rollout",
    "train_ppo",
    "ppo_runner",
    "train_config_from_parts",
]

SAMPLING_METHODS = ("basic", "greedy", "temperature", "topk")


def make_vector_env(environment_config: EnvironmentConfig, num_envs: int) -> gym.vector.VectorEnv:
    """A ``SyncVectorEnv`` of ``num_envs`` copies of the configured env, autoreset SAME_STEP.

    Probe ids (``rlstore/Probe*``) are registered and MiniGrid ids import ``minigrid`` first.
    """
    cfg = environment_config
    if cfg.env_id.startswith("rlstore/"):
        from rlstore.envs.probes import register_probes

        register_probes()
    wrappers: list[Any] = []
    if cfg.env_id.startswith(("MiniGrid", "BabyAI")) or cfg.fully_observed or cfg.img_obs:
        try:
            import minigrid  # noqa: F401  (registers the MiniGrid ids)
            from minigrid.wrappers import FullyObsWrapper, RGBImgPartialObsWrapper
        except ImportError as err:
            raise ConfigError(
                f"environment.env_id: {cfg.env_id!r} needs the minigrid package "
                "(pip install 'rlstore[minigrid]')"
            ) from err
        if cfg.fully_observed:
            wrappers.append(FullyObsWrapper)
        if cfg.img_obs:
            wrappers.append(RGBImgPartialObsWrapper)
    kwargs = dict(cfg.env_kwargs)
    if cfg.max_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_steps
    try:
        return gym.make_vec(
            cfg.env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
            wrappers=wrappers or None,
            **kwargs,
        )
    except gym.error.Error as err:
        raise ConfigError(f"environment.env_id: cannot make {cfg.env_id!r}: {err}") from err


@dataclass
class RolloutState:
    """What carries over between rollouts: the current observation, the agent's recurrent
    memory, per-env episode counters and the finished-episode history.

    Attributes:
        next_obs: ``(N, *obs_shape)`` float32, preprocessed observation to act on next.
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
        return cls(
            next_obs=agent.preprocess(obs, agent.device),
            memory=agent.initial_memory(n),
            episode_time=torch.zeros(n, dtype=torch.int64, device=agent.device),
            episode_return=np.zeros(n, dtype=np.float64),
        )

    def state_dict(self) -> dict[str, Any]:
        """Everything as tensors / lists (for checkpoints)."""
        return {
            "next_obs": self.next_obs.cpu(),
            "memory": self.memory,
            "episode_time": self.episode_time.cpu(),
            "episode_return": torch.from_numpy(self.episode_return.copy()),
            "global_step": self.global_step,
            "episode_returns": list(self.episode_returns),
            "episode_lengths": list(self.episode_lengths),
            "episode_end_steps": list(self.episode_end_steps),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output."""
        self.next_obs = sd["next_obs"].to(self.next_obs.device)
        self.memory = sd["memory"]
        self.episode_time = sd["episode_time"].to(self.episode_time.device)
        self.episode_return = sd["episode_return"].numpy().copy()
        self.global_step = int(sd["global_step"])
        self.episode_returns = [float(x) for x in sd["episode_returns"]]
        self.episode_lengths = [int(x) for x in sd["episode_lengths"]]
        self.episode_end_steps = [int(x) for x in sd["episode_end_steps"]]


def _select_action(
    agent: PPOAgent, params: torch.Tensor, dist: Any, method: str, kwargs: dict[str, Any]
) -> torch.Tensor:
    """Sample an action: ``basic`` from pi, ``greedy`` its mode, ``temperature``/``topk``."""
    if method == "basic":
        return dist.sample()
    if method == "greedy":
        return params.argmax(-1) if agent.discrete else params
    if method == "temperature":
        temp = float(kwargs.get("temperature", 1.0))
        if not temp > 0:
            raise ConfigError(f"temperature: expected > 0, got {temp}")
        if agent.discrete:
            return torch.distributions.Categorical(logits=params / temp).sample()
        return params + temp * agent.actor_logstd.exp() * torch.randn_like(params)
    if method == "topk":
        if not agent.discrete:
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
) -> RolloutState:
    """Collect ``num_steps`` steps of every env into ``buffer`` and compute GAE returns.

    Per step: act on ``state.next_obs`` (no grad), step the envs, store
    ``(obs, action, logp, value, reward, terminated, truncated)`` with ``final_value =
    V(final_obs)`` for truncated envs and the agent's pre-step hidden state, reset the memory
    of finished envs. At the end: ``buffer.compute_returns(V(next_obs))``.
    """
    kwargs = sampling_kwargs or {}
    memory = agent.start_of_rollout(state.memory)
    obs, ep_time = state.next_obs, state.episode_time
    n = envs.num_envs
    for _ in range(num_steps):
        with torch.no_grad():
            params, value, hidden, new_memory = agent._step(obs, memory, ep_time)
            dist = agent.distribution(params)
            action = _select_action(agent, params, dist, sampling_method, kwargs)
            logp = dist.log_prob(action)
        env_action = agent.env_action(action)
        next_raw, reward, terminated, truncated, info = envs.step(env_action)
        next_obs = agent.preprocess(next_raw, agent.device)
        final_value = None
        boot = truncated & ~terminated
        if boot.any():  # bootstrap from the real successor, not the reset observation
            idx = np.flatnonzero(boot)
            succ = next_obs.clone()
            succ[torch.as_tensor(idx)] = agent.preprocess(
                _stack_final_obs(info["final_obs"], idx), agent.device
            )
            with torch.no_grad():
                final_value = agent.get_value(succ, new_memory, ep_time + 1)
        buffer.add(
            obs, action, logp, value, reward, terminated, truncated,
            final_value=final_value, hidden=hidden,
        )  # fmt: skip
        if trajectory_writer is not None:
            trajectory_writer.accumulate_trajectory(
                next_raw, reward, terminated, truncated, env_action, info
            )
        done = terminated | truncated
        state.episode_return += reward
        state.global_step += n
        ep_time = ep_time + 1
        if done.any():
            for i in np.flatnonzero(done):
                state.episode_returns.append(float(state.episode_return[i]))
                state.episode_lengths.append(int(ep_time[i]))
                state.episode_end_steps.append(state.global_step)
            state.episode_return[done] = 0.0
            done_t = torch.as_tensor(done, device=agent.device)
            ep_time = torch.where(done_t, torch.zeros_like(ep_time), ep_time)
            new_memory = agent.reset_memory(new_memory, done_t)
        obs, memory = next_obs, new_memory
    memory = agent.start_of_rollout(memory)  # bootstrap with the context the next rollout has
    with torch.no_grad():
        last_value = agent.get_value(obs, memory, ep_time)
    buffer.compute_returns(last_value)
    state.next_obs, state.memory, state.episode_time = obs, memory, ep_time
    return state


@dataclass
class TrainStats:
    """What a training run produced (besides the agent).

    Attributes:
        global_step: env steps taken. num_updates: PPO updates done.
        episode_returns / episode_lengths / episode_end_steps: per finished episode, in order.
        updates: per update, the dict returned by ``PPOAgent.learn`` plus ``global_step``, ``sps``.
        steps_per_second: env steps per wall-clock second over the run (rollouts + updates).
        wall_time: seconds of the training loop (this process only, when resumed).
        run_dir: the run folder, or None when nothing was written.
    """

    global_step: int = 0
    num_updates: int = 0
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episode_end_steps: list[int] = field(default_factory=list)
    updates: list[dict[str, float]] = field(default_factory=list)
    steps_per_second: float = 0.0
    wall_time: float = 0.0
    run_dir: Path | None = None

    def mean_return(self, last: int = 20) -> float:
        """Mean return of the last ``last`` finished episodes (nan if none finished)."""
        r = self.episode_returns[-last:]
        return float(np.mean(r)) if r else float("nan")

    def first_step_reaching(self, threshold: float, window: int = 20) -> int | None:
        """First env step at which the mean of the last ``window`` episode returns is
        ``>= threshold`` (None if never); needs at least ``window`` finished episodes."""
        r = np.asarray(self.episode_returns, dtype=np.float64)
        if len(r) < window:
            return None
        means = np.convolve(r, np.ones(window) / window, mode="valid")
        hit = np.flatnonzero(means >= threshold)
        return None if hit.size == 0 else int(self.episode_end_steps[hit[0] + window - 1])


class TrainResult(NamedTuple):
    """``(agent, stats)`` returned by :func:`train_ppo`."""

    agent: PPOAgent
    stats: TrainStats


def train_config_from_parts(
    run_config: RunConfig,
    online_config: OnlineTrainConfig,
    environment_config: EnvironmentConfig,
    model_config: ModelConfig,
) -> TrainConfig:
    """Bundle the four seed-style configs into one :class:`TrainConfig`."""
    parts: dict[str, Any] = {
        "run": run_config,
        "environment": environment_config,
        "online": online_config,
        "agent": "fc",
    }
    if isinstance(model_config, LSTMModelConfig):
        parts.update(agent="lstm", lstm=model_config)
    elif isinstance(model_config, TransformerModelConfig):
        parts.update(agent="transformer", transformer=model_config)
    elif model_config is not None:
        raise ConfigError(
            f"model_config: expected None, LSTMModelConfig or TransformerModelConfig, "
            f"got {type(model_config).__name__}"
        )
    return TrainConfig.model_validate(parts)


def _checkpoint_updates(num_updates: int, num_checkpoints: int) -> set[int]:
    """1-based update numbers after which a checkpoint is written (evenly spaced, last included)."""
    if num_checkpoints <= 0:
        return set()
    k = min(num_checkpoints, num_updates)
    return {int(round(num_updates * (i + 1) / k)) for i in range(k)}


class RunLogger:
    """TensorBoard / W&B scalars, the tqdm bar and the learning-curve plot of one run."""

    def __init__(
        self, cfg: TrainConfig, run_dir: str | Path | None, total_steps: int, state: RolloutState
    ) -> None:
        self.tb: Any = None
        self.wandb: Any = None
        self.bar: Any = None
        self.n_episodes = len(state.episode_returns)  # already logged (resumed runs)
        self.last_step = state.global_step
        if run_dir is not None and cfg.run.track:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                print(
                    "rlstore train: no TensorBoard logs: the tensorboard package is not "
                    "installed (pip install 'rlstore[train]')",
                    file=sys.stderr,
                )
            else:
                self.tb = SummaryWriter(str(Path(run_dir) / "tb"))
        if cfg.run.wandb:
            try:
                import wandb
            except ImportError:
                print(
                    "rlstore train: --wandb ignored: the wandb package is not installed "
                    "(pip install 'rlstore[wandb]'); logging to TensorBoard only.",
                    file=sys.stderr,
                )
            else:
                self.wandb = wandb.init(
                    mode="offline", dir=str(run_dir or "."), project=cfg.run.wandb_project_name,
                    entity=cfg.run.wandb_entity, name=cfg.run.exp_name, config=cfg.to_dict(),
                )  # fmt: skip
        if cfg.run.progress_bar:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total_steps, initial=state.global_step, unit="step", file=sys.stderr,
                dynamic_ncols=True, desc=cfg.environment.env_id,
            )  # fmt: skip

    def _scalar(self, name: str, value: float, step: int) -> None:
        if self.tb is not None:
            self.tb.add_scalar(name, value, step)
        if self.wandb is not None:
            self.wandb.log({name: value, "global_step": step})

    def log_update(self, update: int, state: RolloutState, info: dict[str, float]) -> None:
        """Log the episodes finished since the last call and the update's diagnostics."""
        for i in range(self.n_episodes, len(state.episode_returns)):
            step = state.episode_end_steps[i]
            self._scalar("charts/episodic_return", state.episode_returns[i], step)
            self._scalar("charts/episodic_length", state.episode_lengths[i], step)
        self.n_episodes = len(state.episode_returns)
        step = state.global_step
        for key in ("loss", "pg_loss", "v_loss", "entropy", "approx_kl", "old_approx_kl",
                    "clipfrac", "explained_variance"):  # fmt: skip
            if key in info:
                self._scalar(f"losses/{key}", info[key], step)
        self._scalar("charts/learning_rate", info["lr"], step)
        self._scalar("charts/SPS", info["sps"], step)
        if self.bar is not None:
            recent = state.episode_returns[-20:]
            self.bar.update(step - self.last_step)
            self.bar.set_postfix(
                sps=f"{info['sps']:.0f}",
                ret=f"{np.mean(recent):.1f}" if recent else "-",
                upd=update,
            )
        self.last_step = step

    def close(self, state: RolloutState) -> None:
        """Flush and close the writers and the bar."""
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()

    @staticmethod
    def plot_learning_curve(stats: TrainStats, path: Path) -> None:
        """Episode returns against env steps, with the mean of the last 20 episodes (PNG)."""
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            print(
                "rlstore train: no learning-curve plot: matplotlib is not installed "
                "(pip install 'rlstore[train]')",
                file=sys.stderr,
            )
            return

        fig = Figure(figsize=(7, 4), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        x = np.asarray(stats.episode_end_steps)
        r = np.asarray(stats.episode_returns, dtype=np.float64)
        if r.size:
            ax.plot(x, r, ".", alpha=0.3, markersize=3, label="episode return")
            w = min(20, r.size)
            ax.plot(x[w - 1 :], np.convolve(r, np.ones(w) / w, "valid"), label=f"mean of last {w}")
            ax.legend(loc="lower right")
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episodic return")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(str(path))


def train_ppo(
    run_config: RunConfig,
    online_config: OnlineTrainConfig,
    environment_config: EnvironmentConfig,
    model_config: ModelConfig = None,
    envs: gym.vector.VectorEnv | None = None,
    trajectory_writer: Any = None,
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
) -> TrainResult:
    """Train a PPO agent; returns ``(agent, stats)``.

    Args:
        run_config, online_config, environment_config: see :mod:`rlstore.agents.ppo.config`.
        model_config: None (FC agent), :class:`LSTMModelConfig` or :class:`TransformerModelConfig`.
        envs: a vector env in SAME_STEP autoreset mode with ``online_config.num_envs`` envs
            (default: :func:`make_vector_env`, closed at the end).
        trajectory_writer: optional, receives every step (``accumulate_trajectory``).
        run_dir: folder for TensorBoard logs (if ``run_config.track``), ``checkpoints/`` and
            ``learning_curve.png``; None writes nothing.
        resume: continue from the latest checkpoint in ``run_dir/checkpoints`` (model,
            optimizer, scheduler, buffer RNG, global RNGs, env states, episode history), so the
            run continues the learning curve it would have had without the interruption.

    Returns:
        :class:`TrainResult` ``(agent, stats)``.
    """
    from rlstore.agents.ppo.checkpoint import (
        latest_checkpoint,
        restore_training,
        store_model_checkpoint,
    )

    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    oc = online_config
    threads_before = torch.get_num_threads()
    torch.set_num_threads(run_config.torch_threads)
    set_global_seeds(run_config.seed)
    own_envs = envs is None
    if envs is None:
        envs = make_vector_env(environment_config, oc.num_envs)
    if envs.num_envs != oc.num_envs:
        raise ConfigError(
            f"envs: expected online_config.num_envs = {oc.num_envs} envs, got {envs.num_envs}"
        )
    agent = get_agent(model_config, envs, environment_config, oc).to(run_config.device)
    agent.device = torch.device(run_config.device)
    num_updates = oc.num_updates
    end_lr = oc.end_learning_rate if oc.decay_lr else oc.learning_rate
    optimizer, scheduler = agent.make_optimizer(num_updates, oc.learning_rate, end_lr, oc.adam_eps)
    buffer = RolloutBuffer(
        oc.num_steps, oc.num_envs, gamma=oc.gamma, lam=oc.gae_lambda,
        advantage_normalization="none", device=run_config.device, seed=run_config.seed,
    )  # fmt: skip
    state = RolloutState.start(agent, envs, run_config.seed)
    stats = TrainStats(run_dir=None if run_dir is None else Path(run_dir))
    ckpt_dir = None if run_dir is None else Path(run_dir) / "checkpoints"
    start_update, ckpt_num = 0, 0
    if resume:
        if ckpt_dir is None or (path := latest_checkpoint(ckpt_dir)) is None:
            raise ConfigError(f"resume: no checkpoint found under {ckpt_dir}")
        start_update, ckpt_num, stats.updates = restore_training(
            path, agent, optimizer, scheduler, buffer, state, envs
        )
    logger = RunLogger(cfg, run_dir, num_updates * oc.batch_size, state)
    ckpt_at = _checkpoint_updates(num_updates, oc.num_checkpoints) if ckpt_dir else set()
    t0, step0 = time.perf_counter(), state.global_step
    try:
        for update in range(start_update, num_updates):
            agent.rollout(buffer, oc.num_steps, envs, state, trajectory_writer)
            info = agent.learn(buffer, oc, optimizer, scheduler)
            buffer.reset()
            elapsed = time.perf_counter() - t0
            info.update(global_step=float(state.global_step),
                        sps=(state.global_step - step0) / max(elapsed, 1e-9))  # fmt: skip
            stats.updates.append(info)
            logger.log_update(update + 1, state, info)
            if ckpt_dir is not None and update + 1 in ckpt_at:
                ckpt_num = store_model_checkpoint(
                    agent, oc, run_config, ckpt_num, ckpt_dir, config=cfg, optimizer=optimizer,
                    scheduler=scheduler, buffer=buffer, state=state, envs=envs, update=update + 1,
                    updates_log=stats.updates,
                )  # fmt: skip
    finally:
        stats.wall_time = time.perf_counter() - t0
        logger.close(state)
        torch.set_num_threads(threads_before)
        if own_envs:
            envs.close()
    stats.global_step, stats.num_updates = state.global_step, num_updates
    stats.episode_returns = list(state.episode_returns)
    stats.episode_lengths = list(state.episode_lengths)
    stats.episode_end_steps = list(state.episode_end_steps)
    stats.steps_per_second = (state.global_step - step0) / max(stats.wall_time, 1e-9)
    if run_dir is not None:
        logger.plot_learning_curve(stats, Path(run_dir) / "learning_curve.png")
    return TrainResult(agent, stats)


def ppo_runner(
    run_config: RunConfig,
    environment_config: EnvironmentConfig,
    online_config: OnlineTrainConfig,
    model_config: ModelConfig = None,
    *,
    resume_dir: str | Path | None = None,
) -> TrainResult:
    """Create the run folder ``<runs_dir>/<exp_name>`` (a ``-<k>`` suffix if it exists), write
    the resolved ``config.yaml``, train with logging and checkpoints, return ``(agent, stats)``.

    With ``resume_dir``, the configs are ignored: the run folder's ``config.yaml`` is loaded
    and training continues from its latest checkpoint (see :func:`train_ppo`).
    """
    if resume_dir is not None:
        run_dir = Path(resume_dir)
        from rlstore.agents.ppo.config import load_train_config

        cfg = load_train_config(run_dir / "config.yaml")
        return train_ppo(
            cfg.run, cfg.online, cfg.environment, cfg.selected_model_config(),
            run_dir=run_dir, resume=True,
        )  # fmt: skip
    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    base = Path(run_config.runs_dir) / run_config.exp_name
    run_dir, k = base, 1
    while run_dir.exists():
        run_dir, k = base.with_name(f"{base.name}-{k}"), k + 1
    run_dir.mkdir(parents=True)
    cfg.to_yaml(run_dir / "config.yaml")
    print(f"rlstore train: writing {run_dir}", file=sys.stderr)
    return train_ppo(run_config, online_config, environment_config, model_config, run_dir=run_dir)
