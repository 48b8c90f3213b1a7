"""Tests of the DecisionTransformerInterpretability facades: layout-B GAE helpers and Memory
over RolloutBuffer."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rlstore.compat.src_ppo import (
    Memory,
    Minibatch,
    TrajectoryMinibatch,
    compute_advantages_vectorized,
    process_memory_vars_to_log,
    shift_rows,
)
from rlstore.errors import ConfigError, EmptyBufferError, SpecError
from rlstore.returns.reference import gae_reference

CPU = torch.device("cpu")


def cleanrl_gae(next_value, next_done, rewards, values, dones, gamma, lam):
    """CleanRL ``ppo.py`` GAE loop over layout-B flags (``dones[t]``: obs t starts an episode)."""
    T = rewards.shape[0]
    adv = torch.zeros_like(rewards, dtype=torch.float64)
    last = torch.zeros(rewards.shape[1], dtype=torch.float64)
    for t in reversed(range(T)):
        if t == T - 1:
            nonterminal, nextvalues = 1.0 - next_done.double(), next_value.double()
        else:
            nonterminal, nextvalues = 1.0 - dones[t + 1].double(), values[t + 1].double()
        delta = rewards[t].double() + gamma * nextvalues * nonterminal - values[t].double()
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv


def seed_closed_form(next_value, next_done, rewards, values, dones, gamma, lam):
    """The original's O(T^2) masked closed form (built on shift_rows), as a second reference."""
    T, N = rewards.shape
    next_values = torch.cat([values[1:], next_value[None]])
    next_dones = torch.cat([dones[1:], next_done[None]])
    deltas = rewards + gamma * next_values * (1.0 - next_dones) - values
    upper = torch.triu(torch.ones(T, T))[:, :, None]
    mask = next_dones[None].expand(T, T, N) * upper
    mask = 1 - (mask.cumsum(dim=1) > 0).float()
    mask = torch.cat([torch.ones(T, 1, N), mask[:, :-1]], dim=1) * upper
    discounts = shift_rows(((gamma * lam) ** torch.arange(T).double())[:, None].expand(T, N))
    return (discounts * (mask * deltas[None].expand(T, T, N))).sum(dim=1)


def test_shift_rows_documented_example_and_batch_dims():
    out = shift_rows(torch.tensor([1, 2, 3]))
    assert out.tolist() == [[1, 2, 3], [0, 1, 2], [0, 0, 1]]
    assert shift_rows(np.array([1.0, 2.0, 3.0])).tolist() == [[1, 2, 3], [0, 1, 2], [0, 0, 1]]
    arr = np.arange(8.0).reshape(4, 2)
    got = shift_rows(arr)
    assert got.shape == (4, 4, 2)
    for i in range(4):
        for j in range(4):
            np.testing.assert_array_equal(got[i, j], arr[j - i] if j >= i else 0.0)
    with pytest.raises(SpecError, match="arr"):
        shift_rows(np.float64(1.0))


def test_compute_advantages_vectorized_hand_values():
    # gamma = lam = 1; env 0 never ends: A = [3, 2, 1] (sum of the remaining rewards).
    # env 1: dones[1] = 1, so transition 0 ended its episode: A0 = r0 - v0 = 1 and the
    # second episode gives A = [2, 1] for t = 1, 2.
    dones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    adv = compute_advantages_vectorized(
        torch.zeros(2), torch.zeros(2), torch.ones(3, 2), torch.zeros(3, 2), dones, CPU, 1.0, 1.0
    )
    assert adv.tolist() == [[3.0, 1.0], [2.0, 2.0], [1.0, 1.0]]
    # next_done = 1 removes the bootstrap: A_{T-1} = r - v = 1 - 0.5; with next_done = 0 it is
    # r + gamma * next_value - v = 1 + 0.5 * 4 - 0.5 = 2.5
    for nd, want in [(1.0, 0.5), (0.0, 2.5)]:
        a = compute_advantages_vectorized(
            torch.tensor([4.0]),
            torch.tensor([nd]),
            torch.ones(1, 1),
            torch.full((1, 1), 0.5),
            torch.zeros(1, 1),
            CPU,
            0.5,
            0.9,
        )
        assert a.item() == pytest.approx(want)


