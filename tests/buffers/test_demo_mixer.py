"""Tests of the PPO+D rollout mixer: hand-built replays, naive per-slot references, and the
batched :class:`DemoMixer` against the plain per-slot loop it replaced (``ReferenceDemoMixer``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstore.buffers import _demo_rows
from rlstore.buffers.demo_mixer import ENV, REWARD_DEMO, VALUE_DEMO, DemoMixer, MixedStep
from rlstore.buffers.demos import Demo, DemoStore
from rlstore.errors import ConfigError, EmptyBufferError, SpecError


def demo(rewards, *, human=False, max_value=float("-inf"), obs_dim=2, offset=0.0):
    """A demo whose observation j is [offset + j, ...] and action j is j."""
    r = np.asarray(rewards, dtype=np.float32)
    obs = offset + np.repeat(np.arange(len(r), dtype=np.float32)[:, None], obs_dim, axis=1)
    return Demo(obs, np.arange(len(r)), r, human=human, max_value=max_value)


# ---------------------------------------------------------------------- mixer
class CountingEnv:
    """N slots; obs = [slot, t]; every slot's episode ends after `ep_len` steps, reward 1 at the
    end (so each env episode is a reward candidate)."""

    def __init__(self, n, ep_len):
        self.n, self.ep_len, self.t = n, ep_len, np.zeros(n, dtype=int)

    def obs(self):
        return np.stack([np.arange(self.n), self.t], axis=1).astype(np.float32)

    def step(self):
        self.t += 1
        done = self.t == self.ep_len
        reward = done.astype(np.float32)
        self.t[done] = 0
        return reward, done, self.obs()


def run_mixer(mixer, env, steps, action_fn=lambda t: np.full(2, 7)):
    outs = []
    mixer.reset(env.obs())
    for t in range(steps):
        reward, done, nobs = env.step()
        value = np.full(env.n, float(t))
        outs.append(mixer.step(action_fn(t), reward, done, np.zeros(env.n, bool), nobs, value))
    return outs


def test_mixer_without_demos_is_a_passthrough():
    env = CountingEnv(2, 3)
    ref_env = CountingEnv(2, 3)
    store = DemoStore(capacity=5, rho=0.0, phi=0.0, seed=0)
    outs = run_mixer(DemoMixer(store, 2, track_episodes=False), env, 7)
    obs = ref_env.obs()
    for out in outs:
        reward, done, nobs = ref_env.step()
        np.testing.assert_array_equal(out.obs, obs)
        np.testing.assert_array_equal(out.next_obs, nobs)
        np.testing.assert_array_equal(out.reward, reward)
        np.testing.assert_array_equal(out.terminated, done)
        assert not out.from_demo.any()
        np.testing.assert_array_equal(out.new_episode, np.where(done, ENV, -1))
        obs = nobs


def test_mixer_rho_one_replays_the_reward_demo_every_episode():
    store = DemoStore(capacity=5, rho=1.0, phi=0.0, seed=0)
    d = store.add_initial(demo([0.0, 0.0, 5.0], human=True, offset=100.0))  # L = 3
    mixer = DemoMixer(store, 2, track_episodes=False)
    outs = run_mixer(mixer, CountingEnv(2, 2), 9)
    # steps 0-1: env episode (ends at t=1); then demo steps t=2,3,4 and t=5,6,7, then t=8
    for t, out in enumerate(outs):
        j = (t - 2) % 3
        if t < 2:
            assert not out.from_demo.any()
            continue
        assert out.from_demo.all()
        np.testing.assert_array_equal(out.action, [j, j])
        np.testing.assert_array_equal(out.reward, [d.rewards[j]] * 2)
        np.testing.assert_array_equal(out.obs, np.full((2, 2), 100.0 + j))
        assert out.terminated.tolist() == [j == 2] * 2 and not out.truncated.any()
        nxt = 100.0 + (j + 1) % 3
        np.testing.assert_array_equal(out.next_obs, np.full((2, 2), nxt))
    assert [int(o.new_episode[0]) for o in outs] == [-1, 1, -1, -1, 1, -1, -1, 1, -1]


def test_mixer_tracks_episodes_and_value_demo_max_values():
    store = DemoStore(capacity=5, rho=0.0, phi=1.0, reward_threshold=100.0, seed=0)
    mixer = DemoMixer(store, 1)
    env = CountingEnv(1, 3)
    mixer.reset(env.obs())
    values = [0.5, 4.0, 1.0]
    for t in range(3):  # one env episode, offered as a value demo (total 1 < 100)
        r, done, nobs = env.step()
        out = mixer.step(np.array([t]), r, done, np.zeros(1, bool), nobs, np.array([values[t]]))
    (vd,) = store.value_demos
    assert vd.max_value == 4.0 and vd.actions.tolist() == [0, 1, 2]
    np.testing.assert_array_equal(vd.observations, [[0, 0], [0, 1], [0, 2]])
    assert out.new_episode[0] == VALUE_DEMO  # phi = 1: the next episode replays it
    replay_values = [2.0, -1.0, 0.25]
    for t in range(3):
        r, done, nobs = env.step()
        out = mixer.step(np.array([9]), r, done, np.zeros(1, bool), nobs, replay_values[t : t + 1])
        assert out.from_demo[0] and out.action[0] == t
    assert store.value_demos[0].max_value == 2.0  # refreshed to the max seen in the replay


def test_mixer_frame_stack_rebuilds_stacks_like_a_loop():
    store = DemoStore(capacity=5, rho=1.0, phi=0.0, seed=0)
    frames = np.arange(4, dtype=np.float32)[:, None] * 10.0  # frames (1,): 0, 10, 20, 30
    store.add_initial(Demo(frames, np.arange(4), np.zeros(4, np.float32)))
    mixer = DemoMixer(store, 1, frame_stack=3, track_episodes=False)
    mixer.reset(np.zeros((1, 3), np.float32))
    out = mixer.step(
        np.array([0]), np.zeros(1), np.array([True]), np.zeros(1, bool), np.zeros((1, 3))
    )
    seen = [out.next_obs[0].tolist()]
    for _ in range(3):
        out = mixer.step(np.array([0]), np.zeros(1), np.zeros(1, bool), np.zeros(1, bool),
                         np.zeros((1, 3)))  # fmt: skip
        seen.append(out.next_obs[0].tolist())
    stack, expected = [], []
    for f in frames[:, 0].tolist():  # naive: first frame repeated, then shift left and append
        stack = [f] * 3 if not stack else stack[1:] + [f]
        expected.append(stack)
    assert seen == expected


def test_mixer_is_deterministic_given_the_seed_and_resets_envs_after_demos():
    def rollout(seed):
        store = DemoStore(capacity=8, rho=0.3, phi=0.3, reward_threshold=5.0, seed=seed)
        store.add_initial(demo([0.0, 1.0], offset=50.0))
        calls = []

        def reset_env(i):
            calls.append(i)
            return np.array([i, -1.0], np.float32)

        outs = run_mixer(DemoMixer(store, 2, reset_env=reset_env), CountingEnv(2, 2), 60)
        return outs, calls

    a, calls = rollout(11)
    b, _ = rollout(11)
    for x, y in zip(a, b, strict=True):
        for fx, fy in zip(x, y, strict=True):
            np.testing.assert_array_equal(fx, fy)
    codes = np.stack([o.new_episode for o in a])
    assert {ENV, REWARD_DEMO, VALUE_DEMO} <= set(codes.ravel().tolist())
    # each "env" start right after a demo's last step called reset_env for that slot
    after_demo = [
        i for t, o in enumerate(a) for i in range(2) if o.from_demo[i] and o.new_episode[i] == ENV
    ]
    assert calls == after_demo and len(calls) > 0
    for o in a:
        for i in np.flatnonzero(o.from_demo & (o.new_episode == ENV)):
            np.testing.assert_array_equal(o.next_obs[i], [i, -1.0])


def test_mixer_input_errors():
    mixer = DemoMixer(DemoStore(seed=0), 2)
    with pytest.raises(EmptyBufferError):
        mixer.step(np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros((2, 1)))
    with pytest.raises(SpecError, match="obs"):
        mixer.reset(np.zeros((3, 1)))
    mixer.reset(np.zeros((2, 1)))
    with pytest.raises(SpecError, match="next_obs"):
        mixer.step(np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2), np.zeros((2, 4)))
    with pytest.raises(ConfigError):
        DemoMixer(DemoStore(), 0)


def test_mixer_truncation_passes_through_env_slots_and_is_cleared_on_demo_steps():
    store = DemoStore(capacity=5, rho=1.0, phi=0.0, reward_threshold=10.0, seed=0)
    store.add_initial(demo([0.0, 0.0], obs_dim=3))
    mixer = DemoMixer(store, 2)
    mixer.reset(np.zeros((2, 1)))
    with pytest.raises(SpecError, match="like the env's"):
        mixer.step(np.zeros(2), np.zeros(2), np.ones(2, bool), np.zeros(2, bool), np.ones((2, 1)))
    store.reward_demos[0] = demo([0.0, 0.0], obs_dim=1)
    mixer.reset(np.zeros((2, 1)))
    no, yes_no = np.zeros(2, bool), np.array([True, False])
    # slot 0 is truncated (time limit): its episode ends and is offered; slot 1 goes on
    out = mixer.step(np.zeros(2), np.zeros(2), no, yes_no, np.ones((2, 1)), np.array([3.0, 0.0]))
    assert out.truncated.tolist() == [True, False] and not out.terminated.any()
    assert out.new_episode.tolist() == [REWARD_DEMO, -1]
    assert [d.max_value for d in store.value_demos] == [3.0]  # total 0 < 10: a value demo
    # slot 0 replays the demo: a truncation reported by the real env underneath is dropped
    out = mixer.step(np.zeros(2), np.zeros(2), no, np.ones(2, bool), np.ones((2, 1)))
    assert out.from_demo.tolist() == [True, False] and out.truncated.tolist() == [False, True]


class RecordingStore(DemoStore):
    """A store that records every offered episode (and keeps none)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.offers = []

    def offer_episode(self, observations, actions, rewards, max_value=float("-inf")):
        self.offers.append((observations.copy(), actions.copy(), rewards.copy(), max_value))
        return "rejected"


