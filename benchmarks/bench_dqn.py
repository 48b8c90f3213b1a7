"""DQN on CartPole-v1: rlstore's trainer vs Stable-Baselines3, and prioritized + n-step replay.

Every implementation runs rlstore's shipped ``configs/dqn_CartPole-v1.yaml`` (RL-Zoo's DQN
CartPole-v1 hyper-parameters with lr 1e-3 and final eps 0.01: batch 64, buffer 100k,
learning_starts 1000, gamma 0.99, target_update_interval 10, train_freq 256, gradient_steps
128, exploration_fraction 0.16, two 256-unit ReLU layers, Huber loss, max grad norm 10, one
env), the same seeds, one torch thread each:

* ``rlstore uniform``: double DQN, uniform one-step replay (SB3's settings plus double DQN);
* ``rlstore vanilla``: double DQN off, uniform one-step replay: the algorithm SB3's ``DQN`` runs;
* ``rlstore PER + 3-step``: the shipped config: prioritized replay (alpha 0.6, beta 0.4 -> 1)
  and 3-step returns;
* ``stable-baselines3``: ``DQN("MlpPolicy")`` with the same settings.

Reported per implementation: the env step at which the mean of the last 20 training-episode
returns first reaches 475 (per seed and median), the last-20 mean at the end, and env steps per
second by wall-clock and by CPU time of the worker process (the robust figure on a shared
machine), each after an untimed warm-up run in the same process. Runs go through a pool of
``--jobs`` single-threaded worker processes (in-process for ``--jobs 1``), implementations
interleaved seed by seed so machine load hits them alike.

Run (SB3 lives in the benchmark virtualenv)::

    /work/benchvenv/bin/python benchmarks/bench_dqn.py --seeds 1,2,3 --jobs 2

Writes ``benchmarks/results/dqn.md``. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import (  # noqa: E402
    first_step_reaching,
    fmt_steps,
    has_sb3,
    library_versions,
    limit_threads,
    machine_info,
    markdown_table,
    median_steps,
    write_markdown,
)

THRESHOLD = 475.0
WINDOW = 20
CONFIG = HERE.parent / "src" / "rlstore" / "configs" / "dqn_CartPole-v1.yaml"
VARIANTS: dict[str, dict[str, Any]] = {
    "rlstore uniform": {"prioritized": False, "n_step": 1},
    "rlstore vanilla": {"double_q": False, "prioritized": False, "n_step": 1},
    "rlstore PER + 3-step": {},
}


def hyperparameters(total_steps: int) -> dict[str, Any]:
    """The shared hyper-parameters, read from rlstore's shipped config."""
    from rlstore.agents.dqn import load_config

    return {**load_config(CONFIG).dqn.to_dict(), "total_timesteps": int(total_steps)}


def run_rlstore(hp: dict[str, Any], seed: int, variant: dict[str, Any]) -> dict[str, Any]:
    """rlstore's ``train_dqn`` (no logging, checkpoints or evaluation)."""
    from rlstore.agents.dqn import DQNTrainConfig, train_dqn

    dqn = {**hp, **variant, "num_checkpoints": 0}
    run = {"seed": seed, "track": False, "eval_episodes": 0}
    cfg = DQNTrainConfig.from_dict({"run": run, "dqn": dqn})
    cpu0 = time.process_time()
    _, stats = train_dqn(cfg)
    return {
        "episode_returns": stats.episode_returns,
        "episode_end_steps": stats.episode_end_steps,
        "global_step": stats.global_step,
        "wall_seconds": stats.wall_time,
        "cpu_seconds": time.process_time() - cpu0,
    }


def run_sb3(hp: dict[str, Any], seed: int, variant: dict[str, Any]) -> dict[str, Any]:
    """Stable-Baselines3 ``DQN("MlpPolicy")`` with the same hyper-parameters."""
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    returns: list[float] = []
    ends: list[int] = []

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    returns.append(float(info["episode"]["r"]))
                    ends.append(int(self.num_timesteps))
            return True

    env = make_vec_env("CartPole-v1", n_envs=hp["num_envs"], seed=seed)
    model = DQN(
        "MlpPolicy", env, learning_rate=hp["learning_rate"], buffer_size=hp["buffer_size"],
        learning_starts=hp["learning_starts"], batch_size=hp["batch_size"], tau=hp["tau"],
        gamma=hp["gamma"], train_freq=hp["train_freq"], gradient_steps=hp["gradient_steps"],
        target_update_interval=hp["target_update_interval"],
        exploration_fraction=hp["exploration_fraction"],
        exploration_initial_eps=hp["exploration_initial_eps"],
        exploration_final_eps=hp["exploration_final_eps"], max_grad_norm=hp["max_grad_norm"],
        policy_kwargs={"net_arch": list(hp["hidden_sizes"])}, seed=seed, device="cpu", verbose=0,
    )  # fmt: skip
    torch.set_num_threads(1)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=hp["total_timesteps"], callback=Record())
    return {
        "episode_returns": returns,
        "episode_end_steps": ends,
        "global_step": int(model.num_timesteps),
        "wall_seconds": time.perf_counter() - wall0,
        "cpu_seconds": time.process_time() - cpu0,
    }