@pytest.mark.parametrize("T,N", [(1, 1), (7, 3), (32, 4)])
@pytest.mark.parametrize("gamma,lam,density", [(0.99, 0.95, 0.1), (0.9, 0.0, 0.5), (1.0, 1.0, 0.3)])
def test_compute_advantages_vectorized_matches_cleanrl_loop(T, N, gamma, lam, density):
    g = torch.Generator().manual_seed(T * 100 + N)
    rewards, values = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    dones = (torch.rand(T, N, generator=g) < density).float()
    next_value, next_done = torch.randn(N, generator=g), (torch.rand(N, generator=g) < 0.5).float()
    got = compute_advantages_vectorized(
        next_value, next_done, rewards, values, dones, CPU, gamma, lam
    )
    want = cleanrl_gae(next_value, next_done, rewards, values, dones, gamma, lam)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    closed = seed_closed_form(next_value, next_done, rewards, values, dones, gamma, lam)
    torch.testing.assert_close(got.double(), closed.double(), rtol=1e-4, atol=1e-4)
    # the conversion is layout B -> A: a transition-aligned reference gives the same numbers
    done_a = torch.cat([dones[1:], next_done[None]]).numpy() != 0
    nv = torch.cat([values[1:], next_value[None]]).numpy()
    ref, _ = gae_reference(
        rewards.numpy(), values.numpy(), nv, done_a, np.zeros_like(done_a), gamma=gamma, lam=lam
    )
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-5)


@given(
    T=st.integers(1, 12),
    N=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    density=st.sampled_from([0.0, 0.2, 0.6, 1.0]),
    gamma=st.sampled_from([0.0, 0.5, 0.99, 1.0]),
    lam=st.sampled_from([0.0, 0.9, 1.0]),
)
def test_property_layout_b_gae_identities(T, N, seed, density, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    r, v = (
        torch.randn(T, N, generator=g, dtype=torch.float64),
        torch.randn(T, N, generator=g, dtype=torch.float64),
    )
    d = (torch.rand(T, N, generator=g) < density).double()
    nv, nd = (
        torch.randn(N, generator=g, dtype=torch.float64),
        (torch.rand(N, generator=g) < 0.5).double(),
    )
    got = compute_advantages_vectorized(nv, nd, r, v, d, CPU, gamma, lam)
    torch.testing.assert_close(got, cleanrl_gae(nv, nd, r, v, d, gamma, lam))
    # permuting env columns permutes the output columns
    perm = torch.randperm(N, generator=g)
    permuted = compute_advantages_vectorized(
        nv[perm], nd[perm], r[:, perm], v[:, perm], d[:, perm], CPU, gamma, lam
    )
    torch.testing.assert_close(permuted, got[:, perm])
    # splitting at a step where every column starts a new episode changes nothing, whatever
    # (garbage) bootstrap the first part is given
    if T > 1:
        k = int(torch.randint(1, T, (1,), generator=g))
        d[k] = 1.0
        whole = compute_advantages_vectorized(nv, nd, r, v, d, CPU, gamma, lam)
        head = compute_advantages_vectorized(
            torch.full((N,), 99.0, dtype=torch.float64),
            torch.ones(N),
            r[:k],
            v[:k],
            d[:k],
            CPU,
            gamma,
            lam,
        )
        tail = compute_advantages_vectorized(nv, nd, r[k:], v[k:], d[k:], CPU, gamma, lam)
        torch.testing.assert_close(torch.cat([head, tail]), whole)


def test_compute_advantages_vectorized_shape_errors():
    z = torch.zeros(3, 2)
    with pytest.raises(SpecError, match="values: expected shape \\(3, 2\\)"):
        compute_advantages_vectorized(torch.zeros(2), torch.zeros(2), z, z[:2], z, CPU, 0.9, 0.9)
    with pytest.raises(SpecError, match="next_value"):
        compute_advantages_vectorized(torch.zeros(3), torch.zeros(2), z, z, z, CPU, 0.9, 0.9)


@dataclass
class Args:
    """The OnlineTrainConfig attributes Memory reads (duck-typed)."""

    gamma: float = 0.9
    gae_lambda: float = 0.8
    batch_size: int = 24
    minibatch_size: int = 6
    num_minibatches: int = 4
    seed: int = 0


def make_envs(n: int = 3) -> gym.vector.SyncVectorEnv:
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])


