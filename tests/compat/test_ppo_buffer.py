"""Tests of the src.buffers.PPOBuffer (Spinning Up style) facade: hand values, naive loop."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from rlstore.compat.ppo_buffer import PPOBuffer, discount_cumsum
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, RLStoreError, SpecError


def _step(obs_dim: int = 2, act_dim: int = 1, rew: float = 0.0, val: float = 0.0, logp=0.0):
    return {
        "obs": np.full(obs_dim, rew, dtype=np.float32),
        "act": np.zeros(act_dim),
        "rew": rew,
        "val": val,
        "logp": logp,
    }


def _naive_path(rews, vals, last_val, gamma, lam):
    """Spinning Up's definitions written as plain double sums (O(n^2), obviously correct)."""
    r = list(rews) + [last_val]
    v = list(vals) + [last_val]
    n = len(rews)
    deltas = [r[k] + gamma * v[k + 1] - v[k] for k in range(n)]
    adv = [sum((gamma * lam) ** (j - k) * deltas[j] for j in range(k, n)) for k in range(n)]
    ret = [sum(gamma ** (j - k) * r[j] for j in range(k, n + 1)) for k in range(n)]
    return np.array(adv), np.array(ret)


def test_discount_cumsum_test_vector():
    # y2 = 3; y1 = 2 + 0.5*3 = 3.5; y0 = 1 + 0.5*3.5 = 2.75
    np.testing.assert_allclose(discount_cumsum([1, 2, 3], 0.5), [2.75, 3.5, 3.0])
    np.testing.assert_allclose(
        discount_cumsum(torch.tensor([1.0, 2.0, 3.0]), 0.5), [2.75, 3.5, 3.0]
    )
    with pytest.raises(SpecError, match="x: expected a 1-D"):
        discount_cumsum(np.ones((2, 2)), 0.5)
    # regression: "0.5" was read as 0.5, strings in x raised a bare ValueError
    for bad in ("0.5", True, float("inf")):
        with pytest.raises(ConfigError, match="discount"):
            discount_cumsum([1.0, 2.0], bad)
    with pytest.raises(SpecError, match="x: expected real numbers"):
        discount_cumsum(["a", "b"], 0.5)


def test_finish_path_hand_values():
    buf = PPOBuffer(obs_dim=2, act_dim=1, size=3, batch_size=3, gamma=0.5, lam=0.5, eps=0.0)
    for r, v in [(1.0, 0.5), (0.0, 1.0), (2.0, 0.0)]:
        buf.store(_step(rew=r, val=v))
    buf.finish_path(last_val=4.0)
    # deltas: 1 + .5*1 - .5 = 1;  0 + .5*0 - 1 = -1;  2 + .5*4 - 0 = 4
    # adv (gamma*lam = .25): A2 = 4;  A1 = -1 + .25*4 = 0;  A0 = 1 + .25*0 = 1
    np.testing.assert_allclose(buf.adv_buf, [1.0, 0.0, 4.0])
    # rewards-to-go over [1, 0, 2, 4]: y3 = 4, y2 = 2 + 2 = 4, y1 = 0 + 2 = 2, y0 = 1 + 1 = 2
    np.testing.assert_allclose(buf.ret_buf, [2.0, 2.0, 4.0])
    batch = buf.sample_batch()
    # mean 5/3; population var ((-2/3)^2 + (-5/3)^2 + (7/3)^2) / 3 = 78/27
    expect = (np.array([1.0, 0.0, 4.0]) - 5 / 3) / math.sqrt(78 / 27)
    np.testing.assert_allclose(batch["adv"].numpy(), expect, rtol=1e-6)
    np.testing.assert_allclose(batch["ret"].numpy(), [2.0, 2.0, 4.0])
    assert len(buf) == 0


