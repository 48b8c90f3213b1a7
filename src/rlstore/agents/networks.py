"""The networks of the PPO agents (also IMPALA's): one base class and three architectures.

* :class:`PPOAgent` (defined with :func:`mlp` and :func:`layer_init` in
  :mod:`rlstore.agents.agent_base`, re-exported here): spaces, observation preprocessing
  (:mod:`rlstore.agents.obs`) and normalization, action distributions; every agent
  implements ``_step(obs, memory, episode_time) -> (dist_params, value, stored_hidden,
  new_memory)`` for one vectorized env step and ``_evaluate(minibatch) -> (dist_params,
  value, mask)`` for a training minibatch, and says how its rollouts are cut into minibatches
  (``minibatches``). The algorithm (rollout, loss, update) is not here:
  :mod:`rlstore.agents.ppo`.
* :class:`FCAgent`: separate actor / critic MLPs (2 x ``hidden_size``, tanh), or for pixel
  images a NatureCNN trunk shared by linear heads (:mod:`rlstore.agents.encoders`); discrete
  (categorical), multi-discrete (one categorical per sub-action) or continuous (diagonal
  Gaussian, state-independent log-std) actions (every agent takes all three).
* :class:`LSTMPPOAgent`: obs encoder (a NatureCNN for pixel images) -> LSTM -> MLP head, one
  such stack for the actor and one for the critic (sb3-contrib ``RecurrentPPO``'s default);
  trained on sequences of at most ``recurrence`` steps that never cross an episode boundary,
  started from the stored state.
* :class:`TransformerPPOAgent`: a causal token convolution, then causal attention over the last
  ``n_ctx`` steps of the episode, again one stack for the actor and one for the critic; the
  window the agent acted on is stored with every step and is what training evaluates.

:func:`get_agent` builds the one a config selects.

Why separate stacks: with one trunk the value loss (targets up to ~1/(1-gamma), squared) shapes
the recurrent features the policy reads; on ``CartPoleNoVel-v1`` separate stacks with MLP heads
tripled the LSTM's result (``benchmarks/results/recurrent.md``).

Recurrent memory is reset after every ``done`` and carried across rollouts (the transformer's
window included), so at the first minibatch of an update the PPO ratio is exactly 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlstore.agents.agent_base import ACTIVATIONS, Memory, PPOAgent, layer_init, mlp
from rlstore.agents.config import Encoder, EnvironmentConfig
from rlstore.agents.encoders import ObsEncoder, build_encoder
from rlstore.agents.gsde import GSDEConfig
from rlstore.agents.obs import RunNormalizer, get_obs_shape
from rlstore.agents.ppo_config import (
    LSTMModelConfig,
    ModelConfig,
    OnlineTrainConfig,
    TransformerModelConfig,
)
from rlstore.errors import ConfigError

__all__ = [  # the base (agent_base) re-exported
    "ACTIVATIONS",
    "Memory",
    "layer_init",
    "mlp",
    "PPOAgent",
    "FCAgent",
    "LSTMPPOAgent",
    "TransformerPPOAgent",
    "get_agent",
    "deterministic_policy",
]


class FCAgent(PPOAgent):
    """Feed-forward agent (CleanRL ``ppo.py`` / ``ppo_continuous_action.py`` networks; with
    the ``cnn`` encoder ``ppo_atari.py``'s: a NatureCNN shared by the actor and critic heads).

    Args:
        envs: vector env (spaces). environment_config: kept for checkpoints.
        fc_model_config: unused (kept for DecisionTransformerInterpretability's signature). device:
        parameter device. hidden_dim: width of the two tanh hidden layers of actor and critic
        (``mlp`` encoder). encoder: ``online.encoder`` (:func:`~rlstore.agents.encoders.
        resolve_encoder`); ``cnn``: ``encoder`` (NatureCNN, 512 features) feeds linear heads.
        sde: gSDE (:mod:`rlstore.agents.gsde`; ``Box`` actions) on the features the actor's
        last layer reads (its last hidden layer; the CNN's features); None: a state-independent
        log-std. ortho_init: CleanRL's orthogonal init of the actor and critic layers (not the
        CNN's); False: PyTorch's default.
    """

    def __init__(
        self,
        envs: Any,
        environment_config: EnvironmentConfig | None = None,
        fc_model_config: Any = None,
        device: torch.device | str = "cpu",
        hidden_dim: int = 64,
        encoder: Encoder = "mlp",
        *,
        sde: GSDEConfig | None = None,
        ortho_init: bool = True,
    ) -> None:
        super().__init__(envs, device)
        self.environment_config = environment_config
        self.encoder = build_encoder(self.single_observation_space, encoder)
        d = self.encoder.out_dim
        if self.encoder.kind == "cnn":
            self.critic = layer_init(nn.Linear(d, 1), std=1.0, enabled=ortho_init)
            self.actor = layer_init(nn.Linear(d, self.action_dim), std=0.01, enabled=ortho_init)
        else:
            self.critic = mlp(d, hidden_dim, 1, 1.0, ortho_init=ortho_init)
            self.actor = mlp(d, hidden_dim, self.action_dim, 0.01, ortho_init=ortho_init)
        self._make_log_std(sde, d if self.encoder.kind == "cnn" else hidden_dim)
        self.to(self.device)

    def _actor(self, x: torch.Tensor) -> torch.Tensor:
        """Actor params: the mean / logits; gSDE: ``[mean, features]``, the features being the
        input of the actor's last layer."""
        if self.sde is None:
            return self.actor(x)
        z, head = x, self.actor  # cnn: a Linear head on the CNN's features
        if isinstance(self.actor, nn.Sequential):  # mlp
            z, head = self.actor[:-1](x), self.actor[-1]
        return torch.cat([head(z), z], dim=-1)

    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        x = self.encoder(obs)
        return self._actor(x), self.critic(x).squeeze(-1), None, memory

    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        x = self.encoder(mb.obs)
        return self._actor(x), self.critic(x).squeeze(-1), None


class _LSTMCore(nn.Module):
    """``act(Linear(obs))`` (a NatureCNN of ``image_dim`` features with the ``cnn`` encoder;
    the observation itself without ``obs_encoder``) -> one-layer LSTM;
    ``forward(x (L, B, obs_dim), h, c)``."""

    def __init__(self, obs_space: gym.Space, cfg: LSTMModelConfig, encoder: Encoder) -> None:
        super().__init__()
        obs_dim = int(np.prod(get_obs_shape(obs_space)))
        self.encoder: nn.Module = nn.Identity()
        cnn = build_encoder(obs_space, encoder, cfg.image_dim)
        if cnn.kind == "cnn":
            if not cfg.obs_encoder:
                raise ConfigError(
                    "lstm.obs_encoder: the cnn encoder (online.encoder) is the LSTM's observation "
                    "encoder, expected true, got false; or set online.encoder to 'mlp'"
                )
            self.encoder = cnn
        elif cfg.obs_encoder:
            enc = nn.Linear(obs_dim, cfg.image_dim)
            act = ACTIVATIONS[cfg.activation]()
            self.encoder = nn.Sequential(layer_init(enc, enabled=cfg.ortho_init), act)
        self.lstm = nn.LSTM(cfg.image_dim if cfg.obs_encoder else obs_dim, cfg.memory_dim)
        if cfg.ortho_init:
            for name, param in self.lstm.named_parameters():
                if "bias" in name:
                    nn.init.constant_(param, 0.0)
                else:
                    nn.init.orthogonal_(param, 1.0)

    def forward(
        self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        if isinstance(self.encoder, ObsEncoder):  # the CNN reads one observation per row
            feats = self.encoder(x.reshape(-1, x.shape[-1])).reshape(*x.shape[:2], -1)
        else:
            feats = self.encoder(x)
        out, (h2, c2) = self.lstm(feats, (h[None].contiguous(), c[None].contiguous()))
        return out, (h2[0], c2[0])


class LSTMPPOAgent(PPOAgent):
    """Recurrent agent: actor and critic each ``tanh(Linear(obs))`` -> one-layer LSTM ->
    ``Linear-tanh-Linear`` head (widths ``image_dim``, ``memory_dim``, ``memory_dim``).

    Memory is ``(h_actor, c_actor, h_critic, c_critic)``, each ``(N, memory_dim)``; it is zeroed
    after an episode ends. Training uses ``memory.recurrent_minibatches(seq_len=recurrence)``:
    sequences of at most ``recurrence`` steps inside one episode, started from the stored state.
    """

    def __init__(
        self,
        envs: Any,
        environment_config: EnvironmentConfig | None,
        lstm_config: LSTMModelConfig,
        device: torch.device | str = "cpu",
        encoder: Encoder = "mlp",
    ) -> None:
        super().__init__(envs, device)
        self.environment_config = environment_config
        self.lstm_config = lstm_config
        H = lstm_config.memory_dim
        self.actor_core = _LSTMCore(self.single_observation_space, lstm_config, encoder)
        self.critic_core = _LSTMCore(self.single_observation_space, lstm_config, encoder)
        act, ortho = lstm_config.activation, lstm_config.ortho_init
        self.actor = mlp(H, H, self.action_dim, 0.01, 1, activation=act, ortho_init=ortho)
        self.critic = mlp(H, H, 1, 1.0, 1, activation=act, ortho_init=ortho)
        self._make_log_std()
        self.to(self.device)

    def initial_memory(self, num_envs: int) -> Memory:
        z = torch.zeros(num_envs, self.lstm_config.memory_dim, device=self.device)
        return (z, z.clone(), z.clone(), z.clone())

    def reset_memory(self, memory: Memory, done: torch.Tensor) -> Memory:
        keep = (~done).to(torch.float32)[:, None]
        return tuple(m * keep for m in memory)

    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        x = obs.reshape(1, obs.shape[0], -1)
        ha, ca, hv, cv = memory
        out_a, (ha2, ca2) = self.actor_core(x, ha, ca)
        out_v, (hv2, cv2) = self.critic_core(x, hv, cv)
        value = self.critic(out_v[0]).squeeze(-1)
        return self.actor(out_a[0]), value, memory, (ha2, ca2, hv2, cv2)

    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        L, B = mb.obs.shape[:2]
        x = mb.obs.reshape(L, B, -1)
        ha, ca, hv, cv = mb.recurrence_memory
        out_a, _ = self.actor_core(x, ha, ca)
        out_v, _ = self.critic_core(x, hv, cv)
        return self.actor(out_a), self.critic(out_v).squeeze(-1), mb.mask

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


class _TransformerCore(nn.Module):
    """Tokens ``Linear(obs)`` (zero at padded positions), plus with ``token_conv = k > 0`` a
    causal depthwise convolution of the last ``k`` tokens, ``+ Embedding(window position)``
    (``+ Embedding(timestep)`` with ``time_embedding``) -> blocks -> features of the last window
    position.

    Why the convolution: where the state must be inferred from step-to-step differences
    (``CartPoleNoVel-v1``: velocity ~ ``obs_t - obs_{t-1}``, a small difference of large values),
    attention has to put all its weight on exactly the previous token, and any weight left on
    other tokens is noise as large as the signal. A kernel-2 convolution computes
    ``a * x_t + b * x_{t-1}`` per channel exactly (the token mixer of conv-stem and Mamba-style
    blocks). It starts as a scaled first difference on half the channels (``token_diff_gain``):
    with PyTorch's default initialization the differences stayed buried and the agent learned
    slowly (``benchmarks/results/recurrent.md``).
    """

    def __init__(self, obs_dim: int, cfg: TransformerModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.obs_embed = nn.Linear(obs_dim, cfg.d_model)
        self.conv = (
            nn.Conv1d(cfg.d_model, cfg.d_model, cfg.token_conv, groups=cfg.d_model)
            if cfg.token_conv
            else None
        )
        self.time_embed = (
            nn.Embedding(cfg.max_timestep, cfg.d_model) if cfg.time_embedding else None
        )
        self.pos_embed = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.blocks = nn.ModuleList([_Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.layer_norm else nn.Identity()
        # GPT-2's embedding init (std 0.02); nn.Embedding's N(0, 1) rows (norm ~sqrt(d_model))
        # drowned the observation embedding, and with it the step-to-step differences
        for emb in (self.time_embed, self.pos_embed):
            if emb is not None:
                nn.init.normal_(emb.weight, std=0.02)
        if self.conv is not None and cfg.token_conv >= 2 and cfg.token_diff_gain:
            with torch.no_grad():  # even channels: gain * (x_t - x_{t-1}); odd channels: 0
                self.conv.weight.zero_()
                self.conv.weight[::2, 0, -1] = cfg.token_diff_gain
                self.conv.weight[::2, 0, -2] = -cfg.token_diff_gain
                if self.conv.bias is not None:
                    self.conv.bias.zero_()

    def forward(
        self, obs: torch.Tensor, timesteps: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        B, W = mask.shape
        cfg = self.cfg
        pos = torch.arange(cfg.n_ctx - W, cfg.n_ctx, device=obs.device)
        x = self.obs_embed(obs.reshape(B, W, -1)) * mask[..., None]
        if self.conv is not None:  # causal: left-pad with k - 1 zero tokens
            k = cfg.token_conv
            x = x + self.conv(F.pad(x.transpose(1, 2), (k - 1, 0))).transpose(1, 2)
        x = x + self.pos_embed(pos)[None]
        if self.time_embed is not None:
            x = x + self.time_embed(timesteps.long().clamp(0, cfg.max_timestep - 1))
        causal = torch.ones(W, W, dtype=torch.bool, device=obs.device).tril()
        attn = causal[None] & mask[:, None, :]
        attn = attn | torch.eye(W, dtype=torch.bool, device=obs.device)[None]  # no empty rows
        for block in self.blocks:
            x = block(x, attn[:, None])
        return self.ln_f(x[:, -1])


class TransformerPPOAgent(PPOAgent):
    """Transformer agent over a window of the last ``n_ctx`` observations of the episode.

    Tokens: ``Linear(obs)``, mixed with the previous ``token_conv - 1`` tokens by a causal depthwise
    convolution, ``+ Embedding(window position)`` (``+ Embedding(timestep)`` with
    ``time_embedding``); causal attention restricted to real (unpadded) steps; the actor and the
    critic (separate stacks) read the last token through a ``Linear-tanh-Linear`` head. Memory
    during rollouts is the window: ``obs`` ``(N, W, *obs_shape)``, ``mask`` ``(N, W)`` and
    ``timesteps`` ``(N, W)``, left-padded; it is cleared at episode ends only, so it spans rollouts.
    Each step stores the window it acted on (as the buffer's ``hidden``: ``(obs, mask, timesteps)``)
    and training evaluates exactly those windows in flat shuffled minibatches.
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
        self.actor_core = _TransformerCore(self.obs_dim, cfg)
        self.critic_core = _TransformerCore(self.obs_dim, cfg)
        self.actor = mlp(cfg.d_model, cfg.d_model, self.action_dim, 0.01, depth=1)
        self.critic = mlp(cfg.d_model, cfg.d_model, 1, 1.0, depth=1)
        self._make_log_std()
        self.to(self.device)

    def forward_window(
        self, obs: torch.Tensor, timesteps: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """``obs`` ``(B, W, *obs_shape)``, ``timesteps`` ``(B, W)``, ``mask`` ``(B, W)`` bool ->
        the actor's features of the last position ``(B, d_model)`` (it must be real)."""
        return self.actor_core(obs, timesteps, mask)

    def _heads(
        self, obs: torch.Tensor, timesteps: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        params = self.actor(self.actor_core(obs, timesteps, mask))
        return params, self.critic(self.critic_core(obs, timesteps, mask)).squeeze(-1)

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

    def _step(
        self, obs: torch.Tensor, memory: Memory, episode_time: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Any, Memory]:
        mask = torch.cat([memory["mask"][:, 1:], torch.ones_like(memory["mask"][:, :1])], 1)
        window = torch.cat([memory["obs"][:, 1:], obs[:, None]], dim=1)
        new = {
            "obs": window * mask.reshape(*mask.shape, *[1] * len(self.obs_shape)),
            "mask": mask,
            "timesteps": torch.cat([memory["timesteps"][:, 1:], episode_time[:, None]], dim=1),
        }
        params, value = self._heads(new["obs"], new["timesteps"], new["mask"])
        stored = (new["obs"], new["mask"], new["timesteps"])  # the exact input, for training
        return params, value, stored, new

    def _evaluate(self, mb: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        obs, mask, timesteps = mb.recurrence_memory
        return (*self._heads(obs, timesteps, mask), None)


def get_agent(
    model_config: ModelConfig,
    envs: Any,
    environment_config: EnvironmentConfig,
    online_config: OnlineTrainConfig,
) -> PPOAgent:
    """Build the agent selected by ``model_config``'s type.

    ``None`` -> :class:`FCAgent` (``online_config.hidden_size``); :class:`LSTMModelConfig` ->
    :class:`LSTMPPOAgent`; :class:`TransformerModelConfig` -> :class:`TransformerPPOAgent`; the
    FC and LSTM agents read observations through ``online_config.encoder``; the FC agent alone
    takes ``use_sde`` (gSDE) and ``ortho_init``; every Gaussian policy starts at
    ``log_std_init`` (refused with discrete actions, which have none).
    ``agent.normalizer`` follows ``online_config.normalize_obs`` / ``normalize_reward``.
    """
    oc = online_config
    if model_config is not None and (oc.use_sde or not oc.ortho_init):
        key, value = ("use_sde", True) if oc.use_sde else ("ortho_init", False)
        hint = "; the lstm agent's is lstm.ortho_init" if key == "ortho_init" else ""
        raise ConfigError(
            f"online.{key}: an option of the fc agent, got {value} with "
            f"{type(model_config).__name__}{hint}"
        )
    if oc.encoder == "cnn" and isinstance(model_config, TransformerModelConfig):
        raise ConfigError(
            "online.encoder: 'cnn' is for the fc and lstm agents; the transformer embeds the "
            "flattened observation, set encoder 'auto' or 'mlp'"
        )
    agent: PPOAgent
    if model_config is None:
        sde = GSDEConfig(oc.sde_sample_freq, oc.full_std) if oc.use_sde else None
        agent = FCAgent(envs, environment_config, hidden_dim=oc.hidden_size, encoder=oc.encoder,
                        sde=sde, ortho_init=oc.ortho_init)  # fmt: skip
    elif isinstance(model_config, LSTMModelConfig):
        agent = LSTMPPOAgent(envs, environment_config, model_config, encoder=online_config.encoder)
    elif isinstance(model_config, TransformerModelConfig):
        agent = TransformerPPOAgent(envs, environment_config, model_config)
    else:
        raise ConfigError(
            "model_config: expected None (FC agent), LSTMModelConfig or TransformerModelConfig, "
            f"got {type(model_config).__name__}"
        )
    if not agent.discrete:
        nn.init.constant_(agent.actor_logstd, oc.log_std_init)
    elif oc.log_std_init != 0.0:  # was ignored
        raise ConfigError(
            "online.log_std_init: the initial log-std of Box actions, expected the default 0.0 "
            f"for {agent.single_action_space!r}, got {oc.log_std_init}"
        )
    if oc.normalize_obs and not isinstance(agent.single_observation_space, gym.spaces.Box):
        raise ConfigError(
            "online.normalize_obs: expected a Box observation space, got "
            f"{agent.single_observation_space!r}; turn normalize_obs off for this environment"
        )
    agent.normalizer = RunNormalizer(
        agent.obs_shape if oc.normalize_obs else None,
        oc.gamma if oc.normalize_reward else None,
        clip_obs=oc.clip_obs,
        clip_reward=oc.clip_reward,
    )
    return agent


def deterministic_policy(
    agent: PPOAgent,
) -> tuple[Callable[[], None], Callable[[np.ndarray], np.ndarray]]:
    """``(begin_episode, act)`` of ``agent``'s deterministic policy on one env: the greedy
    action (discrete) or the mean (continuous) of one raw observation; ``begin_episode``
    resets the recurrent memory (used by :func:`evaluate_agent`, :func:`evaluate_in_run` and
    ``rlstore demo-record --run``; call ``agent.eval()`` first to freeze observation
    statistics)."""
    carry: dict[str, Any] = {}

    def begin() -> None:
        carry["memory"] = agent.initial_memory(1)
        carry["t"] = torch.zeros(1, dtype=torch.int64, device=agent.device)

    def act(obs: np.ndarray) -> np.ndarray:
        x = agent.normalizer.obs(agent.preprocess(obs, agent.device).unsqueeze(0), False)
        with torch.no_grad():
            params, _, _, carry["memory"] = agent._step(x, carry["memory"], carry["t"])
        carry["t"] = carry["t"] + 1
        return agent.env_action(agent.greedy(params))[0]

    return begin, act