def fill(memory: Memory, T: int, seed: int = 0, hidden: bool = False):
    """Add T random steps with layout-B dones; return the stacked tensors."""
    g = torch.Generator().manual_seed(seed)
    N = memory.num_envs
    steps = []
    for t in range(T):
        obs = torch.randn(N, 4, generator=g)
        done = (torch.rand(N, generator=g) < 0.25).float() if t else torch.zeros(N)
        act = torch.randint(0, 2, (N,), generator=g)
        logp, val, rew = (torch.randn(N, generator=g) for _ in range(3))
        extra = (torch.randn(N, 5, generator=g),) if hidden else ()
        memory.add(obs, done, act, logp, val, rew, *extra)
        steps.append((obs, done, act, logp, val, rew, *extra))
    memory.next_value = torch.randn(N, generator=g)
    memory.next_done = (torch.rand(N, generator=g) < 0.5).float()
    return [torch.stack(x) for x in zip(*steps, strict=True)]


def test_memory_flat_minibatches_match_cleanrl_gae():
    envs = make_envs()
    memory = Memory(envs, Args())
    assert memory.next_obs.shape == (3, 4) and memory.next_done.tolist() == [0.0, 0.0, 0.0]
    obs, dones, acts, logps, vals, rews = fill(memory, T=8)
    adv = cleanrl_gae(memory.next_value, memory.next_done, rews, vals, dones, 0.9, 0.8).float()
    mbs = memory.get_minibatches()
    assert len(mbs) == 4 and all(isinstance(mb, Minibatch) for mb in mbs)
    seen = torch.cat([mb.indices for mb in mbs]).sort().values
    assert seen.tolist() == list(range(24))  # every step exactly once
    for mb in mbs:
        i = mb.indices  # flat time-major t * N + n, as the original's flatten(0, 1)
        torch.testing.assert_close(mb.obs, obs.flatten(0, 1)[i])
        torch.testing.assert_close(mb.actions, acts.flatten(0, 1)[i])
        torch.testing.assert_close(mb.advantages, adv.flatten(0, 1)[i], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mb.returns, (adv + vals).flatten(0, 1)[i], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        memory.compute_advantages(
            memory.next_value, memory.next_done, rews, vals, dones, CPU, 0.9, 0.8
        ),
        adv,
        rtol=1e-5,
        atol=1e-5,
    )
    # explicit indexes (the original's get_minibatch_indexes output) are honoured in order
    indexes = memory.get_minibatch_indexes(24, 6)
    assert sorted(np.concatenate(indexes).tolist()) == list(range(24))
    mbs = memory.get_minibatches(indexes=indexes)
    for mb, ind in zip(mbs, indexes, strict=True):
        torch.testing.assert_close(mb.advantages, adv.flatten(0, 1)[ind], rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="indexes"):
        memory.get_minibatches(indexes=[np.array([24])])
    # the rollout is built once; a new bootstrap value (or a new step) rebuilds it
    first = memory.get_minibatches()[0]
    assert memory._rollout() is memory._rollout()
    memory.next_value = memory.next_value + 1.0
    moved = cleanrl_gae(memory.next_value, memory.next_done, rews, vals, dones, 0.9, 0.8).float()
    for mb in memory.get_minibatches():
        torch.testing.assert_close(
            mb.advantages, moved.flatten(0, 1)[mb.indices], rtol=1e-5, atol=1e-5
        )
    assert not torch.equal(first.indices, memory.get_minibatches()[0].indices)  # reshuffled
    envs.close()


