"""Tests of the PyTorchRL PPODBuffer facade: PPO+D acceptance tests (algorithms.md 3.2)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch import nn

from rlstore.buffers.demo_mixer import ENV
from rlstore.buffers.demos import Demo, save_demo
from rlstore.compat.ppod import PPODBuffer
from rlstore.compat.pytorchrl import (
    ACT,
    ADV,
    DONE,
    DONE2,
    FVAL,
    IVAL,
    LOGP,
    OBS,
    OBS2,
    RET,
    REW,
    RHS,
    RHS2,
    TRUNC2,
    VAL,
    GAEBuffer,
)
from rlstore.errors import CapacityError, CheckpointError, ConfigError, SpecError
from rlstore.returns.reference import gae_reference


class LinearActor(nn.Module):
    """Feed-forward actor-critic: linear softmax policy over 3 actions, linear value head."""

    is_recurrent = False

    def __init__(self, obs_dim: int = 2) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.pi, self.v = nn.Linear(obs_dim, 3), nn.Linear(obs_dim, 1)

    def get_action(self, obs, generator):
        dist = torch.distributions.Categorical(logits=self.pi(obs))
        act = torch.multinomial(dist.probs, 1, generator=generator)
        return act, dist.log_prob(act[:, 0])[:, None]

    def get_value(self, obs, rhs, done):
        return {"value_net1": self.v(obs)}

    def evaluate_actions(self, obs, rhs, done, action):
        dist = torch.distributions.Categorical(logits=self.pi(obs))
        return dist.log_prob(action[:, 0])[:, None], dist.entropy().mean(), dist


@dataclass
class Algo:
    gamma: float = 0.9


class CountingVecEnv:
    """N slots; obs = [slot, t]; episodes of `ep_len` steps with reward 1 at the end."""

    def __init__(self, num_envs: int = 2, ep_len: int = 3) -> None:
        self.num_envs, self.ep_len = num_envs, ep_len
        self.t = np.zeros(num_envs, dtype=int)
        self.resets: list[int] = []

    def obs(self):
        return torch.tensor(np.stack([np.arange(self.num_envs), self.t], 1), dtype=torch.float32)

    def step(self, action):
        self.t += 1
        done = self.t == self.ep_len
        self.t[done] = 0
        reward = torch.tensor(done, dtype=torch.float32)[:, None]
        return self.obs(), reward, torch.tensor(done, dtype=torch.float32)[:, None]

    def reset_single_env(self, i):
        self.resets.append(i)
        self.t[i] = 0
        return self.obs()[i]


@torch.no_grad()
def collect(bufs, actor, env, T, seed=0):
    """Insert the same T steps into every buffer (the worker feeds the real env's obs)."""
    g = torch.Generator().manual_seed(seed)
    obs, done = env.obs(), torch.zeros(env.num_envs, 1)
    for _ in range(T):
        act, logp = actor.get_action(obs, g)
        val = actor.get_value(obs, None, done)["value_net1"]
        nobs, rew, ndone = env.step(act)
        sample = {OBS: obs, DONE: done, ACT: act, REW: rew, VAL: val, LOGP: logp}
        sample.update({OBS2: nobs, DONE2: ndone})
        for buf in bufs:
            buf.insert_transition(sample)
        obs, done = nobs, ndone


def write_npz_demo(path, L=3, obs_offset=100.0, frame_skip=None):
    obs = obs_offset + np.stack([np.arange(L), np.arange(L)], 1).astype(np.float32)
    arrays = {
        "Observation": obs,
        "Action": np.arange(L)[:, None] % 3,
        "Reward": np.array([0.0] * (L - 1) + [2.0]),
    }
    if frame_skip is not None:
        arrays["FrameSkip"] = np.array(frame_skip)
    np.savez(path, **arrays)
    return arrays


def test_rho_phi_zero_behaves_exactly_like_the_gae_buffer():
    actor = LinearActor()
    ppod = PPODBuffer(8, "cpu", actor, Algo(), None, rho=0.0, phi=0.0, gae_lambda=0.8, seed=0)
    gae = GAEBuffer(8, "cpu", actor, Algo(), None, gae_lambda=0.8)
    collect([ppod, gae], actor, CountingVecEnv(), 8)
    ppod.before_gradients()
    gae.before_gradients()
    # bitwise on purpose: PPODBuffer inherits GAEBuffer.before_gradients, same shapes and order
    for key in (OBS, DONE, ACT, REW, VAL, LOGP, RET, ADV):
        torch.testing.assert_close(ppod.data[key], gae.data[key], rtol=0, atol=0)
    assert len(ppod.reward_demos) > 0  # episodes were still tracked as candidate demos


def test_rho_one_replays_the_human_demo_in_every_episode(tmp_path):
    human = tmp_path / "human"
    human.mkdir()
    d = write_npz_demo(human / "demo0.npz", L=3)
    actor, T = LinearActor(), 12
    buf = PPODBuffer(T, "cpu", actor, Algo(gamma=0.9), CountingVecEnv(), rho=1.0, phi=0.0,
                     gae_lambda=0.9, initial_human_demos_dir=str(human), seed=0)  # fmt: skip
    assert buf.num_loaded_human_demos == 1 and buf.reward_threshold == 2.0
    collect([buf], actor, CountingVecEnv(ep_len=2), T)
    buf.before_gradients()
    data = buf.data
    # slot n: env episode at t = 0, 1 (done at t = 1), then demo steps j = (t - 2) % 3
    for t in range(T):
        j = (t - 2) % 3
        demo_step = t >= 2
        assert bool(data[DONE][t + 1].all()) == (
            t == 1 or (demo_step and j == 2)
        )  # transition ends
        assert bool(data[DONE][t].all()) == (t == 2 or (demo_step and j == 0))  # demo starts
        if not demo_step:
            assert (data[LOGP][t] != 0).all()
            continue
        expected_obs = torch.as_tensor(d["Observation"][j]).expand(2, 2)
        torch.testing.assert_close(data[OBS][t], expected_obs)
        assert data[ACT][t].tolist() == [[int(d["Action"][j][0])]] * 2
        assert data[REW][t].tolist() == [[float(d["Reward"][j])]] * 2
        assert (data[LOGP][t] == 0).all()
        with torch.no_grad():  # value recomputed on the demo frame
            torch.testing.assert_close(data[VAL][t], actor.v(expected_obs))
    # returns: GAE by the reference loop on the stored layout-A arrays
    v = data[VAL][: T + 1, :, 0].double().numpy()
    done = data[DONE][1 : T + 1, :, 0].numpy() != 0
    _, ret = gae_reference(data[REW][:T, :, 0].double().numpy(), v[:T], v[1:], done,
                           np.zeros_like(done), gamma=0.9, lam=0.9)  # fmt: skip
    np.testing.assert_allclose(data[RET][:T, :, 0].numpy(), ret, rtol=1e-5, atol=1e-5)


def test_demo_end_resets_the_real_env_when_env_is_drawn(tmp_path):
    human = tmp_path / "h"
    human.mkdir()
    write_npz_demo(human / "d.npz", L=3)
    env, actor, T = CountingVecEnv(num_envs=1, ep_len=4), LinearActor(), 40
    buf = PPODBuffer(T, "cpu", actor, Algo(), env, rho=0.5, phi=0.0,
                     initial_human_demos_dir=str(human), seed=3)  # fmt: skip
    collect([buf], actor, env, T)
    logp, done, obs = buf.data[LOGP][:, 0, 0], buf.data[DONE][:, 0, 0], buf.data[OBS][:, 0]
    demo_ends = [t for t in range(T) if logp[t] == 0 and done[t + 1] == 1]
    env_after = [t for t in demo_ends if t + 1 < T and logp[t + 1] != 0]
    assert len(env_after) > 0
    # every env episode drawn at a demo end called reset_single_env (one more may be pending
    # at the last step, whose successor is not stored yet) and starts from its obs [0, 0]
    assert len(env_after) <= len(env.resets) <= len(env_after) + 1
    for t in env_after:
        assert obs[t + 1].tolist() == [0.0, 0.0]
    again = pickle.loads(pickle.dumps(buf))  # the mixer's reset hook is a method: picklable
    torch.testing.assert_close(again.data[OBS], buf.data[OBS], rtol=0, atol=0)


def test_initial_demo_loading_rules(tmp_path):
    actor = LinearActor()
    d = tmp_path / "agent"
    d.mkdir()
    write_npz_demo(d / "a.npz", frame_skip=4)
    save_demo(Demo(np.ones((2, 2), np.float32), np.zeros((2, 1)), np.array([0.0, 1.0])), d, "b")

    class Env:
        num_envs, env_kwargs = 2, {"frame_skip": 4}

    buf = PPODBuffer(4, "cpu", actor, Algo(), Env(), initial_agent_demos_dir=str(d))
    assert [x.total_reward for x in buf.reward_demos] == [2.0, 1.0]  # a.npz then b
    assert buf.num_loaded_human_demos == 0 and buf.reward_demos[0].observations.dtype == np.float32
    Env.env_kwargs = {"frame_skip": 2}
    with pytest.raises(ConfigError, match="FrameSkip"):
        PPODBuffer(4, "cpu", actor, Algo(), Env(), initial_agent_demos_dir=str(d))
    for skip in (np.inf, np.nan):  # regression: int(inf) raised OverflowError, not CheckpointError
        write_npz_demo(tmp_path / "bad.npz", frame_skip=skip)
        with pytest.raises(CheckpointError, match="FrameSkip"):
            buf.load_demo(tmp_path / "bad.npz")
    Env.env_kwargs = {}
    with pytest.raises(CapacityError, match="capacity=1"):
        PPODBuffer(4, "cpu", actor, Algo(), Env(), total_buffer_demo_capacity=1,
                   initial_agent_demos_dir=str(d))  # fmt: skip
    with pytest.raises(ConfigError, match="rho"):
        PPODBuffer(4, "cpu", actor, Algo(), None, rho=0.8, phi=0.5)
    # a string or a fraction here raised TypeError or was truncated by int()
    for kw in ({"save_demos_every": "10"}, {"num_agent_demos_to_save": 2.5}):
        with pytest.raises(ConfigError, match=next(iter(kw))):
            PPODBuffer(4, "cpu", actor, Algo(), None, **kw)


def test_save_supplementary_and_factory(tmp_path):
    actor, target, supp = LinearActor(), tmp_path / "target", tmp_path / "supp"
    supp.mkdir()
    factory = PPODBuffer.create_factory(6, rho=0.0, phi=0.0, supplementary_demos_dir=str(supp),
                                        target_agent_demos_dir=str(target), save_demos_every=1,
                                        num_agent_demos_to_save=1, seed=0)  # fmt: skip
    buf = factory("cpu", actor, Algo(), None)
    assert isinstance(buf, PPODBuffer) and buf.gae_lambda == 0.95
    collect([buf], actor, CountingVecEnv(ep_len=3), 6)  # 4 finished episodes, total 1 each
    buf.before_gradients()
    assert [x.total_reward for x in buf.reward_demos] == [1.0] * 4
    write_npz_demo(supp / "bonus.npz", L=4)  # total 2.0, appended as a bonus agent demo
    mixer = buf.mixer
    info = buf.after_gradients(None, {})
    assert buf.mixer is mixer  # regression: the replays in progress go on into the next rollout
    assert info["NumRewardDemos"] == 5 and buf.reward_demos[-1].total_reward == 2.0
    assert buf.store.max_demo_reward == 2.0 and buf.reward_threshold == 1.0
    assert buf.load_supplementary_demos() == 0  # already seen
    saved = buf.load_demo(target / "reward_demo_000_metadata.json")  # the best one
    np.testing.assert_array_equal(saved.observations, buf.reward_demos[-1].observations)
    assert not (target / "reward_demo_001_metadata.json").exists()


def test_sample_demo_starts_a_replay_now(tmp_path):
    human = tmp_path / "h"
    human.mkdir()
    d = write_npz_demo(human / "d.npz", L=3)
    actor = LinearActor()
    buf = PPODBuffer(6, "cpu", actor, Algo(), None, rho=1.0, phi=0.0,
                     initial_human_demos_dir=str(human), seed=0)  # fmt: skip
    with pytest.raises(SpecError, match="insert"):
        buf.sample_demo(0)
    collect([buf], actor, CountingVecEnv(ep_len=50), 1)
    assert buf.sample_demo(1) == 1  # reward demo, written at the current position
    assert buf.data[OBS][1, 1].tolist() == d["Observation"][0].tolist()
    assert buf.data[DONE][1].tolist() == [[0.0], [1.0]]
    collect([buf], actor, CountingVecEnv(ep_len=50), 1)
    assert buf.data[ACT][1, 1].item() == d["Action"][0][0] and buf.data[LOGP][1, 1].item() == 0
    assert buf.data[LOGP][1, 0].item() != 0


def test_sample_demo_mid_rollout_ends_the_slot_episode(tmp_path):
    """Regression (RolloutBuffer facade): Done[L] = 1 written by sample_demo stayed in the view
    only until the next insertion; it must end the slot's last transition for good."""
    human = tmp_path / "h"
    human.mkdir()
    write_npz_demo(human / "d.npz", L=3)
    actor = LinearActor()
    buf = PPODBuffer(6, "cpu", actor, Algo(), None, rho=1.0, phi=0.0,
                     initial_human_demos_dir=str(human), seed=0)  # fmt: skip
    collect([buf], actor, CountingVecEnv(ep_len=50), 2)
    assert buf.sample_demo(1) == 1
    collect([buf], actor, CountingVecEnv(ep_len=50), 2)
    buf.before_gradients()
    data = buf.data
    assert data[DONE][1:5, :, 0].tolist() == [[0, 0], [0, 1], [0, 0], [0, 0]]
    v = data[VAL][:5, :, 0].double().numpy()
    done = data[DONE][1:5, :, 0].numpy() != 0
    _, ret = gae_reference(data[REW][:4, :, 0].double().numpy(), v[:4], v[1:], done,
                           np.zeros_like(done), gamma=0.9, lam=0.95)  # fmt: skip
    np.testing.assert_allclose(data[RET][:4, :, 0].numpy(), ret, rtol=1e-5, atol=1e-5)


class GRUActor(nn.Module):
    """Recurrent actor-critic; batches are whole env columns flattened time-major."""

    is_recurrent = True

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(1)
            self.cell, self.pi, self.v = nn.GRUCell(2, 4), nn.Linear(4, 3), nn.Linear(4, 1)

    def _unroll(self, obs, rhs, done):
        E = rhs.shape[0]
        x, d = obs.reshape(-1, E, 2), done.reshape(-1, E, 1).float()
        h, outs = rhs, []
        for t in range(x.shape[0]):
            h = self.cell(x[t] / 100.0, h * (1.0 - d[t]))
            outs.append(h)
        return torch.stack(outs).reshape(-1, 4), h

    def get_value(self, obs, rhs, done):
        return {"value_net1": self.v(self._unroll(obs, rhs, done)[0])}

    def evaluate_actions(self, obs, rhs, done, action):
        dist = torch.distributions.Categorical(logits=self.pi(self._unroll(obs, rhs, done)[0]))
        return dist.log_prob(action[:, 0])[:, None], dist.entropy().mean(), dist


@torch.no_grad()
def test_recurrent_actor_demo_starts_zero_the_hidden_state(tmp_path):
    human = tmp_path / "h"
    human.mkdir()
    d = write_npz_demo(human / "d.npz", L=3)
    actor, env, T = GRUActor(), CountingVecEnv(ep_len=2), 8
    buf = PPODBuffer(T, "cpu", actor, Algo(), env, rho=1.0, phi=0.0,
                     initial_human_demos_dir=str(human), seed=0)  # fmt: skip
    obs, done, rhs = env.obs(), torch.zeros(2, 1), torch.ones(2, 4)
    for _ in range(T):
        feats, h = actor._unroll(obs, rhs, done)
        act = feats[:, :1].abs().long() % 3
        nobs, rew, ndone = env.step(act)
        buf.insert_transition({OBS: obs, RHS: rhs, DONE: done, ACT: act, REW: rew,
                               VAL: actor.v(feats), LOGP: torch.full((2, 1), -1.0),
                               OBS2: nobs, RHS2: h + 1.0, DONE2: ndone})  # fmt: skip
        obs, done, rhs = nobs, ndone, h + 1.0
    data = buf.data
    for t in range(1, T):
        demo_start = t in (2, 5)  # env episode t = 0, 1; demos at t = 2..4 and 5..7
        assert bool((data[RHS][t] == 0).all()) == demo_start
        if t >= 2:  # value of the demo frame with the stored state before the step
            j = (t - 2) % 3
            frame = torch.as_tensor(d["Observation"][j]).expand(2, 2)
            expected = actor.get_value(frame, data[RHS][t], data[DONE][t])["value_net1"]
            torch.testing.assert_close(data[VAL][t], expected)


def test_same_seed_gives_the_same_rollout(tmp_path):
    human = tmp_path / "h"
    human.mkdir()
    write_npz_demo(human / "d.npz", L=3)

    def run(seed):
        actor = LinearActor()
        buf = PPODBuffer(30, "cpu", actor, Algo(), None, rho=0.3, phi=0.3, alpha=2.0,
                         initial_human_demos_dir=str(human), seed=seed)  # fmt: skip
        collect([buf], actor, CountingVecEnv(num_envs=3, ep_len=2), 30)
        return buf

    a, b = run(5), run(5)
    for key in (OBS, DONE, ACT, REW, VAL, LOGP):
        torch.testing.assert_close(a.data[key], b.data[key], rtol=0, atol=0)
    assert (a.data[LOGP][:30] == 0).any() and len(a.value_demos) == len(b.value_demos) > 0
    a.reset()  # abandons the replays in progress; the demos stay
    assert a.mixer is None and a.size == 0 and len(a.value_demos) > 0


# ---------------------------------------------------------------------- fast path vs reference
def _np(x):
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


class FullRoundTripPPOD(PPODBuffer):
    """insert_transition as first written: every mixed key goes numpy -> tensor each step (the
    obviously-correct twin of the fast path, which converts only the keys that changed)."""

    def insert_transition(self, sample):
        mixer = self._ensure_mixer(sample[OBS])
        sample = dict(sample)
        replaying = mixer.replaying()
        if replaying.any() and self.data[OBS] is not None:
            self._revalue_reference(sample, replaying)
        done = _np(sample[DONE2]).reshape(-1) != 0
        trunc = _np(sample[TRUNC2]).reshape(-1) != 0 if TRUNC2 in sample else np.zeros_like(done)
        mixed = mixer.step(
            _np(sample[ACT]),
            _np(sample[REW]).reshape(-1),
            done & ~trunc,
            done & trunc,
            _np(sample[OBS2]),
            value=_np(sample[VAL]).reshape(-1),
        )
        demo = torch.as_tensor(mixed.from_demo)
        for key, new in ((ACT, mixed.action), (REW, mixed.reward), (OBS2, mixed.next_obs)):
            ref = torch.as_tensor(sample[key])
            sample[key] = torch.as_tensor(new).reshape(ref.shape).to(ref.dtype)
        logp = torch.as_tensor(sample[LOGP]).clone()
        logp[demo] = 0
        sample[LOGP] = logp
        ref = torch.as_tensor(sample[DONE2])
        new_done = torch.as_tensor(mixed.terminated | mixed.truncated)
        sample[DONE2] = new_done.reshape(ref.shape).to(ref.dtype)
        if TRUNC2 in sample:
            ref = torch.as_tensor(sample[TRUNC2])
            sample[TRUNC2] = torch.as_tensor(mixed.truncated).reshape(ref.shape).to(ref.dtype)
        starts = torch.as_tensor(mixed.new_episode > ENV)
        if starts.any() and sample.get(RHS2) is not None:
            rhs = torch.as_tensor(sample[RHS2]).clone()
            rhs[starts] = 0
            sample[RHS2] = rhs
        GAEBuffer.insert_transition(self, sample)

    @torch.no_grad()
    def _revalue_reference(self, sample, rows):
        idx = torch.as_tensor(np.flatnonzero(rows))
        obs = self.data[OBS][self.step][idx]
        rhs = self.data.get(RHS)
        rhs = None if rhs is None else rhs[self.step if self.recurrent_actor else 0][idx]
        out = self.actor.get_value(obs, rhs, self.data[DONE][self.step][idx])
        for key, name in ((VAL, "value_net1"), (IVAL, "ivalue_net1")):
            if key in sample and name in out:
                new = torch.as_tensor(sample[key]).clone()
                new[idx] = out[name].to(new.dtype).reshape(new[idx].shape)
                sample[key] = new


@pytest.mark.parametrize(
    "rew_dtype, done_values, with_trunc, recurrent, rho, phi",
    [
        (torch.float32, (0.0, 1.0), False, False, 0.3, 0.3),
        (torch.float64, (0.0, 2.0), True, False, 0.3, 0.3),  # float32 round trip, 0/1 flags
        (torch.float32, (0.0, 1.0), True, True, 0.5, 0.2),
        (torch.float32, (0.0, 1.0), True, False, 0.0, 0.0),  # no replay: nothing converted
    ],
)
@torch.no_grad()
def test_fast_insert_matches_the_full_round_trip(
    tmp_path, rew_dtype, done_values, with_trunc, recurrent, rho, phi
):
    human = tmp_path / "h"
    human.mkdir()
    write_npz_demo(human / "a.npz", L=3)
    write_npz_demo(human / "b.npz", L=5, obs_offset=-7.0)
    n, T = 4, 40
    actor = GRUActor() if recurrent else LinearActor()
    bufs = [
        cls(T, "cpu", actor, Algo(), None, rho=rho, phi=phi, alpha=2.0,
            initial_human_demos_dir=str(human), initial_reward_threshold=2.0, seed=7)
        for cls in (PPODBuffer, FullRoundTripPPOD)
    ]  # fmt: skip
    g = torch.Generator().manual_seed(0)
    obs, done, rhs = torch.randn(n, 2, generator=g), torch.zeros(n, 1), torch.zeros(n, 4)
    for t in range(T):
        d = (torch.rand(n, 1, generator=g) < 0.25) * done_values[1]
        nobs = torch.randn(n, 2, generator=g) * 10
        sample = {OBS: obs, DONE: done, ACT: torch.randint(0, 3, (n, 1), generator=g),
                  REW: torch.randn(n, 1, generator=g, dtype=torch.float64).to(rew_dtype),
                  VAL: torch.randn(n, 1, generator=g), LOGP: -torch.rand(n, 1, generator=g),
                  OBS2: nobs, DONE2: d}  # fmt: skip
        if with_trunc:
            sample[TRUNC2] = (torch.rand(n, 1, generator=g) < 0.3).float()  # also on non-done
            sample[FVAL] = torch.randn(n, 1, generator=g)
        if recurrent:
            sample.update({RHS: rhs, RHS2: torch.randn(n, 4, generator=g)})
        for buf in bufs:
            buf.insert_transition(sample)
        if t % 7 == 3:  # PPODBuffer.sample_demo: a replay started outside insert_transition
            assert bufs[0].sample_demo(t % n) == bufs[1].sample_demo(t % n)
        obs, done, rhs = nobs, d, sample.get(RHS2, rhs)
    fast, ref = bufs
    assert (fast.data[LOGP][:T] == 0).any() == (rho + phi > 0)
    fast.before_gradients()
    ref.before_gradients()
    assert fast.data.keys() == ref.data.keys()
    for key in fast.data:
        if fast.data[key] is not None:
            assert fast.data[key].dtype == ref.data[key].dtype, key
            # bitwise on purpose: both inserts store copies of the same values, then run the
            # same before_gradients on the same shapes
            torch.testing.assert_close(fast.data[key], ref.data[key], rtol=0, atol=0, msg=key)
    assert fast.store.state_dict()["rng"] == ref.store.state_dict()["rng"]


def test_npz_demo_recorded_with_its_final_observation_loads(tmp_path):
    """rlstore demo-record keeps the observation after the last action (one more row than
    Action / Reward); PPODBuffer drops it, as load_npz_demo does."""
    arrays = write_npz_demo(tmp_path / "plain.npz", L=3)
    final = np.vstack([arrays["Observation"], arrays["Observation"][-1:] + 1])
    np.savez(tmp_path / "with_final.npz", **{**arrays, "Observation": final})
    buf = PPODBuffer(4, "cpu", LinearActor(), Algo(), None)
    plain, with_final = (buf.load_demo(tmp_path / n) for n in ("plain.npz", "with_final.npz"))
    np.testing.assert_array_equal(with_final.observations, plain.observations)
    assert with_final.length == 3 and with_final.total_reward == 2.0
    np.savez(tmp_path / "bad.npz", **{**arrays, "Observation": np.vstack([final, final])})
    with pytest.raises(CheckpointError):
        buf.load_demo(tmp_path / "bad.npz")


def test_the_shipped_keydoor_demo_loads_in_ppodbuffer():
    from importlib import resources

    with resources.as_file(resources.files("rlstore") / "envs" / "demos" / "KeyDoor-v0.npz") as p:
        demo = PPODBuffer(4, "cpu", LinearActor(), Algo(), None).load_demo(p)
    assert demo.total_reward == pytest.approx(1.0) and demo.length == 24


def test_demo_rewards_keep_their_fractions_with_int_sample_rewards(tmp_path):
    """Regression (issue 9, one conversion path): a replayed demo reward of 0.5 was cast to the
    sample's int64 Reward dtype (stored as 0); mixed values are now checked against the stored
    float32 Reward, like every inserted value."""
    human = tmp_path / "h"
    human.mkdir()
    np.savez(human / "d.npz", Observation=np.zeros((3, 2), np.float32),
             Action=np.zeros((3, 1)), Reward=np.array([0.5, 0.25, 2.0]))  # fmt: skip
    actor = LinearActor()
    buf = PPODBuffer(6, "cpu", actor, Algo(), None, rho=1.0, phi=0.0,
                     initial_human_demos_dir=str(human), seed=0)  # fmt: skip
    obs, zero = torch.zeros(2, 2), torch.zeros(2, 1)
    for _ in range(3):
        buf.insert_transition({OBS: obs, OBS2: obs, DONE: zero, DONE2: zero, VAL: zero,
                               ACT: torch.zeros(2, 1, dtype=torch.long), LOGP: zero,
                               REW: torch.zeros(2, 1, dtype=torch.long)})  # fmt: skip
        if buf.size == 1:
            assert buf.sample_demo(0) == 1  # slot 0 replays the demo from step 1 on
    assert buf.data[REW][1:3, 0, 0].tolist() == [0.5, 0.25]
    assert buf.data[REW][:3, 1, 0].tolist() == [0.0, 0.0, 0.0]
