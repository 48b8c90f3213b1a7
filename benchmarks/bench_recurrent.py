"""Masked-velocity CartPole (``CartPoleNoVel-v1``): rlstore's LSTM and Transformer PPO agents.

Runs what ``rlstore train --agent {lstm,transformer} --env CartPoleNoVel-v1 --total-steps N``
runs (the packaged default config, its online settings, the agent's default model config) for
several seeds, one torch thread each, and prints per seed the first env step at which the mean
of the last 20 episode returns reaches 475, the final 20-episode mean and steps/s. Results are
recorded in ``benchmarks/results/recurrent.md``.

    PYTHONPATH=src python benchmarks/bench_recurrent.py --agents lstm transformer --seeds 1 2 3
    PYTHONPATH=src python benchmarks/bench_recurrent.py --total-steps 2048 --seeds 1  # smoke

``--set section.field=value`` (repeatable, YAML values) overrides the config, e.g.
``--set online.update_epochs=20``.
"""

from __future__ import annotations

import argparse
import platform
import time
from importlib import resources
from typing import Any

import torch
import yaml

from rlstore.agents.ppo.config import TrainConfig, load_train_config
from rlstore.agents.ppo.trainer import train_ppo

ENV_ID = "CartPoleNoVel-v1"
THRESHOLD = 475.0


def make_config(agent: str, seed: int, total_steps: int, sets: list[str]) -> TrainConfig:
    """The packaged default config with the env, agent, seed and budget of ``rlstore train``."""
    with resources.as_file(resources.files("rlstore") / "configs" / "ppo_fc_CartPole-v1.yaml") as p:
        data: dict[str, Any] = load_train_config(p).to_dict()
    data["environment"]["env_id"] = ENV_ID
    data["agent"] = agent
    data["run"].update(seed=seed, track=False)
    data["online"].update(total_timesteps=total_steps, num_checkpoints=0)
    for item in sets:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        data[section][name] = yaml.safe_load(value)
    return TrainConfig.from_dict(data)


def run_one(cfg: TrainConfig) -> dict[str, Any]:
    """Train once; steps to 475 (None if never), final 20-episode mean, steps/s."""
    _, stats = train_ppo(cfg.run, cfg.online, cfg.environment, cfg.selected_model_config())
    total = cfg.online.total_timesteps
    return {
        "steps_to_475": stats.first_step_reaching(THRESHOLD, window=20),
        "final_mean20": stats.mean_return(20),
        "sps": stats.steps_per_second,
        "episodes": len(stats.episode_returns),
        "curve": [_mean_at(stats, k * total // 5) for k in range(1, 6)],
    }


def _mean_at(stats: Any, step: int) -> float:
    """Mean of the last 20 episodes finished by env step ``step`` (nan if none)."""
    ends = [i for i, s in enumerate(stats.episode_end_steps) if s <= step]
    last = [stats.episode_returns[i] for i in ends[-20:]]
    return sum(last) / len(last) if last else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["lstm", "transformer"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--set", action="append", default=[], dest="sets")
    args = parser.parse_args(argv)
    print(f"# {ENV_ID}, {args.total_steps} steps, {time.strftime('%Y-%m-%d')}, "
          f"torch {torch.__version__}, {platform.processor() or platform.machine()}")  # fmt: skip
    print("| agent | seed | steps to 475 | final 20-ep mean | mean at 20/40/60/80% | steps/s |")
    print("|---|---|---|---|---|---|")
    for agent in args.agents:
        for seed in args.seeds:
            res = run_one(make_config(agent, seed, args.total_steps, args.sets))
            hit = "never" if res["steps_to_475"] is None else f"{res['steps_to_475']:,}"
            curve = " / ".join(f"{m:.0f}" for m in res["curve"][:4])
            print(f"| {agent} | {seed} | {hit} | {res['final_mean20']:.1f} | {curve} | "
                  f"{res['sps']:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
