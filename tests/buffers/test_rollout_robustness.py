"""RolloutBuffer robustness (issue 8): rejected adds change nothing, all-or-nothing loads,
V-trace bootstraps truncations from the current critic."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch
from _helpers import flat_state as fingerprint
from _helpers import rollout_step

from rlstore.buffers.rollout import RolloutBuffer
from rlstore.buffers.rollout_checks import StepChecker
from rlstore.errors import CheckpointError, ConfigError, RLStoreError, SpecError

N = 2


class SlowChecker(StepChecker):
    """Declines every fast path: each add goes through the validating slow twin."""

    def fast_step(self, *args: Any, **kwargs: Any) -> None:
        return None


def good(**over: Any) -> dict[str, Any]:
    return rollout_step(N, **over)


def buffers(first_added: bool) -> list[RolloutBuffer]:
    """A buffer using the fast path and one forced through the slow twin."""
    out = []
    for slow in (False, True):
        rb = RolloutBuffer(4, N, seed=0)
        if slow:
            rb._check = SlowChecker(N, rb.device)
        if first_added:
            rb.add(**good())
        out.append(rb)
    return out


nan_obs = torch.tensor([[0.0, float("nan"), 0.0], [0.0, 0.0, 0.0]])
BAD_ADDS = [
    ("obs", dict(obs=nan_obs), "obs: expected finite"),
    ("obs", dict(obs=torch.full((N, 3), float("inf"))), "obs: expected finite"),
    ("obs", dict(obs={"a": torch.full((N, 3), float("-inf"))}), "obs"),
    ("obs", dict(obs=np.zeros((N, 3), complex)), "obs: expected real numbers"),
    ("action", dict(action=np.zeros(N, complex)), "action: expected real numbers"),
    ("action", dict(action=torch.tensor([float("nan"), 0.0])), "action"),
    ("obs", dict(obs=np.array([["a", "b", "c"]] * N)), "obs: expected an array"),
]


@pytest.mark.parametrize("first_added", [False, True])
@pytest.mark.parametrize(("field", "over", "match"), BAD_ADDS)
def test_non_finite_or_complex_adds_are_rejected_by_both_paths(first_added, field, over, match):
    """Regression: NaN/inf obs and complex/NaN actions were stored (first add included)."""
    for rb in buffers(first_added):
        before = fingerprint(rb)
        with pytest.raises(SpecError, match=match):
            rb.add(**good(**over))
        assert fingerprint(rb) == before and rb.pos == int(first_added)
        rb.add(**good())  # a later valid add still works with the original schema
        assert rb.get().obs.dtype == torch.float32 and rb.get().actions.dtype == torch.int64


@pytest.mark.parametrize("first_added", [False, True])
def test_non_finite_hidden_is_rejected_by_both_paths(first_added):
    for slow in (False, True):
        rb = RolloutBuffer(4, N, seed=0)
        if slow:
            rb._check = SlowChecker(N, rb.device)
        if first_added:
            rb.add(**good(hidden=(torch.zeros(N, 4), torch.zeros(N, 4))))
        before = fingerprint(rb)
        bad = (torch.zeros(N, 4), torch.full((N, 4), float("nan")))
        with pytest.raises(SpecError, match=r"hidden\[1\]: expected finite"):
            rb.add(**good(hidden=bad))
        assert fingerprint(rb) == before


def test_tensors_that_require_grad_are_stored_detached():
    rb = RolloutBuffer(2, N)
    x = torch.ones(N, 3, requires_grad=True)
    v = torch.ones(N, requires_grad=True)
    rb.add(**good(obs=x * 2, value=v * 3, logp=v.clone()))
    rb.add(**good(obs=x * 2, value=v * 3, hidden=None))
    got = rb.get()
    assert not got.obs.requires_grad and not got.values.requires_grad
    assert got.obs.eq(2).all() and got.values.eq(3).all()
    rb.compute_returns(v)  # also detached, no RuntimeError
    assert not rb.get().advantages.requires_grad


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"num_steps": True}, "num_steps"),
        ({"num_envs": True}, "num_envs"),
        ({"gamma": "0.9"}, "gamma"),
        ({"lam": "0.9"}, "lam"),
        ({"gamma": True}, "gamma"),
        ({"device": "nope"}, "device"),
        ({"device": "cuda:x"}, "device"),
        ({"device": 3.5}, "device"),
        ({"intrinsic": {"int_gamma": "0.9"}}, "int_gamma"),
        ({"intrinsic": {"ext_coef": "2"}}, "ext_coef"),
    ],
)
def test_constructor_rejects_bools_strings_and_bad_devices(kw, name):
    """Regression: "0.9" was accepted as gamma, a bad device raised torch's RuntimeError."""
    args = {"num_steps": 4, "num_envs": N} | kw
    with pytest.raises(ConfigError, match=name):
        RolloutBuffer(**args)


