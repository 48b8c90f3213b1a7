"""Masked-velocity CartPole (``CartPoleNoVel-v1``): rlstore's LSTM and Transformer PPO agents.

Runs what ``rlstore train --agent {lstm,transformer} --env CartPoleNoVel-v1`` runs (the shipped
``rlstore/configs/ppo_{agent}_CartPoleNoVel-v1.yaml``) for several seeds, one torch thread each,
and prints per seed the first env step at which the mean of the last 20 episode returns reaches
475, the final 20-episode mean and steps/s. Agent ``sb3`` runs sb3-contrib ``RecurrentPPO`` with
RL Zoo's ``CartPoleNoVel-v1`` settings in the venv of ``--sb3-python`` (skipped where that venv
has no ``sb3_contrib``). Results are recorded in ``benchmarks/results/recurrent.md``.

    PYTHONPATH=src python benchmarks/bench_recurrent.py --agents lstm transformer sb3 --seeds 1 2 3
    PYTHONPATH=src python benchmarks/bench_recurrent.py --total-steps 2048 --seeds 1  # smoke

``--set section.field=value`` (repeatable, YAML values) overrides the config, e.g.
``--set online.update_epochs=20``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import yaml

from rlstore.agents.ppo import train_ppo
from rlstore.agents.ppo_config import TrainConfig, load_train_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import first_step_reaching  # noqa: E402

ENV_ID = "CartPoleNoVel-v1"
THRESHOLD = 475.0


def make_config(agent: str, seed: int, total_steps: int, sets: list[str]) -> TrainConfig:
    """The shipped default config of ``rlstore train --agent AGENT --env CartPoleNoVel-v1``
    (``rlstore/configs/ppo_{agent}_CartPoleNoVel-v1.yaml``) with ``seed``, the budget and
    ``--set`` overrides; nothing written (no tracking, no checkpoints)."""
    name = f"ppo_{agent}_{ENV_ID}.yaml"
    with resources.as_file(resources.files("rlstore") / "configs" / name) as p:
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
    return _summary(stats.episode_returns, stats.episode_end_steps, total, stats.steps_per_second)


def _summary(returns: list[float], end_steps: list[int], total: int, sps: float) -> dict[str, Any]:
    """Steps to 475 (None if never), final 20-episode mean, the curve at 20..100%, steps/s."""
    return {
        "steps_to_475": first_step_reaching(returns, end_steps, THRESHOLD, 20),
        "final_mean20": sum(returns[-20:]) / max(len(returns[-20:]), 1),
        "sps": sps,
        "episodes": len(returns),
        "curve": [_mean_at(returns, end_steps, k * total // 5) for k in range(1, 6)],
    }


def _mean_at(returns: list[float], end_steps: list[int], step: int) -> float:
    """Mean of the last 20 episodes finished by env step ``step`` (nan if none)."""
    last = [r for r, s in zip(returns, end_steps, strict=True) if s <= step][-20:]
    return sum(last) / len(last) if last else float("nan")


SB3_SCRIPT = """
import json, sys, time
import torch
from torch import nn
import rlstore.envs  # registers CartPoleNoVel-v1
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecNormalize

seed, total = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
lin = lambda v: (lambda progress_remaining: progress_remaining * v)  # RL Zoo's lin_<v>
class Log(BaseCallback):
    def _on_step(self):
        for info in self.locals["infos"]:
            if "episode" in info:
                returns.append(float(info["episode"]["r"])); ends.append(self.num_timesteps)
        return True
returns, ends = [], []
env = VecNormalize(make_vec_env("CartPoleNoVel-v1", n_envs=8, seed=seed), gamma=0.98)
model = RecurrentPPO(  # RL Zoo hyperparams/ppo_lstm.yml CartPoleNoVel-v1
    "MlpLstmPolicy", env, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
    ent_coef=0.0, learning_rate=lin(1e-3), clip_range=lin(0.2), seed=seed, device="cpu",
    policy_kwargs=dict(ortho_init=False, activation_fn=nn.ReLU, lstm_hidden_size=64,
                       enable_critic_lstm=True, net_arch=dict(pi=[64], vf=[64])))
t0 = time.perf_counter()
model.learn(total, callback=Log())
print(json.dumps({"returns": returns, "ends": ends, "sps": total / (time.perf_counter() - t0)}))
"""


def run_sb3(seed: int, total_steps: int, python: str) -> dict[str, Any] | None:
    """sb3-contrib ``RecurrentPPO`` with the RL Zoo settings, in the venv of ``python`` (None
    when that venv has no ``sb3_contrib``)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    probe = subprocess.run([python, "-c", "import sb3_contrib"], env=env, capture_output=True)
    if probe.returncode != 0:
        return None
    out = subprocess.run(
        [python, "-c", SB3_SCRIPT, str(seed), str(total_steps)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return _summary(res["returns"], res["ends"], total_steps, res["sps"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["lstm", "transformer"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--total-steps", type=int, default=100_000)
    parser.add_argument("--set", action="append", default=[], dest="sets")
    parser.add_argument(
        "--sb3-python", default="/work/benchvenv/bin/python",
        help="python of a venv with sb3-contrib (agent 'sb3'; skipped if it cannot import it)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    print(f"# {ENV_ID}, {args.total_steps} steps, {time.strftime('%Y-%m-%d')}, "
          f"torch {torch.__version__}, {platform.processor() or platform.machine()}")  # fmt: skip
    print("| agent | seed | steps to 475 | final 20-ep mean | mean at 20/40/60/80% | steps/s |")
    print("|---|---|---|---|---|---|")
    for agent in args.agents:
        for seed in args.seeds:
            if agent == "sb3":
                sb3 = run_sb3(seed, args.total_steps, args.sb3_python)
                if sb3 is None:
                    print(f"| sb3 | {seed} | skipped: no sb3_contrib in {args.sb3_python} |")
                    continue
                res = sb3
            else:
                res = run_one(make_config(agent, seed, args.total_steps, args.sets))
            hit = "never" if res["steps_to_475"] is None else f"{res['steps_to_475']:,}"
            curve = " / ".join(f"{m:.0f}" for m in res["curve"][:4])
            print(f"| {agent} | {seed} | {hit} | {res['final_mean20']:.1f} | {curve} | "
                  f"{res['sps']:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
