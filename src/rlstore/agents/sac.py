"""Soft Actor-Critic (Haarnoja et al. 2018) for continuous (Box) actions, top to bottom.

CleanRL-style, in reading order: config -> networks -> one update -> the training loop (what a
checkpoint holds is in :mod:`rlstore.agents.sac_checkpoint`).

* **Policy**: a tanh-squashed diagonal Gaussian, with the exact log-density
  (:func:`squashed_log_prob`: the change of variables, no epsilon). Like Stable-Baselines3, the
  learner works in normalized actions ``tanh(u)`` in ``[-1, 1]`` (critic inputs, log-probs,
  hence the entropy target): the env gets ``bias + scale * tanh(u)`` in its Box bounds and the
  replay holds env actions, normalized when sampled (:meth:`Actor.normalize`). The same run on
  bounds ``[0, 10]`` or ``[-1, 1]`` learns the same thing.
* **Critics**: twin Q networks as one batched MLP (:class:`TwinQ`), one Adam step for both;
  Polyak-averaged targets every ``target_update_interval`` updates.
* **Target** (:func:`td_target`): ``r + gamma * (1 - terminated) * (min_k Q'_k(s', a') -
  alpha log pi(a'|s'))``; a truncated episode bootstraps from its true final observation
  (put back by :class:`rlstore.vector.TransitionAdapter`), a terminated one does not.
* **Entropy**: ``alpha = exp(log_alpha)`` tuned to the target entropy ``-|A|`` with the loss
  ``-log_alpha * (log pi + target_entropy)`` (Stable-Baselines3's form), or fixed.
* **Replay**: :class:`rlstore.ReplayBuffer` (uniform, seeded), saved beside the networks.
* **Exploration**: the policy's own samples, plus optionally Ornstein-Uhlenbeck action noise
  (``ou_noise_std``, :func:`ou_noise`; SB3's ``action_noise``), which MountainCarContinuous-v0
  needs.

The update order follows Stable-Baselines3's SAC (alpha, critics, actor, then targets), and the
first ``learning_starts`` steps take uniform random actions, so the same hyperparameters mean
the same algorithm (``benchmarks/bench_sac.py`` compares both in one run).

Programmatic use::

    from rlstore.agents.sac import SACTrainConfig, train_sac

    cfg = SACTrainConfig.from_dict({"run": {"seed": 1, "track": False},
                                    "sac": {"total_timesteps": 20_000, "learning_rate": 1e-3}})
    agent, stats = train_sac(cfg)          # run_dir=None: writes nothing
    stats.evaluations[-1]                  # (env step, mean deterministic evaluation return)

A run folder (``run_dir``) gets TensorBoard logs, ``learning_curve.png`` and checkpoints
(:mod:`rlstore.agents.sac_checkpoint`); ``resume=True`` continues the latest one bit for bit
on CPU.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from rlstore.agents.config import AlgorithmConfig, AlgorithmTrainConfig, folder_runner
from rlstore.agents.envs import check_env_id, make_env, make_vector_env
from rlstore.agents.run import TrainingRun, TrainStats, adam, evaluation_due
from rlstore.agents.run_checkpoint import checkpoint_schedule, latest_checkpoint
from rlstore.agents.sac_checkpoint import PREFIX, LoopState, restore_checkpoint, save_checkpoint
from rlstore.buffers.replay import ReplayBatch, ReplayBuffer
from rlstore.errors import ConfigError
from rlstore.vector import TransitionAdapter

__all__ = [
    "CLI_KEYS",
    "DEFAULT_CONFIGS",
    "SACConfig",
    "SACTrainConfig",
    "SACAgent",
    "load_config",
    "runner",
]
__all__ += ["ou_noise", "squashed_log_prob", "td_target", "train_sac"]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # Stable-Baselines3's clamp of the policy's log std
OU_THETA, OU_DT = 0.15, 0.01  # Stable-Baselines3's OrnsteinUhlenbeckActionNoise defaults


# ============================================================================ config


class SACConfig(AlgorithmConfig):
    """SAC hyper-parameters (defaults: Stable-Baselines3's ``SAC``)."""

    total_timesteps: int = Field(20_000, ge=1)
    """Environment steps (summed over envs), rounded up to whole vector steps."""
    num_envs: int = Field(1, ge=1)
    """Vectorized environments N (SB3 and the RL Zoo use 1)."""
    buffer_size: int = Field(1_000_000, ge=1)
    """Replay capacity in transitions."""
    learning_starts: int = Field(100, ge=0)
    """Steps of uniform random actions before the policy acts; updates start after them (and
    once the buffer holds ``batch_size`` transitions)."""
    batch_size: int = Field(256, ge=1)
    """Transitions per gradient step."""
    learning_rate: float = Field(3e-4, gt=0)
    """Adam learning rate of the actor, the critics and the entropy coefficient."""
    gamma: float = Field(0.99, ge=0, le=1)
    """Discount factor."""
    tau: float = Field(0.005, gt=0, le=1)
    """Polyak coefficient of the target critics."""
    train_freq: int = Field(1, ge=1)
    """Vector steps between training phases."""
    gradient_steps: int = Field(1, ge=1)
    """Gradient steps per training phase."""
    target_update_interval: int = Field(1, ge=1)
    """Gradient steps between Polyak updates of the target critics."""
    ent_coef: float | Literal["auto"] = "auto"
    """Entropy coefficient alpha: ``"auto"`` tunes it to ``target_entropy``, a number > 0
    fixes it."""
    init_ent_coef: float = Field(1.0, gt=0)
    """Initial alpha when ``ent_coef`` is ``"auto"``."""
    target_entropy: float | Literal["auto"] = "auto"
    """Target entropy of the policy; ``"auto"`` is ``-|A|`` (minus the action dimension)."""
    hidden_sizes: list[int] = Field(default_factory=lambda: [256, 256], min_length=1)
    """Hidden layer widths of the actor and of each critic."""
    ou_noise_std: float = Field(0.0, ge=0, allow_inf_nan=False)
    """sigma of Ornstein-Uhlenbeck noise added to the policy's actions while collecting, in
    units of half the action range (SB3's ``action_noise``, :func:`ou_noise`; reset to 0 when
    an episode ends; the noisy action, clipped to the bounds, is stored); 0: none. Temporally
    correlated noise is what explores MountainCarContinuous-v0."""
    log_freq: int = Field(1_000, ge=1)
    """Env steps between logged update diagnostics (losses, alpha, steps/s)."""
    num_checkpoints: int = Field(5, ge=0)
    """Checkpoints over the run (evenly spaced, the last at the end); 0: none."""

    @model_validator(mode="after")
    def _check(self) -> SACConfig:
        if self.ent_coef != "auto" and not self.ent_coef > 0:
            raise ValueError(f"ent_coef: expected 'auto' or a number > 0, got {self.ent_coef}")
        if any(h < 1 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes: expected widths >= 1, got {self.hidden_sizes}")
        if self.batch_size > self.buffer_size:
            raise ValueError(
                f"batch_size: expected <= buffer_size ({self.buffer_size}), got {self.batch_size}"
            )
        return self


class SACTrainConfig(AlgorithmTrainConfig):
    """A whole SAC run: ``run``, ``environment`` (continuous Box actions), ``sac``."""

    sac: SACConfig = Field(default_factory=SACConfig)
    """SAC hyper-parameters."""

    default_env_id: ClassVar[str] = "Pendulum-v1"


DEFAULT_CONFIGS: dict[str, str] = {
    "Pendulum-v1": "sac_Pendulum-v1.yaml",
    "MountainCarContinuous-v0": "sac_MountainCarContinuous-v0.yaml",
}
"""Env id -> packaged config file in ``rlstore/configs/``."""

load_config = SACTrainConfig.from_file
CLI_KEYS = SACTrainConfig.cli_keys()
"""``rlstore train`` flags -> keys of this config (None: refused for SAC)."""


# ============================================================================ networks


def squashed_log_prob(u: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Log-density of the normalized action ``a = tanh(u)`` where ``u ~ N(mean, exp(log_std)^2)``
    (Stable-Baselines3's, whose entropy target ``-|A|`` is meant for actions in ``[-1, 1]``: the
    env's bounds do not change it).

    Args:
        u: pre-squash sample ``(B, A)``; mean, log_std: ``(B, A)``.

    Returns:
        ``(B,)``: ``sum_i [log N(u_i; mean_i, std_i) - log(1 - tanh(u_i)^2)]``,
        with ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``.
    """
    z = (u - mean) * torch.exp(-log_std)
    log_normal = -0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)
    log_dtanh = 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    return (log_normal - log_dtanh).sum(-1)


class Actor(nn.Module):
    """``obs -> (mean, log_std)`` of the pre-squash Gaussian (SB3's shape: a shared MLP, two
    linear heads, log std clamped to ``[-20, 2]``), squashed into ``[-1, 1]`` (normalized
    actions), ``bias + scale * a`` in the env's ``[low, high]``."""

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], low: Any, high: Any):
        super().__init__()
        sizes = [obs_dim, *hidden]
        self.trunk = nn.Sequential(
            *(m for i, o in zip(sizes, hidden, strict=False) for m in (nn.Linear(i, o), nn.ReLU()))
        )
        self.mean = nn.Linear(hidden[-1], act_dim)
        self.log_std = nn.Linear(hidden[-1], act_dim)
        lo, hi = torch.as_tensor(low).float(), torch.as_tensor(high).float()
        self.register_buffer("scale", (hi - lo) / 2)
        self.register_buffer("bias", (hi + lo) / 2)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(obs)
        return self.mean(h), self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized normalized action ``(B, A)`` in ``[-1, 1]`` and its log-prob
        ``(B,)`` (:func:`squashed_log_prob`)."""
        mean, log_std = self(obs)
        u = mean + log_std.exp() * torch.randn_like(mean)
        return torch.tanh(u), squashed_log_prob(u, mean, log_std)

    def mean_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic env action ``bias + scale * tanh(mean)`` (evaluation)."""
        return self.to_env(torch.tanh(self(obs)[0]))

    def to_env(self, action: torch.Tensor) -> torch.Tensor:
        """Normalized actions ``(B, A)`` in ``[-1, 1]`` -> the env's ``bias + scale * action``."""
        return self.bias + self.scale * action

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions ``(B, A)`` (the replay's) -> ``[-1, 1]``: ``(action - bias) / scale``."""
        return (action - self.bias) / self.scale


class TwinQ(nn.Module):
    """``k`` Q networks ``Q_k(s, a)`` as one batched MLP: weights ``(k, in, out)``, one
    ``baddbmm`` per layer for all of them. Initialized like ``nn.Linear`` (uniform in
    ``+-1/sqrt(fan_in)``), each network independently."""

    def __init__(self, in_dim: int, hidden: list[int], k: int = 2):
        super().__init__()
        sizes = [in_dim, *hidden, 1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(
                nn.Parameter(torch.empty(k, fan_in, fan_out).uniform_(-bound, bound))
            )
            self.biases.append(nn.Parameter(torch.empty(k, 1, fan_out).uniform_(-bound, bound)))
        self.k = k

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor, detach: bool = False
    ) -> torch.Tensor:
        """``(k, B)`` Q-values; ``detach`` stops gradients into the critic (the actor's loss)."""
        x = torch.cat([obs, action], -1).expand(self.k, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            if detach:
                w, b = w.detach(), b.detach()
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = F.relu(x)
        return x.squeeze(-1)


class SACAgent(nn.Module):
    """Actor, twin critics, their targets and ``log_alpha`` for one Box env.

    Attributes:
        actor, critic, critic_target: the networks; log_alpha: scalar parameter (tuned when
            ``ent_coef == "auto"``); target_entropy: float.
        env: ``SimpleNamespace(spec=EnvSpec)``, what velora's ``warm`` reads (``env.spec.id``).
    """

    def __init__(self, obs_space: gym.Space, act_space: gym.Space, cfg: SACConfig, env_id: str):
        super().__init__()
        for name, space in (("observation", obs_space), ("action", act_space)):
            if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
                raise ConfigError(
                    f"environment.env_id: SAC needs a 1-D Box {name} space, {env_id!r} has {space}"
                )
        low, high = act_space.low, act_space.high  # type: ignore[attr-defined]
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(low < high)):
            raise ConfigError(
                f"environment.env_id: SAC needs finite action bounds low < high, {env_id!r} has "
                f"low={low.tolist()}, high={high.tolist()}"
            )
        obs_dim, act_dim = obs_space.shape[0], act_space.shape[0]  # type: ignore[index]
        self.actor = Actor(obs_dim, act_dim, cfg.hidden_sizes, low, high)
        self.critic = TwinQ(obs_dim + act_dim, cfg.hidden_sizes)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        auto = cfg.ent_coef == "auto"
        alpha0 = cfg.init_ent_coef if auto else float(cfg.ent_coef)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha0)), requires_grad=auto)
        te = cfg.target_entropy
        self.target_entropy = -float(act_dim) if te == "auto" else float(te)
        self.env = SimpleNamespace(spec=gym.spec(env_id))
        self.action_space = act_space

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """Env actions ``(N, A)`` for observations ``(N, obs_dim)``: sampled, or the mean."""
        return self.env_action(self.predict(obs, train_mode=not deterministic)[0].cpu().numpy())

    def env_action(self, action: np.ndarray) -> np.ndarray:
        """``action`` clipped to the Box bounds, in the space's dtype: ``bias + scale * tanh``
        rounds outside them by an ulp where tanh saturates (or the bounds are float64)."""
        space = self.action_space
        return np.clip(action, space.low, space.high).astype(space.dtype)  # type: ignore[attr-defined]

    @torch.no_grad()
    def predict(
        self, states: torch.Tensor | np.ndarray, hidden: Any = None, train_mode: bool = True
    ) -> tuple[torch.Tensor, None]:
        """velora's agent API (``ReplayBuffer.warm``): sampled actions when ``train_mode``,
        else the mean action; SAC is feed-forward, so the hidden state stays ``None``."""
        x = torch.as_tensor(states, dtype=torch.float32, device=self.log_alpha.device)
        a = self.actor.to_env(self.actor.sample(x)[0]) if train_mode else self.actor.mean_action(x)
        return a, None


