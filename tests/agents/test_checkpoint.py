"""Checkpoints: round trip, folder loading, atomic writes, corrupted / foreign files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlstore.agents.networks import FCAgent, TransformerPPOAgent, get_agent
from rlstore.agents.ppo import PPOScheduler, make_vector_env
from rlstore.agents.ppo_checkpoint import (
    latest_checkpoint,
    load_all_agents_from_checkpoints,
    load_saved_checkpoint,
    restore_training,
    store_model_checkpoint,
)
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    OnlineTrainConfig,
    RunConfig,
    TransformerModelConfig,
)
from rlstore.checkpoint import save_state
from rlstore.errors import CheckpointError

ENV = EnvironmentConfig(env_id="CartPole-v1")


@pytest.fixture
def envs():
    e = make_vector_env(ENV, 2)
    yield e
    e.close()


def _same_params(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize(
    "model", [None, TransformerModelConfig(n_ctx=2)], ids=["fc", "transformer"]
)
def test_store_and_load_round_trip(tmp_path, envs, model) -> None:
    torch.manual_seed(0)
    oc = OnlineTrainConfig(hidden_size=16)
    agent = get_agent(model, envs, ENV, oc)
    nxt = store_model_checkpoint(agent, oc, RunConfig(), 0, tmp_path)
    assert nxt == 1 and (tmp_path / "checkpoint_0000" / "ppo_metadata.json").is_file()
    loaded = load_saved_checkpoint(tmp_path / "checkpoint_0000", num_envs=3)
    assert type(loaded) is type(agent) and _same_params(agent, loaded)
    assert loaded.environment_config == ENV and loaded.train_config.online.hidden_size == 16
    if isinstance(agent, FCAgent):
        x = torch.randn(5, 4)
        assert torch.equal(agent.actor(x), loaded.actor(x))
    else:
        assert isinstance(loaded, TransformerPPOAgent)
        assert loaded.transformer_config == model


def test_load_all_agents_in_checkpoint_order(tmp_path, envs) -> None:
    oc = OnlineTrainConfig()
    agents = []
    for i in range(3):
        torch.manual_seed(i)
        agents.append(FCAgent(envs, ENV))
        store_model_checkpoint(agents[-1], oc, RunConfig(), i, tmp_path)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    loaded = load_all_agents_from_checkpoints(tmp_path, num_envs=1)
    assert len(loaded) == 3 and all(_same_params(a, b) for a, b in zip(agents, loaded, strict=True))
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint_0002"
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_all_agents_from_checkpoints(tmp_path / "empty")


def test_failed_write_keeps_previous_checkpoint(tmp_path, envs, monkeypatch) -> None:
    # the PPO checkpoint goes through rlstore.checkpoint's one atomic writer
    import rlstore.checkpoint._atomic as atomic

    oc = OnlineTrainConfig()
    torch.manual_seed(0)
    first = FCAgent(envs, ENV)
    store_model_checkpoint(first, oc, RunConfig(), 0, tmp_path)

    def broken_write(path, arrays, header):  # writes half a file, then dies (disk full, ...)
        path.write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(atomic, "_write_safetensors", broken_write)
    with pytest.raises(OSError, match="disk full"):
        store_model_checkpoint(FCAgent(envs, ENV), oc, RunConfig(), 0, tmp_path)
    monkeypatch.undo()
    folder = tmp_path / "checkpoint_0000"
    assert sorted(p.name for p in folder.iterdir()) == [
        "ppo_metadata.json",
        "ppo_state.safetensors",
    ]
    assert _same_params(first, load_saved_checkpoint(folder, 1))


def test_bad_files_raise_checkpoint_error(tmp_path, envs) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_saved_checkpoint(tmp_path / "nope")
    store_model_checkpoint(FCAgent(envs, ENV), OnlineTrainConfig(), RunConfig(), 0, tmp_path)
    folder = tmp_path / "checkpoint_0000"
    state = folder / "ppo_state.safetensors"
    state.write_bytes(state.read_bytes()[:-7] + b"garbage")
    with pytest.raises(CheckpointError, match="not a readable rlstore checkpoint"):
        load_saved_checkpoint(folder)
    save_state(folder, {"format": "rlstore.ppo/99"}, prefix="ppo_")
    with pytest.raises(CheckpointError, match="format: expected 'rlstore.ppo/2'"):
        load_saved_checkpoint(folder)


def test_model_only_checkpoint_cannot_resume(tmp_path, envs) -> None:
    oc = OnlineTrainConfig()
    agent = FCAgent(envs, ENV)
    store_model_checkpoint(agent, oc, RunConfig(), 0, tmp_path)
    opt = torch.optim.Adam(agent.parameters(), lr=1e-3)
    sched = PPOScheduler(opt, 1e-3, 0.0, 10)
    with pytest.raises(CheckpointError, match="no training state"):
        restore_training(tmp_path / "checkpoint_0000", agent, opt, sched, None, None, envs)


def test_agent_without_environment_config_needs_config(tmp_path, envs) -> None:
    with pytest.raises(CheckpointError, match="environment_config"):
        store_model_checkpoint(FCAgent(envs, None), OnlineTrainConfig(), RunConfig(), 0, tmp_path)


class _Payload:
    """Unpickling it creates ``marker`` (stands in for any code a crafted file could run)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


