"""PPO loss: hand-computed values, the loop twin, and the gradient properties of the clip."""

from __future__ import annotations

import math

import pytest
import torch

from rlstore.agents.ppo_update import ADV_EPS, ppo_loss
from rlstore.errors import ConfigError, SpecError


def ppo_loss_reference(
    new_logprob: list[float],
    old_logprob: list[float],
    advantages: list[float],
    new_values: list[float],
    old_values: list[float],
    returns: list[float],
    entropy: list[float],
    *,
    clip_coef: float = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
    clip_vloss: bool = True,
    norm_adv: bool = True,
    mask: list[float] | None = None,
) -> dict[str, float]:
    """Plain-Python loop twin of :func:`ppo_loss` (floats in, floats out)."""
    n = len(new_logprob)
    w = [1.0] * n if mask is None else [float(x) for x in mask]
    k = sum(w)
    adv = list(advantages)
    if norm_adv and k >= 1:  # population std (ddof=0), like rlstore.returns.normalize_advantages
        mean = sum(a * wi for a, wi in zip(adv, w, strict=True)) / k
        std = math.sqrt(sum(wi * (a - mean) ** 2 for a, wi in zip(adv, w, strict=True)) / k)
        adv = [(a - mean) / (std + ADV_EPS) for a in adv]
    tot = {"pg": 0.0, "v": 0.0, "ent": 0.0, "kl": 0.0, "okl": 0.0, "cf": 0.0}
    for i in range(n):
        lr = new_logprob[i] - old_logprob[i]
        r = math.exp(lr)
        rc = min(max(r, 1.0 - clip_coef), 1.0 + clip_coef)
        tot["pg"] += w[i] * max(-adv[i] * r, -adv[i] * rc)
        vu = (new_values[i] - returns[i]) ** 2
        if clip_vloss:
            d = min(max(new_values[i] - old_values[i], -clip_coef), clip_coef)
            vu = max(vu, (old_values[i] + d - returns[i]) ** 2)
        tot["v"] += w[i] * vu
        tot["ent"] += w[i] * entropy[i]
        tot["kl"] += w[i] * ((r - 1.0) - lr)
        tot["okl"] += w[i] * (-lr)
        tot["cf"] += w[i] * float(abs(r - 1.0) > clip_coef)
    k = max(k, 1.0)
    pg, v, ent = tot["pg"] / k, 0.5 * tot["v"] / k, tot["ent"] / k
    return {
        "loss": pg - ent_coef * ent + vf_coef * v,
        "pg_loss": pg,
        "v_loss": v,
        "entropy": ent,
        "approx_kl": tot["kl"] / k,
        "old_approx_kl": tot["okl"] / k,
        "clipfrac": tot["cf"] / k,
    }


def _t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


