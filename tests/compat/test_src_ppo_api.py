"""DecisionTransformerInterpretability's ``src.ppo`` API as documented: the training
loop over ``Memory`` for the three agents, and every documented function."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlstore.agents.ppo as core
from rlstore.agents.ppo import (
    EnvironmentConfig,
    LSTMModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TransformerModelConfig,
    make_vector_env,
)
from rlstore.compat import src_ppo
from rlstore.compat.src_ppo import (
    FCAgent,
    LSTMPPOAgent,
    Memory,
    PPOAgent,
    TransformerPPOAgent,
    check_and_upload_new_video,
    combine_args,
    get_agent,
    load_saved_checkpoint,
    parse_args,
    prepare_video_dir,
    store_model_checkpoint,
    train_ppo,
)
from rlstore.errors import ConfigError

ENV = EnvironmentConfig(env_id="CartPole-v1")
MODELS = {
    "fc": (None, FCAgent),
    "lstm": (LSTMModelConfig(recurrence=4), LSTMPPOAgent),
    "transformer": (TransformerModelConfig(n_ctx=4, d_model=16, d_mlp=32), TransformerPPOAgent),
}


def online(**over):
    kw = dict(total_timesteps=64, num_envs=2, num_steps=16, num_minibatches=2, update_epochs=2)
    return OnlineTrainConfig(**(kw | over))


@pytest.mark.parametrize("name", list(MODELS))
def test_documented_loop_trains_every_agent(name):
    # the original's train_ppo body, verbatim: Memory, get_agent, make_optimizer, rollout, learn,
    # log, get_printable_output, reset
    model_config, cls = MODELS[name]
    online_config = online()
    envs = make_vector_env(ENV, online_config.num_envs)
    torch.manual_seed(0)
    memory = Memory(envs, online_config, torch.device("cpu"))
    agent = get_agent(model_config, envs, ENV, online_config)
    assert type(agent) is cls and isinstance(agent, PPOAgent)
    num_updates = online_config.num_updates
    optimizer, scheduler = agent.make_optimizer(num_updates, 1e-3, 1e-4)
    before = [p.detach().clone() for p in agent.parameters()]
    T, N = online_config.num_steps, online_config.num_envs
    logged, written = [], []
    trajectory_writer = types.SimpleNamespace(accumulate_trajectory=lambda *a: written.append(a))
    for n in range(num_updates):
        assert agent.rollout(memory, online_config.num_steps, envs, trajectory_writer) is None
        assert len(written) == (n + 1) * T  # one call per vector-env step
        # memory holds the rollout: T steps of N envs, in the original's (obs, done, ...) format
        assert len(memory.experiences) == T and memory.global_step == (n + 1) * T * N
        obs, done, action, logprob, value, reward = memory.experiences[0]
        assert obs.shape == (N, 4) and done.shape == action.shape == reward.shape == (N,)
        mbs = memory.get_minibatches()
        assert sorted(torch.cat([mb.indices for mb in mbs]).tolist()) == list(range(T * N))
        assert all(mb.obs.shape == (online_config.minibatch_size, 4) for mb in mbs)
        assert all(torch.isfinite(mb.advantages).all() for mb in mbs)
        if name == "lstm":  # sequences of 4 steps, with the LSTM state before their first step
            for mb in memory.get_minibatches(recurrence=4):
                assert mb.obs.shape[0] == 4 and mb.obs.shape[2:] == (4,)
                assert all(h.shape[0] == mb.obs.shape[1] for h in mb.recurrence_memory)
        if name == "transformer":  # windows of the episode's past observations
            for mb in memory.get_trajectory_minibatches(timesteps=3, prob_go_from_end=0.0):
                assert mb.obs.shape == (online_config.minibatch_size, 3, 4)
        assert agent.learn(memory, online_config, optimizer, scheduler, True) is None
        memory.log(lambda d, step: logged.append(d))
        memory.get_printable_output()
        memory.reset()
        assert memory.experiences == []
    assert scheduler.n_step_calls == num_updates
    losses = [d for d in logged if "loss" in d]
    assert len(losses) == num_updates
    assert all(np.isfinite(d[k]) for d in losses for k in ("loss", "pg_loss", "v_loss"))
    changed = [not torch.equal(b, p) for b, p in zip(before, agent.parameters(), strict=True)]
    assert sum(changed) >= len(changed) // 2  # actor and critic both trained
    envs.close()


@pytest.mark.parametrize("name", list(MODELS))
def test_documented_loop_learns_probe2_values(name):
    # rlstore/Probe2-v0: one step, observation r = +-1, reward r, so V([r]) = r (from ~0 at init)
    env = EnvironmentConfig(env_id="rlstore/Probe2-v0")
    oc = online(total_timesteps=8 * 16 * 8, num_envs=8, learning_rate=3e-3, ent_coef=0.0,
                update_epochs=4)  # fmt: skip
    # the original's flat args, with a seed: without one the env resets and Memory's minibatch
    # draws come from fresh entropy, and the run differs every time
    args = types.SimpleNamespace(**combine_args(RunConfig(seed=1, track=False), env, oc))
    envs = make_vector_env(env, args.num_envs)
    torch.manual_seed(1)
    memory = Memory(envs, args)
    agent = get_agent(MODELS[name][0], envs, env, args)
    optimizer, scheduler = agent.make_optimizer(args.num_updates, args.learning_rate, 1e-3)
    for _ in range(args.num_updates):
        agent.rollout(memory, args.num_steps, envs)
        agent.learn(memory, args, optimizer, scheduler, False)
        memory.reset()
    agent.rollout(memory, args.num_steps, envs)
    obs = torch.stack([e[0] for e in memory.experiences])[..., 0]
    values = torch.stack([e[4] for e in memory.experiences])
    assert (values - obs).abs().max() < 0.1  # |V - r| starts near 1
    envs.close()


def test_memory_carries_state_across_rollouts_and_refuses_mixing():
    online_config = online(num_envs=1, num_steps=8)
    envs = make_vector_env(ENV, 1)
    memory = Memory(envs, online_config)
    agent = LSTMPPOAgent(envs, ENV, MODELS["lstm"][0], "cpu")  # the documented constructor
    agent.rollout(memory, 8, envs)
    state = memory.state
    # layout B: done[t] says obs[t] starts an episode = the previous transition ended
    ends = memory._rollout().get()
    done_a = (ends.terminated | ends.truncated).float()[:, 0]
    starts = torch.stack([e[1] for e in memory.experiences])[:, 0]
    assert starts[1:].tolist() == done_a[:-1].tolist() and memory.next_done.tolist() == [
        float(done_a[-1])
    ]
    with pytest.raises(ConfigError, match="reset"):
        agent.rollout(memory, 8, envs)  # not reset since the last rollout
    with pytest.raises(ConfigError, match="reset"):
        memory.add(*memory.experiences[0])
    memory.reset()
    assert memory.episode_lengths == [] and memory.vars_to_log == {}
    agent.rollout(memory, 8, envs, None, "greedy")
    assert memory.state is state and memory.global_step == 16
    memory.reset()
    memory.add(*(torch.zeros(1),) * 6)  # hand-added steps ...
    with pytest.raises(ConfigError, match="reset"):
        agent.rollout(memory, 8, envs)  # ... are never mixed with an agent's
    envs.close()


def test_learn_on_hand_added_steps():
    # the original's own rollout loop (memory.add per step) feeding the compat agent's learn
    args = online(num_steps=4)
    envs = make_vector_env(ENV, 2)
    memory = Memory(envs, args)
    agent = get_agent(None, envs, ENV, args)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        action = torch.randint(0, 2, (2,), generator=g)
        memory.add(torch.randn(2, 4, generator=g), torch.zeros(2), action,
                   torch.full((2,), -0.69), torch.zeros(2), torch.ones(2))  # fmt: skip
    memory.next_value, memory.next_done = torch.zeros(2), torch.zeros(2)
    before = [p.detach().clone() for p in agent.parameters()]
    optimizer, scheduler = agent.make_optimizer(1, 1e-3, 1e-3)
    agent.learn(memory, args, optimizer, scheduler, True)
    assert np.isfinite(memory.vars_to_log[memory.global_step]["loss"])
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.parameters(), strict=True))
    envs.close()


def test_rollout_needs_same_step_autoreset():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])  # NEXT_STEP autoreset
    memory = Memory(envs, online(num_envs=1))
    agent = get_agent(None, envs, ENV, online(num_envs=1))
    with pytest.raises(ConfigError, match="SAME_STEP"):
        agent.rollout(memory, 4, envs)
    envs.close()


def test_preprocess_obs_is_what_the_networks_read():
    online_config = online(normalize_obs=True)
    envs = make_vector_env(ENV, 2)
    agent = get_agent(MODELS["lstm"][0], envs, ENV, online_config)
    memory = Memory(envs, online_config)
    agent.rollout(memory, 16, envs)  # fills the running statistics
    raw = np.ones((2, 4), dtype=np.float32)
    x = agent.preprocess_obs(raw)
    rms = agent.normalizer.obs_rms
    want = (torch.ones(2, 4) - torch.as_tensor(rms.mean).float()) / torch.sqrt(
        torch.as_tensor(rms.var).float() + 1e-8
    )
    torch.testing.assert_close(x, want.clamp(-10, 10), rtol=1e-5, atol=1e-5)
    assert agent.preprocess_obs(raw).shape == (2, 4)  # statistics unchanged by the call
    torch.testing.assert_close(agent.preprocess_obs(raw), x)
    envs.close()


def test_train_ppo_returns_the_agent_and_checkpoints_round_trip(tmp_path):
    run_config = RunConfig(seed=3, track=False, runs_dir=str(tmp_path), exp_name="x")
    online_config = online()
    envs = make_vector_env(ENV, 2)
    agent = train_ppo(run_config, online_config, ENV, MODELS["transformer"][0], envs)
    assert type(agent) is TransformerPPOAgent and isinstance(agent, core.TransformerPPOAgent)
    # a folder, as rlstore writes them
    assert store_model_checkpoint(agent, online_config, run_config, 0, tmp_path / "ck") == 1
    loaded = load_saved_checkpoint(tmp_path / "ck" / "checkpoint_0000", num_envs=2)
    assert type(loaded) is TransformerPPOAgent
    for (k, a), (_, b) in zip(agent.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), k
    # a wandb.Artifact-like object: written under the run folder, then added
    added = []
    artifact = types.SimpleNamespace(add_dir=lambda path, name: added.append((path, name)))
    assert store_model_checkpoint(agent, online_config, run_config, 4, artifact) == 5
    assert added == [(str(tmp_path / "x" / "checkpoints" / "checkpoint_0004"), "checkpoint_0004")]
    assert type(src_ppo.load_all_agents_from_checkpoints(tmp_path / "ck", 2)[0]) is (
        TransformerPPOAgent
    )
    with pytest.raises(ConfigError, match="checkpoint_artifact"):
        store_model_checkpoint(agent, online_config, run_config, 5, 3)
    # the compat agents keep rlstore's own call forms (sampling, the trainer's rollout)
    traj = src_ppo.sample_from_agents([loaded], rollout_length=5, num_envs=2)
    assert traj[0].rewards.shape == (5, 2)
    envs.close()


def test_ppo_runner_returns_none_and_writes_the_run_folder(tmp_path):
    run_config = RunConfig(track=False, runs_dir=str(tmp_path), exp_name="r")
    online_config = online(num_checkpoints=1)
    assert src_ppo.ppo_runner(run_config, ENV, online_config, None) is None
    assert (tmp_path / "r" / "config.yaml").exists()
    assert len(list((tmp_path / "r" / "checkpoints").iterdir())) == 1


def test_combine_args():
    run, oc = RunConfig(seed=7), online()
    model = TransformerModelConfig(n_ctx=4, d_model=16, d_mlp=32)
    args = combine_args(run, ENV, oc, model)
    assert args["seed"] == 7 and args["env_id"] == "CartPole-v1" and args["n_ctx"] == 4
    assert (args["batch_size"], args["minibatch_size"], args["num_updates"]) == (32, 16, 2)
    assert set(args) == set(run.to_dict()) | set(ENV.to_dict()) | set(oc.to_dict()) | set(
        model.to_dict()
    ) | {"batch_size", "minibatch_size", "num_updates"}
    assert "n_ctx" not in combine_args(run, ENV, oc)


def test_parse_args_defaults_overrides_and_errors():
    args = parse_args([])
    for cfg in (RunConfig(), EnvironmentConfig(), OnlineTrainConfig()):
        for k, v in cfg.to_dict().items():
            if k != "env_kwargs":  # no command-line form
                assert getattr(args, k) == v, k
    args = parse_args(["--seed", "3", "--env_id", "Acrobot-v1", "--learning_rate", "3e-4",
                       "--track", "false", "--wandb", "--max_steps", "50"])  # fmt: skip
    assert (args.seed, args.env_id, args.learning_rate) == (3, "Acrobot-v1", 3e-4)
    assert (args.track, args.wandb, args.max_steps) == (False, True, 50)
    assert RunConfig(**{k: getattr(args, k) for k in RunConfig.model_fields}).seed == 3
    with pytest.raises(ConfigError, match="seed"):
        parse_args(["--seed", "-1"])
    with pytest.raises(SystemExit):
        parse_args(["--num_envs", "2.5"])
    with pytest.raises(SystemExit):
        parse_args(["--track", "maybe"])
    assert parse_args(["--track", "TRUE", "--norm_adv", "0"]).norm_adv is False


def test_prepare_video_dir(tmp_path):
    folder = tmp_path / "videos" / "run"
    prepare_video_dir(folder)
    assert folder.is_dir()
    (folder / "old.mp4").write_bytes(b"")
    (folder / "notes.txt").write_text("kept")
    prepare_video_dir(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_check_and_upload_new_video(tmp_path, monkeypatch):
    prepare_video_dir(tmp_path)
    assert check_and_upload_new_video(tmp_path, []) == []  # nothing new: no wandb needed
    (tmp_path / "a.mp4").write_bytes(b"")
    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ConfigError, match=r"rlstore\[wandb\]"):
            check_and_upload_new_video(tmp_path, [])
    logged = []
    fake = types.ModuleType("wandb")
    fake.run = None
    fake.Video = lambda path, fps, format, caption: ("video", Path(path).name, caption)
    fake.log = lambda data, step=None: logged.append((data, step))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with pytest.raises(ConfigError, match="no active wandb run"):
        check_and_upload_new_video(tmp_path, [])
    fake.run = object()
    assert check_and_upload_new_video(tmp_path, [], step=5) == ["a.mp4"]
    (tmp_path / "b.mp4").write_bytes(b"")
    assert check_and_upload_new_video(tmp_path, ["a.mp4"], step=9) == ["a.mp4", "b.mp4"]
    assert logged == [
        ({"video": ("video", "a.mp4", "a.mp4")}, 5),
        ({"video": ("video", "b.mp4", "b.mp4")}, 9),
    ]


def test_every_documented_name_exists():
    seed_names = """FCAgent LSTMPPOAgent PPOAgent PPOScheduler TransformerPPOAgent get_agent
    load_all_agents_from_checkpoints load_saved_checkpoint sample_from_agents
    compute_advantages_vectorized shift_rows Memory Minibatch TrajectoryMinibatch
    process_memory_vars_to_log Probe1 Probe2 Probe3 Probe4 Probe5 Probe6 Probe7 combine_args
    ppo_runner check_and_upload_new_video prepare_video_dir train_ppo get_obs_preprocessor
    get_obs_shape parse_args preprocess_images set_global_seeds store_model_checkpoint""".split()
    assert sorted(seed_names) == sorted(src_ppo.__all__)
    assert all(callable(getattr(src_ppo, n)) for n in seed_names)
    assert hasattr(LSTMPPOAgent, "preprocess_obs") and PPOAgent.layer_init is core.layer_init


SIGNATURES = {  # documented parameter names, in order (rlstore may add optional ones after)
    "FCAgent": "envs environment_config fc_model_config device hidden_dim",
    "LSTMPPOAgent": "envs environment_config lstm_config device",
    "TransformerPPOAgent": "envs environment_config transformer_model_config device",
    "PPOAgent": "envs device",
    "PPOAgent.rollout": "memory num_steps envs trajectory_writer sampling_method",
    "PPOAgent.learn": "memory args optimizer scheduler track",
    "PPOAgent.make_optimizer": "num_updates initial_lr end_lr",
    "PPOAgent.layer_init": "layer std bias_const",
    "LSTMPPOAgent.preprocess_obs": "obs",
    "PPOScheduler": "optimizer initial_lr end_lr num_updates",
    "get_agent": "model_config envs environment_config online_config",
    "load_all_agents_from_checkpoints": "checkpoint_folder_path num_envs",
    "load_saved_checkpoint": "path num_envs",
    "sample_from_agents": "agents rollout_length trajectory_path num_envs sampling_method",
    "compute_advantages_vectorized": "next_value next_done rewards values dones device gamma "
    "gae_lambda",
    "shift_rows": "arr",
    "Memory": "envs args device",
    "Memory.compute_advantages": "next_value next_done rewards values dones device gamma "
    "gae_lambda",
    "Memory.get_minibatch_indexes": "batch_size minibatch_size recurrence",
    "Memory.get_minibatches": "recurrence indexes",
    "Memory.get_trajectory_minibatches": "timesteps prob_go_from_end",
    "Memory.get_printable_output": "",
    "Memory.reset": "",
    "Memory.sample_experiences": "",
    "Memory.log": "",
    "process_memory_vars_to_log": "memory_vars_to_log",
    "combine_args": "run_config environment_config online_config transformer_model_config",
    "ppo_runner": "run_config environment_config online_config model_config",
    "check_and_upload_new_video": "video_path videos step",
    "prepare_video_dir": "video_path",
    "train_ppo": "run_config online_config environment_config model_config envs trajectory_writer",
    "get_obs_preprocessor": "obs_space",
    "get_obs_shape": "single_observation_space",
    "parse_args": "",
    "preprocess_images": "images device",
    "set_global_seeds": "seed",
    "store_model_checkpoint": "agent online_config run_config checkpoint_num checkpoint_artifact",
    **{f"Probe{i}.reset": "seed return_info options" for i in range(1, 8)},
}


@pytest.mark.parametrize("name", list(SIGNATURES))
def test_documented_signatures(name):
    import inspect

    obj = src_ppo
    for part in name.split("."):
        obj = getattr(obj, part)
    params = list(inspect.signature(obj).parameters.values())
    params = [p for p in params if p.name != "self"]
    named = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    want = SIGNATURES[name].split()
    assert [p.name for p in named[: len(want)]] == want
    extra = named[len(want) :] + [p for p in params if p.kind is p.KEYWORD_ONLY]
    assert all(p.default is not p.empty for p in extra), extra  # additions are optional


def test_minibatch_fields_in_documented_order():
    import dataclasses

    mb = [f.name for f in dataclasses.fields(src_ppo.Minibatch)]
    assert mb[:8] == "obs actions logprobs advantages values returns recurrence_memory mask".split()
    traj = [f.name for f in dataclasses.fields(src_ppo.TrajectoryMinibatch)]
    assert traj[:8] == "obs actions logprobs advantages values returns timesteps rewards".split()


def test_probes_keep_the_seed_reset():
    from rlstore.envs import probes

    env = src_ppo.Probe2()
    assert isinstance(env, probes.Probe2)
    obs, info = env.reset(0)  # positional seed, (obs, info) by default
    assert obs.shape == (1,) and info == {}
    again = env.reset(0, return_info=False)  # obs alone; same seed, same draw
    assert np.array_equal(again, obs)
    assert env.step(0)[1] == float(obs[0])  # reward = observation
    assert src_ppo.Probe7().reset(seed=1)[0].shape == (1,)


def test_rollout_and_learn_refuse_anything_but_a_memory():
    # the facade's rollout / learn serve the documented Memory loop; rlstore's own loop over a
    # RolloutBuffer is core.run_rollout / core.ppo_update (refused, the buffer left untouched)
    from rlstore.buffers.rollout import RolloutBuffer

    envs = make_vector_env(ENV, 2)
    agent, args = get_agent(None, envs, ENV, online()), online()
    optimizer, scheduler = agent.make_optimizer(args.num_updates, 1e-3, 0.0)
    buffer = RolloutBuffer(4, 2)
    with pytest.raises(ConfigError, match="memory: expected a Memory, got RolloutBuffer"):
        agent.rollout(buffer, 4, envs)
    with pytest.raises(ConfigError, match="memory: expected a Memory, got RolloutBuffer"):
        agent.learn(buffer, args, optimizer, scheduler, False)
    assert len(buffer) == 0 and scheduler.n_step_calls == 0
    envs.close()
