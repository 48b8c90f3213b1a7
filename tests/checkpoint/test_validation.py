"""Every loaded ReplayBuffer state is checked whole before the buffer changes: states with
valid checksums but inconsistent content (they loaded before, and ``sample`` then failed or
returned wrong successors) raise a CheckpointError naming the entry, and leave the buffer as
it was."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _checkpoint_helpers import replay_buffer, simple_buffer, state_equal, velora_buffer

from rlstore import checkpoint
from rlstore.buffers.replay import ReplayBuffer
from rlstore.errors import CheckpointError


def _set(path: str, value: Any) -> Any:
    def edit(sd: dict) -> None:
        *parents, leaf = path.split(".")
        node = sd
        for p in parents:
            node = node[p]
        node[leaf] = value(node[leaf]) if callable(value) else value

    return edit


def _bool_byte(sd: dict) -> None:
    arr = sd["storage"]["arrays"]["terminated"]
    arr.view(np.uint8)[0, 0] = 2


def _nan_obs(sd: dict) -> None:
    sd["storage"]["arrays"]["obs"][0, 0, 0] = np.nan


def _drop_side_entry(sd: dict) -> None:
    side = sd["side"]
    side["keys"], side["arrays"]["obs"] = side["keys"][:-1], side["arrays"]["obs"][:-1]


def _done_disc(sd: dict) -> None:
    done_key = sd["side"]["keys"][-1:]
    sd["disc"]["keys"] = done_key.copy()
    sd["disc"]["arrays"]["obs"] = sd["side"]["arrays"]["obs"][-1:].copy()


_CASES = {
    "unsorted side keys": (_set("side.keys", lambda k: k[::-1].copy()), "side.keys: expected"),
    "repeated side keys": (_set("side.keys", lambda k: np.full_like(k, k[-1])), "side.keys"),
    "future side key": (_set("side.keys", lambda k: k + 1000), "side.keys: expected strictly"),
    "negative side key": (_set("side.keys", lambda k: k - 1000), "side.keys: expected strictly"),
    "missing side entry": (_drop_side_entry, "side.keys: expected the live done"),
    "done disc entry": (_done_disc, "disc.keys: expected transitions that did not end"),
    "side keys as float": (_set("side.keys", lambda k: k.astype(float)), "side.keys: expected"),
    "huge side capacity": (_set("side.capacity", 1 << 40), "side.capacity: expected"),
    "rows_written 0": (_set("storage.rows_written", 0), "storage: expected size == min"),
    "size off by one": (_set("storage.size", lambda s: s - 1), "storage: expected size == min"),
    "cursor off": (_set("storage.cursor", lambda c: (c + 1) % 7), "storage: expected size"),
    "negative cursor": (_set("storage.cursor", -1), "storage.cursor: expected an int in"),
    "huge rows_written": (_set("storage.rows_written", 1 << 70), "rows_written: expected"),
    "bool counter": (_set("storage.size", True), "storage.size: expected an int"),
    "float counter": (_set("storage.cursor", 1.0), "storage.cursor: expected an int"),
    "huge capacity": (_set("storage.capacity_per_env", 1 << 40), "storage.arrays.obs: expected"),
    "wrong shape": (_set("storage.arrays.obs", lambda a: a[:, :, :2].copy()), "arrays.obs"),
    "wrong dtype": (_set("storage.arrays.reward", lambda a: a.astype(np.float64)), "reward"),
    "side dtype": (_set("side.arrays.obs", lambda a: a.astype(np.float64)), "side.arrays.obs"),
    "side shape": (_set("side.arrays.obs", lambda a: a[:, :2].copy()), "side.arrays.obs"),
    "list instead of array": (_set("storage.arrays.reward", lambda a: a.tolist()), "reward"),
    "bool byte 2": (_bool_byte, "terminated: bool array holds bytes"),
    "nan with allow_nonfinite False": (_nan_obs, "arrays.obs: expected finite"),
    "spec without name": (
        _set("storage.specs", lambda s: [{"shape": [3], "dtype": "<f4"}] + s[1:]),
        "storage.specs\\[0\\]",
    ),  # fmt: skip
    "storage not a dict": (
        _set("storage", [1, 2]),
        r"storage: expected keys .* in a dict, got list",
    ),
    "extra key": (_set("storage.extra", 1), "storage: expected keys"),
    "prev_open flipped": (_set("prev_open", lambda p: ~p), "prev_open: expected the newest"),
    "prev_open shape": (_set("prev_open", np.zeros(3, bool)), "prev_open: expected shape"),
    "config allow_nonfinite": (_set("config.allow_nonfinite", True), "allow_nonfinite"),
    "config capacity bool": (_set("config.capacity", True), "config.capacity"),
    "config seed": (_set("config.seed", "7"), "config.seed"),
    "config specs": (_set("config.specs", [{"shape": [3]}]), "config.specs"),
    "config not a dict": (_set("config", 3), "config: expected a dict"),
    "sampler bit generator": (_set("sampler.rng.bit_generator", "seed"), "sampler.rng"),
    "sampler overflow": (_set("sampler.rng.state.state", -5), "sampler.rng.state.state"),
    "sampler not a dict": (_set("sampler", None), "sampler: expected the key 'rng'"),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_inconsistent_states_are_refused_and_change_nothing(case: str) -> None:
    edit, match = _CASES[case]
    src = replay_buffer()
    sd = src.state_dict()
    edit(sd)
    target = replay_buffer(seed=3)
    before = target.state_dict()
    with pytest.raises(CheckpointError, match=match):
        target.load_state_dict(sd)
    assert state_equal(target.state_dict(), before)
    target.sample(4)  # still usable


@pytest.mark.parametrize("case", ["unsorted side keys", "rows_written 0", "missing side entry"])
def test_checksummed_files_with_inconsistent_content(tmp_path: Path, case: str) -> None:
    """Saved with valid checksums through save_state: load refuses them (they loaded before,
    and sampling failed inside compiled code or returned the wrong next_obs)."""
    edit, match = _CASES[case]
    buf = replay_buffer()
    sd = buf.state_dict()
    edit(sd)
    checkpoint.save_state(tmp_path, sd, class_name="ReplayBuffer", config=buf.config())
    with pytest.raises(CheckpointError, match=match):
        checkpoint.load(tmp_path)


def test_facades_go_through_the_same_checks(tmp_path: Path) -> None:
    for make, name in (
        (velora_buffer, "velora.ReplayBuffer"),
        (simple_buffer, "SimpleReplayBuffer"),
    ):
        buf = make()
        core = buf._core.state_dict()
        _set("storage.rows_written", 0)(core)
        config = dict(buf.config())
        checkpoint.save_state(tmp_path, {"core": core}, class_name=name, config=config)
        with pytest.raises(CheckpointError, match="storage: expected size == min"):
            checkpoint.load(tmp_path)


def test_valid_states_still_load_exactly() -> None:
    """Round trips across layouts: one env, several envs, next_obs stored per row, empty."""
    for buf in (replay_buffer(1), replay_buffer(3), ReplayBuffer(5, seed=1)):
        twin = ReplayBuffer(buf.capacity, num_envs=buf.num_envs, seed=0)
        twin.load_state_dict(buf.state_dict())
        assert state_equal(twin.state_dict(), buf.state_dict())
    plain = ReplayBuffer(6, num_envs=2, seed=0, store_next_obs_once=False)
    plain.extend(*(np.ones((9, 2, 3), np.float32), np.zeros((9, 2), np.int64)),
                 np.ones((9, 2), np.float32), np.ones((9, 2, 3), np.float32),
                 np.eye(9, 2, dtype=bool), np.zeros((9, 2), bool))  # fmt: skip
    twin = ReplayBuffer(6, num_envs=2, seed=1, store_next_obs_once=False)
    twin.load_state_dict(plain.state_dict())
    assert state_equal(twin.state_dict(), plain.state_dict())


def _leaf_paths(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict) and node:
        return [p for k, v in node.items() for p in _leaf_paths(v, (*path, k))]
    return [path]


def _mutated(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, np.ndarray) and value.size:
        out = value.copy()
        flat = out.reshape(-1)
        j = rnd.randrange(flat.size)
        if out.dtype == bool:
            flat[j] = not flat[j]
        elif out.dtype.kind == "f":
            flat[j] = rnd.choice([np.nan, 1e30, -1.0, 0.0])
        else:
            flat[j] += rnd.choice([-1, 1, 2, -100, 100])
        return out
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rnd.choice([-1, 1, 3, -5, 1 << 40])
    return rnd.choice([None, 1, "x", [1], {}])


@pytest.mark.parametrize("num_envs", [1, 2])
def test_every_accepted_state_is_usable(num_envs: int) -> None:
    """Random single-value edits of a state dict: each is refused with CheckpointError, or
    loads into a buffer that samples and takes adds (no failure inside compiled code)."""
    rnd = random.Random(num_envs)
    src = replay_buffer(num_envs)
    paths = _leaf_paths(src.state_dict())
    loaded = 0
    for _ in range(300):
        sd = src.state_dict()
        path = rnd.choice(paths)
        node = sd
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = _mutated(node[path[-1]], rnd)
        buf = ReplayBuffer(src.capacity, num_envs=num_envs, seed=1)
        try:
            buf.load_state_dict(sd)
        except CheckpointError:
            continue
        loaded += 1
        buf.sample(8)
        row = np.zeros((num_envs, 3), np.float32)
        flags = np.zeros(num_envs, bool)
        buf.add(row, np.zeros(num_envs, np.int64), np.zeros(num_envs, np.float32), row,
                ~flags, flags)  # fmt: skip
        buf.sample(8)
    assert 0 < loaded < 300
