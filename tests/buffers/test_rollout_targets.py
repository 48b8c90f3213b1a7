"""rlstore.buffers.rollout_targets: successor values, GAE (+ intrinsic) and V-trace targets."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from rlstore import checkpoint
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.buffers.rollout_targets import (
    IntrinsicConfig,
    gae_targets,
    successor_values,
    vtrace_targets,
)
from rlstore.errors import ConfigError, SpecError
from rlstore.minibatches import RolloutBatch


def batch_of(rng: np.random.Generator, T: int, N: int, p_done: float = 0.3) -> RolloutBatch:
    term = torch.as_tensor(rng.random((T, N)) < p_done / 2)
    trunc = torch.as_tensor(rng.random((T, N)) < p_done / 2) & ~term
    f = lambda: torch.as_tensor(rng.normal(size=(T, N)).astype(np.float32))  # noqa: E731
    b = RolloutBatch(
        obs=f()[..., None],
        actions=torch.zeros(T, N, dtype=torch.long),
        logprobs=-f().abs(),
        values=f(),
        rewards=f(),
        terminated=term,
        truncated=trunc,
        final_values=f(),
        episode_time=torch.zeros(T, N, dtype=torch.long),
        int_rewards=f(),
        int_values=f(),
    )
    # final observations that encode V(final_obs) = final_values (final_obs[..., 0])
    boot = b.truncated & ~b.terminated
    return replace(b, final_obs=b.final_values[..., None], final_obs_given=boot)


def loop_gae(r, v, last, gamma, lam, term=None, trunc=None, final=None):
    """Per-step float64 loop from the GUIDE's recurrence (independent of rlstore.returns)."""
    r, v = r.double().numpy(), v.double().numpy()
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        nxt_adv = 0.0
        for t in reversed(range(T)):
            te = bool(term[t, n]) if term is not None else False
            tr = bool(trunc[t, n]) if trunc is not None else False
            nv = float(last[n]) if t == T - 1 else v[t + 1, n]
            if tr and not te:
                nv = float(final[t, n])
            delta = r[t, n] + gamma * (0.0 if te else 1.0) * nv - v[t, n]
            nxt_adv = delta + gamma * lam * (0.0 if (te or tr) else 1.0) * nxt_adv
            adv[t, n] = nxt_adv
    return torch.as_tensor(adv), torch.as_tensor(adv + v)


def test_successor_values_hand_case():
    values = torch.tensor([[1.0], [2.0], [3.0]])
    b = RolloutBatch(
        obs=values,
        actions=values,
        logprobs=values,
        values=values,
        rewards=values,
        terminated=torch.tensor([[True], [False], [False]]),
        truncated=torch.tensor([[True], [True], [False]]),
        final_values=torch.tensor([[5.0], [7.0], [8.0]]),
        episode_time=values.long(),
    )
    # t=0 terminated (termination wins over truncation: values[1] = 2 is kept, ignored by GAE);
    # t=1 truncated -> final_values[1] = 7; t=2 -> last_value = 9
    assert successor_values(values, torch.tensor([9.0]), b).flatten().tolist() == [2.0, 7.0, 9.0]
    # non-episodic stream: a plain shift
    assert successor_values(values, torch.tensor([9.0])).flatten().tolist() == [2.0, 3.0, 9.0]


@pytest.mark.parametrize("T,N,gamma,lam", [(1, 1, 0.9, 0.95), (7, 3, 0.99, 0.8), (5, 2, 1.0, 1.0)])
def test_gae_targets_match_the_loop(T, N, gamma, lam):
    rng = np.random.default_rng(T * 10 + N)
    b = batch_of(rng, T, N)
    last = torch.as_tensor(rng.normal(size=N).astype(np.float32))
    out = gae_targets(b, last, gamma=gamma, lam=lam)
    adv, ret = loop_gae(b.rewards, b.values, last, gamma, lam, b.terminated, b.truncated,
                        b.final_values)  # fmt: skip
    assert set(out) == {"advantages", "returns"}
    torch.testing.assert_close(out["advantages"].double(), adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["returns"].double(), ret, rtol=1e-5, atol=1e-5)


def test_gae_targets_intrinsic_stream_is_non_episodic_and_combined():
    rng = np.random.default_rng(3)
    b = batch_of(rng, 6, 2, p_done=0.8)
    last, last_i = torch.zeros(2), torch.tensor([0.5, -1.0])
    cfg = IntrinsicConfig(int_gamma=0.9, ext_coef=2.0, int_coef=0.5, int_lam=0.7,
                          normalize_rewards=False)  # fmt: skip
    out = gae_targets(b, last, gamma=0.99, lam=0.95, intrinsic=cfg, last_int_value=last_i)
    ext, _ = loop_gae(b.rewards, b.values, last, 0.99, 0.95, b.terminated, b.truncated,
                      b.final_values)  # fmt: skip
    int_adv, int_ret = loop_gae(b.int_rewards, b.int_values, last_i, 0.9, 0.7)  # no dones
    torch.testing.assert_close(out["int_advantages"].double(), int_adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["int_returns"].double(), int_ret, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        out["advantages"].double(), 2.0 * ext + 0.5 * int_adv, rtol=1e-5, atol=1e-5
    )
    with pytest.raises(SpecError, match="last_int_value"):
        gae_targets(b, last, gamma=0.99, lam=0.95, intrinsic=cfg)


