"""PPO on CartPole-v1: rlstore's trainer vs a CleanRL-style single file vs Stable-Baselines3.

Same hyper-parameters for all three (rlstore's shipped ``configs/ppo_fc_CartPole-v1.yaml``: 8 envs
x 32 steps, one minibatch of 256, 20 epochs, gamma 0.98, lambda 0.8, no entropy bonus, no value
clipping, lr 1e-3 -> 2.5e-4 linearly, clip 0.2, max grad norm 0.5, two 64-unit tanh layers for
actor and critic, orthogonal init, Adam eps 1e-5), the same seeds, one thread each, in one run (the
implementations are interleaved seed by seed so machine load hits them alike).

Reported per implementation (median over seeds):

* env steps per second, by wall-clock time and by CPU time of the process (the latter is the
  robust number on a shared machine: every run is single-threaded), each over the whole
  training call: env and network construction included, for all three alike;
* the env step at which the mean of the last 20 episode returns first reaches 475
  (CartPole-v1's ``reward_threshold``), or "not reached" within the budget;
* the mean return of the last 20 episodes at the end.

Run (SB3 lives in the benchmark virtualenv)::

    /work/benchvenv/bin/python benchmarks/bench_ppo.py --total-steps 50000 --seeds 1,2,3

Writes ``benchmarks/results/ppo.md``. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
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
CONFIG = HERE.parent / "src" / "rlstore" / "configs" / "ppo_fc_CartPole-v1.yaml"


def hyperparameters(total_steps: int) -> dict[str, Any]:
    """The shared hyper-parameters, read from rlstore's shipped CartPole config."""
    from rlstore.agents.ppo_config import load_train_config

    online = load_train_config(CONFIG).online
    return {**online.to_dict(), "total_timesteps": int(total_steps)}


# --------------------------------------------------------------------------- the three runners


def run_rlstore(hp: dict[str, Any], seed: int) -> dict[str, Any]:
    """rlstore's ``train_ppo`` with the FC agent (no logging, no checkpoints, and no evaluation
    episodes: the peers run none, so all three time the same training work)."""
    from rlstore.agents.ppo import train_ppo
    from rlstore.agents.ppo_config import EnvironmentConfig, OnlineTrainConfig, RunConfig

    wall0, cpu0 = time.perf_counter(), time.process_time()  # the whole call: setup included
    _, stats = train_ppo(
        RunConfig(seed=seed, track=False, torch_threads=1, eval_episodes=0),
        OnlineTrainConfig(**{**hp, "num_checkpoints": 0}),
        EnvironmentConfig(env_id="CartPole-v1"),
        None,
    )
    return {
        "episode_returns": stats.episode_returns,
        "episode_end_steps": stats.episode_end_steps,
        "global_step": stats.global_step,
        "wall_seconds": time.perf_counter() - wall0,
        "cpu_seconds": time.process_time() - cpu0,
    }


def run_cleanrl_style(hp: dict[str, Any], seed: int) -> dict[str, Any]:
    """``benchmarks/cleanrl_style_ppo.py`` with the same hyper-parameters."""
    import cleanrl_style_ppo as cl

    return cl.train(
        cl.Args(
            env_id="CartPole-v1", total_timesteps=hp["total_timesteps"], seed=seed,
            num_envs=hp["num_envs"], num_steps=hp["num_steps"],
            learning_rate=hp["learning_rate"],
            end_learning_rate=hp["end_learning_rate"] if hp["decay_lr"] else hp["learning_rate"],
            gamma=hp["gamma"], gae_lambda=hp["gae_lambda"],
            num_minibatches=hp["num_minibatches"], update_epochs=hp["update_epochs"],
            clip_coef=hp["clip_coef"], anneal_clip=hp.get("anneal_clip", False),
            clip_vloss=hp["clip_vloss"], ent_coef=hp["ent_coef"],
            vf_coef=hp["vf_coef"], max_grad_norm=hp["max_grad_norm"], hidden=hp["hidden_size"],
        )
    )  # fmt: skip


