"""SequenceReplay against a naive model: the per-episode grid, windows, masks, hidden states."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _helpers import event_stream
from hypothesis import given
from hypothesis import strategies as st

from rlstore import ReplayBuffer
from rlstore.buffers.sequence import SequenceReplay
from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError


def stream(codes: np.ndarray) -> dict[str, np.ndarray]:
    """:func:`event_stream` with ``reward = counter / 7``, ``hidden = [10 * counter, -counter]``."""
    data = event_stream(codes)
    c = data["obs"][..., 1]
    return dict(data, reward=c / 7, hidden=np.stack([c * 10, -c], -1))


def ends_at(data: dict, t: int, e: int) -> bool:
    """Naive: row ``t`` ends its episode (flags, or row ``t + 1`` does not continue it)."""
    if data["terminated"][t, e] or data["truncated"][t, e]:
        return True
    nxt = data["next_obs"][t, e].tobytes()  # bytes, not values: -0.0 does not continue 0.0
    return t + 1 < len(data["obs"]) and data["obs"][t + 1, e].tobytes() != nxt


def naive_live(data: dict, syncs: list[int], cap: int, w: int, stride: int) -> set[tuple]:
    """Live (start row, env) after observing rows at each sync point (rows written so far)."""
    n, starts, phase, seen = data["obs"].shape[1], {}, [0] * data["obs"].shape[1], 0
    for hi in syncs:
        first = max(seen, hi - cap)
        for t in range(first, hi):
            for e in range(n):
                # the first row of a sync starts an episode when the row before it was never
                # seen or is no longer stored (its continuation cannot be checked)
                lost = t == first and (first != seen or first - 1 < hi - cap)
                new = lost or t == 0 or ends_at(data, t - 1, e)
                phase[e] = 0 if new else phase[e] + 1
                starts[t, e] = phase[e] % stride == 0
        seen = hi
    lo = max(0, seen - cap)
    return {(g, e) for (g, e), s in starts.items() if s and g >= lo and g + w <= seen}


@given(
    envs=st.integers(1, 3),
    chunks=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    cap=st.integers(3, 14),
    length=st.integers(1, 4),
    burn_in=st.integers(0, 2),
    overlap_frac=st.floats(0, 0.99),
    seed=st.integers(0, 2**16),
)
def test_sequences_match_naive_windows(envs, chunks, cap, length, burn_in, overlap_frac, seed):
    w = burn_in + length
    if w > cap:
        return
    overlap = int(overlap_frac * w)
    rng = np.random.default_rng(seed)
    data = stream(rng.choice(5, size=(sum(chunks), envs), p=[0.55, 0.15, 0.15, 0.1, 0.05]))
    buf = ReplayBuffer(cap * envs, num_envs=envs, seed=0)
    seq = SequenceReplay(buf, length, burn_in=burn_in, overlap=overlap, seed=seed)
    syncs, hi = [], 0
    for c in chunks:  # sync (sample) after each chunk: rows may be dropped before being seen
        buf.extend(**{k: v[hi : hi + c] for k, v in data.items()})
        hi += c
        syncs.append(hi)
        try:
            seq.sample(1)
        except EmptyBufferError:
            pass
    want = naive_live(data, syncs, cap, w, w - overlap)
    if not want:
        with pytest.raises(EmptyBufferError, match="no complete sequence"):
            seq.sample(1)
        return
    assert len(seq) == len(want)
    twin = SequenceReplay(buf, length, burn_in=burn_in, overlap=overlap, seed=seed + 1)
    twin.load_state_dict(seq.state_dict())  # every state a stream produces passes the checks
    b = seq.sample(3 * len(want))  # stratified over equal priorities: each live one 3 times
    ids = b.ids.numpy()
    assert np.array_equal(twin.sample(3 * len(want)).ids.numpy(), ids)
    got = {(int(i) // envs, int(i) % envs) for i in ids}
    assert got == want
    assert (np.bincount(np.unique(ids, return_inverse=True)[1]) == 3).all()
    for j, (g, e) in enumerate(zip(ids // envs, ids % envs, strict=True)):
        rows = np.arange(g, g + w)
        assert b.obs[j].numpy().tobytes() == data["obs"][rows, e].tobytes()  # one column
        assert b.next_obs[j].numpy().tobytes() == data["next_obs"][rows, e].tobytes()
        np.testing.assert_array_equal(b.reward[j].numpy(), data["reward"][rows, e])
        np.testing.assert_array_equal(b.hidden[j].numpy(), data["hidden"][g, e])
        mask = [True] + [not any(ends_at(data, t, e) for t in range(g, u)) for u in rows[1:]]
        assert b.mask[j].tolist() == mask
    assert b.weights.tolist() == [1.0] * len(ids) and b.extras == {}


def fill(codes: list[list[int]], cap: int, **kw) -> tuple[ReplayBuffer, SequenceReplay]:
    data = stream(np.array(codes))
    buf = ReplayBuffer(cap * data["obs"].shape[1], num_envs=data["obs"].shape[1], seed=0)
    buf.extend(**data)
    return buf, SequenceReplay(buf, **kw)


def test_hand_computed_grid_mask_and_burn_in() -> None:
    # one env, 9 rows, truncated at row 3: episodes [0..3], [4..8]; burn_in 1 + length 2,
    # overlap 1 -> stride 2: starts 0, 2 | 4, 6; live when the 3 rows are stored: 0, 2, 4, 6
    buf, seq = fill(
        [[0], [0], [0], [2], [0], [0], [0], [0], [0]], 9, length=2, burn_in=1, overlap=1
    )
    b = seq.sample(8)
    masks = {int(i): m for i, m in zip(b.ids, b.mask.tolist(), strict=True)}
    assert masks == {0: [1, 1, 1], 2: [1, 1, 0], 4: [1, 1, 1], 6: [1, 1, 1]}
    # train on mask[:, burn_in:]: window 2 trains on rows 3 (the truncated step) only
    assert b.mask[b.ids == 2][0, seq.burn_in :].tolist() == [True, False]


def test_priorities_eta_mix_frequencies_and_stale_updates() -> None:
    buf, seq = fill([[0]] * 6, 6, length=2, alpha=1.0, eta=0.5)  # starts 0, 2, 4
    ids = torch.tensor([0, 2, 4])
    td = torch.tensor([[1.0, -3.0], [2.0, 2.0], [0.0, 9.0]])
    # eta * max + (1 - eta) * mean: 0.5*3 + 0.5*2 = 2.5 | 2 | masked [0]: 0 (eps keeps it)
    seq.update_priorities(ids, td, torch.tensor([[True, True], [True, True], [True, False]]))
    counts = np.bincount(seq.sample(4500).ids.numpy(), minlength=5)
    p = np.array([2.5, 2.0, 1e-6]) + 1e-6
    np.testing.assert_allclose(counts[[0, 2, 4]], 4500 * p / p.sum(), atol=1.5)
    # two more rows drop rows 0-1: sequence 0 dies; its slot is reused by the start at row 6
    buf.add(np.array([0.0, 99.0]), 0, 0.0, np.array([0.0, 100.0]), False, False, hidden=[0, 0])
    buf.add(np.array([0.0, 100.0]), 0, 0.0, np.array([0.0, 101.0]), False, False, hidden=[0, 0])
    seq.update_priorities(torch.tensor([0]), torch.tensor([[1e6, 1e6]]))  # stale: ignored
    b = seq.sample(600)
    assert set(b.ids.tolist()) <= {2, 4, 6} and len(seq) == 3  # 0 is gone, 6 is live
    counts = np.bincount(b.ids.numpy(), minlength=7)[[2, 4, 6]]
    p = np.array([2.0, 1e-6, 2.5]) + 1e-6  # the new start enters with the max priority seen
    np.testing.assert_allclose(counts, 600 * p / p.sum(), atol=1.5)


def test_state_round_trip_resumes_exactly() -> None:
    codes = np.random.default_rng(5).choice(3, size=(30, 2), p=[0.8, 0.1, 0.1])
    buf, seq = fill(codes.tolist(), 20, length=3, burn_in=2, overlap=2, alpha=0.6, beta=0.5)
    b = seq.sample(16)
    seq.update_priorities(b.ids, torch.linspace(0, 3, 16 * 5).reshape(16, 5))
    buf2 = ReplayBuffer(40, num_envs=2, seed=7)
    buf2.load_state_dict(buf.state_dict())
    seq2 = SequenceReplay(buf2, 3, burn_in=2, overlap=2, alpha=0.6, beta=0.5, seed=123)
    seq2.load_state_dict(seq.state_dict())
    more = stream(np.zeros((7, 2), int))
    for bb in (buf, buf2):
        bb.extend(**more)
    for _ in range(3):
        x, y = seq.sample(32), seq2.sample(32)
        assert torch.equal(x.ids, y.ids) and torch.equal(x.weights, y.weights)
        assert torch.equal(x.obs, y.obs) and torch.equal(x.mask, y.mask)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": 0}, ConfigError, "length: expected an int >= 1, got 0"),
        ({"length": 2, "burn_in": -1}, ConfigError, "burn_in: expected an int >= 0, got -1"),
        ({"length": 2, "burn_in": 1, "overlap": 3}, ConfigError, r"overlap: .*\[0, 3\), got 3"),
        ({"length": 2, "overlap": True}, ConfigError, "overlap: expected an int"),
        ({"length": 2, "hidden": 3}, ConfigError, "hidden: expected a field name or None"),
        ({"length": 2, "eta": 1.5}, ConfigError, r"eta: expected a number in \[0.0, 1.0\]"),
        ({"length": 2, "alpha": -1.0}, ConfigError, "alpha: expected"),
        ({"length": 4, "burn_in": 3}, CapacityError, r"capacity_per_env=6, got 3 \+ 4 = 7"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        SequenceReplay(ReplayBuffer(12, num_envs=2), **kwargs)


def test_bad_calls_change_nothing() -> None:
    buf, seq = fill([[0]] * 3, 5, length=2, hidden="nope")
    before = seq.state_dict()
    with pytest.raises(SpecError, match="hidden: expected an extra field 'nope'"):
        seq.sample(2)
    assert seq.state_dict()["hi"] == before["hi"] == 0  # refused before anything changed
    buf, seq = fill([[0]] * 3, 5, length=2)
    b = seq.sample(2)
    before = seq.state_dict()
    for bad, match in [
        (([0, 0], [[1.0]]), "td_errors: expected shape"),
        (([0, 0], [[np.nan], [1.0]]), "td_errors: expected finite"),
        (([0, 0], [[1.0], [1.0]], [[1], [1]]), "mask: expected a bool array"),
        (([[0]], [[1.0]]), "ids: expected a 1-D integer array"),
        (([0.0, 1.0], [[1.0], [1.0]]), "ids: expected a 1-D integer array"),
    ]:
        with pytest.raises(SpecError, match=match):
            seq.update_priorities(*bad)
    assert np.array_equal(
        seq.state_dict()["prio"]["tree"]["leaves"], before["prio"]["tree"]["leaves"]
    )
    with pytest.raises(CheckpointError, match="start_row"):
        seq.load_state_dict({**before, "start_row": before["start_row"][:1]})
    with pytest.raises(CheckpointError, match="prio"):
        seq.load_state_dict({**before, "prio": {}})
    assert seq.state_dict()["hi"] == 3 and len(b.ids) == 2
    buf.add(np.array([0.0, 99.0]), 0, 0.0, np.array([0.0, 1.0]), False, False, hidden=[0, 0])
    with pytest.raises(SpecError, match="ids: expected"):  # refused before the new row is seen
        seq.update_priorities([0.5], [[1.0]])
    assert seq.state_dict()["hi"] == 3
    buf.load_state_dict(ReplayBuffer(5).state_dict())  # the buffer goes back: refuse, say why
    with pytest.raises(CheckpointError, match="rows_written went back from 3 to 0"):
        seq.sample(1)


def test_rejected_samples_and_priorities_do_not_observe_new_rows() -> None:
    """A bad batch_size or beta, or priorities too large for the sum tree, are refused before
    the sampler observes the rows written since its last call (it did observe them first, and
    when it observes decides the grid of rows dropped meanwhile: not all or nothing)."""
    buf, seq = fill([[0]] * 3, 8, length=2, alpha=2.0)
    b = seq.sample(2)
    buf.add(np.array([0.0, 99.0]), 0, 0.0, np.array([0.0, 1.0]), False, False, hidden=[0, 0])
    before = seq.state_dict()
    for call, error, match in [
        (lambda: seq.sample(0), CapacityError, "batch_size: expected an int >= 1"),
        (lambda: seq.sample(2, beta=-1.0), ConfigError, "beta: expected a finite number"),
        (lambda: seq.update_priorities(b.ids, np.full((2, 2), 1e300)), SpecError, "p = 1e"),
    ]:
        with pytest.raises(error, match=match):
            call()
        assert seq.state_dict()["hi"] == before["hi"] == 3
        np.testing.assert_array_equal(
            seq.state_dict()["prio"]["tree"]["leaves"], before["prio"]["tree"]["leaves"]
        )


def test_extras_named_like_computed_outputs_come_back_as_stored() -> None:
    """Extras named ``mask``, ``ids`` or ``weights`` came back as the computed mask, sequence
    ids and importance weights (and a ``hidden`` named like one of them read the computed one)."""
    buf = ReplayBuffer(8, seed=0)
    for t in range(5):
        buf.add(np.full(2, t, np.float32), 0, 1.0, np.full(2, t + 1.0, np.float32), False, False,
                mask=np.float32(t), ids=np.float32(10 + t), weights=np.float32(20 + t))  # fmt: skip
    b = SequenceReplay(buf, 2, hidden="weights", seed=0).sample(4)
    rows = b.obs[:, :, 0]  # obs = t
    torch.testing.assert_close(b.extras["mask"], rows, rtol=0, atol=0)
    torch.testing.assert_close(b.extras["ids"], 10 + rows, rtol=0, atol=0)
    torch.testing.assert_close(b.hidden, 20 + rows[:, 0], rtol=0, atol=0)
    assert b.mask.dtype == torch.bool and bool(b.mask.all())
    assert b.ids.tolist() == rows[:, 0].long().tolist()
    torch.testing.assert_close(b.weights, torch.ones(4))


def test_docstring_examples() -> None:
    import doctest

    from rlstore.buffers import sequence as buffers_sequence
    from rlstore.samplers import sequence as samplers_sequence

    for module in (buffers_sequence, samplers_sequence):
        assert doctest.testmod(module).failed == 0
