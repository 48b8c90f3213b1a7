"""Tests of the PyTorchRL storages with small real actors on real environments."""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from rlstore.compat.pytorchrl import (
    ACT,
    ADV,
    DONE,
    DONE2,
    FVAL,
    IADV,
    IRET,
    IREW,
    IVAL,
    LOGP,
    OBS,
    OBS2,
    RET,
    REW,
    RHS,
    RHS2,
    TRUNC,
    TRUNC2,
    VAL,
    Actor,
    Algorithm,
    GAEBuffer,
    VanillaOnPolicyBuffer,
    VTraceBuffer,
)
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError
from rlstore.returns.reference import gae_reference


class LinearActor(nn.Module):
    """A feed-forward actor-critic: linear softmax policy and linear value head."""

    is_recurrent = False

    def __init__(self, obs_dim: int = 4, n_actions: int = 2, seed: int = 0) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.pi, self.v = nn.Linear(obs_dim, n_actions), nn.Linear(obs_dim, 1)
            self.iv = nn.Linear(obs_dim, 1)

    def get_action(self, obs, rhs, done, generator=None):
        dist = torch.distributions.Categorical(logits=self.pi(obs))
        probs = dist.probs
        act = torch.multinomial(probs, 1, generator=generator)
        return act, dist.log_prob(act[:, 0])[:, None], rhs

    def get_value(self, obs, rhs, done):
        return {"value_net1": self.v(obs), "ivalue_net1": self.iv(obs), "rhs": rhs}

    def evaluate_actions(self, obs, rhs, done, action):
        dist = torch.distributions.Categorical(logits=self.pi(obs))
        return dist.log_prob(action[:, 0])[:, None], dist.entropy().mean(), dist


class GRUActor(nn.Module):
    """A recurrent actor-critic; batches are whole env columns flattened time-major."""

    is_recurrent = True

    def __init__(self, obs_dim: int = 4, n_actions: int = 2, hidden: int = 5, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.cell = nn.GRUCell(obs_dim, hidden)
            self.pi, self.v = nn.Linear(hidden, n_actions), nn.Linear(hidden, 1)

    def _unroll(self, obs, rhs, done):
        E = rhs.shape[0]
        L = obs.shape[0] // E
        x, d = obs.reshape(L, E, -1), done.reshape(L, E, 1).float()
        h, outs = rhs, []
        for t in range(L):  # reset the state before a step that starts an episode
            h = self.cell(x[t], h * (1.0 - d[t]))
            outs.append(h)
        return torch.stack(outs).reshape(L * E, -1), h

    def get_action(self, obs, rhs, done, generator=None):
        feats, h = self._unroll(obs, rhs, done)
        dist = torch.distributions.Categorical(logits=self.pi(feats))
        act = torch.multinomial(dist.probs, 1, generator=generator)
        return act, dist.log_prob(act[:, 0])[:, None], h

    def get_value(self, obs, rhs, done):
        feats, h = self._unroll(obs, rhs, done)
        return {"value_net1": self.v(feats), "rhs": h}

    def evaluate_actions(self, obs, rhs, done, action):
        feats, _ = self._unroll(obs, rhs, done)
        dist = torch.distributions.Categorical(logits=self.pi(feats))
        return dist.log_prob(action[:, 0])[:, None], dist.entropy().mean(), dist


@dataclass
class Algo:
    """A minimal Algorithm: discount factors and batching."""

    gamma: float = 0.9
    num_mini_batch: int = 2
    gamma_intrinsic: float | None = None


def make_envs(n: int = 2, max_steps: int = 7) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=max_steps) for _ in range(n)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )


