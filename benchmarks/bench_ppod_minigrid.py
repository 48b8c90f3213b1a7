"""PPO+D vs plain PPO on MiniGrid DoorKey from one scripted demonstration (a longer run).

``rlstore/FlatDoorKey-<size>-v0`` (registered here) is ``MiniGrid-DoorKey-<size>-v0`` fully
observed (``FullyObsWrapper``) with the grid one-hot encoded (object type, 11, and state, 4,
per cell) plus the agent's direction (4), as a flat float32 vector; MiniGrid's own reward
``1 - 0.9 * steps / max_steps`` at the goal, 0 otherwise. The layout (key, door, wall) is drawn
anew each episode, so one demo shows the task on one layout only. With ``--layout fixed``
(``rlstore/FlatDoorKeyFixed-<size>-v0``) every reset builds the demo's layout (``reset(seed=0)``
whatever the seed): a deterministic hard-exploration task like ``rlstore/KeyDoor-v0``.

The demonstration is recorded on the layout of ``reset(seed=0)`` by a scripted policy: a
breadth-first search over the env's own dynamics (copies of the env) for the shortest action
sequence to the goal (pick up the key, open the door, walk to the goal).

Both algorithms run the same PPO settings (FC agent, 8 envs x 128 steps, lr 2.5e-4, entropy
0.01, gamma 0.99); PPO+D adds rho 0.3, phi 0 from that one demo. Reported per seed: the
deterministic evaluation return (10 episodes, fresh layouts), the mean return of the last 100
training episodes and the times.

Run::

    python benchmarks/bench_ppod_minigrid.py --size 5x5 --seeds 0 --total-steps 300000
    python benchmarks/bench_ppod_minigrid.py --size 8x8 --layout fixed --seeds 0,1

Writes ``benchmarks/results/ppod_minigrid.md``. Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing as mp
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import (  # noqa: E402
    library_versions,
    limit_threads,
    markdown_table,
    train_ppod_or_ppo,
    write_markdown,
)

N_OBJECTS, N_STATES, N_DIRS = 11, 4, 4  # states: door 0-2, the agent cell its direction


class FlatOneHot(gym.ObservationWrapper):
    """Fully observed MiniGrid grid, one-hot per cell (object, state) + direction one-hot."""

    def __init__(self, env: gym.Env) -> None:
        from minigrid.wrappers import FullyObsWrapper

        super().__init__(FullyObsWrapper(env))
        w, h = self.env.unwrapped.width, self.env.unwrapped.height
        size = w * h * (N_OBJECTS + N_STATES) + N_DIRS
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,), np.float32)

    def observation(self, obs: dict[str, Any]) -> np.ndarray:
        img = obs["image"]
        objects = np.eye(N_OBJECTS, dtype=np.float32)[img[..., 0]].reshape(-1)
        states = np.eye(N_STATES, dtype=np.float32)[img[..., 2]].reshape(-1)
        direction = np.eye(N_DIRS, dtype=np.float32)[obs["direction"]]
        return np.concatenate([objects, states, direction])


class FixedLayout(gym.Wrapper):
    """Every reset builds the layout of ``reset(seed=0)``."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return self.env.reset(seed=0, options=options)


def _make(size: str, fixed: bool = False, **kwargs: Any) -> gym.Env:
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    env = FlatOneHot(gym.make(f"MiniGrid-DoorKey-{size}-v0", **kwargs))
    return FixedLayout(env) if fixed else env


def register(size: str, fixed: bool = False) -> str:
    """Register ``rlstore/FlatDoorKey[Fixed]-<size>-v0`` (idempotent); returns the id."""
    env_id = f"rlstore/FlatDoorKey{'Fixed' if fixed else ''}-{size}-v0"
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=lambda **kw: _make(size, fixed, **kw))
    return env_id


