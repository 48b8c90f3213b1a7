"""PPO agents: a common base (rollout + learn over a RolloutBuffer) and three architectures.

* :class:`FCAgent`: separate actor / critic MLPs (2 x ``hidden_size``, tanh), discrete
  (categorical) or continuous (diagonal Gaussian, state-independent log-std) actions.
* :class:`LSTMPPOAgent`: obs encoder -> LSTM -> heads; trained on sequences of at most
  ``recurrence`` steps that never cross an episode boundary (stored hidden state at their start).
* :class:`TransformerPPOAgent`: causal attention over the last ``n_ctx`` steps of the episode
  (inside the current rollout), trained on trajectory-window minibatches.

Every agent implements ``_step(obs, memory) -> (dist_params, value, stored_hidden, new_memory)``
for one vectorized env step and ``_evaluate(minibatch) -> (dist_params, value, mask)`` for a
training minibatch; :class:`PPOAgent` does the rest (``rollout`` and ``learn``, seed 004 API).
Recurrent memory is reset after every ``done``; the transformer window is also cut at the start
of every rollout, exactly as ``RolloutBuffer.trajectory_minibatches`` cuts it, so at the first
minibatch of an update the PPO ratio is exactly 1 for every agent.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlstore.agents.ppo.config import (
    EnvironmentConfig,
    LSTMModelConfig,
    ModelConfig,
    OnlineTrainConfig,
    TrainConfig,
    TransformerModelConfig,
)
from rlstore.agents.ppo.loss import ppo_loss
from rlstore.agents.ppo.obs import get_obs_preprocessor, get_obs_shape
from rlstore.agents.ppo.schedule import PPOScheduler
from rlstore.errors import ConfigError

Memory = Any
"""Per-env recurrent memory of an agent during rollouts (None, LSTM ``(h, c)``, window dict)."""

__all__ = [
    "layer_init",
    "PPOAgent",
    "FCAgent",
    "LSTMPPOAgent",
    "TransformerPPOAgent",
    "get_agent",
]


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """Orthogonal weights with gain ``std``, constant biases (CleanRL init); returns ``layer``."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def _spaces(envs: Any) -> tuple[gym.Space, gym.Space]:
    obs_space = getattr(envs, "single_observation_space", None)
    act_space = getattr(envs, "single_action_space", None)
    if obs_space is None or act_space is None:
        raise ConfigError(
            f"envs: expected a gymnasium vector env (single_observation_space, "
            f"single_action_space), got {type(envs).__name__}"
        )
    return obs_space, act_space


