"""``rlstore train``: train an agent (``--algo``, default PPO) and write a run folder.

The config: ``--config FILE``, or the packaged one tuned for the env (``--env`` / ``--agent``,
see :func:`default_config`), then the named flags and ``--set section.key=value`` overrides
(values parsed as YAML; an unknown key is an error naming it). The run folder
``<runs_dir>/<exp_name>`` is created only once the config is valid and the environment builds;
it receives ``config.yaml`` (the resolved config), ``tb/`` (TensorBoard),
``checkpoints/checkpoint_NNNN/`` (safetensors + JSON, no pickle), ``learning_curve.png`` and,
with ``--video``, ``videos/``. A run that fails before its first update leaves no folder.

Examples::

    rlstore train                                   # CartPole-v1, FC agent, tuned config
    rlstore train --agent lstm --env CartPoleNoVel-v1 --seed 3
    rlstore train --env Acrobot-v1 --lr 3e-4 --set online.ent_coef=0.01
    rlstore train --algo dqn --eval-interval 10000 --eval-episodes 10 --video
    rlstore train --resume runs/CartPole-v1-fc-s1   # continue from the latest checkpoint
    rlstore train --resume runs/CartPole-v1-fc-s1 --total-steps 80000   # extend its budget
    rlstore train --algo dqn                        # DQN on CartPole-v1 (RL-Zoo + PER, 3-step)
    rlstore train --algo sac                        # SAC on Pendulum-v1 (RL-Zoo settings)
    rlstore train --algo impala --num-collectors 2  # IMPALA on a local Ray instance
    rlstore train --algo apex --num-shards 2 --address 10.0.0.5:6379   # Ape-X on a cluster
    rlstore train --algo ppod --env rlstore/KeyDoor-v0   # PPO+D from the shipped demo
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from rlstore.config import load_yaml
from rlstore.errors import ConfigError, RLStoreError

log = logging.getLogger("rlstore.train")

ALGORITHMS: dict[str, str] = {
    "ppo": "rlstore.agents.ppo",
    "dqn": "rlstore.agents.dqn",
    "sac": "rlstore.agents.sac",
    "impala": "rlstore.agents.impala",
    "apex": "rlstore.agents.apex",
    "ppod": "rlstore.agents.ppod",
}
"""``--algo`` -> module exposing ``DEFAULT_CONFIGS``, ``load_config`` and ``runner`` (and
optionally ``CLI_KEYS``, flag -> config key or None (the flag does not apply), overriding
:data:`FLAG_KEYS`, and ``CONTINUOUS_FALLBACK``, see :func:`fallback_env`)."""

FLAG_KEYS: dict[str, str | None] = {
    "env": "environment.env_id",
    "agent": "agent",
    "seed": "run.seed",
    "exp_name": "run.exp_name",
    "runs_dir": "run.runs_dir",
    "total_steps": "online.total_timesteps",
    "num_envs": "online.num_envs",
    "num_steps": "online.num_steps",
    "lr": "online.learning_rate",
    "gamma": "online.gamma",
    "ent_coef": "online.ent_coef",
    "eval_episodes": "run.eval_episodes",
    "eval_interval": "run.eval_interval",
    "eval_every": "run.eval_every",  # removed: the config's error names run.eval_interval
    "num_collectors": None,  # Ray flags: only the distributed algorithms take them
    "num_shards": None,
    "address": None,
    "demos": None,
}
"""Named flag (argparse dest) -> the config key it sets (None: refused unless the algorithm's
``CLI_KEYS`` maps it, e.g. PPO+D's ``--demos``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``train`` options on ``parser``."""
    add = parser.add_argument
    add("--algo", choices=sorted(ALGORITHMS), help="algorithm (default: ppo; with --resume: "
        "the run's)")  # fmt: skip
    add("--config", metavar="FILE", help="YAML config (default: the packaged one for the "
        "env, e.g. ppo_fc_CartPole-v1.yaml; if none, with a warning, CartPole-v1's, or for "
        "PPO with continuous actions Pendulum-v1's)")  # fmt: skip
    add("--env", metavar="ID", help="Gymnasium env id (default: the config's)")
    add("--agent", choices=("fc", "lstm", "transformer"), help="agent (default: the config's)")
    add("--total-steps", type=int, metavar="N", help="total environment steps (with --resume: "
        "extend the run to N steps)")  # fmt: skip
    add("--seed", type=int, help="seed of torch, numpy and the envs")
    add("--num-envs", type=int, metavar="N", help="vectorized environments")
    add("--num-steps", type=int, metavar="T", help="rollout length per env per update")
    add("--lr", type=float, metavar="LR", help="initial learning rate")
    add("--gamma", type=float, help="discount factor")
    add("--ent-coef", type=float, metavar="C", help="entropy bonus coefficient")
    add("--eval-episodes", type=int, metavar="N", help="deterministic evaluation episodes (0: off)")
    add("--eval-interval", type=int, metavar="STEPS", help="evaluate every STEPS env steps "
        "(0: at the end)")  # fmt: skip
    add("--eval-every", type=int, help=argparse.SUPPRESS)  # removed: refused, naming the above
    add("--num-collectors", type=int, metavar="K", help="collector actors (impala, apex)")
    add("--num-shards", type=int, metavar="S", help="replay shard actors (apex)")
    add("--address", metavar="ADDR", help="join this Ray cluster (impala, apex; default: a "
        "local instance on 127.0.0.1)")  # fmt: skip
    add("--demos", metavar="DIR", help="--algo ppod: folder of .npz demos (default: the "
        "shipped demo of rlstore/KeyDoor-v0)")  # fmt: skip
    add("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
        help="set a config key, e.g. online.clip_coef=0.1 (repeatable; YAML value)")  # fmt: skip
    add("--exp-name", help="run name (default: <env>-<agent>-s<seed>)")
    add("--runs-dir", metavar="DIR", help="parent of run folders (default: runs)")
    add("--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint (its "
        "config.yaml is used; only --total-steps may change it)")  # fmt: skip
    add("--video", action="store_true", help="record the evaluation episodes (needs moviepy)")
    add("--wandb", action="store_true",
        help="also log to W&B (offline; skipped with a message without wandb)")  # fmt: skip
    add("--no-progress", action="store_true", help="no progress bar")
    add("--no-tensorboard", action="store_true", help="no TensorBoard logs")


def _algo(args: argparse.Namespace) -> str:
    """``--algo``; with ``--resume`` and no ``--algo``, the algorithm of the run's config."""
    algo = getattr(args, "algo", None)
    if algo is None and getattr(args, "resume", None) is not None:
        algo = _algo_of_file(Path(args.resume) / "config.yaml")
    return algo or "ppo"


def _algo_of_file(path: str | Path) -> str | None:
    """The algorithm whose section (``dqn:``, ``sac:``, ..., PPO's ``online:``) the config file
    holds (None: none of them, or unreadable: the loader then reports the file)."""
    try:
        data = load_yaml(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ConfigError):
        return None
    found = [a for a in ALGORITHMS if a != "ppo" and isinstance(data, dict) and a in data]
    return found[0] if found else "ppo" if isinstance(data, dict) and "online" in data else None


def _load_config(module: ModuleType, algo: str, path: str | Path, **kwargs: Any) -> Any:
    """``module.load_config(path)``; a file of another algorithm's config is refused naming the
    ``--algo`` it is for, not by a list of its sections as unknown keys."""
    try:
        return module.load_config(path, **kwargs)
    except ConfigError:
        other = _algo_of_file(path)
        if other is None or other == algo:
            raise
        section = "online" if other == "ppo" else other
        raise ConfigError(
            f"--algo: expected a {algo} config, got {str(path)!r}, a config of --algo {other} "
            f"(its {section!r} section); run it with --algo {other}"
        ) from None


def _module(args: argparse.Namespace) -> ModuleType:
    return importlib.import_module(ALGORITHMS[_algo(args)])


def _flag_keys(module: ModuleType) -> dict[str, str | None]:
    return {**FLAG_KEYS, **getattr(module, "CLI_KEYS", {})}


def _packaged(name: str) -> Any:
    return resources.files("rlstore") / "configs" / name


def default_config(
    algo: str, module: ModuleType, env_id: str | None, agent: str | None
) -> tuple[Any, bool]:
    """The packaged config file for ``env_id`` and ``agent`` (``--config`` not given), and
    whether it is the fallback tuned for another env.

    Looks for ``<algo>_<agent>_<env>.yaml`` (``<env>`` the id made a file name by
    :func:`~rlstore.agents.run.safe_name`: ``rlstore/KeyDoor-v0`` -> ``rlstore_KeyDoor-v0``),
    then the algorithm's ``DEFAULT_CONFIGS[env]``
    (PPO: the env's ``ppo_fc_<env>.yaml``, else its lstm / transformer one; the agent is then
    replaced by ``agent``), else falls back to the config of :func:`fallback_env` (for PPO
    CartPole-v1's, or Pendulum-v1's for continuous actions), which ``rlstore train`` announces
    with a warning.
    """
    from rlstore.agents.run import safe_name

    defaults: dict[str, str] = module.DEFAULT_CONFIGS
    env = env_id or next(iter(defaults))
    names = [f"{algo}_{agent}_{safe_name(env)}.yaml"] if agent else []
    names += [defaults[env]] if env in defaults else []
    for name in names:
        if _packaged(name).is_file():
            return _packaged(name), False
    return _packaged(defaults[fallback_env(module, env)]), True


def fallback_env(module: ModuleType, env_id: str) -> str:
    """The env whose packaged config stands in for ``env_id``'s: the algorithm's
    ``CONTINUOUS_FALLBACK`` (if it names one) when ``env_id`` has continuous (``Box``) actions,
    else the first of its ``DEFAULT_CONFIGS``. The action space is read from the env made from
    its id alone; an env that does not build so gets the first (the run then builds it with its
    configured arguments, or reports why it cannot)."""
    import gymnasium as gym

    from rlstore.agents.config import EnvironmentConfig
    from rlstore.agents.envs import make_env

    first = next(iter(module.DEFAULT_CONFIGS))
    continuous = getattr(module, "CONTINUOUS_FALLBACK", None)
    if continuous is None:
        return first
    try:
        env = make_env(EnvironmentConfig(env_id=env_id))
    except Exception:  # e.g. a missing constructor argument that the config supplies
        return first
    box = isinstance(env.action_space, gym.spaces.Box)
    env.close()
    return continuous if box else first


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    """``data[a][b] = value`` for ``key = "a.b"`` (sections created as needed)."""
    *sections, leaf = key.split(".")
    node = data
    for i, sec in enumerate(sections):
        node = node.setdefault(sec, {})
        if not isinstance(node, dict):
            where = ".".join(sections[: i + 1])
            raise ConfigError(f"--set {key}: {where!r} is a value, not a section")
    node[leaf] = value


def _parse_set(item: str) -> tuple[str, Any]:
    key, sep, text = item.partition("=")
    if not sep or not key or any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"--set: expected section.key=value, got {item!r}")
    try:
        return key.strip(), load_yaml(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"--set {key}: value {text!r} is not YAML ({err})") from None
    except ConfigError as err:  # a key given twice, an octal int
        raise ConfigError(f"--set {key}: value {text!r}: {err}") from None


