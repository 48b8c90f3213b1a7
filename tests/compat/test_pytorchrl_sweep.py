"""Malformed-input sweep over the on-policy facades (issue 8): GAEBuffer, VanillaOnPolicyBuffer,
VTraceBuffer, PPODBuffer (PyTorchRL), PPOBuffer (src.buffers) and Memory
(DecisionTransformerInterpretability).

Every rejection is an RLStoreError naming the argument, and the object is unchanged after it
(the first call included); only lossless conversions are accepted silently.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rlstore.compat.ppo_buffer import PPOBuffer
from rlstore.compat.ppod import PPODBuffer
from rlstore.compat.pytorchrl import (
    ACT,
    DONE,
    DONE2,
    LOGP,
    OBS,
    OBS2,
    REW,
    VAL,
    GAEBuffer,
    VanillaOnPolicyBuffer,
    VTraceBuffer,
)
from rlstore.compat.src_ppo import Memory
from rlstore.errors import ConfigError, RLStoreError

N = 2


class Actor(nn.Module):
    is_recurrent = False

    def __init__(self) -> None:
        super().__init__()
        self.v = nn.Linear(3, 1)

    def get_value(self, obs, rhs, done):
        return {"value_net1": self.v(obs)}


@dataclass
class Algo:
    gamma: float = 0.9
    num_mini_batch: int = 1
    gamma_intrinsic: float | None = None


def sample(**over: Any) -> dict[str, Any]:
    s = {
        OBS: torch.zeros(N, 3),
        OBS2: torch.ones(N, 3),
        DONE: torch.zeros(N, 1),
        DONE2: torch.zeros(N, 1),
        ACT: torch.zeros(N, 1, dtype=torch.long),
        REW: torch.zeros(N, 1),
        VAL: torch.zeros(N, 1),
        LOGP: torch.zeros(N, 1),
    }
    return s | over


def fingerprint(buf: Any) -> bytes:
    """Everything a facade holds that a rejected call could change."""
    state = {
        k: getattr(buf, k)
        for k in ("size", "step", "_fresh", "ptr", "path_start_idx", "global_step")
        if hasattr(buf, k)
    }
    for k in ("data", "experiences", "_trunc"):
        if hasattr(buf, k):
            state[k] = getattr(buf, k)
    if hasattr(getattr(buf, "store", None), "state_dict"):
        state["store"] = buf.store.state_dict()
    if getattr(buf, "mixer", None) is not None:  # its history arrays are np.empty: not compared
        m = buf.mixer
        state["mixer"] = [m._t, len(m._hist), m._ep_start, m._ep_max, m._replaying, m._pos]
    for k in ("obs_buf", "act_buf", "rew_buf", "val_buf", "logp_buf"):
        if hasattr(buf, k):
            state[k] = getattr(buf, k).tobytes()
    return pickle.dumps(_plain(state))


def _plain(x: Any) -> Any:
    """Tensors and arrays as (dtype, shape, bytes): equal contents give equal pickles."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().contiguous().numpy()
    if isinstance(x, np.ndarray):
        return (str(x.dtype), x.shape, np.ascontiguousarray(x).tobytes())
    return x


def pytorchrl_buffers() -> list[Any]:
    classes = (VanillaOnPolicyBuffer, GAEBuffer, VTraceBuffer)
    out = [cls(4, "cpu", Actor(), Algo(), envs=None) for cls in classes]
    out.append(PPODBuffer(4, "cpu", Actor(), Algo(), envs=None, rho=0.0, phi=0.0, seed=0))
    return out


