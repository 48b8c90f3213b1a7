"""Prioritized replay: ``sample(256)`` + ``update_priorities(256)`` iterations per second.

What is measured: one iteration of a DQN-with-PER training step's replay bookkeeping, on a full
sampler of capacity ``2**20`` and of ``10**5`` (every slot live, random priorities): a stratified
``PrioritizedSampler.sample(256)`` (indices, float32 weights), then
``update_priorities`` of those 256 ids with fresh |TD errors| (ids overwritten since are
ignored). Index/priority bookkeeping only: gathering the transitions is the buffer's job
and is measured with the buffer integration. Peers come with that integration too (the fastest
measured in issue 10: Tianshou, 2.8k-5.1k iterations/s at 1M).

Each repeat runs ``--iters`` iterations; the median of ``--repeats`` repeats is printed with the
spread, the process CPU time rate (robust on a shared machine) and library versions.

Run::

    PYTHONPATH=src python benchmarks/bench_per.py [--capacity 1048576 100000] [--iters 2000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import format_rate, library_versions, limit_threads, machine_info, time_repeats  # noqa: E402


def run(capacity: int, batch: int, iters: int, repeats: int) -> dict[str, float]:
    """Time ``iters`` sample+update iterations per repeat; return rates (iterations/s)."""
    from rlstore.samplers import PrioritizedSampler

    sampler = PrioritizedSampler(capacity, alpha=0.6, beta=0.4, seed=0)
    sampler.on_write(0, capacity)
    rng = np.random.default_rng(1)
    sampler.update_priorities(np.arange(capacity), rng.exponential(size=capacity))
    errors = rng.exponential(size=(iters, batch))  # drawn outside the timed region

    def loop() -> None:
        for i in range(iters):
            s = sampler.sample(batch)
            sampler.update_priorities(s.indices, errors[i])

    t = time_repeats(loop, items=iters, repeats=repeats, warmup=1)
    return {"rate": t.rate, "cpu_rate": t.cpu_rate, "spread": t.spread}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacity", type=int, nargs="+", default=[1 << 20, 100_000])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    limit_threads(1)
    print(f"machine: {machine_info()}")
    print(f"versions: {library_versions(['rlstore', 'numpy', 'numba'])}")
    for capacity in args.capacity:
        r = run(capacity, args.batch, args.iters, args.repeats)
        print(
            f"rlstore PrioritizedSampler, capacity {capacity}, batch {args.batch}: "
            f"sample + update_priorities {format_rate(r['rate'])} it/s wall "
            f"({format_rate(r['cpu_rate'])} it/s CPU), median of {args.repeats} x {args.iters}, "
            f"spread {r['spread']:.0%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
