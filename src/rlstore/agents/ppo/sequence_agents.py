"""Sequence PPO agents: an LSTM and a causal transformer over the current episode.

* :class:`LSTMPPOAgent`: obs encoder -> LSTM -> heads; trained on sequences of at most
  ``recurrence`` steps that never cross an episode boundary (stored hidden state at their start).
* :class:`TransformerPPOAgent`: causal attention over the last ``n_ctx`` steps of the episode
  (inside the current rollout), trained on trajectory-window minibatches.

Recurrent memory is reset after every ``done``; the transformer window is also cut at the start
of every rollout, exactly as ``RolloutBuffer.trajectory_minibatches`` cuts it, so at the first
minibatch of an update the PPO ratio is exactly 1 for every agent.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rlstore.agents.ppo.agent_base import Memory, PPOAgent, layer_init
from rlstore.agents.ppo.config import (
    EnvironmentConfig,
    LSTMModelConfig,
    OnlineTrainConfig,
    TransformerModelConfig,
)

__all__ = ["LSTMPPOAgent", "TransformerPPOAgent"]


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
