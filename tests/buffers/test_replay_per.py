"""ReplayBuffer with a PrioritizedSampler, and on memory-mapped files (StorageLayout.memmap)."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from _helpers import flat_state

from rlstore.buffers.replay import ReplayBuffer
from rlstore.checkpoint import load, save
from rlstore.errors import CheckpointError, ConfigError, SpecError
from rlstore.samplers import PrioritizedSampler
from rlstore.storage import StorageLayout

F = np.float32


def _row(i: int, n: int, done: bool = False) -> dict[str, Any]:
    """One add of ``n`` envs whose obs encodes the transition number ``i``."""
    return {"obs": np.full((n, 2), i, F), "action": np.arange(n), "reward": np.full(n, i, F),
            "next_obs": np.full((n, 2), i + 1, F), "terminated": np.full(n, done),
            "truncated": np.zeros(n, bool)}  # fmt: skip


def _state(buf: ReplayBuffer) -> dict[str, Any]:
    return {k: v for k, v in flat_state(buf).items() if not k.startswith("/config/storage")}


def _per(cap: int = 6, n: int = 2, **kw: Any) -> ReplayBuffer:
    return ReplayBuffer(cap, num_envs=n, sampler=PrioritizedSampler(seed=0, **kw))


def test_frequencies_within_three_sigma_through_the_buffer() -> None:
    buf = _per(8, 2, alpha=1.0, beta=1.0, eps=1e-9)
    for i in range(6):  # 12 transitions: wraps (capacity 8), ids 4..11 live
        buf.add(**_row(i, 2))
    batch = buf.sample(8)
    ids = np.arange(4, 12)
    pri = np.arange(1.0, 9.0)  # id 4 -> 1, ..., id 11 -> 8
    buf.update_priorities(ids, pri)
    prob = pri / pri.sum()
    counts = np.zeros(8)
    for _ in range(12_500):  # 1e5 draws (batch_size <= capacity)
        b = buf.sample(8)
        assert b.indices.min() >= 4 and b.indices.max() <= 11  # never the spare row or old ids
        counts += np.bincount(b.indices - 4, minlength=8)
        # what was drawn is what the id names: obs row g = id // 2 holds value g
        np.testing.assert_array_equal(b.obs[:, 0].numpy(), b.indices // 2)
    sigma = np.sqrt(1e5 * prob * (1 - prob))
    assert np.all(np.abs(counts - 1e5 * prob) <= 3 * sigma), (counts, 1e5 * prob)
    assert batch.weights.dtype.is_floating_point


def test_weights_hand_computed_and_uniform_weights_are_ones() -> None:
    # alpha = 1, eps ~ 0: P = p / 10 for p = 1, 2, 3, 4 (ids 0..3, one env); N = 4;
    # w = (4 P)^-1 / max w = p_min / p = 1, 1/2, 1/3, 1/4
    buf = _per(4, 1, alpha=1.0, beta=1.0, eps=1e-12)
    for i in range(4):
        buf.add(**_row(i, 1))
    buf.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    b = buf.sample(4)
    np.testing.assert_allclose(b.weights.numpy(), 1.0 / (b.indices + 1), rtol=1e-6)
    uni = ReplayBuffer(4, seed=0)
    uni.add(**_row(0, 1))
    np.testing.assert_array_equal(uni.sample(1).weights.numpy(), 1.0)
    with pytest.raises(ConfigError, match="update_priorities"):
        uni.update_priorities([0], [1.0])


def test_new_transitions_enter_with_max_priority_and_overwritten_updates_are_ignored() -> None:
    buf = _per(4, 1, alpha=1.0, eps=1e-12)
    for i in range(4):
        buf.add(**_row(i, 1))
    buf.update_priorities(np.arange(4), np.array([1.0, 9.0, 3.0, 4.0]))
    tree = buf._sampler.tree
    buf.add(**_row(4, 1))  # id 4 enters with the max priority seen (9); id 0 is overwritten
    assert tree.leaves[4 % 5] == pytest.approx(9.0)
    buf.add(**_row(5, 1))
    total = tree.total
    buf.update_priorities(np.array([0, 1]), np.array([100.0, 100.0]))  # both overwritten since
    assert tree.total == total
    with pytest.raises(SpecError, match=r"indices: expected ids in \[0, 6\)"):
        buf.update_priorities(np.array([6]), np.array([1.0]))
    with pytest.raises(SpecError, match="priorities: expected values >= 0"):
        buf.update_priorities(np.array([5]), np.array([-1.0]))
    assert tree.total == total


def test_resume_gives_identical_samples_and_checkpoint_files(tmp_path) -> None:
    a = _per(6, 2, alpha=0.7, beta=0.5)
    rng = np.random.default_rng(0)
    for i in range(5):
        a.add(**_row(i, 2, done=i == 2))
    b0 = a.sample(4)
    a.update_priorities(b0.indices, rng.exponential(size=4))
    b = _per(6, 2, alpha=0.7, beta=0.5)
    b.load_state_dict(a.state_dict())
    save(a, tmp_path)
    c = load(tmp_path)
    assert isinstance(c._sampler, PrioritizedSampler) and c.config() == a.config()
    for step in range(5):
        outs = [x.sample(6) for x in (a, b, c)]
        for o in outs[1:]:
            np.testing.assert_array_equal(o.indices, outs[0].indices)
            np.testing.assert_array_equal(o.weights.numpy(), outs[0].weights.numpy())
            np.testing.assert_array_equal(o.next_obs.numpy(), outs[0].next_obs.numpy())
        pri = rng.exponential(size=6)
        for x in (a, b, c):
            x.update_priorities(outs[0].indices, pri)
            x.add(**_row(10 + step, 2))


def test_rejected_sampler_state_leaves_the_buffer_unchanged() -> None:
    a = _per()
    a.add(**_row(0, 2))
    sd = a.state_dict()
    sd["sampler"]["window"] = [0, 4]
    b = _per()
    b.add(**_row(5, 2))
    before = flat_state(b)
    with pytest.raises(CheckpointError, match="sampler.window"):
        b.load_state_dict(sd)
    assert flat_state(b) == before


def test_sampler_and_seed_arguments(tmp_path) -> None:
    with pytest.raises(ConfigError, match="seed: give the seed to the sampler"):
        ReplayBuffer(4, seed=0, sampler=PrioritizedSampler())
    with pytest.raises(ConfigError, match="sampler: expected"):
        ReplayBuffer(4, sampler="per")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="capacity: expected 4"):
        ReplayBuffer(8, sampler=PrioritizedSampler(4))  # 8 + 1 spare row = 9 slots
    per = PrioritizedSampler(alpha=0.6, seed=0)  # a refused buffer leaves its sampler unbound
    specs = [{"name": "obs", "shape": [2], "dtype": "float32"},
             {"name": "action", "shape": [], "dtype": "int64"}]  # fmt: skip
    with pytest.raises(SpecError, match="specs: expected 'obs'"):
        ReplayBuffer(8, specs=specs[:1], sampler=per)
    with pytest.raises(SpecError, match="frame-stack field"):
        ReplayBuffer(8, specs=specs, storage=StorageLayout.frames(), sampler=per)
    disk = StorageLayout.memmap(tmp_path)
    with pytest.raises(ConfigError, match="capacity: expected 4"):  # and no file is left
        ReplayBuffer(8, specs=specs, storage=disk, sampler=PrioritizedSampler(4))
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    assert per.capacity is None and ReplayBuffer(16, sampler=per)._sampler is per
    cfg = {"kind": "prioritized", "alpha": 0.5, "beta": {"start": 0.4, "end": 1.0, "steps": 10},
           "eps": 1e-6}  # fmt: skip
    buf = ReplayBuffer(4, seed=3, sampler=cfg)
    assert buf.config()["sampler"] == cfg and ReplayBuffer(**buf.config()).config() == buf.config()


def test_memmap_buffer_equals_memory_and_reopens_without_a_copy(tmp_path) -> None:
    d = tmp_path / "replay"
    disk = ReplayBuffer(6, num_envs=2, seed=0, storage=StorageLayout.memmap(d))
    mem = ReplayBuffer(6, num_envs=2, seed=0)
    for i in range(5):
        for buf in (disk, mem):
            buf.add(**_row(i, 2, done=i == 1))
    assert _state(disk) == _state(mem)
    disk.flush()
    back = ReplayBuffer.open(d)
    assert isinstance(back._storage.records, np.memmap)  # mapped, not copied
    assert _state(back) == _state(mem)
    for i in range(5, 9):  # continues exactly, wrapping around
        back.add(**_row(i, 2, done=i == 7))
        mem.add(**_row(i, 2, done=i == 7))
        np.testing.assert_array_equal(
            back.sample(5).next_obs.numpy(), mem.sample(5).next_obs.numpy()
        )
    with pytest.raises(ConfigError, match="flush: only a memory-mapped"):
        mem.flush()
    with pytest.raises(CheckpointError):
        ReplayBuffer.open(tmp_path / "nothing")


def test_memmap_keep_false_removes_its_files(tmp_path) -> None:
    """keep=False: the ring's files go with the buffer, and so does the state a flush wrote
    beside them (it was left behind, naming ring files that no longer existed), also for a
    buffer reopened from the folder."""
    d = tmp_path / "scratch"
    buf = ReplayBuffer(4, seed=0, storage={"kind": "memmap", "directory": str(d), "keep": False})
    buf.add(**_row(0, 1))
    assert list(d.glob("*.npy"))
    buf.flush()
    del buf
    gc.collect()
    assert list(d.iterdir()) == []
    buf = ReplayBuffer(4, seed=0, storage=StorageLayout.memmap(d, keep=False))
    buf.add(**_row(0, 1))
    buf.flush()
    back = ReplayBuffer.open(d)
    buf._storage._finalizer.detach()  # (as if `buf` lived in a process that ended)
    del buf
    gc.collect()
    assert len(list(d.iterdir())) == 3
    del back
    gc.collect()
    assert list(d.iterdir()) == []


def test_open_refuses_a_ring_written_after_its_last_flush(tmp_path) -> None:
    """One add after a flush of a full ring rewrites its oldest row's observation (the spare
    row rotates); a process that ended then left files the flushed state does not describe,
    and open() served the oldest transition with a newer observation. Now open() refuses such
    a folder until a flush, and accepts it after one (also after a load_state_dict)."""
    d = tmp_path / "ring"
    buf = ReplayBuffer(4, seed=0, storage=StorageLayout.memmap(d))
    for i in range(6):
        buf.add(**_row(i, 1))
    buf.flush()
    ReplayBuffer.open(d)  # clean: opens
    buf.add(**_row(6, 1))
    buf._storage.flush()  # the pages reach the files (the OS does that sooner or later)
    with pytest.raises(CheckpointError, match="written after the last flush"):
        ReplayBuffer.open(d)
    buf.flush()
    back = ReplayBuffer.open(d)
    assert _state(back) == _state(buf)
    back.load_state_dict(buf.state_dict())  # (new ring files)
    with pytest.raises(CheckpointError, match="written after the last flush"):
        ReplayBuffer.open(d)
    back.flush()
    assert _state(ReplayBuffer.open(d)) == _state(buf)


def test_an_add_that_cannot_mark_the_folder_changes_nothing(tmp_path) -> None:
    """The first add after a flush marks the folder first; when that fails (the folder was
    removed) the add is a ConfigError naming it and nothing is written."""
    import shutil

    d = tmp_path / "ring"
    buf = ReplayBuffer(4, seed=0, storage=StorageLayout.memmap(d))
    buf.add(**_row(0, 1))
    buf.flush()
    shutil.rmtree(d)  # (the mapped pages stay readable)
    before = _state(buf)
    with pytest.raises(ConfigError, match="directory: cannot write .*replay_unflushed"):
        buf.add(**_row(1, 1))
    assert _state(buf) == before


@pytest.mark.parametrize("per", [False, True])
def test_a_load_whose_files_cannot_be_made_changes_nothing(tmp_path, per: bool) -> None:
    """Loading a state into a memory-mapped buffer writes new ring files; in a folder that
    already holds other ``.npy`` files that is refused, and the refusal used to come after the
    sampler had taken the new state (its RNG and priorities): not all or nothing."""
    src = _per() if per else ReplayBuffer(6, num_envs=2, seed=0)
    for i in range(4):
        src.add(**_row(i, 2))
    src.sample(2)
    np.save(tmp_path / "other.npy", np.zeros(3))
    sampler = PrioritizedSampler(seed=5) if per else None
    buf = ReplayBuffer(6, num_envs=2, storage=StorageLayout.memmap(tmp_path), sampler=sampler,
                       seed=None if per else 5)  # fmt: skip
    before = _state(buf)
    with pytest.raises(ConfigError, match="directory: expected a folder without"):
        buf.load_state_dict(src.state_dict())
    assert _state(buf) == before


def test_a_sampler_built_for_the_buffers_capacity_gets_an_error_that_says_what_to_do() -> None:
    """The buffer binds its sampler to capacity_per_env + 1 rows (the spare row of the pending
    next_obs): a PrioritizedSampler(1000) for a 1000-transition buffer used to fail with
    "expected 1000 like the sampler was built for, got 1001" and no hint."""
    with pytest.raises(ConfigError, match=r"^sampler: .*got 1001; .*without a capacity"):
        ReplayBuffer(1000, sampler=PrioritizedSampler(1000))
    buf = ReplayBuffer(1000, sampler=PrioritizedSampler(alpha=0.6))  # unbound: the buffer binds
    assert buf.config()["sampler"]["kind"] == "prioritized"


def test_priorities_and_ids_as_tensors_lists_or_empty() -> None:
    """What a training loop passes: TD errors that still require grad (or bfloat16), ids as a
    tensor, an empty batch as ``[]``. numpy's ``asarray`` raised RuntimeError / TypeError on
    the first two (and on any CUDA tensor) and read ``[]`` as float64; all are now taken
    through the one tensor conversion, while malformed ids are still refused."""
    import torch

    from rlstore import NStepReplay, SequenceReplay

    buf = _per(8, 2, alpha=1.0, beta=1.0)
    for i in range(4):
        buf.add(**_row(i, 2), hidden=np.zeros((2, 1), F))
    b = buf.sample(4)
    td = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True) * 2  # part of a graph
    buf.update_priorities(torch.as_tensor(b.indices), td.abs())
    leaves = buf._sampler.tree.leaves  # (alpha 1: p + eps; a repeated id keeps its last p)
    last = dict(zip(b.indices.tolist(), td.detach().tolist(), strict=True))
    assert [leaves[i] for i in last] == pytest.approx([p + 1e-6 for p in last.values()])
    buf.update_priorities(b.indices, torch.ones(4, dtype=torch.bfloat16))
    assert leaves[b.indices].tolist() == pytest.approx([1.0 + 1e-6] * 4, rel=1e-12)
    before = _state(buf)
    buf.update_priorities([], [])  # an empty batch changes nothing
    assert buf.gather([])["obs"].shape == (0, 2)
    assert NStepReplay(buf, 2, 0.9).batch([]).reward.shape == (0,)
    seq = SequenceReplay(buf, 2, alpha=0.9)
    seq.sample(1)
    seq.update_priorities([], np.zeros((0, 2)))
    seq.update_priorities(torch.tensor([0]), torch.ones(1, 2, requires_grad=True))
    for bad in ([0.0], [[0]], torch.tensor([True])):
        with pytest.raises(SpecError, match="indices: expected a 1-D integer array"):
            buf.update_priorities(bad, [1.0])
        with pytest.raises(SpecError, match="indices: expected a 1-D integer array"):
            buf.gather(bad)
    assert _state(buf) == before


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_cuda_batches_feed_update_priorities() -> None:
    """``NStepBatch.indices`` are tensors on the buffer's device: on a CUDA buffer they (and
    CUDA TD errors) go straight back into ``update_priorities``."""
    import torch

    from rlstore import NStepReplay

    buf = ReplayBuffer(8, sampler=PrioritizedSampler(seed=0), device="cuda")
    for i in range(4):
        buf.add(np.full(2, i, F), 0, 1.0, np.full(2, i + 1, F), False, False)
    nb = NStepReplay(buf, 2, 0.9).sample(3)
    assert nb.indices.device.type == "cuda"
    buf.update_priorities(nb.indices, nb.reward.abs() + torch.ones(3, device="cuda"))
