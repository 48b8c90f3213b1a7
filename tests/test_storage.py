"""Tests for rlstore.storage: the ring of per-field arrays and the keyed side store."""

from __future__ import annotations

import numpy as np
import pytest

from rlstore.errors import CapacityError, CheckpointError, ConfigError
from rlstore.specs import FieldSpec
from rlstore.storage import MemmapStorage, RingStorage, SideStore, StorageLayout

SPECS = {"x": FieldSpec("x", (2,), np.float32), "f": FieldSpec("f", (), np.bool_)}


@pytest.mark.parametrize(("cap", "n"), [(1, 1), (3, 2), (5, 3)])
def test_ring_writes_match_a_list_model(cap: int, n: int) -> None:
    rng = np.random.default_rng(cap * 10 + n)
    st = RingStorage(cap, n, SPECS)
    rows: list[np.ndarray] = []  # model: every row ever written, (n, 2)
    for step in range(12):
        t = int(rng.integers(1, cap + 1))
        block = rng.standard_normal((t, n, 2)).astype(np.float32)
        if step % 2:
            st.write_block({"x": block, "f": block[..., 0] > 0})
        else:
            for r in block:
                st.write_block({"x": r[None], "f": r[None, :, 0] > 0})
        rows.extend(block)
        assert st.rows_written == len(rows)
        assert st.size == min(len(rows), cap)
        assert st.cursor == len(rows) % cap
        # logical row l (0 = oldest kept) is model row len(rows) - size + l
        phys = (st.cursor - st.size + np.arange(st.size)) % cap
        want = np.stack(rows[len(rows) - st.size :])
        np.testing.assert_array_equal(st.arrays["x"][phys], want)
        np.testing.assert_array_equal(st.arrays["f"][phys], want[..., 0] > 0)
        np.testing.assert_array_equal(
            st.flat["x"].reshape(cap, n, 2), st.arrays["x"]
        )  # flat views alias the arrays
    assert st.nbytes == cap * n * (2 * 4 + 1)  # x: 2 float32, f: 1 bool per item


def test_ring_rejects_bad_sizes() -> None:
    with pytest.raises(CapacityError, match="rows: expected > 0, got 0"):
        RingStorage(0, 1, SPECS)
    with pytest.raises(CapacityError, match="num_envs"):
        RingStorage(2, 0, SPECS)
    st = RingStorage(2, 1, SPECS)
    with pytest.raises(CapacityError, match="at most rows=2 rows, got 3"):
        st.write_block({"x": np.zeros((3, 1, 2), np.float32), "f": np.zeros((3, 1), bool)})


def test_ring_state_round_trip_and_bad_state() -> None:
    st = RingStorage(3, 2, SPECS)
    st.write_block(
        {"x": np.arange(12, dtype=np.float32).reshape(3, 2, 2), "f": np.ones((3, 2), bool)}
    )
    st.write_block({"x": np.full((1, 2, 2), 7, np.float32), "f": np.zeros((1, 2), bool)})
    back = RingStorage.from_state_dict(st.state_dict())
    assert (back.cursor, back.size, back.rows_written) == (1, 3, 4)
    for k in SPECS:
        np.testing.assert_array_equal(back.arrays[k], st.arrays[k])
    sd = st.state_dict()
    sd["arrays"]["x"] = np.zeros((3, 2, 3), np.float32)
    with pytest.raises(CheckpointError, match=r"storage.arrays.x: expected shape \(3, 2, 2\)"):
        RingStorage.from_state_dict(sd)
    sd = st.state_dict()
    del sd["cursor"]
    with pytest.raises(
        CheckpointError, match=r"expected keys .*; missing \['cursor'\], unknown \[\]"
    ):
        RingStorage.from_state_dict(sd)
    sd = st.state_dict()
    sd["cursor"] = 3
    with pytest.raises(CheckpointError, match="cursor == rows_written % capacity_per_env"):
        RingStorage.from_state_dict(sd)


