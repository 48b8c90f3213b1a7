"""RolloutBuffer: storage, validation, GAE / V-trace / intrinsic returns, checkpoints."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlstore.buffers.rollout import IntrinsicConfig, RolloutBuffer
from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.returns.reference import vtrace_reference

# ----------------------------------------------------------------------------- helpers


def fill(rb: RolloutBuffer, data: dict[str, np.ndarray], **extra_per_step) -> None:
    """Add every row of ``data`` (arrays shaped (T, N, ...)) to ``rb``."""
    T = data["rewards"].shape[0]
    for t in range(T):
        kwargs = {k: v[t] for k, v in extra_per_step.items()}
        rb.add(
            data["obs"][t],
            data["actions"][t],
            data["logprobs"][t],
            data["values"][t],
            data["rewards"][t],
            data["terminated"][t],
            data["truncated"][t],
            final_value=data["final_values"][t],
            **kwargs,
        )


def random_rollout(
    rng: np.random.Generator, T: int, N: int, p_done: float
) -> dict[str, np.ndarray]:
    term = rng.random((T, N)) < p_done / 2
    trunc = (rng.random((T, N)) < p_done / 2) & ~term
    return {
        "obs": rng.normal(size=(T, N, 3)).astype(np.float32),
        "actions": rng.integers(0, 4, size=(T, N)),
        "logprobs": -rng.random((T, N)).astype(np.float32),
        "values": rng.normal(size=(T, N)).astype(np.float32),
        "rewards": rng.normal(size=(T, N)).astype(np.float32),
        "terminated": term,
        "truncated": trunc,
        "final_values": rng.normal(size=(T, N)).astype(np.float32),
    }


def final_obs_of(data: dict[str, np.ndarray]) -> np.ndarray:
    """(T, N, 3) final observations that encode V(final_obs) = final_values (see critic)."""
    return np.repeat(data["final_values"][..., None], 3, axis=-1)


def critic(logp, values, calls: list | None = None):
    """An ``evaluate`` returning ``(logp, values)`` on the stored steps (the first call) and
    ``V(final_obs) = final_obs[..., 0]`` on the final observations (the second call)."""
    seen: list = [] if calls is None else calls

    def evaluate(obs, actions, hidden):
        seen.append((tuple(obs.shape), tuple(actions.shape), hidden))
        if len(seen) % 2 == 1:
            return torch.as_tensor(logp), torch.as_tensor(values)
        return torch.zeros(obs.shape[:2]), obs[..., 0]

    return evaluate


def naive_gae(data, last_value, gamma, lam):
    """Per-env Python loop in float64, written from GUIDE section 2 (independent of returns.py)."""
    r, v = data["rewards"].astype(np.float64), data["values"].astype(np.float64)
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            term, trunc = bool(data["terminated"][t, n]), bool(data["truncated"][t, n])
            if term:
                nxt = 0.0
            elif trunc:
                nxt = float(data["final_values"][t, n])
            elif t == T - 1:
                nxt = float(last_value[n])
            else:
                nxt = v[t + 1, n]
            delta = r[t, n] + gamma * nxt - v[t, n]
            running = delta + (0.0 if (term or trunc) else gamma * lam * running)
            adv[t, n] = running
    return adv, adv + v


# ----------------------------------------------------------------------------- hand values


def hand_buffer(last_value_env1: float = 100.0) -> tuple[RolloutBuffer, torch.Tensor]:
    rb = RolloutBuffer(3, 2, gamma=0.5, lam=0.5, advantage_normalization="none")
    obs = torch.zeros(2, 1)
    act = torch.zeros(2, dtype=torch.long)
    rew = [[1.0, 0.0], [2.0, 1.0], [3.0, 1.0]]
    val = [[0.5, 1.0], [1.0, 2.0], [1.5, 0.0]]
    term = [[False, False], [True, False], [False, False]]
    trunc = [[False, True], [False, False], [False, True]]
    # env 0 terminates at t=1: its final_value (9.9) must be ignored
    fval = [[0.0, 4.0], [9.9, 0.0], [0.0, 6.0]]
    for t in range(3):
        rb.add(
            obs,
            act,
            torch.zeros(2),
            torch.tensor(val[t]),
            torch.tensor(rew[t]),
            torch.tensor(term[t]),
            torch.tensor(trunc[t]),
            final_value=torch.tensor(fval[t]),
        )
    return rb, torch.tensor([2.0, last_value_env1])


def test_hand_computed_termination_and_truncation_inside_and_at_last_step():
    rb, last = hand_buffer()
    rb.compute_returns(last)
    b = rb.get()
    # gamma = lam = 0.5, gamma*lam = 0.25
    # env 0: terminated at t=1, bootstrap last_value=2.0 at t=2
    #   d2 = 3 + 0.5*2.0 - 1.5 = 2.5          A2 = 2.5
    #   d1 = 2 + 0 - 1.0 = 1.0 (terminal)     A1 = 1.0 (trace cut)
    #   d0 = 1 + 0.5*1.0 - 0.5 = 1.0          A0 = 1.0 + 0.25*1.0 = 1.25
    # env 1: truncated at t=0 (final_value 4.0) and at t=2 (final_value 6.0); last_value=100 is
    #   V(reset obs) and must be ignored
    #   d2 = 1 + 0.5*6.0 - 0.0 = 4.0          A2 = 4.0
    #   d1 = 1 + 0.5*0.0 - 2.0 = -1.0         A1 = -1.0 + 0.25*4.0 = 0.0
    #   d0 = 0 + 0.5*4.0 - 1.0 = 1.0          A0 = 1.0 (trace cut)
    expected_adv = torch.tensor([[1.25, 1.0], [1.0, 0.0], [2.5, 4.0]])
    torch.testing.assert_close(b.advantages, expected_adv)
    torch.testing.assert_close(b.returns, expected_adv + b.values)


def test_truncation_bootstraps_from_final_value_never_next_row():
    rb, last = hand_buffer(last_value_env1=-55.0)
    rb.compute_returns(last)
    base = rb.get().advantages.clone()
    # the row after env 1's truncation at t=0 holds V(reset obs)=2.0; change it: A[0, 1] must stay
    rb2 = RolloutBuffer(3, 2, gamma=0.5, lam=0.5)
    b = rb.get()
    vals = b.values.clone()
    vals[1, :] = 50.0  # env 0 goes on at t=0 (must see it); env 1 was truncated (must not)
    for t in range(3):
        rb2.add(
            b.obs[t],
            b.actions[t],
            b.logprobs[t],
            vals[t],
            b.rewards[t],
            b.terminated[t],
            b.truncated[t],
            final_value=b.final_values[t],
        )
    rb2.compute_returns(last)
    assert rb2.get().advantages[0, 1] == base[0, 1] == 1.0
    assert rb2.get().advantages[0, 0] != base[0, 0]


def test_terminal_last_step_ignores_bootstrap():
    rb = RolloutBuffer(2, 1, gamma=0.9, lam=1.0)
    rb.add([[0.0]], [0], [0.0], [1.0], [1.0], [False], [False])
    rb.add([[0.0]], [0], [0.0], [2.0], [5.0], [True], [False])
    for garbage in (0.0, 9.9):
        rb.compute_returns([garbage])
        # A1 = 5 - 2 = 3; A0 = 1 + 0.9*2 - 1 + 0.9*1.0*3 = 1.8 + 2.7 = 4.5
        torch.testing.assert_close(rb.get().advantages[:, 0], torch.tensor([4.5, 3.0]))


@pytest.mark.parametrize(
    "T,N,gamma,lam,p_done",
    [
        (1, 1, 0.99, 0.95, 0.3),
        (7, 3, 0.9, 0.0, 0.3),
        (16, 4, 0.99, 1.0, 0.5),
        (33, 2, 1.0, 0.7, 0.1),
    ],
)
def test_compute_returns_matches_naive_loop(T, N, gamma, lam, p_done):
    rng = np.random.default_rng(T * 100 + N)
    data = random_rollout(rng, T, N, p_done)
    last = rng.normal(size=N).astype(np.float32)
    rb = RolloutBuffer(T, N, gamma=gamma, lam=lam)
    fill(rb, data)
    rb.compute_returns(last)
    adv, ret = naive_gae(data, last, gamma, lam)
    b = rb.get()
    np.testing.assert_allclose(b.advantages.numpy(), adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.returns.numpy(), ret, rtol=1e-5, atol=1e-5)


def test_permuting_env_columns_permutes_outputs():
    rng = np.random.default_rng(3)
    data = random_rollout(rng, 9, 5, 0.4)
    last = rng.normal(size=5).astype(np.float32)
    perm = rng.permutation(5)
    outs = []
    for d, lv in ((data, last), ({k: v[:, perm] for k, v in data.items()}, last[perm])):
        rb = RolloutBuffer(9, 5)
        fill(rb, d)
        rb.compute_returns(lv)
        outs.append(rb.get().advantages)
    torch.testing.assert_close(outs[0][:, perm], outs[1])


def test_partial_rollout_uses_stored_steps_only():
    rng = np.random.default_rng(4)
    data = random_rollout(rng, 4, 2, 0.3)
    rb = RolloutBuffer(10, 2)
    fill(rb, data)
    assert rb.pos == 4 and not rb.full and len(rb) == 8
    rb.compute_returns(np.zeros(2))
    adv, _ = naive_gae(data, np.zeros(2), 0.99, 0.95)
    np.testing.assert_allclose(rb.get().advantages.numpy(), adv, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- validation


def snapshot(rb: RolloutBuffer) -> dict:
    return rb.state_dict()


def same_state(a: dict, b: dict) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


@pytest.mark.parametrize(
    "field,bad,match",
    [
        ("value", torch.zeros(3), r"value: expected shape \(2,\)"),
        ("reward", torch.tensor([1.0, float("nan")]), "reward: expected finite"),
        ("terminated", torch.tensor([0.5, 0.0]), "terminated: expected bool or 0/1"),
        ("obs", torch.zeros(2, 4), r"obs: expected shape \(2, 3\)"),
        ("obs", torch.zeros(2, 3, dtype=torch.float64), "dtype torch.float32"),
        (
            "action",
            torch.zeros(3, dtype=torch.long),
            "action: expected a leading env axis of size 2",
        ),
        ("hidden", torch.zeros(2, 5), "hidden: expected hidden=None"),
        # fast-path-shaped inputs (float32 / bool tensors) that must still be rejected
        ("logp", torch.tensor([float("inf"), 0.0]), "logp: expected finite"),
        ("truncated", torch.tensor([False, True]), r"final_value: expected V\(final_obs\)"),
    ],
)
def test_rejected_add_names_field_and_leaves_buffer_unchanged(field, bad, match):
    rb = RolloutBuffer(4, 2)
    good = dict(
        obs=torch.zeros(2, 3),
        action=torch.zeros(2, dtype=torch.long),
        logp=torch.zeros(2),
        value=torch.zeros(2),
        reward=torch.zeros(2),
        terminated=torch.zeros(2, dtype=torch.bool),
        truncated=torch.zeros(2, dtype=torch.bool),
    )
    rb.add(**good)
    before = snapshot(rb)
    with pytest.raises(SpecError, match=match):
        rb.add(**{**good, field: bad})
    assert same_state(before, snapshot(rb))


def test_float_0_1_flags_are_flags_like_bools():
    # CleanRL keeps dones as float tensors: exact 0.0 / 1.0 were refused as "expected bool or 0/1
    # flags, got torch.float32 [1.0, 0.0]" (the estimators in rlstore.returns accept them)
    flt, ref = (RolloutBuffer(3, 2, seed=0) for _ in "ab")
    z = torch.zeros(2)
    flt.add(z[:, None], z, z, z, z, torch.tensor([1.0, 0.0]), np.array([0.0, 1.0]), final_value=z)
    ref.add(z[:, None], z, z, z, z, torch.tensor([True, False]), torch.tensor([False, True]),
            final_value=z)  # fmt: skip
    for b in (flt, ref):
        b.add(z[:, None], z, z, z, z, torch.zeros(2, dtype=torch.bool), torch.zeros(2).bool())
    flt.terminate_last(np.array([0.0, 1.0]))
    ref.terminate_last(torch.tensor([False, True]))
    assert same_state(snapshot(flt), snapshot(ref))
    with pytest.raises(SpecError, match="terminated: expected bool or 0/1"):
        flt.add(z[:, None], z, z, z, z, torch.tensor([float("nan"), 0.0]), z)


def test_truncated_without_final_value_and_full_buffer_errors():
    rb = RolloutBuffer(1, 2)
    with pytest.raises(
        SpecError, match=r"final_value: expected V\(final_obs\) for the truncated envs \[1\]"
    ):
        rb.add([[0.0], [0.0]], [0, 0], [0, 0], [0, 0], [0, 0], [False, False], [False, True])
    assert rb.pos == 0
    rb.add(
        [[0.0], [0.0]], [0, 0], [0, 0], [0, 0], [0, 0], [False, True], [False, True]
    )  # term wins
    with pytest.raises(CapacityError, match="full"):
        rb.add([[0.0], [0.0]], [0, 0], [0, 0], [0, 0], [0, 0], [False, False], [False, False])
    rb.reset()
    assert rb.pos == 0


def test_constructor_and_usage_errors():
    with pytest.raises(ConfigError, match="num_steps"):
        RolloutBuffer(0, 1)
    with pytest.raises(ConfigError, match="advantage_normalization"):
        RolloutBuffer(2, 1, advantage_normalization="global")  # type: ignore[arg-type]
    rb = RolloutBuffer(2, 1)
    with pytest.raises(EmptyBufferError):
        rb.compute_returns([0.0])
    rb.add([[0.0]], [0], [0.0], [0.0], [1.0], [False], [False])
    with pytest.raises(EmptyBufferError, match="compute_returns"):
        next(rb.minibatches())
    with pytest.raises(ConfigError, match="no intrinsic stream"):
        rb.add(
            [[0.0]], [0], [0.0], [0.0], [1.0], [False], [False], int_reward=[1.0], int_value=[0.0]
        )


def test_dict_obs_dtypes_and_tuple_hidden_are_preserved():
    rb = RolloutBuffer(2, 3)
    for t in range(2):
        obs = {
            "image": torch.full((3, 2, 2), t, dtype=torch.uint8),
            "pos": torch.full((3, 2), float(t), dtype=torch.float64),
        }
        h = (torch.full((3, 1, 4), float(t)), torch.full((3, 1, 4), -float(t)))
        rb.add(
            obs,
            torch.tensor([[1, 2]] * 3, dtype=torch.int32),
            torch.zeros(3),
            torch.zeros(3),
            np.ones(3),
            np.zeros(3, bool),
            np.zeros(3, bool),
            hidden=h,
        )
    b = rb.get()
    assert b.obs["image"].dtype == torch.uint8 and b.obs["image"].shape == (2, 3, 2, 2)
    assert b.obs["pos"].dtype == torch.float64 and b.actions.dtype == torch.int32
    assert torch.equal(b.hidden[1][1], torch.full((3, 1, 4), -1.0))
    z = torch.zeros(3)
    with pytest.raises(SpecError, match="obs: expected keys"):
        rb.reset()
        rb.add({"image": z}, z, z, z, z, z, z)


def test_episode_time_counts_steps_within_episodes_across_resets():
    rb = RolloutBuffer(3, 1)
    dones = [False, True, False, False, False, True]
    seen = []
    for t, d in enumerate(dones):
        if t == 3:
            seen += rb.get().episode_time[:, 0].tolist()
            rb.reset()
        rb.add([[0.0]], [0], [0.0], [0.0], [0.0], [d], [False])
    seen += rb.get().episode_time[:, 0].tolist()
    assert seen == [0, 1, 0, 1, 2, 3]


# ----------------------------------------------------------------------------- normalization


def test_batch_normalization_and_reading_never_mutates():
    rng = np.random.default_rng(5)
    data = random_rollout(rng, 8, 2, 0.3)
    rb = RolloutBuffer(8, 2, advantage_normalization="batch", seed=1)
    fill(rb, data)
    rb.compute_returns(np.zeros(2))
    raw = rb.get().advantages.clone()
    before = snapshot(rb)
    got = torch.cat([mb.advantages for mb in rb.minibatches(num_minibatches=4, shuffle=False)])
    # population std (ddof=0), eps=1e-8: written out independently of returns.normalize_advantages
    flat = raw.reshape(-1).double()
    ref = (flat - flat.mean()) / (flat.std(correction=0) + 1e-8)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
    after = snapshot(rb)
    after["rng"] = before["rng"]  # drawing minibatches advances only the RNG
    assert same_state(before, after)


def test_minibatch_normalization_per_minibatch():
    rng = np.random.default_rng(6)
    data = random_rollout(rng, 8, 2, 0.3)
    rb = RolloutBuffer(8, 2, advantage_normalization="minibatch", seed=2)
    fill(rb, data)
    rb.compute_returns(np.zeros(2))
    raw = rb.get().advantages.reshape(-1)
    for mb in rb.minibatches(mini_batch_size=4):
        sel = raw[mb.indices].double()
        ref = (sel - sel.mean()) / (sel.std(correction=0) + 1e-8)
        torch.testing.assert_close(mb.advantages.double(), ref, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- V-trace


def test_vtrace_on_policy_equals_gae_lambda_one():
    rng = np.random.default_rng(7)
    data = random_rollout(rng, 12, 3, 0.3)
    last = rng.normal(size=3).astype(np.float32)
    rb = RolloutBuffer(12, 3, gamma=0.9, lam=1.0)
    fill(rb, data, final_obs=final_obs_of(data))
    calls: list = []  # on-policy: the rollout's own log-probs and values
    rb.compute_vtrace(critic(data["logprobs"], data["values"], calls), last)
    K = int((data["truncated"] & ~data["terminated"]).sum())
    assert K > 0 and calls == [((12, 3, 3), (12, 3), None), ((K, 1, 3), (K, 1), None)]
    vs, pg = rb.get().returns.clone(), rb.get().advantages.clone()
    adv, ret = naive_gae(data, last, 0.9, 1.0)  # n-step targets bootstrapped at the rollout end
    np.testing.assert_allclose(vs.numpy(), ret, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pg.numpy(), adv, rtol=1e-5, atol=1e-5)


def test_vtrace_off_policy_matches_reference_loop():
    rng = np.random.default_rng(8)
    data = random_rollout(rng, 10, 2, 0.3)
    last = rng.normal(size=2).astype(np.float32)
    rb = RolloutBuffer(10, 2, gamma=0.95)
    fill(rb, data, final_obs=final_obs_of(data))
    target_logp = data["logprobs"] + rng.normal(scale=0.5, size=(10, 2)).astype(np.float32)
    new_values = rng.normal(size=(10, 2)).astype(np.float32)
    rb.compute_vtrace(
        critic(target_logp, new_values),
        last,
        rho_bar=1.0,
        c_bar=0.9,
    )
    nv = np.concatenate([new_values[1:], last[None]])
    boot = data["truncated"] & ~data["terminated"]
    nv = np.where(boot, data["final_values"], nv)
    vs, pg = vtrace_reference(
        data["logprobs"],
        target_logp,
        data["rewards"],
        new_values,
        nv,
        data["terminated"],
        data["truncated"],
        gamma=0.95,
        lam=1.0,
        rho_bar=1.0,
        c_bar=0.9,
        pg_rho_bar=1.0,
    )
    np.testing.assert_allclose(rb.get().returns.numpy(), vs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rb.get().advantages.numpy(), pg, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(rb.get().values, torch.as_tensor(data["values"]))  # unchanged


def test_dict_obs_final_obs_is_stored_and_re_evaluated_by_vtrace():
    # a dict final_obs was refused as "expected a dict like the first add, got dict"
    rb = RolloutBuffer(2, 2, gamma=0.5)
    z, f = torch.zeros(2), torch.zeros(2, dtype=torch.bool)
    obs = {"pos": torch.zeros(2, 3), "img": torch.zeros(2, 1, 2, dtype=torch.uint8)}
    final = {"pos": torch.full((2, 3), 7.0), "img": torch.full((2, 1, 2), 9, dtype=torch.uint8)}
    rb.add(obs, z, z, z, torch.ones(2), f, torch.tensor([True, False]), final_value=z + 3,
           final_obs=final)  # fmt: skip
    rb.add(obs, z, z, z, torch.ones(2), f, f)
    b = rb.get()
    assert b.final_obs["pos"][0].tolist() == [[7.0] * 3, [0.0] * 3]  # env 1 not truncated: zeros
    assert b.final_obs["img"].dtype == torch.uint8 and b.final_obs["img"][0, 0].tolist() == [[9, 9]]
    assert b.final_obs_given.tolist() == [[True, False], [False, False]]

    def evaluate(o, a, h):  # V(obs) = pos[..., 0]: 0 on stored steps, 7 on the final obs
        return torch.zeros(o["pos"].shape[:2]), o["pos"][..., 0]

    rb.compute_vtrace(evaluate, torch.full((2,), 2.0))
    # env 0: step 0 truncated, vs = 1 + 0.5 * 7; step 1 bootstraps: 1 + 0.5 * 2
    # env 1: vs_1 = 2, vs_0 = 1 + 0.5 * vs_1 (rho = c = 1, V = 0)
    assert rb.get().returns.flatten().tolist() == pytest.approx([4.5, 2.0, 2.0, 2.0])


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"rho_bar": 0.0}, "rho_bar: expected a number > 0"),
        ({"c_bar": 0}, r"c_bar: expected a number > 0 \(inf allowed\), got 0$"),
        ({"pg_rho_bar": -1.0}, "pg_rho_bar"),
        ({"lam": 1.5}, r"lam: expected a number in \[0, 1\]"),
    ],
)
def test_vtrace_thresholds_are_refused_before_evaluate_runs(kw, match):
    # a zero threshold passed the buffer's check, evaluate ran the caller's networks, and only
    # then did returns.vtrace refuse it ("got 0.0" for the 0 given)
    rb = RolloutBuffer(2, 1)
    rb.add([[0.0]], [0], [0.0], [0.0], [1.0], [False], [False])
    calls = []
    with pytest.raises(ConfigError, match=match):
        rb.compute_vtrace(lambda o, a, h: calls.append(1), [0.0], **kw)
    assert calls == [] and not rb.computed


def test_vtrace_evaluate_output_is_validated():
    rb = RolloutBuffer(2, 1)
    rb.add([[0.0]], [0], [0.0], [0.0], [1.0], [False], [False])
    with pytest.raises(SpecError, match=r"values expected shape \(1, 1\)"):
        rb.compute_vtrace(lambda o, a, h: (torch.zeros(1, 1), torch.zeros(3)), [0.0])


# ----------------------------------------------------------------------------- intrinsic


def naive_intrinsic(int_rewards_list, int_values, last_int, gamma_i, lam):
    """Forward discounted filter per env (never reset), population variance over every filter
    value seen so far, rewards / sqrt(var), then a non-episodic GAE loop on the last rollout."""
    all_sums, run = [], np.zeros(int_rewards_list[0].shape[1])
    for rew in int_rewards_list:
        for row in rew.astype(np.float64):
            run = gamma_i * run + row
            all_sums.append(run.copy())
    std = np.sqrt(np.var(np.stack(all_sums)))
    r = int_rewards_list[-1] / (std + 1e-8)
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        acc = 0.0
        for t in reversed(range(T)):
            nxt = last_int[n] if t == T - 1 else int_values[t + 1, n]
            acc = r[t, n] + gamma_i * nxt - int_values[t, n] + gamma_i * lam * acc
            adv[t, n] = acc
    return adv, adv + int_values


def test_intrinsic_stream_against_naive_computation_over_two_rollouts():
    rng = np.random.default_rng(9)
    T, N = 6, 3
    cfg = IntrinsicConfig(int_gamma=0.9, ext_coef=2.0, int_coef=1.0)
    rb = RolloutBuffer(T, N, gamma=0.99, lam=0.95, intrinsic=cfg, advantage_normalization="none")
    irs = []
    for _ in range(2):
        rb.reset()
        data = random_rollout(rng, T, N, 0.4)
        ir = rng.random((T, N)).astype(np.float32)
        iv = rng.normal(size=(T, N)).astype(np.float32)
        irs.append(ir)
        fill(rb, data, int_reward=ir, int_value=iv)
        last, last_i = rng.normal(size=N), rng.normal(size=N)
        rb.compute_returns(last, last_int_value=last_i)
    adv_i, ret_i = naive_intrinsic(irs, iv, last_i, 0.9, 0.95)
    adv_e, _ = naive_gae(data, last, 0.99, 0.95)
    b = rb.get()
    np.testing.assert_allclose(b.int_advantages.numpy(), adv_i, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.int_returns.numpy(), ret_i, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b.advantages.numpy(), 2.0 * adv_e + adv_i, rtol=1e-4, atol=1e-5)
    mb = next(rb.minibatches(shuffle=False))
    torch.testing.assert_close(mb.int_returns, b.int_returns.reshape(-1))


def test_intrinsic_advantages_ignore_done_flags_extrinsic_do_not():
    rng = np.random.default_rng(10)
    data = random_rollout(rng, 8, 2, 0.0)
    ir, iv = rng.random((8, 2)), rng.normal(size=(8, 2))
    cfg = IntrinsicConfig(normalize_rewards=False)
    outs = []
    for flip in (False, True):
        d = dict(data)
        if flip:
            d["terminated"] = data["terminated"].copy()
            d["terminated"][3] = True
        rb = RolloutBuffer(8, 2, intrinsic=cfg)
        fill(rb, d, int_reward=ir, int_value=iv)
        rb.compute_returns(np.zeros(2), last_int_value=np.ones(2))
        outs.append(rb.get())
    torch.testing.assert_close(outs[0].int_advantages, outs[1].int_advantages)
    assert not torch.allclose(outs[0].advantages, outs[1].advantages)
    with pytest.raises(SpecError, match="last_int_value"):
        rb.compute_returns(np.zeros(2))
    with pytest.raises(ConfigError, match="int_gamma"):
        IntrinsicConfig(int_gamma=1.5)


# ----------------------------------------------------------------------------- checkpoints


def test_state_dict_round_trip_draws_the_same_minibatches():
    rng = np.random.default_rng(11)
    data = random_rollout(rng, 6, 2, 0.3)
    cfg = IntrinsicConfig()
    rb = RolloutBuffer(6, 2, seed=123, intrinsic=cfg)
    h = rng.normal(size=(6, 2, 4)).astype(np.float32)
    fill(rb, data, hidden=h, int_reward=rng.random((6, 2)), int_value=np.zeros((6, 2)))
    rb.compute_returns(np.zeros(2), last_int_value=np.zeros(2))
    sd = rb.state_dict()
    other = RolloutBuffer(6, 2, seed=999, intrinsic=cfg)
    other.load_state_dict(sd)
    for a, b in itertools.zip_longest(
        rb.minibatches(num_minibatches=3, num_epochs=2),
        other.minibatches(num_minibatches=3, num_epochs=2),
    ):
        assert torch.equal(a.indices, b.indices)
        torch.testing.assert_close(a.advantages, b.advantages)
        torch.testing.assert_close(a.recurrence_memory, b.recurrence_memory)
    sd_a, sd_b = rb.state_dict(), other.state_dict()
    assert sd_b.pop("config")["seed"] == 999  # the seed is informational; the RNG state moved
    sd_a.pop("config")
    assert same_state(sd_a, sd_b)
    with pytest.raises(CheckpointError, match="num_steps=5"):
        RolloutBuffer(5, 2, intrinsic=cfg).load_state_dict(sd)
    assert rb.config()["intrinsic"]["int_gamma"] == 0.99


def test_loaded_buffer_shares_no_memory_with_the_state_dict():
    """Adds after ``load_state_dict`` must not write into the caller's state dict (nor into a
    second buffer loaded from it)."""
    rng = np.random.default_rng(13)
    data = random_rollout(rng, 6, 2, 0.3)
    rb = RolloutBuffer(6, 2, seed=0)
    fill(rb, {k: v[:3] for k, v in data.items()}, hidden=np.ones((3, 2, 4), np.float32))
    sd = rb.state_dict()
    kept = _state_bytes(sd)
    a, b = RolloutBuffer(6, 2, seed=0), RolloutBuffer(6, 2, seed=0)
    a.load_state_dict(sd)
    b.load_state_dict(sd)
    fill(a, {k: v[3:] for k, v in data.items()}, hidden=np.zeros((3, 2, 4), np.float32))
    assert _state_bytes(sd) == kept
    assert b.state_dict()["pos"] == 3 and _state_bytes(b.state_dict()) == kept


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_buffer_matches_cpu():
    rng = np.random.default_rng(12)
    data = random_rollout(rng, 8, 4, 0.3)
    h = rng.normal(size=(8, 4, 2)).astype(np.float32)
    out = {}
    for dev in ("cpu", "cuda"):
        rb = RolloutBuffer(8, 4, seed=0, device=dev)
        fill(rb, data, hidden=h)
        rb.compute_returns(np.zeros(4))
        mbs = [
            *rb.minibatches(num_minibatches=2),
            *rb.recurrent_minibatches(num_minibatches=2, seq_len=3),
            *rb.trajectory_minibatches(timesteps=3, mini_batch_size=8),
        ]
        assert all(mb.advantages.device.type == dev and mb.obs.device.type == dev for mb in mbs)
        other = RolloutBuffer(8, 4, device=dev)
        other.load_state_dict(rb.state_dict())
        out[dev] = [mb.advantages.cpu() for mb in mbs], other.get().returns.cpu()
    for a, b in zip(out["cpu"][0], out["cuda"][0], strict=True):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(out["cpu"][1], out["cuda"][1])


def test_checkpoint_save_load_round_trip(tmp_path):
    from rlstore import checkpoint

    rng = np.random.default_rng(13)
    data = random_rollout(rng, 5, 2, 0.3)
    rb = RolloutBuffer(5, 2, seed=7, intrinsic=IntrinsicConfig(int_gamma=0.95))
    ir = rng.random((5, 2))
    fill(rb, data, hidden=rng.normal(size=(5, 2, 3)), int_reward=ir, int_value=np.zeros((5, 2)))
    rb.compute_returns(np.zeros(2), last_int_value=np.zeros(2))
    checkpoint.save(rb, tmp_path / "ckpt")
    back = checkpoint.load(tmp_path / "ckpt")
    assert isinstance(back, RolloutBuffer) and back.intrinsic == rb.intrinsic and back.pos == 5
    torch.testing.assert_close(back.get().advantages, rb.get().advantages)
    a = [mb.indices for mb in rb.minibatches(num_minibatches=5)]
    b = [mb.indices for mb in back.minibatches(num_minibatches=5)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert RolloutBuffer(5, 2, intrinsic=rb.config()["intrinsic"]).intrinsic == rb.intrinsic


def test_splitting_a_rollout_at_a_terminal_changes_nothing():
    rng = np.random.default_rng(14)
    data = random_rollout(rng, 10, 1, 0.0)
    data["terminated"][3, 0] = True  # episode ends at t=3: [0..3] and [4..9] are independent
    last = np.array([0.7], dtype=np.float32)
    whole = RolloutBuffer(10, 1, gamma=0.9, lam=0.8)
    fill(whole, data)
    whole.compute_returns(last)
    parts = []
    for sl, lv in ((slice(0, 4), np.array([123.0])), (slice(4, 10), last)):  # 123: ignored
        rb = RolloutBuffer(sl.stop - sl.start, 1, gamma=0.9, lam=0.8)
        fill(rb, {k: v[sl] for k, v in data.items()})
        rb.compute_returns(lv)
        parts.append(rb.get().advantages)
    torch.testing.assert_close(whole.get().advantages, torch.cat(parts))


def test_vtrace_evaluate_receives_stored_hidden_states():
    rng = np.random.default_rng(15)
    data = random_rollout(rng, 4, 2, 0.3)
    h = rng.normal(size=(4, 2, 3)).astype(np.float32)
    rb = RolloutBuffer(4, 2)
    fill(rb, data, hidden=[(h[t], -h[t]) for t in range(4)], final_obs=final_obs_of(data))
    calls: list = []
    rb.compute_vtrace(critic(data["logprobs"], data["values"], calls), np.zeros(2))
    torch.testing.assert_close(calls[0][2][1], -torch.as_tensor(h))
    boot = torch.as_tensor(data["truncated"] & ~data["terminated"])
    assert len(calls) == 2  # final observations: the hidden states of the truncated steps
    torch.testing.assert_close(calls[1][2][1][:, 0], -torch.as_tensor(h)[boot])


@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["add", "add", "add", "bad", "reset"]), st.integers(0, 3)),
        max_size=25,
    )
)
def test_contents_after_any_sequence_of_adds_match_a_list_model(ops):
    """Valid adds append a row, invalid ones change nothing, reset clears, full raises."""
    T, N = 4, 2
    rb = RolloutBuffer(T, N)
    model: list[tuple[float, bool]] = []  # (reward of env 0, terminated of env 0) per row
    for i, (op, k) in enumerate(ops):
        row = (float(i), k == 0)
        args = (
            [[i, 0.0]] * N,
            [k] * N,
            [0.0] * N,
            [0.0] * N,
            [row[0]] * N,
            [row[1]] * N,
            [False] * N,
        )
        if op == "reset":
            rb.reset()
            model.clear()
        elif op == "bad":
            with pytest.raises((SpecError, CapacityError)):
                rb.add(*args[:4], [float("inf")] * N, *args[5:])
        elif len(model) == T:
            with pytest.raises(CapacityError):
                rb.add(*args)
        else:
            rb.add(*args)
            model.append(row)
        assert rb.pos == len(model) and len(rb) == len(model) * N
        if model:
            b = rb.get()
            assert b.rewards[:, 0].tolist() == [r for r, _ in model]
            assert b.terminated[:, 0].tolist() == [d for _, d in model]
            assert b.obs[:, 0, 0].tolist() == [r for r, _ in model]


@given(
    ops=st.lists(
        st.sampled_from(["add", "add", "add", "truncate_last", "terminate_last", "reset", "load"]),
        max_size=20,
    ),
    seed=st.integers(0, 2**16),
    gamma=st.sampled_from([0.0, 0.9, 1.0]),
    lam=st.sampled_from([0.0, 0.8, 1.0]),
)
def test_any_sequence_of_operations_matches_a_list_model(ops, seed, gamma, lam):
    """adds with random flags, truncate_last, terminate_last, reset and a state_dict round trip
    into a fresh buffer, against a list of rows and per-env episode counters; then returns
    against naive_gae and episode_time against the counters."""
    T, N = 4, 2
    rng = np.random.default_rng(seed)
    rb = RolloutBuffer(T, N, gamma=gamma, lam=lam, seed=seed)
    rows: list[dict] = []
    counter = np.zeros(N, dtype=np.int64)  # the model's episode step of the next add
    for op in ops:
        if op == "reset":
            rb.reset()
            rows.clear()
        elif op == "load":
            fresh = RolloutBuffer(T, N, gamma=gamma, lam=lam)
            fresh.load_state_dict(rb.state_dict())
            rb = fresh
        elif op == "add" and len(rows) < T:
            row = {
                "rewards": rng.normal(size=N).astype(np.float32),
                "values": rng.normal(size=N).astype(np.float32),
                "terminated": rng.random(N) < 0.3,
                "truncated": rng.random(N) < 0.3,
                "final_values": rng.normal(size=N).astype(np.float32),
                "episode_time": counter.copy(),
            }
            rb.add(torch.zeros(N, 1), torch.zeros(N), torch.zeros(N), row["values"],
                   row["rewards"], row["terminated"], row["truncated"],
                   final_value=row["final_values"])  # fmt: skip
            counter = np.where(row["terminated"] | row["truncated"], 0, counter + 1)
            rows.append(row)
        elif op == "truncate_last" and rows:
            value = rng.normal(size=N).astype(np.float32)
            rb.truncate_last(value)
            rows[-1]["truncated"] = np.ones(N, dtype=bool)
            rows[-1]["final_values"] = value
            counter[:] = 0
        elif op == "terminate_last" and rows:
            envs = rng.random(N) < 0.5
            rb.terminate_last(envs)
            rows[-1]["terminated"] = rows[-1]["terminated"] | envs
            counter[envs] = 0
    assert rb.pos == len(rows)
    if not rows:
        return
    data = {k: np.stack([row[k] for row in rows]) for k in rows[0]}
    last = rng.normal(size=N).astype(np.float32)
    rb.compute_returns(last)
    adv, ret = naive_gae(data, last, gamma, lam)
    b = rb.get()
    for k in ("rewards", "values", "terminated", "truncated", "episode_time"):
        np.testing.assert_array_equal(getattr(b, k).numpy(), data[k], err_msg=k)
    np.testing.assert_allclose(b.advantages.numpy(), adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.returns.numpy(), ret, rtol=1e-5, atol=1e-5)
    assert rb.state_dict()["next_episode_time"].tolist() == counter.tolist()


# ----------------------------------------------------------------------------- fast add path


def _state_bytes(tree):
    """Flatten a state_dict to {path: (dtype, shape, raw bytes)} / JSON scalars."""
    if isinstance(tree, dict):
        return {f"{k}/{p}": v for k, sub in tree.items() for p, v in _state_bytes(sub).items()}
    if isinstance(tree, (tuple, list)) and tree and isinstance(tree[0], torch.Tensor):
        return {f"{i}/{p}": v for i, s in enumerate(tree) for p, v in _state_bytes(s).items()}
    if isinstance(tree, torch.Tensor):
        return {"": (tree.dtype, tuple(tree.shape), tree.contiguous().numpy().tobytes())}
    if isinstance(tree, np.ndarray):
        return {"": (tree.dtype, tree.shape, tree.tobytes())}
    return {"": tree}


@pytest.mark.parametrize("intrinsic", [None, IntrinsicConfig()])
def test_fast_and_slow_add_paths_store_identical_bytes(monkeypatch, intrinsic):
    """The same adds through the fast path and the validating twin give identical storage."""
    from rlstore.buffers.rollout_checks import StepChecker

    T, N = 6, 3
    calls = {"step": 0}
    orig_step = StepChecker.step

    def counting_step(self, *args, **kwargs):
        calls["step"] += 1
        return orig_step(self, *args, **kwargs)

    monkeypatch.setattr(StepChecker, "step", counting_step)

    class SlowChecker(StepChecker):
        """Declines every fast path: each add goes through the validating slow twin."""

        def fast_step(self, *args, **kwargs):
            return None

    fast, slow = (RolloutBuffer(T, N, intrinsic=intrinsic, seed=0) for _ in range(2))
    slow._check = SlowChecker(N, slow.device)  # no test switch in the library: swap the checker
    rng = np.random.default_rng(0)

    def step_args(t: int) -> dict:
        term = rng.random(N) < 0.3
        trunc = rng.random(N) < 0.4
        fv = rng.normal(size=N)
        fv[~(trunc & ~term)] = np.nan  # never read: must be stored as 0.0 by both paths
        args = dict(
            obs={"x": torch.randn(N, 4), "im": torch.randint(0, 255, (N, 2), dtype=torch.uint8)},
            action=torch.randint(0, 5, (N,)),
            logp=torch.randn(N),
            value=torch.randn(N),
            reward=rng.normal(size=N),  # float64 numpy (gymnasium)
            terminated=term,
            truncated=torch.as_tensor(trunc),
            final_value=fv if (trunc & ~term).any() or t % 2 else None,
            hidden=(torch.randn(N, 1, 2), torch.randn(N, 1, 2)),
        )
        if intrinsic is not None:
            args |= dict(int_reward=rng.normal(size=N).astype(np.float32), int_value=torch.randn(N))
        return args

    fallbacks = {  # unusual but valid inputs: converted by the slow path
        2: dict(value=torch.randn(N, 1), reward=rng.normal(size=N).tolist()),
        4: dict(logp=torch.randn(N, dtype=torch.float64)),
    }
    for rollout in range(2):
        for t in range(T):
            args = step_args(t) | fallbacks.get(t, {})
            if t == 4:  # 0/1 int flags instead of bool
                args["terminated"] = args["terminated"].astype(np.int64)
            if t == 3:  # reversed dict key order: leaves must still land in the right field
                args["obs"] = dict(reversed(list(args["obs"].items())))
            before = calls["step"]
            fast.add(**args)
            first = rollout == 0 and t == 0
            assert calls["step"] - before == (1 if first or t in fallbacks else 0)
            slow.add(**args)
            assert calls["step"] - before == (2 if first or t in fallbacks else 1)
            got = fast.get()
            assert torch.equal(got.obs["im"][t], args["obs"]["im"])
        fast.reset(), slow.reset()
    a, b = _state_bytes(fast.state_dict()), _state_bytes(slow.state_dict())
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a)
    assert len(a) > 10  # the comparison covered the storage, not an empty dict


def test_truncate_last_equals_adding_the_step_truncated():
    """``truncate_last`` marks the stored last step as cut after the fact (finish_path)."""
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    after, direct = (RolloutBuffer(num_steps=4, num_envs=2, gamma=0.9, lam=0.8) for _ in "ab")
    no = torch.zeros(2, dtype=torch.bool)
    for t in range(3):
        last = t == 2
        for b, trunc in ((after, no), (direct, no | last)):
            fv = torch.tensor([1.5, -2.0]) if b is direct and last else None
            b.add(torch.zeros(2, 1), torch.zeros(2), torch.zeros(2), v[t], r[t], no, trunc,
                  final_value=fv)  # fmt: skip
    with pytest.raises(SpecError, match="final_value"):
        after.truncate_last(torch.tensor([float("nan"), 0.0]))
    assert not bool(after.get().truncated.any())  # a rejected call changes nothing
    after.truncate_last(torch.tensor([1.5, -2.0]))
    for b in (after, direct):
        b.compute_returns(torch.full((2,), 99.0))  # not read: the last steps are truncated
    torch.testing.assert_close(after.get().advantages, direct.get().advantages)
    torch.testing.assert_close(after.get().returns, direct.get().returns)
    with pytest.raises(EmptyBufferError):
        RolloutBuffer(num_steps=2, num_envs=1).truncate_last(torch.zeros(1))


def test_truncate_last_on_a_terminated_step_stores_what_add_stores():
    # truncate_last kept final_value for an env whose last step terminated; add() zeroes it
    after, direct = (RolloutBuffer(num_steps=2, num_envs=2) for _ in "ab")
    z, term = torch.zeros(2), torch.tensor([True, False])
    after.add(z[:, None], z, z, z, z, term, torch.zeros(2, dtype=torch.bool))
    direct.add(z[:, None], z, z, z, z, term, torch.ones(2, dtype=torch.bool), final_value=z + 5)
    after.truncate_last(z + 5)
    for field in ("terminated", "truncated", "final_values", "final_obs_given"):
        assert torch.equal(getattr(after.get(), field), getattr(direct.get(), field)), field
    assert after.get().final_values.tolist() == [[0.0, 5.0]]


def test_terminate_last_equals_adding_the_step_terminated():
    """``terminate_last`` ends chosen envs' episodes after their last step was stored (PPO+D)."""
    rng = np.random.default_rng(1)
    r, v = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    after, direct = (RolloutBuffer(num_steps=4, num_envs=2, gamma=0.9, lam=0.8) for _ in "ab")
    no, env1 = torch.zeros(2, dtype=torch.bool), torch.tensor([False, True])
    for t in range(3):
        for b, term in ((after, no), (direct, env1 if t == 2 else no)):
            b.add(torch.zeros(2, 1), torch.zeros(2), torch.zeros(2), v[t], r[t], term, no)
    with pytest.raises(SpecError, match="envs"):
        after.terminate_last(torch.tensor([0.5, 1.0]))
    assert not bool(after.get().terminated.any())  # a rejected call changes nothing
    after.terminate_last(env1)
    for b in (after, direct):
        b.compute_returns(torch.full((2,), 3.0))  # read for env 0 only
    for field in ("terminated", "advantages", "returns", "episode_time"):
        torch.testing.assert_close(getattr(after.get(), field), getattr(direct.get(), field))
    assert after.state_dict()["next_episode_time"].tolist() == [3, 0]
    with pytest.raises(EmptyBufferError):
        RolloutBuffer(num_steps=2, num_envs=1).terminate_last(torch.ones(1, dtype=torch.bool))