@pytest.mark.parametrize("rho, frame_stack", [(0.0, 1), (0.5, 1), (0.5, 2)])
def test_offered_episodes_match_a_per_slot_loop_over_the_outputs(rho, frame_stack):
    store = RecordingStore(capacity=5, rho=rho, phi=0.0, seed=2)
    store.reward_demos.append(store._register(demo([0.0, 1.0, 0.0], obs_dim=1, offset=9.0)))
    n, T = 3, 40
    rng = np.random.default_rng(0)
    mixer = DemoMixer(store, n, frame_stack=frame_stack)
    obs = rng.normal(size=(n, 2 if frame_stack == 2 else 1))
    mixer.reset(obs)
    expected, current = [], [([], [], [], -np.inf) for _ in range(n)]
    for _ in range(T):
        act, rew = rng.integers(0, 5, n), rng.normal(size=n)
        term, trunc = rng.random(n) < 0.2, rng.random(n) < 0.1
        value = rng.normal(size=n)
        out = mixer.step(act, rew, term, trunc, rng.normal(size=obs.shape), value)
        for i in range(n):  # naive reference: one list per slot, fed from the outputs
            if out.from_demo[i]:
                continue
            o, a, r, m = current[i]
            frame = out.obs[i][-1:] if frame_stack == 2 else out.obs[i]
            current[i] = (o + [frame], a + [out.action[i]], r + [out.reward[i]], max(m, value[i]))
            if out.terminated[i] or out.truncated[i]:
                expected.append(current[i])
                current[i] = ([], [], [], -np.inf)
    assert len(store.offers) == len(expected) > 5
    for (o, a, r, m), (eo, ea, er, em) in zip(store.offers, expected, strict=True):
        np.testing.assert_array_equal(o, np.stack(eo))
        np.testing.assert_array_equal(a, ea)
        np.testing.assert_array_equal(r, np.array(er, np.float32))
        assert m == em
    assert len(mixer._hist) <= T  # history trimmed to the oldest open episode


