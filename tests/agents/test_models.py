"""Agents, scheduler and configs: init, distributions, dispatch, first-minibatch ratio == 1."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlstore.agents.networks import (
    FCAgent,
    LSTMPPOAgent,
    PPOAgent,
    TransformerPPOAgent,
    get_agent,
    layer_init,
)
from rlstore.agents.ppo import PPOScheduler, RolloutState, make_vector_env, ppo_loss, run_rollout
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    LSTMModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TrainConfig,
    TransformerModelConfig,
    load_train_config,
)
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError

ENV = EnvironmentConfig(env_id="CartPole-v1")
MODELS = [None, LSTMModelConfig(recurrence=4), TransformerModelConfig(n_ctx=3)]
TRANSFORMER_CONV3 = TransformerModelConfig(n_ctx=3, token_conv=3, time_embedding=False)
LSTM_SB3 = LSTMModelConfig(recurrence=4, obs_encoder=False, activation="relu", ortho_init=False)
"""sb3-contrib's ``MlpLstmPolicy`` as RL Zoo configures it for CartPoleNoVel-v1."""


@pytest.fixture
def cartpole():
    envs = make_vector_env(ENV, 4)
    yield envs
    envs.close()


# ------------------------------------------------------------------ scheduler


def test_scheduler_hand_values() -> None:
    # initial 1e-3, end 1e-4, 3 updates: lr_k = 1e-3 - 9e-4 * min(k, 3) / 3
    #   k=0: 1e-3, k=1: 7e-4, k=2: 4e-4, k=3: 1e-4, k=4: 1e-4 (held)
    opt = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=123.0)
    sched = PPOScheduler(opt, 1e-3, 1e-4, 3)
    seen = [opt.param_groups[0]["lr"]]
    for _ in range(4):
        sched.step()
        seen.append(opt.param_groups[0]["lr"])
    assert seen == pytest.approx([1e-3, 7e-4, 4e-4, 1e-4, 1e-4], abs=1e-15)


def test_scheduler_state_round_trip_and_validation() -> None:
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    a = PPOScheduler(opt, 1.0, 0.0, 10)
    for _ in range(3):
        a.step()
    opt2 = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    b = PPOScheduler(opt2, 1.0, 0.0, 10)
    b.load_state_dict(a.state_dict())
    assert opt2.param_groups[0]["lr"] == pytest.approx(0.7)
    with pytest.raises(ConfigError, match="num_updates"):
        PPOScheduler(opt, 1.0, 0.0, 0)
    with pytest.raises(ConfigError, match="initial_lr"):
        PPOScheduler(opt, 0.0, 0.0, 3)
    # no bools (True was a rate of 1.0), no inf; a refused call leaves the optimizer alone
    opt.param_groups[0]["lr"] = 0.5
    for lr0, lr1, n, name in (
        (True, 0.0, 3, "initial_lr"),
        (float("inf"), 0.0, 3, "initial_lr"),
        (1.0, float("inf"), 3, "end_lr"),
        (1.0, False, 3, "end_lr"),
        ("1", 0.0, 3, "initial_lr"),
        (1.0, 0.0, True, "num_updates"),
    ):
        with pytest.raises(ConfigError, match=rf"{name}: expected .*got"):
            PPOScheduler(opt, lr0, lr1, n)  # type: ignore[arg-type]
    assert opt.param_groups[0]["lr"] == 0.5
    with pytest.raises(ConfigError, match="num_updates"):
        a.replan(True)  # type: ignore[arg-type]


# ------------------------------------------------------------------ models


def test_layer_init_is_orthogonal_with_gain() -> None:
    torch.manual_seed(0)
    layer = layer_init(torch.nn.Linear(16, 8), std=0.5, bias_const=0.3)
    w = layer.weight.detach().double()
    # 8 x 16 orthogonal rows scaled by 0.5: W W^T = 0.25 I
    assert torch.allclose(w @ w.T, 0.25 * torch.eye(8, dtype=torch.float64), atol=1e-6)
    assert torch.equal(layer.bias.detach(), torch.full((8,), 0.3))


