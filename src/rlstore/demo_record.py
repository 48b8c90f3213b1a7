"""``rlstore demo-record``: record one demonstration as a PyTorchRL ``.npz`` file.

    rlstore demo-record --env rlstore/KeyDoor-v0 --policy scripted --out keydoor.npz
    rlstore demo-record --env rlstore/KeyDoor-v0 --actions 2,2,2,1 --out part.npz

The actions (an action list for a discrete task, or the env's scripted policy: a
``scripted_actions()`` method of the unwrapped env) are replayed from ``reset(seed=--seed)``;
the file holds ``Observation`` (``L + 1`` rows: the final observation included), ``Action``,
``Reward`` and ``FrameSkip`` (``--frame-skip``: the frame skip the env applies, recorded so that
loading into an env with another one is refused). Every action is checked before the env is
stepped; nothing is written when one is refused or when the episode ends before the list does.
Exit status 0 on success, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlstore.buffers.demo_files import save_npz_demo
from rlstore.errors import ConfigError, RLStoreError

__all__ = ["add_arguments", "run", "record", "parse_actions"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``rlstore demo-record`` options on ``parser``."""
    parser.add_argument("--env", required=True, help="gymnasium env id, e.g. rlstore/KeyDoor-v0")
    parser.add_argument("--out", required=True, type=Path, help="the .npz file to write")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--actions", help="comma-separated discrete actions, e.g. 0,1,2")
    src.add_argument("--policy", choices=["scripted"], help="the env's scripted policy")
    parser.add_argument("--seed", type=int, default=0, help="reset seed (0)")
    parser.add_argument("--frame-skip", type=int, default=1, help="the env's frame skip (1)")


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


def _make(env_id: str) -> gym.Env[Any, Any]:
    import rlstore.envs  # noqa: F401  (registers rlstore's envs)

    try:
        return gym.make(env_id)
    except gym.error.Error as exc:
        raise ConfigError(f"env: cannot make {env_id!r} ({exc})") from exc


def record(
    env_id: str,
    out: str | Path,
    *,
    actions: str | list[int] | None = None,
    policy: str | None = None,
    seed: int = 0,
    frame_skip: int = 1,
) -> Path:
    """Replay ``actions`` (or ``policy="scripted"``) in ``env_id`` and write the ``.npz``."""
    out = Path(out)
    if out.suffix != ".npz":
        raise ConfigError(f"out: expected a path ending in .npz, got {str(out)!r}")
    if isinstance(frame_skip, bool) or not isinstance(frame_skip, int) or frame_skip < 1:
        raise ConfigError(f"frame_skip: expected an int >= 1, got {frame_skip!r}")
    if (actions is None) == (policy is None):
        raise ConfigError("actions/policy: expected exactly one of them")
    env = _make(env_id)
    try:
        space = env.action_space
        if not isinstance(space, gym.spaces.Discrete) or space.start != 0:
            raise ConfigError(f"env: expected a Discrete(n) action space, got {space}")
        if policy is not None:
            scripted = getattr(env.unwrapped, "scripted_actions", None)
            if policy != "scripted" or scripted is None:
                raise ConfigError(f"policy: {env_id} has no {policy!r} policy")
            actions = [int(a) for a in scripted()]
        text = actions if isinstance(actions, str) else ",".join(map(str, actions or []))
        actions = parse_actions(text, int(space.n))
        obs, _ = env.reset(seed=seed)
        observations, rewards = [obs], np.zeros(len(actions), np.float32)
        for t, a in enumerate(actions):
            obs, r, terminated, truncated, _ = env.step(a)
            observations.append(obs)
            rewards[t] = r
            if (terminated or truncated) and t < len(actions) - 1:
                raise ConfigError(
                    f"actions: the episode ended after {t + 1} of {len(actions)} actions"
                )
    finally:
        env.close()
    return save_npz_demo(out, np.stack(observations), np.array(actions), rewards, frame_skip)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``rlstore demo-record``."""
    try:
        path = record(
            args.env,
            args.out,
            actions=args.actions,
            policy=args.policy,
            seed=args.seed,
            frame_skip=args.frame_skip,
        )
    except RLStoreError as exc:
        print(f"rlstore demo-record: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0