@torch.no_grad()
def collect(buf, actor, envs, T, seed=0, truncation=True, intrinsic=False):
    """Run the actor for T steps, insert PyTorchRL samples; return layout-A reference arrays."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.as_tensor(envs.reset(seed=seed)[0], dtype=torch.float32)
    N = obs.shape[0]
    rhs = torch.zeros(N, actor.cell.hidden_size if actor.is_recurrent else 1)
    done = torch.zeros(N, 1)
    ref = {k: [] for k in ("rew", "val", "term", "trunc", "fval", "irew", "ival")}
    for _ in range(T):
        act, logp, next_rhs = actor.get_action(obs, rhs, done, generator=g)
        vd = actor.get_value(obs, rhs, done)
        nobs, r, term, trunc, info = envs.step(act[:, 0].numpy())
        nobs = torch.as_tensor(nobs, dtype=torch.float32)
        cut = torch.as_tensor(trunc & ~term)
        fval = torch.zeros(N, 1)
        for i in np.nonzero(trunc & ~term)[0]:  # V(final_obs) with the state after the step
            fo = torch.as_tensor(info["final_obs"][i], dtype=torch.float32)[None]
            fval[i] = actor.get_value(fo, next_rhs[i : i + 1], torch.zeros(1, 1))["value_net1"]
        ndone = torch.as_tensor(term | trunc, dtype=torch.float32)[:, None]
        sample = {
            OBS: obs,
            RHS: rhs,
            DONE: done,
            ACT: act,
            REW: torch.as_tensor(r)[:, None],
            VAL: vd["value_net1"],
            LOGP: logp,
            OBS2: nobs,
            RHS2: next_rhs,
            DONE2: ndone,
        }
        irew = obs[:, :1] ** 2  # a deterministic "novelty" signal
        if intrinsic:
            sample.update({IREW: irew, IVAL: vd["ivalue_net1"]})
        if truncation:
            sample.update({TRUNC2: cut[:, None], FVAL: fval})
        buf.insert_transition(sample)
        ref["rew"].append(np.asarray(r, dtype=np.float64))
        ref["val"].append(vd["value_net1"][:, 0].double().numpy())
        ref["ival"].append(vd["ivalue_net1"][:, 0].double().numpy() if intrinsic else np.zeros(N))
        ref["irew"].append(irew[:, 0].double().numpy())
        ref["term"].append(term | (trunc & (not truncation)))
        ref["trunc"].append(trunc & ~term & bool(truncation))
        ref["fval"].append(fval[:, 0].double().numpy())
        obs, rhs, done = nobs, next_rhs, ndone
    vd = actor.get_value(obs, rhs, done)
    ref = {k: np.stack(v) for k, v in ref.items()}
    ref["last_val"] = vd["value_net1"][:, 0].double().numpy()
    ref["last_ival"] = vd["ivalue_net1"][:, 0].double().numpy() if intrinsic else None
    nv = np.concatenate([ref["val"][1:], ref["last_val"][None]])
    ref["next_val"] = np.where(ref["trunc"], ref["fval"], nv)
    return ref


def normalized(x, eps):
    return (x - x.mean()) / (x.std() + eps)  # population std (ddof=0)


def test_protocols_are_satisfied_by_the_test_implementations():
    assert isinstance(LinearActor(), Actor) and isinstance(GRUActor(), Actor)
    assert isinstance(Algo(), Algorithm)


def test_layout_c_positions_and_hand_values():
    actor = LinearActor(obs_dim=1)
    with torch.no_grad():  # V(o) = o, so every value below is easy to follow
        actor.v.weight.fill_(1.0)
        actor.v.bias.zero_()
    gae = GAEBuffer(3, "cpu", actor, Algo(gamma=0.5), envs=None, gae_lambda=0.5)
    van = VanillaOnPolicyBuffer(3, "cpu", actor, Algo(gamma=0.5), envs=None)
    for buf in (gae, van):
        for t, nd in enumerate([0.0, 1.0, 0.0]):  # transition 1 terminates
            o, no = torch.tensor([[t + 1.0]]), torch.tensor([[t + 2.0]])
            buf.insert_transition(
                {
                    OBS: o,
                    OBS2: no,
                    DONE: torch.tensor([[0.0]]),
                    DONE2: torch.tensor([[nd]]),
                    ACT: torch.zeros(1, 1, dtype=torch.long),
                    REW: torch.ones(1, 1),
                    VAL: o.clone(),
                    LOGP: torch.zeros(1, 1),
                }
            )
        # obs at slots 0..3 (slot 0 from the first sample), done flag of transition t at t + 1
        assert buf.data[OBS][:, 0, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
        assert buf.data[DONE][:, 0, 0].tolist() == [0.0, 0.0, 1.0, 0.0]
        assert buf.used_capacity == 3
        buf.before_gradients()
    # GAE, gamma = .5, lam = .5, V = [1, 2, 3], bootstrap V(o3) = 4:
    # d0 = 1 + .5*2 - 1 = 1; d1 = 1 - 2 = -1 (terminated); d2 = 1 + .5*4 - 3 = 0
    # A2 = 0; A1 = -1 (trace cut); A0 = 1 + .25*(-1) = .75; returns = A + V = [1.75, 1, 3]
    assert gae.data[RET][:, 0, 0].tolist() == [1.75, 1.0, 3.0, 4.0]
    np.testing.assert_allclose(
        gae.data[ADV][:3, 0, 0], normalized(np.array([0.75, -1, 0]), 1e-5), rtol=1e-6
    )
    # Monte-Carlo: R2 = 1 + .5*4 = 3; R1 = 1; R0 = 1 + .5*1 = 1.5
    assert van.data[RET][:, 0, 0].tolist() == [1.5, 1.0, 3.0, 4.0]
    np.testing.assert_allclose(
        van.data[ADV][:3, 0, 0], normalized(np.array([0.5, -1, 0]), 1e-5), rtol=1e-6
    )


def test_truncation_channel_bootstraps_from_final_value():
    actor = LinearActor(obs_dim=1)
    with torch.no_grad():
        actor.v.weight.fill_(1.0)
        actor.v.bias.zero_()
    buf = GAEBuffer(3, "cpu", actor, Algo(gamma=0.5), envs=None, gae_lambda=0.5)
    for t, nd in enumerate([0.0, 1.0, 0.0]):
        o = torch.tensor([[t + 1.0]])
        buf.insert_transition(
            {
                OBS: o,
                OBS2: o + 1,
                DONE: torch.zeros(1, 1),
                DONE2: torch.tensor([[nd]]),
                ACT: torch.zeros(1, 1),
                REW: torch.ones(1, 1),
                VAL: o.clone(),
                LOGP: torch.zeros(1, 1),
                TRUNC2: torch.tensor([[nd == 1.0]]),
                FVAL: torch.tensor([[6.0]]),
            }
        )
    buf.before_gradients()
    # transition 1 truncated with V(final) = 6: d1 = 1 + .5*6 - 2 = 2, A1 = 2 (trace cut);
    # A0 = 1 + .25*2 = 1.5; A2 = 0 as before -> returns [2.5, 4, 3]
    assert buf.data[RET][:3, 0, 0].tolist() == [2.5, 4.0, 3.0]
    assert buf.data[TRUNC][:, 0, 0].tolist() == [False, False, True, False]
    with pytest.raises(SpecError, match="FinalValue"):
        buf.reset()
        buf.insert_transition(
            {
                OBS: torch.ones(1, 1),
                OBS2: torch.ones(1, 1),
                DONE: torch.zeros(1, 1),
                DONE2: torch.ones(1, 1),
                ACT: torch.zeros(1, 1),
                REW: torch.ones(1, 1),
                VAL: torch.ones(1, 1),
                LOGP: torch.zeros(1, 1),
                TRUNC2: torch.ones(1, 1, dtype=torch.bool),
            }
        )


@pytest.mark.parametrize("cls,lam", [(GAEBuffer, 0.8), (VanillaOnPolicyBuffer, 1.0)])
@pytest.mark.parametrize("truncation", [True, False])
def test_real_rollout_matches_layout_a_reference(cls, lam, truncation):
    envs, actor, T = make_envs(3, max_steps=12), LinearActor(seed=1), 30
    kw = {"gae_lambda": lam} if cls is GAEBuffer else {}
    buf = cls.create_factory(T, **kw)("cpu", actor, Algo(gamma=0.95), envs)
    ref = collect(buf, actor, envs, T, truncation=truncation)
    assert ref["trunc"].any() == truncation and ref["term"].any()  # both kinds of episode end
    buf.before_gradients()
    adv, ret = gae_reference(
        ref["rew"], ref["val"], ref["next_val"], ref["term"], ref["trunc"], gamma=0.95, lam=lam
    )
    np.testing.assert_allclose(buf.data[RET][:T, :, 0], ret, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buf.data[ADV][:T, :, 0], normalized(adv, 1e-5), rtol=1e-4, atol=1e-5)
    envs.close()


def test_partial_rollout_uses_every_stored_transition_then_carries_over():
    envs, actor = make_envs(2), LinearActor(seed=2)
    buf = GAEBuffer(8, "cpu", actor, Algo(gamma=0.9), envs, gae_lambda=0.9)
    ref = collect(buf, actor, envs, 5)
    buf.before_gradients()
    _, ret = gae_reference(
        ref["rew"], ref["val"], ref["next_val"], ref["term"], ref["trunc"], gamma=0.9, lam=0.9
    )
    np.testing.assert_allclose(buf.data[RET][:5, :, 0], ret, rtol=1e-5, atol=1e-5)
    assert int(buf.data[ADV][5:].abs().sum()) == 0
    last = {k: buf.data[k][5].clone() for k in (OBS, DONE)}
    # PyTorchRL calls after_gradients after every gradient step, mid-iteration
    want = sorted(tuple(o.tolist()) for o in buf.data[OBS][:5].reshape(-1, 4))
    seen = []
    for batch in buf.generate_batches(num_mini_batch=2, mini_batch_size=None, num_epochs=2):
        assert buf.after_gradients(batch, info={"loss": 1.0}) == {"loss": 1.0}
        seen += [tuple(o.tolist()) for o in batch[OBS]]
    assert sorted(seen) == sorted(want * 2)  # later minibatches still see the old slot 0
    assert buf.used_capacity == 0 and buf.step == 0
    for k in (OBS, DONE):  # the bootstrap slot became slot 0 of the next rollout
        torch.testing.assert_close(buf.data[k][0], last[k])
    with pytest.raises(EmptyBufferError):
        buf.before_gradients()
    collect(buf, actor, envs, 1, seed=1)
    assert buf.used_capacity == 1
    torch.testing.assert_close(buf.data[OBS][0], last[OBS])  # not overwritten by the sample
    envs.close()


def test_generate_batches_flat_cover_every_step_once():
    envs, actor, T = make_envs(2), LinearActor(seed=3), 6
    buf = GAEBuffer(T, "cpu", actor, Algo(), envs)
    collect(buf, actor, envs, T)
    buf.before_gradients()
    rows = {tuple(buf.data[OBS][t, n].tolist()): (t, n) for t in range(T) for n in range(2)}
    for shuffle in (True, False):
        batches = list(
            buf.generate_batches(
                num_mini_batch=3, mini_batch_size=None, num_epochs=2, shuffle=shuffle
            )
        )
        assert len(batches) == 6 and all(b[OBS].shape == (4, 4) for b in batches)
        for epoch in (batches[:3], batches[3:]):
            seen = [rows[tuple(o.tolist())] for b in epoch for o in b[OBS]]
            assert sorted(seen) == sorted(rows.values())
        for b in batches:  # every key of a row comes from the same (t, n)
            for i, o in enumerate(b[OBS]):
                t, n = rows[tuple(o.tolist())]
                assert b[RET][i].item() == buf.data[RET][t, n].item()
                assert b[ACT][i].item() == buf.data[ACT][t, n].item()
                assert b[DONE][i].item() == buf.data[DONE][t, n].item()
        if not shuffle:  # sequential: the original's time-major flattening
            flat = torch.cat([b[OBS] for b in batches[:3]])
            torch.testing.assert_close(flat, buf.data[OBS][:T].reshape(-1, 4))
    assert len(list(buf.generate_batches(None, mini_batch_size=3))) == 4
    with pytest.raises(ConfigError, match="conflict"):
        next(buf.generate_batches(num_mini_batch=3, mini_batch_size=5))
    with pytest.raises(ConfigError, match="divisor"):
        next(buf.generate_batches(num_mini_batch=5, mini_batch_size=None))
    envs.close()


def test_recurrent_batches_are_whole_columns_and_reproduce_log_probs():
    envs, actor, T = make_envs(4, max_steps=10), GRUActor(seed=4), 24
    buf = VTraceBuffer(T, "cpu", actor, Algo(gamma=0.9, num_mini_batch=2), envs)
    ref = collect(buf, actor, envs, T)
    stored_logp = buf.data[LOGP][:T].clone()
    batches = list(buf.generate_batches(num_mini_batch=2, mini_batch_size=None, shuffle=True))
    assert len(batches) == 2
    for b in batches:
        assert b[OBS].shape == (T * 2, 4) and b[RHS].shape == (2, 5)
        first = b[OBS].reshape(T, 2, 4)[0]  # time-major: the first 2 rows are t = 0
        envs_in = [int((buf.data[OBS][0] == o).all(dim=1).nonzero()[0]) for o in first]
        torch.testing.assert_close(b[RHS], buf.data[RHS][0, envs_in])
        torch.testing.assert_close(b[OBS], buf.data[OBS][:T, envs_in].reshape(-1, 4))
        torch.testing.assert_close(b[DONE], buf.data[DONE][:T, envs_in].reshape(-1, 1))
        # re-unrolling a column from its first state gives the rollout's log-probs exactly
        logp = actor.evaluate_actions(b[OBS], b[RHS], b[DONE], b[ACT])[0]
        torch.testing.assert_close(logp, stored_logp[:, envs_in].reshape(-1, 1))
    with pytest.raises(ConfigError, match="divisor"):
        next(buf.generate_batches(num_mini_batch=3, mini_batch_size=None))
    # V-trace with the unchanged (on-policy) actor: rho = c = 1, so vs is the lambda = 1 target
    new_logp = buf.get_updated_action_log_probs()
    torch.testing.assert_close(new_logp, stored_logp, rtol=1e-5, atol=1e-6)
    buf.before_gradients()
    _, mc = gae_reference(
        ref["rew"], ref["val"], ref["next_val"], ref["term"], ref["trunc"], gamma=0.9, lam=1.0
    )
    np.testing.assert_allclose(buf.data[RET][:T, :, 0], mc, rtol=1e-4, atol=1e-4)
    assert ref["trunc"].any() and ref["term"].any()
    envs.close()


def test_vtrace_off_policy_matches_reference_and_stores_new_log_probs():
    from rlstore.returns.reference import vtrace_reference

    envs, behaviour, T = make_envs(2), LinearActor(seed=5), 8
    target = LinearActor(seed=6)  # the learner has moved on: importance weights != 1
    buf = VTraceBuffer(T, "cpu", target, Algo(gamma=0.9, num_mini_batch=1), envs)
    ref = collect(buf, behaviour, envs, T)
    mu = buf.data[LOGP][:T, :, 0].double().numpy()
    with torch.no_grad():
        obs, act = buf.data[OBS][:T].reshape(-1, 4), buf.data[ACT][:T].reshape(-1, 1)
        pi = target.evaluate_actions(obs, None, None, act)[0].reshape(T, 2).double().numpy()
        v_new = target.v(buf.data[OBS][: T + 1]).double().numpy()[..., 0]
    # the target actor re-evaluates the values too (and V(final_obs) stays the stored one)
    nv = np.where(ref["trunc"], ref["fval"], v_new[1:])
    buf.before_gradients()
    vs, pg = vtrace_reference(
        mu,
        pi,
        ref["rew"],
        v_new[:T],
        nv,
        ref["term"],
        ref["trunc"],
        gamma=0.9,
        lam=1.0,
        rho_bar=1.0,
        c_bar=1.0,
        pg_rho_bar=1.0,
    )
    np.testing.assert_allclose(buf.data[RET][:T, :, 0], vs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(buf.data[ADV][:T, :, 0], normalized(pg, 1e-8), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(buf.data[LOGP][:T, :, 0], pi, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(buf.data[VAL][:T, :, 0], v_new[:T], rtol=1e-5, atol=1e-6)
    envs.close()


def test_intrinsic_stream_is_non_episodic_and_normalized():
    envs, actor, T = make_envs(2), LinearActor(seed=7), 10
    algo = Algo(gamma=0.9, gamma_intrinsic=0.8)
    buf = VanillaOnPolicyBuffer(T, "cpu", actor, algo, envs)
    ref = collect(buf, actor, envs, T, intrinsic=True)
    buf.before_gradients()
    # forward discounted running sum per env, its population std, rewards / (std + 1e-8)
    run, sums = np.zeros(2), []
    for r in ref["irew"]:
        run = 0.8 * run + r
        sums.append(run)
    scaled = ref["irew"] / (np.std(np.stack(sums)) + 1e-8)
    np.testing.assert_allclose(buf.data[IREW][:T, :, 0], scaled, rtol=1e-5)
    never = np.zeros_like(ref["term"])  # episode ends do not cut the intrinsic return
    nv = np.concatenate([ref["ival"][1:], ref["last_ival"][None]])
    iadv, iret = gae_reference(scaled, ref["ival"], nv, never, never, gamma=0.8, lam=1.0)
    np.testing.assert_allclose(buf.data[IRET][:T, :, 0], iret, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        buf.data[IADV][:T, :, 0], normalized(iadv, 1e-5), rtol=1e-4, atol=1e-4
    )
    envs.close()


def test_buffer_data_round_trip_and_parameters():
    envs, actor, T = make_envs(2), LinearActor(seed=8), 6
    buf = GAEBuffer(T, "cpu", actor, Algo(), envs)
    collect(buf, actor, envs, T)
    data = buf.get_all_buffer_data(data_to_cpu=True)
    assert {OBS, DONE, RET, ADV, TRUNC, FVAL} <= set(data) and data[OBS].shape == (T + 1, 2, 4)
    other = GAEBuffer(T, "cpu", actor, Algo(), envs)
    other.insert_data_slice(data)
    assert other.used_capacity == T
    buf.before_gradients()
    other.before_gradients()
    torch.testing.assert_close(other.data[RET], buf.data[RET])
    with pytest.raises(SpecError, match="unknown keys"):
        other.insert_data_slice({"Rewards": data[REW]})
    with pytest.raises(SpecError, match="leading axis"):
        other.insert_data_slice({REW: data[REW][:3]})
    # regression: a slice is validated like inserted samples, all or nothing (NaN was stored)
    before = other.get_all_buffer_data()
    with pytest.raises(SpecError, match=REW):
        other.insert_data_slice({**data, REW: data[REW].clone().fill_(float("nan"))})
    for k, v in other.get_all_buffer_data().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0, msg=k)
    before = buf.data[RET].clone()
    buf.update_storage_parameter("gae_lambda", 0.0)
    assert buf.gae_lambda == 0.0
    buf.before_gradients()
    assert not torch.allclose(before, buf.data[RET])
    with pytest.raises(ConfigError, match="not a numeric parameter"):
        buf.update_storage_parameter("no_such_thing", 1.0)
    with pytest.raises(ConfigError, match="expected a number"):
        buf.update_storage_parameter("gae_lambda", "high")
    for bad in (float("nan"), float("inf")):  # NaN was stored as the new lambda
        with pytest.raises(ConfigError, match="new_parameter_value"):
            buf.update_storage_parameter("gae_lambda", bad)
    assert buf.gae_lambda == 0.0
    envs.close()


def test_insert_validation_and_capacity():
    actor = LinearActor(obs_dim=2)
    buf = VanillaOnPolicyBuffer(2, "cpu", actor, Algo(), envs=None)
    with pytest.raises(EmptyBufferError, match="no transition"):
        buf.before_gradients()
    good = {
        OBS: torch.zeros(3, 2),
        OBS2: torch.ones(3, 2),
        DONE: torch.zeros(3, 1),
        DONE2: torch.zeros(3, 1),
        ACT: torch.zeros(3, 1),
        REW: torch.zeros(3, 1),
        VAL: torch.zeros(3, 1),
        LOGP: torch.zeros(3, 1),
    }
    with pytest.raises(SpecError, match="missing key 'LogProbability'"):
        buf.insert_transition({k: v for k, v in good.items() if k != LOGP})
    with pytest.raises(SpecError, match="missing key 'NextObservation'"):
        buf.insert_transition({k: v for k, v in good.items() if k != OBS2})
    with pytest.raises(SpecError, match="Action: expected a leading env axis of 3"):
        buf.insert_transition({**good, ACT: torch.zeros(2, 1)})
    assert buf.data[OBS] is None  # a rejected first sample allocates nothing
    buf.insert_transition(good)
    with pytest.raises(SpecError, match="NextObservation: expected shape \\(3, 2\\)"):
        buf.insert_transition({**good, OBS2: torch.ones(3, 5)})
    assert buf.used_capacity == 1
    buf.insert_transition(good)
    with pytest.raises(CapacityError, match="full"):
        buf.insert_transition(good)
    buf.reset()
    assert buf.used_capacity == 0
    assert buf.get_num_channels_obs(good) == 2  # no frame stacking: all channels

    class StackedEnvs:
        num_envs, env_kwargs = 3, {"frame_stack": 4}

    stacked = VTraceBuffer.create_factory(2)("cpu", actor, Algo(), StackedEnvs())
    assert isinstance(stacked, VTraceBuffer)
    assert stacked.get_num_channels_obs({OBS: torch.zeros(3, 12, 5, 5)}) == 3
    with pytest.raises(SpecError, match="frame_stack=4"):
        stacked.get_num_channels_obs({OBS: torch.zeros(3, 10, 5, 5)})
    with pytest.raises(CapacityError, match="size"):
        VanillaOnPolicyBuffer(0, "cpu", actor, Algo(), None)
    envs = make_envs(2)  # 2 envs, but the samples have 3 rows
    with pytest.raises(SpecError, match="envs.num_envs"):
        VanillaOnPolicyBuffer(2, "cpu", actor, Algo(), envs).insert_transition(good)
    envs.close()
    with pytest.raises(ConfigError, match="gae_lambda"):
        GAEBuffer(4, "cpu", actor, Algo(), None, gae_lambda=2.0)
    with pytest.raises(ConfigError, match="gamma"):
        GAEBuffer(4, "cpu", actor, object(), None)


@given(
    size=st.integers(1, 6),
    fill=st.integers(1, 6),
    N=st.integers(1, 3),
    seed=st.integers(0, 2**16),
    lam=st.sampled_from([0.0, 0.7, 1.0]),
)
def test_property_layout_c_conversion(size, fill, N, seed, lam):
    """Random done/truncation patterns and partial rollouts against a layout-A reference."""
    L = min(size, fill)
    g = torch.Generator().manual_seed(seed)
    actor = LinearActor(obs_dim=2, seed=seed % 7)
    buf = GAEBuffer(size, "cpu", actor, Algo(gamma=0.9), None, gae_lambda=lam)
    obs = torch.randn(L + 1, N, 2, generator=g)
    rew, val = torch.randn(L, N, 1, generator=g), torch.randn(L, N, 1, generator=g)
    done = torch.rand(L, N, 1, generator=g) < 0.4
    trunc = done & (torch.rand(L, N, 1, generator=g) < 0.5)
    fval = torch.randn(L, N, 1, generator=g)
    for t in range(L):
        buf.insert_transition({OBS: obs[t], OBS2: obs[t + 1], DONE: torch.zeros(N, 1),
                               DONE2: done[t].float(), ACT: torch.zeros(N, 1), REW: rew[t],
                               VAL: val[t], LOGP: torch.zeros(N, 1), TRUNC2: trunc[t],
                               FVAL: fval[t]})  # fmt: skip
    buf.before_gradients()
    with torch.no_grad():
        boot = actor.v(obs[L]).double().numpy()[:, 0]
    r, v = rew[..., 0].double().numpy(), val[..., 0].double().numpy()
    nv = np.concatenate([v[1:], boot[None]])
    te, tr = (done & ~trunc)[..., 0].numpy(), trunc[..., 0].numpy()
    nv = np.where(tr, fval[..., 0].double().numpy(), nv)
    adv, ret = gae_reference(r, v, nv, te, tr, gamma=0.9, lam=lam)
    np.testing.assert_allclose(buf.data[RET][:L, :, 0], ret, rtol=1e-5, atol=1e-5)
    if adv.std() > 0.1:  # well-conditioned normalization (float32 buffer vs float64 reference)
        np.testing.assert_allclose(
            buf.data[ADV][:L, :, 0], normalized(adv, 1e-5), rtol=1e-4, atol=1e-4
        )
    # the Done column holds the flag of transition t at t + 1 (layout C)
    np.testing.assert_array_equal(buf.data[DONE][1 : L + 1].bool().numpy(), done.numpy())


def test_dict_observations_and_hidden_states_are_stored_and_batched():
    """Dict Observation / RecurrentHiddenStates pass through the RolloutBuffer (a tuple there)."""

    class DictActor:
        is_recurrent = True

        def get_value(self, obs, rhs, done):  # one value per row: obs sum + its column's state
            reps = obs["a"].shape[0] // rhs["h"].shape[0]
            return {"value_net1": obs["a"].sum(-1, keepdim=True) + rhs["h"][:, :1].repeat(reps, 1)}

    g = torch.Generator().manual_seed(0)
    buf, N = GAEBuffer(3, "cpu", DictActor(), Algo(num_mini_batch=2), None), 4
    obs = {"a": torch.randn(N, 2, generator=g), "b": torch.zeros(N, 1, dtype=torch.long)}
    rhs = {"h": torch.randn(N, 3, generator=g)}
    for t in range(3):
        nobs = {"a": torch.randn(N, 2, generator=g), "b": torch.full((N, 1), t + 1)}
        nrhs = {"h": torch.randn(N, 3, generator=g)}
        zero = torch.zeros(N, 1)
        buf.insert_transition({OBS: obs, OBS2: nobs, RHS: rhs, RHS2: nrhs, DONE: zero, DONE2: zero,
                               ACT: zero, REW: zero + 1, VAL: zero, LOGP: zero})  # fmt: skip
        obs, rhs = nobs, nrhs
    d = buf.data
    assert d[OBS]["b"][:, 0, 0].tolist() == [0, 1, 2, 3] and d[OBS]["b"].dtype == torch.long
    torch.testing.assert_close(d[RHS]["h"][3], rhs["h"])  # slot L: the next hidden state
    buf.before_gradients()
    torch.testing.assert_close(d[VAL][3], obs["a"].sum(-1, keepdim=True) + rhs["h"][:, :1])
    for b in buf.generate_batches(num_mini_batch=2):
        assert b[OBS]["a"].shape == (6, 2) and b[RHS]["h"].shape == (2, 3)
    other = GAEBuffer(3, "cpu", DictActor(), Algo(), None)
    other.insert_data_slice(buf.get_all_buffer_data())
    torch.testing.assert_close(other.data[OBS]["a"], d[OBS]["a"])
    torch.testing.assert_close(other.data[RHS]["h"], d[RHS]["h"])