def test_re_exports_from_demos_module():
    from rlstore.buffers import demos

    assert demos.DemoMixer is DemoMixer and demos.MixedStep is MixedStep
    assert (demos.ENV, demos.REWARD_DEMO, demos.VALUE_DEMO) == (ENV, REWARD_DEMO, VALUE_DEMO)


# ---------------------------------------------------------------------- per-slot reference
@dataclass
class _Replay:
    demo: Demo
    kind: str
    pos: int = 0
    max_value: float = float("-inf")
    stack: np.ndarray | None = None


class ReferenceDemoMixer:
    """The per-slot DemoMixer as first written (one _Replay object per replaying slot, a list of
    per-step tuples as history, np.stack on offer): the obviously-correct twin of DemoMixer."""

    def __init__(self, store, num_envs, *, reset_env=None, frame_stack=1, track_episodes=True):
        self.store, self.num_envs, self.reset_env = store, num_envs, reset_env
        self.frame_stack, self.track_episodes = frame_stack, track_episodes
        self._obs = None
        self.reset_tracking()

    def reset_tracking(self):
        self._replays = [None] * self.num_envs
        self._hist = []
        self._t = self._base = 0
        self._ep_start = np.zeros(self.num_envs, dtype=np.int64)
        self._ep_max = np.full(self.num_envs, -np.inf)

    def _frames(self, obs):
        return obs if self.frame_stack == 1 else obs[:, -(obs.shape[1] // self.frame_stack) :]

    def _demo_obs(self, r):
        frame = r.demo.observations[r.pos]
        if self.frame_stack == 1:
            return frame
        if r.stack is None:
            r.stack = np.concatenate([frame] * self.frame_stack, axis=0)
        else:
            r.stack = np.concatenate([r.stack[frame.shape[0] :], frame], axis=0)
        return r.stack

    def replaying(self):
        return np.array([r is not None for r in self._replays])

    def reset(self, obs):
        self._obs = np.asarray(obs).copy()
        self.reset_tracking()
        return self._obs.copy()

    def _begin(self, i, env_obs, after_demo, next_t):
        source = self.store.sample_source()
        self._ep_max[i] = -np.inf
        if source == "env":
            self._replays[i], self._ep_start[i] = None, next_t
            if after_demo and self.reset_env is not None:
                env_obs = self.reset_env(i)
            return np.asarray(env_obs), ENV
        r = _Replay(self.store.sample_demo(source), source)
        self._replays[i], self._ep_start[i] = r, np.iinfo(np.int64).max
        return self._demo_obs(r), REWARD_DEMO if source == "reward_demo" else VALUE_DEMO

    def begin_episode(self, i):
        obs, code = self._begin(i, self._obs[i], after_demo=True, next_t=self._t)
        self._obs[i] = obs
        return self._obs[i].copy(), code

    def _offer(self, i):
        rows = self._hist[self._ep_start[i] - self._base :]
        obs, act, rew = (np.stack([h[k][i] for h in rows]) for k in range(3))
        self.store.offer_episode(obs, act, rew, float(self._ep_max[i]))

    def step(self, action, reward, terminated, truncated, next_obs, value=None):
        n = self.num_envs
        action, next_obs = np.asarray(action), np.asarray(next_obs)
        reward = np.asarray(reward, dtype=np.float32).reshape(n)
        term = np.asarray(terminated, dtype=bool).reshape(n).copy()
        trunc = np.asarray(truncated, dtype=bool).reshape(n).copy()
        vals = np.full(n, -np.inf) if value is None else np.asarray(value, float).reshape(n)
        obs, act, rew, nxt = self._obs.copy(), action.copy(), reward.copy(), next_obs.copy()
        replay = self.replaying()
        new_ep = np.full(n, -1, dtype=np.int8)
        if self.track_episodes:
            self._hist.append((self._frames(obs).copy(), action.copy(), reward.copy()))
            self._ep_max = np.where(replay, self._ep_max, np.maximum(self._ep_max, vals))
        t = self._t
        for i in range(n):
            if not replay[i]:
                continue
            r = self._replays[i]
            act[i], rew[i] = r.demo.actions[r.pos], r.demo.rewards[r.pos]
            r.max_value = max(r.max_value, float(vals[i]))
            trunc[i], term[i] = False, r.pos + 1 == r.demo.length
            if not term[i]:
                r.pos += 1
                nxt[i] = self._demo_obs(r)
                continue
            if r.kind == "value_demo" and value is not None:
                self.store.update_max_value(r.demo.demo_id, r.max_value)
            nxt[i], new_ep[i] = self._begin(i, next_obs[i], after_demo=True, next_t=t + 1)
        for i in range(n):
            if not replay[i] and (term[i] or trunc[i]):
                if self.track_episodes:
                    self._offer(i)
                nxt[i], new_ep[i] = self._begin(i, next_obs[i], after_demo=False, next_t=t + 1)
        self._t += 1
        keep_from = min(int(self._ep_start.min()), self._t)
        del self._hist[: max(0, keep_from - self._base)]
        self._base = max(self._base, keep_from)
        self._obs = nxt.copy()
        return MixedStep(obs, act, rew, term, trunc, nxt, replay, new_ep)


# ---------------------------------------------------------------------- batched vs reference
@dataclass(frozen=True)
class Scenario:
    seed: int
    num_envs: int
    frame_stack: int
    track_episodes: bool
    with_value: bool
    with_reset_env: bool
    rho: float
    phi: float
    done_p: float
    act_shape: tuple[int, ...]
    begin_p: float  # probability per step of an explicit begin_episode (PPODBuffer.sample_demo)


def make_store(sc: Scenario) -> DemoStore:
    """Small capacity (evictions while replaying) and a threshold between the demo totals."""
    store = DemoStore(capacity=5, rho=sc.rho, phi=sc.phi, alpha=2.0, reward_threshold=1.5,
                      seed=sc.seed)  # fmt: skip
    rng = np.random.default_rng(100 + sc.seed)
    c = 2
    for k in range(3):
        L = int(rng.integers(1, 12))
        obs = rng.normal(size=(L, c)).astype(np.float32)
        act = rng.integers(0, 4, (L, *sc.act_shape))
        rew = rng.choice([0.0, 0.0, 1.0, 2.0], L).astype(np.float32)
        d = Demo(obs, act, rew, human=k == 0)
        if k < 2:
            store.add_initial(d)
        else:
            store.value_demos.append(store._register(dataclasses.replace(d, max_value=0.5)))
    return store


def run_pair(sc: Scenario, steps: int) -> tuple[list, list, DemoStore, DemoStore, DemoMixer]:
    """Feed one random env stream to a batched and a reference mixer over twin stores."""
    n, c = sc.num_envs, 2
    obs_dim = c * sc.frame_stack
    stores = make_store(sc), make_store(sc)
    logs: tuple[list, list] = ([], [])

    def resetter(log):
        def reset_env(i):
            log.append(("reset", i))
            return np.full(obs_dim, -1.0 - i, np.float32)

        return reset_env

    mixers = [
        cls(store, n, reset_env=resetter(log) if sc.with_reset_env else None,
            frame_stack=sc.frame_stack, track_episodes=sc.track_episodes)
        for cls, store, log in zip((DemoMixer, ReferenceDemoMixer), stores, logs, strict=True)
    ]  # fmt: skip
    rng = np.random.default_rng(sc.seed)
    obs0 = rng.normal(size=(n, obs_dim)).astype(np.float32)
    for m, log in zip(mixers, logs, strict=True):
        log.append(m.reset(obs0))
    for _ in range(steps):
        act = rng.integers(0, 4, (n, *sc.act_shape))
        rew = rng.choice([-1.0, 0.0, 0.5, 2.0], n)
        term = rng.random(n) < sc.done_p
        trunc = rng.random(n) < sc.done_p / 2
        nobs = rng.normal(size=(n, obs_dim)).astype(np.float32)
        value = np.round(rng.normal(size=n), 1) if sc.with_value else None  # ties happen
        begin = int(rng.integers(n)) if rng.random() < sc.begin_p else None
        for m, log in zip(mixers, logs, strict=True):
            log.append(m.step(act, rew, term, trunc, nobs, value))
            if begin is not None:
                log.append(m.begin_episode(begin))
    return logs[0], logs[1], stores[0], stores[1], cast(DemoMixer, mixers[0])


def assert_same(a: Any, b: Any, where: str) -> None:
    if isinstance(a, np.ndarray | np.generic):
        assert isinstance(b, np.ndarray | np.generic), where
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype)
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, tuple | list):
        assert type(a) is type(b) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    else:
        assert a == b, (where, a, b)


