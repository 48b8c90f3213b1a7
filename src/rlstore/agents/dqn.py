"""DQN on rlstore's replay core, readable top to bottom (CleanRL-style, one file).

Double DQN (van Hasselt et al. 2016) by default, an optional dueling head (Wang et al. 2016),
optional proportional prioritized replay (Schaul et al. 2016) and n-step returns; the replay is
rlstore's :class:`~rlstore.ReplayBuffer` (uniform or :class:`~rlstore.samplers.
PrioritizedSampler`) read through :class:`~rlstore.NStepReplay` (``n = 1`` is the one-step
target), never a copy of them. The loop follows Stable-Baselines3's DQN, so RL-Zoo settings mean
the same here (``configs/dqn_CartPole-v1.yaml``):

* the vector env (Gymnasium, ``AutoresetMode.SAME_STEP``) takes ``train_freq`` steps per period
  (``train_freq * num_envs`` transitions), actions epsilon-greedy (uniform random before
  ``learning_starts``), epsilon linear from ``exploration_initial_eps`` to
  ``exploration_final_eps`` over the first ``exploration_fraction`` of the run;
* every ``target_update_interval`` env steps the target net moves to the online net
  (``tau = 1``: a copy; else Polyak averaging);
* after each period, once ``global_step > learning_starts``, ``gradient_steps`` updates of the
  Huber TD loss on ``batch_size`` samples, gradients clipped to ``max_grad_norm``.

Targets (``G``, ``discount`` from :class:`~rlstore.NStepReplay`)::

    y = G + discount * Q_target(s', argmax_a Q(s', a))   # double DQN (else max_a Q_target(s', a))
    discount = gamma**m * (1 - terminated)                # termination: no bootstrap

A truncated episode (time limit) stores its true final observation (``info["final_obs"]``, put
back by :class:`rlstore.vector.TransitionAdapter`) as ``next_obs`` and bootstraps from it;
the reset observation is never a successor. With prioritized replay the loss of sample ``i`` is
weighted by its importance weight ``w_i`` and its priority becomes ``|y_i - Q(s_i, a_i)|``;
beta is annealed from ``per_beta`` to 1 over the run's gradient steps (:class:`~rlstore.
samplers.LinearSchedule`).

Observations: what PPO's preprocessor takes (:mod:`rlstore.agents.obs`: vectors, Discrete as
one-hot, MiniGrid dicts, pixel images); the replay stores them raw (uint8 frames stay uint8)
and the networks read them preprocessed (:class:`DQNAgent`), pixel images through a NatureCNN
(``encoder``, :mod:`rlstore.agents.encoders`).

Example::

    from rlstore.agents.dqn import DQNTrainConfig, train_dqn

    cfg = DQNTrainConfig.from_dict({"run": {"track": False}, "dqn": {"total_timesteps": 50_000}})
    agent, stats = train_dqn(cfg)
    stats.first_step_reaching(475.0)

Checkpoints (``run_dir/checkpoints/checkpoint_NNNN/``, :mod:`rlstore.agents.dqn_checkpoint`):
the networks, optimizer, counters, global RNG states, episode history and what replays the envs'
current episodes, with the replay buffer (and its sampler) saved beside them; ``resume``
continues the run bit for bit on CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn
from typing_extensions import Self

from rlstore.agents.config import AlgorithmConfig, AlgorithmTrainConfig, Encoder, folder_runner
from rlstore.agents.dqn_checkpoint import PREFIX, Progress, restore_checkpoint, save_checkpoint
from rlstore.agents.encoders import ObsEncoder, build_encoder
from rlstore.agents.envs import make_env, make_vector_env
from rlstore.agents.obs import get_obs_preprocessor, get_obs_shape, numeric_obs
from rlstore.agents.run import TrainingRun, TrainStats, adam, evaluation_due
from rlstore.agents.run_checkpoint import checkpoint_path, checkpoint_schedule, latest_checkpoint
from rlstore.buffers.nstep import NStepBatch, NStepReplay
from rlstore.buffers.replay import ReplayBuffer
from rlstore.config import PositiveInt
from rlstore.errors import ConfigError, SpecError
from rlstore.samplers import LinearSchedule
from rlstore.vector import TransitionAdapter

__all__ = [
    "CLI_KEYS",
    "DEFAULT_CONFIGS",
    "DQNAgent",
    "DQNConfig",
    "DQNTrainConfig",
    "QLearningConfig",
    "QNetwork",
    "load_config",
    "runner",
    "td_step",
    "td_targets",
    "train_dqn",
]

DEFAULT_CONFIGS: dict[str, str] = {
    "CartPole-v1": "dqn_CartPole-v1.yaml",
    "MountainCar-v0": "dqn_MountainCar-v0.yaml",
    "CliffWalking-v1": "dqn_CliffWalking-v1.yaml",
    "Taxi-v4": "dqn_Taxi-v4.yaml",
}
"""Env id -> packaged config file in ``rlstore/configs/``."""


# ----------------------------------------------------------------- configuration


class QLearningConfig(AlgorithmConfig):
    """The hyper-parameters DQN and Ape-X share (their Q-network, replay and clip); the
    prioritized-replay ones apply to DQN with ``prioritized``, to Ape-X always."""

    buffer_size: int = Field(100_000, ge=1)
    """Replay capacity in transitions (Ape-X: over all shards)."""
    batch_size: int = Field(64, ge=1)
    """Transitions per gradient step."""
    max_grad_norm: float = Field(10.0, gt=0)
    """Global gradient-norm clip."""
    hidden_sizes: list[PositiveInt] = Field(default_factory=lambda: [256, 256], min_length=1)
    """Widths of the Q-network's ReLU layers (after the encoder's features)."""
    encoder: Encoder = "auto"
    """The Q-network's observation encoder (:mod:`rlstore.agents.encoders`): ``cnn``, a
    NatureCNN (512 ReLU features, CleanRL's ``dqn_atari.py``) before the ``hidden_sizes``
    layers; ``mlp``, the flattened observation; ``auto``: ``cnn`` for pixel images of at
    least 36x36 (MiniGrid with ``img_obs``), else ``mlp``. Runs written before this field
    existed used ``mlp``."""
    dueling: bool = False
    """Dueling head: ``Q = V + A - mean(A)``."""
    double_q: bool = True
    """Double DQN: the online net picks the next action, the target net values it (Ape-X: in
    the learner and the initial priorities)."""
    per_alpha: float = Field(0.6, ge=0)
    """Priority exponent (prioritized replay)."""
    per_beta: float = Field(0.4, ge=0, le=1)
    """Initial importance exponent, annealed linearly to 1 over the run (prioritized replay)."""
    per_eps: float = Field(1e-6, gt=0)
    """Added to every ``|TD error|`` so that no transition gets probability 0."""

    legacy_defaults: ClassVar[dict[str, Any]] = {"encoder": "mlp"}

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.batch_size > self.buffer_size:
            raise ValueError(
                f"batch_size: expected <= buffer_size ({self.buffer_size}), got {self.batch_size}"
            )
        return self


class DQNConfig(QLearningConfig):
    """DQN hyper-parameters (after :class:`QLearningConfig`'s; defaults: RL-Zoo's DQN on
    CartPole-v1, SB3 semantics); strict types: no strings or bools for numbers, no floats for
    ints."""

    total_timesteps: int = Field(50_000, ge=1)
    """Env steps (summed over envs); rounded down to whole periods of ``train_freq * num_envs``
    (at least one)."""
    num_envs: int = Field(1, ge=1)
    """Vectorized environments."""
    learning_rate: float = Field(2.3e-3, gt=0)
    """Adam learning rate (constant)."""
    learning_starts: int = Field(1000, ge=0)
    """Env steps of uniformly random actions before the first update."""
    gamma: float = Field(0.99, ge=0, le=1)
    """Discount factor."""
    train_freq: int = Field(256, ge=1)
    """Vector-env steps per period (collection between two training phases)."""
    gradient_steps: int = Field(128, ge=1)
    """Gradient steps after each period."""
    target_update_interval: int = Field(10, ge=1)
    """Env steps between target updates (every ``max(interval // num_envs, 1)`` vector steps)."""
    tau: float = Field(1.0, gt=0, le=1)
    """Target update ``target <- tau * online + (1 - tau) * target``; 1 copies."""
    exploration_fraction: float = Field(0.16, ge=0, le=1)
    """Fraction of ``total_timesteps`` over which epsilon decays linearly."""
    exploration_initial_eps: float = Field(1.0, ge=0, le=1)
    """Epsilon at step 0."""
    exploration_final_eps: float = Field(0.04, ge=0, le=1)
    """Epsilon after the decay."""
    n_step: int = Field(1, ge=1)
    """n-step returns (:class:`~rlstore.NStepReplay`); 1: one-step targets."""
    prioritized: bool = False
    """Proportional prioritized replay with importance weights in the loss."""
    num_checkpoints: int = Field(5, ge=0)
    """Checkpoints over the run (evenly spaced periods, the last included); 0: none."""

    @property
    def num_periods(self) -> int:
        """Collection + training periods of the run."""
        return max(1, self.total_timesteps // (self.train_freq * self.num_envs))

    @property
    def num_training_periods(self) -> int:
        """Periods that end with gradient steps: those after which more than ``learning_starts``
        env steps and at least ``batch_size`` transitions were collected."""
        per, need = self.train_freq * self.num_envs, max(self.learning_starts + 1, self.batch_size)
        return max(0, self.num_periods - (-(-need // per) - 1))


class DQNTrainConfig(AlgorithmTrainConfig):
    """A whole DQN run: ``run``, ``environment`` (Discrete actions; observations: see
    :class:`DQNAgent`), ``dqn``."""

    dqn: DQNConfig = Field(default_factory=DQNConfig)
    """DQN hyper-parameters."""


load_config = DQNTrainConfig.from_file
CLI_KEYS = DQNTrainConfig.cli_keys()
"""``rlstore train`` flags -> keys of this config (None: refused for DQN)."""


# ----------------------------------------------------------------- networks


class QNetwork(nn.Module):
    """``encoder`` then an MLP: ``obs (B, *obs_shape) -> Q (B, num_actions)``, with an optional
    dueling head; ``obs`` is preprocessed (:attr:`DQNAgent.preprocess`)."""

    def __init__(self, encoder: ObsEncoder, num_actions: int, hidden: list[int], dueling: bool):
        super().__init__()
        obs_dim = encoder.out_dim
        self.encoder = encoder if encoder.kind == "cnn" else None  # mlp: flatten, below
        layers: list[nn.Module] = []
        for width in hidden:
            layers += [nn.Linear(obs_dim, width), nn.ReLU()]
            obs_dim = width
        self.body = nn.Sequential(*layers)
        self.advantage = nn.Linear(obs_dim, num_actions)
        self.value = nn.Linear(obs_dim, 1) if dueling else None
        self._hidden = tuple(m for m in layers if isinstance(m, nn.Linear))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # ``body`` then the heads, as functional calls on the layers' parameters: the same ops
        # without nn.Module's call and attribute machinery (~15 us of a forward on one thread)
        h = obs.flatten(1).float() if self.encoder is None else self.encoder(obs)
        for layer in self._hidden:
            h = F.relu(_linear(layer, h))
        a = _linear(self.advantage, h)
        return a if self.value is None else _linear(self.value, h) + a - a.mean(1, keepdim=True)


def _linear(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``layer(x)`` for an ``nn.Linear``, its parameters read from ``_parameters`` directly."""
    p = layer._parameters
    return F.linear(x, p["weight"], p["bias"])  # type: ignore[arg-type]  # set by nn.Linear


class EnvInfo(NamedTuple):
    """What an agent knows of its env (``agent.env.spec.id``, as velora's ``warm`` reads it)."""

    spec: Any
    observation_space: gym.Space
    action_space: gym.Space


class DQNAgent(nn.Module):
    """The online Q-network ``q``, its target ``target`` and the current exploration rate.

    Observations: every space PPO's preprocessor takes (:mod:`rlstore.agents.obs`): ``Box``
    vectors and pixel images, ``Discrete`` (one-hot), ``MultiDiscrete``, MiniGrid dicts and
    one-level dicts of those. The replay stores raw observations (:func:`~rlstore.agents.obs.
    numeric_obs`: uint8 frames stay uint8); the networks ``q`` and ``target`` read
    ``preprocess(obs)`` through the encoder ``cfg.encoder`` gives for the space.

    ``agent(obs)`` gives Q-values of raw observations; :meth:`predict` acts (velora's ``warm``
    calls it); ``state_dict()`` holds both networks.
    """

    def __init__(self, env: EnvInfo, cfg: DQNConfig):
        super().__init__()
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(act_space, gym.spaces.Discrete):
            raise ConfigError(f"environment: DQN needs Discrete actions, got {act_space}")
        self.env, self.num_actions = env, int(act_space.n)
        self.action_start = int(act_space.start)  # env action = Q-value index + start
        _check_obs_space(obs_space)
        self.preprocess = get_obs_preprocessor(obs_space)
        self.q, self.target = (
            QNetwork(build_encoder(obs_space, cfg.encoder), self.num_actions, cfg.hidden_sizes,
                     cfg.dueling)
            for _ in range(2)
        )  # fmt: skip
        self.target.load_state_dict(self.q.state_dict())
        self.target.requires_grad_(False)
        self.epsilon = cfg.exploration_initial_eps

    def forward(self, obs: Any) -> torch.Tensor:
        """Q-values ``(N, num_actions)`` of raw observations ``(N, ...)`` (or a dict of them)."""
        return self.q(self.preprocess(obs, self.device))  # type: ignore[no-any-return]

    @torch.no_grad()
    def explore(self, obs: Any, epsilon: float) -> torch.Tensor:
        """Epsilon-greedy Q-value indices ``(N,)`` int64 (env actions minus ``action_start``,
        what the replay stores) for raw observations ``(N, ...)`` (or a dict of
        them), drawn from torch's global RNG (the Q-network runs only when some env acts
        greedily)."""
        x = self.preprocess(obs, self.device)
        use_random = torch.rand(len(x), device=x.device) < epsilon
        random = torch.randint(self.num_actions, (len(x),), device=x.device)
        if bool(use_random.all()):
            return random
        return torch.where(use_random, random, self.q(x).argmax(1))

    def predict(
        self, states: torch.Tensor, hidden: Any = None, train_mode: bool = False
    ) -> tuple[torch.Tensor, Any]:
        """velora's agent API: env actions for a batch of states (epsilon-greedy at the current
        ``epsilon`` when ``train_mode``, greedy otherwise); ``hidden`` is passed through."""
        eps = self.epsilon if train_mode else 0.0
        return self.explore(states, eps) + self.action_start, hidden

    @torch.no_grad()
    def act(self, obs: Any) -> np.int64:
        """Greedy env action for ONE raw observation (for :func:`rlstore.agents.run.evaluate`),
        a numpy scalar (hashable: toy-text envs index tables with it)."""
        q = self.q(self.preprocess(obs, self.device)[None])[0]
        return np.int64(q.argmax().item() + self.action_start)

    @property
    def device(self) -> torch.device:
        """Where the networks live."""
        return self.q.advantage.weight.device

    @torch.no_grad()
    def update_target(self, tau: float) -> None:
        """``target <- tau * q + (1 - tau) * target`` (a copy when ``tau == 1``)."""
        for t, p in zip(self.target.parameters(), self.q.parameters(), strict=True):
            t.copy_(p) if tau == 1.0 else t.lerp_(p, tau)


def _check_obs_space(space: gym.Space) -> None:
    """ConfigError naming ``space`` unless DQN takes it (see :class:`DQNAgent`)."""
    try:
        get_obs_shape(space)
    except SpecError as err:
        raise ConfigError(f"environment: DQN cannot take this observation space: {err}") from None


def td_targets(agent: DQNAgent, batch: NStepBatch, double_q: bool) -> torch.Tensor:
    """``reward + discount * Q_target(next_obs, a*)`` of an n-step batch ``(B,)`` float32
    (raw observations, preprocessed here); ``a*`` from the online net (double DQN) or the
    target net."""
    with torch.no_grad():
        next_obs = agent.preprocess(batch.next_obs, agent.device)
        next_q = agent.target(next_obs)
        if double_q:
            best = agent.q(next_obs).argmax(1, keepdim=True)
            next_v = next_q.gather(1, best).squeeze(1)
        else:
            next_v = next_q.max(1).values
        return batch.reward.float() + batch.discount.float() * next_v


# ----------------------------------------------------------------- training


def train_dqn(
    cfg: DQNTrainConfig, *, run_dir: str | Path | None = None, resume: bool = False
) -> tuple[DQNAgent, TrainStats]:
    """Train DQN; returns ``(agent, stats)``.

    Args:
        cfg: the run's config.
        run_dir: folder for TensorBoard logs (``run.track``), ``checkpoints/`` and
            ``learning_curve.png``; None writes nothing.
        resume: continue from the latest checkpoint in ``run_dir/checkpoints`` (networks,
            optimizer, replay buffer with its sampler, counters, RNGs, env episodes).
    """
    rc, dc = cfg.run, cfg.dqn
    with TrainingRun(rc, run_dir) as run:
        envs = make_vector_env(cfg.environment, dc.num_envs)
        try:
            adapter = TransitionAdapter.from_env(envs)
            agent = DQNAgent(
                EnvInfo(gym.spec(cfg.environment.env_id), envs.single_observation_space,
                        envs.single_action_space), dc,
            ).to(rc.device)  # fmt: skip
            optimizer = adam(agent.q.parameters(), dc.learning_rate)
            num_periods = dc.num_periods
            sampler = None  # uniform; prioritized: beta annealed to 1 over the gradient steps
            if dc.prioritized:
                steps = max(1, dc.num_training_periods * dc.gradient_steps)
                beta = {"start": dc.per_beta, "end": 1.0, "steps": steps}
                sampler = {"kind": "prioritized", "alpha": dc.per_alpha, "beta": beta,
                           "eps": dc.per_eps}  # fmt: skip
            buffer = ReplayBuffer(dc.buffer_size, num_envs=dc.num_envs, device=rc.device,
                                  seed=rc.seed, sampler=sampler)  # fmt: skip
            replay = NStepReplay(buffer, n=dc.n_step, gamma=dc.gamma)
            epsilon = LinearSchedule(
                dc.exploration_initial_eps, dc.exploration_final_eps,
                max(1, int(dc.exploration_fraction * dc.total_timesteps)),
            )  # fmt: skip
            obs = numeric_obs(envs.reset(seed=rc.seed)[0])
            n, ckpt_dir = dc.num_envs, run.ckpt_dir
            prog = Progress(0, 0, 0, 0, obs, np.zeros(n), np.zeros(n, np.int64))
            if resume:
                if ckpt_dir is None or (path := latest_checkpoint(ckpt_dir, PREFIX)) is None:
                    raise ConfigError(f"resume: no DQN checkpoint found under {ckpt_dir}")
                prog = restore_checkpoint(path, cfg, agent, optimizer, buffer, envs, run.stats)
            run.start(num_periods * dc.train_freq * n, prog.global_step,
                      f"DQN {cfg.environment.env_id}", cfg.to_dict())  # fmt: skip
            ckpt_at = checkpoint_schedule(num_periods, dc.num_checkpoints) if ckpt_dir else set()
            target_every = max(dc.target_update_interval // n, 1)
            synced = -1  # `updates` when the target last copied the online net (tau = 1)
            obs, ep_ret, ep_len = prog.obs, prog.episode_return.copy(), prog.episode_length.copy()
            step, updates, ckpt_num = prog.global_step, prog.num_updates, prog.checkpoint_num
            for period in range(prog.period, num_periods):
                # ---- collect train_freq vector steps
                for _ in range(dc.train_freq):
                    eps = 1.0 if step < dc.learning_starts else epsilon(step)
                    agent.epsilon = eps
                    actions = agent.explore(obs, eps).cpu().numpy()
                    next_obs, reward, term, trunc, info = envs.step(actions + agent.action_start)
                    next_obs = numeric_obs(next_obs)  # what the replay stores: no mission text
                    tr = adapter.step(obs, actions, reward, term, trunc, info, next_obs)
                    buffer.add(tr.obs, tr.action, tr.reward, tr.next_obs, tr.terminated,
                               tr.truncated)  # fmt: skip
                    obs, step = next_obs, step + n
                    ep_ret += reward
                    ep_len += 1
                    for i in np.flatnonzero(term | trunc):
                        run.episode(float(ep_ret[i]), int(ep_len[i]), step)
                        ep_ret[i], ep_len[i] = 0.0, 0
                    # a copy (tau = 1) of a net unchanged since the last copy changes nothing
                    if (step // n) % target_every == 0 and (dc.tau < 1.0 or synced != updates):
                        agent.update_target(dc.tau)
                        synced = updates
                # ---- train gradient_steps on replayed batches
                row: dict[str, float] = {"global_step": float(step), "epsilon": agent.epsilon}
                if step > dc.learning_starts and len(buffer) >= dc.batch_size:
                    row.update(_train(agent, optimizer, replay, dc))
                    updates += dc.gradient_steps
                row["sps"] = run.sps(step)
                scalars = {f"losses/{k}": v for k, v in row.items() if k in ("td_loss", "q_values")}
                run.update(step, row, {**scalars, "charts/epsilon": agent.epsilon,
                                       "charts/SPS": row["sps"]})  # fmt: skip
                # ---- evaluate and checkpoint
                if evaluation_due(rc, step, step - dc.train_freq * n, period + 1 == num_periods):
                    run.evaluate(step, agent.act, lambda render: make_env(cfg.environment, render))
                if ckpt_dir is not None and period + 1 in ckpt_at:
                    prog = Progress(period + 1, step, updates, ckpt_num, obs, ep_ret, ep_len)
                    save_checkpoint(checkpoint_path(ckpt_dir, ckpt_num), cfg, prog, agent,
                                    optimizer, buffer, envs, run.stats)  # fmt: skip
                    ckpt_num += 1
        finally:
            envs.close()
    title = f"DQN on {cfg.environment.env_id}, seed {rc.seed}"
    return agent, run.finish(step, updates, title)


def td_step(
    agent: DQNAgent,
    optimizer: torch.optim.Optimizer,
    batch: NStepBatch,
    double_q: bool,
    max_grad_norm: float,
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """One gradient step of the importance-weighted Huber TD loss on an n-step batch (DQN's
    and Ape-X's learner; ``optimizer`` holds ``agent.q``'s parameters, whose gradients are
    clipped to ``max_grad_norm``); returns the loss, the mean Q-value and ``|y - Q(s, a)|``
    ``(B,)`` (the new priorities)."""
    target = td_targets(agent, batch, double_q)
    q = agent(batch.obs).gather(1, batch.action.long().view(-1, 1)).squeeze(1)
    loss = (batch.weights * F.smooth_l1_loss(q, target, reduction="none")).mean()
    optimizer.zero_grad()
    loss.backward()
    # nn.utils.clip_grad_norm_'s own ops, without its per-call regrouping (~20 us a step)
    grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, torch.clamp(max_grad_norm / (norm + 1e-6), max=1.0))
    optimizer.step()
    q = q.detach()
    return loss.detach(), q.mean(), (q - target).abs().cpu().numpy()


def _train(
    agent: DQNAgent, optimizer: torch.optim.Optimizer, replay: NStepReplay, dc: DQNConfig
) -> dict[str, float]:
    """``dc.gradient_steps`` TD updates; returns the mean loss and Q-value."""
    losses, qs = [], []
    for _ in range(dc.gradient_steps):
        batch = replay.sample(dc.batch_size)
        loss, q, td = td_step(agent, optimizer, batch, dc.double_q, dc.max_grad_norm)
        losses.append(loss)
        qs.append(q)
        if dc.prioritized:
            replay.buffer.update_priorities(batch.indices.cpu().numpy(), td)
    return {"td_loss": torch.stack(losses).mean().item(), "q_values": torch.stack(qs).mean().item()}


# ----------------------------------------------------------------- entry point


runner = folder_runner(train_dqn)
