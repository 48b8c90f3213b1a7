"""CartPoleNoVel-v1: CartPole-v1's dynamics with the velocities zeroed in every observation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rlstore.envs
from rlstore.agents.envs import check_env_id
from rlstore.agents.ppo_config import EnvironmentConfig


def test_registered_on_import_with_cartpole_limits() -> None:
    rlstore.envs.register_masked()  # idempotent: a second registration changes nothing
    spec = gym.spec("CartPoleNoVel-v1")
    assert spec.max_episode_steps == 500 and spec.reward_threshold == 475.0
    check_env_id(EnvironmentConfig(env_id="CartPoleNoVel-v1"))  # what `--env` goes through


# CartPole's own observation space has unbounded velocity entries (check_env warns about that)
@pytest.mark.filterwarnings("ignore:.*observation space m.* value is .*infinity")
def test_same_trajectory_as_cartpole_with_velocities_zeroed() -> None:
    masked, full = gym.make("CartPoleNoVel-v1"), gym.make("CartPole-v1")
    check_env(masked.unwrapped, skip_render_check=True)
    o_m, _ = masked.reset(seed=3)
    o_f, _ = full.reset(seed=3)
    rng = np.random.default_rng(0)
    steps = 0
    while True:
        assert o_m.dtype == np.float32 and o_m.shape == (4,)
        assert o_m[[1, 3]].tolist() == [0.0, 0.0]
        assert np.array_equal(o_m[[0, 2]], o_f[[0, 2]])
        a = int(rng.integers(2))
        o_m, r_m, te_m, tr_m, _ = masked.step(a)
        o_f, r_f, te_f, tr_f, _ = full.step(a)
        assert (r_m, te_m, tr_m) == (r_f, te_f, tr_f)
        steps += 1
        if te_m or tr_m:
            break
    assert steps > 1 and o_f[[1, 3]].any()  # the full observation did carry velocities
