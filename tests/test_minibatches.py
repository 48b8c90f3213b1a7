"""Minibatch generators: hand-checked plans, shapes, padding, sizes, normalization."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from rlstore.errors import ConfigError, EmptyBufferError, SpecError
from rlstore.minibatches import (
    RolloutBatch,
    column_index_plan,
    flat_index_plan,
    flat_minibatches,
    recurrent_minibatches,
    resolve_minibatch_size,
    segment_bounds,
    sequence_plan,
    trajectory_minibatches,
)


def make_batch(
    terminated: np.ndarray,
    truncated: np.ndarray | None = None,
    *,
    hidden: bool = True,
    seed: int = 0,
) -> RolloutBatch:
    """A rollout whose obs/actions encode the flat index ``t * N + n`` (to check gathers)."""
    terminated = np.asarray(terminated, dtype=bool)
    T, N = terminated.shape
    truncated = np.zeros_like(terminated) if truncated is None else np.asarray(truncated, bool)
    rng = np.random.default_rng(seed)
    flat = torch.arange(T * N).reshape(T, N)
    done = terminated | truncated
    ep = np.zeros((T, N), dtype=np.int64)
    for t in range(1, T):
        ep[t] = np.where(done[t - 1], 0, ep[t - 1] + 1)
    return RolloutBatch(
        obs=(flat.float()[..., None] + torch.tensor([0.0, 0.5])),  # (T, N, 2)
        actions=flat.clone(),
        logprobs=-flat.float() / 100,
        values=flat.float() / 10,
        rewards=flat.float() + 1.0,
        terminated=torch.as_tensor(terminated),
        truncated=torch.as_tensor(truncated),
        final_values=torch.zeros(T, N),
        episode_time=torch.as_tensor(ep),
        advantages=torch.as_tensor(rng.normal(size=(T, N)), dtype=torch.float32),
        returns=flat.float() * 2,
        hidden=(flat.float()[..., None].repeat(1, 1, 3), -flat.float()[..., None])
        if hidden
        else None,
    )


def test_resolve_minibatch_size_rules():
    assert resolve_minibatch_size(12, num_minibatches=None, mini_batch_size=None) == 12
    assert resolve_minibatch_size(12, num_minibatches=3, mini_batch_size=None) == 4
    assert resolve_minibatch_size(12, num_minibatches=None, mini_batch_size=6) == 6
    assert resolve_minibatch_size(12, num_minibatches=2, mini_batch_size=6) == 6
    with pytest.raises(ConfigError, match="conflict"):
        resolve_minibatch_size(12, num_minibatches=3, mini_batch_size=6)
    with pytest.raises(
        ConfigError,
        match=r"num_minibatches: expected a divisor of the 12 steps, got 5 \(nearest: 4 or 6\)",
    ):
        resolve_minibatch_size(12, num_minibatches=5, mini_batch_size=None)
    with pytest.raises(ConfigError, match=r"mini_batch_size: .* got 13"):
        resolve_minibatch_size(12, num_minibatches=None, mini_batch_size=13)
    with pytest.raises(ConfigError, match="num_minibatches: expected an int >= 1"):
        resolve_minibatch_size(12, num_minibatches=0, mini_batch_size=None)


def test_segment_bounds_and_sequence_plan_by_hand():
    # one env, T=7, done at t=2 and t=3:  segments [0..2], [3..3], [4..6]
    dones = np.array([[0], [0], [1], [1], [0], [0], [0]], dtype=bool)
    start, end = segment_bounds(dones)
    assert start[:, 0].tolist() == [0, 0, 0, 3, 4, 4, 4]
    assert end[:, 0].tolist() == [2, 2, 2, 3, 6, 6, 6]
    t0, env, length = sequence_plan(dones, 2)
    # chunks of <= 2 inside segments: [0,1] [2] [3] [4,5] [6]
    assert t0.tolist() == [0, 2, 3, 4, 6]
    assert length.tolist() == [2, 1, 1, 2, 1]
    assert env.tolist() == [0] * 5


def test_public_plans_validate_their_arguments():
    """Were unchecked: seq_len=0 made empty chunks (with a numpy warning), 2.5 fractional ones,
    0.5 flags counted as done, a 1-D or empty dones raised numpy errors, column_index_plan(2.5)
    gave float indices and flat_index_plan(4.0) an AxisError."""
    dones = np.array([[0, 1], [1, 0], [0, 0]])
    for bad in (0, 2.5, True, "2"):
        with pytest.raises(ConfigError, match="seq_len: expected an int >= 1"):
            sequence_plan(dones, bad)
    bad_dones = [
        (np.full((3, 2), 0.5), "got a value 0.5"),
        (np.zeros(3), r"\(T, N\)"),
        (np.zeros((0, 2), bool), r"T >= 1, got \(0, 2\)"),
        ({"a": 1}, "dict"),
    ]
    for bad, match in bad_dones:
        with pytest.raises(SpecError, match=f"dones: expected.*{match}"):
            segment_bounds(bad)
    # 0/1 numbers and tensors are flags like bools
    for like in (dones.astype(np.float32), torch.as_tensor(dones)):
        for got, want in zip(
            sequence_plan(like, 2), sequence_plan(dones.astype(bool), 2), strict=True
        ):
            np.testing.assert_array_equal(got, want)
    with pytest.raises(ConfigError, match="num_steps: expected an int >= 1, got 2.5"):
        list(column_index_plan(2.5, 2, num_minibatches=1))
    with pytest.raises(ConfigError, match="num_envs: expected an int >= 0, got 2.0"):
        list(column_index_plan(2, 2.0, num_minibatches=1))
    with pytest.raises(ConfigError, match="total: expected an int >= 0, got 4.0"):
        list(flat_index_plan(4.0, num_minibatches=2))


def test_flat_minibatches_cover_each_step_once_per_epoch_and_gather_rows():
    b = make_batch(np.zeros((5, 4)))
    mbs = list(flat_minibatches(b, num_minibatches=4, num_epochs=3, rng=np.random.default_rng(0)))
    assert len(mbs) == 12
    for e in range(3):
        idx = torch.cat([mb.indices for mb in mbs[4 * e : 4 * e + 4]])
        assert sorted(idx.tolist()) == list(range(20))
    mb = mbs[0]
    assert mb.obs.shape == (5, 2) and mb.mask is None
    torch.testing.assert_close(mb.obs[:, 0], mb.indices.float())
    torch.testing.assert_close(mb.recurrence_memory[0][:, 0], mb.indices.float())
    torch.testing.assert_close(mb.advantages, b.advantages.reshape(-1)[mb.indices])
    unshuffled = next(flat_minibatches(b, shuffle=False))
    assert unshuffled.indices.tolist() == list(range(20))


def test_torch_generator_is_accepted_and_reproducible():
    b = make_batch(np.zeros((4, 2)))
    runs = [
        [
            mb.indices
            for mb in flat_minibatches(b, mini_batch_size=2, rng=torch.Generator().manual_seed(3))
        ]
        for _ in range(2)
    ]
    assert all(torch.equal(x, y) for x, y in zip(*runs, strict=True))


def test_generators_require_computed_returns():
    b = make_batch(np.zeros((2, 2)))
    b = RolloutBatch(**{**b.__dict__, "advantages": None})
    with pytest.raises(EmptyBufferError, match="compute_returns"):
        next(flat_minibatches(b))


def test_recurrent_whole_columns_with_episode_starts():
    term = np.zeros((4, 4), dtype=bool)
    term[1, 2] = True  # env 2 starts a new episode at t=2
    b = make_batch(term)
    mbs = list(recurrent_minibatches(b, num_minibatches=2, rng=np.random.default_rng(1)))
    assert len(mbs) == 2
    envs = []
    for mb in mbs:
        assert mb.obs.shape == (4, 2, 2) and bool(mb.mask.all())
        cols = (mb.indices % 4)[0]
        assert bool((mb.indices % 4 == cols).all())  # one env per column
        assert (mb.indices // 4)[:, 0].tolist() == [0, 1, 2, 3]  # whole time range, in order
        envs += cols.tolist()
        for j, n in enumerate(cols.tolist()):
            expect = [True, False, n == 2, False]  # ep time 0 at t=0 and after env 2's terminal
            assert mb.episode_starts[:, j].tolist() == expect
            torch.testing.assert_close(mb.recurrence_memory[1][j], torch.tensor([-float(n)]))
    assert sorted(envs) == [0, 1, 2, 3]
    with pytest.raises(
        ConfigError, match="num_minibatches: expected a divisor of the 4 env columns"
    ):
        next(recurrent_minibatches(b, num_minibatches=3))


def test_recurrent_chunks_padding_and_initial_hidden_by_hand():
    term = np.zeros((5, 1), dtype=bool)
    term[2, 0] = True  # segments [0..2] and [3..4]; seq_len 2 -> [0,1] [2] [3,4]
    b = make_batch(term)
    (mb,) = recurrent_minibatches(b, num_minibatches=1, seq_len=2, shuffle=False)
    assert mb.indices.T.tolist() == [[0, 1], [2, -1], [3, 4]]
    assert mb.mask.T.tolist() == [[True, True], [True, False], [True, True]]
    assert mb.obs[1, 1].tolist() == [0.0, 0.0]  # padding is zero
    assert mb.actions[1, 1].item() == 0 and mb.returns[1, 1].item() == 0.0
    torch.testing.assert_close(
        mb.recurrence_memory[0], torch.tensor([[0.0] * 3, [2.0] * 3, [3.0] * 3])
    )
    assert mb.episode_starts.T.tolist() == [[True, False], [False, False], [True, False]]


def test_recurrent_minibatch_normalization_uses_real_entries_only():
    term = np.zeros((5, 2), dtype=bool)
    term[1] = True
    b = make_batch(term, seed=4)
    for mb in recurrent_minibatches(
        b, num_minibatches=2, seq_len=3, normalize=True, rng=np.random.default_rng(2)
    ):
        real = b.advantages.reshape(-1)[mb.indices[mb.mask]].double()
        ref = (real - real.mean()) / (real.std(correction=0) + 1e-8)
        torch.testing.assert_close(mb.advantages[mb.mask].double(), ref, rtol=1e-5, atol=1e-6)
        assert bool((mb.advantages[~mb.mask] == 0).all())
    with pytest.raises(ConfigError, match="seq_len"):
        next(recurrent_minibatches(b, num_minibatches=1, seq_len=0))
    with pytest.raises(ConfigError, match="at most the"):
        next(recurrent_minibatches(b, num_minibatches=50, seq_len=3))


def test_trajectory_windows_by_hand():
    # one env, T=5, terminal at t=1: segments [0..1], [2..4]; window W=3
    term = np.zeros((5, 1), dtype=bool)
    term[1, 0] = True
    b = make_batch(term)
    (mb,) = trajectory_minibatches(b, timesteps=3, mini_batch_size=5, rng=np.random.default_rng(0))
    by_target = {int(i): k for k, i in enumerate(mb.indices)}
    expect_obs = {0: [-1, -1, 0], 1: [-1, 0, 1], 2: [-1, -1, 2], 3: [-1, 2, 3], 4: [2, 3, 4]}
    expect_time = {0: [0, 0, 0], 1: [0, 0, 1], 2: [0, 0, 0], 3: [0, 0, 1], 4: [0, 1, 2]}
    for tgt, k in by_target.items():
        steps = expect_obs[tgt]
        assert mb.mask[k].tolist() == [s >= 0 for s in steps]
        assert mb.obs[k, :, 0].tolist() == [float(max(s, 0)) if s >= 0 else 0.0 for s in steps]
        assert mb.timesteps[k].tolist() == expect_time[tgt]
        assert mb.rewards[k].tolist() == [s + 1.0 if s >= 0 else 0.0 for s in steps]
        assert mb.values[k].item() == pytest.approx(tgt / 10)
        assert mb.returns[k].item() == 2.0 * tgt
    assert sorted(by_target) == [0, 1, 2, 3, 4]
    assert mb.obs.shape == (5, 3, 2) and mb.actions.shape == (5, 3) and mb.logprobs.shape == (5,)


def test_trajectory_prob_go_from_end_one_targets_segment_ends_only():
    term = np.zeros((6, 2), dtype=bool)
    term[2, 0] = True
    b = make_batch(term)
    ends = {2 * 2 + 0, 5 * 2 + 0, 5 * 2 + 1}  # flat indices of the segment ends
    for mb in trajectory_minibatches(
        b,
        timesteps=4,
        mini_batch_size=4,
        num_epochs=2,
        prob_go_from_end=1.0,
        rng=np.random.default_rng(5),
    ):
        assert set(mb.indices.tolist()) <= ends
    with pytest.raises(ConfigError, match="prob_go_from_end"):
        next(trajectory_minibatches(b, timesteps=2, mini_batch_size=4, prob_go_from_end=1.5))
    with pytest.raises(ConfigError, match="timesteps"):
        next(trajectory_minibatches(b, timesteps=0, mini_batch_size=4))
    with pytest.raises(ConfigError, match="mini_batch_size"):
        next(trajectory_minibatches(b, timesteps=2, mini_batch_size=5))


def test_dict_obs_are_gathered_per_key():
    b = make_batch(np.zeros((3, 2)), hidden=False)
    b = RolloutBatch(**{**b.__dict__, "obs": {"a": b.obs, "b": b.actions}})
    mb = next(flat_minibatches(b, mini_batch_size=6, shuffle=False))
    assert mb.recurrence_memory is None
    assert mb.obs["b"].tolist() == list(range(6))
    (rmb,) = recurrent_minibatches(b, num_minibatches=1, seq_len=2, shuffle=False)
    assert rmb.obs["a"].shape == (2, 4, 2) and rmb.recurrence_memory is None


def test_records_are_immutable():
    b = make_batch(np.zeros((2, 2)))
    mb = next(flat_minibatches(b))
    with pytest.raises(dataclasses.FrozenInstanceError):
        mb.advantages = mb.returns  # type: ignore[misc]


def test_index_plans_are_the_generators_plans():
    """The index-only plans (for storages that gather their own rows, e.g. the PyTorchRL
    facade) draw the same permutations as the minibatch generators."""
    batch = make_batch(np.zeros((5, 4), dtype=bool))
    mbs = flat_minibatches(batch, num_minibatches=2, num_epochs=2, rng=np.random.default_rng(3))
    plan = flat_index_plan(20, num_minibatches=2, num_epochs=2, rng=np.random.default_rng(3))
    for mb, idx in zip(mbs, plan, strict=True):
        torch.testing.assert_close(mb.indices, idx)
    rec = recurrent_minibatches(batch, num_minibatches=2, rng=np.random.default_rng(5))
    cols = column_index_plan(5, 4, num_minibatches=2, rng=np.random.default_rng(5))
    for mb, idx in zip(rec, cols, strict=True):
        assert idx.shape == (5, 2)
        torch.testing.assert_close(mb.indices, idx)
    with pytest.raises(ConfigError, match="env columns"):
        next(column_index_plan(5, 4, num_minibatches=3))
    with pytest.raises(ConfigError):
        next(flat_index_plan(20, num_minibatches=3))
