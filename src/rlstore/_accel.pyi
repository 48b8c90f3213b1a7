"""Type stub of the optional compiled module built from ``_accel.c``."""

from typing import Any

import numpy as np

MAX_DIMS: int  # most dims of an obs / action item the writer takes

class Writer:
    def __init__(
        self,
        storage: Any,
        records: np.ndarray,
        f32: type,
        np_false: Any,
        num_envs: int,
        capacity_per_env: int,
        itemsize: int,
        obs: tuple[int, int, tuple[int, ...], int, int],
        action: tuple[int, int, tuple[int, ...], int, int],
        reward_offset: int,
        terminated_offset: int,
        truncated_offset: int,
    ) -> None: ...
    def add(
        self,
        buffer: Any,
        obs: Any,
        action: Any,
        reward: Any,
        next_obs: Any,
        terminated: Any,
        truncated: Any,
    ) -> bool: ...
    def gather(
        self,
        indices: np.ndarray,
        limit: int,
        offset: int,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        next_obs: np.ndarray,
    ) -> int: ...