def ou_noise(prev: np.ndarray, sigma: float, z: np.ndarray) -> np.ndarray:
    """One step of Ornstein-Uhlenbeck noise (mean 0, SB3's ``OrnsteinUhlenbeckActionNoise``):
    ``x' = x - theta * dt * x + sigma * sqrt(dt) * z`` with ``theta = 0.15``, ``dt = 0.01``.

    Args:
        prev: the previous noise ``x`` ``(N, A)`` (0 at an episode's start); sigma: >= 0;
        z: standard normal draws ``(N, A)``.
    """
    return prev - OU_THETA * OU_DT * prev + sigma * math.sqrt(OU_DT) * z


# ============================================================================ one update


def td_target(
    agent: SACAgent, batch: ReplayBatch, alpha: torch.Tensor, gamma: float
) -> torch.Tensor:
    """``y = r + gamma * (1 - terminated) * (min_k Q'_k(s', a') - alpha * log pi(a'|s'))``,
    ``a' ~ pi(s')`` normalized, ``(B,)``. ``batch.next_obs`` is the true successor (the final
    observation of a truncated episode): truncation bootstraps, termination does not."""
    with torch.no_grad():
        next_obs = batch.next_obs.float()  # type: ignore[union-attr]  # the replay keeps int obs
        next_action, next_log_prob = agent.actor.sample(next_obs)
        next_q = agent.critic_target(next_obs, next_action).min(0).values
        not_done = (~batch.terminated).to(next_q.dtype)
        return batch.reward + gamma * not_done * (next_q - alpha * next_log_prob)