def _runner(name: str) -> Callable[[dict[str, Any], int, dict[str, Any]], dict[str, Any]]:
    return run_sb3 if name == "stable-baselines3" else run_rlstore


def _job(job: tuple[str, dict[str, Any], int]) -> tuple[str, int, dict[str, Any]]:
    """One run in a worker process (one torch thread)."""
    limit_threads(1)
    name, hp, seed = job
    run = _runner(name)
    # untimed warm-up in this fresh process: imports, numba kernels, torch's first backward
    run({**hp, "total_timesteps": 512, "learning_starts": 0, "gradient_steps": 2}, seed, {})
    out = run(hp, seed, VARIANTS.get(name, {}))
    returns, ends = out["episode_returns"], out["episode_end_steps"]
    out["reach"] = first_step_reaching(returns, ends, THRESHOLD, WINDOW)
    out["seed"] = seed
    return name, seed, out


def _table(impls: list[str], results: dict[str, list[dict[str, Any]]]) -> str:
    rows = []
    for name in impls:
        runs = sorted(results[name], key=lambda r: r["seed"])
        if not runs:
            continue
        wall = statistics.median(r["global_step"] / r["wall_seconds"] for r in runs)
        cpu = statistics.median(r["global_step"] / r["cpu_seconds"] for r in runs)
        reach = [r["reach"] for r in runs]
        median_reach = median_steps(reach)  # a seed that never reaches 475 ranks last
        rows.append(
            [
                name, f"{wall:,.0f}", f"{cpu:,.0f}", ", ".join(str(r["seed"]) for r in runs),
                ", ".join(fmt_steps(x) for x in reach), fmt_steps(median_reach),
                ", ".join(f"{np.mean(r['episode_returns'][-WINDOW:]):.0f}" for r in runs),
            ]
        )  # fmt: skip
    headers = [
        "implementation", "env steps/s (wall)", "env steps/s (CPU)", "seeds",
        f"steps to last-{WINDOW} mean >= 475, per seed", "median",
        f"last-{WINDOW} mean at end, per seed",
    ]  # fmt: skip
    return markdown_table(headers, rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every implementation on every seed; print the results and (re)write the table
    after every finished run, so an interrupted benchmark leaves what it measured."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=50_000)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=str(HERE / "results" / "dqn.md"))
    parser.add_argument("--impls", default=",".join([*VARIANTS, "stable-baselines3"]))
    args = parser.parse_args(argv)
    limit_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    impls = [n for n in args.impls.split(",") if n and (n != "stable-baselines3" or has_sb3())]
    hp = hyperparameters(args.total_steps)
    # the rows the issue asks for first (seed by seed), the vanilla ablation last
    order = sorted(impls, key=lambda n: n == "rlstore vanilla")
    jobs = [(name, hp, seed) for last in (False, True) for seed in seeds for name in order
            if (name == "rlstore vanilla") == last]  # fmt: skip
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in impls}
    settings = ", ".join(f"{k}={v}" for k, v in hp.items() if k not in ("num_checkpoints",))
    setup = (
        f"CartPole-v1, seeds {seeds}, {args.total_steps} env steps per run, one torch thread "
        f"per run, {args.jobs} runs at a time. Shared hyper-parameters (rlstore "
        f"`configs/dqn_CartPole-v1.yaml`, RL-Zoo's): {settings}. Variants: "
        + "; ".join(f"{k}: {v or 'the shipped config'}" for k, v in VARIANTS.items())
        + f". 'steps to 475': the env step at which the mean of the last {WINDOW} "
        "training-episode returns first reaches 475 ('not reached' within the budget). "
        "Throughput counts collection and updates together; the CPU-time column divides by the "
        "worker's CPU time, the robust figure on a shared machine."
    )
    pool = mp.get_context("spawn").Pool(args.jobs, maxtasksperchild=1) if args.jobs > 1 else None
    with pool or contextlib.nullcontext():
        for name, seed, out in pool.imap(_job, jobs) if pool else map(_job, jobs):
            results[name].append(out)
            print(
                f"{name:22s} seed {seed}: {out['global_step'] / out['wall_seconds']:6.0f} "
                f"steps/s wall, {out['global_step'] / out['cpu_seconds']:6.0f} steps/s CPU, "
                f"475 at {fmt_steps(out['reach'])}, "
                f"last-20 mean {np.mean(out['episode_returns'][-WINDOW:]):.1f}",
                flush=True,
            )
            table = _table(impls, results)
            write_markdown(
                args.out,
                "DQN on CartPole-v1: rlstore vs Stable-Baselines3, and prioritized + n-step replay",
                [("Results", table), ("Setup", setup)],
                versions=library_versions(
                    ["rlstore", "torch", "numpy", "gymnasium", "stable-baselines3"]
                ),
                machine=machine_info(),
                command=" ".join(["python benchmarks/bench_dqn.py", *(argv or sys.argv[1:])]),
            )
    print("\n" + table + f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
