"""``rlstore demo``: fill a replay buffer from a random policy, sample, save, reload, verify.

Runs in a few seconds on a laptop CPU with the defaults (CartPole-v1, 100k transitions):

    rlstore demo
    rlstore demo --env Pendulum-v1 --steps 20000 --capacity 10000 --out /tmp/pendulum-buffer

Steps: (1) build a :class:`~rlstore.buffers.replay.ReplayBuffer` with one column per env and
fill it with :meth:`~rlstore.buffers.replay.ReplayBuffer.warm` from a gymnasium vector env and
uniform random actions (progress bar); (2) draw ``--batches`` uniform batches of
``--batch-size``; (3) save it with :func:`rlstore.checkpoint.save`; (4) load it back and check
that the contents and the next samples are identical; (5) print a summary (size, memory,
throughputs). The exit status is 0 on success, 1 when the reloaded buffer differs, 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlstore._trees import flat_items

__all__ = ["add_arguments", "run", "buffers_equal"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``rlstore demo`` options on ``parser``."""
    parser.add_argument("--env", default="CartPole-v1", help="gymnasium env id (CartPole-v1)")
    parser.add_argument(
        "--steps", type=int, default=100_000, help="transitions to collect (100000)"
    )
    parser.add_argument(
        "--capacity", type=int, default=100_000, help="replay buffer capacity (100000)"
    )
    parser.add_argument("--num-envs", type=int, default=8, help="vectorized envs (8)")
    parser.add_argument("--batch-size", type=int, default=256, help="sample batch size (256)")
    parser.add_argument("--batches", type=int, default=1000, help="batches to sample (1000)")
    parser.add_argument("--seed", type=int, default=0, help="env, policy and sampler seed (0)")
    parser.add_argument(
        "--out", type=Path, default=None, help="checkpoint folder (default: a new temp folder)"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def buffers_equal(a: Any, b: Any, *, batch_size: int, draws: int = 3) -> list[str]:
    """Differences between two buffers: state dicts leaf by leaf, then ``draws`` samples.

    Sampling advances both buffers' RNGs identically. Returns an empty list when equal.
    """
    problems: list[str] = []
    sa, sb = flat_items(a.state_dict()), flat_items(b.state_dict())
    if sa.keys() != sb.keys():
        return [f"state keys differ: {sorted(sa.keys() ^ sb.keys())}"]
    for key, va in sa.items():
        vb = sb[key]
        if isinstance(va, (np.ndarray, torch.Tensor)):
            same = np.array_equal(np.asarray(va), np.asarray(vb)) and (
                np.asarray(va).dtype == np.asarray(vb).dtype
            )
        else:
            same = va == vb or (isinstance(va, tuple) and list(va) == vb)
        if not same:
            problems.append(f"state entry {key!r} differs")
    for i in range(draws):
        x, y = a.sample(batch_size), b.sample(batch_size)
        for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
            if not torch.equal(getattr(x, name), getattr(y, name)):
                problems.append(f"sample {i}: field {name!r} differs")
    return problems


def _fill(buf: Any, args: argparse.Namespace) -> float:
    """Fill ``buf`` with ``args.steps`` transitions in chunks under a progress bar."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode
    from tqdm import tqdm

    import rlstore.envs

    rlstore.envs.register_probes()  # rlstore/Probe1-v0 ...; the others register on import

    env = gym.make_vec(
        args.env,
        num_envs=args.num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    chunk = max(args.num_envs, min(args.steps, 5_000))
    start = time.perf_counter()
    try:
        with tqdm(total=args.steps, unit="tr", desc="filling", disable=args.no_progress) as bar:
            done, k = 0, 0
            while done < args.steps:
                n = min(chunk, args.steps - done)
                added = buf.warm(None, n, env=env, seed=args.seed + k)
                done += added
                k += 1
                bar.update(added)
    finally:
        env.close()
    return time.perf_counter() - start


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the process exit status."""
    from rlstore import checkpoint
    from rlstore import config as _config  # noqa: F401  (imported here, not inside load timing)
    from rlstore.buffers.replay import ReplayBuffer
    from rlstore.errors import RLStoreError

    for name in ("steps", "capacity", "num_envs", "batch_size", "batches"):
        if getattr(args, name) <= 0:
            print(f"rlstore demo: error: --{name.replace('_', '-')} must be > 0", file=sys.stderr)
            return 2
    if args.capacity < args.num_envs:
        print("rlstore demo: error: --capacity must be >= --num-envs", file=sys.stderr)
        return 2
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        print(f"rlstore demo: error: --out: expected a folder, got the file {str(args.out)!r}",
              file=sys.stderr)  # fmt: skip
        return 2
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="rlstore-demo-"))
    try:
        buf = ReplayBuffer(args.capacity, num_envs=args.num_envs, seed=args.seed)
        fill_s = _fill(buf, args)
    except RLStoreError as exc:
        print(f"rlstore demo: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # gymnasium: unknown env id, missing extras, ...
        if type(exc).__module__.startswith("gymnasium"):
            print(f"rlstore demo: error: --env {args.env!r}: {exc}", file=sys.stderr)
            return 2
        raise
    batch_size = min(args.batch_size, len(buf))
    start = time.perf_counter()
    for _ in range(args.batches):
        buf.sample(batch_size)
    sample_s = time.perf_counter() - start

    start = time.perf_counter()
    checkpoint.save(buf, out)
    save_s = time.perf_counter() - start
    start = time.perf_counter()
    loaded = checkpoint.load(out)
    load_s = time.perf_counter() - start
    problems = buffers_equal(buf, loaded, batch_size=batch_size)
    disk = sum(p.stat().st_size for p in out.iterdir() if p.is_file())

    meta = buf.metadata()
    bpt = meta["bytes_per_transition"] or 0.0
    rows = [
        ("env", f"{args.env} x {args.num_envs} (random policy)"),
        ("stored", f"{len(buf):,} / {buf.capacity:,} transitions"),
        ("memory", f"{buf.nbytes / 2**20:.2f} MiB ({bpt:.1f} B/transition)"),
        ("fill", f"{args.steps / max(fill_s, 1e-9):,.0f} transitions/s (env included)"),
        (
            "sample",
            f"{args.batches / max(sample_s, 1e-9):,.0f} batches/s of {batch_size} "
            f"= {args.batches * batch_size / max(sample_s, 1e-9):,.0f} samples/s",
        ),
        ("save", f"{save_s * 1e3:.1f} ms, {disk / 2**20:.2f} MiB in {out}"),
        ("load", f"{load_s * 1e3:.1f} ms"),
        ("verified", "identical contents and next samples" if not problems else "MISMATCH"),
    ]
    width = max(len(k) for k, _ in rows)
    print("rlstore demo")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    if problems:
        for p in problems:
            print(f"  mismatch: {p}", file=sys.stderr)
        return 1
    return 0
