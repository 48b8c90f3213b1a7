"""Typed configuration of a PPO run: what to run, on which env, how to train, which model.

The ``run`` and ``environment`` sections (:class:`RunConfig`, :class:`EnvironmentConfig`) and
the base :class:`~rlstore.agents.config.BaseConfig` are shared with DQN and SAC and live in
:mod:`rlstore.agents.config`; they are re-exported here.

Every config is a pydantic model on :class:`rlstore.config.StrictModel` whose fields carry their
documentation (attribute docstrings, also exposed as ``Model.model_fields[name].description``).
Unknown keys and bad values raise :class:`rlstore.errors.ConfigError` naming the field, the
expectation and what arrived (:func:`rlstore.config.format_validation_error`).

A run is described by one :class:`TrainConfig` (the YAML files under ``rlstore/configs/`` and the
``config.yaml`` written into every run folder have exactly its shape)::

    run:         {exp_name: cartpole, seed: 1}
    environment: {env_id: CartPole-v1}
    online:      {total_timesteps: 30000, num_envs: 8, num_steps: 32, ...}
    agent: fc            # fc | lstm | transformer
    lstm: {...}          # used when agent == lstm
    transformer: {...}   # used when agent == transformer

Example::

    >>> cfg = TrainConfig.from_dict({"online": {"total_timesteps": 2048}})
    >>> cfg.online.batch_size, cfg.online.minibatch_size
    (512, 128)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from rlstore.agents.config import BaseConfig, Encoder, EnvironmentConfig, RunConfig
from rlstore.errors import ConfigError

__all__ = [
    "RunConfig",
    "EnvironmentConfig",
    "OnlineTrainConfig",
    "LSTMModelConfig",
    "TransformerModelConfig",
    "TrainConfig",
    "ModelConfig",
    "load_train_config",
    "train_config_from_parts",
]


class OnlineTrainConfig(BaseConfig):
    """PPO hyper-parameters (defaults: CleanRL ``ppo.py``)."""

    total_timesteps: int = Field(500_000, ge=1)
    """Total environment steps (summed over envs); rounded down to whole updates (at least one)."""
    learning_rate: float = Field(2.5e-4, gt=0)
    """Initial Adam learning rate."""
    end_learning_rate: float = Field(0.0, ge=0)
    """Learning rate after the last update when ``decay_lr`` is on (linear decay)."""
    decay_lr: bool = True
    """Anneal the learning rate linearly from ``learning_rate`` to ``end_learning_rate``."""
    adam_eps: float = Field(1e-5, gt=0)
    """Adam epsilon."""
    num_envs: int = Field(4, ge=1)
    """Number of vectorized environments N."""
    num_steps: int = Field(128, ge=1)
    """Rollout length T per env per update; a batch holds ``N * T`` transitions."""
    gamma: float = Field(0.99, ge=0, le=1)
    """Discount factor."""
    gae_lambda: float = Field(0.95, ge=0, le=1)
    """GAE lambda."""
    num_minibatches: int = Field(4, ge=1)
    """Minibatches per epoch (flat agents: of ``N*T / num_minibatches`` transitions)."""
    update_epochs: int = Field(4, ge=1)
    """Passes over the rollout per update."""
    norm_adv: bool = True
    """Normalize advantages per minibatch with :func:`rlstore.returns.normalize_advantages`:
    ``(A - mean) / (std + 1e-8)``, population std (ddof=0)."""
    clip_coef: float = Field(0.2, gt=0)
    """PPO ratio clip epsilon."""
    anneal_clip: bool = False
    """Decay ``clip_coef`` linearly to 0 over the run (RL Zoo's ``clip_range: lin_0.2``)."""
    clip_vloss: bool = True
    """Clip the value loss around the rollout values (CleanRL style)."""
    ent_coef: float = Field(0.01, ge=0)
    """Entropy bonus coefficient."""
    vf_coef: float = Field(0.5, ge=0)
    """Value loss coefficient."""
    max_grad_norm: float = Field(0.5, gt=0)
    """Global gradient-norm clip."""
    target_kl: float | None = Field(None, gt=0)
    """Stop the update's remaining epochs once an epoch ends with approx-KL above this."""
    hidden_size: int = Field(64, ge=1)
    """Width of the FC agent's two hidden layers (actor and critic; ``mlp`` encoder)."""
    encoder: Encoder = "auto"
    """The observation encoder of the FC and LSTM agents (:mod:`rlstore.agents.encoders`):
    ``cnn``, for the FC agent a NatureCNN trunk (512 ReLU features) shared by linear actor and
    critic heads (CleanRL's ``ppo_atari.py``), for the LSTM agent a NatureCNN of
    ``lstm.image_dim`` features in place of its ``Linear`` encoder; ``mlp``, the flattened
    observation (FC: separate actor and critic MLPs); ``auto``: ``cnn`` for pixel images of at
    least 36x36 (MiniGrid with ``img_obs``), else ``mlp``. The transformer agent takes ``auto``
    or ``mlp`` (its tokens embed the flattened observation). Runs written before this field
    existed used ``mlp``."""
    num_checkpoints: int = Field(5, ge=0)
    """Checkpoints written over the run (evenly spaced; the last at the final update); 0: none."""
    normalize_obs: bool = False
    """Normalize observations by their running mean and variance (``rlstore.normalize.
    RunningMeanStd``, updated from every training step's observations, Stable-Baselines3
    ``VecNormalize`` style): the agent sees and trains on ``clip((x - mean) / sqrt(var + 1e-8),
    -clip_obs, clip_obs)``. Box observation spaces only. The statistics are frozen in ``eval()``
    mode (evaluation, ``sample_from_agents``) and saved in checkpoints."""
    clip_obs: float = Field(10.0, gt=0)
    """Normalized observations are clipped to ``[-clip_obs, clip_obs]`` (``normalize_obs`` only)."""
    normalize_reward: bool = False
    """Scale the rewards stored for training by the running std of a discounted return that
    restarts at episode ends (``rlstore.normalize.DiscountedReturnNormalizer`` with ``gamma``;
    ``VecNormalize`` semantics, no mean subtraction). Logged episode returns and "solved" stay
    on raw rewards. Frozen in ``eval()`` mode and saved in checkpoints."""
    clip_reward: float = Field(10.0, gt=0)
    """Scaled rewards are clipped to ``[-clip_reward, clip_reward]`` (``normalize_reward``)."""

    log_std_init: float = Field(0.0, ge=-20, le=20)
    """Initial log standard deviation of the Gaussian policy of ``Box`` actions (every agent;
    with ``use_sde`` every entry of gSDE's ``log_std``), in [-20, 20]: beyond, the float32
    variance under- or overflows (a std of exp(-90) or a gSDE variance of exp(2 * 45) made the
    first rollout's log-probabilities NaN)."""
    ortho_init: bool = True
    """FC agent: CleanRL's orthogonal init of the actor and critic layers (gain sqrt(2), policy
    output 0.01, value output 1); off: PyTorch's default init (Stable-Baselines3's
    ``ortho_init=False``). The LSTM agent's is ``lstm.ortho_init``."""
    use_sde: bool = False
    """FC agent, ``Box`` actions: explore with generalized state-dependent noise (gSDE,
    :mod:`rlstore.agents.gsde`; Stable-Baselines3's ``use_sde``): the noise is ``z @ W``, ``z``
    the actor's last hidden layer (the CNN's features with ``encoder: cnn``), ``W`` a matrix
    per env with entries ``N(0, exp(log_std)^2)`` redrawn at the start of each rollout (and
    every ``sde_sample_freq`` steps), so actions change smoothly with the state instead of
    jittering every step."""
    sde_sample_freq: int = Field(-1, ge=-1)
    """With ``use_sde``: draw new exploration matrices every ``sde_sample_freq`` steps of a
    rollout; -1: only at its start."""
    full_std: bool = True
    """With ``use_sde``: one log-std per (feature, action dim); off: one per feature, shared by
    the action dims."""

    legacy_defaults: ClassVar[dict[str, Any]] = {"encoder": "mlp"}

    @model_validator(mode="after")
    def _check_batch(self) -> OnlineTrainConfig:
        if self.sde_sample_freq == 0:
            raise ValueError("sde_sample_freq: expected -1 (only at rollout start) or >= 1, got 0")
        if not self.use_sde and (self.sde_sample_freq != -1 or not self.full_std):
            raise ValueError(
                "use_sde: sde_sample_freq and full_std are gSDE settings, expected use_sde true "
                f"with them, got use_sde false with sde_sample_freq {self.sde_sample_freq}, "
                f"full_std {self.full_std}"
            )
        if self.batch_size % self.num_minibatches != 0:
            raise ValueError(
                f"num_minibatches: must divide num_envs * num_steps = {self.batch_size}, "
                f"got {self.num_minibatches}"
            )
        if self.decay_lr and self.end_learning_rate > self.learning_rate:
            raise ValueError(
                f"end_learning_rate: expected <= learning_rate ({self.learning_rate}) for a "
                f"decay, got {self.end_learning_rate}"
            )
        return self

    @property
    def batch_size(self) -> int:
        """Transitions per update, ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """Transitions per minibatch, ``batch_size // num_minibatches``."""
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        """Number of rollout + update iterations, ``max(1, total_timesteps // batch_size)``."""
        return max(1, self.total_timesteps // self.batch_size)


class LSTMModelConfig(BaseConfig):
    """Recurrent (LSTM) agent: obs encoder -> LSTM -> actor and critic heads."""

    image_dim: int = Field(64, ge=1)
    """Width of the observation encoder's output (the LSTM input)."""
    memory_dim: int = Field(64, ge=1)
    """LSTM hidden size."""
    recurrence: int = Field(8, ge=1)
    """Length of the training sequences (truncated BPTT); must divide ``num_steps``."""
    obs_encoder: bool = True
    """Feed the LSTM ``activation(Linear(obs))`` of width ``image_dim``; off: the flattened
    observation itself (sb3-contrib's ``FlattenExtractor``)."""
    activation: Literal["tanh", "relu"] = "tanh"
    """Activation of the observation encoder and of the actor / critic hidden layers."""
    ortho_init: bool = True
    """Orthogonal init (CleanRL: LSTM weights gain 1 and zero biases, linear layers gain sqrt(2),
    policy output 0.01, value output 1); off: PyTorch's default init (sb3-contrib with
    ``ortho_init=False``, RL Zoo's ``CartPoleNoVel-v1`` setting)."""


class TransformerModelConfig(BaseConfig):
    """Transformer agent: causal self-attention over the last ``n_ctx`` steps of the episode."""

    d_model: int = Field(64, ge=1)
    """Embedding width."""
    n_heads: int = Field(4, ge=1)
    """Attention heads; must divide ``d_model``."""
    d_mlp: int = Field(128, ge=1)
    """Hidden width of each block's MLP."""
    n_layers: int = Field(1, ge=1)
    """Number of transformer blocks."""
    n_ctx: int = Field(4, ge=1)
    """Window length in steps: the policy at step t sees observations t-n_ctx+1 .. t."""
    layer_norm: bool = False
    """Pre-LayerNorm in the blocks."""
    max_timestep: int = Field(1000, ge=1)
    """Size of the learned timestep embedding (steps beyond it share the last embedding)."""
    time_embedding: bool = True
    """Add a learned embedding of the step's index in its episode to every token (Decision
    Transformer style). Off for time-invariant tasks: every index has its own row, trained
    only once episodes reach it, so a policy that starts surviving longer meets untrained rows
    (``CartPoleNoVel-v1``: see ``benchmarks/results/recurrent.md``)."""
    token_conv: int = Field(2, ge=0)
    """Kernel size of a causal depthwise convolution over the token sequence before attention
    (each token also sees the ``token_conv - 1`` tokens before it, exactly); 0 turns it off.
    Lets the agent take step-to-step differences (velocities from positions) without attention
    having to find the previous token precisely (``benchmarks/results/recurrent.md``)."""
    token_diff_gain: float = Field(8.0, ge=0, allow_inf_nan=False)
    """Initialization of the token convolution (``token_conv >= 2``): the even channels start as
    the first difference ``token_diff_gain * (x_t - x_{t-1})`` of their token channel, the odd
    ones at zero (the residual passes ``x_t`` on), bias zero. Step-to-step differences are small
    next to the values they are taken of (normalized CartPole positions move 0.02-0.15 of their
    spread per step), so PyTorch's default initialization leaves them far below the noise of
    the other channels; the gain lifts them to the same scale from the first update. 0 keeps
    PyTorch's default initialization."""

    @model_validator(mode="after")
    def _check_heads(self) -> TransformerModelConfig:
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"n_heads: must divide d_model = {self.d_model}, got {self.n_heads}")
        return self


ModelConfig = LSTMModelConfig | TransformerModelConfig | None
"""The ``model_config`` argument of :func:`get_agent`: ``None`` selects the FC agent."""


class TrainConfig(BaseConfig):
    """A whole run: the four configs plus the agent choice (the YAML file format)."""

    run: RunConfig = Field(default_factory=RunConfig)
    """Run name, seed, logging."""
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    """Environment."""
    online: OnlineTrainConfig = Field(default_factory=OnlineTrainConfig)
    """PPO hyper-parameters."""
    agent: Literal["fc", "lstm", "transformer"] = "fc"
    """Agent architecture."""
    lstm: LSTMModelConfig = Field(default_factory=LSTMModelConfig)
    """Used when ``agent == "lstm"``."""
    transformer: TransformerModelConfig = Field(default_factory=TransformerModelConfig)
    """Used when ``agent == "transformer"``."""

    @classmethod
    def budget_key(cls) -> str:
        """``online.total_timesteps`` (PPO and PPO+D)."""
        return "online.total_timesteps"

    @model_validator(mode="after")
    def _check_agent(self) -> TrainConfig:
        if self.agent == "lstm" and self.online.num_steps % self.lstm.recurrence != 0:
            raise ValueError(
                f"lstm.recurrence: must divide online.num_steps = {self.online.num_steps}, "
                f"got {self.lstm.recurrence}"
            )
        # a rollout without episode ends has the fewest sequences: N * T / recurrence; more
        # minibatches fail in the update (only late in a run, once episodes outlast rollouts)
        if self.agent == "lstm" and self.online.num_minibatches > (
            n_seq := self.online.batch_size // self.lstm.recurrence
        ):
            raise ValueError(
                f"online.num_minibatches: expected at most the {n_seq} sequences of a rollout "
                f"(num_envs * num_steps / lstm.recurrence), got {self.online.num_minibatches}"
            )
        return self

    def selected_model_config(self) -> ModelConfig:
        """The model config of the chosen agent (``None`` for ``fc``)."""
        return {"fc": None, "lstm": self.lstm, "transformer": self.transformer}[self.agent]


def load_train_config(path: str | Path, *, run_file: bool = False) -> TrainConfig:
    """Read a :class:`TrainConfig` from a YAML or JSON file (read by
    :func:`rlstore.config.load_config_file`; an empty file gives the defaults); ``run_file``:
    a run folder's ``config.yaml`` (:meth:`~rlstore.agents.config.BaseConfig.from_file`).

    Raises:
        ConfigError: the file is missing, is not YAML, is not a mapping, or holds an unknown key
            or an invalid value (the message names ``section.field``).
    """
    return TrainConfig.from_file(path, run_file=run_file)


def train_config_from_parts(
    run_config: RunConfig,
    online_config: OnlineTrainConfig,
    environment_config: EnvironmentConfig,
    model_config: ModelConfig,
) -> TrainConfig:
    """Bundle the four configs (DecisionTransformerInterpretability's split) into a TrainConfig."""
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