def test_get_agent_dispatch(cartpole) -> None:
    oc = OnlineTrainConfig(hidden_size=32)
    assert isinstance(get_agent(None, cartpole, ENV, oc), FCAgent)
    assert get_agent(None, cartpole, ENV, oc).actor[0].out_features == 32
    assert isinstance(get_agent(MODELS[1], cartpole, ENV, oc), LSTMPPOAgent)
    assert isinstance(get_agent(MODELS[2], cartpole, ENV, oc), TransformerPPOAgent)
    with pytest.raises(ConfigError, match="model_config"):
        get_agent(oc, cartpole, ENV, oc)  # type: ignore[arg-type]


def test_ppo_agent_base_is_abstract(cartpole) -> None:
    # nn.Module's metaclass is plain `type`, so @abstractmethod alone was not enforced
    with pytest.raises(TypeError, match="abstract"):
        PPOAgent(cartpole)

    class HalfAgent(PPOAgent):  # _evaluate missing
        def _step(self, obs, memory, episode_time):
            raise NotImplementedError

    with pytest.raises(TypeError, match="_evaluate"):
        HalfAgent(cartpole)
    assert isinstance(FCAgent(cartpole, ENV), PPOAgent)  # concrete agents still build


def test_fc_heads_init_and_shapes(cartpole) -> None:
    torch.manual_seed(0)
    agent = FCAgent(cartpole, ENV)
    # CleanRL init: actor head gain 0.01 -> near-uniform policy at start
    head = agent.actor[-1].weight.detach().double()
    assert torch.allclose(head @ head.T, 1e-4 * torch.eye(2, dtype=torch.float64), atol=1e-9)
    params, value, hidden, mem = agent._step(torch.zeros(5, 4), None, torch.zeros(5))
    assert params.shape == (5, 2) and value.shape == (5,) and hidden is None and mem is None


def test_continuous_gaussian_log_prob_and_clipping() -> None:
    envs = make_vector_env(EnvironmentConfig(env_id="Pendulum-v1"), 2)
    try:
        agent = FCAgent(envs, None)
        assert not agent.discrete and agent.action_dim == 1
        with torch.no_grad():
            agent.actor_logstd.fill_(math.log(0.5))
        mean = torch.tensor([[0.3], [-1.0]])
        a = torch.tensor([[0.8], [-1.0]])
        # N(0.3, 0.5): log p(0.8) = -0.5 * (0.5/0.5)^2 - ln(0.5) - 0.5 ln(2 pi)
        expect0 = -0.5 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
        expect1 = -math.log(0.5) - 0.5 * math.log(2 * math.pi)
        lp = agent.distribution(mean).log_prob(a)
        assert lp.tolist() == pytest.approx([expect0, expect1], abs=1e-6)
        # env actions are clipped to the Box bounds [-2, 2]
        clipped = agent.env_action(torch.tensor([[5.0], [-0.5]]))
        assert clipped.tolist() == [[2.0], [-0.5]] and clipped.dtype == np.float32
    finally:
        envs.close()


def test_lstm_memory_resets_only_finished_envs(cartpole) -> None:
    agent = LSTMPPOAgent(cartpole, ENV, LSTMModelConfig(memory_dim=8))
    mem = tuple(torch.full((4, 8), float(k + 1)) for k in range(4))  # actor (h, c), critic (h, c)
    out = agent.reset_memory(mem, torch.tensor([False, True, False, True]))
    for k, m in enumerate(out):
        assert m[[1, 3]].abs().sum() == 0
        assert torch.equal(m[[0, 2]], torch.full((2, 8), float(k + 1)))


