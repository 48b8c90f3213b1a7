"""Tests for rlstore.vector with real gymnasium SyncVectorEnvs over a deterministic env.

``CountEnv(env_id, term_len, time_limit)``: observation ``[env_id, episode, t]`` (float32),
reward ``t + 1`` after step ``t``; terminates when ``t`` reaches ``term_len``, and a
``TimeLimit(time_limit)`` wrapper truncates earlier when ``time_limit < term_len``. Every real
transition therefore maps ``[i, e, t] -> [i, e, t + 1]`` with reward ``t + 1``; a reset
observation ``[i, e + 1, 0]`` never appears as a ``next_obs``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import TimeLimit

from rlstore.buffers.replay import ReplayBuffer
from rlstore.errors import ConfigError, SpecError
from rlstore.vector import TransitionAdapter, autoreset_mode_of, collect, fill_buffer


class CountEnv(gym.Env):
    """Deterministic counter env (see module docstring); ``dict_obs`` adds a uint8 image."""

    def __init__(self, env_id: int, term_len: int, dict_obs: bool = False):
        self.env_id, self.term_len, self.dict_obs = env_id, term_len, dict_obs
        vec = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)
        if dict_obs:
            img = gym.spaces.Box(0, 255, (2, 2), np.uint8)
            self.observation_space = gym.spaces.Dict({"vec": vec, "img": img})
        else:
            self.observation_space = vec
        self.action_space = gym.spaces.Discrete(2)
        self.episode, self.t = -1, 0

    def _obs(self):
        vec = np.array([self.env_id, self.episode, self.t], np.float32)
        if self.dict_obs:
            return {"vec": vec, "img": np.full((2, 2), self.t % 256, np.uint8)}
        return vec

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t >= self.term_len, False, {}


def make_vec(mode: AutoresetMode, dict_obs: bool = False) -> SyncVectorEnv:
    # env 0 terminates after 3 steps; env 1 is truncated by the time limit after 4 steps
    fns = [
        lambda: TimeLimit(CountEnv(0, 3, dict_obs), max_episode_steps=10),
        lambda: TimeLimit(CountEnv(1, 100, dict_obs), max_episode_steps=4),
    ]
    return SyncVectorEnv(fns, autoreset_mode=mode)


def expected_stream(env_id: int, length: int, n: int) -> list[tuple]:
    """First ``n`` real transitions of env ``env_id``: ``(obs, next_obs, reward, term, trunc)``."""
    out = []
    e = 0
    while len(out) < n:
        for t in range(length):
            term = env_id == 0 and t + 1 == 3
            trunc = env_id == 1 and t + 1 == 4
            out.append(((env_id, e, t), (env_id, e, t + 1), float(t + 1), term, trunc))
        e += 1
    return out[:n]


def _vec(o):
    return o["vec"] if isinstance(o, dict) else o


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_collect_yields_exactly_the_real_transitions(mode: AutoresetMode) -> None:
    env = make_vec(mode)
    assert autoreset_mode_of(env) == mode
    got: list[list[tuple]] = [[], []]
    n_invalid = np.zeros(2, int)
    for tr in collect(env, lambda o: np.zeros(2, np.int64), 20, seed=0):
        for i in range(2):
            if not tr.valid[i]:
                n_invalid[i] += 1
                continue
            got[i].append(
                (
                    tuple(tr.obs[i].astype(int)),
                    tuple(tr.next_obs[i].astype(int)),
                    float(tr.reward[i]),
                    bool(tr.terminated[i]),
                    bool(tr.truncated[i]),
                )
            )
    env.close()
    for i, length in ((0, 3), (1, 4)):
        assert got[i] == expected_stream(i, length, len(got[i]))
    if mode == AutoresetMode.NEXT_STEP:
        # one pseudo-step after each done: env 0 cycle of 4 steps, env 1 cycle of 5 steps
        assert n_invalid.tolist() == [20 // 4, 20 // 5]
    else:
        assert n_invalid.tolist() == [0, 0]
    assert [len(g) for g in got] == [20 - n_invalid[0], 20 - n_invalid[1]]


def test_same_step_patches_dict_observations() -> None:
    env = make_vec(AutoresetMode.SAME_STEP, dict_obs=True)
    steps = list(collect(env, None, 8, seed=1))
    env.close()
    for tr in steps:
        np.testing.assert_array_equal(tr.next_obs["vec"][:, 2], tr.obs["vec"][:, 2] + 1)
        np.testing.assert_array_equal(tr.next_obs["img"][:, 0, 0], tr.next_obs["vec"][:, 2])
        assert tr.next_obs["img"].dtype == np.uint8


class NestedObs(gym.ObservationWrapper):
    """CountEnv's observation as a Tuple holding a Dict: ``(vec, {"t": vec[2:]})``."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        t = gym.spaces.Dict({"t": gym.spaces.Box(-1e6, 1e6, (1,), np.float32)})
        self.observation_space = gym.spaces.Tuple((env.observation_space, t))

    def observation(self, obs):
        return (obs, {"t": obs[2:]})