scenarios = st.builds(
    Scenario,
    seed=st.integers(0, 10_000),
    num_envs=st.integers(1, 6),
    frame_stack=st.sampled_from([1, 3]),
    track_episodes=st.booleans(),
    with_value=st.booleans(),
    with_reset_env=st.booleans(),
    rho=st.sampled_from([0.0, 0.3, 0.6]),
    phi=st.sampled_from([0.0, 0.3]),
    done_p=st.sampled_from([0.05, 0.3]),
    act_shape=st.sampled_from([(), (1,)]),
    begin_p=st.sampled_from([0.0, 0.1]),
)


@settings(max_examples=40, deadline=None)
@given(scenarios)
def test_batched_mixer_matches_the_per_slot_reference(sc):
    fast, ref, fast_store, ref_store, _ = run_pair(sc, 60)
    assert_same(fast, ref, "outputs")
    # same offers, evictions, MaxValue updates, annealing and Generator state
    assert_same(fast_store.state_dict(), ref_store.state_dict(), "store")


@pytest.mark.parametrize("frame_stack", [1, 3])
def test_batched_mixer_matches_the_reference_on_long_replay_heavy_runs(frame_stack, monkeypatch):
    """Many demo starts: the demo bank must rebuild, the history must grow and slide."""
    calls = {"rebuild": 0}
    rebuild = _demo_rows.DemoBank.rebuild

    def counting_rebuild(self, demos):
        calls["rebuild"] += 1
        rebuild(self, demos)

    monkeypatch.setattr(_demo_rows.DemoBank, "rebuild", counting_rebuild)
    sc = Scenario(seed=3, num_envs=8, frame_stack=frame_stack, track_episodes=True,
                  with_value=True, with_reset_env=True, rho=0.3, phi=0.3, done_p=0.08,
                  act_shape=(1,), begin_p=0.2)  # fmt: skip
    fast, ref, fast_store, ref_store, mixer = run_pair(sc, 400)
    assert_same(fast, ref, "outputs")
    assert_same(fast_store.state_dict(), ref_store.state_dict(), "store")
    steps = [o for o in fast if isinstance(o, MixedStep)]
    assert sum(int((o.new_episode > ENV).sum()) for o in steps) > 50  # replay-heavy
    assert calls["rebuild"] >= 2
    bank = mixer._bank
    assert bank is not None and bank.obs.shape[0] <= max(64, 2 * 8 * 12)  # bounded by live demos


