"""The compatibility classes against the original libraries' API documentation: every documented
name where the original's users look for it, the documented signatures (names, order, defaults,
keyword-only ``device``), and the documented call forms (``src.ppo``'s are in
``test_src_ppo_api.py``)."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import rlstore.compat as compat
from rlstore.compat import pytorchrl, velora

ST = {"Action": np.float32, "Observation": np.float32, "Reward": np.float32}
B5 = "size device actor algorithm envs"
PPOD = (  # PPODBuffer's documented keyword defaults, in order
    ("rho", 0.1), ("phi", 0.3), ("gae_lambda", 0.95), ("alpha", 10),
    ("total_buffer_demo_capacity", 51), ("initial_human_demos_dir", None),
    ("initial_agent_demos_dir", None), ("supplementary_demos_dir", None),
    ("target_agent_demos_dir", None), ("num_agent_demos_to_save", 10),
    ("initial_reward_threshold", None), ("save_demos_every", 10), ("demo_dtypes", ST),
)  # fmt: skip
VELORA = "capacity state_dim action_dim hidden_dim"
SIGNATURES = {  # "name(=default)" of the documented parameters, in order; "*": keyword-only next
    "compat.PPOBuffer": "obs_dim act_dim size batch_size gamma=0.99 lam=0.95 eps=0.001",
    "compat.SimpleReplayBuffer": "obs_dim act_dim size batch_size",
    "compat.discount_cumsum": "x discount",
    "compat.PPOBuffer.store": "buffer_dict",
    "compat.SimpleReplayBuffer.store": "buffer_dict",
    "compat.SimpleReplayBuffer.finish_path": "action_obj=None",
    "compat.SimpleReplayBuffer.instantiate_from_config": "config_file_location",
    "compat.PPOBuffer.instantiate_from_config_dict": "config",
    "pytorchrl.VanillaOnPolicyBuffer": B5,
    "pytorchrl.VTraceBuffer": B5,
    "pytorchrl.MBReplayBuffer": B5,
    "pytorchrl.GAEBuffer": f"{B5} gae_lambda=0.95",
    "pytorchrl.VanillaOnPolicyBuffer.create_factory": "size",
    "pytorchrl.GAEBuffer.create_factory": "size gae_lambda=0.95",  # was (size, *args, **kwargs)
    "pytorchrl.VTraceBuffer.create_factory": "size",
    "pytorchrl.MBReplayBuffer.create_factory": "size",
    "pytorchrl.VanillaOnPolicyBuffer.generate_batches": "num_mini_batch mini_batch_size "
    "num_epochs=1 shuffle=True",
    "pytorchrl.VanillaOnPolicyBuffer.compute_returns": "rewards returns values dones gamma",
    "pytorchrl.VanillaOnPolicyBuffer.compute_advantages": "returns values",
    "pytorchrl.VanillaOnPolicyBuffer.get_all_buffer_data": "data_to_cpu=False",
    "pytorchrl.VanillaOnPolicyBuffer.update_storage_parameter": "parameter_name "
    "new_parameter_value",
    "pytorchrl.VTraceBuffer.compute_vtrace": "clip_rho_thres=1.0 clip_c_thres=1.0",
    "pytorchrl.MBReplayBuffer.generate_batches": "num_mini_batch mini_batch_size=256 num_epochs=1",
    "pytorchrl.MBReplayBuffer.get_data_slice": "start_pos end_pos",
    "pytorchrl.MBReplayBuffer.insert_single_tensor_slice": "tensor_storage tensor_key "
    "tensor_values",
    "pytorchrl.PPODBuffer.sample_demo": "env_id",
    "pytorchrl.PPODBuffer.load_demo": "demo_path",
    "velora.ReplayBuffer": f"{VELORA} * device=None",
    "velora.BufferBase": f"{VELORA} * device=None",
    "velora.BufferBase.sample": "",  # abstract, no batch_size (ReplayBuffer.sample adds it)
    "velora.ReplayBuffer.add": "state action reward next_state done hidden",
    "velora.ReplayBuffer.add_multi": "states actions rewards next_states dones hiddens",
    "velora.ReplayBuffer.sample": "batch_size",
    "velora.ReplayBuffer.warm": "agent n_samples num_envs=8",
    "velora.ReplayBuffer.save": "dirpath prefix='buffer_'",
    "velora.ReplayBuffer.load": "state_path metadata",
    "velora.BatchExperience": "states actions rewards next_states dones hiddens",
}
SRC = str(Path(compat.__file__).parents[2])  # the src/ folder rlstore is imported from
MODULES = {"compat": compat, "pytorchrl": pytorchrl, "velora": velora}


def _resolve(name: str):
    module, *parts = name.split(".")
    obj = MODULES[module]
    for part in parts:
        obj = getattr(obj, part)
    return obj


def _check(obj, documented: list[tuple[str, object, bool]]) -> None:
    params = [p for p in inspect.signature(obj).parameters.values() if p.name not in ("self",)]
    for (name, default, kw_only), p in zip(documented, params, strict=False):
        assert p.name == name
        kind = p.KEYWORD_ONLY if kw_only else p.POSITIONAL_OR_KEYWORD  # positional as documented
        assert p.kind is kind, (name, p.kind)
        if default is not inspect.Parameter.empty:  # a required one may have gained a default
            assert p.default == default and type(p.default) is type(default), (name, p.default)
    assert len(params) >= len(documented)
    extra = params[len(documented) :]  # rlstore's additions are optional
    assert all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in extra), extra  # fmt: skip


def _parse(text: str) -> list[tuple[str, object, bool]]:
    documented, kw_only = [], False
    for item in text.split():
        if item == "*":
            kw_only = True
            continue
        key, _, default = item.partition("=")
        documented.append((key, eval(default) if default else inspect.Parameter.empty, kw_only))
    return documented


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_documented_signatures(name):
    _check(_resolve(name), _parse(SIGNATURES[name]))


@pytest.mark.parametrize("factory", [False, True])
def test_ppod_documented_defaults(factory):
    # demo_dtypes defaulted to None; the documented default is the float32 dict; create_factory
    # showed (size, *args, **kwargs)
    obj, first = (compat.PPODBuffer.create_factory, "size") if factory else (compat.PPODBuffer, B5)
    _check(obj, _parse(first) + [(n, d, False) for n, d in PPOD])


def test_every_storage_is_in_the_pytorchrl_namespace():
    # PPODBuffer and MBReplayBuffer were missing from rlstore.compat.pytorchrl
    names = ("VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", "PPODBuffer", "MBReplayBuffer")
    for name in names:
        assert getattr(pytorchrl, name) is getattr(compat, name) and name in pytorchrl.__all__
    # their modules import rlstore.compat.pytorchrl.protocols, whose package imports them: a
    # fresh interpreter entering through one of them must still import cleanly
    code = "import rlstore.compat.model_based as m, rlstore.compat.pytorchrl as p; " \
        "assert p.MBReplayBuffer is m.MBReplayBuffer"  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ | {"PYTHONPATH": SRC})


def test_discount_cumsum_is_where_src_buffers_users_look():
    # src.buffers.PPOBuffer.discount_cumsum was only in rlstore.compat.ppo_buffer
    assert "discount_cumsum" in compat.__all__
    np.testing.assert_allclose(compat.discount_cumsum([1.0, 2.0, 3.0], 0.5), [2.75, 3.5, 3.0])


def test_ppod_default_demo_dtypes_are_a_copy():
    actor, algo = SimpleNamespace(is_recurrent=False), SimpleNamespace(gamma=0.9)
    a, b = (pytorchrl.PPODBuffer(4, "cpu", actor, algo, None) for _ in range(2))
    a.demo_dtypes["Reward"] = np.float64
    assert b.demo_dtypes == ST and a.demo_dtypes is not b.demo_dtypes
    factory = pytorchrl.PPODBuffer.create_factory(4, *(d for _, d in PPOD))  # all positional
    assert factory("cpu", actor, algo, None).demo_dtypes == ST


def test_velora_save_then_load_as_velora_documents(tmp_path):
    # velora's load(state_path, metadata) reads "<prefix>state" with or without ".safetensors"
    buffer = velora.ReplayBuffer(100, 11, 3, 8, device="cpu")
    g = torch.Generator().manual_seed(0)
    buffer.add_multi(*(torch.rand(5, d, generator=g) for d in (11, 3, 1, 11)),
                     torch.zeros(5, 1), torch.rand(5, 8, generator=g))  # fmt: skip
    buffer.save(tmp_path / "CartPole_100", prefix="buffer_v1.2_")  # a dot is no suffix
    with (tmp_path / "CartPole_100" / "buffer_v1.2_metadata.json").open() as f:
        metadata = json.load(f)
    for name in ("buffer_v1.2_state", "buffer_v1.2_state.safetensors"):
        restored = velora.ReplayBuffer.load(tmp_path / "CartPole_100" / name, metadata)
        assert restored.metadata() == buffer.metadata() == metadata["metadata"]
        for k, v in buffer.state_dict().items():
            assert torch.equal(restored.state_dict()[k], v), k


def test_mb_insert_single_tensor_slice_allocates_a_none_entry():
    # PyTorchRL's data dicts start as {key: None}; a None entry raised AttributeError
    envs = SimpleNamespace(single_action_space=None)
    buf = pytorchrl.MBReplayBuffer(4, "cpu", SimpleNamespace(), SimpleNamespace(), envs)
    store = {"y": None}
    assert buf.insert_single_tensor_slice(store, "y", np.array([[1.0], [2.0]])) == 2
    assert store["y"].tolist() == [[1.0], [2.0], [0.0], [0.0]]


def test_mb_insert_transition_stores_only_the_storage_tensors():
    # PyTorchRL stores the storage_tensors keys of a sample and ignores the rest (an on-policy
    # worker's Value / LogProbability, info); a key missing from a later sample raised SpecError
    from rlstore.compat.pytorchrl import ACT, DONE, DONE2, LOGP, OBS, OBS2, REW

    envs = SimpleNamespace(single_action_space=None)
    buf = pytorchrl.MBReplayBuffer(4, "cpu", SimpleNamespace(), SimpleNamespace(), envs)
    step = {OBS: torch.zeros(2, 3), DONE: torch.zeros(2, 1), ACT: torch.ones(2, 1),
            REW: torch.ones(2, 1), OBS2: torch.ones(2, 3), DONE2: torch.zeros(2, 1)}  # fmt: skip
    buf.insert_transition({**step, LOGP: torch.zeros(2, 1), "info": [{}, {}]})
    buf.insert_transition(step)
    data = buf.get_all_buffer_data()
    assert {k for k, v in data.items() if v is not None} == set(step)
    assert data[OBS2].tolist() == [[1.0] * 3] * 4


def test_mb_data_has_every_storage_key_none_until_stored():
    # PyTorchRL's get_all_buffer_data / get_data_slice return every storage_tensors key, None
    # where nothing was stored; rlstore's left them out (data[RHS] raised KeyError)
    from rlstore.compat.pytorchrl import ACT, DONE, DONE2, OBS, OBS2, REW, RHS, RHS2

    envs = SimpleNamespace(single_action_space=None)
    buf = pytorchrl.MBReplayBuffer(4, "cpu", SimpleNamespace(), SimpleNamespace(), envs)
    keys = list(buf.storage_tensors)
    assert buf.get_all_buffer_data() == dict.fromkeys(keys)  # before any insert
    step = {k: torch.full((2, 1), 1.0) for k in (OBS, DONE, ACT, REW, OBS2, DONE2)}
    buf.insert_transition(step)
    for data in (buf.get_all_buffer_data(), buf.get_data_slice(1, 2)):
        assert list(data) == keys and data[RHS] is None and data[RHS2] is None
        assert all(data[k].tolist() == [[1.0]] * len(data[OBS]) for k in step)
    assert len(buf.get_data_slice(1, 2)[OBS]) == 1


def test_src_ppo_learn_refuses_the_originals_maximizing_optimizer():
    # the original's make_optimizer built Adam(maximize=True) for its objective; learn minimizes
    # the PPO loss, so such an optimizer would have ascended it without a word
    from rlstore.agents.ppo import EnvironmentConfig, OnlineTrainConfig, make_vector_env
    from rlstore.compat.src_ppo import Memory, get_agent
    from rlstore.errors import ConfigError

    env = EnvironmentConfig(env_id="CartPole-v1")
    args = OnlineTrainConfig(total_timesteps=16, num_envs=2, num_steps=8, num_minibatches=2)
    envs = make_vector_env(env, args.num_envs)
    memory, agent = Memory(envs, args, "cpu"), get_agent(None, envs, env, args)
    optimizer, scheduler = agent.make_optimizer(args.num_updates, 1e-3, 0.0)
    assert not optimizer.param_groups[0]["maximize"]
    before = [p.detach().clone() for p in agent.parameters()]
    original = torch.optim.Adam(agent.parameters(), lr=1e-3, eps=1e-5, maximize=True)
    with pytest.raises(ConfigError, match="optimizer: expected one that minimizes"):
        agent.learn(memory, args, original, scheduler, False)
    assert all(torch.equal(a, b) for a, b in zip(before, agent.parameters(), strict=True))
    assert scheduler.n_step_calls == 0
    envs.close()


def test_simple_replay_buffer_takes_numpy_int_dims_like_its_siblings():
    # SimpleReplayBuffer(obs_dim, act_dim=env.action_space.n, ...): gymnasium's Discrete.n is a
    # numpy int, which PPOBuffer and velora took and SimpleReplayBuffer refused
    import gymnasium as gym

    from rlstore.errors import ConfigError

    n = gym.spaces.Discrete(3).n
    buf = compat.SimpleReplayBuffer(np.int64(4), n, np.int32(8), 2)
    assert (buf.obs_dim, buf.act_dim, buf.size) == (4, 3, 8) and type(buf.act_dim) is int
    assert compat.PPOBuffer(np.int64(4), n, 8, 2).act_dim == 3
    for bad in (True, 3.0, "3"):
        with pytest.raises(ConfigError, match=r"obs_dim: expected an int >= 1, got"):
            compat.SimpleReplayBuffer(bad, 2, 8, 2)


def test_memory_preprocesses_reset_observations_as_the_agents_do():
    # the original's Memory.__init__ built get_obs_preprocessor(envs.observation_space) and
    # reset() stored next_obs preprocessed; rlstore's stored the raw ones (FrozenLake: int64
    # states (N,), where the agents read one-hot float32 (N, 16))
    import gymnasium as gym

    from rlstore.compat.src_ppo import Memory

    envs = gym.vector.SyncVectorEnv([lambda: gym.make("FrozenLake-v1")] * 2)
    memory = Memory(envs, SimpleNamespace(gamma=0.9, gae_lambda=0.9, minibatch_size=2))
    assert memory.next_obs.dtype == torch.float32  # FrozenLake starts in state 0
    assert memory.next_obs.tolist() == [[1.0] + [0.0] * 15] * 2
    envs.close()


def test_compat_holds_the_storages_and_records_src_ppo_the_rest():
    # rlstore.compat: every library's storage classes with their sample records (velora's
    # BatchExperience was there, src.ppo.memory's Minibatch / TrajectoryMinibatch were not);
    # src.ppo's agents and trainer stay in rlstore.compat.src_ppo (src.ppo exports nothing)
    from rlstore.compat import src_ppo

    for name in ("Memory", "Minibatch", "TrajectoryMinibatch", "compute_advantages_vectorized"):
        assert getattr(compat, name) is getattr(src_ppo, name) and name in compat.__all__
    assert not {"FCAgent", "PPOAgent", "get_agent", "train_ppo"} & set(compat.__all__)
