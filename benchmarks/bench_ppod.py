"""PPO+D vs plain PPO on rlstore/KeyDoor-v0, from the single shipped demonstration.

Both run the packaged ``configs/ppod_fc_rlstore_KeyDoor-v0.yaml`` (FC agent, 8 envs x 128
steps, lr 2.5e-4, 4 epochs of 4 minibatches, gamma 0.99, entropy 0.01, 100k env steps; PPO+D:
rho 0.3, phi 0, alpha 10, 51 demos) with the same seeds, one torch thread each; plain PPO is
the same config without its ``ppod`` section (``rlstore train --algo ppo``). KeyDoor gives
reward 1 on reaching the goal, so the deterministic evaluation return is the success rate.

Reported per run: the final evaluation success rate, the first env step at which an evaluation
(every 10 updates) succeeds, wall-clock and CPU seconds of the worker process. Runs go through
a pool of ``--jobs`` single-threaded worker processes.

Run::

    python benchmarks/bench_ppod.py --seeds 0,1,2 --jobs 2

Writes ``benchmarks/results/ppod.md``. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import (  # noqa: E402
    library_versions,
    limit_threads,
    markdown_table,
    train_ppod_or_ppo,
    write_markdown,
)

CONFIG = HERE.parent / "src" / "rlstore" / "configs" / "ppod_fc_rlstore_KeyDoor-v0.yaml"
ALGOS = ("ppo+d", "ppo")


def run_one(
    algo: str, seed: int, total_steps: int | None, config: str = str(CONFIG)
) -> dict[str, Any]:
    """Train one run; returns its success rates and times."""
    limit_threads(1)
    import rlstore.envs  # noqa: F401
    from rlstore.agents.ppod import load_config

    cfg = load_config(config)
    online = {"num_checkpoints": 0}
    if total_steps is not None:
        online["total_timesteps"] = total_steps
    cfg = cfg.model_copy(update={
        "run": cfg.run.model_copy(update={"seed": seed, "track": False}),
        "online": cfg.online.model_copy(update=online),
    })  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    stats = train_ppod_or_ppo(algo, cfg)
    first = next((s for s, v in stats.evaluations if v >= 0.9), None)
    return {
        "algo": algo,
        "seed": seed,
        "steps": stats.global_step,
        "success": stats.evaluations[-1][1],
        "first": first,
        "wall": time.perf_counter() - t0,
        "cpu": time.process_time() - c0,
    }


def _star(args: tuple[Any, ...]) -> dict[str, Any]:
    return run_one(*args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--total-steps", type=int, default=None, help="override the config's budget")
    p.add_argument("--config", default=str(CONFIG))
    p.add_argument("--out", default=str(HERE / "results" / "ppod.md"))
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    tasks = [(a, s, args.total_steps, args.config) for s in seeds for a in ALGOS]
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            rows = pool.map(_star, tasks)
    else:
        rows = [_star(t) for t in tasks]
    table = markdown_table(
        ["algorithm", "seed", "env steps", "final success", "first success at", "wall s", "cpu s"],
        [[r["algo"], r["seed"], r["steps"], f"{r['success']:.2f}",
          "never" if r["first"] is None else f"{r['first'] / 1000:.1f}k",
          f"{r['wall']:.0f}", f"{r['cpu']:.0f}"] for r in rows],
    )  # fmt: skip
    print(table)
    command = "python benchmarks/bench_ppod.py " + " ".join(argv or sys.argv[1:])
    write_markdown(
        args.out,
        "PPO+D vs PPO on rlstore/KeyDoor-v0 (one shipped demo)",
        [("Deterministic evaluation success rate", table)],
        versions=library_versions(["torch", "gymnasium", "numpy"]),
        command=command.strip(),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