def test_action_rows_must_keep_their_shape_while_an_episode_is_open():
    mixer = DemoMixer(DemoStore(seed=0), 2)
    mixer.reset(np.zeros((2, 1)))
    no = np.zeros(2, bool)
    mixer.step(np.zeros((2, 1)), np.zeros(2), no, no, np.ones((2, 1)))
    with pytest.raises(SpecError, match="action: expected rows shaped \\(1,\\)"):
        mixer.step(np.zeros((2, 3)), np.zeros(2), no, no, np.ones((2, 1)))
    assert len(mixer._hist) == 1  # the rejected step changed nothing


def test_pickled_mixer_continues_like_the_original():
    import pickle

    sc = Scenario(seed=5, num_envs=4, frame_stack=1, track_episodes=True, with_value=True,
                  with_reset_env=False, rho=0.5, phi=0.3, done_p=0.2, act_shape=(),
                  begin_p=0.0)  # fmt: skip
    *_, mixer = run_pair(sc, 30)
    assert mixer.replaying().any() and mixer._bank is not None
    clone = pickle.loads(pickle.dumps(mixer))
    assert clone._bank is None and len(clone._hist) == len(mixer._hist)
    rng = np.random.default_rng(0)
    for _ in range(40):
        act, rew, term = rng.integers(0, 4, 4), rng.normal(size=4), rng.random(4) < 0.2
        nobs, value = rng.normal(size=(4, 2)).astype(np.float32), rng.normal(size=4)
        args = (act, rew, term, np.zeros(4, bool), nobs, value)
        assert_same(clone.step(*args), mixer.step(*args), "step")
    assert_same(clone.store.state_dict(), mixer.store.state_dict(), "store")