def test_lstm_architecture_options(cartpole) -> None:
    torch.manual_seed(0)
    default = LSTMPPOAgent(cartpole, ENV, LSTMModelConfig(memory_dim=8, image_dim=16))
    core = default.actor_core
    assert isinstance(core.encoder[1], torch.nn.Tanh) and core.lstm.input_size == 16
    assert isinstance(default.actor[1], torch.nn.Tanh)
    assert core.lstm.bias_ih_l0.abs().max().item() == 0.0  # CleanRL init: zero biases
    # orthogonal 0.01-gain policy output: rows of norm 0.01
    assert default.actor[-1].weight.norm(dim=1).max().item() == pytest.approx(0.01, rel=1e-4)
    sb3 = LSTMPPOAgent(
        cartpole, ENV, LSTMModelConfig(memory_dim=8, obs_encoder=False, activation="relu",
                                       ortho_init=False),
    )  # fmt: skip
    for core in (sb3.actor_core, sb3.critic_core):
        assert isinstance(core.encoder, torch.nn.Identity) and core.lstm.input_size == 4
        assert core.lstm.bias_ih_l0.abs().min().item() > 0.0  # PyTorch's U(-1/sqrt(H), ..)
    assert isinstance(sb3.actor[1], torch.nn.ReLU) and isinstance(sb3.critic[1], torch.nn.ReLU)
    # PyTorch default Linear init U(-1/sqrt(8), 1/sqrt(8)): rows far larger than 0.01
    assert sb3.actor[-1].weight.norm(dim=1).min().item() > 0.1
    params, value, _, mem = sb3._step(torch.ones(4, 4), sb3.initial_memory(4), torch.zeros(4))
    assert params.shape == (4, 2) and value.shape == (4,) and mem[0].shape == (4, 8)
    with pytest.raises(ConfigError, match="activation"):
        LSTMModelConfig(activation="gelu")  # type: ignore[arg-type]


def test_transformer_ignores_padding_and_older_steps(cartpole) -> None:
    torch.manual_seed(0)
    agent = TransformerPPOAgent(cartpole, ENV, TransformerModelConfig(n_ctx=3))
    obs = torch.randn(2, 3, 4)
    t = torch.tensor([[0, 1, 2], [0, 1, 2]])
    mask = torch.tensor([[False, True, True], [False, True, True]])
    other = obs.clone()
    other[:, 0] = 99.0  # padded position: must not change the output
    with torch.no_grad():
        a = agent.forward_window(obs, t, mask)
        b = agent.forward_window(other, t, mask)
        c = agent.forward_window(obs, t, torch.ones_like(mask))
    assert torch.allclose(a, b) and not torch.allclose(a, c)


def test_transformer_token_conv_is_causal_and_sees_the_previous_step(cartpole) -> None:
    # The causal depthwise convolution over the tokens: the last position's features depend on
    # the real steps only (padding right before the first real step is inside the kernel), and
    # the kernel lets a token combine itself with the step before it exactly.
    torch.manual_seed(0)
    cfg = TransformerModelConfig(n_ctx=4, token_conv=3, time_embedding=False)
    agent = TransformerPPOAgent(cartpole, ENV, cfg)
    assert agent.actor_core.conv.weight.shape == (cfg.d_model, 1, 3)
    obs, t = torch.randn(3, 4, 4), torch.arange(4).repeat(3, 1)
    mask = torch.tensor([[False, False, True, True], [False, True, True, True], [True] * 4])
    other = obs.clone()
    other[~mask] = 99.0
    with torch.no_grad():
        a, b = agent.forward_window(obs, t, mask), agent.forward_window(other, t, mask)
        core = agent.actor_core
        core.conv.weight.zero_(), core.conv.bias.zero_()
        core.conv.weight[:, 0, 1] = -1.0  # tokens x_t + conv(x)_t = x_t - x_{t-1}
        tokens: list[torch.Tensor] = []
        core.blocks[0].register_forward_pre_hook(lambda m, args: tokens.append(args[0]))
        core(obs, t, mask)
        emb = core.obs_embed(obs) * mask[..., None]
    assert torch.allclose(a, b)
    got = tokens[0] - core.pos_embed.weight[None]
    assert torch.allclose(got[:, 1:], emb[:, 1:] - emb[:, :-1], atol=1e-6)
    assert torch.allclose(got[0, 2], core.obs_embed(obs[0, 2]), atol=1e-6)  # first real step


def test_transformer_time_embedding_switch(cartpole) -> None:
    torch.manual_seed(0)
    obs, mask = torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    early, late = torch.tensor([[0, 1, 2]] * 2), torch.tensor([[300, 301, 302]] * 2)
    for flag in (True, False):
        cfg = TransformerModelConfig(n_ctx=3, time_embedding=flag, layer_norm=True)
        agent = TransformerPPOAgent(cartpole, ENV, cfg)
        with torch.no_grad():
            a, b = agent.forward_window(obs, early, mask), agent.forward_window(obs, late, mask)
        # with the embedding, the features depend on the step index; without, only the window
        assert torch.allclose(a, b) is not flag
        assert (agent.actor_core.time_embed is None) is not flag
    assert TransformerModelConfig().time_embedding  # default unchanged
    off = TransformerPPOAgent(cartpole, ENV, TransformerModelConfig(n_ctx=3, token_conv=0))
    assert off.actor_core.conv is None and TransformerModelConfig().token_conv == 2


