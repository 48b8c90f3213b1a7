"""SimpleReplayBuffer facade (`src.buffers`) against a plain list-of-transitions reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlstore import checkpoint
from rlstore.checkpoint._tree import _flatten
from rlstore.compat.simple_replay import SimpleReplayBuffer, SimpleReplayBufferSchema
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError


def _transition(rng: np.random.Generator, i: int) -> dict[str, Any]:
    return {
        "obs": rng.standard_normal(3).astype(np.float32),
        "act": rng.standard_normal(2).astype(np.float32),
        "rew": float(i),  # unique: identifies the transition
        "next_obs": rng.standard_normal(3).astype(np.float32),  # discontinuous stream
        "done": bool(i % 4 == 3),
    }


def _as_rows(batch: dict[str, torch.Tensor]) -> list[tuple]:
    return [
        (
            tuple(batch["obs"][j].tolist()),
            tuple(batch["act"][j].tolist()),
            batch["rew"][j].item(),
            tuple(batch["next_obs"][j].tolist()),
            batch["done"][j].item(),
        )
        for j in range(len(batch["rew"]))
    ]


def _ref_row(t: dict[str, Any]) -> tuple:
    f32 = lambda a: tuple(np.asarray(a, np.float32).tolist())  # noqa: E731
    return (f32(t["obs"]), f32(t["act"]), float(t["rew"]), f32(t["next_obs"]), float(t["done"]))


def test_samples_are_rows_of_the_last_size_transitions() -> None:
    rng = np.random.default_rng(0)
    buf = SimpleReplayBuffer(obs_dim=3, act_dim=2, size=6, batch_size=5, seed=1)
    reference = [_transition(rng, i) for i in range(10)]
    for t in reference:
        buf.store(t)
    assert len(buf) == 6
    expected = {_ref_row(t) for t in reference[-6:]}  # FIFO keeps the last `size`
    seen = set()
    for _ in range(40):
        batch = buf.sample_batch()
        assert {k: tuple(v.shape) for k, v in batch.items()} == {
            "obs": (5, 3),
            "act": (5, 2),
            "rew": (5,),
            "next_obs": (5, 3),
            "done": (5,),
        }
        assert all(v.dtype == torch.float32 for v in batch.values())
        rows = _as_rows(batch)
        assert set(rows) <= expected
        seen |= set(rows)
    assert seen == expected  # 200 draws from 6 rows: all appear (p(miss) < 6 * (5/6)**200)


def test_batched_store_equals_single_stores() -> None:
    rng = np.random.default_rng(1)
    ts = [_transition(rng, i) for i in range(7)]
    single = SimpleReplayBuffer(3, 2, 5, 4, seed=3)
    for t in ts:
        single.store(t)
    batched = SimpleReplayBuffer(3, 2, 5, 4, seed=3)
    batched.store({k: np.stack([np.asarray(t[k]) for t in ts]) for k in ts[0]})
    for _ in range(3):
        a, b = single.sample_batch(), batched.sample_batch()
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_torch_inputs_and_scalar_action() -> None:
    buf = SimpleReplayBuffer(2, 1, 4, 1, seed=0)
    buf.store(
        {
            "obs": torch.tensor([1.0, 2.0]),
            "act": torch.tensor(3.0),
            "rew": torch.tensor(0.5),
            "next_obs": torch.tensor([4.0, 5.0]),
            "done": torch.tensor(True),
        }
    )
    b = buf.sample_batch()
    assert b["act"].tolist() == [[3.0]] and b["done"].tolist() == [1.0]
    assert b["next_obs"].tolist() == [[4.0, 5.0]]


def test_bfloat16_tensors_are_stored_exactly() -> None:
    buf = SimpleReplayBuffer(2, 1, 4, 1, seed=0)
    bf = torch.bfloat16
    buf.store(
        {
            "obs": torch.tensor([1.5, -2.0], dtype=bf),
            "act": torch.tensor(3.0, dtype=bf),
            "rew": torch.tensor(0.25, dtype=bf),
            "next_obs": torch.tensor([4.0, 0.5], dtype=bf),
            "done": torch.tensor(False),
        }
    )
    b = buf.sample_batch()
    assert b["obs"].tolist() == [[1.5, -2.0]] and b["rew"].tolist() == [0.25]


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.pop("done"), "expected keys"),
        (lambda d: d.update(obs2=d["obs"]), "expected keys"),
        (lambda d: d.update(obs=np.zeros(4)), r"buffer_dict\['obs'\]: expected shape \(3,\)"),
        (lambda d: d.update(act=np.zeros(3)), r"buffer_dict\['act'\]: expected shape \(2,\)"),
        (lambda d: d.update(done=0.5), r"buffer_dict\['done'\]: expected bools"),
        # issue 8: every rejection names the key of buffer_dict, no lossy or non-finite value
        (lambda d: d.update(rew=np.nan), r"buffer_dict\['rew'\]: expected finite"),
        (lambda d: d.update(done="False"), r"buffer_dict\['done'\]"),
        (lambda d: d.update(done=2), r"buffer_dict\['done'\]"),
        (lambda d: d.update(done=np.nan), r"buffer_dict\['done'\]"),
        (lambda d: d.update(obs=np.full(3, np.inf)), r"buffer_dict\['obs'\]"),
        (lambda d: d.update(next_obs=np.full(3, 1e300)), r"buffer_dict\['next_obs'\]"),
        (lambda d: d.update(act=np.zeros(2) + 1j), r"buffer_dict\['act'\]"),
        (lambda d: d.update(act=["a", "b"]), r"buffer_dict\['act'\]"),
        (lambda d: d.update(rew=None), r"buffer_dict\['rew'\]"),
        (lambda d: d.update(rew={"r": 1}), r"buffer_dict\['rew'\]"),
        (
            lambda d: d.update(
                obs=np.zeros((2, 3)),
                rew=np.zeros(2),
                act=np.zeros((2, 2)),
                next_obs=np.zeros((2, 3)),
                done=[0.0, 0.5],
            ),
            r"buffer_dict\['done'\]",
        ),  # batched
    ],
)
def test_bad_store_is_rejected_and_changes_nothing(edit: Any, match: str) -> None:
    rng = np.random.default_rng(2)
    buf = SimpleReplayBuffer(3, 2, 5, 1, seed=0)
    buf.store(_transition(rng, 0))
    before = _flatten(buf.state_dict())[0]
    bad = _transition(rng, 1)
    edit(bad)
    with pytest.raises(SpecError, match=match):
        buf.store(bad)
    after = _flatten(buf.state_dict())[0]
    assert len(buf) == 1 and before.keys() == after.keys()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_sampling_more_than_stored_and_bad_sizes() -> None:
    buf = SimpleReplayBuffer(3, 2, 5, 2, seed=0)
    buf.store(_transition(np.random.default_rng(0), 0))
    with pytest.raises(EmptyBufferError):
        buf.sample_batch()
    with pytest.raises(CapacityError, match="batch_size: expected <= size=5, got 6"):
        SimpleReplayBuffer(3, 2, 5, 6)
    with pytest.raises(ConfigError, match="size: expected an int >= 1, got 0"):
        SimpleReplayBuffer(3, 2, 0, 1)


def test_finish_path_changes_nothing() -> None:
    buf = SimpleReplayBuffer(3, 2, 5, 2, seed=0)
    for i in range(3):
        buf.store(_transition(np.random.default_rng(i), i))
    twin = SimpleReplayBuffer(3, 2, 5, 2, seed=0)
    twin.load_state_dict(buf.state_dict())
    assert buf.finish_path() is None and buf.finish_path(action_obj=object()) is None
    assert all(torch.equal(buf.sample_batch()[k], twin.sample_batch()[k]) for k in ("obs", "rew"))


def test_instantiate_from_yaml_json_and_dict(tmp_path: Path) -> None:
    cfg = {"obs_dim": 3, "act_dim": 2, "size": 50, "batch_size": 8}
    (tmp_path / "c.yaml").write_text("obs_dim: 3\nact_dim: 2\nsize: 50\nbatch_size: 8\n")
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    for buf in (
        SimpleReplayBuffer.instantiate_from_config(tmp_path / "c.yaml"),
        SimpleReplayBuffer.instantiate_from_config(str(tmp_path / "c.json")),
        SimpleReplayBuffer.instantiate_from_config_dict(cfg),
    ):
        assert isinstance(buf, SimpleReplayBuffer)
        assert (buf.obs_dim, buf.act_dim, buf.size, buf.batch_size) == (3, 2, 50, 8)
    assert SimpleReplayBuffer.schema is SimpleReplayBufferSchema
    assert list(SimpleReplayBuffer.schema.model_fields) == list(cfg)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"obs_dim": 3, "act_dim": 2, "size": 50}, "batch_size: missing required key"),
        ({"obs_dim": 3, "act_dim": 2, "size": "50", "batch_size": 8}, "size: Input should be"),
        ({"obs_dim": 3, "act_dim": 2, "size": 5, "batch_size": 1, "gamma": 0.9}, "gamma: unknown"),
    ],
)
def test_config_errors_name_the_key(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        SimpleReplayBuffer.instantiate_from_config_dict(cfg)


def test_config_batch_size_above_size_is_a_config_error() -> None:
    """A config with batch_size > size raised CapacityError, not the ConfigError of bad keys."""
    cfg = {"obs_dim": 3, "act_dim": 2, "size": 5, "batch_size": 6}
    with pytest.raises(ConfigError, match="batch_size: expected <= size=5, got 6"):
        SimpleReplayBuffer.instantiate_from_config_dict(cfg)


def test_config_file_errors_are_value_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        SimpleReplayBuffer.instantiate_from_config(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("obs_dim: [\n")
    with pytest.raises(ValueError, match="invalid YAML"):
        SimpleReplayBuffer.instantiate_from_config(tmp_path / "bad.yaml")


def test_checkpoint_exact_resume(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    buf = SimpleReplayBuffer(3, 2, 8, 4, seed=9)
    for i in range(11):
        buf.store(_transition(rng, i))
    buf.sample_batch()
    checkpoint.save(buf, tmp_path)
    restored = checkpoint.load(tmp_path)
    assert isinstance(restored, SimpleReplayBuffer) and restored.config() == buf.config()
    for _ in range(3):
        a, b = buf.sample_batch(), restored.sample_batch()
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_src_buffers_schemas_share_one_model() -> None:
    """issue 9: SimpleReplayBuffer's schema and PPOBuffer's config repeated the four keys
    obs_dim / act_dim / size / batch_size; both now extend one model."""
    from rlstore.compat._common import DimsConfig
    from rlstore.compat.ppo_buffer import PPOBufferConfig

    for model in (SimpleReplayBufferSchema, PPOBufferConfig):
        assert issubclass(model, DimsConfig)
        assert list(model.model_fields)[:4] == list(DimsConfig.model_fields)
    assert "obs_dim" not in vars(PPOBufferConfig).get("__annotations__", {})
    with pytest.raises(ConfigError, match="act_dim: Input should be greater than 0"):
        PPOBufferConfig(obs_dim=3, act_dim=0, size=4, batch_size=2)


def test_load_state_dict_rejects_a_foreign_state_unchanged() -> None:
    """issue 9: the facades' state checks are one key checker (an extra key was accepted)."""
    from rlstore.errors import CheckpointError

    rng = np.random.default_rng(0)
    buf, other = SimpleReplayBuffer(3, 2, 8, 4, seed=9), SimpleReplayBuffer(3, 2, 8, 4, seed=9)
    buf.store(_transition(rng, 0))
    for i in range(3):
        other.store(_transition(rng, i))
    for sd in (None, {}, {**other.state_dict(), "extra": 1}):
        with pytest.raises(CheckpointError, match="state_dict: expected"):
            buf.load_state_dict(sd)  # type: ignore[arg-type]
        assert len(buf) == 1