@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_tuple_and_nested_dict_observations_get_their_final_observation(mode) -> None:
    """SAME_STEP used to raise TypeError on a Tuple observation and, for a Dict inside a Dict,
    to keep the reset observation and add the final one under int keys."""
    fns = [lambda i=i: NestedObs(TimeLimit(CountEnv(i, 3), max_episode_steps=10)) for i in (0, 1)]
    env = SyncVectorEnv(fns, autoreset_mode=mode)
    steps = list(collect(env, None, 8, seed=0))
    env.close()
    assert sum(int(tr.terminated.sum()) for tr in steps) >= 2
    for tr in steps:
        v = tr.valid
        np.testing.assert_array_equal(tr.next_obs[0][v, 2], tr.obs[0][v, 2] + 1)
        np.testing.assert_array_equal(tr.next_obs[1]["t"][:, 0], tr.next_obs[0][:, 2])
        assert list(tr.next_obs[1]) == ["t"]


def test_adapter_errors() -> None:
    with pytest.raises(ConfigError, match="mode"):
        TransitionAdapter("sometimes", 2)
    ad = TransitionAdapter(AutoresetMode.SAME_STEP, 2)
    z = np.zeros((2, 3), np.float32)
    with pytest.raises(SpecError, match="final_obs"):
        ad.step(z, np.zeros(2), np.zeros(2), np.array([True, False]), np.zeros(2, bool), {}, z)
    with pytest.raises(SpecError, match=r"expected shape \(2,\)"):
        ad.step(z, np.zeros(2), np.zeros(2), np.zeros(3, bool), np.zeros(2, bool), {}, z)


@pytest.mark.parametrize("mode", list(AutoresetMode))
@pytest.mark.parametrize("buf_envs", [1, 2])
def test_fill_buffer_stores_only_real_transitions(mode: AutoresetMode, buf_envs: int) -> None:
    env = make_vec(mode, dict_obs=True)
    buf = ReplayBuffer(64, num_envs=buf_envs, seed=0)
    added = fill_buffer(buf, None, 50, env=env, seed=0, chunk=7)
    env.close()
    assert added == 50 and len(buf) == 50
    arr = buf.gather(np.arange(len(buf)))
    obs, nxt = arr["obs.vec"], arr["next_obs.vec"]
    np.testing.assert_array_equal(nxt[:, :2], obs[:, :2])  # same env, same episode
    np.testing.assert_array_equal(nxt[:, 2], obs[:, 2] + 1)  # never a reset observation
    np.testing.assert_array_equal(arr["reward"], nxt[:, 2])
    np.testing.assert_array_equal(arr["terminated"], (obs[:, 0] == 0) & (nxt[:, 2] == 3))
    np.testing.assert_array_equal(arr["truncated"], (obs[:, 0] == 1) & (nxt[:, 2] == 4))
    np.testing.assert_array_equal(arr["next_obs.img"][:, 0, 0], nxt[:, 2])
    if buf_envs == 2:  # env i goes to column i: column = flat index % 2
        np.testing.assert_array_equal(obs[:, 0], np.arange(50) % 2)
        counts = {tuple(o) for o in obs.astype(int).tolist()}
        assert len(counts) == 50  # no transition stored twice


def test_fill_buffer_rejects_incompatible_env() -> None:
    env = make_vec(AutoresetMode.SAME_STEP)
    with pytest.raises(ConfigError, match="multiple of the buffer's num_envs=3"):
        fill_buffer(ReplayBuffer(30, num_envs=3), None, 10, env=env)
    env.close()


def test_counts_are_ints_not_bools() -> None:
    """Issue 8: ``True`` passed as num_envs / n_samples; now a named CapacityError."""
    from rlstore.errors import CapacityError

    with pytest.raises(CapacityError, match="num_envs"):
        TransitionAdapter(AutoresetMode.SAME_STEP, True)
    env = make_vec(AutoresetMode.SAME_STEP)
    for bad in (2.5, "3", True, -1):  # were int()-ed: 2.5 took 2 steps, "3" three
        with pytest.raises(ConfigError, match="num_steps: expected an int >= 0"):
            collect(env, None, bad)
    assert len(list(collect(env, None, np.int64(0)))) == 0
    env.close()
    buf = ReplayBuffer(16)
    for kwargs, named in (({"n_samples": True}, "n_samples"), ({"n_samples": "8"}, "n_samples"),
                          ({"n_samples": 8, "num_envs": True}, "num_envs")):  # fmt: skip
        with pytest.raises(CapacityError, match=named):
            fill_buffer(buf, None, **kwargs)
    assert len(buf) == 0
