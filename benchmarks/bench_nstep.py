"""N-step sampling: rlstore ``NStepReplay.sample(256)`` vs Stable-Baselines3 ``NStepReplayBuffer``.

What is measured: drawing one batch of ``--batch`` n-step transitions (n = 3, gamma = 0.99) as
torch CPU tensors from a full buffer of ``--capacity`` CartPole-shaped transitions (obs float32
(4,), discrete action) written by ``--envs`` envs, episodes ending every ~100 steps (1 in 5 a
truncation). Both libraries hold the same stream and compute the n-step reward, the bootstrap
discount and the matching next observation at sample time (SB3 since 2.7; its ``sample`` also
draws the env column). The rlstore one-step ``ReplayBuffer.sample`` is a context row.

The cells are timed interleaved, ``--repeats`` times ``--iters`` batches; the median rate is
reported with the process CPU rate (robust on a shared machine) and all versions. Nothing is
asserted on timings.

Run (peers from the bench extra)::

    PYTHONPATH=src python benchmarks/bench_nstep.py [--capacity 100000] [--out results/nstep.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    format_rate,
    library_versions,
    limit_threads,
    machine_info,
    markdown_table,
    time_repeats,
    write_markdown,
)


def stream(rows: int, envs: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``(rows, envs)`` continuous CartPole-shaped stream with episode ends (~1 per 100 steps)."""
    rng = np.random.default_rng(seed)
    nxt = rng.normal(size=(rows, envs, 4)).astype(np.float32)
    done = rng.random((rows, envs)) < 0.01
    trunc = done & (rng.random((rows, envs)) < 0.2)
    obs = np.empty_like(nxt)
    obs[0] = rng.normal(size=(envs, 4))
    obs[1:] = np.where(done[:-1, :, None], rng.normal(size=nxt[1:].shape), nxt[:-1])
    return dict(
        obs=obs,
        action=rng.integers(0, 2, size=(rows, envs)),
        reward=rng.normal(size=(rows, envs)).astype(np.float32),
        next_obs=nxt,
        terminated=done & ~trunc,
        truncated=trunc,
    )


def rlstore_cells(data: dict, capacity: int, envs: int, n: int, batch: int) -> dict[str, Callable]:
    from rlstore import NStepReplay, ReplayBuffer

    buf = ReplayBuffer(capacity, num_envs=envs, seed=0)
    buf.extend(**data)
    nstep = NStepReplay(buf, n=n, gamma=0.99)
    return {
        "rlstore NStepReplay": lambda: nstep.sample(batch),
        "rlstore ReplayBuffer (1-step, context)": lambda: buf.sample(batch),
    }


def sb3_cells(data: dict, capacity: int, envs: int, n: int, batch: int) -> dict[str, Callable]:
    import gymnasium as gym
    from stable_baselines3.common.buffers import NStepReplayBuffer

    obs_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    buf = NStepReplayBuffer(
        capacity // envs, obs_space, gym.spaces.Discrete(2), "cpu", n_envs=envs, n_steps=n,
        gamma=0.99, handle_timeout_termination=True,
    )  # fmt: skip
    done = data["terminated"] | data["truncated"]
    for t in range(len(done)):
        infos = [{"TimeLimit.truncated": bool(x)} for x in data["truncated"][t]]
        buf.add(
            data["obs"][t], data["next_obs"][t], data["action"][t, :, None],
            data["reward"][t], done[t], infos,
        )  # fmt: skip
    np.random.seed(0)  # noqa: NPY002 - SB3 samples from the global numpy RNG
    return {"SB3 NStepReplayBuffer": lambda: buf.sample(batch)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", type=Path, default=None, help="write a markdown report here")
    args = p.parse_args(argv)
    limit_threads(1)
    rows = args.capacity // args.envs
    data = stream(rows, args.envs)
    cells = rlstore_cells(data, args.capacity, args.envs, args.n, args.batch)
    try:
        cells.update(sb3_cells(data, args.capacity, args.envs, args.n, args.batch))
    except ImportError as exc:
        print(f"Stable-Baselines3 not available ({exc}); rlstore rows only")
    for fn in cells.values():
        fn()  # warm-up (lazy imports, first allocations)
    wall: dict[str, list[float]] = {k: [] for k in cells}
    cpu: dict[str, list[float]] = {k: [] for k in cells}
    for _ in range(args.repeats):  # interleaved: load changes hit every cell alike
        for name, fn in cells.items():

            def loop(fn: Callable = fn) -> None:
                for _ in range(args.iters):
                    fn()

            t = time_repeats(loop, items=args.iters, repeats=1, warmup=0)
            wall[name].append(t.rate)
            cpu[name].append(t.cpu_rate)
    ref = statistics.median(cpu["rlstore NStepReplay"])
    table = []
    for name in cells:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        table.append([name, format_rate(w), format_rate(c), f"{ref / c:.2f}x"])
    shape = f"{args.capacity} transitions, {args.envs} envs, obs (4,) float32, n={args.n}"
    headers = [
        f"sample({args.batch}), {shape}",
        "batches/s wall",
        "batches/s CPU",
        "rlstore / row (CPU)",
    ]
    body = markdown_table(headers, table)
    versions = library_versions(["rlstore", "numpy", "torch", "stable-baselines3"])
    print(f"machine: {machine_info()}\nversions: {versions}\n{body}")
    if args.out is not None:
        note = (
            f"Median of {args.repeats} interleaved repeats of {args.iters} batches per cell; the "
            "last column is how many times faster rlstore's n-step sample is than the row "
            "(CPU-time rates)."
        )
        cmd = "PYTHONPATH=src python benchmarks/bench_nstep.py " + " ".join(argv or sys.argv[1:])
        title = "N-step sampling: rlstore vs Stable-Baselines3"
        sections = [("sample", f"{note}\n\n{body}")]
        write_markdown(args.out, title, sections, versions=versions, command=cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
