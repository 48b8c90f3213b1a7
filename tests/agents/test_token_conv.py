"""The Transformer's token convolution starts as a scaled first difference (``token_diff_gain``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from rlstore.agents.ppo import (
    EnvironmentConfig,
    TransformerModelConfig,
    TransformerPPOAgent,
    make_vector_env,
)

ENV = EnvironmentConfig(env_id="CartPoleNoVel-v1")


@pytest.fixture
def envs():
    envs = make_vector_env(ENV, 2)
    yield envs
    envs.close()


def _conv_out(conv: torch.nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    return conv(F.pad(x, (conv.kernel_size[0] - 1, 0)))  # causal, as the core applies it


@pytest.mark.parametrize("k", [2, 3])
def test_token_conv_starts_as_gain_times_the_step_difference(envs, k: int) -> None:
    torch.manual_seed(0)
    cfg = TransformerModelConfig(n_ctx=4, token_conv=k, token_diff_gain=8.0)
    agent = TransformerPPOAgent(envs, ENV, cfg)
    x = torch.randn(3, cfg.d_model, 6)  # (batch, channels, tokens)
    prev = torch.cat([torch.zeros_like(x[..., :1]), x[..., :-1]], dim=-1)  # x_{t-1}, 0 before
    want = torch.zeros_like(x)
    want[:, ::2] = 8.0 * (x[:, ::2] - prev[:, ::2])  # even channels; odd channels stay 0
    for core in (agent.actor_core, agent.critic_core):
        with torch.no_grad():
            torch.testing.assert_close(_conv_out(core.conv, x), want)


def test_token_diff_gain_zero_keeps_pytorch_init(envs) -> None:
    torch.manual_seed(0)
    agent = TransformerPPOAgent(envs, ENV, TransformerModelConfig(n_ctx=4, token_diff_gain=0.0))
    w = agent.actor_core.conv.weight
    assert w[1::2].abs().sum() > 0 and agent.actor_core.conv.bias.abs().sum() > 0
    assert TransformerModelConfig().token_diff_gain == 8.0  # the shipped default


def test_token_diff_gain_is_validated() -> None:
    from rlstore.errors import ConfigError

    for bad in (-1.0, float("nan"), float("inf"), "big"):
        with pytest.raises(ConfigError, match=r"^TransformerModelConfig: token_diff_gain: "):
            TransformerModelConfig(token_diff_gain=bad)  # type: ignore[arg-type]