def scripted_actions(env: gym.Env, seed: int) -> list[int]:
    """Shortest action list to the goal from ``reset(seed)`` (BFS over copies of the env)."""
    env.reset(seed=seed)

    def key(e: gym.Env) -> tuple[Any, ...]:
        u = e.unwrapped
        door = [c.is_open for c in u.grid.grid if c is not None and c.type == "door"]
        return (tuple(u.agent_pos), u.agent_dir, u.carrying is not None, tuple(door))

    queue: deque[tuple[gym.Env, list[int]]] = deque([(copy.deepcopy(env), [])])
    seen = {key(env)}
    while queue:
        e, path = queue.popleft()
        for a in (0, 1, 2, 3, 5):  # left, right, forward, pickup, toggle
            n = copy.deepcopy(e)
            _, r, terminated, truncated, _ = n.step(a)
            if terminated and r > 0:
                return [*path, a]
            if terminated or truncated or key(n) in seen:
                continue
            seen.add(key(n))
            queue.append((n, [*path, a]))
    raise RuntimeError("no path to the goal")


def record_demo(size: str, folder: Path, seed: int = 0, fixed: bool = False) -> Path:
    """Record the scripted demo of ``reset(seed)`` as ``folder/doorkey.npz``."""
    from rlstore.demo_record import record

    env = _make(size)
    actions = scripted_actions(env, seed)
    env.close()
    return record(register(size, fixed), folder / "doorkey.npz", actions=actions, seed=seed)


def run_one(
    algo: str, seed: int, size: str, steps: int, demos: str, fixed: bool = False
) -> dict[str, Any]:
    limit_threads(1)
    from rlstore.agents.ppod import PPODTrainConfig

    cfg = PPODTrainConfig.from_dict({
        "run": {"track": False, "seed": seed, "eval_episodes": 10,
                "eval_interval": 20 * 8 * 128},
        "environment": {"env_id": register(size, fixed)},
        "online": {"total_timesteps": steps, "num_envs": 8, "num_steps": 128,
                   "ent_coef": 0.01, "num_checkpoints": 0},
        "ppod": {"rho": 0.3, "phi": 0.0, "demos_dir": demos},
    })  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    stats = train_ppod_or_ppo(algo, cfg)
    return {"algo": algo, "seed": seed, "steps": stats.global_step,
            "eval": stats.evaluations[-1][1], "train": stats.mean_return(100),
            "evals": stats.evaluations, "wall": time.perf_counter() - t0,
            "cpu": time.process_time() - c0}  # fmt: skip


def _star(args: tuple[Any, ...]) -> dict[str, Any]:
    return run_one(*args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="5x5", choices=["5x5", "6x6", "8x8", "16x16"])
    p.add_argument("--seeds", default="0")
    p.add_argument("--total-steps", type=int, default=300_000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--layout", default="random", choices=["random", "fixed"])
    p.add_argument("--out", default=str(HERE / "results" / "ppod_minigrid.md"))
    args = p.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="ppod_minigrid_"))
    fixed = args.layout == "fixed"
    demo = record_demo(args.size, folder, fixed=fixed)
    tasks = [(a, int(s), args.size, args.total_steps, str(folder), fixed)
             for s in args.seeds.split(",") for a in ("ppo+d", "ppo")]  # fmt: skip
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            rows = pool.map(_star, tasks)
    else:
        rows = [_star(t) for t in tasks]
    table = markdown_table(
        ["algorithm", "seed", "env steps", "final eval return", "last-100 train return",
         "evaluations (k steps: return)", "wall s", "cpu s"],
        [[r["algo"], r["seed"], r["steps"], f"{r['eval']:.2f}", f"{r['train']:.2f}",
          ", ".join(f"{s // 1000}k: {v:.2f}" for s, v in r["evals"]),
          f"{r['wall']:.0f}", f"{r['cpu']:.0f}"] for r in rows],
    )  # fmt: skip
    print(table)
    from rlstore.buffers.demo_files import load_npz_demo

    note = (
        f"One demo, {load_npz_demo(demo).length} actions, layout of reset(seed=0); "
        f"episodes on {'that layout only' if fixed else 'fresh layouts'}."
    )
    write_markdown(
        args.out, f"PPO+D vs PPO on MiniGrid DoorKey-{args.size}, {args.layout} layout "
        "(one scripted demo)",
        [("Returns", f"{note}\n\n{table}")],
        versions=library_versions(["torch", "gymnasium", "minigrid"]),
        command="python benchmarks/bench_ppod_minigrid.py " + " ".join(argv or sys.argv[1:]),
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