def test_state_dict_round_trip_continues_identically() -> None:
    """A mixer (and its store) restored from their states mid-run, replays in progress and
    open env episodes included, emits what the original does from then on."""
    from rlstore.errors import CheckpointError

    def build() -> DemoMixer:
        store = DemoStore(capacity=5, rho=0.4, phi=0.3, seed=7)
        store.add_initial(demo([0.0, 0.0, 1.0], human=True))
        return DemoMixer(store, num_envs=3)

    rng = np.random.default_rng(0)
    steps = [(rng.integers(0, 3, 3), 1.0 * (rng.random(3) < 0.05), rng.random(3) < 0.2,
              rng.random(3) < 0.1, rng.random((3, 2)).astype(np.float32), rng.random(3))
             for _ in range(80)]  # fmt: skip
    a = build()
    a.reset(np.zeros((3, 2), np.float32))
    for s in steps[:40]:
        a.step(*s[:5], value=s[5])
    assert a.replaying().any() and len(a.store.value_demos) > 0
    b = build()
    b.store.load_state_dict(a.store.state_dict())
    b.load_state_dict(a.state_dict())
    for s in steps[40:]:
        out_a, out_b = a.step(*s[:5], value=s[5]), b.step(*s[:5], value=s[5])
        for x, y in zip(out_a, out_b, strict=True):
            np.testing.assert_array_equal(x, y)
    assert [d.demo_id for d in a.store.value_demos] == [d.demo_id for d in b.store.value_demos]
    bad = a.state_dict()
    bad["pos"] = bad["pos"][:2]
    with pytest.raises(CheckpointError, match="DemoMixer state"):
        build().load_state_dict(bad)