nan = float("nan")
BAD_SAMPLES = [
    (ACT, torch.tensor([[0.5], [1.0]]), ACT),  # fractional action into an int field
    (ACT, np.zeros((N, 1), complex), ACT),
    (REW, torch.tensor([[nan], [0.0]]), REW),
    (REW, torch.tensor([[float("inf")], [0.0]]), REW),
    (VAL, torch.tensor([[0.0], [nan]]), VAL),
    (OBS, torch.full((N, 3), nan), OBS),
    (OBS2, torch.full((N, 3), float("-inf")), OBS2),
    (OBS, np.zeros((N, 3), complex), OBS),
    (OBS2, np.full((N, 3), 1e300), OBS2),  # float64 into the float32 field: overflow
    (LOGP, "x", LOGP),
    (REW, None, REW),
    (ACT, torch.zeros(N, 2, dtype=torch.long), ACT),
]


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize(
    ("key", "value", "name"), BAD_SAMPLES, ids=[str(b[:1]) for b in BAD_SAMPLES]
)
def test_pytorchrl_inserts_reject_lossy_or_non_finite_values_and_change_nothing(
    first, key, value, name
):
    """Regression: GAEBuffer stored 0.5 as action 0 and NaN/inf rewards, values and obs."""
    for buf in pytorchrl_buffers():
        if not first:
            buf.insert_transition(sample())
        elif key == ACT and name == ACT and value.dtype != torch.complex128:
            continue  # the first sample fixes the action dtype and shape: any real one is fine
        if not first and key == OBS:
            continue  # after the first insert, Observation is not read (NextObservation is)
        before = fingerprint(buf)
        with pytest.raises(RLStoreError, match=name):
            buf.insert_transition(sample(**{key: value}))
        assert fingerprint(buf) == before, type(buf).__name__
        buf.insert_transition(sample())  # still usable with the original schema
        assert buf.data[ACT].dtype == torch.long


def test_pytorchrl_lossless_conversions_and_grad_tensors_are_accepted():
    for buf in pytorchrl_buffers():
        buf.insert_transition(sample())
        grad = torch.ones(N, 1, requires_grad=True)
        buf.insert_transition(sample(ACT=None) | {ACT: torch.ones(N, 1), VAL: grad * 2})
        assert buf.data[ACT][1].tolist() == [[1], [1]] and buf.data[VAL][1].eq(2).all()


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"device": "nope"}, "device"),
        ({"size": True}, "size"),
        ({"algorithm": Algo("0.9")}, "gamma"),
        ({"algorithm": Algo(True)}, "gamma"),
        ({"gae_lambda": True}, "gae_lambda"),
        ({"gae_lambda": "0.9"}, "gae_lambda"),
    ],
)
def test_pytorchrl_constructor_rejections_are_named(kw, name):
    args = {"size": 4, "device": "cpu", "actor": Actor(), "algorithm": Algo(), "envs": None}
    with pytest.raises(RLStoreError, match=name):
        GAEBuffer(**(args | kw))


# ----------------------------------------------------------------------------- PPODBuffer


def test_track_potential_demos_is_public_and_tracks_each_step_once():
    """Regression: the original's documented track_potential_demos(sample) was missing."""
    calls = []
    bufs = [PPODBuffer(4, "cpu", Actor(), Algo(), envs=None, rho=0.0, phi=0.0, seed=0)
            for _ in range(3)]  # fmt: skip
    for b in bufs:
        orig = b._track

        def counting(s, orig=orig, b=b):
            calls.append(id(b))
            return orig(s)

        b._track = counting
    for t in range(3):
        done = torch.tensor([[float(t == 1)], [0.0]])
        s = sample(**{DONE2: done, REW: torch.full((N, 1), float(t))})
        bufs[0].insert_transition(s)  # tracks inside
        bufs[1].track_potential_demos(s)  # the original's workflow: track, then insert
        bufs[1].insert_transition(s)
        bufs[2].insert_transition(s)
        bufs[2].track_potential_demos(s)  # after the insert: already tracked, no-op
    assert [calls.count(id(b)) for b in bufs] == [3, 3, 3]
    a, b, c = (fingerprint(x) for x in bufs)
    assert a == b == c
    # an episode ended (env 0 at t=1) and was offered to the store as a candidate demo
    store = bufs[0].store
    assert len(store.reward_demos) + len(store.value_demos) == 1
    with pytest.raises(RLStoreError, match=REW):
        bufs[0].track_potential_demos(sample(**{REW: torch.full((N, 1), nan)}))


