"""Hypothesis properties of ReplayBuffer against a naive list-of-transitions model.

The model keeps, per add, one row of ``num_envs`` transitions (plain Python tuples with the
true ``next_obs``); the buffer must hold exactly the last ``capacity_per_env`` rows. Streams
have random episode ends (terminated / truncated, with a reset observation that differs from
the final one), random discontinuities (the next obs differs from the previous next_obs
without a done flag), single adds, batched adds and ``extend`` blocks, across wrap-around.
"""

from __future__ import annotations

import json
import tempfile

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlstore.buffers.replay import ReplayBuffer
from rlstore.errors import SpecError
from rlstore.storage import StorageLayout

# one op = (kind, T, per (t, env) event codes): 0 continue, 1 terminated, 2 truncated, 3 jump,
# 4 a jump in the bytes only (next_obs [env, 0.0], the next obs [env, -0.0])
ops_strategy = st.lists(
    st.tuples(
        st.sampled_from(["add", "extend"]),
        st.integers(1, 7),
        st.lists(st.sampled_from([0, 0, 0, 1, 2, 3, 4]), min_size=7 * 3, max_size=7 * 3),
        st.booleans(),  # try a bad add before this op
    ),
    min_size=1,
    max_size=14,
)


class Stream:
    """Generates per-env observation streams; obs = [env, counter] (+ a uint8 image)."""

    def __init__(self, n: int, dict_obs: bool, hidden: bool = True):
        self.n, self.dict_obs, self.hidden, self.counter = n, dict_obs, hidden, 0
        self.cur = [self.fresh(i) for i in range(n)]

    def fresh(self, env: int) -> tuple[float, float]:
        self.counter += 1
        return (float(env), float(self.counter))

    def step(self, codes: list[int]) -> list[tuple]:
        """One row of transitions ``(obs, action, reward, next_obs, term, trunc, hidden)``."""
        row = []
        for i, code in enumerate(codes):
            if code == 3:  # discontinuity: the obs is not the previous next_obs
                self.cur[i] = self.fresh(i)
            obs, nxt = self.cur[i], (float(i), 0.0) if code == 4 else self.fresh(i)
            term, trunc = code == 1, code == 2
            row.append((obs, obs[1] * 2, obs[1] / 2, nxt, term, trunc, obs[1] + 0.25))
            # a reset obs after a done; -0.0 after 0.0 is a jump (the buffer compares bytes)
            self.cur[i] = self.fresh(i) if term or trunc else (float(i), -0.0) if code == 4 else nxt
        return row

    def arrays(self, rows: list[list[tuple]]) -> dict:
        """Stack rows into ``(T, N, ...)`` arguments of ``extend``."""

        def obs_of(col: int) -> object:
            vec = np.array([[r[i][col] for i in range(self.n)] for r in rows], np.float32)
            if not self.dict_obs:
                return vec
            img = (vec[..., 1:2, None] % 251).astype(np.uint8) * np.ones((1, 1, 2, 2), np.uint8)
            return {"vec": vec, "img": img}

        def col_of(col: int, dtype) -> np.ndarray:
            return np.array([[r[i][col] for i in range(self.n)] for r in rows], dtype)

        out = dict(
            obs=obs_of(0),
            action=col_of(1, np.int64),
            reward=col_of(2, np.float32),
            next_obs=obs_of(3),
            terminated=col_of(4, bool),
            truncated=col_of(5, bool),
            hidden=col_of(6, np.float32)[..., None],
        )
        if not self.hidden:  # no extras: batched adds of plain arrays pass without conversion
            del out["hidden"]
        return out


def snapshot(buf: ReplayBuffer) -> dict:
    out = {}

    def walk(p: str, x) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                walk(f"{p}/{k}", v)
        elif isinstance(x, np.ndarray):
            out[p] = (x.dtype.str, x.shape, x.tobytes())
        else:
            out[p] = json.dumps(x)

    walk("", buf.state_dict())
    return out


def same(got: np.ndarray, want: np.ndarray, name: str) -> None:
    """Equal dtype, shape and bytes (``assert_array_equal`` takes ``-0.0`` for ``0.0``)."""
    assert (got.dtype, got.shape) == (want.dtype, want.shape), name
    assert got.tobytes() == want.tobytes(), f"{name}: {got} != {want}"


def check_contents(buf: ReplayBuffer, model_rows: list[list[tuple]], stream: Stream) -> None:
    cpe = buf.capacity_per_env
    kept = model_rows[-cpe:]
    assert len(buf) == len(kept) * stream.n
    if not kept:
        return
    want = stream.arrays(kept)
    got = buf.gather(np.arange(len(buf)))
    n = stream.n
    for name in want:
        if name in ("obs", "next_obs"):
            continue
        same(got[name], want[name].reshape(len(kept) * n, *want[name].shape[2:]), name)
    for prefix in ("obs", "next_obs"):
        w = want[prefix]
        if stream.dict_obs:
            for k in ("vec", "img"):
                same(got[f"{prefix}.{k}"], w[k].reshape(len(kept) * n, *w[k].shape[2:]), k)
        else:
            same(got[prefix], w.reshape(len(kept) * n, 2), prefix)


