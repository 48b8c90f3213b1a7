"""Checkpoints: round trip, folder loading, atomic writes, corrupted / foreign files."""

from __future__ import annotations

import pytest
import torch

from rlstore.agents.ppo import checkpoint as ckpt
from rlstore.agents.ppo.checkpoint import (
    latest_checkpoint,
    load_all_agents_from_checkpoints,
    load_saved_checkpoint,
    restore_training,
    store_model_checkpoint,
)
from rlstore.agents.ppo.config import (
    EnvironmentConfig,
    OnlineTrainConfig,
    RunConfig,
    TransformerModelConfig,
)
from rlstore.agents.ppo.models import FCAgent, TransformerPPOAgent, get_agent
from rlstore.agents.ppo.trainer import make_vector_env
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
    assert nxt == 1 and (tmp_path / "checkpoint_0000.pt").is_file()
    loaded = load_saved_checkpoint(tmp_path / "checkpoint_0000.pt", num_envs=3)
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
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint_0002.pt"
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_all_agents_from_checkpoints(tmp_path / "empty")


def test_failed_write_keeps_previous_checkpoint(tmp_path, envs, monkeypatch) -> None:
    oc = OnlineTrainConfig()
    torch.manual_seed(0)
    first = FCAgent(envs, ENV)
    store_model_checkpoint(first, oc, RunConfig(), 0, tmp_path)

    def broken_save(obj, f):  # writes half a file, then dies (disk full, kill, ...)
        f.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    monkeypatch.setattr(ckpt.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        store_model_checkpoint(FCAgent(envs, ENV), oc, RunConfig(), 0, tmp_path)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint_0000.pt"]  # no temp file left
    assert _same_params(first, load_saved_checkpoint(tmp_path / "checkpoint_0000.pt", 1))


def test_bad_files_raise_checkpoint_error(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_saved_checkpoint(tmp_path / "nope.pt")
    bad = tmp_path / "checkpoint_0000.pt"
    bad.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="not a readable rlstore checkpoint"):
        load_saved_checkpoint(bad)
    torch.save({"format_version": 99}, bad)
    with pytest.raises(CheckpointError, match="format_version: expected 1"):
        load_saved_checkpoint(bad)


def test_model_only_checkpoint_cannot_resume(tmp_path, envs) -> None:
    oc = OnlineTrainConfig()
    agent = FCAgent(envs, ENV)
    store_model_checkpoint(agent, oc, RunConfig(), 0, tmp_path)
    opt, sched = agent.make_optimizer(10, 1e-3, 0.0)
    with pytest.raises(CheckpointError, match="no training state"):
        restore_training(tmp_path / "checkpoint_0000.pt", agent, opt, sched, None, None, envs)


def test_agent_without_environment_config_needs_config(tmp_path, envs) -> None:
    with pytest.raises(CheckpointError, match="environment_config"):
        store_model_checkpoint(FCAgent(envs, None), OnlineTrainConfig(), RunConfig(), 0, tmp_path)