def test_side_store_matches_a_dict_model_through_compaction_and_growth() -> None:
    rng = np.random.default_rng(0)
    spec = {"o": FieldSpec("o", (3,), np.float32)}
    side = SideStore(spec, capacity=2)
    model: dict[int, np.ndarray] = {}
    next_key, min_live = 0, 0
    for _ in range(200):
        k = int(rng.integers(1, 5))
        keys = next_key + rng.choice(8, size=k, replace=False)  # unsorted, with gaps
        next_key += 8
        vals = rng.standard_normal((k, 3)).astype(np.float32)
        min_live = max(min_live, next_key - 60)  # entries older than 60 keys are dead
        side.append(keys, {"o": vals}, min_live)
        model.update(zip(keys.tolist(), vals, strict=True))
        live = [key for key in model if key >= min_live]
        hit, pos = side.lookup(np.array(live, dtype=np.int64))
        assert hit.all()
        np.testing.assert_array_equal(side.arrays["o"][pos], np.stack([model[q] for q in live]))
        absent = np.array([next_key + 1, keys.max() + 100], dtype=np.int64)
        assert not side.lookup(absent)[0].any()
        assert np.all(np.diff(side.keys[: side.n]) > 0)  # kept sorted
    assert side.capacity < 200  # compaction kept it bounded (live entries <= ~40)
    back = SideStore(spec)
    back.load_state_dict(side.state_dict(), max_key=next_key, max_capacity=side.capacity)
    assert back.n == side.n and back.capacity == side.capacity
    np.testing.assert_array_equal(back.keys[: back.n], side.keys[: side.n])
    saved = side.state_dict()["arrays"]["o"]  # in key order
    np.testing.assert_array_equal(back.state_dict()["arrays"]["o"], saved)
    np.testing.assert_array_equal(back.arrays["o"][back.lookup(back.keys[: back.n])[1]], saved)


@pytest.mark.parametrize("window", [1, 7, 40])
@pytest.mark.parametrize("hold_view", [False, True])
def test_side_store_fifo_never_moves_a_stored_item(window: int, hold_view: bool) -> None:
    """A FIFO of ``window`` live entries (one append per step, the oldest dying): every item
    keeps its slot from its append until it dies (items are written once, never moved by a
    compaction), the capacity stops growing, and lookups match a dict model through growth
    with wrapped items (in place, or by copy while a view of the arrays is held)."""
    rng = np.random.default_rng(window)
    side = SideStore({"o": FieldSpec("o", (2,), np.float32)}, capacity=1)
    model: dict[int, np.ndarray] = {}
    slot_of: dict[int, int] = {}
    held = []
    for key in range(12 * window + 30):
        vals = rng.standard_normal((1, 2)).astype(np.float32)
        if hold_view:
            held = [side.arrays["o"][:1]]  # growth must not move memory under it
        side.append([key], {"o": vals}, key - window + 1)
        model[key] = vals[0]
        live = np.arange(max(key - window + 1, 0), key + 1, dtype=np.int64)
        hit, pos = side.lookup(live)
        assert hit.all()
        np.testing.assert_array_equal(side.arrays["o"][pos], np.stack([model[q] for q in live]))
        slot_of.setdefault(key, int(pos[-1]))
        if not hold_view:  # (a copy on growth may move items)
            assert [slot_of[q] for q in live.tolist()] == pos.tolist()
        if key == 6 * window + 15:
            cap = side.capacity
    assert side.capacity == cap <= 4 * window // 3 + 8  # no growth in the steady state
    del held


@pytest.mark.parametrize("seed", range(4))
def test_side_store_grows_with_items_wrapped_around_the_end(seed: int) -> None:
    """Live windows that widen and shrink at random make the store grow while its items wrap
    around the end of the arrays; lookups and the saved state still match a dict model."""
    rng = np.random.default_rng(seed)
    side = SideStore({"o": FieldSpec("o", (), np.int64)}, capacity=1)
    key, lo = 0, 0
    for _ in range(300):
        k = int(rng.integers(1, 4))
        keys = np.arange(key, key + k)
        key += k
        lo = max(lo, key - int(rng.integers(1, 60)))  # entries below lo are dead
        side.append(keys, {"o": keys * 10}, lo)  # the item is its key * 10
        live = np.arange(lo, key)
        hit, pos = side.lookup(live)
        assert hit.all()
        np.testing.assert_array_equal(side.arrays["o"][pos], live * 10)
        sd = side.state_dict()
        np.testing.assert_array_equal(sd["arrays"]["o"], sd["keys"] * 10)


