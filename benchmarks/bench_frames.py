"""Atari-style frame stacks: rlstore ``ReplayBuffer(storage=StorageLayout.frames())`` vs the
peers' frame-saving replay.

What is measured, in one run, each library in its own subprocess (median of ``--repeats``):

* **add**: steps of 1 or 8 envs of ``(4, 84, 84)`` uint8 stacks (random frames, episodes of
  50-400 steps, zero-padded resets like SB3's ``VecFrameStack``) into a full buffer; transitions/s.
* **sample(B)**: ``B`` transitions (obs, next_obs, action, reward, done) per call; calls/s.
* **bytes per transition**: the worker's ``RssAnon`` growth from before the buffer was built to
  after it was filled, over the capacity (and the library's own array bytes where it has them).

Peers: Stable-Baselines3 ``ReplayBuffer(optimize_memory_usage=True)`` (obs stored once; adds
and samples return torch tensors), cpprb ``ReplayBuffer(next_of="obs", stack_compress="obs")``
(stack on the last axis, ``(84, 84, 4)``; one env only: ``next_of`` assumes one sequential
stream). The rlstore rows time the whole replay buffer: ``add`` (validation, the check that
``next_obs`` continues ``obs``, the final-observation side store) and ``sample`` (torch tensors).

Run::

    PYTHONPATH=src /work/benchvenv/bin/python benchmarks/bench_frames.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    format_rate,
    library_versions,
    limit_threads,
    markdown_table,
    rss_bytes,
    time_repeats,
    trim_heap,
    write_markdown,
)

LIBS = ("rlstore", "sb3", "cpprb")
MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}
"""glibc settings of every worker: batches are served from the heap, never trimmed and faulted
back in. Without them, whether a sampled batch's pages are returned to the OS and faulted back
on the next call depends on each library's allocation order (measured here: rlstore's two
900 kB stack arrays per ``sample(32)``, 1.0 ms a call with glibc's defaults, 0.15 ms with these),
which a training loop's own allocations change again."""
STACK, FRAME = 4, (84, 84)


