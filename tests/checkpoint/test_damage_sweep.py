"""Damaged-checkpoint sweep: random single-bit flips, truncations and JSON value edits of both
files of four kinds of buffer checkpoints. Every load either raises CheckpointError or gives
an object whose state equals the original exactly; damage to a checksummed region (any byte
of the state file; any value of the sidecar) always raises. No other exception type."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from _checkpoint_helpers import (
    replay_buffer,
    rollout_buffer,
    simple_buffer,
    state_equal,
    velora_buffer,
)

from rlstore import checkpoint
from rlstore.checkpoint import metadata_file_path, state_file_path
from rlstore.checkpoint._tree import _canonical, _sidecar_digest
from rlstore.compat import velora
from rlstore.errors import CheckpointError

_KINDS = {
    "ReplayBuffer": replay_buffer,
    "RolloutBuffer": rollout_buffer,
    "velora.ReplayBuffer": velora_buffer,
    "SimpleReplayBuffer": simple_buffer,
}
_ROUNDS = 100  # per damage kind and buffer kind: 4 x 4 x 100 damaged checkpoints


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict) and node:
        return [leaf for k, v in node.items() for leaf in _leaves(v, (*path, k))]
    if isinstance(node, list) and node:
        return [leaf for i, v in enumerate(node) for leaf in _leaves(v, (*path, i))]
    return [path]


def _mutations(value: Any) -> list[Any]:
    out: list[Any] = [None, True, "x", [1], {"a": 1}, -1, 1 << 70, 0.5, float("nan")]
    if isinstance(value, bool):
        out.append(not value)
    elif isinstance(value, int):
        out += [value + 1, value - 1, -value, value * 1000]
    elif isinstance(value, str):
        out += [value + "0", value[:-1], value.upper(), ""]
    return out


def _loads(folder: Path, kind: str) -> list[Any]:
    """Every loader of this kind on ``folder``: objects, or the exception each raised."""
    results: list[Any] = []
    try:
        results.append(checkpoint.load(folder))
    except Exception as exc:  # noqa: BLE001 - classified by the caller
        results.append(exc)
    if kind == "velora.ReplayBuffer":
        try:
            meta = json.loads(metadata_file_path(folder).read_bytes())
        except ValueError:
            return results  # velora.load takes a parsed dict: nothing to pass it
        if isinstance(meta, dict):
            # without a save_id, velora's load reads the state file alone (documented: no
            # checksum then), so it may load the undamaged state file exactly
            exact_ok = "save_id" not in meta
            try:
                results.append((velora.ReplayBuffer.load(state_file_path(folder), meta), exact_ok))
            except Exception as exc:  # noqa: BLE001
                results.append(exc)
    return results


@pytest.mark.parametrize("kind", list(_KINDS))
def test_damaged_checkpoints_load_exactly_or_raise_checkpoint_error(
    tmp_path: Path, kind: str
) -> None:
    rnd = random.Random(f"sweep-{kind}")
    original = _KINDS[kind]()
    want = original.state_dict()
    checkpoint.save(original, tmp_path)
    meta_path, state_path = metadata_file_path(tmp_path), state_file_path(tmp_path)
    meta0, state0 = meta_path.read_bytes(), state_path.read_bytes()
    sidecar0 = json.loads(meta0)
    outcomes = {"refused": 0, "identical": 0}
    others: list[str] = []
    for damage in ("flip_sidecar", "flip_state", "truncate", "edit_json"):
        for _ in range(_ROUNDS):
            meta, state = bytearray(meta0), bytearray(state0)
            must_refuse = True
            if damage == "flip_sidecar":
                meta[rnd.randrange(len(meta))] ^= 1 << rnd.randrange(8)
                try:  # a flip that leaves every value as it was ("e" -> "E" in 1e-05) may load
                    must_refuse = _canonical(json.loads(meta)) != _canonical(sidecar0)
                except ValueError:
                    pass
            elif damage == "flip_state":
                state[rnd.randrange(len(state))] ^= 1 << rnd.randrange(8)
            elif damage == "truncate":
                target = meta if rnd.random() < 0.5 else state
                del target[rnd.randrange(len(target)) :]
            else:
                sidecar = json.loads(meta0)
                path = rnd.choice(_leaves(sidecar))
                node = sidecar
                for p in path[:-1]:
                    node = node[p]
                node[path[-1]] = rnd.choice(_mutations(node[path[-1]]))
                resigned = rnd.random() < 0.5
                if resigned:  # also recompute the sidecar's own checksum
                    sidecar["sidecar_sha256"] = _sidecar_digest(sidecar)
                # with a valid checksum, the loader refuses any edit but one of "state_file"
                # (informational: the state file is found from the folder and prefix)
                must_refuse = _canonical(sidecar) != _canonical(sidecar0) and not (
                    resigned and path == ("state_file",)
                )
                meta = bytearray(json.dumps(sidecar, indent=2).encode())
            meta_path.write_bytes(bytes(meta))
            state_path.write_bytes(bytes(state))
            for result in _loads(tmp_path, kind):
                refuse = must_refuse
                if isinstance(result, tuple):
                    result, exact_ok = result
                    refuse = must_refuse and not exact_ok
                if isinstance(result, CheckpointError):
                    outcomes["refused"] += 1
                elif isinstance(result, Exception):
                    others.append(f"{damage}: {type(result).__name__}: {result}")
                elif refuse:
                    others.append(f"{damage}: loaded although damaged")
                elif state_equal(result.state_dict(), want):
                    outcomes["identical"] += 1
                else:
                    others.append(f"{damage}: loaded a different state")
    assert others == [], others[:5]
    assert outcomes["refused"] >= 4 * _ROUNDS - 10