# ----------------------------------------------------------------------------- load_state_dict


def filled(seed: int = 0) -> RolloutBuffer:
    rb = RolloutBuffer(4, N, seed=seed)
    g = torch.Generator().manual_seed(seed)
    for _ in range(3):
        rb.add(**good(obs=torch.randn(N, 3, generator=g), reward=torch.randn(N, generator=g)))
    rb.compute_returns(torch.zeros(N))
    return rb


_DELETE = object()


def _set(sd: dict, path: str, value: Any) -> dict:
    sd = copy.deepcopy(sd)
    *head, last = path.split("/")
    node = sd
    for k in head:
        node = node[k]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return sd


CORRUPT = [
    ("rng", {"bit_generator": "PCG64", "state": {"state": "x", "inc": 1}}),
    ("rng", {"bit_generator": "PCG64"}),
    ("rng", {"bit_generator": "NoSuchBitGen", "state": {}}),
    ("rng", 7),
    ("pos", 5),
    ("pos", -1),
    ("pos", True),
    ("pos", "2"),
    ("hidden_given", "yes"),
    ("hidden_given", True),  # no hidden stored
    ("data/rewards", torch.zeros(4, N + 1)),
    ("data/rewards", torch.zeros(4, N, dtype=torch.float64)),
    ("data/terminated", torch.zeros(4, N)),
    ("data/obs", torch.zeros(3, N, 3)),
    ("data/bogus", torch.zeros(4, N)),
    ("results/advantages", torch.zeros(4)),
    ("results/bogus", torch.zeros(3, N)),  # loaded, then every get() raised a TypeError
    ("results/int_returns", torch.zeros(3, N)),  # no intrinsic stream
    ("next_episode_time", torch.zeros(N + 1, dtype=torch.int64)),
    ("config/num_envs", 3),
    # loaded, then get() raised a TypeError / claimed an empty buffer / add wrote final_obs into a
    # dict key: the fields of the first add and the final_obs layout are checked
    ("data/actions", _DELETE),
    ("data/obs", _DELETE),
    ("hidden_given", None),
    ("data/final_obs", torch.zeros(4, N, 7)),
    ("data/final_obs", {"x": torch.zeros(4, N, 3)}),
]


@pytest.mark.parametrize(("path", "value"), CORRUPT, ids=[c[0] for c in CORRUPT])
def test_load_state_dict_is_all_or_nothing_and_raises_only_checkpoint_error(path, value):
    """Regression: data and pos were replaced before a bad RNG state raised a raw ValueError."""
    src, dst = filled(0), filled(1)
    before = fingerprint(dst)
    draws_before = copy.deepcopy(dst)
    with pytest.raises(CheckpointError):
        dst.load_state_dict(_set(src.state_dict(), path, value))
    assert fingerprint(dst) == before
    a = [mb.indices for mb in dst.minibatches(num_minibatches=2)]
    b = [mb.indices for mb in draws_before.minibatches(num_minibatches=2)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))  # RNG untouched


def test_loaded_final_obs_keys_follow_the_obs_key_order():
    """final_obs leaves are written in obs's key order: a checkpoint whose final_obs dict came
    back in another order used to swap same-shaped keys silently."""

    def step(a: float, b: float) -> dict[str, Any]:
        fo = {"a": torch.full((N, 2), a), "b": torch.full((N, 2), b)}
        obs = {"a": torch.zeros(N, 2), "b": torch.zeros(N, 2)}
        return good(obs=obs, truncated=torch.ones(N, dtype=torch.bool), final_obs=fo,
                    final_value=torch.zeros(N))  # fmt: skip

    src = RolloutBuffer(4, N)
    src.add(**step(1.0, 2.0))
    sd = src.state_dict()
    sd["data"]["final_obs"] = dict(reversed(sd["data"]["final_obs"].items()))
    dst = RolloutBuffer(4, N)
    dst.load_state_dict(sd)
    dst.add(**step(3.0, 4.0))
    fo = dst.get().final_obs
    assert fo["a"][:, 0, 0].tolist() == [1.0, 3.0] and fo["b"][:, 0, 0].tolist() == [2.0, 4.0]


