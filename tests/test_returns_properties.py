"""Fast estimators against their plain-loop twins, as Hypothesis properties over grids of
T, N, dtype, gamma, lambda, clipping thresholds and done density, and identities between them.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

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

unit = st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]) | st.floats(0.0, 1.0)
density = st.sampled_from([0.0, 0.05, 0.3, 1.0])


@st.composite
def rollouts(draw: st.DrawFn) -> dict:
    """Random (T, N) or (T,) rollouts; inputs are *not* forced to be consistent
    (next_values[t] != values[t+1]) so that the fast paths are checked on arbitrary data."""
    T = draw(st.integers(1, 40))
    N = draw(st.sampled_from([None, 1, 2, 5]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2**32 - 1))
    p_term, p_trunc = draw(density), draw(density)
    rng = np.random.default_rng(seed)
    shape = (T,) if N is None else (T, N)

    def normal() -> np.ndarray:
        return rng.normal(size=shape).astype(dtype)

    te = rng.random(shape) < p_term
    tr = rng.random(shape) < p_trunc  # may overlap te: termination must win
    bl = normal()
    return {
        "r": normal(), "v": normal(), "nv": normal(), "te": te, "tr": tr, "dtype": dtype,
        "bl": bl, "tl": (bl + rng.normal(scale=0.7, size=shape)).astype(dtype),
        "flags_as_float": draw(st.booleans()),
    }  # fmt: skip


def _tol(dtype: type) -> dict:
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-10}


def _flags(d: dict) -> tuple:
    if d["flags_as_float"]:
        return d["te"].astype(d["dtype"]), d["tr"].astype(d["dtype"])
    return d["te"], d["tr"]


@given(rollouts(), unit, unit)
def test_gae_matches_loop(d: dict, gamma: float, lam: float) -> None:
    adv, ret = gae(d["r"], d["v"], d["nv"], *_flags(d), gamma=gamma, lam=lam)
    ref_adv, ref_ret = gae_reference(
        d["r"], d["v"], d["nv"], d["te"], d["tr"], gamma=gamma, lam=lam
    )
    assert adv.dtype == d["dtype"] and adv.shape == d["r"].shape
    np.testing.assert_allclose(adv, ref_adv, **_tol(d["dtype"]))
    np.testing.assert_allclose(ret, ref_ret, **_tol(d["dtype"]))


@given(rollouts(), unit, unit)
def test_td_lambda_matches_loop(d: dict, gamma: float, lam: float) -> None:
    out = td_lambda(d["r"], d["nv"], *_flags(d), gamma=gamma, lam=lam)
    ref = td_lambda_reference(d["r"], d["nv"], d["te"], d["tr"], gamma=gamma, lam=lam)
    assert out.dtype == d["dtype"]
    np.testing.assert_allclose(out, ref, **_tol(d["dtype"]))


@given(
    rollouts(),
    unit,
    unit,
    st.sampled_from([0.5, 1.0, 2.0, float("inf")]),
    st.sampled_from([0.5, 1.0, 2.0]),
    st.sampled_from([0.5, 1.0, float("inf")]),
)
def test_vtrace_matches_loop(
    d: dict, gamma: float, lam: float, rho_bar: float, c_bar: float, pg_rho_bar: float
) -> None:
    kw = {"gamma": gamma, "lam": lam, "rho_bar": rho_bar, "c_bar": c_bar, "pg_rho_bar": pg_rho_bar}
    args = (d["bl"], d["tl"], d["r"], d["v"], d["nv"])
    vs, pg = vtrace(*args, *_flags(d), **kw)
    ref_vs, ref_pg = vtrace_reference(*args, d["te"], d["tr"], **kw)
    assert vs.dtype == d["dtype"]
    np.testing.assert_allclose(vs, ref_vs, **_tol(d["dtype"]))
    np.testing.assert_allclose(pg, ref_pg, **_tol(d["dtype"]))


@given(rollouts(), unit, st.integers(1, 45))
def test_nstep_matches_loop(d: dict, gamma: float, n: int) -> None:
    out = nstep(d["r"], d["nv"], *_flags(d), n=n, gamma=gamma)
    ref = nstep_reference(d["r"], d["nv"], d["te"], d["tr"], n=n, gamma=gamma)
    np.testing.assert_allclose(out, ref, **_tol(d["dtype"]))


@given(rollouts(), unit)
def test_discount_cumsum_matches_double_loop(d: dict, discount: float) -> None:
    out = discount_cumsum(d["r"], discount)
    np.testing.assert_allclose(out, discount_cumsum_reference(d["r"], discount), **_tol(d["dtype"]))


@given(rollouts(), unit, unit)
def test_on_policy_vtrace_is_gae_for_any_data(d: dict, gamma: float, lam: float) -> None:
    # rho = c/lam = 1 with equal log-probs: u_t = delta_t + gamma*lam*(1-done_t)*u_{t+1} = A_t
    args = (d["r"], d["v"], d["nv"], d["te"], d["tr"])
    vs, _ = vtrace(d["bl"], d["bl"], *args, gamma=gamma, lam=lam, rho_bar=1.5, c_bar=1.0)
    adv, _ = gae(*args, gamma=gamma, lam=lam)
    np.testing.assert_allclose(vs - d["v"], adv, **_tol(d["dtype"]))


@given(rollouts(), unit, unit)
def test_td_lambda_equals_gae_returns_on_consistent_data(d: dict, gamma: float, lam: float) -> None:
    r, v, te, tr = d["r"], d["v"], d["te"], d["tr"]
    nv = d["nv"].copy()
    inside = ~(te | tr)[:-1]
    nv[:-1][inside] = v[1:][inside]  # values[t+1] == next_values[t] inside episodes
    np.testing.assert_allclose(
        td_lambda(r, nv, te, tr, gamma=gamma, lam=lam),
        gae(r, v, nv, te, tr, gamma=gamma, lam=lam)[1],
        **_tol(d["dtype"]),
    )


@given(rollouts(), st.booleans())
def test_normalize_advantages_matches_loop(d: dict, use_mask: bool) -> None:
    adv = d["r"]
    mask = d["te"] | ~d["tr"] if use_mask else None
    if mask is not None and not mask.any():
        mask.flat[0] = True
    out = normalize_advantages(adv, mask=mask)
    ref = normalize_advantages_reference(adv, mask=mask)
    assert out.dtype == adv.dtype
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3 if d["dtype"] == np.float32 else 1e-9)
    tout = normalize_advantages(
        torch.from_numpy(adv), mask=None if mask is None else torch.from_numpy(mask)
    )
    np.testing.assert_allclose(
        tout.numpy(), ref, rtol=1e-3, atol=1e-3 if d["dtype"] == np.float32 else 1e-9
    )


def _estimators(r, v, nv, te, tr, bl, tl, gamma, lam):
    return [
        *gae(r, v, nv, te, tr, gamma=gamma, lam=lam),
        td_lambda(r, nv, te, tr, gamma=gamma, lam=lam),
        *vtrace(bl, tl, r, v, nv, te, tr, gamma=gamma, lam=lam, rho_bar=1.5, c_bar=0.8),
        nstep(r, nv, te, tr, n=4, gamma=gamma),
    ]


@given(rollouts(), unit, unit, st.data())
def test_cutting_at_any_episode_end_changes_nothing(
    d: dict, gamma: float, lam: float, data
) -> None:
    keys = ("r", "v", "nv", "te", "tr", "bl", "tl")
    arrs = [np.atleast_2d(d[k].T).T for k in keys]  # (T,) -> (T, 1)
    T = arrs[0].shape[0]
    k = data.draw(st.integers(0, T - 1), label="cut")
    terminate = data.draw(st.booleans(), label="terminate")
    te, tr = arrs[3].copy(), arrs[4].copy()
    te[k], tr[k] = terminate, not terminate
    arrs[3], arrs[4] = te, tr
    whole = _estimators(*arrs, gamma, lam)
    head = _estimators(*(a[: k + 1] for a in arrs), gamma, lam)
    parts = [head]
    if k + 1 < T:
        parts.append(_estimators(*(a[k + 1 :] for a in arrs), gamma, lam))
    for i, w in enumerate(whole):
        np.testing.assert_allclose(w, np.concatenate([p[i] for p in parts]), **_tol(d["dtype"]))


@given(rollouts(), unit, unit, st.data())
def test_permuting_env_columns_permutes_every_output(
    d: dict, gamma: float, lam: float, data
) -> None:
    arrs = [np.atleast_2d(d[k].T).T for k in ("r", "v", "nv", "te", "tr", "bl", "tl")]
    perm = np.asarray(data.draw(st.permutations(range(arrs[0].shape[1])), label="perm"))
    base = _estimators(*arrs, gamma, lam)
    permuted = _estimators(*(a[:, perm] for a in arrs), gamma, lam)
    for b, p in zip(base, permuted, strict=True):  # close, not equal: SIMD body vs remainder
        np.testing.assert_allclose(b[:, perm], p, **_tol(d["dtype"]))


@given(rollouts(), unit, unit, st.sampled_from([np.nan, np.inf, -np.inf, 1e30]))
def test_next_values_after_termination_never_matter(
    d: dict, gamma: float, lam: float, junk
) -> None:
    keys = ("r", "v", "nv", "te", "tr", "bl", "tl")
    arrs = [d[k] for k in keys]
    a = _estimators(*arrs, gamma, lam)
    arrs[2] = np.where(d["te"], junk, d["nv"]).astype(d["dtype"])
    b = _estimators(*arrs, gamma, lam)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@given(rollouts(), unit, unit)
def test_td_lambda_is_the_lambda_weighted_sum_of_n_step_returns(
    d: dict, gamma: float, lam: float
) -> None:
    # Sutton & Barto's lambda-return, G = (1-lam) sum_k lam**(k-1) G^(k), built from nstep (whose
    # G^(k) stops growing once the window reaches the episode or rollout end): an identity
    # between two estimators that share no code
    r, nv, te, tr = d["r"], d["nv"], d["te"], d["tr"]
    T = r.shape[0]
    lam_return = np.zeros(r.shape)
    for k in range(1, T + 1):
        weight = lam ** (k - 1) if k == T else (1.0 - lam) * lam ** (k - 1)
        lam_return += weight * nstep(r, nv, te, tr, n=k, gamma=gamma).astype(np.float64)
    out = td_lambda(r, nv, te, tr, gamma=gamma, lam=lam)
    np.testing.assert_allclose(out, lam_return, **_tol(d["dtype"]))


@given(rollouts(), unit, unit, st.sampled_from(["torch", "torch_strided", "fortran", "grad"]))
def test_tensor_and_strided_inputs_give_the_numpy_results(
    d: dict, gamma: float, lam: float, io: str
) -> None:
    # the torch hot path, the general path (strided views, tensors requiring grad) and numpy
    # arrays in Fortran order all compute what C-ordered numpy computes, in the caller's type
    keys = ("r", "v", "nv", "te", "tr", "bl", "tl")

    def convert(a: np.ndarray):
        if io == "fortran":
            return np.asfortranarray(a)
        t = torch.from_numpy(a)
        if io == "torch_strided" and a.ndim == 2:
            t = torch.from_numpy(np.ascontiguousarray(a.T)).T  # a non-contiguous view
        if io == "grad" and t.is_floating_point():
            t = t.clone().requires_grad_(True)
        return t

    base = _estimators(*(d[k] for k in keys), gamma, lam)
    other = _estimators(*(convert(d[k]) for k in keys), gamma, lam)
    for b, o in zip(base, other, strict=True):
        if io == "fortran":
            assert isinstance(o, np.ndarray) and o.dtype == b.dtype
        else:
            assert isinstance(o, torch.Tensor) and not o.requires_grad
            assert o.dtype == torch.from_numpy(b).dtype and tuple(o.shape) == b.shape
            o = o.numpy()
        np.testing.assert_allclose(o, b, **_tol(d["dtype"]))