def test_side_store_empty_lookup_and_bad_state() -> None:
    side = SideStore({"o": FieldSpec("o", (), np.float32)})
    hit, _ = side.lookup(np.array([0, 5]))
    assert not hit.any()
    with pytest.raises(CheckpointError, match="side.arrays.o: expected shape"):
        side.load_state_dict(
            {"keys": np.arange(2), "arrays": {"o": np.zeros(3, np.float32)}, "capacity": 4},
            max_key=10,
            max_capacity=4,
        )


@pytest.mark.parametrize("packed", [True, False])
def test_ring_pickle_keeps_field_arrays_as_views_of_the_records(packed: bool) -> None:
    import pickle

    specs = {"x": FieldSpec("x", (2,), np.float32), "f": FieldSpec("f", (), np.bool_)}
    st = RingStorage(3, 2, specs, packed=packed)
    st.write_block({"x": np.ones((1, 2, 2), np.float32), "f": np.array([[True, False]])})
    back = pickle.loads(pickle.dumps(st))
    assert (back.cursor, back.size, back.rows_written) == (1, 1, 1)
    back.write_block({"x": np.full((1, 2, 2), 7, np.float32), "f": np.array([[False, True]])})
    # a write through the field arrays must be what gather (records / flat views) reads
    got = back.gather(np.array([0, 1, 2, 3]))
    np.testing.assert_array_equal(got["x"][:, 0], [1, 1, 7, 7])
    np.testing.assert_array_equal(got["f"], [True, False, False, True])
    np.testing.assert_array_equal(back.arrays["x"], back.flat["x"].reshape(3, 2, 2))


@pytest.mark.parametrize("obs_shape", [(17,), (24, 24, 4)])  # 98-byte and 2.3-kB records
def test_gather_strategies_agree_with_the_unpacked_layout(obs_shape: tuple[int, ...]) -> None:
    """Whole-record gathers (small records) and per-field gathers (large records) must both
    return exactly what the plain one-array-per-field layout returns, as contiguous arrays."""
    specs = {
        "obs": FieldSpec("obs", obs_shape, np.uint8),
        "action": FieldSpec("action", (6,), np.float32),
        "terminated": FieldSpec("terminated", (), np.bool_),
    }
    rng = np.random.default_rng(0)
    packed, plain = RingStorage(16, 2, specs), RingStorage(16, 2, specs, packed=False)
    for _ in range(20):  # wraps around
        row = {
            "obs": rng.integers(0, 255, (2, *obs_shape), dtype=np.uint8),
            "action": rng.standard_normal((2, 6)).astype(np.float32),
            "terminated": rng.random(2) < 0.5,
        }
        packed.write_block({k: v[None] for k, v in row.items()})
        plain.write_block({k: v[None] for k, v in row.items()})
    idx = rng.integers(0, 32, 64)
    got, want = packed.gather(idx), plain.gather(idx)
    for name in ("obs", "action", "terminated"):
        np.testing.assert_array_equal(got[name], want[name])
        assert got[name].flags.c_contiguous
    np.testing.assert_array_equal(packed.gather(idx, ["obs"])["obs"], want["obs"])


def test_put_row_overwrites_one_row_and_keeps_the_cursor() -> None:
    st = RingStorage(3, 2, SPECS)
    st.write_block({"x": np.ones((1, 2, 2), np.float32), "f": np.ones((1, 2), bool)})
    st.put_row(1, {"x": np.full((2, 2), 5, np.float32)})
    assert (st.cursor, st.size, st.rows_written) == (1, 1, 1)
    got = st.gather(np.array([0, 2, 3]))
    np.testing.assert_array_equal(got["x"][:, 0], [1, 5, 5])
    np.testing.assert_array_equal(got["f"], [True, False, False])