@given(
    n=st.sampled_from([1, 2, 3]),
    capacity=st.integers(1, 12),
    dict_obs=st.booleans(),
    hidden=st.booleans(),
    ops=ops_strategy,
    memmap=st.booleans(),
)
def test_contents_match_model_after_any_adds(n, capacity, dict_obs, hidden, ops, memmap) -> None:
    with tempfile.TemporaryDirectory() as folder:  # the memory or the memory-mapped ring
        layout = StorageLayout.memmap(folder, keep=False) if memmap else None
        check_against_model(ReplayBuffer(capacity, num_envs=n, seed=0, storage=layout),
                            Stream(n, dict_obs, hidden), ops)  # fmt: skip


def check_against_model(buf: ReplayBuffer, stream: Stream, ops: list) -> None:
    capacity, n, dict_obs = buf.capacity, stream.n, stream.dict_obs
    twin = ReplayBuffer(capacity, num_envs=n, seed=0, store_next_obs_once=False)
    rows: list[list[tuple]] = []
    for kind, t, codes, bad_first in ops:
        if bad_first and rows:  # a rejected add must leave the buffer byte-for-byte unchanged
            before, saved = snapshot(buf), (list(stream.cur), stream.counter)
            bad = {
                k: (v[0] if not isinstance(v, dict) else {kk: vv[0] for kk, vv in v.items()})
                for k, v in stream.arrays([stream.step([0] * n)]).items()
            }
            stream.cur, stream.counter = saved
            bad["reward"] = np.full(n, np.nan, np.float32)
            with pytest.raises(SpecError, match="reward: expected finite"):
                buf.add(**bad)
            assert snapshot(buf) == before
        block = [
            stream.step(codes[j * n : (j + 1) * n]) for j in range(t if kind == "extend" else 1)
        ]
        arrays = stream.arrays(block)
        if kind == "extend":
            buf.extend(**arrays)
            twin.extend(**arrays)
        else:
            row = {
                k: (v[0] if not isinstance(v, dict) else {kk: vv[0] for kk, vv in v.items()})
                for k, v in arrays.items()
            }
            if n == 1 and not dict_obs:  # single add: leave the env axis out
                row = {k: v[0] for k, v in row.items()}
                row["reward"] = float(row["reward"])
                row["terminated"] = bool(row["terminated"])
                row["truncated"] = bool(row["truncated"])
            buf.add(**row)
            twin.add(**row)
        rows.extend(block)
        check_contents(buf, rows, stream)
    # the compact layout and the plain twin draw identical batches
    for x, y in zip(buf.sample(len(buf)), twin.sample(len(twin)), strict=True):
        if isinstance(x, dict):
            assert all(torch.equal(x[k], y[k]) for k in x)
        elif isinstance(x, torch.Tensor):
            assert torch.equal(x, y)
    # state_dict round trip: same contents and the same future draws
    back = ReplayBuffer(capacity, num_envs=n, seed=123)
    back.load_state_dict(buf.state_dict())
    check_contents(back, rows, stream)

    def kept(x: ReplayBuffer) -> dict:  # all but the layout (back is in memory)
        return {k: v for k, v in snapshot(x).items() if not k.startswith("/config/storage/")}

    assert kept(back) == kept(buf)
    for x, y in zip(buf.sample(len(buf)), back.sample(len(back)), strict=True):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, y)


@given(n=st.sampled_from([1, 3]), capacity=st.integers(2, 10), ops=ops_strategy)
def test_samples_are_model_transitions_of_their_own_env(n, capacity, ops) -> None:
    """Every sampled transition is one the model holds (obs, next_obs, flags), same env."""
    stream = Stream(n, dict_obs=False)
    buf = ReplayBuffer(capacity, num_envs=n, seed=1)
    rows: list[list[tuple]] = []
    for kind, t, codes, _ in ops:
        block = [
            stream.step(codes[j * n : (j + 1) * n]) for j in range(t if kind == "extend" else 1)
        ]
        buf.extend(**stream.arrays(block))
        rows.extend(block)
        live = {(tr[0], tr[3], tr[4], tr[5]) for row in rows[-buf.capacity_per_env :] for tr in row}
        batch = buf.sample(min(len(buf), buf.capacity))
        for ob, nx, te, tr in zip(
            batch.obs.tolist(),
            batch.next_obs.tolist(),
            batch.terminated.tolist(),
            batch.truncated.tolist(),
            strict=True,
        ):
            assert (tuple(ob), tuple(nx), te, tr) in live
            assert ob[0] == nx[0]  # never crosses an env column