def sac_update(
    agent: SACAgent, batch: ReplayBatch, opts: dict[str, torch.optim.Optimizer], cfg: SACConfig
) -> dict[str, torch.Tensor]:
    """One gradient step of alpha, the critics and the actor (SB3's order); returns detached
    diagnostics (tensors, so that no step forces a ``.item()``)."""
    obs = batch.obs.float()  # type: ignore[union-attr]  # the replay keeps int observations
    action, log_prob = agent.actor.sample(obs)
    alpha = agent.log_alpha.detach().exp()  # the coefficient before this step's alpha update
    alpha_loss = -(agent.log_alpha * (log_prob.detach() + agent.target_entropy)).mean()
    if "alpha" in opts:
        opts["alpha"].zero_grad()
        alpha_loss.backward()
        opts["alpha"].step()

    y = td_target(agent, batch, alpha, cfg.gamma)
    q = agent.critic(obs, agent.actor.normalize(batch.action))  # (2, B)
    critic_loss = 0.5 * (q - y).square().mean(1).sum()  # SB3: 0.5 * sum_k MSE(Q_k, y)
    opts["critic"].zero_grad()
    critic_loss.backward()
    opts["critic"].step()

    q_pi = agent.critic(obs, action, detach=True).min(0).values
    actor_loss = (alpha * log_prob - q_pi).mean()
    opts["actor"].zero_grad()
    actor_loss.backward()
    opts["actor"].step()
    return {
        "critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
        "alpha_loss": alpha_loss.detach(), "alpha": alpha, "q_mean": q.detach().mean(),
        "entropy": -log_prob.detach().mean(),
    }  # fmt: skip