def test_gae_targets_calls_the_reward_normalizer_once_when_enabled():
    b = batch_of(np.random.default_rng(4), 3, 2)
    calls = []

    def halve(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.clone())
        return x / 2

    kw = {"gamma": 0.9, "lam": 0.9, "last_int_value": torch.zeros(2)}
    on = gae_targets(b, torch.zeros(2), intrinsic=IntrinsicConfig(int_lam=0.0),
                     int_reward_normalizer=halve, **kw)  # fmt: skip
    assert len(calls) == 1 and torch.equal(calls[0], b.int_rewards)
    # int_lam = 0 -> one-step TD: A_int = r/2 + 0.99 * V_int(next) - V_int
    nv = torch.cat([b.int_values[1:], torch.zeros(1, 2)])
    torch.testing.assert_close(on["int_advantages"], b.int_rewards / 2 + 0.99 * nv - b.int_values)
    off = IntrinsicConfig(normalize_rewards=False)
    gae_targets(b, torch.zeros(2), intrinsic=off, int_reward_normalizer=halve, **kw)
    assert len(calls) == 1


def test_vtrace_targets_on_policy_lambda_one_is_the_monte_carlo_gae_return():
    rng = np.random.default_rng(5)
    b = batch_of(rng, 6, 3)
    last = torch.as_tensor(rng.normal(size=3).astype(np.float32))
    seen = {}

    def evaluate(obs, actions, hidden):
        if seen:  # the second call: V(final_obs) of the truncated steps
            return torch.zeros(obs.shape[:2]), obs[..., 0]
        seen.update(obs=obs, hidden=hidden, grad=torch.is_grad_enabled())
        return b.logprobs.clone(), b.values.clone()  # on-policy: rho = c = 1

    out = vtrace_targets(b, evaluate, last, gamma=0.95, lam=1.0)
    assert seen["obs"] is b.obs and seen["hidden"] is None and not seen["grad"]
    adv, ret = loop_gae(b.rewards, b.values, last, 0.95, 1.0, b.terminated, b.truncated,
                        b.final_values)  # fmt: skip
    torch.testing.assert_close(out["returns"].double(), ret, rtol=1e-5, atol=1e-5)
    assert out["advantages"].shape == (6, 3)


def test_vtrace_targets_rejects_bad_evaluate_outputs():
    b = batch_of(np.random.default_rng(6), 4, 2)
    with pytest.raises(SpecError, match=r"evaluate: expected \(target_logp, values\)"):
        vtrace_targets(b, lambda o, a, h: b.values, torch.zeros(2), gamma=0.9)
    with pytest.raises(SpecError, match=r"evaluate: values expected shape \(4, 2\), got \(4,\)"):
        vtrace_targets(b, lambda o, a, h: (b.logprobs, b.values[:, 0]), torch.zeros(2), gamma=0.9)


def test_intrinsic_config_ranges(tmp_path):
    with pytest.raises(ConfigError, match="int_gamma"):
        IntrinsicConfig(int_gamma=1.5)
    with pytest.raises(ConfigError, match="int_lam"):
        IntrinsicConfig(int_lam=-0.1)
    for name in ("ext_coef", "int_coef"):  # inf was accepted and made every advantage inf/NaN
        for bad in (math.inf, -math.inf, math.nan):
            with pytest.raises(ConfigError, match=f"{name}: expected a finite number"):
                IntrinsicConfig(**{name: bad})
    assert IntrinsicConfig(ext_coef=0, int_coef=-1.5).int_coef == -1.5
    # numpy scalars / 0-d tensors are stored as floats: they were kept, and checkpoint.save
    # refused the buffer's config
    cfg = IntrinsicConfig(
        int_gamma=np.float32(0.5), ext_coef=torch.tensor(2.0), int_lam=np.int64(1)
    )
    assert [type(getattr(cfg, k)) for k in ("int_gamma", "ext_coef", "int_lam")] == [float] * 3
    assert (cfg.int_gamma, cfg.ext_coef, cfg.int_lam) == (0.5, 2.0, 1.0)
    rb = RolloutBuffer(2, 1, intrinsic=cfg)
    json.dumps(rb.config())
    back = checkpoint.load(checkpoint.save(rb, tmp_path).parent)
    assert back.intrinsic == cfg