def build_config(args: argparse.Namespace) -> Any:
    """The resolved config: the config file, then the named flags, then ``--set``."""
    from rlstore.agents.run import safe_name

    module = _module(args)
    algo = _algo(args)
    if args.config is not None:
        cfg = _load_config(module, algo, args.config)
    else:
        with resources.as_file(default_config(algo, module, args.env, args.agent)[0]) as path:
            cfg = module.load_config(path)
    data = cfg.model_dump(mode="json")
    given = {k: getattr(args, k, None) for k in _flag_keys(module)}
    for flag, key in _flag_keys(module).items():
        if given[flag] is None:
            continue
        if key is None:
            raise ConfigError(f"--{flag.replace('_', '-')}: not an option of --algo {algo}")
        _set(data, key, given[flag])
    overrides = [_parse_set(item) for item in getattr(args, "overrides", [])]
    for key, value in overrides:
        _set(data, key, value)
    # the user's settings checked first (a section set to a value is reported, not crashed on)
    data = type(cfg).validate_mapping(data).model_dump(mode="json")
    run = data["run"]
    named = args.exp_name is not None or any(key == "run.exp_name" for key, _ in overrides)
    if not named and (args.config is None or any(
            given[k] is not None for k in ("env", "agent", "seed"))):  # fmt: skip
        env_id = data["environment"]["env_id"]
        run["exp_name"] = f"{safe_name(str(env_id))}-{data.get('agent', algo)}-s{run['seed']}"
    run["wandb"] = bool(args.wandb) or run.get("wandb", False)
    if args.no_progress or not any(key == "run.progress_bar" for key, _ in overrides):
        run["progress_bar"] = not args.no_progress  # the command shows a bar unless told not to
    if getattr(args, "video", False):
        run["video"] = True
    if args.no_tensorboard:
        run["track"] = False
    return type(cfg).validate_mapping(data)