TINY = OnlineTrainConfig(
    total_timesteps=2 * 16 * 2, num_envs=2, num_steps=16, num_minibatches=2, update_epochs=1,
    num_checkpoints=1,
)  # fmt: skip


def test_legacy_pickle_checkpoint_is_refused_not_executed(tmp_path, envs) -> None:
    """A run folder holding a crafted checkpoint_NNNN.pt (the old torch.save format, whose
    resume path unpickled the envs) must fail with a clear error and run nothing."""
    import pickle

    from rlstore.agents.ppo import train_ppo

    marker = tmp_path / "pwned"
    agent = FCAgent(envs, ENV, hidden_dim=TINY.hidden_size)
    opt = torch.optim.Adam(agent.parameters(), lr=1e-3)
    blob = pickle.dumps(_Payload(str(marker)))
    payload = {
        "format_version": 1, "agent_class": "FCAgent", "checkpoint_num": 0, "update": 1,
        "global_step": 32, "config": {}, "model": agent.state_dict(),
        "resume": {"optimizer": opt.state_dict(), "scheduler": None, "buffer": None,
                   "state": None, "rng": {}, "updates_log": [],
                   "envs": torch.frombuffer(bytearray(blob), dtype=torch.uint8)},
    }  # fmt: skip
    (tmp_path / "checkpoints").mkdir()
    torch.save(payload, tmp_path / "checkpoints" / "checkpoint_0000.pt")
    with pytest.raises(CheckpointError, match="earlier rlstore.*could run code"):
        train_ppo(RunConfig(seed=0, track=False), TINY, ENV, run_dir=tmp_path, resume=True)
    with pytest.raises(CheckpointError, match="pickle inside"):
        load_saved_checkpoint(tmp_path / "checkpoints" / "checkpoint_0000.pt")
    assert not marker.exists()