def test_memory_truncation_bootstraps_from_final_value():
    envs = make_envs(1)
    memory = Memory(envs, Args(gamma=0.5, gae_lambda=1.0, minibatch_size=3))
    one = torch.ones(1)
    memory.add(torch.zeros(1, 4), torch.zeros(1), torch.zeros(1), one * 0, one * 0, one)
    # this add says: the previous transition ended its episode by truncation, V(final) = 4
    memory.add(
        torch.zeros(1, 4),
        one,
        torch.zeros(1),
        one * 0,
        one * 0,
        one,
        truncated=torch.tensor([True]),
        final_value=torch.tensor([4.0]),
    )
    memory.add(torch.zeros(1, 4), torch.zeros(1), torch.zeros(1), one * 0, one * 0, one)
    memory.next_value, memory.next_done = torch.tensor([2.0]), torch.tensor([1.0])
    memory.next_truncated, memory.next_final_value = torch.tensor([True]), torch.tensor([6.0])
    adv = torch.cat([mb.advantages[mb.indices.argsort()] for mb in memory.get_minibatches()])
    # V = 0 everywhere. t0 truncated: 1 + 0.5*4 = 3; t1 continues: 1 + 0.5*A2;
    # t2 truncated at the rollout end: 1 + 0.5*6 = 4 (not next_value = 2); A1 = 1 + 0.5*4 = 3
    assert adv.tolist() == [3.0, 3.0, 4.0]
    memory.next_truncated = None  # the original's semantics: a done is a termination
    adv = torch.cat([mb.advantages[mb.indices.argsort()] for mb in memory.get_minibatches()])
    assert adv.tolist() == [3.0, 1.5, 1.0]
    envs.close()


def test_memory_recurrent_minibatches_and_indexes():
    envs = make_envs(2)
    args = Args(batch_size=16, minibatch_size=4, num_minibatches=2)
    memory = Memory(envs, args)
    obs, dones, *_, hidden = fill(memory, T=8, hidden=True)
    starts = memory.get_minibatch_indexes(16, 4, recurrence=2)
    assert len(starts) == 4 and all(len(s) == 2 for s in starts)
    flat = np.sort(np.concatenate(starts))
    assert flat.tolist() == list(range(0, 16, 2))  # chunks of 2 never cross the 8-step columns
    with pytest.raises(ConfigError, match="recurrence"):
        memory.get_minibatch_indexes(16, 4, recurrence=3)
    with pytest.raises(ConfigError, match="minibatch_size"):
        memory.get_minibatch_indexes(16, 5)
    done_a = torch.cat([dones[1:], memory.next_done[None]]) != 0
    count = 0
    for mb in memory.get_minibatches(recurrence=3):
        assert mb.obs.shape[0] == 3 and mb.mask.shape == mb.indices.shape
        for b in range(mb.indices.shape[1]):
            idx = mb.indices[:, b][mb.mask[:, b]]
            t, n = idx // 2, idx % 2
            assert (n == n[0]).all() and (t == t[0] + torch.arange(len(t))).all()
            assert not done_a[t[:-1], n[:-1]].any()  # no episode boundary inside a sequence
            torch.testing.assert_close(mb.recurrence_memory[b], hidden[t[0], n[0]])
            count += len(idx)
    assert count == 16
    with pytest.raises(ConfigError, match="indexes"):
        memory.get_minibatches(recurrence=2, indexes=starts)
    envs.close()


def test_memory_trajectory_minibatches():
    envs = make_envs(2)
    memory = Memory(envs, Args(minibatch_size=4))
    obs, dones, acts, logps, vals, rews = fill(memory, T=6, seed=3)
    adv = cleanrl_gae(memory.next_value, memory.next_done, rews, vals, dones, 0.9, 0.8).float()
    mbs = memory.get_trajectory_minibatches(timesteps=3, prob_go_from_end=0.0)
    assert len(mbs) == 3 and all(isinstance(mb, TrajectoryMinibatch) for mb in mbs)
    assert sorted(torch.cat([mb.indices for mb in mbs]).tolist()) == list(range(12))
    for mb in mbs:
        assert mb.obs.shape == (4, 3, 4) and mb.timesteps.shape == (4, 3)
        torch.testing.assert_close(
            mb.advantages, adv.flatten(0, 1)[mb.indices], rtol=1e-5, atol=1e-5
        )
        torch.testing.assert_close(mb.obs[:, -1], obs.flatten(0, 1)[mb.indices])
        # left padding is zero and masked; no window reaches back over an episode start
        assert (mb.obs[~mb.mask] == 0).all()
        t, n = mb.indices // 2, mb.indices % 2
        for b in range(4):
            real = int(mb.mask[b].sum())
            starts_inside = dones[t[b] - real + 2 : t[b] + 1, n[b]] if real > 1 else dones[:0, 0]
            assert not starts_inside.any()
    envs.close()