class PPOAgent(nn.Module):
    """Base of the PPO agents: spaces, action distributions, optimizer, rollout and learn.

    Args:
        envs: a gymnasium vector env (only its single observation / action spaces are kept).
        device: torch device of the parameters.

    Attributes:
        obs_shape: shape of one preprocessed observation (``get_obs_shape``).
        discrete: True for ``Discrete`` actions, False for ``Box`` (Gaussian).
        action_dim: number of actions (discrete) or action vector size (continuous).
        environment_config: set by :func:`get_agent` (used to rebuild envs from checkpoints).
    """

    actor: nn.Module
    critic: nn.Module

    def __init__(self, envs: Any, device: torch.device | str = "cpu") -> None:
        super().__init__()
        obs_space, act_space = _spaces(envs)
        self.single_observation_space = obs_space
        self.single_action_space = act_space
        self.obs_shape = tuple(get_obs_shape(obs_space))
        self.obs_dim = int(np.prod(self.obs_shape))
        self.preprocess = get_obs_preprocessor(obs_space)
        self.device = torch.device(device)
        if isinstance(act_space, gym.spaces.Discrete):
            self.discrete, self.action_dim = True, int(act_space.n)
            self.action_start = int(act_space.start)
        elif isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
            self.discrete, self.action_dim = False, int(act_space.shape[0])
            self.action_start = 0
        else:
            raise ConfigError(
                f"envs.single_action_space: expected Discrete or a 1-D Box, got {act_space!r}"
            )
        self.environment_config: EnvironmentConfig | None = None
        self.train_config: TrainConfig | None = None  # set by load_saved_checkpoint

    layer_init = staticmethod(layer_init)

    # ----------------------------------------------------------------- distributions

    def _make_log_std(self) -> None:
        if not self.discrete:
            self.actor_logstd = nn.Parameter(torch.zeros(self.action_dim))

    def distribution(self, params: torch.Tensor) -> torch.distributions.Distribution:
        """Action distribution from the actor output ``(..., action_dim)``.

        Discrete: ``Categorical(logits=params)``. Continuous: ``Independent(Normal(params,
        exp(log_std)), 1)`` (log-prob and entropy summed over action dims).
        """
        if self.discrete:
            return torch.distributions.Categorical(logits=params, validate_args=False)
        std = self.actor_logstd.exp().expand_as(params)
        return torch.distributions.Independent(
            torch.distributions.Normal(params, std, validate_args=False), 1, validate_args=False
        )

    def env_action(self, action: torch.Tensor) -> np.ndarray:
        """Tensor actions -> what ``envs.step`` takes (offset by the space's start / clipped)."""
        a = action.cpu().numpy()
        if self.discrete:
            return a + self.action_start if self.action_start else a
        space = self.single_action_space
        assert isinstance(space, gym.spaces.Box)  # checked in __init__ (type narrowing only)
        return np.clip(a, space.low, space.high).astype(space.dtype)

    # ----------------------------------------------------------------- per-agent hooks

    def initial_memory(self, num_envs: int) -> Memory:
        """Recurrent memory at the start of training (``None`` for memoryless agents)."""
        return None

    def reset_memory(self, memory: Memory, done: torch.Tensor) -> Memory:
        """Memory after a step whose envs ``done`` (``(N,)`` bool) start new episodes."""
        return memory

    def start_of_rollout(self, memory: Memory) -> Memory:
        """Memory at the start of a rollout (the transformer cuts its window here)."""
        return memory

    @abstractmethod
    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        """One env step: ``obs`` ``(N, *obs_shape)`` -> actor params ``(N, A)``, value ``(N,)``,
        the hidden state to store with the step (or None) and the memory after the step."""

    @abstractmethod
    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Training minibatch -> actor params ``(*B, A)``, values ``(*B,)``, mask or None."""

    def get_value(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> torch.Tensor:
        """``V(obs)`` ``(N,)`` for the next step given ``memory`` (memory is not changed)."""
        return self._step(obs, memory, episode_time)[1]

    # ----------------------------------------------------------------- optimizer

    def make_optimizer(
        self, num_updates: int, initial_lr: float, end_lr: float, eps: float = 1e-5
    ) -> tuple[torch.optim.Optimizer, PPOScheduler]:
        """Adam over all parameters plus a :class:`PPOScheduler` decaying its rate linearly."""
        optimizer = torch.optim.Adam(self.parameters(), lr=initial_lr, eps=eps)
        return optimizer, PPOScheduler(optimizer, initial_lr, end_lr, num_updates)

    # ----------------------------------------------------------------- rollout / learn

    def rollout(
        self,
        memory: Any,
        num_steps: int,
        envs: Any,
        state: Any,
        trajectory_writer: Any = None,
        sampling_method: str = "basic",
        **sampling_kwargs: Any,
    ) -> Any:
        """Collect ``num_steps`` vectorized steps into the RolloutBuffer ``memory`` and compute
        its returns (GAE via ``memory.compute_returns``); see :func:`run_rollout`.

        Args:
            memory: a ``rlstore.buffers.rollout.RolloutBuffer`` of ``num_steps`` x ``num_envs``.
            num_steps: steps per env, T.
            envs: the vector env ``state`` was started on (``autoreset_mode`` SAME_STEP).
            state: from :meth:`RolloutState.start` or the previous rollout.
            trajectory_writer: optional object with ``accumulate_trajectory(next_obs, reward,
                terminated, truncated, action, info)`` (seed 004's TrajectoryWriter).
            sampling_method: ``basic`` (sample pi), ``greedy``, ``temperature`` (kwarg
                ``temperature``) or ``topk`` (kwarg ``k``); only ``basic`` is valid for training.

        Returns:
            The updated state (also mutated in place).
        """
        from rlstore.agents.ppo.trainer import run_rollout  # the loop lives with the trainer

        return run_rollout(
            self,
            memory,
            num_steps,
            envs,
            state,
            trajectory_writer,
            sampling_method,
            sampling_kwargs,
        )

    def learn(
        self,
        memory: Any,
        args: OnlineTrainConfig,
        optimizer: torch.optim.Optimizer,
        scheduler: PPOScheduler | None,
        track: bool = False,
    ) -> dict[str, float]:
        """PPO update on the rollout in ``memory`` (returns already computed).

        ``args.update_epochs`` epochs of minibatches; per minibatch the clipped loss of
        :func:`rlstore.agents.ppo.loss.ppo_loss`, backprop, global grad-norm clip at
        ``args.max_grad_norm``, Adam step. An epoch that ends with approx-KL above
        ``args.target_kl`` stops the update. With ``args.anneal_clip`` the clip range of update
        ``u`` (``u = scheduler.n_step_calls``) is ``clip_coef * (1 - u / num_updates)``. The
        scheduler steps once at the end.

        Returns:
            Means over the minibatches of ``loss, pg_loss, v_loss, entropy, approx_kl,
            old_approx_kl, clipfrac`` plus ``explained_variance``, ``lr`` and ``clip_coef`` (used),
            ``epochs`` (run) and ``grad_steps``. ``track`` is accepted for seed compatibility.
        """
        sums: dict[str, float] = {}
        clip = args.clip_coef
        if args.anneal_clip and scheduler is not None:
            clip *= 1.0 - min(scheduler.n_step_calls, scheduler.num_updates) / scheduler.num_updates
        grad_steps, epochs_run = 0, 0
        lr = float(optimizer.param_groups[0]["lr"])
        for _epoch in range(args.update_epochs):
            epochs_run += 1
            for mb in self.minibatches(memory, args):
                params, new_values, mask = self._evaluate(mb)
                dist = self.distribution(params)
                out = ppo_loss(
                    _flat(dist.log_prob(self._minibatch_actions(mb))),
                    _flat(mb.logprobs),
                    _flat(mb.advantages),
                    _flat(new_values),
                    _flat(mb.values),
                    _flat(mb.returns),
                    _flat(dist.entropy()),
                    clip_coef=clip,
                    vf_coef=args.vf_coef,
                    ent_coef=args.ent_coef,
                    clip_vloss=args.clip_vloss,
                    norm_adv=args.norm_adv,
                    mask=None if mask is None else _flat(mask).to(torch.float32),
                )
                optimizer.zero_grad(set_to_none=True)
                out.loss.backward()
                nn.utils.clip_grad_norm_(self.parameters(), args.max_grad_norm)
                optimizer.step()
                grad_steps += 1
                for k, v in out._asdict().items():
                    sums[k] = sums.get(k, 0.0) + float(v.detach())
            if args.target_kl is not None and float(out.approx_kl) > args.target_kl:
                break
        if scheduler is not None:
            scheduler.step()
        stats = {k: v / max(grad_steps, 1) for k, v in sums.items()}
        stats.update(lr=lr, clip_coef=clip, epochs=float(epochs_run), grad_steps=float(grad_steps))
        stats["explained_variance"] = _explained_variance(memory)
        return stats

    def _minibatch_actions(self, mb: Any) -> torch.Tensor:
        """The actions the loss scores (the transformer scores the last window step)."""
        return mb.actions

    def minibatches(self, memory: Any, args: OnlineTrainConfig) -> Any:
        """One epoch of minibatches for this agent (flat shuffled steps by default)."""
        return memory.minibatches(num_minibatches=args.num_minibatches, num_epochs=1)


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1)


def _explained_variance(memory: Any) -> float:
    batch = memory.get() if hasattr(memory, "get") else None
    if batch is None or batch.returns is None:
        return float("nan")
    y, v = batch.returns.reshape(-1), batch.values.reshape(-1)
    var_y = float(y.var()) if y.numel() > 1 else 0.0
    return float("nan") if var_y == 0 else 1.0 - float((y - v).var()) / var_y


def _mlp(in_dim: int, hidden: int, out_dim: int, out_std: float) -> nn.Sequential:
    return nn.Sequential(
        layer_init(nn.Linear(in_dim, hidden)),
        nn.Tanh(),
        layer_init(nn.Linear(hidden, hidden)),
        nn.Tanh(),
        layer_init(nn.Linear(hidden, out_dim), std=out_std),
    )


class FCAgent(PPOAgent):
    """Feed-forward agent (CleanRL ``ppo.py`` / ``ppo_continuous_action.py`` networks).

    Args:
        envs: vector env (spaces). environment_config: kept for checkpoints.
        fc_model_config: unused (seed compatibility). device: parameter device.
        hidden_dim: width of the two tanh hidden layers of actor and critic.
    """

    def __init__(
        self,
        envs: Any,
        environment_config: EnvironmentConfig | None = None,
        fc_model_config: Any = None,
        device: torch.device | str = "cpu",
        hidden_dim: int = 64,
    ) -> None:
        super().__init__(envs, device)
        self.environment_config = environment_config
        self.critic = _mlp(self.obs_dim, hidden_dim, 1, 1.0)
        self.actor = _mlp(self.obs_dim, hidden_dim, self.action_dim, 0.01)
        self._make_log_std()
        self.to(self.device)

    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        x = obs.reshape(obs.shape[0], -1)
        return self.actor(x), self.critic(x).squeeze(-1), None, memory

    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        x = mb.obs.reshape(mb.obs.shape[0], -1)
        return self.actor(x), self.critic(x).squeeze(-1), None


class LSTMPPOAgent(PPOAgent):
    """Recurrent agent: ``tanh(Linear(obs))`` -> one-layer LSTM -> actor / critic heads.

    Memory is ``(h, c)``, each ``(N, memory_dim)``; it is zeroed after an episode ends. Training
    uses ``memory.recurrent_minibatches(seq_len=recurrence)``: sequences of at most
    ``recurrence`` steps inside one episode, started from the stored ``(h, c)``.
    """

    def __init__(
        self,
        envs: Any,
        environment_config: EnvironmentConfig | None,
        lstm_config: LSTMModelConfig,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(envs, device)
        self.environment_config = environment_config
        self.lstm_config = lstm_config
        self.encoder = nn.Sequential(
            layer_init(nn.Linear(self.obs_dim, lstm_config.image_dim)), nn.Tanh()
        )
        self.lstm = nn.LSTM(lstm_config.image_dim, lstm_config.memory_dim)
        for name, param in self.lstm.named_parameters():
            if "bias" in name:
                nn.init.constant_(param, 0.0)
            else:
                nn.init.orthogonal_(param, 1.0)
        self.actor = layer_init(nn.Linear(lstm_config.memory_dim, self.action_dim), std=0.01)
        self.critic = layer_init(nn.Linear(lstm_config.memory_dim, 1), std=1.0)
        self._make_log_std()
        self.to(self.device)

    def initial_memory(self, num_envs: int) -> Memory:
        z = torch.zeros(num_envs, self.lstm_config.memory_dim, device=self.device)
        return (z, z.clone())

    def reset_memory(self, memory: Memory, done: torch.Tensor) -> Memory:
        keep = (~done).to(torch.float32)[:, None]
        h, c = memory
        return (h * keep, c * keep)

    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        h, c = memory
        x = self.encoder(obs.reshape(1, obs.shape[0], -1))
        out, (h2, c2) = self.lstm(x, (h[None], c[None]))
        out = out[0]
        return self.actor(out), self.critic(out).squeeze(-1), (h, c), (h2[0], c2[0])

    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        L, B = mb.obs.shape[:2]
        h0, c0 = mb.recurrence_memory
        x = self.encoder(mb.obs.reshape(L, B, -1))
        out, _ = self.lstm(x, (h0[None].contiguous(), c0[None].contiguous()))
        return self.actor(out), self.critic(out).squeeze(-1), mb.mask

    def minibatches(self, memory: Any, args: OnlineTrainConfig) -> Any:
        return memory.recurrent_minibatches(
            num_minibatches=args.num_minibatches, num_epochs=1, seq_len=self.lstm_config.recurrence
        )


class _Block(nn.Module):
    """Pre/post-norm transformer block with masked multi-head self-attention."""

    def __init__(self, cfg: TransformerModelConfig) -> None:
        super().__init__()
        self.n_heads, self.pre_ln = cfg.n_heads, cfg.layer_norm
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_mlp), nn.GELU(), nn.Linear(cfg.d_mlp, cfg.d_model)
        )
        self.ln1 = nn.LayerNorm(cfg.d_model) if cfg.layer_norm else nn.Identity()
        self.ln2 = nn.LayerNorm(cfg.d_model) if cfg.layer_norm else nn.Identity()

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor) -> torch.Tensor:
        B, W, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(B, W, 3, self.n_heads, D // self.n_heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=attn_mask
        )
        x = x + self.proj(a.transpose(1, 2).reshape(B, W, D))
        return x + self.mlp(self.ln2(x))


class TransformerPPOAgent(PPOAgent):
    """Transformer agent over a window of the last ``n_ctx`` observations of the episode.

    Tokens: ``Linear(obs) + Embedding(timestep) + Embedding(window position)``; causal
    attention restricted to real (unpadded) steps; the actor / critic read the last token.
    Memory during rollouts is the window: ``obs`` ``(N, W, *obs_shape)``, ``mask`` ``(N, W)`` and
    ``timesteps`` ``(N, W)``, left-padded; it is cleared at episode ends and at rollout starts
    (matching ``RolloutBuffer.trajectory_minibatches``).
    """

    def __init__(
        self,
        envs: Any,
        environment_config: EnvironmentConfig | None,
        transformer_model_config: TransformerModelConfig,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(envs, device)
        cfg = transformer_model_config
        self.environment_config = environment_config
        self.transformer_config = cfg
        self.prob_go_from_end = 0.0
        self.obs_embed = nn.Linear(self.obs_dim, cfg.d_model)
        self.time_embed = nn.Embedding(cfg.max_timestep, cfg.d_model)
        self.pos_embed = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.blocks = nn.ModuleList([_Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.layer_norm else nn.Identity()
        self.actor = layer_init(nn.Linear(cfg.d_model, self.action_dim), std=0.01)
        self.critic = layer_init(nn.Linear(cfg.d_model, 1), std=1.0)
        self._make_log_std()
        self.to(self.device)

    def forward_window(
        self, obs: torch.Tensor, timesteps: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """``obs`` ``(B, W, *obs_shape)``, ``timesteps`` ``(B, W)``, ``mask`` ``(B, W)`` bool ->
        features of the last position ``(B, d_model)`` (the last position must be real)."""
        B, W = mask.shape
        cfg = self.transformer_config
        t = timesteps.long().clamp(0, cfg.max_timestep - 1)
        pos = torch.arange(cfg.n_ctx - W, cfg.n_ctx, device=obs.device)
        x = self.obs_embed(obs.reshape(B, W, -1)) + self.time_embed(t) + self.pos_embed(pos)[None]
        causal = torch.ones(W, W, dtype=torch.bool, device=obs.device).tril()
        attn = causal[None] & mask[:, None, :]
        attn = attn | torch.eye(W, dtype=torch.bool, device=obs.device)[None]  # no empty rows
        for block in self.blocks:
            x = block(x, attn[:, None])
        return self.ln_f(x[:, -1])

    def initial_memory(self, num_envs: int) -> Memory:
        W = self.transformer_config.n_ctx
        return {
            "obs": torch.zeros(num_envs, W, *self.obs_shape, device=self.device),
            "mask": torch.zeros(num_envs, W, dtype=torch.bool, device=self.device),
            "timesteps": torch.zeros(num_envs, W, dtype=torch.long, device=self.device),
        }

    def reset_memory(self, memory: Memory, done: torch.Tensor) -> Memory:
        memory["mask"] = memory["mask"] & ~done[:, None]
        return memory

    def start_of_rollout(self, memory: Memory) -> Memory:
        memory["mask"] = torch.zeros_like(memory["mask"])
        return memory

    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        new = {
            "obs": torch.cat([memory["obs"][:, 1:], obs[:, None]], dim=1),
            "mask": torch.cat([memory["mask"][:, 1:], torch.ones_like(memory["mask"][:, :1])], 1),
            "timesteps": torch.cat([memory["timesteps"][:, 1:], episode_time[:, None]], dim=1),
        }
        new["obs"] = new["obs"] * new["mask"].reshape(
            *new["mask"].shape, *[1] * len(self.obs_shape)
        )
        feats = self.forward_window(new["obs"], new["timesteps"], new["mask"])
        return self.actor(feats), self.critic(feats).squeeze(-1), None, new

    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        feats = self.forward_window(mb.obs, mb.timesteps, mb.mask)
        return self.actor(feats), self.critic(feats).squeeze(-1), None

    def _minibatch_actions(self, mb: Any) -> torch.Tensor:
        return mb.actions[:, -1]

    def minibatches(self, memory: Any, args: OnlineTrainConfig) -> Any:
        return memory.trajectory_minibatches(
            timesteps=self.transformer_config.n_ctx,
            mini_batch_size=args.minibatch_size,
            num_epochs=1,
            prob_go_from_end=args.prob_go_from_end,
        )


def get_agent(
    model_config: ModelConfig,
    envs: Any,
    environment_config: EnvironmentConfig,
    online_config: OnlineTrainConfig,
) -> PPOAgent:
    """Build the agent selected by ``model_config``'s type.

    ``None`` -> :class:`FCAgent` (``online_config.hidden_size``); :class:`LSTMModelConfig` ->
    :class:`LSTMPPOAgent`; :class:`TransformerModelConfig` -> :class:`TransformerPPOAgent`.
    """
    if model_config is None:
        return FCAgent(envs, environment_config, hidden_dim=online_config.hidden_size)
    if isinstance(model_config, LSTMModelConfig):
        return LSTMPPOAgent(envs, environment_config, model_config)
    if isinstance(model_config, TransformerModelConfig):
        return TransformerPPOAgent(envs, environment_config, model_config)
    raise ConfigError(
        "model_config: expected None (FC agent), LSTMModelConfig or TransformerModelConfig, "
        f"got {type(model_config).__name__}"
    )