def test_normalization_test_vector_population_std():
    # gamma = 0 makes adv = r - v = [1, 2, 3, 4]; population std 1.118034 (algorithms.md 1.5)
    buf = PPOBuffer(1, 1, size=4, batch_size=2, gamma=0.0, lam=0.9, eps=0.0)
    for r in [1.0, 2.0, 3.0, 4.0]:
        buf.store(_step(obs_dim=1, rew=r))
    buf.finish_path(0.0)
    adv = buf.sample_batch()["adv"].numpy()
    np.testing.assert_allclose(adv, [-1.341641, -0.447214, 0.447214, 1.341641], atol=1e-6)
    # default eps = 1e-3 shrinks the std-normalized values by std / (std + eps)
    buf = PPOBuffer(1, 1, size=4, batch_size=2, gamma=0.0)
    for r in [1.0, 2.0, 3.0, 4.0]:
        buf.store(_step(obs_dim=1, rew=r))
    buf.finish_path(0.0)
    std = math.sqrt(1.25)
    expect = (np.arange(1.0, 5.0) - 2.5) / (std + 1e-3)
    np.testing.assert_allclose(buf.sample_batch()["adv"].numpy(), expect, rtol=1e-6)


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (1.0, 1.0), (0.5, 0.7)])
def test_paths_match_naive_loop(gamma, lam):
    rng = np.random.default_rng(1)
    lengths, last_vals = [3, 1, 5, 2], [0.0, 1.5, -0.7, 2.0]  # terminated, then cut-offs
    buf = PPOBuffer(3, 2, size=sum(lengths), batch_size=1, gamma=gamma, lam=lam)
    want_adv, want_ret = [], []
    for n, last in zip(lengths, last_vals, strict=True):
        rews, vals = rng.normal(size=n), rng.normal(size=n)
        for r, v in zip(rews, vals, strict=True):
            buf.store(
                {
                    "obs": rng.normal(size=3),
                    "act": rng.normal(size=2),
                    "rew": r,
                    "val": v,
                    "logp": -1.0,
                }
            )
        buf.finish_path(last)
        # the naive loop sees the float32-rounded stored values
        a, g = _naive_path(np.float32(rews), np.float32(vals), last, gamma, lam)
        want_adv.append(a)
        want_ret.append(g)
    np.testing.assert_allclose(buf.adv_buf, np.concatenate(want_adv), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(buf.ret_buf, np.concatenate(want_ret), rtol=1e-5, atol=1e-5)
    if lam == 1.0:  # GAE(lambda=1) + V is the bootstrapped reward-to-go
        np.testing.assert_allclose(buf.adv_buf + buf.val_buf, buf.ret_buf, rtol=1e-5, atol=1e-5)


def test_path_end_does_not_leak_into_previous_path():
    buf = PPOBuffer(1, 1, size=4, batch_size=1, gamma=0.9, lam=0.9)
    buf.store(_step(obs_dim=1, rew=1.0, val=0.0))
    buf.finish_path(0.0)  # terminated after one step: A = r - v = 1
    buf.store(_step(obs_dim=1, rew=0.0, val=100.0))
    buf.finish_path(100.0)
    assert buf.adv_buf[0] == pytest.approx(1.0)
    assert buf.ret_buf[0] == pytest.approx(1.0)


def test_finish_path_argument_forms():
    def one(**kw):
        buf = PPOBuffer(1, 1, size=1, batch_size=1, gamma=0.5)
        buf.store(_step(obs_dim=1, rew=1.0))
        buf.finish_path(**kw)
        return float(buf.ret_buf[0])

    assert one() == 1.0  # default: terminated, no bootstrap
    assert one(last_val=2.0) == 2.0  # 1 + 0.5*2
    assert one(action_obj=2.0) == 2.0
    assert one(action_obj={"last_val": torch.tensor([2.0])}) == 2.0
    assert one(last_val=np.array([[2.0]])) == 2.0
    with pytest.raises(RLStoreError, match="not both"):
        one(last_val=1.0, action_obj=1.0)
    with pytest.raises(SpecError, match="last_val: expected finite"):
        one(last_val=float("nan"))
    with pytest.raises(SpecError, match="scalar"):
        one(last_val=np.zeros(2))


def test_store_validation_is_atomic():
    buf = PPOBuffer(obs_dim=2, act_dim=1, size=2, batch_size=1)
    bad = [
        ({k: v for k, v in _step().items() if k != "logp"}, "missing \\['logp'\\]"),
        ({**_step(), "reward": 1.0}, "unknown \\['reward'\\]"),
        ({**_step(), "obs": np.zeros(3)}, "obs: expected shape \\(2,\\)"),
        ({**_step(), "act": np.zeros((2, 1))}, "act: expected shape"),
        ({**_step(), "rew": float("inf")}, "rew: expected finite"),
        ({**_step(), "val": np.zeros(2)}, "val: expected a scalar"),
        ({**_step(), "obs": np.array([0.0, np.nan])}, "obs: expected finite"),
    ]
    for step, match in bad:
        with pytest.raises(SpecError, match=match):
            buf.store(step)
        assert len(buf) == 0
    buf.store({**_step(), "obs": torch.ones(1, 2)})  # a batch of one is accepted
    buf.store(_step())
    with pytest.raises(CapacityError, match="full"):
        buf.store(_step())
    assert len(buf) == 2
    np.testing.assert_array_equal(buf.obs_buf[0], [1.0, 1.0])


def test_sample_batch_requires_closed_path_and_returns_copies():
    buf = PPOBuffer(obs_dim=2, act_dim=1, size=4, batch_size=2)
    with pytest.raises(EmptyBufferError):
        buf.sample_batch()
    buf.store(_step(rew=1.0))
    buf.store(_step(rew=2.0))
    with pytest.raises(RLStoreError, match="finish_path"):
        buf.sample_batch()
    buf.finish_path(0.0)
    batch = buf.sample_batch()  # a partial epoch (2 of 4 steps) is allowed
    assert set(batch) == {"obs", "act", "ret", "adv", "logp", "val"}
    assert batch["obs"].shape == (2, 2) and batch["act"].shape == (2, 1)
    assert all(t.dtype == torch.float32 for t in batch.values())
    before = batch["obs"].clone()
    buf.store(_step(rew=9.0))  # overwrites slot 0 of the storage
    torch.testing.assert_close(batch["obs"], before)


def test_minibatches_cover_each_step_once():
    buf = PPOBuffer(obs_dim=1, act_dim=1, size=10, batch_size=4)
    for r in range(10):
        buf.store(_step(obs_dim=1, rew=float(r)))
    buf.finish_path(0.0)
    batch = buf.sample_batch()
    mbs = list(buf.minibatches(batch, seed=3))
    assert [len(mb["obs"]) for mb in mbs] == [4, 4, 2]
    seen = torch.cat([mb["obs"][:, 0] for mb in mbs]).sort().values
    torch.testing.assert_close(seen, torch.arange(10.0))
    again = list(buf.minibatches(batch, seed=3))
    torch.testing.assert_close(again[0]["obs"], mbs[0]["obs"])  # seeded: reproducible


def test_discrete_scalar_actions_and_constructor_checks():
    buf = PPOBuffer(obs_dim=(2, 2), act_dim=(), size=1, batch_size=1)
    buf.store({"obs": np.ones((2, 2)), "act": 3, "rew": 0.0, "val": 0.0, "logp": 0.0})
    assert buf.act_buf.shape == (1,) and buf.act_buf[0] == 3
    with pytest.raises(CapacityError, match="batch_size"):
        PPOBuffer(2, 1, size=4, batch_size=5)
    with pytest.raises(CapacityError, match="size"):
        PPOBuffer(2, 1, size=0, batch_size=1)
    with pytest.raises(ConfigError, match="gamma"):
        PPOBuffer(2, 1, size=4, batch_size=1, gamma=1.5)
    with pytest.raises(ConfigError, match="obs_dim"):
        PPOBuffer(0, 1, size=4, batch_size=1)


def test_config_dict_and_files(tmp_path):
    cfg = {"obs_dim": 3, "act_dim": 2, "size": 8, "batch_size": 4, "gamma": 1, "lam": 0.9}
    buf = PPOBuffer.instantiate_from_config_dict(cfg)
    assert (buf.obs_shape, buf.act_shape, buf.max_size, buf.batch_size) == ((3,), (2,), 8, 4)
    assert buf.gamma == 1.0 and buf.lam == 0.9 and buf.eps == 1e-3
    (tmp_path / "c.yaml").write_text("obs_dim: 3\nact_dim: 2\nsize: 8\nbatch_size: 4\neps: 0.01\n")
    assert PPOBuffer.instantiate_from_config(tmp_path / "c.yaml").eps == 0.01
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert PPOBuffer.instantiate_from_config(str(tmp_path / "c.json")).max_size == 8
    with pytest.raises(ConfigError, match="does not exist"):
        PPOBuffer.instantiate_from_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    "cfg,matches",
    [
        ({"obs_dim": 3, "act_dim": 2, "size": 8}, ["batch_size: missing required key"]),
        ({"obs_dim": 3, "act_dim": 2, "size": 8, "batch_size": 4, "lr": 0.1}, ["lr: unknown key"]),
        (
            {"obs_dim": "3", "act_dim": 2, "size": 8, "batch_size": 4},
            ["obs_dim: Input should be a valid integer, got '3' (str)"],
        ),
        (
            {"obs_dim": 3.0, "act_dim": True, "size": 8, "batch_size": 4},
            [
                "obs_dim: Input should be a valid integer, got 3.0 (float)",
                "act_dim: Input should be a valid integer, got True (bool)",
            ],
        ),
        (
            {"obs_dim": 3, "act_dim": 2, "size": 8, "batch_size": 4, "gamma": "0.9"},
            ["gamma: Input should be a valid number, got '0.9' (str)"],
        ),
        ({"obs_dim": 3, "act_dim": 2, "size": 8, "batch_size": 9}, ["batch_size"]),
        ({"obs_dim": 3, "act_dim": 2, "size": 8, "batch_size": 4, "lam": 2.0}, ["lam"]),
    ],
)
def test_config_errors_name_every_bad_key(cfg, matches):
    with pytest.raises(ConfigError) as info:
        PPOBuffer.instantiate_from_config_dict(cfg)
    for m in matches:
        assert m in str(info.value)


