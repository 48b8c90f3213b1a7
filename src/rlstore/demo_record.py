"""``rlstore demo-record``: record one demonstration as a PyTorchRL ``.npz`` file.

    rlstore demo-record --env rlstore/KeyDoor-v0 --policy scripted --out keydoor.npz
    rlstore demo-record --env rlstore/KeyDoor-v0 --actions 2,2,2,1 --out part.npz
    rlstore demo-record --run runs/keydoor-ppod --out agent.npz   # a trained run's policy
    rlstore demo-record --env rlstore/KeyDoor-v0 --keyboard --out mine.npz   # type the actions

The actions (an action list for a discrete task, actions typed one per line with
``--keyboard`` until the episode ends (``q`` stops without writing), the env's scripted policy: a
``scripted_actions()`` method of the unwrapped env, or the deterministic policy of a trained
run's latest checkpoint, as in its evaluation episodes, in an env built from the run's config)
are played from ``reset(seed=--seed)``; the file holds ``Observation`` (``L + 1`` rows: the
final observation included), ``Action``, ``Reward`` and ``FrameSkip``. With ``--frame-skip k``
each action is repeated ``k`` env steps (rewards summed, the observation after the last one
kept; the episode may end inside), so the demo is what an agent acting every ``k`` frames
sees; ``k`` is recorded so that loading into an env with another frame skip is refused. Every
action of a list is checked before the env is stepped; nothing is written when one is refused
or when the episode ends before the list does. Exit status 0 on success, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import gymnasium as gym
import numpy as np

from rlstore._checks import check_count
from rlstore.buffers.demo_files import load_npz_demo, save_npz_demo
from rlstore.errors import ConfigError, RLStoreError

__all__ = ["add_arguments", "run", "record", "parse_actions", "keyboard_policy"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``rlstore demo-record`` options on ``parser``."""
    parser.add_argument(
        "--env", help="gymnasium env id, e.g. rlstore/KeyDoor-v0 (with --run: the run's)"
    )
    parser.add_argument("--out", required=True, type=Path, help="the .npz file to write")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--actions", help="comma-separated discrete actions, e.g. 0,1,2")
    src.add_argument("--policy", choices=["scripted"], help="the env's scripted policy")
    src.add_argument(
        "--keyboard",
        action="store_true",
        help="type the discrete actions one per line until the episode ends (q stops)",
    )
    src.add_argument(
        "--run",
        type=Path,
        help="a PPO / PPO+D run folder: its latest checkpoint's deterministic policy",
    )
    parser.add_argument("--seed", type=int, default=0, help="reset seed (0)")
    parser.add_argument(
        "--frame-skip",
        type=int,
        default=1,
        help="repeat each action this many env steps, recorded as FrameSkip (1)",
    )


def parse_actions(text: str, n: int) -> list[int]:
    """``"0,1,2"`` as a list of ints in ``0..n-1`` (ConfigError naming the bad entry)."""
    items = [t.strip() for t in str(text).split(",")]
    if items == [""]:
        raise ConfigError("actions: expected a comma-separated list of ints, got ''")
    out = []
    for i, t in enumerate(items):
        if not (t.isascii() and t.lstrip("-").isdigit()):
            raise ConfigError(f"actions[{i}]: expected an int in 0..{n - 1}, got {t!r}")
        if not 0 <= int(t) < n:
            raise ConfigError(f"actions[{i}]: expected an int in 0..{n - 1}, got {int(t)}")
        out.append(int(t))
    return out


def keyboard_policy(n: int, stdin: TextIO, stdout: TextIO) -> Callable[[Any], int]:
    """An ``act(obs)`` that reads one action in ``0..n-1`` per line of ``stdin``, asking again
    after a bad line; ``q`` or the end of input stop the recording (ConfigError)."""
    step = 0

    def act(_obs: Any) -> int:
        nonlocal step
        while True:
            stdout.write(f"step {step}: action 0..{n - 1} (q stops): ")
            stdout.flush()
            line = stdin.readline()
            if not line or line.strip().lower() == "q":
                raise ConfigError(
                    f"keyboard: stopped after {step} actions, before the episode ended; "
                    "nothing written"
                )
            try:
                (a,) = parse_actions(line.strip(), n)
            except (ConfigError, ValueError) as exc:
                stdout.write(f"{exc}\n")
                continue
            step += 1
            return a

    return act


def _make(env_id: str) -> gym.Env[Any, Any]:
    import rlstore.envs

    rlstore.envs.register_probes()  # rlstore/Probe1-v0 ...; the others register on import
    try:
        return gym.make(env_id)
    except gym.error.Error as exc:
        raise ConfigError(f"env: cannot make {env_id!r} ({exc})") from exc