def _tamper(folder, edit) -> None:
    from rlstore.checkpoint import load_state

    state = load_state(folder, prefix="ppo_")
    edit(state)
    save_state(folder, state, prefix="ppo_")  # valid checksums: only the content is hostile


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda s: s["resume"]["envs"]["spec"].update(wrappers=["os:system"]), "envs.spec"),
        (lambda s: s.update(agent_class="os.system"), "agent_class"),
        (lambda s: s["resume"]["envs"].update(pickle=np.frombuffer(b"\x80\x04cos\nsystem\n.",
                                                                    np.uint8).copy()), "envs"),
        (lambda s: s["resume"]["envs"]["episodes"][0].update(
            seed=None, rng={"bit_generator": "seed"}), "PCG64"),
        (lambda s: s["resume"].update(envs_pickle=[1, 2]), r"resume \(.*\): expected keys"),
        (lambda s: s["resume"]["rng"]["numpy"].update(bit_generator="seed"), "rng.numpy"),
        (lambda s: s["model"].update({"actor.0.weight": s["model"]["actor.0.weight"].double()}),
         "actor.0.weight"),
        (lambda s: s["resume"]["state"]["next_obs"].add_(1.0), "did not reproduce"),
        (lambda s: s["resume"]["optimizer"]["param_groups"][0].update(lr="os.system"),
         "param_groups.lr"),
        (lambda s: s.update(normalizer={"obs": {"mean": np.zeros(4), "var": np.ones(4),
                                                "count": 3}, "reward": None}), "normalizer.obs"),
        (lambda s: s.update(normalizer="os.system"), "normalizer: expected keys"),
    ],
    ids=["wrapper-name", "agent-class", "pickle-bytes", "env-rng-name", "extra-key",
         "numpy-rng-name", "lossy-dtype", "replay-mismatch", "optimizer-lr",
         "normalizer-not-configured", "normalizer-not-a-dict"],
)  # fmt: skip
def test_crafted_checkpoint_content_is_rejected_before_anything_runs(tmp_path, edit, match):
    from rlstore.agents.ppo import train_ppo

    run = RunConfig(seed=0, track=False)
    train_ppo(run, TINY, ENV, run_dir=tmp_path)
    _tamper(tmp_path / "checkpoints" / "checkpoint_0000", edit)
    before = np.random.get_state(legacy=False)["state"]["key"].copy()  # noqa: NPY002
    with pytest.raises(CheckpointError, match=match):
        train_ppo(run, TINY, ENV, run_dir=tmp_path, resume=True)
    assert np.array_equal(np.random.get_state(legacy=False)["state"]["key"], before)  # noqa: NPY002


def test_resume_without_env_state_warns(tmp_path) -> None:
    """Resuming without saved environment state (envs restart from a reset, so the curve
    differs from an uninterrupted run) was a print to stderr; it is a UserWarning now."""
    from rlstore.agents.ppo import train_ppo

    run = RunConfig(seed=0, track=False)
    train_ppo(run, TINY, ENV, run_dir=tmp_path)
    _tamper(tmp_path / "checkpoints" / "checkpoint_0000", lambda s: s["resume"].update(envs=None))
    with pytest.warns(UserWarning, match="no environment state; envs restart from a reset"):
        train_ppo(run, TINY, ENV, run_dir=tmp_path, resume=True)


def test_transformer_checkpoint_from_before_token_conv_is_refused(tmp_path, envs) -> None:
    # A checkpoint written before ``transformer.token_conv`` existed: its config has no such
    # key (so it now means the default, 2) and its state has no convolution weights. Loading
    # must raise a CheckpointError naming the parameters, not a torch error.
    from rlstore.agents.ppo_checkpoint import read_checkpoint

    oc = OnlineTrainConfig()
    old = get_agent(TransformerModelConfig(n_ctx=2, token_conv=0), envs, ENV, oc)
    store_model_checkpoint(old, oc, RunConfig(), 0, tmp_path)
    folder = tmp_path / "checkpoint_0000"
    payload = read_checkpoint(folder)
    del payload["config"]["transformer"]["token_conv"]
    save_state(folder, payload, prefix="ppo_")
    with pytest.raises(CheckpointError, match=r"actor_core\.conv\.weight"):
        load_saved_checkpoint(folder)


def test_resume_with_another_config_is_refused_naming_the_key(tmp_path) -> None:
    """PPO resumed with whatever config it was given (a learning rate edited in config.yaml was
    recorded but not used: the optimizer state kept the old one); DQN / SAC / IMPALA refused."""
    from rlstore.agents.ppo import train_ppo

    run = RunConfig(seed=0, track=False)
    train_ppo(run, TINY, ENV, run_dir=tmp_path)
    other = TINY.model_copy(update={"learning_rate": 1e-3})
    with pytest.raises(CheckpointError, match=r"config\.online differs from this run's "
                       r"\(learning_rate: 0\.00025 in the checkpoint, 0\.001 now"):  # fmt: skip
        train_ppo(run, other, ENV, run_dir=tmp_path, resume=True)
    longer = TINY.model_copy(update={"total_timesteps": 2 * TINY.total_timesteps})
    train_ppo(run, longer, ENV, run_dir=tmp_path, resume=True)  # a larger budget extends it