@pytest.mark.parametrize("packed", [True, False])
def test_memmap_ring_equals_the_memory_ring_and_reopens_without_a_copy(tmp_path, packed) -> None:
    rng = np.random.default_rng(0)
    mem = RingStorage(4, 2, SPECS, packed=packed)
    disk = MemmapStorage(4, 2, SPECS, directory=tmp_path / "ring", packed=packed)
    for _ in range(5):  # wraps around
        t = int(rng.integers(1, 4))
        block = {"x": rng.standard_normal((t, 2, 2)).astype(np.float32),
                 "f": rng.random((t, 2)) < 0.5}  # fmt: skip
        mem.write_block(block)
        disk.write_block(block)
    disk.put_row(disk.cursor, {"x": np.full((2, 2), 9, np.float32)})
    mem.put_row(mem.cursor, {"x": np.full((2, 2), 9, np.float32)})
    idx = np.arange(8)
    for k in SPECS:
        np.testing.assert_array_equal(disk.gather(idx)[k], mem.gather(idx)[k])
    disk.flush()
    back = MemmapStorage.open(tmp_path / "ring", disk.counters())
    arr = back.records if packed else back.arrays["x"]
    assert isinstance(arr, np.memmap)  # mapped, not read into memory
    assert (back.cursor, back.size, back.rows_written) == (
        disk.cursor,
        disk.size,
        disk.rows_written,
    )
    for k in SPECS:
        np.testing.assert_array_equal(back.gather(idx)[k], mem.gather(idx)[k])


def test_memmap_keep_false_removes_the_files_and_folders_are_not_clobbered(tmp_path) -> None:
    import gc

    d = tmp_path / "tmp_ring"
    st = MemmapStorage(2, 1, SPECS, directory=d, keep=False)
    assert list(d.glob("*.npy"))
    with pytest.raises(ConfigError, match="directory: expected a folder without"):
        MemmapStorage(2, 1, SPECS, directory=d)
    del st
    gc.collect()
    assert not list(d.glob("*.npy"))
    kept = MemmapStorage(2, 1, SPECS, directory=d, keep=True)
    del kept
    gc.collect()
    assert list(d.glob("*.npy"))  # keep=True: the files stay for open()