# ---------------------------------------------------------------------- demos into env dtypes
def _state(mixer: DemoMixer) -> dict:
    bank = mixer._bank
    held = None if bank is None else (bank.obs.copy(), bank.act.copy(), bank.rows, {**bank.offsets})
    return {"mixer": mixer.state_dict(), "store": mixer.store.state_dict(), "bank": held}


def _dtype_case(obs, act, env_obs_dtype, env_act_dtype, *, when: str):
    """A 2-slot mixer (rho = 1) whose one demo has ``obs (3, 2)`` and ``act (3, ...)``; the
    demo is in the store from the start, or added after a step (``when="later"``)."""
    store = DemoStore(capacity=4, rho=1.0, phi=0.0, seed=0)
    good = Demo(np.zeros((3, 2)), np.zeros(3), np.zeros(3, np.float32))
    bad = Demo(np.asarray(obs), np.asarray(act), np.array([0.0, 0.0, 1.0], np.float32))
    store.add_initial(bad if when == "first" else good)
    mixer = DemoMixer(store, 2)
    mixer.reset(np.zeros((2, 2), env_obs_dtype))
    no, done = np.zeros(2, bool), np.array([True, False])
    step = (np.zeros(2, env_act_dtype), np.zeros(2), done, no, np.ones((2, 2), env_obs_dtype))
    if when == "later":  # slot 0 replays the good demo (banked), then the bad one arrives
        mixer.step(*step)
        mixer.step(*step)
        assert mixer._bank is not None
        store.add_bonus(bad)
    return mixer, step


LOSSY = [  # (demo obs, demo actions, env obs dtype, env action dtype, field)
    (np.zeros((3, 2)), [0.0, 0.5, 1.0], np.float32, np.int64, "demo.actions"),
    (np.full((3, 2), 300), [0, 1, 2], np.uint8, np.int64, "demo.observations"),
    (np.full((3, 2), -1.0), [0, 1, 2], np.uint8, np.int64, "demo.observations"),
    (np.full((3, 2), 1e300), [0, 1, 2], np.float32, np.int64, "demo.observations"),
    (np.zeros((3, 2)), [0, 1, 2**40], np.float32, np.int32, "demo.actions"),
    (np.zeros((3, 2)), np.zeros((3, 4)), np.float32, np.int64, "demo.actions"),  # rows
]


@pytest.mark.parametrize("when", ["first", "later"])
@pytest.mark.parametrize(("obs", "act", "obs_dtype", "act_dtype", "field"), LOSSY)
def test_a_demo_the_env_dtypes_cannot_hold_is_refused_before_anything_changes(
    obs, act, obs_dtype, act_dtype, field, when
):
    """Demo values reach the env's dtypes only losslessly: 0.5 is no int action, 300 or -1 no
    uint8 pixel, 1e300 no float32. The refused step (the first call included) and an explicit
    begin_episode leave the mixer, its demo bank, the store and the step's arrays as they were."""
    mixer, step = _dtype_case(obs, act, obs_dtype, act_dtype, when=when)
    before, args = _state(mixer), [a.copy() for a in step]
    with pytest.raises(SpecError, match=f"^{field} \\(demo \\d\\): expected"):
        mixer.step(*step)
    assert_same(_state(mixer), before, "state")
    assert_same(list(step), args, "step arrays")
    if field == "demo.observations":
        with pytest.raises(SpecError, match=f"^{field}"):
            mixer.begin_episode(1)
        assert_same(_state(mixer), before, "state")