def test_memory_statistics_logging_and_printing(capsys):
    envs = gym.wrappers.vector.RecordEpisodeStatistics(make_envs(2))
    memory = Memory(envs, Args(batch_size=8, minibatch_size=4))
    assert memory.get_printable_output() == ""
    obs, _ = envs.reset(seed=0)
    done = np.zeros(2)
    rng = np.random.default_rng(0)
    finished = []
    for _ in range(60):
        act = rng.integers(0, 2, size=2)
        next_obs, rew, term, trunc, info = envs.step(act)
        memory.add(
            torch.as_tensor(obs),
            torch.as_tensor(done),
            torch.as_tensor(act),
            torch.zeros(2),
            torch.zeros(2),
            torch.as_tensor(rew),
            info=info,
        )
        if "_episode" in info:
            finished += info["episode"]["l"][info["_episode"]].tolist()
        obs, done = next_obs, np.logical_or(term, trunc).astype(float)
    assert memory.global_step == 120 and finished  # 60 steps of 2 envs, some episodes ended
    assert memory.episode_lengths == finished
    assert "avg_episode_length" in memory.get_printable_output()
    stats = process_memory_vars_to_log(memory.vars_to_log)
    assert stats["episode_length_count"] == len(finished)
    assert stats["episode_length"] == pytest.approx(np.mean(finished))
    logged = []
    memory.log(lambda d, step: logged.append((step, d)))
    assert [s for s, _ in logged] == sorted(memory.vars_to_log)

    class Writer:
        def __init__(self):
            self.rows = []

        def add_scalar(self, tag, value, step):
            self.rows.append((tag, step))

    w = Writer()
    memory.log(w)
    assert len(w.rows) == 2 * len(memory.vars_to_log)
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ConfigError, match="wandb"):
            memory.log()
    memory.sample_experiences()
    assert capsys.readouterr().out.startswith("Sample ")
    memory.reset()
    assert memory.experiences == [] and memory.vars_to_log == {} and memory.next_obs is not None
    envs.close()


def test_memory_statistics_from_final_info_under_same_step_autoreset():
    # per-env RecordEpisodeStatistics + SAME_STEP autoreset: the finished episodes' statistics
    # are in info["final_info"] (the step's own info is the reset's)
    envs = gym.make_vec(
        "CartPole-v1", num_envs=2, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
        wrappers=[gym.wrappers.RecordEpisodeStatistics],
    )  # fmt: skip
    memory = Memory(envs, Args())
    obs, _ = envs.reset(seed=0)
    done, lengths, ep_len = np.zeros(2), [], np.zeros(2, dtype=int)
    for _ in range(40):
        next_obs, rew, term, trunc, info = envs.step(np.zeros(2, dtype=np.int64))
        ep_len += 1
        memory.add(torch.as_tensor(obs), torch.as_tensor(done), torch.zeros(2), torch.zeros(2),
                   torch.zeros(2), torch.as_tensor(rew), info=info)  # fmt: skip
        ended = term | trunc
        lengths += ep_len[ended].tolist()
        ep_len[ended] = 0
        obs, done = next_obs, ended.astype(float)
    assert lengths and memory.episode_lengths == lengths  # always pushing left: short episodes
    assert memory.episode_returns == lengths  # reward 1 per step
    envs.close()


def test_process_memory_vars_to_log_hand_values():
    logged = {
        4: {"episode_return": 10.0, "note": "x"},
        8: {"episode_return": np.float32(20.0), "loss": torch.tensor(0.5)},
    }
    # mean of 10 and 20 = 15; strings are skipped
    assert process_memory_vars_to_log(logged) == {
        "episode_return": 15.0,
        "episode_return_count": 2.0,
        "loss": 0.5,
        "loss_count": 1.0,
    }