def test_load_state_dict_round_trip_uses_the_rng_state_helpers():
    src, dst = filled(0), filled(1)
    sd = src.state_dict()
    assert sd["rng"]["bit_generator"] == "PCG64"
    dst.load_state_dict(sd)
    strip = lambda f: {k: v for k, v in f.items() if not k.startswith("/config")}  # noqa: E731
    assert strip(fingerprint(dst)) == strip(fingerprint(src))
    a = [mb.indices for mb in dst.minibatches(num_minibatches=2)]
    b = [mb.indices for mb in src.minibatches(num_minibatches=2)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


# ----------------------------------------------------------------------------- V-trace final obs


def rollout_with_truncation(give_final_obs: bool) -> RolloutBuffer:
    """3 steps of 2 envs; env 1 is truncated at t=1 with final_obs = [[5, 5, 5]]."""
    rb = RolloutBuffer(3, N, gamma=0.5)
    for t in range(3):
        trunc = torch.tensor([False, t == 1])
        fo = torch.tensor([[0.0] * 3, [5.0] * 3]) if give_final_obs else None
        rb.add(
            **good(obs=torch.full((N, 3), float(t)), truncated=trunc, reward=torch.zeros(N)),
            final_value=torch.tensor([0.0, 1.0]),  # the rollout-time critic: V(final_obs) = 1
            final_obs=fo if t == 1 else None,
        )
    return rb


def test_vtrace_bootstraps_truncations_from_the_current_critic():
    """Regression: V(final_obs) was the stored rollout-time final_value (1.0 here)."""
    rb = rollout_with_truncation(give_final_obs=True)
    calls: list = []

    def current_critic(obs, actions, hidden):  # changed since the rollout: V(o) = 10 * o[0]
        calls.append(tuple(obs.shape))
        values = 10.0 * obs[..., 0]
        return torch.zeros(values.shape), values

    rb.compute_vtrace(current_critic, torch.zeros(N))
    assert calls == [(3, N, 3), (1, 1, 3)]
    # on-policy (rho = 1), lambda = 1: vs[1, env 1] = r + gamma * V_current(final_obs)
    # = 0 + 0.5 * (10 * 5) = 25 (the stale final_value would give 0.5)
    assert rb.get().returns[1, 1].item() == pytest.approx(25.0)
    # env 1, t=0: vs = 0 + 0.5 * vs[1] ... the trace is cut at the truncation
    # v[1, 1] = 10 -> delta_0 = 0 + 0.5 * 10 - 0 = 5; vs_0 = v_0 + delta_0 + 0.5 * (vs_1 - v_1)
    assert rb.get().returns[0, 1].item() == pytest.approx(0.0 + 5.0 + 0.5 * (25.0 - 10.0))
    assert rb.get().final_values[1, 1].item() == 1.0  # the stored value is unchanged


def test_vtrace_without_final_obs_for_a_truncation_raises_before_evaluating():
    rb = rollout_with_truncation(give_final_obs=False)
    before = fingerprint(rb)
    called = []
    with pytest.raises(SpecError, match=r"final_obs: .*\[\[1, 1\]\].*add\(\.\.\., final_obs"):
        rb.compute_vtrace(lambda o, a, h: called.append(1), torch.zeros(N))
    assert not called and fingerprint(rb) == before
    rb.compute_returns(torch.zeros(N))  # GAE needs no final_obs: it uses final_value


def test_final_obs_is_validated_stored_only_for_truncated_envs_and_checkpointed():
    rb = rollout_with_truncation(give_final_obs=True)
    fo = rb.get().final_obs
    assert fo is not None and fo[1, 1].eq(5.0).all() and fo[1, 0].eq(0.0).all()
    assert rb.get().final_obs_given.tolist() == [[False, False], [False, True], [False, False]]
    other = RolloutBuffer(3, N, gamma=0.5)
    other.load_state_dict(rb.state_dict())
    assert fingerprint(other) == fingerprint(rb)
    rb.reset()
    before = fingerprint(rb)
    for bad, match in [
        (torch.zeros(N, 4), r"final_obs: expected shape \(2, 3\)"),
        (torch.full((N, 3), float("nan")), "final_obs: expected finite"),
        (torch.zeros(N, 3, dtype=torch.float64), "final_obs: expected shape"),
    ]:
        with pytest.raises(SpecError, match=match):
            rb.add(**good(truncated=torch.tensor([True, False])), final_value=[0.0, 0.0],
                   final_obs=bad)  # fmt: skip
        assert fingerprint(rb) == before


def test_every_rejection_is_a_named_rlstore_error():
    rb = RolloutBuffer(4, N)
    with pytest.raises(RLStoreError, match="obs"):
        rb.add(**good(obs=object()))


@pytest.mark.parametrize("seed", [True, -1, "5", 2.5])
def test_a_bad_seed_is_a_config_error_naming_it(seed) -> None:
    # the one RNG convention (samplers.make_rng): numpy took True as 1 and raised its own
    # ValueError / TypeError for the others
    with pytest.raises(ConfigError, match="seed"):
        RolloutBuffer(4, 2, seed=seed)
    gen = np.random.default_rng(3)
    assert (
        RolloutBuffer(4, 2, seed=gen)._rng is gen
        and RolloutBuffer(4, 2, seed=7).config()["seed"] == 7
    )