def _first_minibatch(model, envs):
    torch.manual_seed(1)
    oc = OnlineTrainConfig(num_envs=4, num_steps=48, num_minibatches=4)
    agent = get_agent(model, envs, ENV, oc)
    buf = RolloutBuffer(48, 4, advantage_normalization="none", seed=0)
    state = RolloutState.start(agent, envs, 0)
    run_rollout(agent, buf, 48, envs, state)
    assert len(state.episode_returns) > 0  # episodes ended inside the rollout: resets exercised
    return agent, next(iter(agent.minibatches(buf, oc)))


def _check_reproduces_rollout(agent, mb, nudge=lambda p: p) -> None:
    """Re-evaluating the rollout with unchanged parameters reproduces its log-probs and values.

    The rollout evaluated 4 envs per call, the minibatch evaluates 48 rows at once: different
    shapes, so BLAS may sum in another order and the last bits differ by CPU (Intel/AMD).
    Tolerances: ratio within 1e-5 of 1 (a wrong log-prob is off by far more), approx_kl
    (computed in float64, ~ logratio**2 / 2) below 1e-10.
    """
    with torch.no_grad():
        params, values, mask = agent._evaluate(mb)
        new_lp = agent.distribution(nudge(params)).log_prob(mb.actions)
    flat = (lambda x: x.reshape(-1)) if mask is None else (lambda x: x[mask])
    ratio = (flat(new_lp).double() - flat(mb.logprobs).double()).exp()
    assert (ratio - 1).abs().max().item() <= 1e-5
    assert torch.allclose(flat(values), flat(mb.values), atol=1e-6)
    m = None if mask is None else mask.reshape(-1).double()
    z = torch.zeros(new_lp.numel(), dtype=torch.float64)
    out = ppo_loss(new_lp.reshape(-1).double(), mb.logprobs.reshape(-1).double(),
                   mb.advantages.reshape(-1).double(), z, z, z, z, mask=m)  # fmt: skip
    assert 0.0 <= out.approx_kl.item() < 1e-10
    assert out.clipfrac.item() == 0.0  # a count of |r - 1| > 0.2: exact, no rounding involved


@pytest.mark.parametrize(
    "model",
    [*MODELS, LSTM_SB3, TRANSFORMER_CONV3],
    ids=["fc", "lstm", "transformer", "lstm-sb3-options", "transformer-conv3"],
)
def test_first_minibatch_ratio_is_one(model, cartpole) -> None:
    agent, mb = _first_minibatch(model, cartpole)
    _check_reproduces_rollout(agent, mb)


def test_first_minibatch_check_tolerates_rounding_and_catches_real_errors(cartpole) -> None:
    # Regression (Intel CPUs): a few ulps of difference between the rollout's and the
    # minibatch's evaluation, as another kernel's summation order gives, must pass ...
    agent, mb = _first_minibatch(MODELS[2], cartpole)

    def ulps(p, n=4):
        for _ in range(n):
            p = torch.nextafter(p, torch.full_like(p, math.inf))
        return p

    _check_reproduces_rollout(agent, mb, ulps)
    # ... while a real error (a logit off by 1e-3: log-prob off by ~5e-4) must fail
    with pytest.raises(AssertionError):
        _check_reproduces_rollout(agent, mb, lambda p: p + torch.tensor([1e-3, 0.0]))


# ------------------------------------------------------------------ configs


def test_every_config_field_is_documented() -> None:
    for cls in (RunConfig, EnvironmentConfig, OnlineTrainConfig, LSTMModelConfig,
                TransformerModelConfig, TrainConfig):  # fmt: skip
        for name, info in cls.model_fields.items():
            assert info.description and len(info.description) > 5, f"{cls.__name__}.{name}"