def test_memory_input_errors():
    envs = make_envs(2)
    memory = Memory(envs, Args())
    with pytest.raises(EmptyBufferError):
        memory.get_minibatches()
    with pytest.raises(SpecError, match="expected \\(obs, done"):
        memory.add(torch.zeros(2, 4), torch.zeros(2))
    with pytest.raises(SpecError, match="done: expected shape \\(2,\\)"):
        memory.add(torch.zeros(2, 4), torch.zeros(3), torch.zeros(2), *(torch.zeros(2),) * 3)
    with pytest.raises(SpecError, match="previous rollout"):
        memory.add(
            torch.zeros(2, 4),
            torch.ones(2),
            torch.zeros(2),
            *(torch.zeros(2),) * 3,
            truncated=torch.ones(2, dtype=torch.bool),
            final_value=torch.zeros(2),
        )
    with pytest.raises(SpecError, match="previous rollout"):  # rejected: fixes no shapes
        memory.add(torch.zeros(2, 5), torch.ones(2), torch.zeros(2), *(torch.zeros(2),) * 3,
                   truncated=torch.ones(2), final_value=torch.zeros(2))  # fmt: skip
    memory.add(torch.zeros(2, 4), torch.zeros(2), torch.zeros(2), *(torch.zeros(2),) * 3)
    with pytest.raises(SpecError, match="obs"):  # the first add fixed the shapes
        memory.add(torch.zeros(2, 5), torch.zeros(2), torch.zeros(2), *(torch.zeros(2),) * 3)
    with pytest.raises(SpecError, match="final_value"):
        memory.add(torch.zeros(2, 4), torch.ones(2), torch.zeros(2), *(torch.zeros(2),) * 3,
                   truncated=torch.ones(2), final_value=torch.tensor([0.0, torch.nan]))  # fmt: skip
    assert len(memory.experiences) == 1
    memory.next_done = None
    with pytest.raises(EmptyBufferError, match="next_value"):
        memory.get_minibatches()
    with pytest.raises(ConfigError, match="gae_lambda"):
        Memory(envs, object())
    envs.close()


def test_memory_accepts_the_trainer_config():
    config = pytest.importorskip("rlstore.agents.ppo_config")
    args = config.OnlineTrainConfig(num_envs=2, num_steps=4, num_minibatches=2)
    envs = make_envs(2)
    memory = Memory(envs, args)
    _, dones, _, _, vals, rews = fill(memory, T=4, seed=5)
    adv = cleanrl_gae(
        memory.next_value, memory.next_done, rews, vals, dones, args.gamma, args.gae_lambda
    ).float()
    mbs = memory.get_minibatches()
    assert [len(mb.indices) for mb in mbs] == [args.minibatch_size] * 2
    for mb in mbs:
        torch.testing.assert_close(
            mb.advantages, adv.flatten(0, 1)[mb.indices], rtol=1e-5, atol=1e-5
        )
    envs.close()


def test_layout_b_helpers_are_re_exported_and_shared_by_memory():
    import rlstore.compat.src_ppo as src_ppo
    import rlstore.compat.src_ppo_memory as gae_mod

    assert src_ppo.compute_advantages_vectorized is gae_mod.compute_advantages_vectorized
    assert src_ppo.shift_rows is gae_mod.shift_rows
    memory = Memory(make_envs(2), Args())
    r, v = torch.ones(3, 2), torch.zeros(3, 2)
    d = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    # gamma = lam = 1, values 0: A_t = number of rewards left in the episode
    # env 0: no done -> [3, 2, 1]; env 1: obs 1 starts anew -> transition 0 ends -> [1, 2, 1]
    adv = memory.compute_advantages(torch.zeros(2), torch.zeros(2), r, v, d, CPU, 1.0, 1.0)
    assert adv.T.tolist() == [[3.0, 2.0, 1.0], [1.0, 2.0, 1.0]]
