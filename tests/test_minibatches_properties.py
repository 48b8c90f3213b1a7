"""Hypothesis properties of the recurrent and trajectory generators against a naive model.

The naive model of a rollout is a list of steps ``(t, n)`` with their done flags; episode
segments are recomputed here by walking each env column (independently of segment_bounds).
The rollout is filled through RolloutBuffer.add with obs[t, n] = t * N + n and a hidden state
that encodes the same index, so every gathered value identifies its step.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlstore.buffers.rollout import RolloutBuffer


@st.composite
def rollouts(draw):
    T = draw(st.integers(1, 12))
    N = draw(st.integers(1, 4))
    flags = draw(st.lists(st.sampled_from(["-", "term", "trunc"]), min_size=T * N, max_size=T * N))
    spare = draw(st.integers(0, 2))  # buffer rows left unfilled: a partial rollout
    return T, N, np.array(flags).reshape(T, N), spare


def rollout_args(N: int, flags_t: np.ndarray, t: int, rng: np.random.Generator) -> dict:
    """``RolloutBuffer.add`` arguments of step ``t``; obs, action, hidden encode ``t * N + n``."""
    idx = torch.arange(N, dtype=torch.float32) + t * N
    return {
        "obs": idx[:, None],
        "action": torch.arange(N) + t * N,
        "logp": torch.zeros(N),
        "value": torch.as_tensor(rng.normal(size=N), dtype=torch.float32),
        "reward": torch.as_tensor(rng.normal(size=N), dtype=torch.float32),
        "terminated": torch.as_tensor(flags_t == "term"),
        "truncated": torch.as_tensor(flags_t == "trunc"),
        "final_value": torch.as_tensor(rng.normal(size=N), dtype=torch.float32),
        "hidden": (idx[:, None, None].repeat(1, 2, 3), -idx[:, None]),
    }


def build(T: int, N: int, flags: np.ndarray, seed: int, spare: int = 0) -> RolloutBuffer:
    rb = RolloutBuffer(T + spare, N, seed=seed, advantage_normalization="minibatch")
    rng = np.random.default_rng(seed)
    for t in range(T):
        rb.add(**rollout_args(N, flags[t], t, rng))
    rb.compute_returns(torch.zeros(N))
    return rb


def _flat(x: torch.Tensor) -> torch.Tensor:
    """(T, N, ...) -> (T * N, ...): row t * N + n is step (t, n)."""
    return x.reshape(-1, *x.shape[2:])


def naive_segments(T: int, N: int, flags: np.ndarray) -> dict[tuple[int, int], tuple[int, int]]:
    """(t, n) -> (first, last) time index of its episode segment, by walking each column."""
    out = {}
    for n in range(N):
        seg = []
        for t in range(T):
            seg.append(t)
            if flags[t, n] != "-" or t == T - 1:
                for s in seg:
                    out[(s, n)] = (seg[0], seg[-1])
                seg = []
    return out


@given(
    r=rollouts(),
    seq_len=st.one_of(st.none(), st.integers(1, 5)),
    num_mb=st.integers(1, 4),
    epochs=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_recurrent_sequences(r, seq_len, num_mb, epochs, seed):
    T, N, flags, spare = r
    if seq_len is None and N % num_mb:
        num_mb = 1
    rb = build(T, N, flags, seed, spare)
    segs = naive_segments(T, N, flags)
    n_seq = len({(t, n) for (t, n), (a, _) in segs.items() if (t - a) % (seq_len or T) == 0})
    if seq_len is not None:
        num_mb = min(num_mb, n_seq)
    stored_h0, stored_h1 = rb.get().hidden
    stored_adv = rb.get().advantages.reshape(-1)  # flat index t * N + n, as mb.indices
    seen: list[list[int]] = [[] for _ in range(epochs)]
    mbs = list(rb.recurrent_minibatches(num_minibatches=num_mb, num_epochs=epochs, seq_len=seq_len))
    assert len(mbs) == num_mb * epochs
    for k, mb in enumerate(mbs):
        L, B = mb.mask.shape
        assert L == (T if seq_len is None else seq_len)
        for j in range(B):
            idx, mask = mb.indices[:, j], mb.mask[:, j]
            real = idx[mask].tolist()
            # mask is False exactly on padding, padding is a right tail, padded values are zero
            assert bool(mask[0]) and mask.tolist() == sorted(mask.tolist(), reverse=True)
            assert bool((idx[~mask] == -1).all()) and bool((mb.obs[~mask, j] == 0).all())
            assert mb.obs[mask, j, 0].tolist() == [float(i) for i in real]
            steps = [(i // N, i % N) for i in real]
            n0 = steps[0][1]
            assert all(n == n0 for _, n in steps)  # never crosses an env column
            assert [t for t, _ in steps] == list(range(steps[0][0], steps[0][0] + len(steps)))
            if seq_len is not None:  # never crosses an episode boundary
                assert len({segs[s] for s in steps}) == 1
            # the initial hidden state is the stored state before the first step
            t0 = steps[0][0]
            assert torch.equal(mb.recurrence_memory[0][j], stored_h0[t0, n0])
            assert torch.equal(mb.recurrence_memory[1][j], stored_h1[t0, n0])
            # a fresh buffer: episode_starts is True exactly where a step begins a segment
            expect = [segs[s][0] == s[0] for s in steps]
            assert mb.episode_starts[mask, j].tolist() == expect
            seen[k // num_mb] += real
        # normalization over real entries only: mean 0 over the mask, to float32 precision
        # relative to how far the raw advantages sit from their mean (two nearly equal raw values
        # normalize to +-1 with an error of float32 eps * |raw| / std)
        if int(mb.mask.sum()) > 1:
            raw = stored_adv[mb.indices[mb.mask]].double()
            cond = float(raw.abs().max() / (raw.std(unbiased=False) + 1e-12))
            tol = 1e-5 * max(1.0, cond)
            assert abs(float(mb.advantages[mb.mask].double().mean())) < tol
    for ep in seen:
        assert sorted(ep) == list(range(T * N))  # every real step exactly once per epoch


@given(
    r=rollouts(),
    W=st.integers(1, 6),
    mb_div=st.integers(1, 3),
    p_end=st.sampled_from([0.0, 0.0, 0.5, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_trajectory_windows(r, W, mb_div, p_end, seed):
    T, N, flags, spare = r
    total = T * N
    size = total // mb_div if total % mb_div == 0 else total
    rb = build(T, N, flags, seed, spare)
    segs = naive_segments(T, N, flags)
    ep_time = rb.get().episode_time
    targets: list[int] = []
    for mb in rb.trajectory_minibatches(timesteps=W, mini_batch_size=size, prob_go_from_end=p_end):
        assert mb.obs.shape == (size, W, 1) and mb.timesteps.shape == (size, W)
        for k, tgt in enumerate(mb.indices.tolist()):
            t, n = divmod(tgt, N)
            first, last = segs[(t, n)]
            if p_end == 1.0:
                assert t == last
            n_real = min(W, t - first + 1)
            # left padding, mask False exactly on it, zeros there
            assert mb.mask[k].tolist() == [False] * (W - n_real) + [True] * n_real
            assert bool((mb.obs[k, : W - n_real] == 0).all())
            assert bool((mb.timesteps[k, : W - n_real] == 0).all())
            # the real part is the consecutive steps of the same episode ending at the target
            window = [(s, n) for s in range(t - n_real + 1, t + 1)]
            assert mb.obs[k, W - n_real :, 0].tolist() == [float(s * N + n) for s, _ in window]
            assert mb.timesteps[k, W - n_real :].tolist() == [int(ep_time[w]) for w in window]
            assert all(segs[w] == (first, last) for w in window)
            targets.append(tgt)
    if p_end == 0.0:
        assert sorted(targets) == list(range(total))  # every step a target exactly once
    else:
        assert len(targets) == total


@given(
    r=rollouts(),
    mb_div=st.integers(1, 4),
    epochs=st.integers(1, 3),
    norm=st.sampled_from(["none", "batch", "minibatch"]),
    seed=st.integers(0, 2**16),
)
def test_flat_minibatches(r, mb_div, epochs, norm, seed):
    T, N, flags, spare = r
    total = T * N
    n_mb = mb_div if total % mb_div == 0 else 1
    rb = build(T, N, flags, seed, spare)
    rb.advantage_normalization = norm
    b = rb.get()
    h0, h1 = (_flat(h) for h in b.hidden)
    raw = b.advantages.reshape(-1).double()
    mbs = list(rb.minibatches(num_minibatches=n_mb, num_epochs=epochs))
    assert len(mbs) == n_mb * epochs
    for e in range(epochs):  # every stored step (none of the spare rows) once per epoch
        idx = torch.cat([mb.indices for mb in mbs[e * n_mb : (e + 1) * n_mb]])
        assert sorted(idx.tolist()) == list(range(total))
    for mb in mbs:
        i = mb.indices
        assert mb.obs[:, 0].tolist() == i.float().tolist()  # obs[t, n] = t * N + n
        assert torch.equal(mb.actions, i) and mb.mask is None
        assert torch.equal(mb.recurrence_memory[0], h0[i]) and torch.equal(
            mb.recurrence_memory[1], h1[i]
        )
        assert torch.equal(mb.values, _flat(b.values)[i]) and torch.equal(
            mb.returns, _flat(b.returns)[i]
        )
        scope = raw if norm == "batch" else raw[i]
        if norm == "none" or len(scope) < 2:
            expect = raw[i]
        else:  # population std, eps 1e-8
            expect = (raw[i] - scope.mean()) / (scope.std(correction=0) + 1e-8)
        cond = float(scope.abs().max() / (scope.std(correction=0) + 1e-12)) if len(scope) > 1 else 1
        torch.testing.assert_close(mb.advantages.double(), expect, rtol=0, atol=1e-5 * max(1, cond))


@given(r=rollouts(), cut=st.integers(0, 12), seed=st.integers(0, 2**16))
def test_resume_mid_rollout_continues_exactly(r, cut, seed):
    """A buffer loaded from a state_dict taken after any number of adds (and after drawing
    minibatches from the previous rollout) stores, computes and draws what the original does."""
    T, N, flags, spare = r
    cut = min(cut, T)
    first = build(T, N, flags, seed, spare)
    list(first.minibatches(num_minibatches=1))  # advance the RNG
    first.reset()  # episode counters carry over
    twin = build(T, N, flags, seed, spare)
    list(twin.minibatches(num_minibatches=1))
    twin.reset()
    rng = np.random.default_rng(seed)
    steps = [rollout_args(N, flags[t], t, rng) for t in range(T)]
    for s in steps[:cut]:
        first.add(**s)
        twin.add(**s)
    loaded = RolloutBuffer(T + spare, N, seed=seed + 1)  # another seed: the state's RNG wins
    loaded.load_state_dict(twin.state_dict())
    for rb in (first, loaded):
        for s in steps[cut:]:
            rb.add(**s)
        rb.compute_returns(torch.ones(N))
    a, b = first.get(), loaded.get()
    for name in ("obs", "terminated", "truncated", "episode_time", "advantages", "returns"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert all(torch.equal(x, y) for x, y in zip(a.hidden, b.hidden, strict=True))
    for x, y in zip(
        first.recurrent_minibatches(num_minibatches=1, seq_len=2, num_epochs=2),
        loaded.recurrent_minibatches(num_minibatches=1, seq_len=2, num_epochs=2),
        strict=True,
    ):
        assert torch.equal(x.indices, y.indices) and torch.equal(x.episode_starts, y.episode_starts)
