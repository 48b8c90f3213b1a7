"""Estimators in rlstore.returns: hand-computed cases, closed forms, identities, types, contract.

The fast-vs-loop comparisons over random grids live in test_returns_properties.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlstore.errors import ConfigError, RLStoreError, SpecError
from rlstore.returns import (
    discount_cumsum,
    gae,
    normalize_advantages,
    nstep,
    td_lambda,
    vtrace,
)
from rlstore.returns.reference import (
    discount_cumsum_reference,
    gae_reference,
    normalize_advantages_reference,
    nstep_reference,
    td_lambda_reference,
    vtrace_reference,
)

F = np.zeros(4, dtype=bool)


def _episode(rng: np.random.Generator, T: int, N: int, p_term: float, p_trunc: float):
    """Consistent rollout: next_values[t] == values[t+1] inside episodes, V(final) on truncation,
    NaN after termination (it must never be read)."""
    r = rng.normal(size=(T, N))
    v = rng.normal(size=(T, N))
    te = rng.random((T, N)) < p_term
    tr = (rng.random((T, N)) < p_trunc) & ~te
    nv = np.empty((T, N))
    nv[:-1] = v[1:]
    nv[-1] = rng.normal(size=N)  # bootstrap V(next_obs)
    nv[tr] = rng.normal(size=int(tr.sum()))  # V(final_obs), not the reset obs
    nv[te] = np.nan
    return r, v, nv, te, tr


def _monte_carlo(r, nv, te, tr, gamma):
    """Independent Monte-Carlo return: sum to the episode end by explicit powers, plus the
    bootstrap gamma^(k) * V at truncation / at the rollout end (none after termination)."""
    T, N = r.shape
    out = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            end = t
            while end < T - 1 and not (te[end, n] or tr[end, n]):
                end += 1
            g = sum(gamma ** (j - t) * r[j, n] for j in range(t, end + 1))
            if not te[end, n]:
                g += gamma ** (end - t + 1) * nv[end, n]
            out[t, n] = g
    return out


# ----------------------------------------------------------------------- hand-computed cases


def test_discount_cumsum_spinning_up_vector() -> None:
    # y2 = 3; y1 = 2 + 0.5*3 = 3.5; y0 = 1 + 0.5*3.5 = 2.75
    np.testing.assert_allclose(discount_cumsum(np.array([1.0, 2.0, 3.0]), 0.5), [2.75, 3.5, 3.0])


def test_gae_hand_computed_no_dones() -> None:
    r, v, nv = np.array([1.0, 2, 3]), np.array([0.5, 1.0, 1.5]), np.array([1.0, 1.5, 2.0])
    adv, ret = gae(r, v, nv, F[:3], F[:3], gamma=0.5, lam=0.5)
    # d2 = 3 + .5*2 - 1.5 = 2.5 ; d1 = 2 + .5*1.5 - 1 = 1.75 ; d0 = 1 + .5*1 - .5 = 1
    # A2 = 2.5 ; A1 = 1.75 + .25*2.5 = 2.375 ; A0 = 1 + .25*2.375 = 1.59375 ; R = A + V
    np.testing.assert_allclose(adv, [1.59375, 2.375, 2.5])
    np.testing.assert_allclose(ret, [2.09375, 3.375, 4.0])


def test_gae_hand_computed_termination_and_truncation() -> None:
    r = np.array([1.0, 3.0, 1.0, 1.0])
    v = np.ones(4)
    nv = np.array([1.0, 9.9, 2.0, 4.0])  # 9.9: garbage after the termination at t=1
    term = np.array([0, 1, 0, 0], dtype=bool)
    trunc = np.array([0, 0, 1, 0], dtype=bool)  # V(final_obs) = 2 at t=2
    adv, ret = gae(r, v, nv, term, trunc, gamma=0.5, lam=0.5)
    # A3 = 1 + .5*4 - 1 = 2 (bootstrap at the rollout end)
    # A2 = 1 + .5*2 - 1 = 1 (truncation: bootstrap, trace cut; uncut would be 1.5)
    # A1 = 3 - 1 = 2 (termination: no bootstrap, trace cut)
    # A0 = (1 + .5*1 - 1) + .25*2 = 1.0
    np.testing.assert_allclose(adv, [1.0, 2.0, 1.0, 2.0])
    np.testing.assert_allclose(ret, [2.0, 3.0, 2.0, 3.0])
    # td_lambda without values: G3 = 1 + .5*(.5*4 + .5*4) = 3 ; G2 = 1 + .5*2 = 2 (cut)
    # G1 = 3 (terminal) ; G0 = 1 + .5*(.5*1 + .5*3) = 2
    np.testing.assert_allclose(td_lambda(r, nv, term, trunc, gamma=0.5, lam=0.5), [2, 3, 2, 3])


def test_vtrace_hand_computed_with_clipping() -> None:
    bl = np.zeros(2)
    tl = np.log([2.0, 0.5])  # ratios 2 and 0.5
    r, v, nv = np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([2.0, 4.0])
    vs, pg = vtrace(bl, tl, r, v, nv, F[:2], F[:2], gamma=0.5, rho_bar=1.5, c_bar=1.0)
    # rho = [min(1.5,2), min(1.5,.5)] = [1.5, .5]; c = [1, .5]; pg_rho = [1, .5]
    # t=1: u1 = .5*(2 + .5*4 - 2) = 1 -> vs1 = 3 ; pg1 = .5*(2 + .5*4 - 2) = 1
    # t=0: u0 = 1.5*(1 + .5*2 - 1) + .5*c0*u1 = 1.5 + .5 = 2 -> vs0 = 3
    #      pg0 = 1*(1 + .5*(2 + 1*u1) - 1) = 1.5
    np.testing.assert_allclose(vs, [3.0, 3.0])
    np.testing.assert_allclose(pg, [1.5, 1.0])


def test_nstep_hand_computed() -> None:
    r = np.array([1.0, 2.0, 3.0, 4.0])
    nv = np.array([10.0, 20.0, 30.0, 40.0])
    term = np.array([0, 0, 1, 0], dtype=bool)
    trunc = np.array([1, 0, 0, 0], dtype=bool)
    g = nstep(r, nv, term, trunc, n=2, gamma=0.5)
    # t0: truncated at once -> 1 + .5*10 = 6
    # t1: 2 + .5*3, terminal at t2 -> 3.5 ; t2: 3 (terminal)
    # t3: rollout end -> 4 + .5*40 = 24
    np.testing.assert_allclose(g, [6.0, 3.5, 3.0, 24.0])
    term[:] = False
    trunc[:] = False
    # t0: 1 + .5*2 + .25*20 = 7 ; t1: 2 + .5*3 + .25*30 = 11 ; t2: 3 + .5*4 + .25*40 = 15
    np.testing.assert_allclose(nstep(r, nv, term, trunc, n=2, gamma=0.5), [7, 11, 15, 24])


def test_normalize_advantages_test_vector() -> None:
    # population std of [1,2,3,4] = sqrt(1.25) = 1.118034 (ddof=0)
    out = normalize_advantages(np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(out, [-1.341641, -0.447214, 0.447214, 1.341641], atol=1e-6)
    assert abs(out.mean()) < 1e-6 and abs(out.std() - 1.0) < 1e-6
    t = normalize_advantages(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(t.numpy(), out, atol=1e-6)


def test_normalize_advantages_mask_uses_real_entries_only() -> None:
    adv = np.array([[1.0, 2.0], [3.0, 100.0]])
    mask = np.array([[1, 1], [1, 0]], dtype=bool)
    # stats over [1,2,3]: mean 2, pop std sqrt(2/3) = 0.816497; padding -> 0
    out = normalize_advantages(adv, mask=mask, eps=0.0)
    np.testing.assert_allclose(out, [[-1.224745, 0.0], [1.224745, 0.0]], atol=1e-6)
    np.testing.assert_allclose(out, normalize_advantages_reference(adv, mask=mask, eps=0.0))
    tout = normalize_advantages(torch.tensor(adv), mask=torch.tensor(mask), eps=0.0)
    np.testing.assert_allclose(tout.numpy(), out)
    # a single entry is well defined with ddof=0: (x - x) / (0 + eps) = 0
    assert normalize_advantages(np.array([5.0]))[0] == 0.0


@pytest.mark.parametrize(
    "bad",
    [[0.5, 1, 1, 0], [np.nan, 1, 1, 0], [2, 1, 1, 0], ["a", "b", "c", "d"], [1j, 0, 1, 1]],
    ids=["half", "nan", "two", "str", "complex"],
)
@pytest.mark.parametrize("io", ["numpy", "torch"])
def test_normalize_advantages_mask_must_be_bool_or_0_1(bad: list, io: str) -> None:
    # a 0.5, NaN, 2, string or complex mask entry was taken as True (a raw TypeError in torch)
    adv = np.array([1.0, 2.0, 3.0, 4.0])
    m = np.array(bad)
    a = torch.from_numpy(adv) if io == "torch" else adv
    mask = torch.from_numpy(m) if io == "torch" and m.dtype.kind != "U" else m
    with pytest.raises(SpecError, match="mask: expected bool or 0/1"):
        normalize_advantages(a, mask=mask)
    good = np.array([1, 1, 1, 0]) if io == "numpy" else torch.tensor([1.0, 1.0, 1.0, 0.0])
    out = normalize_advantages(a, mask=good, eps=0.0)  # exact 0/1 numbers are flags
    np.testing.assert_allclose(np.asarray(out), [-1.224745, 0.0, 1.224745, 0.0], atol=1e-6)


@pytest.mark.parametrize("io", ["numpy", "torch"])
def test_normalize_advantages_half_precision_is_computed_in_float32(io: str) -> None:
    # in float16 the eps 1e-8 underflowed (constant advantages -> NaN) and the squares of
    # +-60000 overflowed (-> [0, -0] instead of [1, -1])
    def norm(x: list, **kw):
        a = np.array(x, np.float16)
        out = normalize_advantages(torch.from_numpy(a) if io == "torch" else a, **kw)
        assert out.dtype == (torch.float16 if io == "torch" else np.float16)
        return np.asarray(out, np.float64).tolist()

    assert norm([3.0, 3.0, 3.0]) == pytest.approx([0.0, 0.0, 0.0], abs=1e-3)
    assert norm([60000.0, -60000.0]) == pytest.approx([1.0, -1.0], abs=1e-3)
    masked = norm([60000.0, -60000.0, 7.0], mask=np.array([True, True, False]))
    assert masked == pytest.approx([1.0, -1.0, 0.0], abs=1e-3)


# ----------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("gamma", [0.5, 0.9, 0.99])
def test_constant_reward_truncated_every_step_is_one_over_one_minus_gamma(gamma: float) -> None:
    T, N = 16, 3
    inf_value = 1.0 / (1.0 - gamma)
    r = np.ones((T, N))
    v = np.full((T, N), inf_value)
    trunc = np.ones((T, N), dtype=bool)
    term = np.zeros((T, N), dtype=bool)
    adv, ret = gae(r, v, v, term, trunc, gamma=gamma, lam=0.95)
    # 1 + gamma/(1-gamma) = 1/(1-gamma): the value is a fixed point, advantages vanish
    np.testing.assert_allclose(ret, inf_value)
    np.testing.assert_allclose(adv, 0.0, atol=1e-12)
    np.testing.assert_allclose(td_lambda(r, v, term, trunc, gamma=gamma, lam=0.3), inf_value)
    np.testing.assert_allclose(nstep(r, v, term, trunc, n=5, gamma=gamma), inf_value)


def test_long_horizon_constant_reward_approaches_geometric_limit() -> None:
    gamma, T = 0.9, 400
    r = np.ones(T)
    zeros = np.zeros(T)
    f = np.zeros(T, dtype=bool)
    ret = gae(r, zeros, zeros, f, f, gamma=gamma, lam=1.0)[1]
    # sum_{k<T-t} gamma^k = (1 - gamma^(T-t)) / (1 - gamma); at t=0 this is 10 up to 0.9^400
    expected = (1 - gamma ** (T - np.arange(T))) / (1 - gamma)
    np.testing.assert_allclose(ret, expected, rtol=1e-12)
    assert abs(ret[0] - 1 / (1 - gamma)) < 1e-12


@pytest.mark.parametrize("gamma", [0.0, 0.7, 1.0])
def test_lambda_one_is_monte_carlo(gamma: float) -> None:
    rng = np.random.default_rng(1)
    r, v, nv, te, tr = _episode(rng, 30, 4, 0.1, 0.1)
    mc = _monte_carlo(r, nv, te, tr, gamma)
    adv, ret = gae(r, v, nv, te, tr, gamma=gamma, lam=1.0)
    np.testing.assert_allclose(ret, mc, atol=1e-12)
    np.testing.assert_allclose(adv, mc - v, atol=1e-12)
    np.testing.assert_allclose(td_lambda(r, nv, te, tr, gamma=gamma, lam=1.0), mc, atol=1e-12)
    np.testing.assert_allclose(nstep(r, nv, te, tr, n=30, gamma=gamma), mc, atol=1e-12)


def test_lambda_zero_is_one_step_td() -> None:
    rng = np.random.default_rng(2)
    r, v, nv, te, tr = _episode(rng, 25, 3, 0.15, 0.15)
    gamma = 0.8
    target = r + gamma * np.where(te, 0.0, nv)  # r + gamma*(1-term)*V'
    adv, ret = gae(r, v, nv, te, tr, gamma=gamma, lam=0.0)
    np.testing.assert_allclose(ret, target, atol=1e-12)
    np.testing.assert_allclose(adv, target - v, atol=1e-12)
    np.testing.assert_allclose(td_lambda(r, nv, te, tr, gamma=gamma, lam=0.0), target)
    np.testing.assert_allclose(nstep(r, nv, te, tr, n=1, gamma=gamma), target, atol=1e-12)


def test_gae_equals_direct_sum_of_discounted_residuals() -> None:
    # A_t = sum_l (gamma*lam)^l delta_{t+l}, truncated at the episode end (paper definition)
    rng = np.random.default_rng(3)
    r, v, nv, te, tr = _episode(rng, 20, 2, 0.1, 0.1)
    gamma, lam = 0.9, 0.7
    delta = r + gamma * np.where(te, 0.0, nv) - v
    done = te | tr
    expected = np.zeros_like(r)
    for n in range(2):
        for t in range(20):
            j, acc = t, 0.0
            while True:
                acc += (gamma * lam) ** (j - t) * delta[j, n]
                if done[j, n] or j == 19:
                    break
                j += 1
            expected[t, n] = acc
    np.testing.assert_allclose(gae(r, v, nv, te, tr, gamma=gamma, lam=lam)[0], expected)


def test_vtrace_on_policy_is_n_step_bellman_target() -> None:
    # IMPALA Remark 1: pi = mu, rho_bar = c_bar = 1, lam = 1 -> v_s = sum gamma^k r + gamma^n V
    rng = np.random.default_rng(4)
    r, v, nv, te, tr = _episode(rng, 32, 4, 0.05, 0.05)
    logp = rng.normal(size=r.shape)
    vs, pg = vtrace(logp, logp, r, v, nv, te, tr, gamma=0.95)
    np.testing.assert_allclose(vs, nstep(r, nv, te, tr, n=32, gamma=0.95), atol=1e-12)
    np.testing.assert_allclose(vs, _monte_carlo(r, nv, te, tr, 0.95), atol=1e-12)
    # pg advantage = r + gamma_t * v_{t+1} - V = one-step lookahead on the V-trace targets
    v_next = np.where(te | tr, nv, np.vstack([vs[1:], nv[-1:]]))
    v_next[-1] = nv[-1]
    np.testing.assert_allclose(pg, r + 0.95 * np.where(te, 0.0, v_next) - v, atol=1e-12)


@pytest.mark.parametrize("lam", [0.6, 1.0])
def test_vtrace_off_policy_equals_paper_direct_sum(lam: float) -> None:
    # IMPALA eq. (1): v_s = V(x_s) + sum_{t>=s} gamma^(t-s) (prod_{s<=i<t} c_i) delta_t, cut at
    # the episode end; pg_s = rho_pg * (r_s + gamma_s*(lam*v_{s+1} + (1-lam)*V(x_{s+1})) - V(x_s))
    rng = np.random.default_rng(14)
    r, v, nv, te, tr = _episode(rng, 25, 3, 0.08, 0.08)
    bl = rng.normal(size=r.shape)
    tl = bl + rng.normal(scale=0.8, size=r.shape)
    gamma, rho_bar, c_bar, pg_bar = 0.9, 1.2, 0.9, 1.1
    ratio = np.exp(tl - bl)
    rho, c = np.minimum(rho_bar, ratio), lam * np.minimum(c_bar, ratio)
    delta = rho * (r + gamma * np.where(te, 0.0, nv) - v)
    T, N = r.shape
    vs_direct = np.zeros_like(r)
    for n in range(N):
        for s in range(T):
            acc, coef, t = 0.0, 1.0, s
            while True:
                acc += coef * delta[t, n]
                if te[t, n] or tr[t, n] or t == T - 1:
                    break
                coef *= gamma * c[t, n]
                t += 1
            vs_direct[s, n] = v[s, n] + acc
    ends = te | tr
    v_next = np.where(ends, nv, np.vstack([vs_direct[1:], nv[-1:]]))  # v_{s+1}, bootstrap at ends
    v_next[-1] = nv[-1]
    mix = lam * v_next + (1 - lam) * nv  # V(x_{s+1}) = nv_s
    pg_direct = np.minimum(pg_bar, ratio) * (r + gamma * np.where(te, 0.0, mix) - v)
    vs, pg = vtrace(bl, tl, r, v, nv, te, tr, gamma=gamma, lam=lam, rho_bar=rho_bar,
                    c_bar=c_bar, pg_rho_bar=pg_bar)  # fmt: skip
    np.testing.assert_allclose(vs, vs_direct, atol=1e-12)
    np.testing.assert_allclose(pg, pg_direct, atol=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
@pytest.mark.parametrize("bars", [(1.0, 1.0), (2.0, 1.5)])
def test_vtrace_on_policy_equals_td_lambda_and_gae(lam: float, bars: tuple[float, float]) -> None:
    rng = np.random.default_rng(5)
    r, v, nv, te, tr = _episode(rng, 40, 3, 0.05, 0.05)
    logp = rng.normal(size=r.shape)
    vs, _ = vtrace(logp, logp, r, v, nv, te, tr, gamma=0.9, lam=lam, rho_bar=bars[0], c_bar=bars[1])
    adv, ret = gae(r, v, nv, te, tr, gamma=0.9, lam=lam)
    np.testing.assert_allclose(vs - v, adv, atol=1e-12)
    np.testing.assert_allclose(vs, td_lambda(r, nv, te, tr, gamma=0.9, lam=lam), atol=1e-12)
    np.testing.assert_allclose(ret, td_lambda(r, nv, te, tr, gamma=0.9, lam=lam), atol=1e-12)


# ----------------------------------------------------------------------- identities


def _all_estimators(r, v, nv, te, tr, bl, tl):
    return [
        *gae(r, v, nv, te, tr, gamma=0.9, lam=0.8),
        td_lambda(r, nv, te, tr, gamma=0.9, lam=0.8),
        *vtrace(bl, tl, r, v, nv, te, tr, gamma=0.9, lam=0.8, rho_bar=1.3, pg_rho_bar=1.1),
        nstep(r, nv, te, tr, n=3, gamma=0.9),
    ]


@pytest.mark.parametrize("garbage", [9.9, -1e6, np.nan, np.inf])
def test_next_value_after_termination_is_never_read(garbage: float) -> None:
    rng = np.random.default_rng(6)
    r, v, nv, te, tr = _episode(rng, 24, 3, 0.2, 0.1)
    te[-1, 0] = True  # a termination at the last step too
    tr[-1, 0] = False
    bl, tl = rng.normal(size=r.shape), rng.normal(size=r.shape)
    nv_a, nv_b = np.where(te, 0.0, nv), np.where(te, garbage, nv)
    for a, b in zip(
        _all_estimators(r, v, nv_a, te, tr, bl, tl),
        _all_estimators(r, v, nv_b, te, tr, bl, tl),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)  # same shapes, same kernels: only next values differ
        assert np.isfinite(b).all()


@pytest.mark.parametrize("which", ["behaviour_logp", "target_logp"])
@pytest.mark.parametrize("bars", [(1.0, 1.0, 1.0), (np.inf, 2.0, np.inf)])
def test_vtrace_nan_log_prob_propagates_instead_of_being_clipped(which: str, bars: tuple) -> None:
    # min(rho_bar, NaN) is rho_bar: a NaN log-prob came out as a finite, clipped target
    r = v = nv = np.ones(4)
    f = np.zeros(4, dtype=bool)
    logp = {"behaviour_logp": np.zeros(4), "target_logp": np.zeros(4)}
    logp[which][2] = np.nan
    rb, cb, pb = bars
    for fn in (vtrace, vtrace_reference):
        vs, pg = fn(*logp.values(), r, v, nv, f, f, rho_bar=rb, c_bar=cb, pg_rho_bar=pb)
        assert np.isnan(vs[:3]).all() and np.isfinite(vs[3])  # the trace carries it backwards
        assert np.isnan(pg[2]) and np.isfinite(pg[3])


def test_vtrace_float32_ratio_overflow_is_clipped_without_a_warning() -> None:
    # exp(100) overflows float32: numpy's RuntimeWarning (an error under -W error) escaped,
    # though the clipped result rho_bar is exact
    rng = np.random.default_rng(8)
    r, v, nv = (rng.normal(size=(5, 2)) for _ in range(3))
    f = np.zeros((5, 2), dtype=bool)
    bl, tl = np.zeros((5, 2)), rng.normal(size=(5, 2))
    tl[1, 0], tl[3, 1] = 100.0, 95.0  # ratios e^100, e^95: inf in float32, clipped to 1
    args32 = [x.astype(np.float32) for x in (bl, tl, r, v, nv)]
    vs, pg = vtrace(*args32, f, f, gamma=0.9, lam=0.8)  # filterwarnings = error
    ref_vs, ref_pg = vtrace_reference(bl, tl, r, v, nv, f, f, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pg, ref_pg, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flag", ["terminated", "truncated"])
def test_splitting_a_trajectory_at_an_episode_end_changes_nothing(flag: str) -> None:
    rng = np.random.default_rng(7)
    r, v, nv, te, tr = _episode(rng, 30, 2, 0.05, 0.05)
    k = 13
    (te if flag == "terminated" else tr)[k] = True
    (tr if flag == "terminated" else te)[k] = False
    nv[k] = np.nan if flag == "terminated" else 0.25
    bl, tl = rng.normal(size=r.shape), rng.normal(size=r.shape)
    whole = _all_estimators(r, v, nv, te, tr, bl, tl)
    head = _all_estimators(*(a[: k + 1] for a in (r, v, nv, te, tr, bl, tl)))
    tail = _all_estimators(*(a[k + 1 :] for a in (r, v, nv, te, tr, bl, tl)))
    for w, h, t in zip(whole, head, tail, strict=True):
        np.testing.assert_allclose(w, np.concatenate([h, t]), atol=1e-12)


def test_permuting_env_columns_permutes_outputs() -> None:
    rng = np.random.default_rng(8)
    r, v, nv, te, tr = _episode(rng, 20, 6, 0.1, 0.1)
    nv = np.where(te, 0.0, nv)
    bl, tl = rng.normal(size=r.shape), rng.normal(size=r.shape)
    perm = rng.permutation(6)
    base = _all_estimators(r, v, nv, te, tr, bl, tl)
    permuted = _all_estimators(*(a[:, perm] for a in (r, v, nv, te, tr, bl, tl)))
    for b, p in zip(base, permuted, strict=True):  # close, not equal: SIMD body vs remainder
        np.testing.assert_allclose(b[:, perm], p, rtol=1e-12, atol=1e-12)


def test_one_dimensional_input_equals_single_column() -> None:
    rng = np.random.default_rng(9)
    r, v, nv, te, tr = _episode(rng, 15, 1, 0.1, 0.1)
    nv = np.where(te, 0.0, nv)
    bl, tl = rng.normal(size=r.shape), rng.normal(size=r.shape)
    cols = _all_estimators(r, v, nv, te, tr, bl, tl)
    flat = _all_estimators(*(a[:, 0] for a in (r, v, nv, te, tr, bl, tl)))
    for c, f in zip(cols, flat, strict=True):
        assert f.shape == (15,)
        # (15, 1) and (15,) inputs may take different kernels: tight tolerance, not bitwise
        np.testing.assert_allclose(c[:, 0], f, rtol=1e-12, atol=1e-12)


def test_episode_length_one_advantage_is_the_residual_whatever_lambda() -> None:
    rng = np.random.default_rng(10)
    r, v, nv = rng.normal(size=(3, 8))
    te = np.array([True, False] * 4)
    tr = ~te
    for lam in (0.0, 0.5, 1.0):
        adv, _ = gae(r, v, nv, te, tr, gamma=0.9, lam=lam)
        np.testing.assert_allclose(adv, r + 0.9 * np.where(te, 0.0, nv) - v)


# ----------------------------------------------------------------------- types and dtypes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_torch_in_torch_out(dtype: torch.dtype) -> None:
    rng = np.random.default_rng(11)
    r, v, nv, te, tr = _episode(rng, 12, 3, 0.1, 0.1)
    nv = np.where(te, 0.0, nv)
    bl, tl = rng.normal(size=r.shape), rng.normal(size=r.shape)
    ts = [torch.tensor(a, dtype=dtype) for a in (r, v, nv)]
    tf = [torch.tensor(te), torch.tensor(tr.astype(np.int64))]  # bool and 0/1 int flags
    tb = [torch.tensor(a, dtype=dtype) for a in (bl, tl)]
    outs = [
        *gae(*ts, *tf, gamma=0.9, lam=0.8),
        td_lambda(ts[0], ts[2], *tf, gamma=0.9, lam=0.8),
        *vtrace(*tb, *ts, *tf, gamma=0.9, lam=0.8, rho_bar=1.3, pg_rho_bar=1.1),
        nstep(ts[0], ts[2], *tf, n=3, gamma=0.9),
        discount_cumsum(ts[0], 0.9),
    ]
    # the reference sees the same rounded inputs
    rr, vv, nn, bb, ll = (t.double().numpy() for t in (*ts, *tb))
    refs = [
        *gae_reference(rr, vv, nn, te, tr, gamma=0.9, lam=0.8),
        td_lambda_reference(rr, nn, te, tr, gamma=0.9, lam=0.8),
        *vtrace_reference(
            bb, ll, rr, vv, nn, te, tr, gamma=0.9, lam=0.8, rho_bar=1.3, pg_rho_bar=1.1
        ),
        nstep_reference(rr, nn, te, tr, n=3, gamma=0.9),
        discount_cumsum_reference(rr, 0.9),
    ]
    tol = {torch.float64: 1e-12, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1e-1}
    for o, ref in zip(outs, refs, strict=True):
        assert isinstance(o, torch.Tensor) and o.dtype == dtype and o.device.type == "cpu"
        assert o.shape == (12, 3) and not o.requires_grad
        np.testing.assert_allclose(o.double().numpy(), ref, atol=tol[dtype] * 10, rtol=tol[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(9, 3), (9,)])
def test_torch_hot_path_and_general_path_agree(dtype: torch.dtype, shape: tuple) -> None:
    # contiguous 2-D CPU tensors with bool flags take the zero-copy hot path; 1-D ones do not
    rng = np.random.default_rng(13)
    r, v, nv, te, tr = (a.reshape(shape) for a in _episode(rng, 9, 3 if len(shape) == 2 else 1,
                                                           0.1, 0.1))  # fmt: skip
    nv = np.where(te, 0.0, nv)
    ts = [torch.tensor(a, dtype=dtype) for a in (r, v, nv)] + [torch.tensor(te), torch.tensor(tr)]
    adv, ret = gae(*ts, gamma=0.9, lam=0.8)
    ref_adv, ref_ret = gae_reference(*(t.double().numpy() for t in ts), gamma=0.9, lam=0.8)
    assert isinstance(adv, torch.Tensor) and adv.dtype == dtype and adv.shape == shape
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(adv.double().numpy(), ref_adv, atol=tol)
    np.testing.assert_allclose(ret.double().numpy(), ref_ret, atol=tol)
    before = [t.clone() for t in ts]
    gae(*ts)
    for b, t in zip(before, ts, strict=True):  # inputs are only read
        assert torch.equal(b, t)


def test_torch_inputs_with_grad_and_non_contiguous_views() -> None:
    rng = np.random.default_rng(12)
    r, v, nv, te, tr = _episode(rng, 10, 4, 0.1, 0.1)
    nv = np.where(te, 0.0, nv)
    vt = torch.tensor(v.T.copy(), requires_grad=True).T  # non-contiguous, requires grad
    adv, ret = gae(torch.tensor(r), vt, torch.tensor(nv), torch.tensor(te), torch.tensor(tr))
    ref = gae_reference(r, v, nv, te, tr)
    np.testing.assert_allclose(adv.numpy(), ref[0])
    assert not adv.requires_grad
    # normalize_advantages too (its output kept the autograd graph of adv)
    a = torch.tensor(ref[0], requires_grad=True)
    for mask in (None, torch.tensor(ref[0] > 0)):
        out = normalize_advantages(a, mask=mask)
        assert not out.requires_grad and out.grad_fn is None
        expect = normalize_advantages_reference(ref[0], mask=None if mask is None else mask.numpy())
        np.testing.assert_allclose(out.numpy(), expect, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("np_dtype", [np.float32, np.float64])
def test_numpy_dtype_is_preserved_and_int_rewards_promote(np_dtype: type) -> None:
    r = np.array([1, 0, 2], dtype=np.int64)
    v = np.array([0.5, 0.25, 1.0], dtype=np_dtype)
    nv = np.array([0.25, 1.0, 1.0], dtype=np_dtype)  # values[t+1], then the bootstrap 1.0
    f = np.zeros(3, dtype=np.uint8)
    adv, ret = gae(r, v, nv, f, f, gamma=0.5, lam=1.0)
    assert adv.dtype == np_dtype and ret.dtype == np_dtype
    # R2 = 2 + .5*1 = 2.5 ; R1 = 0 + .5*2.5 = 1.25 ; R0 = 1 + .5*1.25 = 1.625
    np.testing.assert_allclose(ret, [1.625, 1.25, 2.5])


def test_mixed_float32_float64_promotes_to_float64() -> None:
    f = np.zeros(2, dtype=bool)
    adv, _ = gae(np.ones(2, np.float32), np.zeros(2, np.float64), np.zeros(2, np.float32), f, f)
    assert adv.dtype == np.float64


def test_numpy_float64_beside_tensors_promotes_the_tensor_output_to_float64() -> None:
    # torch float32 rewards (or only torch flags) with numpy float64 values came back as a
    # float32 tensor: the numpy inputs were left out of the promotion
    r, z, f = np.array([1.0, 1e-9]), np.zeros(2), np.zeros(2, dtype=bool)
    adv, _ = gae(r, z, z, torch.from_numpy(f), torch.from_numpy(f), gamma=1.0, lam=1.0)
    assert adv.dtype == torch.float64
    assert adv.tolist() == pytest.approx([1.0 + 1e-9, 1e-9], rel=1e-12)
    adv, _ = gae(torch.ones(2), z, z, f, f)
    assert adv.dtype == torch.float64
    adv, _ = gae(torch.ones(2, dtype=torch.float16), z.astype(np.float32), z, f, f)
    assert adv.dtype == torch.float64
    adv, _ = gae(
        torch.ones(2, dtype=torch.bfloat16), z.astype(np.float16), z.astype(np.float16), f, f
    )
    assert adv.dtype == torch.float32  # like torch.promote_types(bfloat16, float16)


def test_longdouble_is_computed_in_float64_not_float32() -> None:
    x = np.array([1.0, 1.0 + 2**-30], dtype=np.longdouble)  # 2**-30 is below float32's eps
    y = discount_cumsum(x, 1.0)
    assert y.dtype == np.longdouble and float(y[1]) == 1.0 + 2**-30


def test_empty_rollout_gives_empty_outputs() -> None:
    e = np.zeros((0, 3))
    f = np.zeros((0, 3), dtype=bool)
    assert gae(e, e, e, f, f)[0].shape == (0, 3)
    assert nstep(e, e, f, f, n=2, gamma=0.9).shape == (0, 3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_come_back_on_cuda() -> None:  # pragma: no cover - no GPU in CI
    x = torch.ones(5, 2, device="cuda")
    f = torch.zeros(5, 2, dtype=torch.bool, device="cuda")
    adv, ret = gae(x, x, x, f, f)
    assert adv.device.type == "cuda" and ret.device.type == "cuda"


# ----------------------------------------------------------------------- input contract


def test_shape_mismatch_names_the_argument() -> None:
    with pytest.raises(SpecError, match=r"values: expected shape \(128, 8\) like rewards, got"):
        gae(
            np.zeros((128, 8)),
            np.zeros(128),
            np.zeros((128, 8)),
            np.zeros((128, 8), bool),
            np.zeros((128, 8), bool),
        )
    with pytest.raises(SpecError, match=r"truncated: expected shape \(4,\) like rewards"):
        td_lambda(np.zeros(4), np.zeros(4), F, np.zeros(5, bool), gamma=0.9, lam=0.9)
    with pytest.raises(SpecError, match=r"x: expected shape \(T,\) or \(T, N\)"):
        discount_cumsum(np.zeros((2, 3, 4)), 0.5)


@pytest.mark.parametrize("bad", [np.array([0, 2, 0, 1]), np.array([0.0, 0.5, 0, 0])])
def test_flags_must_be_zero_or_one(bad: np.ndarray) -> None:
    with pytest.raises(SpecError, match="terminated: expected bool or 0/1 flags"):
        gae(np.zeros(4), np.zeros(4), np.zeros(4), bad, F)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"gamma": 1.5}, "gamma: expected a number in"),
        ({"gamma": float("nan")}, "gamma: expected a number in"),
        ({"lam": -0.1}, "lam: expected a number in"),
    ],
)
def test_gamma_and_lambda_ranges(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        gae(np.zeros(4), np.zeros(4), np.zeros(4), F, F, **kwargs)


def test_other_parameter_ranges() -> None:
    z = np.zeros(4)
    with pytest.raises(ConfigError, match="c_bar: expected a number > 0"):
        vtrace(z, z, z, z, z, F, F, c_bar=0.0)
    with pytest.raises(ConfigError, match="n: expected an int >= 1"):
        nstep(z, z, F, F, n=0, gamma=0.9)
    with pytest.raises(ConfigError, match="n: expected an int >= 1"):
        nstep(z, z, F, F, n=2.0, gamma=0.9)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="mask: expected at least one true entry"):
        normalize_advantages(z, mask=np.zeros(4, bool))
    with pytest.raises(SpecError, match=r"mask: expected shape \(4,\) like adv"):
        normalize_advantages(z, mask=np.ones(3, bool))
    with pytest.raises(RLStoreError, match="x: expected a real"):
        discount_cumsum(np.array(["a", "b"]), 0.5)
    # the closed interval is allowed: discount 1 is the plain reverse cumulative sum [6, 5, 3]
    np.testing.assert_array_equal(discount_cumsum(np.array([1.0, 2.0, 3.0]), 1.0), [6, 5, 3])


Z4 = np.zeros(4)

# one call per estimator and hyperparameter, the bad value passed as that keyword
_HYPER_CALLS = {
    "discount": lambda v: discount_cumsum(Z4, v),
    "gae.gamma": lambda v: gae(Z4, Z4, Z4, F, F, gamma=v),
    "gae.lam": lambda v: gae(Z4, Z4, Z4, F, F, lam=v),
    "td_lambda.gamma": lambda v: td_lambda(Z4, Z4, F, F, gamma=v, lam=0.9),
    "td_lambda.lam": lambda v: td_lambda(Z4, Z4, F, F, gamma=0.9, lam=v),
    "vtrace.gamma": lambda v: vtrace(Z4, Z4, Z4, Z4, Z4, F, F, gamma=v),
    "vtrace.lam": lambda v: vtrace(Z4, Z4, Z4, Z4, Z4, F, F, lam=v),
    "vtrace.rho_bar": lambda v: vtrace(Z4, Z4, Z4, Z4, Z4, F, F, rho_bar=v),
    "vtrace.c_bar": lambda v: vtrace(Z4, Z4, Z4, Z4, Z4, F, F, c_bar=v),
    "vtrace.pg_rho_bar": lambda v: vtrace(Z4, Z4, Z4, Z4, Z4, F, F, pg_rho_bar=v),
    "nstep.gamma": lambda v: nstep(Z4, Z4, F, F, n=2, gamma=v),
    "normalize_advantages.eps": lambda v: normalize_advantages(Z4 + np.arange(4), eps=v),
}
_UNIT = {"discount", "gae.gamma", "gae.lam", "td_lambda.gamma", "td_lambda.lam", "vtrace.gamma"}
_UNIT |= {"vtrace.lam", "nstep.gamma"}


@pytest.mark.parametrize("where", sorted(_HYPER_CALLS))
@pytest.mark.parametrize(
    "bad",
    ["0.9", True, False, np.bool_(True), float("nan"), np.float32("nan"), 0.5 + 0j, None, [0.9]],
    ids=repr,
)
def test_hyperparameters_reject_strings_bools_nan_and_non_numbers(where: str, bad: object) -> None:
    """Until this fix float() accepted "0.9" and True silently (SpecError only for NaN)."""
    name = where.split(".")[-1]
    with pytest.raises(ConfigError, match=rf"^{name}: expected a"):
        _HYPER_CALLS[where](bad)


@pytest.mark.parametrize("where", sorted(_HYPER_CALLS))
def test_hyperparameters_reject_out_of_range(where: str) -> None:
    name = where.split(".")[-1]
    bads = [-0.1, 1.5, 2, -np.inf] if where in _UNIT else [-1.0, -np.inf]
    if where.startswith("vtrace.") and where not in _UNIT:
        bads.append(0)  # clipping thresholds are > 0
    if where == "normalize_advantages.eps":
        bads.append(np.inf)  # a finite eps: inf would turn every advantage into 0
    for bad in bads:
        with pytest.raises(ConfigError, match=rf"^{name}: expected a"):
            _HYPER_CALLS[where](bad)


@pytest.mark.parametrize("where", sorted(_HYPER_CALLS))
@pytest.mark.parametrize(
    "good",
    [0.5, 1, np.float32(0.5), np.float64(0.5), np.int64(1), np.array(0.5), torch.tensor(0.5)],
    ids=repr,
)
def test_hyperparameters_accept_real_scalars_in_range(where: str, good: object) -> None:
    expected = _HYPER_CALLS[where](float(good))  # type: ignore[arg-type]
    got = _HYPER_CALLS[where](good)
    for e, g in zip(
        expected if isinstance(expected, tuple) else (expected,),
        got if isinstance(got, tuple) else (got,),
        strict=True,
    ):
        np.testing.assert_array_equal(g, e)


def test_clipping_thresholds_accept_inf_and_n_rejects_strings_and_bools() -> None:
    z = np.zeros(4)
    vtrace(z, z, z, z, z, F, F, rho_bar=np.inf, c_bar=float("inf"), pg_rho_bar=np.float32("inf"))
    for bad in ("2", True, np.bool_(True), 2.5, float("nan")):
        with pytest.raises(ConfigError, match="n: expected an int >= 1"):
            nstep(z, z, F, F, n=bad, gamma=0.9)  # type: ignore[arg-type]
    np.testing.assert_array_equal(nstep(z, z, F, F, n=np.int32(2), gamma=0.9), np.zeros(4))


def test_loop_twins_live_in_reference_not_in_the_public_api() -> None:
    import rlstore
    import rlstore.returns
    import rlstore.returns.reference as ref

    for mod in (rlstore, rlstore.returns):
        assert not [n for n in mod.__all__ if n.endswith("_reference")], mod.__name__
        assert not hasattr(mod, "gae_reference"), mod.__name__
    assert callable(ref.gae_reference) and not hasattr(ref, "__all__")
    assert set(rlstore.returns.__all__) == {
        "discount_cumsum",
        "gae",
        "td_lambda",
        "vtrace",
        "nstep",
        "normalize_advantages",
    }


def test_numba_kernels_load_on_first_use_only() -> None:
    """``import rlstore`` (estimators and sum tree included) does not import numba; the first
    estimator call and the first sum-tree update load their kernels (one lazy-module helper)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, rlstore, rlstore.returns as r\n"
        "from rlstore.samplers.sum_tree import SumTree\n"
        "a = 'numba' in sys.modules\n"
        "r.discount_cumsum(np.ones((3, 1)), 0.5)\n"
        "b = 'rlstore.samplers._tree_kernels' in sys.modules\n"
        "t = SumTree(4); t.update(np.array([1]), np.array([2.0]))\n"
        "print(a, b, 'numba' in sys.modules, 'rlstore.samplers._tree_kernels' in sys.modules)\n"
    )
    import os

    import rlstore

    src = os.path.dirname(os.path.dirname(rlstore.__file__))
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["False", "False", "True", "True"], out.stdout + out.stderr