def run_sb3(hp: dict[str, Any], seed: int) -> dict[str, Any]:
    """Stable-Baselines3 ``PPO("MlpPolicy")`` with the same hyper-parameters."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    if hp["clip_vloss"]:
        raise ValueError("clip_vloss: SB3 clips the value around old values by clip_range_vf")
    lr0, lr1 = hp["learning_rate"], hp["end_learning_rate"]
    if not hp.get("decay_lr", True):
        lr1 = lr0
    clip0 = hp["clip_coef"]
    anneal = bool(hp.get("anneal_clip", False))
    returns: list[float] = []
    ends: list[int] = []

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    returns.append(float(info["episode"]["r"]))
                    ends.append(int(self.num_timesteps))
            return True

    torch.set_num_threads(1)
    wall0, cpu0 = time.perf_counter(), time.process_time()  # env and model setup included
    env = make_vec_env("CartPole-v1", n_envs=hp["num_envs"], seed=seed)
    model = PPO(
        "MlpPolicy", env, n_steps=hp["num_steps"],
        batch_size=hp["num_envs"] * hp["num_steps"] // hp["num_minibatches"],
        n_epochs=hp["update_epochs"], gamma=hp["gamma"], gae_lambda=hp["gae_lambda"],
        ent_coef=hp["ent_coef"], vf_coef=hp["vf_coef"], max_grad_norm=hp["max_grad_norm"],
        clip_range=lambda progress_remaining: clip0 * (progress_remaining if anneal else 1.0),
        normalize_advantage=hp["norm_adv"],
        learning_rate=lambda progress_remaining: lr1 + (lr0 - lr1) * progress_remaining,
        policy_kwargs={
            "net_arch": {"pi": [hp["hidden_size"]] * 2, "vf": [hp["hidden_size"]] * 2},
            "activation_fn": torch.nn.Tanh,
        },
        seed=seed, device="cpu", verbose=0,
    )  # fmt: skip
    model.learn(total_timesteps=hp["total_timesteps"], callback=Record())
    return {
        "episode_returns": returns,
        "episode_end_steps": ends,
        "global_step": int(model.num_timesteps),
        "wall_seconds": time.perf_counter() - wall0,
        "cpu_seconds": time.process_time() - cpu0,
    }


RUNNERS: dict[str, Callable[[dict[str, Any], int], dict[str, Any]]] = {
    "rlstore": run_rlstore,
    "cleanrl-style": run_cleanrl_style,
    "stable-baselines3": run_sb3,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run every implementation on every seed; print and write the results table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-steps", type=int, default=50_000)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--out", default=str(HERE / "results" / "ppo.md"))
    parser.add_argument("--impls", default=",".join(RUNNERS))
    args = parser.parse_args(argv)
    limit_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    impls = [n for n in args.impls.split(",") if n]
    hp = hyperparameters(args.total_steps)
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in impls}
    skipped = [n for n in impls if n == "stable-baselines3" and not has_sb3()]
    for name in impls:  # untimed warm-up: imports, numba JIT of rlstore.returns, allocators
        if name not in skipped:
            RUNNERS[name]({**hp, "total_timesteps": 512}, 0)
    for seed in seeds:
        for name in impls:
            if name in skipped:
                continue
            out = RUNNERS[name](hp, seed)
            returns, ends = out["episode_returns"], out["episode_end_steps"]
            out["reach"] = first_step_reaching(returns, ends, THRESHOLD, WINDOW)
            results[name].append(out)
            print(
                f"{name:18s} seed {seed}: {out['global_step'] / out['wall_seconds']:7.0f} steps/s "
                f"wall, {out['global_step'] / out['cpu_seconds']:7.0f} steps/s CPU, "
                f"475 at {fmt_steps(out['reach'])}, "
                f"last-20 mean {np.mean(out['episode_returns'][-WINDOW:]):.1f}",
                flush=True,
            )
    rows = []
    for name in impls:
        runs = results[name]
        if not runs:
            rows.append([name, "not installed", "", "", "", ""])
            continue
        wall = statistics.median(r["global_step"] / r["wall_seconds"] for r in runs)
        cpu = statistics.median(r["global_step"] / r["cpu_seconds"] for r in runs)
        reach = [r["reach"] for r in runs]
        median_reach = median_steps(reach)  # a seed that never reaches 475 ranks last
        rows.append(
            [
                name, f"{wall:,.0f}", f"{cpu:,.0f}",
                ", ".join(fmt_steps(x) for x in reach), fmt_steps(median_reach),
                ", ".join(f"{np.mean(r['episode_returns'][-WINDOW:]):.0f}" for r in runs),
            ]
        )  # fmt: skip
    base = next((r for r in rows if r[0] == "cleanrl-style" and r[1] != "not installed"), None)
    if base is not None:
        for r in rows:
            if r[1] != "not installed":
                ratio = float(r[2].replace(",", "")) / float(base[2].replace(",", ""))
                r.append(f"{ratio:.2f}")
            else:
                r.append("")
    headers = [
        "implementation", "env steps/s (wall)", "env steps/s (CPU)",
        f"steps to last-{WINDOW} mean >= 475, per seed", "median",
        f"last-{WINDOW} mean at end, per seed",
    ] + (["CPU steps/s vs cleanrl-style"] if base is not None else [])  # fmt: skip
    table = markdown_table(headers, rows)
    print("\n" + table)
    settings = ", ".join(f"{k}={v}" for k, v in hp.items() if k != "num_checkpoints")
    write_markdown(
        args.out,
        "PPO on CartPole-v1: rlstore vs CleanRL-style vs Stable-Baselines3",
        [
            ("Results", table),
            (
                "Setup",
                f"CartPole-v1, seeds {seeds}, {args.total_steps} env steps per run, one torch "
                f"thread, implementations interleaved seed by seed. Shared hyper-parameters "
                f"(rlstore `configs/ppo_fc_CartPole-v1.yaml`): {settings}. 'steps to 475': the env "
                f"step at which the mean of the last {WINDOW} training-episode returns first "
                "reaches 475 ('not reached' within the budget). Throughput counts rollouts and "
                "updates together (rlstore's evaluation episodes are off, `run.eval_episodes=0`: "
                "the peers run none); the CPU-time column divides by the process CPU time, which "
                "is the robust figure on a shared machine.",
            ),
        ],
        versions=library_versions(["rlstore", "torch", "numpy", "gymnasium", "stable-baselines3"]),
        machine=machine_info(),
        command=" ".join(["python benchmarks/bench_ppo.py", *(argv or sys.argv[1:])]),
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
