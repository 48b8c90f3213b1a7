"""``rlstore/KeyDoor-v0``: a sparse-reward hard-exploration grid (pick up a key, open a door,
reach the goal), the shipped task of PPO+D.

Fixed layout (``#`` wall, ``A`` start, ``K`` key, ``D`` locked door, ``G`` goal)::

    #############
    #A....#....G#
    #.....#.....#
    #.....#.....#
    #.....#.....#
    #.....#.....#
    #.....D.....#
    #.....#.....#
    #K....#.....#
    #############

Actions ``0 up, 1 right, 2 down, 3 left``. Walking onto the key picks it up; walking into the
door with the key opens it (and enters it), without the key the door is a wall. Reward 1 on
reaching the goal (the episode then terminates), 0 otherwise; 100 steps then truncation
(``TimeLimit``). The observation is a float32 vector: one-hot agent cell (row-major over the
whole grid) followed by ``has_key`` and ``door_open``. The task is deterministic; the seed only
seeds the spaces. The shortest solution takes 24 steps (:func:`optimal_actions`); a uniform
random policy succeeds in well under 1% of episodes (measured in the tests).

    >>> import gymnasium as gym
    >>> import rlstore.envs
    >>> env = gym.make("rlstore/KeyDoor-v0")
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, len(optimal_actions())
    ((132,), 24)
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["KeyDoorEnv", "KEYDOOR_ID", "DEMO_FILE", "LAYOUT", "optimal_actions", "register_keydoor"]

#: Gymnasium id registered by :func:`register_keydoor`.
KEYDOOR_ID = "rlstore/KeyDoor-v0"
MAX_STEPS = 100
#: The shipped demonstration (the optimal actions, PyTorchRL ``.npz``, ``FrameSkip`` 1).
DEMO_FILE = Path(__file__).parent / "demos" / "KeyDoor-v0.npz"
LAYOUT: tuple[str, ...] = (
    "#############",
    "#A....#....G#",
    "#.....#.....#",
    "#.....#.....#",
    "#.....#.....#",
    "#.....#.....#",
    "#.....D.....#",
    "#.....#.....#",
    "#K....#.....#",
    "#############",
)
MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))  # up, right, down, left

State = tuple[int, int, bool, bool]  # row, col, has_key, door_open


def _find(ch: str) -> tuple[int, int]:
    return next((r, row.index(ch)) for r, row in enumerate(LAYOUT) if ch in row)


START, KEY, DOOR, GOAL = (_find(c) for c in "AKDG")
HEIGHT, WIDTH = len(LAYOUT), len(LAYOUT[0])


def transition(state: State, action: int) -> State:
    """The next state after ``action`` (a pure function of the layout)."""
    r, c, has_key, door_open = state
    dr, dc = MOVES[action]
    nr, nc = r + dr, c + dc
    cell = LAYOUT[nr][nc]
    if cell == "#" or (cell == "D" and not (has_key or door_open)):
        return state
    if cell == "D":
        door_open = True
    return nr, nc, has_key or (nr, nc) == KEY, door_open


def optimal_actions() -> list[int]:
    """A shortest action list from the start to the goal (breadth-first search)."""
    start: State = (*START, False, False)
    parent: dict[State, tuple[State, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        s = queue.popleft()
        if s[:2] == GOAL:
            actions: list[int] = []
            while (link := parent[s]) is not None:
                s, a = link
                actions.append(a)
            return actions[::-1]
        for a in range(4):
            n = transition(s, a)
            if n not in parent:
                parent[n] = (s, a)
                queue.append(n)
    raise AssertionError("unreachable goal")  # pragma: no cover - the layout is fixed


class KeyDoorEnv(gym.Env[np.ndarray, np.int64]):
    """The key-door grid (see the module docstring); wrap with ``TimeLimit`` via ``gym.make``."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (HEIGHT * WIDTH + 2,), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.state: State = (*START, False, False)

    def _obs(self) -> np.ndarray:
        r, c, has_key, door_open = self.state
        obs = np.zeros(HEIGHT * WIDTH + 2, np.float32)
        obs[r * WIDTH + c] = 1.0
        obs[-2:] = (has_key, door_open)
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = (*START, False, False)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise gym.error.InvalidAction(f"action: expected one of 0..3, got {action!r}")
        self.state = transition(self.state, int(action))
        done = self.state[:2] == GOAL
        return self._obs(), float(done), done, False, {}

    @staticmethod
    def scripted_actions() -> list[int]:
        """The scripted (optimal) policy used by ``rlstore demo-record --policy scripted``."""
        return optimal_actions()


def register_keydoor() -> None:
    """Register ``rlstore/KeyDoor-v0`` (100 steps, reward threshold 1); idempotent."""
    if KEYDOOR_ID not in gym.registry:
        gym.register(
            id=KEYDOOR_ID,
            entry_point="rlstore.envs.keydoor:KeyDoorEnv",
            max_episode_steps=MAX_STEPS,
            reward_threshold=1.0,
        )