def test_memmap_folders_that_cannot_hold_a_ring_are_named_errors_leaving_nothing(
    tmp_path, monkeypatch
) -> None:
    """A path through a file, a ring too large for the file system, a folder refusing writes:
    an RLStoreError naming the argument (was a bare OSError), and no file of the failed ring
    is left behind (a later ring in that folder was refused as "holding .npy files")."""
    import errno

    from _helpers import flat_state

    from rlstore import ReplayBuffer

    blocker = tmp_path / "a file"
    blocker.write_text("x")
    for d in (blocker, blocker / "sub"):
        with pytest.raises(ConfigError, match="directory: expected a folder that can be created"):
            MemmapStorage(2, 1, SPECS, directory=d)
    big = {"x": FieldSpec("x", (1 << 17,), np.float64)}  # 2**60 bytes: more than any disk
    d = tmp_path / "dir with spaces ünï"
    with pytest.raises(CapacityError, match="capacity: cannot create the ring file"):
        MemmapStorage(1 << 40, 1, big, directory=d)
    assert list(d.iterdir()) == []
    buf = ReplayBuffer(1 << 46, storage=StorageLayout.memmap(d), seed=0)
    before = flat_state(buf)
    with pytest.raises(CapacityError, match="capacity: cannot create"):
        buf.add(np.zeros(1 << 12, np.float32), 0, 0.0, np.ones(1 << 12, np.float32), False, False)
    assert flat_state(buf) == before and list(d.iterdir()) == []

    def refuse(path, *args, **kwargs):  # what a read-only folder does for a user who is not root
        if str(path).endswith("b.npy"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    real = np.lib.format.open_memmap
    monkeypatch.setattr(np.lib.format, "open_memmap", refuse)
    two = {"a": FieldSpec("a", (), np.float32), "b": FieldSpec("b", (), np.float32)}
    with pytest.raises(ConfigError, match=r"directory: cannot create the ring file .*b\.npy"):
        MemmapStorage(2, 1, two, directory=d, packed=False)
    assert list(d.iterdir()) == []  # a.npy, made before, is removed too


def test_memmap_open_refuses_missing_or_mismatching_files(tmp_path) -> None:
    st = MemmapStorage(2, 1, SPECS, directory=tmp_path / "a")
    counters = st.counters()
    with pytest.raises(CheckpointError, match="cannot map"):
        MemmapStorage.open(tmp_path / "b", counters)
    with pytest.raises(CheckpointError, match="expected shape"):
        MemmapStorage.open(tmp_path / "a", {**counters, "capacity_per_env": 3})


def test_storage_layout_is_json_and_checked(tmp_path) -> None:
    lay = StorageLayout.memmap(tmp_path, keep=False)
    assert StorageLayout.parse(lay.to_json()) == lay and StorageLayout.parse(None).kind == "memory"
    bad_layouts = [({"kind": "disk"}, "storage.kind"), ({"kind": "memmap"}, "directory"),
                   ({"kind": "memory", "keep": 1}, "keep"), ([1], "storage: expected")]  # fmt: skip
    for bad, match in bad_layouts:
        with pytest.raises(ConfigError, match=match):
            StorageLayout.parse(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("kind", ["packed", "plain", "memmap", "frames"])
def test_write_row_equals_a_one_row_block(tmp_path, n: int, kind: str) -> None:
    """``write_row`` (values in spec order; with one env also item-shaped or scalar) stores what
    ``write_block`` of the same row stores, across wrap-around, on every storage."""
    from rlstore.storage import FrameStackStorage

    specs = {
        "obs": FieldSpec("obs", (4, 2, 2), np.uint8),
        "action": FieldSpec("action", (3,), np.float32),
        "terminated": FieldSpec("terminated", (), np.bool_),
        "step": FieldSpec("step", (), np.int64),  # (1,)-shaped ints broke the packed record
    }

    def make(sub: str):
        if kind == "memmap":
            return MemmapStorage(5, n, specs, directory=tmp_path / sub)
        if kind == "frames":
            return FrameStackStorage(5, n, specs)
        return RingStorage(5, n, specs, packed=kind == "packed")

    rng = np.random.default_rng(n)
    by_row, by_block = make("a"), make("b")
    for step in range(12):
        row = {
            "obs": rng.integers(0, 4, (n, 4, 2, 2), dtype=np.uint8),
            "action": rng.standard_normal((n, 3)).astype(np.float32),
            "terminated": rng.random(n) < 0.5,
            "step": rng.integers(0, 9, n),
        }
        values = [row[k] for k in specs]
        if n == 1 and step % 2:  # one env: items and scalars
            values = [
                row["obs"][0],
                row["action"][0],
                bool(row["terminated"][0]),
                int(row["step"][0]),
            ]
        by_row.write_row(tuple(values))
        by_block.write_block({k: v[None] for k, v in row.items()})
        assert (by_row.cursor, by_row.size, by_row.rows_written) == (
            by_block.cursor,
            by_block.size,
            by_block.rows_written,
        )
        idx = np.arange(5 * n)[: by_row.size * n]
        a, b = by_row.gather(idx), by_block.gather(idx)
        for k in specs:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{k} at step {step}")


def test_side_store_single_keys_in_any_order_stay_sorted() -> None:
    """One key per append, mostly rising (the cheap in-order case) with some arriving below
    the newest stored key (the sorting case): lookups match a dict model."""
    rng = np.random.default_rng(1)
    side = SideStore({"o": FieldSpec("o", (2,), np.int64)}, capacity=1)
    keys = np.arange(0, 400, 2)
    swap = 2 * rng.choice(len(keys) // 2, 40, replace=False)  # disjoint pairs
    keys[swap], keys[swap + 1] = keys[swap + 1], keys[swap]
    seen: list[int] = []
    for key in keys.tolist():
        side.append((key,), {"o": np.array([[key, -key]])}, 0)
        seen.append(key)
        assert np.all(np.diff(side.keys[: side.n]) > 0)
    hit, pos = side.lookup(np.array(sorted(seen)))
    assert hit.all()
    np.testing.assert_array_equal(side.arrays["o"][pos, 0], sorted(seen))


def test_a_ring_state_with_a_null_dtype_is_refused() -> None:
    """``np.dtype(None)`` is float64: a spec saved with ``"dtype": null`` loaded as float64."""
    st = RingStorage(2, 1, {"x": FieldSpec("x", (2,), np.float64)})
    sd = st.state_dict()
    sd["specs"] = [{**sd["specs"][0], "dtype": None}]
    with pytest.raises(CheckpointError, match=r"storage.specs\[0\]: malformed"):
        RingStorage.from_state_dict(sd)