def _summary(stats: Any, env_id: str) -> str:
    lines = [
        f"run folder      {stats.run_dir}",
        f"env steps       {stats.global_step} in {stats.num_updates} updates, "
        f"{stats.wall_time:.1f} s ({stats.steps_per_second:.0f} steps/s)",
        f"episodes        {len(stats.episode_returns)}",
        f"mean return     {stats.mean_return(20):.2f} (last 20 training episodes, sampled actions)"
        if stats.episode_returns
        else "mean return     - (no training episode finished)",
    ]
    if stats.evaluations:
        step, value = stats.evaluations[-1]
        lines.append(f"evaluation      {value:.2f} (mean of the deterministic evaluation "
                     f"episodes at step {step})")  # fmt: skip
    threshold = _reward_threshold(env_id)
    if threshold is not None:
        hit = stats.first_step_reaching(threshold, 20)
        where = f"at step {hit}" if hit is not None else "not reached"
        lines.append(f"solved (>= {threshold:g}, mean of 20) {where}")
    return "\n".join(lines)


def _reward_threshold(env_id: str) -> float | None:
    """The registered reward threshold of ``env_id``, None when the env registers none (a
    ``module:`` prefix is dropped, never imported: the run registered the id already)."""
    import gymnasium as gym

    try:
        return gym.spec(env_id.rpartition(":")[2]).reward_threshold
    except gym.error.Error:
        return None