@torch.no_grad()
def polyak_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """``target <- target + tau * (online - target)`` for every parameter, in one call."""
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), tau)


def make_optimizers(agent: SACAgent, cfg: SACConfig) -> dict[str, torch.optim.Optimizer]:
    """Adam (:func:`rlstore.agents.run.adam`, fused where torch has it) for the actor, for both
    critics (one step), and for ``log_alpha`` when tuned."""
    lr = cfg.learning_rate
    opts = {"actor": adam(agent.actor.parameters(), lr),
            "critic": adam(agent.critic.parameters(), lr)}  # fmt: skip
    if agent.log_alpha.requires_grad:
        opts["alpha"] = adam([agent.log_alpha], lr)
    return opts


# ============================================================================ training loop


def train_sac(
    cfg: SACTrainConfig, *, run_dir: str | Path | None = None, resume: bool = False
) -> tuple[SACAgent, TrainStats]:
    """Train SAC; returns ``(agent, stats)`` (``stats.evaluations``: ``(step, mean return)``).

    Args:
        cfg: the run's :class:`SACTrainConfig`.
        run_dir: folder for TensorBoard logs (``run.track``), ``checkpoints/`` and
            ``learning_curve.png``; ``None`` writes nothing.
        resume: continue from the latest checkpoint in ``run_dir/checkpoints``.
    """
    rc, sc, n = cfg.run, cfg.sac, cfg.sac.num_envs
    with TrainingRun(rc, run_dir) as run:
        envs = make_vector_env(cfg.environment, n)
        try:
            device = torch.device(rc.device)
            obs_space, act_space = envs.single_observation_space, envs.single_action_space
            agent = SACAgent(obs_space, act_space, sc, cfg.environment.env_id).to(device)
            opts = make_optimizers(agent, sc)
            buffer = ReplayBuffer(sc.buffer_size, num_envs=n, seed=rc.seed, device=device)
            adapter = TransitionAdapter.from_env(envs)
            act_dim = agent.actor.scale.numel()
            noise = np.zeros((n, act_dim), np.float32) if sc.ou_noise_std else None
            state = LoopState(envs.reset(seed=rc.seed)[0], np.zeros(n), np.zeros(n, np.int64),
                              noise=noise)  # fmt: skip
            if resume:
                path = None if run.ckpt_dir is None else latest_checkpoint(run.ckpt_dir, PREFIX)
                if path is None:
                    raise ConfigError(f"resume: no SAC checkpoint found under {run.ckpt_dir}")
                restore_checkpoint(path, cfg, agent, opts, buffer, envs, state, run.stats)
            num_iters = math.ceil(sc.total_timesteps / n)
            ckpt_at = checkpoint_schedule(num_iters, sc.num_checkpoints) if run.ckpt_dir else set()
            log_every = max(1, sc.log_freq // n)
            # SB3 samples a batch with replacement from fewer transitions; the buffer wants a batch
            learn_after = max(sc.learning_starts, sc.batch_size - 1)
            low, width = agent.actor.bias - agent.actor.scale, 2 * agent.actor.scale
            scale = agent.actor.scale.cpu().numpy()
            run.start(num_iters * n, state.iteration * n, "SAC", cfg.to_dict())
            diag: dict[str, torch.Tensor] = {}
            for it in range(state.iteration, num_iters):
                if it * n < sc.learning_starts:  # uniform random actions (torch's global RNG)
                    action = agent.env_action(
                        (low + width * torch.rand(n, low.numel(), device=device)).cpu().numpy()
                    )
                else:
                    action = agent.act(state.obs)
                    if state.noise is not None:  # SB3: clip(a + noise, -1, 1) in [-1, 1] units
                        z = torch.randn(state.noise.shape).numpy()
                        state.noise = ou_noise(state.noise, sc.ou_noise_std, z)
                        action = agent.env_action(action + scale * state.noise)
                next_obs, reward, terminated, truncated, info = envs.step(action)
                tr = adapter.step(state.obs, action, reward, terminated, truncated, info, next_obs)
                buffer.add(tr.obs, tr.action, tr.reward, tr.next_obs, tr.terminated,
                           tr.truncated)  # fmt: skip
                state.obs, state.iteration, step = next_obs, it + 1, (it + 1) * n
                state.ep_return += reward
                state.ep_length += 1
                for i in np.flatnonzero(terminated | truncated):
                    run.episode(float(state.ep_return[i]), int(state.ep_length[i]), step)
                    state.ep_return[i], state.ep_length[i] = 0.0, 0
                    if state.noise is not None:
                        state.noise[i] = 0.0
                if step > learn_after and (it + 1) % sc.train_freq == 0:
                    for _ in range(sc.gradient_steps):
                        diag = sac_update(agent, buffer.sample(sc.batch_size), opts, sc)
                        state.num_updates += 1
                        if state.num_updates % sc.target_update_interval == 0:
                            polyak_update(agent.critic_target, agent.critic, sc.tau)
                last = it + 1 == num_iters
                if (it + 1) % log_every == 0 or last:
                    row = {k: float(v) for k, v in diag.items()}
                    scalars = {f"losses/{k}": v for k, v in row.items()}
                    row = {"global_step": float(step), "sps": run.sps(step), **row}
                    run.update(step, row, {**scalars, "charts/SPS": row["sps"]})
                if evaluation_due(rc, step, step - n, last):
                    run.evaluate(
                        step,
                        lambda o: agent.act(o[None], deterministic=True)[0],
                        lambda render: make_env(cfg.environment, render),
                    )
                if run.ckpt_dir is not None and it + 1 in ckpt_at:
                    save_checkpoint(run.ckpt_dir, cfg, agent, opts, buffer, envs, state, run.stats)
        finally:
            envs.close()
    title = f"SAC on {cfg.environment.env_id}, seed {rc.seed}"
    return agent, run.finish(state.iteration * n, state.num_updates, title)


runner = folder_runner(train_sac, lambda cfg: check_env_id(cfg.environment))
