"""rlstore/KeyDoor-v0: layout, transitions, termination vs truncation, seeding, the shipped demo
and the random-policy success rate (the hard-exploration property)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rlstore.envs
from rlstore.buffers.demo_files import load_npz_demo
from rlstore.envs import keydoor as K

UP, RIGHT, DOWN, LEFT = range(4)


def _make() -> gym.Env:
    return gym.make(K.KEYDOOR_ID)


def test_registered_with_time_limit_and_valid_spaces() -> None:
    rlstore.envs.register_keydoor()  # idempotent
    spec = gym.spec(K.KEYDOOR_ID)
    assert spec.max_episode_steps == 100 and spec.reward_threshold == 1.0
    check_env(K.KeyDoorEnv(), skip_render_check=True)
    assert K.START == (1, 1) and K.KEY == (8, 1) and K.DOOR == (6, 6) and K.GOAL == (1, 11)


def test_walls_block_and_door_needs_the_key() -> None:
    s = (*K.START, False, False)
    assert K.transition(s, UP) == s and K.transition(s, LEFT) == s  # walls
    assert K.transition(s, DOWN) == (2, 1, False, False)
    assert K.transition((8, 2, False, False), LEFT) == (8, 1, True, False)  # key picked up
    locked = (6, 5, False, False)
    assert K.transition(locked, RIGHT) == locked  # a locked door is a wall
    assert K.transition((6, 5, True, False), RIGHT) == (6, 6, True, True)  # opened, entered
    assert K.transition((6, 6, True, True), RIGHT) == (6, 7, True, True)
    assert K.transition((6, 7, False, True), LEFT) == (6, 6, False, True)  # an open door stays


def test_observation_encodes_cell_key_and_door() -> None:
    env = _make()
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (K.HEIGHT * K.WIDTH + 2,)
    assert obs.sum() == 1.0 and obs[K.START[0] * K.WIDTH + K.START[1]] == 1.0
    for a in [DOWN] * 7:
        obs, *_ = env.step(a)
    assert obs[-2:].tolist() == [1.0, 0.0] and obs[K.KEY[0] * K.WIDTH + K.KEY[1]] == 1.0
    with pytest.raises(gym.error.InvalidAction, match="action"):
        env.unwrapped.step(4)


def test_optimal_actions_terminate_with_reward_one() -> None:
    actions = K.optimal_actions()
    assert len(actions) == 24
    env = _make()
    env.reset(seed=5)
    rewards = []
    for i, a in enumerate(actions):
        _, r, terminated, truncated, _ = env.step(a)
        rewards.append(r)
        assert terminated == (i == len(actions) - 1) and not truncated
    assert rewards == [0.0] * 23 + [1.0]


def test_truncated_not_terminated_at_the_step_limit() -> None:
    env = _make()
    env.reset(seed=0)
    for t in range(100):
        _, r, terminated, truncated, _ = env.step(UP)  # into the wall: never reaches the goal
        assert r == 0.0 and not terminated and truncated == (t == 99)


def test_same_seed_same_trajectory() -> None:
    def rollout(seed: int) -> np.ndarray:
        env = _make()
        obs = [env.reset(seed=seed)[0]]
        env.action_space.seed(seed)
        for _ in range(50):
            obs.append(env.step(env.action_space.sample())[0])
        return np.stack(obs)

    np.testing.assert_array_equal(rollout(7), rollout(7))
    assert not np.array_equal(rollout(7), rollout(8))


def test_uniform_random_policy_almost_never_succeeds() -> None:
    # the exact transition function over 1000 episodes of at most 100 steps (fast, no gym)
    rng = np.random.default_rng(0)
    successes = 0
    for _ in range(1000):
        s = (*K.START, False, False)
        for a in rng.integers(4, size=K.MAX_STEPS):
            s = K.transition(s, int(a))
            if s[:2] == K.GOAL:
                successes += 1
                break
    assert successes < 10  # < 1%  (0 of 1000 with this seed)


def test_shipped_demo_replays_to_the_goal() -> None:
    demo = load_npz_demo(K.DEMO_FILE, frame_skip=1)
    assert demo.human and demo.total_reward == 1.0
    assert demo.actions.tolist() == K.optimal_actions()
    env = _make()
    obs, _ = env.reset(seed=0)
    for j, a in enumerate(demo.actions):
        np.testing.assert_array_equal(obs, demo.observations[j])
        obs, *_ = env.step(int(a))