# ----------------------------------------------------------------------------- PPOBuffer


def step(**over: Any) -> dict[str, Any]:
    return {"obs": np.zeros(3), "act": np.zeros(2), "rew": 1.0, "val": 0.0, "logp": -0.7} | over


@pytest.mark.parametrize(
    ("over", "name"),
    [
        ({"obs": np.array([1 + 2j, 0, 0])}, "obs"),
        ({"obs": np.array([1e300, 0, 0])}, "obs"),
        ({"act": np.array([1e300, 0])}, "act"),
        ({"rew": None}, "rew"),
        ({"rew": "1.0"}, "rew"),
        ({"rew": 1e300}, "rew"),
        ({"val": 1 + 1j}, "val"),
        ({"logp": [nan]}, "logp"),
        ({"obs": np.array(["a", "b", "c"])}, "obs"),
    ],
)
def test_ppo_buffer_store_rejects_lossy_values_and_changes_nothing(over, name):
    """Regression: complex obs lost their imaginary part, 1e300 became inf, None a TypeError."""
    buf = PPOBuffer(3, 2, size=4, batch_size=2)
    for first in (True, False):
        before = fingerprint(buf)
        with pytest.raises(RLStoreError, match=name):
            buf.store(step(**over))
        assert fingerprint(buf) == before
        if first:
            buf.store(step())
    with pytest.raises(RLStoreError, match="last_val"):
        buf.finish_path(last_val="0.5")


def test_ppo_buffer_accepts_grad_tensors_and_rejects_string_gamma():
    buf = PPOBuffer(3, 2, size=4, batch_size=2)
    x = torch.ones(3, requires_grad=True)
    buf.store(step(obs=x * 2, val=(x.sum() * 0).reshape(1)))
    assert buf.obs_buf[0].tolist() == [2.0, 2.0, 2.0]
    for kw in ({"gamma": "0.9"}, {"lam": True}, {"size": True}):
        with pytest.raises(RLStoreError, match=next(iter(kw))):
            PPOBuffer(3, 2, **({"size": 4, "batch_size": 2} | kw))


# ----------------------------------------------------------------------------- Memory


class Args:
    gamma, gae_lambda, batch_size, minibatch_size, num_minibatches, seed = 0.9, 0.8, 4, 2, 2, 0


def mem_step(**over: Any) -> tuple:
    d = {"obs": torch.zeros(N, 4), "done": torch.zeros(N), "act": torch.zeros(N, dtype=torch.long),
         "logp": torch.zeros(N), "val": torch.zeros(N), "rew": torch.zeros(N)} | over  # fmt: skip
    return tuple(d.values())


@pytest.mark.parametrize(
    ("over", "name"),
    [
        ({"obs": torch.full((N, 4), nan)}, "obs"),
        ({"obs": np.zeros((N, 4), complex)}, "obs"),
        ({"act": torch.tensor([nan, 0.0])}, "action"),
        ({"rew": torch.tensor([nan, 0.0])}, "reward"),
        ({"val": torch.tensor([float("inf"), 0.0])}, "value"),
        ({"done": torch.tensor([0.5, 0.0])}, "done"),
        ({"logp": "x"}, "logp"),
        ({"obs": torch.zeros(N, 5)}, "obs"),
    ],
)
def test_memory_add_rejects_bad_steps_before_storing(over, name):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(N)])
    memory = Memory(envs, Args())
    for first in (True, False):
        if first and name == "obs" and over["obs"].shape[-1] == 5:
            memory.add(*mem_step())  # a different obs shape is only wrong after the first add
            continue
        before = fingerprint(memory)
        with pytest.raises(RLStoreError, match=name):
            memory.add(*mem_step(**over))
        assert fingerprint(memory) == before
        if first:
            memory.add(*mem_step())
    envs.close()


def test_memory_bad_device_is_a_config_error():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(ConfigError, match="device"):
        Memory(envs, Args(), device="gpu0")
    envs.close()