def run(args: argparse.Namespace) -> int:
    """Run ``rlstore train``; 0 on success, 2 on a configuration / checkpoint error. The
    library's info logs (the run folder) and warnings go to stderr meanwhile."""
    lib, handler = logging.getLogger("rlstore"), logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("rlstore train: %(message)s"))
    level = lib.level
    lib.addHandler(handler)
    lib.setLevel(logging.INFO)
    try:
        return _run(args)
    finally:
        lib.removeHandler(handler)
        lib.setLevel(level)


def _resume_config(args: argparse.Namespace, module: ModuleType, run_dir: Path) -> Any:
    """The run folder's config, with ``--total-steps`` and ``--no-progress`` (the bar is not
    part of the run) applied; every other override refused, never ignored."""
    keys = _flag_keys(module)
    given = [f"--{k.replace('_', '-')}" for k in ("config", *keys) if k != "total_steps"
             and getattr(args, k, None) is not None]  # fmt: skip
    given += ["--set"] * bool(getattr(args, "overrides", [])) + ["--video"] * bool(args.video)
    cfg = _load_config(module, _algo(args), run_dir / "config.yaml", run_file=True)
    # the logging flags may repeat the run's settings, not change them
    given += ["--wandb"] * (bool(getattr(args, "wandb", False)) and not cfg.run.wandb)
    given += ["--no-tensorboard"] * (bool(getattr(args, "no_tensorboard", False)) and cfg.run.track)
    if given:
        raise RLStoreError(
            f"--resume: continues the run with its own config.yaml; drop {', '.join(given)} "
            "(only --total-steps may extend its budget)"
        )
    data = cfg.model_dump(mode="json")
    data["run"]["progress_bar"] = not args.no_progress
    if args.total_steps is None:
        return type(cfg).validate_mapping(data)
    section, leaf = str(keys["total_steps"]).rsplit(".", 1)
    planned = data[section][leaf]
    if args.total_steps < planned:
        raise ConfigError(
            f"{keys['total_steps']}: expected at least {planned} (--total-steps can extend the "
            f"run {str(run_dir)!r}, not shorten it), got {args.total_steps}"
        )
    _set(data, str(keys["total_steps"]), args.total_steps)
    return type(cfg).validate_mapping(data)