def _args(n: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    old = torch.randn(n, generator=gen, dtype=torch.float64) - 1.0
    return {
        "new_logprob": old + 0.4 * torch.randn(n, generator=gen, dtype=torch.float64),
        "old_logprob": old,
        "advantages": torch.randn(n, generator=gen, dtype=torch.float64),
        "new_values": torch.randn(n, generator=gen, dtype=torch.float64),
        "old_values": torch.randn(n, generator=gen, dtype=torch.float64),
        "returns": torch.randn(n, generator=gen, dtype=torch.float64),
        "entropy": torch.rand(n, generator=gen, dtype=torch.float64),
    }


def test_same_policy_gives_ratio_one_no_clip_no_kl() -> None:
    # first minibatch of an update: new logprobs == rollout logprobs, so r = exp(0) = 1 exactly
    lp = _t(-0.3, -1.2, -2.0, -0.7)
    out = ppo_loss(
        lp.clone(), lp, _t(1.0, -2.0, 0.5, 3.0), _t(0, 0, 0, 0), _t(0, 0, 0, 0),
        _t(1, 1, 1, 1), _t(0.5, 0.5, 0.5, 0.5),
    )  # fmt: skip
    # bitwise on purpose: identical inputs give logratio = 0.0 and exp(0) = 1 exactly in IEEE
    assert out.approx_kl.item() == 0.0
    assert out.old_approx_kl.item() == 0.0
    assert out.clipfrac.item() == 0.0


def test_hand_computed_policy_loss_and_diagnostics() -> None:
    # r = [1.5, 0.5], A = [1, -1] (no normalization), eps = 0.2:
    #   i0: max(-1*1.5, -1*1.2) = -1.2 ; i1: max(1*0.5, 1*0.8) = 0.8 ; pg = (-1.2 + 0.8) / 2 = -0.2
    #   k3: (0.5 - ln 1.5 = 0.0945349) and (-0.5 - ln 0.5 = 0.1931472) -> mean 0.1438410
    #   old_approx_kl = mean(-ln r) = (-0.4054651 + 0.6931472) / 2 = 0.1438410
    #   clipfrac: |r - 1| = 0.5 > 0.2 for both -> 1
    old = _t(-1.0, -1.0)
    new = old + torch.log(_t(1.5, 0.5))
    z = _t(0.0, 0.0)
    out = ppo_loss(new, old, _t(1.0, -1.0), z, z, z, _t(0.3, 0.1), norm_adv=False,
                   ent_coef=0.5, vf_coef=0.0)  # fmt: skip
    assert out.pg_loss.item() == pytest.approx(-0.2, abs=1e-12)
    assert out.approx_kl.item() == pytest.approx(0.1438410, abs=1e-6)
    assert out.old_approx_kl.item() == pytest.approx(0.1438410, abs=1e-6)
    assert out.clipfrac.item() == 1.0
    # total = pg - 0.5 * mean(entropy) = -0.2 - 0.5 * 0.2 = -0.3
    assert out.loss.item() == pytest.approx(-0.3, abs=1e-12)


def test_value_clipping_hand_computed() -> None:
    # v_old = [1.0, 0.0], v = [1.5, 0.1], R = [2.0, 1.0], eps = 0.2
    #   i0: unclipped (1.5-2)^2 = 0.25 ; clipped v = 1 + 0.2 = 1.2 -> (1.2-2)^2 = 0.64 ; max 0.64
    #   i1: unclipped (0.1-1)^2 = 0.81 ; clipped v = 0 + 0.1 = 0.1 -> 0.81 ; max 0.81
    #   clipped loss = 0.5 * (0.64 + 0.81) / 2 = 0.3625
    #   unclipped loss = 0.5 * (0.25 + 0.81) / 2 = 0.265
    lp = _t(-1.0, -1.0)
    args = (lp, lp, _t(0.0, 0.0), _t(1.5, 0.1), _t(1.0, 0.0), _t(2.0, 1.0), _t(0.0, 0.0))
    assert ppo_loss(*args, clip_vloss=True).v_loss.item() == pytest.approx(0.3625, abs=1e-12)
    assert ppo_loss(*args, clip_vloss=False).v_loss.item() == pytest.approx(0.265, abs=1e-12)


@pytest.mark.parametrize("adv, ratio", [(2.0, 1.5), (-2.0, 0.5)])
def test_clipped_side_has_zero_policy_gradient(adv: float, ratio: float) -> None:
    # A > 0 and r > 1 + eps (or A < 0 and r < 1 - eps): the clipped term is the max and constant
    old = _t(-1.0)
    new = (old + math.log(ratio)).requires_grad_(True)
    z = _t(0.0)
    out = ppo_loss(new, old, _t(adv), z, z, z, z, norm_adv=False)
    out.pg_loss.backward()
    assert new.grad is not None and new.grad.item() == 0.0


def test_unclipped_side_has_the_surrogate_gradient() -> None:
    # A = 2 > 0, r = 1.1 inside [0.8, 1.2]: pg = -A r, d pg / d logp = -A r = -2.2
    old = _t(-1.0)
    new = (old + math.log(1.1)).requires_grad_(True)
    z = _t(0.0)
    ppo_loss(new, old, _t(2.0), z, z, z, z, norm_adv=False).pg_loss.backward()
    assert new.grad.item() == pytest.approx(-2.2, abs=1e-12)


def test_advantage_normalization_is_the_library_population_std() -> None:
    # A = [1,2,3,4]: mean 2.5, population var (2.25+0.25+0.25+2.25)/4 = 1.25, std 1.1180340
    #   -> A_n = [-1.3416408, -0.4472136, 0.4472136, 1.3416408] (rlstore.returns, ddof=0)
    # r = [1.1, 1, 1, 1] (inside the 0.2 clip): pg = -mean(A_n * r) = -(sum A_n + 0.1 A_n[0]) / 4
    #   = -0.1 * (-1.3416408) / 4 = 0.0335410 (the sample std would give 0.0290474)
    old = _t(-1.0, -1.0, -1.0, -1.0)
    new = old + torch.log(_t(1.1, 1.0, 1.0, 1.0))
    z = torch.zeros(4, dtype=torch.float64)
    out = ppo_loss(new, old, _t(1.0, 2.0, 3.0, 4.0), z, z, z, z)
    assert out.pg_loss.item() == pytest.approx(0.0335410, abs=1e-7)
    # masked: statistics over the real entries only (the padded advantage 100 is ignored)
    old5, z5 = torch.cat([old, _t(-1.0)]), torch.zeros(5, dtype=torch.float64)
    new5 = torch.cat([new, _t(-1.0)])
    masked = ppo_loss(
        new5, old5, _t(1.0, 2.0, 3.0, 4.0, 100.0), z5, z5, z5, z5, mask=_t(1, 1, 1, 1, 0)
    )
    assert masked.pg_loss.item() == pytest.approx(0.0335410, abs=1e-7)
    # one entry: population std 0, so A_n = 0 / (0 + 1e-8) = 0 and pg = 0 whatever A was
    one = ppo_loss(_t(-0.5), _t(-1.0), _t(5.0), _t(0.0), _t(0.0), _t(0.0), _t(0.0))
    assert one.pg_loss.item() == 0.0
    # a mask selecting nothing: no normalization error, every mean is 0
    empty = ppo_loss(new, old, _t(1.0, 2.0, 3.0, 4.0), z, z, z, z, mask=z)
    assert empty.loss.item() == 0.0


@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("norm_adv", [True, False])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("n", [2, 7, 64])
def test_matches_loop_reference(clip_vloss: bool, norm_adv: bool, masked: bool, n: int) -> None:
    gen = torch.Generator().manual_seed(n * 8 + 4 * clip_vloss + 2 * norm_adv + masked)
    args = _args(n, gen)
    mask = None
    if masked:
        mask = (torch.rand(n, generator=gen) < 0.7).to(torch.float64)
        mask[:2] = 1.0
    kw = dict(clip_coef=0.2, vf_coef=0.7, ent_coef=0.03, clip_vloss=clip_vloss, norm_adv=norm_adv)
    out = ppo_loss(**args, mask=mask, **kw)
    ref = ppo_loss_reference(
        **{k: v.tolist() for k, v in args.items()},
        mask=None if mask is None else mask.tolist(),
        **kw,
    )
    for key, value in ref.items():
        assert getattr(out, key).item() == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_shape_mismatch_names_the_argument() -> None:
    a = torch.zeros(4)
    with pytest.raises(SpecError, match=r"returns: expected a 1-D tensor of shape \(4,\)"):
        ppo_loss(a, a, a, a, a, torch.zeros(3), a)
    with pytest.raises(SpecError, match="mask"):
        ppo_loss(a, a, a, a, a, a, a, mask=torch.ones(2))


@pytest.mark.parametrize(
    "kwargs",
    [{"clip_coef": -0.2}, {"clip_coef": float("nan")}, {"vf_coef": float("inf")},
     {"ent_coef": True}, {"ent_coef": "0.01"}, {"vf_coef": -1.0}],
)  # fmt: skip
def test_coefficients_are_validated(kwargs) -> None:
    # a negative clip_coef clamped every ratio to 1 - eps > 1 + eps: a silently wrong loss
    a = torch.zeros(4)
    (name,) = kwargs
    with pytest.raises(ConfigError, match=rf"{name}: expected a finite number >= 0, got"):
        ppo_loss(a, a, a, a, a, a, a, **kwargs)


def test_mask_must_be_zeros_and_ones() -> None:
    a = torch.zeros(4)
    with pytest.raises(SpecError, match=r"mask: expected 0/1 entries, got values \[0.0, 1.0, 2"):
        ppo_loss(a, a, a, a, a, a, a, mask=torch.tensor([1.0, 0.0, 2.0, 1.0]))
    ppo_loss(a, a, a, a, a, a, a, mask=torch.tensor([True, False, True, True]))


@pytest.mark.parametrize("clip_vloss", [True, False])
def test_zero_entropy_coef_keeps_value_and_gradient(clip_vloss: bool) -> None:
    # with ent_coef = 0 the entropy term is left out of the graph; the loss and the gradients
    # must equal those of the full formula pg - 0 * mean(entropy) + vf_coef * v_loss, written out
    # here by hand over the same leaves (the entropy branch contributes exact zeros there)
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(16, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    v_new = torch.randn(16, generator=gen, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, 3, (16,), generator=gen)
    old_lp = torch.randn(16, generator=gen, dtype=torch.float64) - 1.0
    adv, v_old, ret = (torch.randn(16, generator=gen, dtype=torch.float64) for _ in range(3))

    def parts() -> tuple[torch.Tensor, torch.Tensor]:
        dist = torch.distributions.Categorical(logits=logits)
        return dist.log_prob(actions), dist.entropy()

    new_lp, ent = parts()
    out = ppo_loss(new_lp, old_lp, adv, v_new, v_old, ret, ent, ent_coef=0.0, vf_coef=0.5,
                   clip_vloss=clip_vloss, norm_adv=False)  # fmt: skip
    g_logits, g_v = torch.autograd.grad(out.loss, (logits, v_new))
    new_lp, ent = parts()
    ratio = (new_lp - old_lp).exp()
    pg = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
    vu = (v_new - ret) ** 2
    if clip_vloss:
        vu = torch.max(vu, (v_old + (v_new - v_old).clamp(-0.2, 0.2) - ret) ** 2)
    full = pg - 0.0 * ent.mean() + 0.5 * (0.5 * vu.mean())
    r_logits, r_v = torch.autograd.grad(full, (logits, v_new))
    # the reference is another code path (plain means, its own op order): tight tolerances,
    # not bitwise equality (float32, a few ulps)
    assert out.loss.item() == pytest.approx(full.item(), rel=1e-6, abs=1e-7)
    torch.testing.assert_close(g_logits, r_logits, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(g_v, r_v, rtol=1e-5, atol=1e-7)
    assert out.entropy.item() == pytest.approx(ent.mean().item(), rel=1e-6)
    assert out.entropy.requires_grad