def make_stream(envs: int, pool: int, seed: int) -> dict[str, Any]:
    """``pool`` steps of ``envs`` envs: ``obs (pool, envs, 4, 84, 84)``, ``done (pool, envs)``
    and ``final`` stacks of done steps; the last step ends every episode so the pool cycles."""
    rng = np.random.default_rng(seed)
    obs = np.zeros((pool, envs, STACK, *FRAME), np.uint8)
    done = rng.random((pool, envs)) < 1 / 150
    done[-1] = True
    finals: dict[tuple[int, int], np.ndarray] = {}
    for e in range(envs):
        stack = np.zeros((STACK, *FRAME), np.uint8)
        for t in range(pool):
            frame = rng.integers(0, 256, FRAME, dtype=np.uint8)
            stack = np.concatenate([stack[1:], frame[None]])
            obs[t, e] = stack
            if done[t, e]:
                finals[t, e] = np.concatenate([stack[1:], frame[None] // 2])
                stack = np.zeros((STACK, *FRAME), np.uint8)
    nxt = np.roll(obs, -1, axis=0)
    for (t, e), f in finals.items():
        nxt[t, e] = f
    return {"obs": obs, "next_obs": nxt, "done": done}


def run_worker(lib: str, envs: int, capacity: int, repeats: int, seed: int) -> dict[str, Any]:
    """Build, fill and time one library; returns rates, bytes and a correctness flag."""
    import torch  # noqa: F401 (imported before anything is timed)

    limit_threads(1)
    pool = 256 if envs > 1 else 1024
    s = make_stream(envs, pool, seed)
    obs, nxt, done = s["obs"], s["next_obs"], s["done"]
    if lib == "cpprb":
        obs, nxt = np.moveaxis(obs, 2, -1).copy(), np.moveaxis(nxt, 2, -1).copy()
    act = np.ones((envs,), np.int64)
    rew = np.zeros((envs,), np.float32)
    rng = np.random.default_rng(seed + 1)
    if lib == "rlstore":  # imports first: the RSS growth below counts the buffer only
        from rlstore import ReplayBuffer
        from rlstore.storage import StorageLayout

        warm = ReplayBuffer(4, storage=StorageLayout.frames(), seed=0)
        warm.add(obs[0, 0], 0, 0.0, nxt[0, 0], False, False)  # numba kernels loaded
        warm.sample(1)
    elif lib == "sb3":
        import gymnasium as gym
        from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer
    else:
        import cpprb
    trim_heap()
    rss0 = rss_bytes()
    own: int | None = None
    step = [0]
    if lib == "rlstore":
        buf = ReplayBuffer(capacity, num_envs=envs, storage=StorageLayout.frames(), seed=seed)
        no_trunc = np.zeros(envs, bool)

        def add(steps: int) -> None:
            for _ in range(steps):
                i = step[0] % pool
                step[0] += 1
                buf.add(obs[i], act, rew, nxt[i], done[i], no_trunc)

        def sample(b: int) -> object:
            return buf.sample(b)

        def check() -> bool:
            idx = rng.integers(0, len(buf), 256)
            g, env = np.divmod(idx + buf.first_id, envs)
            return bool(np.array_equal(buf.gather(idx)["obs"], obs[g % pool, env]))
    elif lib == "sb3":
        space = gym.spaces.Box(0, 255, (STACK, *FRAME), np.uint8)
        rb = SB3Buffer(capacity, space, gym.spaces.Discrete(6), device="cpu", n_envs=envs,
                       optimize_memory_usage=True, handle_timeout_termination=False)  # fmt: skip
        infos = [{} for _ in range(envs)]

        def add(steps: int) -> None:
            for _ in range(steps):
                i = step[0] % pool
                step[0] += 1
                rb.add(obs[i], nxt[i], act, rew, done[i], infos)

        def sample(b: int) -> object:
            return rb.sample(b)

        def check() -> bool:
            return True  # a peer: not checked here

        own = sum(a.nbytes for a in (rb.observations, rb.actions, rb.rewards, rb.dones))
    else:
        env_dict = {"obs": {"shape": (*FRAME, STACK), "dtype": np.ubyte},
                    "act": {"shape": 1, "dtype": np.ubyte}, "rew": {}, "done": {}}  # fmt: skip
        rb = cpprb.ReplayBuffer(capacity, env_dict, next_of="obs", stack_compress="obs")

        def add(steps: int) -> None:
            for _ in range(steps):
                i = step[0] % pool
                step[0] += 1
                rb.add(obs=obs[i, 0], act=1, rew=0.0, next_obs=nxt[i, 0], done=float(done[i, 0]))
                if done[i, 0]:
                    rb.on_episode_end()

        def sample(b: int) -> object:
            return rb.sample(b)

        def check() -> bool:
            return True

    add(-(-capacity // envs) + pool)  # fill (every page touched) and wrap around
    rss = rss_bytes() - rss0
    if lib == "rlstore":
        own = buf.nbytes
    add_steps = max(2000 // envs, 200)
    out: dict[str, Any] = {"lib": lib, "envs": envs, "capacity": capacity}
    t = time_repeats(lambda: add(add_steps), items=add_steps * envs, repeats=repeats)
    out["add"] = {"rate": t.rate, "cpu_rate": t.cpu_rate, "spread": t.spread}
    for b, calls in ((32, 200), (256, 40)):

        def draws(b: int = b, calls: int = calls) -> None:
            for _ in range(calls):  # each batch is dropped before the next, as in training
                sample(b)

        t = time_repeats(draws, items=calls, repeats=repeats)
        out[f"sample{b}"] = {"rate": t.rate, "cpu_rate": t.cpu_rate, "spread": t.spread}
    out["rss_per_transition"] = rss / capacity
    out["own_per_transition"] = None if own is None else own / capacity
    out["stacks_checked"] = check()
    return out


def _row(results: list[dict[str, Any]], key: str, what: str) -> list[str]:
    """``what``, then ``wall / CPU`` rates per library, then rlstore over the fastest peer (CPU)."""
    got = {r["lib"]: r[key] for r in results if key in r}
    peers = {k: v["cpu_rate"] for k, v in got.items() if k != "rlstore"}
    best = max(peers, key=peers.__getitem__) if peers else None
    cells = [
        f"{format_rate(got[lib]['rate'])} / {format_rate(got[lib]['cpu_rate'])}"
        if lib in got
        else "n/a"
        for lib in LIBS
    ]
    ratio = ""
    if best and "rlstore" in got:
        ratio = f"x{got['rlstore']['cpu_rate'] / peers[best]:.2f} vs {best}"
    return [what, *cells, ratio]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacity", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--quick", action="store_true", help="capacity 4096, 2 repeats")
    p.add_argument("--libs", default=",".join(LIBS))
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "frames.md"))
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--envs", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.capacity, args.repeats = 4096, 2
    if args.worker:
        print(json.dumps(run_worker(args.worker, args.envs, args.capacity, args.repeats, 0)))
        return 0
    results: dict[int, list[dict[str, Any]]] = {1: [], 8: []}
    env = {**os.environ, **MALLOC}
    for envs in results:
        for lib in args.libs.split(","):
            if lib == "cpprb" and envs > 1:
                continue
            cmd = [sys.executable, __file__, "--worker", lib, "--envs", str(envs),
                   "--capacity", str(args.capacity), "--repeats", str(args.repeats)]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode:
                print(f"{lib} ({envs} envs) failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            results[envs].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(results[envs][-1], flush=True)
    head = ["what (wall / CPU rate)", *LIBS, "rlstore / fastest peer (CPU)"]
    rows = []
    for envs, res in results.items():
        rows.append(_row(res, "add", f"add, {envs} env(s), transitions/s"))
        if envs == 1:
            rows += [_row(res, f"sample{b}", f"sample({b}), calls/s") for b in (32, 256)]
    mem = []
    for r in results[1] + results[8]:
        own = r["own_per_transition"]
        mem.append([r["lib"], r["envs"], f"{r['rss_per_transition']:,.0f}",
                    "n/a" if own is None else f"{own:,.0f}",
                    f"{r['rss_per_transition'] * 1e6 / 2**30:.2f}",
                    {True: "yes", False: "NO"}[r["stacks_checked"]] if r["lib"] == "rlstore"
                    else "not checked"])  # fmt: skip
    mem_head = ["library", "envs", "RssAnon bytes / transition", "own array bytes / transition",
                "GiB per 1M transitions", "sampled stacks equal the stream"]  # fmt: skip
    note = (
        f"Capacity {args.capacity:,} transitions of (4, 84, 84) uint8 stacks (one frame is "
        f"7,056 bytes), median of {args.repeats} repeats, 1 thread; rates by wall-clock and by "
        "process CPU time (steadier on a shared machine), ratios by CPU time. rlstore rows time "
        "the whole ReplayBuffer (add with its checks, sample to torch tensors). Workers run "
        "with glibc MALLOC_MMAP_THRESHOLD_=32 MiB, MALLOC_TRIM_THRESHOLD_="
        "256 MiB (see MALLOC in the script): with the defaults, sampled batches may be "
        "page-faulted back in on every call, depending on each library's allocation order. "
        "SB3 returns torch tensors, cpprb numpy arrays; cpprb is one env only."
    )
    versions = library_versions(["numpy", "torch", "stable-baselines3", "cpprb"])
    cmd = "PYTHONPATH=src python benchmarks/bench_frames.py" + (" --quick" if args.quick else "")
    sections = [("Speed", note + "\n\n" + markdown_table(head, rows)),
                ("Memory", markdown_table(mem_head, mem))]  # fmt: skip
    out = write_markdown(args.out, "Atari-style frame stacks", sections, versions=versions,
                         command=cmd)  # fmt: skip
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