def test_lossless_demo_values_are_replayed_in_the_env_dtypes():
    """Integral float frames (a .npz demo stores float32) into uint8, integral float actions
    into int64, (L,) actions into (N, 1) rows: accepted, replayed exactly."""
    obs, act = np.arange(6, dtype=np.float32).reshape(3, 2) * 50, [2.0, 1.0, 0.0]
    store = DemoStore(capacity=4, rho=1.0, phi=0.0, seed=0)
    store.add_initial(Demo(obs, np.array(act), np.zeros(3, np.float32)))
    mixer = DemoMixer(store, 1, track_episodes=False)
    mixer.reset(np.zeros((1, 2), np.uint8))
    yes, no = np.ones(1, bool), np.zeros(1, bool)
    outs = [mixer.step(np.zeros((1, 1), np.int64), np.zeros(1), yes, no, np.ones((1, 2), np.uint8))]
    for _ in range(3):
        outs.append(
            mixer.step(np.zeros((1, 1), np.int64), np.zeros(1), no, no, np.ones((1, 2), np.uint8))
        )
    assert outs[0].next_obs.dtype == np.uint8 and outs[1].action.dtype == np.int64
    np.testing.assert_array_equal(np.stack([o.obs[0] for o in outs[1:]]), obs)
    np.testing.assert_array_equal(np.stack([o.action[0] for o in outs[1:]]), [[2], [1], [0]])


@pytest.mark.parametrize(
    ("reset_obs", "message"),
    [
        (np.zeros(3, np.uint8), r"expected an observation of shape \(2,\), got \(3,\)"),
        (np.array([0.5, 1.0]), "reset_env\\(0\\)"),  # 0.5 is no uint8 pixel
        (np.array([300, 1]), "reset_env\\(0\\)"),  # nor is 300
        (np.array(["a", "b"]), "reset_env\\(0\\)"),
    ],
)
def test_reset_env_results_are_checked_like_the_env_observations(reset_obs, message):
    """An env drawn after a demo starts from ``reset_env(i)``: an observation of another shape,
    or values the env's dtype cannot hold, are a named SpecError, never a silent cast."""
    store = DemoStore(capacity=4, rho=0.0, phi=0.0, seed=0)  # every draw is a real env
    mixer = DemoMixer(store, 2, reset_env=lambda i: reset_obs, track_episodes=False)
    mixer.reset(np.zeros((2, 2), np.uint8))
    with pytest.raises(SpecError, match=f"^reset_env\\(0\\).*{message}|^{message}"):
        mixer.begin_episode(0)


def test_lossless_reset_env_results_are_stored_in_the_env_dtype():
    store = DemoStore(capacity=4, rho=0.0, phi=0.0, seed=0)
    mixer = DemoMixer(store, 1, reset_env=lambda i: np.array([3.0, 255.0]), track_episodes=False)
    mixer.reset(np.zeros((1, 2), np.uint8))
    obs, code = mixer.begin_episode(0)
    assert code == ENV and obs.dtype == np.uint8 and obs.tolist() == [3, 255]


@pytest.mark.parametrize("i", [-1, 2, 1.0, True, "0"])
def test_begin_episode_names_a_slot_outside_the_env(i) -> None:
    """begin_episode(-1) replaced the last slot's episode silently; 2 / 1.0 raised IndexError."""
    store = DemoStore(capacity=2, rho=1.0, phi=0.0, seed=0)
    store.add_initial(demo([0.0, 1.0], human=True))
    mixer = DemoMixer(store, 2)
    mixer.reset(np.zeros((2, 2), np.float32))
    before = _state(mixer)
    with pytest.raises(ConfigError, match=r"i: expected"):
        mixer.begin_episode(i)
    assert_same(_state(mixer), before, "after a refused begin_episode")


@pytest.mark.parametrize("shape", [(2, 5), (2,)])
def test_reset_refuses_observations_that_are_not_frame_stacks(shape) -> None:
    """frame_stack=2 with obs (2, 5) or (2,) was accepted by reset; the first demo replay then
    raised numpy's ValueError / IndexError in the middle of a step."""
    store = DemoStore(capacity=2, rho=1.0, phi=0.0, seed=0)
    store.add_initial(demo([0.0, 1.0], human=True))
    mixer = DemoMixer(store, 2, frame_stack=2)
    with pytest.raises(SpecError, match=r"obs: expected \(N, C \* frame_stack, ...\) stacks"):
        mixer.reset(np.zeros(shape, np.float32))
    with pytest.raises(EmptyBufferError):
        mixer.state_dict()  # nothing was taken
    mixer.reset(np.zeros((2, 4), np.float32))  # two stacked frames of 2
    out = mixer.step(np.zeros(2, int), np.zeros(2), np.ones(2, bool), np.zeros(2, bool),
                     np.ones((2, 4), np.float32))  # fmt: skip
    np.testing.assert_array_equal(out.next_obs, [[0.0, 0.0, 0.0, 0.0]] * 2)  # demo frame 0 x 2
