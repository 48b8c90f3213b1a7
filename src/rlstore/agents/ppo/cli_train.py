"""``rlstore train``: train a PPO agent and write a run folder.

Defaults: FC agent on CartPole-v1 with the tuned config ``rlstore/configs/cartpole_fc.yaml``.
The run folder ``<runs_dir>/<exp_name>`` receives ``config.yaml`` (the resolved config),
``tb/`` (TensorBoard), ``checkpoints/checkpoint_NNNN/`` (safetensors + JSON, no pickle) and
``learning_curve.png``.

Examples::

    rlstore train                                   # CartPole-v1, FC agent, tuned config
    rlstore train --agent lstm --total-steps 50000 --seed 3
    rlstore train --config my.yaml --env Acrobot-v1
    rlstore train --resume runs/CartPole-v1-fc-s1   # continue from the latest checkpoint
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from rlstore.errors import RLStoreError

DEFAULT_CONFIG = "cartpole_fc.yaml"
_OVERRIDES = ("config", "env", "agent", "total_steps", "seed", "num_envs", "exp_name", "runs_dir")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``train`` options on ``parser``."""
    parser.add_argument("--config", metavar="FILE", help="YAML config (default: the packaged "
                        f"{DEFAULT_CONFIG}, tuned for CartPole-v1)")  # fmt: skip
    parser.add_argument("--env", metavar="ID", help="Gymnasium env id (default: the config's)")
    parser.add_argument(
        "--agent", choices=("fc", "lstm", "transformer"), help="agent (default: fc)"
    )
    parser.add_argument("--total-steps", type=int, metavar="N", help="total environment steps")
    parser.add_argument("--seed", type=int, help="seed of torch, numpy and the envs")
    parser.add_argument("--num-envs", type=int, metavar="N", help="vectorized environments")
    parser.add_argument("--exp-name", help="run name (default: <env>-<agent>-s<seed>)")
    parser.add_argument("--runs-dir", metavar="DIR", help="parent of run folders (default: runs)")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its latest checkpoint (its config.yaml is used)",
    )
    parser.add_argument(
        "--wandb",
        action="store_true",
        help="also log to Weights & Biases (offline; skipped with a message without wandb)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-tensorboard", action="store_true", help="no TensorBoard logs")


def build_config(args: argparse.Namespace) -> Any:
    """The resolved :class:`TrainConfig`: the config file, then the command-line overrides."""
    from rlstore.agents.ppo.config import TrainConfig, load_train_config

    if args.config is not None:
        cfg = load_train_config(args.config)
    else:
        with resources.as_file(resources.files("rlstore") / "configs" / DEFAULT_CONFIG) as p:
            cfg = load_train_config(p)
    data = cfg.to_dict()
    run, env, online = data["run"], data["environment"], data["online"]
    if args.env is not None:
        env["env_id"] = args.env
    if args.agent is not None:
        data["agent"] = args.agent
    if args.total_steps is not None:
        online["total_timesteps"] = args.total_steps
    if args.seed is not None:
        run["seed"] = args.seed
    if args.num_envs is not None:
        online["num_envs"] = args.num_envs
    if args.runs_dir is not None:
        run["runs_dir"] = args.runs_dir
    if args.exp_name is not None:
        run["exp_name"] = args.exp_name
    elif args.config is None or any(getattr(args, k) is not None for k in ("env", "agent", "seed")):
        run["exp_name"] = f"{env['env_id'].replace('/', '_')}-{data['agent']}-s{run['seed']}"
    run["wandb"] = bool(args.wandb) or run["wandb"]
    run["progress_bar"] = not args.no_progress
    if args.no_tensorboard:
        run["track"] = False
    return TrainConfig.from_dict(data)


def _summary(stats: Any, env_id: str) -> str:
    import gymnasium as gym

    lines = [
        f"run folder      {stats.run_dir}",
        f"env steps       {stats.global_step} in {stats.num_updates} updates, "
        f"{stats.wall_time:.1f} s ({stats.steps_per_second:.0f} steps/s)",
        f"episodes        {len(stats.episode_returns)}",
        f"mean return     {stats.mean_return(20):.2f} (last 20 episodes)",
    ]
    try:
        threshold = gym.spec(env_id).reward_threshold
    except Exception:  # noqa: BLE001 - unregistered / custom ids have no spec
        threshold = None
    if threshold is not None:
        hit = stats.first_step_reaching(threshold, 20)
        where = f"at step {hit}" if hit is not None else "not reached"
        lines.append(f"solved (>= {threshold:g}, mean of 20) {where}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run ``rlstore train``; 0 on success, 2 on a configuration / checkpoint error. The
    library's info logs (the run folder) go to stderr meanwhile."""
    log, handler = logging.getLogger("rlstore"), logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("rlstore train: %(message)s"))
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        return _run(args)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def _run(args: argparse.Namespace) -> int:
    from rlstore.agents.ppo.trainer import ppo_runner

    try:
        if args.resume is not None:
            given = [f"--{k.replace('_', '-')}" for k in _OVERRIDES if getattr(args, k) is not None]
            if given:
                raise RLStoreError(
                    f"--resume: continues the run with its own config.yaml; drop {', '.join(given)}"
                )
            result = ppo_runner(None, None, None, None, resume_dir=Path(args.resume))  # type: ignore[arg-type]
            env_id = result.agent.environment_config.env_id  # type: ignore[union-attr]
        else:
            cfg = build_config(args)
            result = ppo_runner(cfg.run, cfg.environment, cfg.online, cfg.selected_model_config())
            env_id = cfg.environment.env_id
    except RLStoreError as err:
        print(f"rlstore train: error: {err}", file=sys.stderr)
        return 2
    print(_summary(result.stats, env_id))
    return 0