def record(
    env_id: str | None,
    out: str | Path,
    *,
    actions: str | list[int] | None = None,
    policy: str | None = None,
    run: str | Path | None = None,
    keyboard: bool = False,
    seed: int = 0,
    frame_skip: int = 1,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
) -> Path:
    """Play ``actions``, ``policy="scripted"``, the policy of the run folder ``run`` or the
    actions typed on ``stdin`` (``keyboard``) in ``env_id`` (None with ``run``: the run's env)
    and write the ``.npz``."""
    out = Path(out)
    if out.suffix != ".npz":
        raise ConfigError(f"out: expected a path ending in .npz, got {str(out)!r}")
    if out.is_dir() or not out.parent.is_dir():  # checked before the episode is played (typed)
        raise ConfigError(
            f"out: expected a file in an existing folder, got {str(out)!r} ("
            f"{'a folder' if out.is_dir() else f'no folder {str(out.parent)!r}'})"
        )
    check_count("frame_skip", frame_skip, error=ConfigError)
    check_count("seed", seed, minimum=0, error=ConfigError)
    if sum(x is not None for x in (actions, policy, run)) + bool(keyboard) != 1:
        raise ConfigError("actions/policy/run/keyboard: expected exactly one of them")
    if run is not None:
        return _record_run(Path(run), env_id, out, seed, frame_skip)
    if env_id is None:
        raise ConfigError("env: expected a gymnasium env id, got None")
    env = _make(env_id)
    try:
        space = env.action_space
        if not isinstance(space, gym.spaces.Discrete) or space.start != 0:
            raise ConfigError(f"env: expected a Discrete(n) action space, got {space}")
        if keyboard:
            act = keyboard_policy(int(space.n), stdin or sys.stdin, stdout or sys.stdout)
            obs, rew, acts = _play(env, act, None, seed, frame_skip)
            return save_npz_demo(out, obs, np.array(acts), rew, frame_skip)
        if policy is not None:
            scripted = getattr(env.unwrapped, "scripted_actions", None)
            if policy != "scripted" or scripted is None:
                raise ConfigError(f"policy: {env_id} has no {policy!r} policy")
            actions = [int(a) for a in scripted()]
        text = actions if isinstance(actions, str) else ",".join(map(str, actions or []))
        action_list = parse_actions(text, int(space.n))
        it = iter(action_list)
        obs, rew, acts = _play(env, lambda _obs: next(it), len(action_list), seed, frame_skip)
        if len(acts) < len(action_list):
            raise ConfigError(
                f"actions: the episode ended after {len(acts)} of {len(action_list)} actions"
            )
    finally:
        env.close()
    return save_npz_demo(out, obs, np.array(acts), rew, frame_skip)


def _play(
    env: gym.Env[Any, Any], act: Callable[[Any], Any], limit: int | None, seed: int, skip: int
) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """One episode from ``reset(seed)``: ``act(obs)`` repeated ``skip`` env steps per action,
    until it ends or ``limit`` actions; ``(observations (L + 1), rewards (L,), actions)``."""
    obs, _ = env.reset(seed=seed)
    observations, rewards, actions = [obs], [], []  # type: list[Any], list[float], list[Any]
    done = False
    while not done and (limit is None or len(actions) < limit):
        a = act(obs)
        total = 0.0
        for _ in range(skip):
            obs, r, terminated, truncated, _ = env.step(a)
            total += float(r)
            done = bool(terminated or truncated)
            if done:
                break
        observations.append(obs)
        rewards.append(total)
        actions.append(a)
    return np.stack(observations), np.array(rewards, np.float32), actions


def _record_run(run_dir: Path, env_id: str | None, out: Path, seed: int, skip: int) -> Path:
    """The deterministic policy of ``run_dir``'s latest checkpoint, in an env built from the
    run's config (``env_id``, if given, must be the run's)."""
    from rlstore.agents.envs import make_env
    from rlstore.agents.networks import deterministic_policy
    from rlstore.agents.ppo_checkpoint import latest_checkpoint, load_saved_checkpoint

    path = latest_checkpoint(run_dir / "checkpoints")
    if path is None:
        raise ConfigError(
            f"run: expected a PPO or PPO+D run folder with checkpoints "
            f"(checkpoints/checkpoint_NNNN/ppo_metadata.json), got {str(run_dir)!r}"
        )
    agent = load_saved_checkpoint(path, num_envs=1)
    cfg = agent.train_config
    assert cfg is not None  # set by load_saved_checkpoint (type narrowing only)
    if env_id is not None and env_id != cfg.environment.env_id:
        raise ConfigError(f"env: expected the run's {cfg.environment.env_id!r}, got {env_id!r}")
    begin, act = deterministic_policy(agent.eval())
    begin()
    env = make_env(cfg.environment)
    try:
        obs, rew, acts = _play(env, act, None, seed, skip)
    finally:
        env.close()
    return save_npz_demo(out, obs, np.stack(acts), rew, skip)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``rlstore demo-record``."""
    try:
        path = record(
            args.env,
            args.out,
            actions=args.actions,
            policy=args.policy,
            run=args.run,
            keyboard=args.keyboard,
            seed=args.seed,
            frame_skip=args.frame_skip,
        )
    except RLStoreError as exc:
        print(f"rlstore demo-record: error: {exc}", file=sys.stderr)
        return 2
    # length and return show a cut-short episode (PPO+D replays a demo's end as terminal)
    demo = load_npz_demo(path, args.frame_skip)
    print(f"wrote {path}: {demo.length} steps, return {demo.total_reward:g}")
    return 0