def _run(args: argparse.Namespace) -> int:
    from rlstore.agents.run import check_video_support, create_run_dir

    module = _module(args)
    run_dir: Path | None = None
    try:
        if args.resume is not None:
            run_dir = Path(args.resume)
            if not (run_dir / "config.yaml").is_file():
                what = "a file" if run_dir.is_file() else "no config.yaml in it" if (
                    run_dir.is_dir()) else "no such folder"  # fmt: skip
                raise ConfigError(f"--resume: expected a run folder (config.yaml, checkpoints/), "
                                  f"got {str(run_dir)!r} ({what})")  # fmt: skip
            cfg = _resume_config(args, module, run_dir)
            _check_device(cfg.run.device)
            agent, stats = module.runner(cfg, run_dir=run_dir, resume=True)
        else:
            cfg = build_config(args)
            _check_device(cfg.run.device)
            _check_env_builds(cfg.environment)  # only then the run folder
            _warn_if_untuned(args, module, cfg.environment.env_id)
            if cfg.run.eval_episodes == 0 and (cfg.run.video or cfg.run.eval_interval):
                log.warning("run.eval_episodes is 0: no evaluation runs, so run.video and "
                            "run.eval_interval do nothing; set --eval-episodes N")  # fmt: skip
            if getattr(cfg.run, "video", False):
                check_video_support()
            run_dir = create_run_dir(cfg.run.runs_dir, cfg.run.exp_name)
            try:
                agent, stats = module.runner(cfg, run_dir=run_dir, resume=False)
            except BaseException:
                _discard_if_unstarted(run_dir)
                raise
    except RLStoreError as err:
        print(f"rlstore train: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if run_dir is None or not any(run_dir.glob("checkpoints/checkpoint_*/*metadata.json")):
            raise  # nothing to continue from: cli.main reports the interruption
        print(f"rlstore train: interrupted; continue from the latest checkpoint with: "
              f"rlstore train --resume {run_dir}", file=sys.stderr)  # fmt: skip
        return 130
    print(_summary(stats, cfg.environment.env_id))
    return 0


def _check_device(device: str) -> None:
    """Raise ConfigError naming ``run.device`` unless torch parses it and this machine has it
    (``cuda`` on a CPU-only torch failed with an AssertionError traceback mid-run)."""
    import torch

    from rlstore._checks import as_device

    dev = as_device(device, "run.device")
    try:
        if dev.type == "cuda" and torch.cuda.is_available():
            if (dev.index or 0) >= torch.cuda.device_count():
                raise RuntimeError(f"{torch.cuda.device_count()} CUDA device(s)")
        torch.empty(0, device=dev)
    except (RuntimeError, AssertionError) as err:
        raise ConfigError(
            f"run.device: expected a device this machine has, got {device!r} ({err})"
        ) from None


def _check_env_builds(environment: Any) -> None:
    """Build and close the configured env; a keyword (or a keyword's value) its constructor
    refuses is a ConfigError naming ``environment.env_kwargs``, not a TypeError traceback."""
    from rlstore.agents.envs import make_env

    try:
        make_env(environment).close()
    except RLStoreError:  # a ValueError too: already names its setting
        raise
    except (TypeError, ValueError, KeyError) as err:
        if not environment.env_kwargs:
            raise
        raise ConfigError(
            f"environment.env_kwargs: expected keyword arguments of {environment.env_id!r}, "
            f"got {environment.env_kwargs!r} ({err})"
        ) from None


def _warn_if_untuned(args: argparse.Namespace, module: ModuleType, env_id: str) -> None:
    algo = _algo(args)
    if args.config is None:
        path, untuned = default_config(algo, module, args.env, args.agent)
        if not untuned:
            return
        stand_in = next(e for e, f in module.DEFAULT_CONFIGS.items() if f == path.name)
        log.warning(
            "no packaged %s config for %s: using the hyper-parameters tuned for %s (%s), which "
            "may not suit it; pass --config FILE or override them (--set section.key=value, "
            "--lr, --total-steps, ...)", algo, env_id, stand_in, path.name,
        )  # fmt: skip


def _discard_if_unstarted(run_dir: Path) -> None:
    """Remove a run folder its runner left with nothing but ``config.yaml`` in it."""
    if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= {"config.yaml"}:
        for p in run_dir.iterdir():
            p.unlink()
        run_dir.rmdir()