def test_schema_lists_the_original_keys():
    fields = PPOBuffer.schema.model_fields
    required = {k for k, f in fields.items() if f.is_required()}
    assert required == {"obs_dim", "act_dim", "size", "batch_size"}
    assert set(fields) - required == {"gamma", "lam", "eps"}
    with pytest.raises(ConfigError, match="mapping"):
        PPOBuffer.instantiate_from_config_dict([("obs_dim", 3)])  # type: ignore[arg-type]


def test_checkpoint_round_trip_resumes_exactly(tmp_path):
    from rlstore import checkpoint
    from rlstore.errors import CheckpointError

    rng = np.random.default_rng(4)
    steps = [{"obs": rng.normal(size=(2, 3)), "act": rng.normal(size=2), "rew": rng.normal(),
              "val": rng.normal(), "logp": -1.0} for _ in range(6)]  # fmt: skip
    buf = PPOBuffer(obs_dim=(2, 3), act_dim=2, size=6, batch_size=3, gamma=0.9, lam=0.8)
    for s in steps[:2]:
        buf.store(s)
    buf.finish_path(0.0)
    buf.store(steps[2])  # save in the middle of an open trajectory
    checkpoint.save(buf, tmp_path / "ckpt")
    loaded = checkpoint.load(tmp_path / "ckpt")
    assert loaded.config() == buf.config() and len(loaded) == 3
    for b in (buf, loaded):
        for s in steps[3:]:
            b.store(s)
        b.finish_path(0.5)
    want, got = buf.sample_batch(), loaded.sample_batch()
    for k in want:
        torch.testing.assert_close(got[k], want[k])
    before = buf.state_dict()
    bad = buf.state_dict()
    bad["path_start_idx"] = 7
    with pytest.raises(CheckpointError, match="path_start_idx"):
        buf.load_state_dict(bad)
    with pytest.raises(CheckpointError, match="obs"):
        buf.load_state_dict({**before, "obs": np.zeros((6, 3))})
    bad = buf.state_dict()
    bad["rollout"]["data"]["obs"] = torch.zeros(6, 1, 3)
    with pytest.raises(CheckpointError, match="obs"):
        buf.load_state_dict(bad)
    after = buf.state_dict()
    torch.testing.assert_close(after["rollout"]["data"], before["rollout"]["data"])