def test_config_errors_name_the_field(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"^OnlineTrainConfig: num_envs: Input should be greater"):
        OnlineTrainConfig(num_envs=0)
    with pytest.raises(ConfigError, match=r"^OnlineTrainConfig: num_minibatches: must divide"):
        OnlineTrainConfig(num_envs=4, num_steps=8, num_minibatches=3)
    with pytest.raises(ConfigError, match=r"^TransformerModelConfig: n_heads: must divide"):
        TransformerModelConfig(d_model=10, n_heads=4)
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match=r"^TransformerModelConfig: token_conv: "):
            TransformerModelConfig(token_conv=bad)  # type: ignore[arg-type]
    p = tmp_path / "c.yaml"
    p.write_text("online:\n  num_env: 4\n")
    with pytest.raises(
        ConfigError, match=r"^TrainConfig: online\.num_env: unknown key \(got 4\); allowed"
    ):
        load_train_config(p)
    p.write_text("online: [1, 2\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_train_config(p)


def test_run_configs_share_the_buffer_config_rules(tmp_path) -> None:
    """The PPO configs had their own base: inf/NaN were accepted, a non-UTF-8 file raised
    UnicodeDecodeError, JSON files were not read, and each bad key was not listed with its path."""
    with pytest.raises(ConfigError, match=r"learning_rate: Input should be a finite number"):
        OnlineTrainConfig(learning_rate=float("inf"))
    p = tmp_path / "c.yaml"
    p.write_bytes(b"\xff\xfe\x00online: 1")
    with pytest.raises(ConfigError, match="expected a UTF-8 text file"):
        load_train_config(p)
    p.write_text("online: {num_envs: 0, gamma: 2}\nrun: {seed: -1}\n")
    with pytest.raises(ConfigError, match=r"TrainConfig: 3 invalid key\(s\)") as info:
        load_train_config(p)
    for key in ("online.num_envs", "online.gamma", "run.seed"):
        assert f"\n  {key}: " in str(info.value)
    j = tmp_path / "c.json"
    j.write_text('{"online": {"num_steps": 16}}')
    assert load_train_config(j).online.num_steps == 16
    assert load_train_config(_empty(tmp_path)) == TrainConfig()


def _empty(tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("")
    return p


def test_config_yaml_round_trip(tmp_path) -> None:
    cfg = TrainConfig.from_dict({"agent": "lstm", "online": {"num_steps": 16}, "run": {"seed": 7}})
    cfg.to_yaml(tmp_path / "c.yaml")
    back = load_train_config(tmp_path / "c.yaml")
    assert back == cfg and isinstance(back.selected_model_config(), LSTMModelConfig)
    assert back.online.batch_size == 4 * 16 and back.online.num_updates == 500_000 // 64


def test_spaces_that_are_not_supported(cartpole) -> None:
    class Fake:
        single_observation_space = gym.spaces.Box(-1, 1, (3,))
        single_action_space = gym.spaces.MultiBinary(3)

    with pytest.raises(ConfigError, match="single_action_space"):
        FCAgent(Fake(), None)
    with pytest.raises(ConfigError, match="vector env"):
        FCAgent(object(), None)


def test_transformer_window_spans_rollouts_and_ratio_stays_one(cartpole) -> None:
    # Regression: the window was cleared at every rollout start, so the first step of each
    # rollout saw one observation (the velocities of CartPoleNoVel cannot be inferred from it).
    torch.manual_seed(1)
    oc = OnlineTrainConfig(num_envs=4, num_steps=4, num_minibatches=2)
    agent = get_agent(MODELS[2], cartpole, ENV, oc)
    buf = RolloutBuffer(4, 4, advantage_normalization="none", seed=0)
    state = RolloutState.start(agent, cartpole, 0)
    run_rollout(agent, buf, 4, cartpole, state)
    last_obs = buf.get().obs[-1].clone()  # (N, 4): the last step of the first rollout
    buf.reset()
    run_rollout(agent, buf, 4, cartpole, state)
    obs_w, mask_w, time_w = buf.get().hidden  # the windows the second rollout acted on
    first_t = buf.get().episode_time[0]
    cont = first_t > 0  # episodes that continue from the first rollout
    assert cont.any()
    W = agent.transformer_config.n_ctx
    # the window at the first step of the second rollout ends with the first rollout's last obs
    assert torch.equal(obs_w[0][cont, W - 2], last_obs[cont])
    assert mask_w[0][cont, W - 2].all() and torch.equal(time_w[0][cont, W - 2], first_t[cont] - 1)
    assert torch.equal(mask_w[0].sum(1), torch.clamp(first_t + 1, max=W))
    _check_reproduces_rollout(agent, next(iter(agent.minibatches(buf, oc))))


def test_lstm_minibatch_starts_from_the_rollouts_hidden_state(cartpole) -> None:
    # Every chunk of the recurrent minibatch starts from the state the rollout had before its
    # first step: zeros at episode starts, the carried state elsewhere (the previous rollout's
    # state for chunks at t = 0).
    torch.manual_seed(2)
    oc = OnlineTrainConfig(num_envs=4, num_steps=16, num_minibatches=2)
    agent = get_agent(MODELS[1], cartpole, ENV, oc)
    buf = RolloutBuffer(16, 4, advantage_normalization="none", seed=0)
    state = RolloutState.start(agent, cartpole, 0)
    run_rollout(agent, buf, 16, cartpole, state)
    carried = tuple(m.clone() for m in state.memory)
    buf.reset()
    run_rollout(agent, buf, 16, cartpole, state)
    batch = buf.get()
    for mb in agent.minibatches(buf, oc):
        first = mb.indices[0]
        t, n = first // 4, first % 4
        starts = batch.episode_time.reshape(-1)[first] == 0
        for k, h in enumerate(mb.recurrence_memory):
            assert torch.equal(h[starts], torch.zeros_like(h[starts]))
            at0 = (t == 0) & ~starts
            assert torch.equal(h[at0], carried[k][n[at0]])
    _check_reproduces_rollout(agent, next(iter(agent.minibatches(buf, oc))))


def test_the_networks_hold_no_algorithm() -> None:
    # issue 11: the algorithm (rollout, update, optimizer) lives in rlstore.agents.ppo /
    # rlstore.agents.rollout, not in the nn.Module hierarchy
    for name in ("rollout", "learn", "make_optimizer"):
        assert not hasattr(PPOAgent, name), name


# the token convolution starts as a scaled first difference (token_diff_gain)


def _conv_out(conv: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    return conv(F.pad(x, (conv.kernel_size[0] - 1, 0)))  # causal, as the core applies it


@pytest.mark.parametrize("k", [2, 3])
def test_token_conv_starts_as_gain_times_the_step_difference(cartpole, k: int) -> None:
    torch.manual_seed(0)
    cfg = TransformerModelConfig(n_ctx=4, token_conv=k, token_diff_gain=8.0)
    agent = TransformerPPOAgent(cartpole, ENV, cfg)
    x = torch.randn(3, cfg.d_model, 6)  # (batch, channels, tokens)
    prev = torch.cat([torch.zeros_like(x[..., :1]), x[..., :-1]], dim=-1)  # x_{t-1}, 0 before
    want = torch.zeros_like(x)
    want[:, ::2] = 8.0 * (x[:, ::2] - prev[:, ::2])  # even channels; odd channels stay 0
    for core in (agent.actor_core, agent.critic_core):
        with torch.no_grad():
            torch.testing.assert_close(_conv_out(core.conv, x), want)


def test_token_diff_gain_zero_keeps_pytorch_init(cartpole) -> None:
    torch.manual_seed(0)
    agent = TransformerPPOAgent(cartpole, ENV, TransformerModelConfig(n_ctx=4, token_diff_gain=0.0))
    w = agent.actor_core.conv.weight
    assert w[1::2].abs().sum() > 0 and agent.actor_core.conv.bias.abs().sum() > 0
    assert TransformerModelConfig().token_diff_gain == 8.0  # the shipped default


def test_token_diff_gain_is_validated() -> None:
    for bad in (-1.0, float("nan"), float("inf"), "big"):
        with pytest.raises(ConfigError, match=r"^TransformerModelConfig: token_diff_gain: "):
            TransformerModelConfig(token_diff_gain=bad)  # type: ignore[arg-type]
