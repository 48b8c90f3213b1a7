"""rlstore.buffers.rollout_checks: constructor and per-step validation (nothing is written)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlstore.buffers.rollout_checks import StepChecker, check_rollout_args
from rlstore.buffers.rollout_targets import IntrinsicConfig
from rlstore.errors import ConfigError, SpecError

CPU = torch.device("cpu")


def step_args(N: int = 2, **over):
    args = {
        "obs": np.zeros((N, 3), np.float32),
        "action": np.zeros(N, np.int64),
        "logp": np.zeros(N),
        "value": np.zeros(N),
        "reward": np.ones(N),
        "terminated": np.zeros(N, bool),
        "truncated": np.zeros(N, bool),
        "final_value": None,
        "hidden": None,
        "int_reward": None,
        "int_value": None,
    }
    return args | over


def test_check_rollout_args_converts_intrinsic_dicts_and_names_bad_fields():
    cfg = check_rollout_args(4, 2, 0.9, 0.95, "batch", {"int_gamma": 0.5})
    assert cfg == IntrinsicConfig(int_gamma=0.5)
    assert check_rollout_args(4, np.int64(2), 1.0, 0.0, "none", None) is None
    bad = [
        ((0, 2, 0.9, 0.9, "none", None), "num_steps"),
        ((4, True, 0.9, 0.9, "none", None), "num_envs"),
        ((4, 2, 1.5, 0.9, "none", None), "gamma"),
        ((4, 2, 0.9, -0.1, "none", None), "lam"),
        ((4, 2, 0.9, 0.9, "epoch", None), "advantage_normalization"),
        ((4, 2, 0.9, 0.9, "none", {"nope": 1}), "intrinsic"),
        ((4, 2, 0.9, 0.9, "none", 3), "intrinsic: expected an IntrinsicConfig"),
    ]
    for args, field in bad:
        with pytest.raises(ConfigError, match=field):
            check_rollout_args(*args)


def test_vector_shapes_flags_and_finite_where():
    chk = StepChecker(3, CPU)
    assert chk.vector("v", np.ones((3, 1))).shape == (3,)  # (N, 1) accepted
    assert StepChecker(1, CPU).vector("v", 2.5).tolist() == [2.5]  # scalar for N = 1
    assert chk.vector("f", np.array([0, 1, 1]), flag=True).tolist() == [False, True, True]
    with pytest.raises(SpecError, match=r"f: expected bool or 0/1 flags"):
        chk.vector("f", np.array([0, 2, 1]), flag=True)
    with pytest.raises(SpecError, match=r"v: expected a real number per env, got dtype torch.bool"):
        chk.vector("v", np.ones(3, bool))
    with pytest.raises(SpecError, match=r"v: expected shape \(3,\) \(one per env\), got \(2,\)"):
        chk.vector("v", np.ones(2))
    where = torch.tensor([True, False, True])
    out = chk.vector("fv", [1.0, float("nan"), 3.0], finite_where=where)
    assert out.tolist() == [1.0, 0.0, 3.0]  # entries outside `where` are never read
    with pytest.raises(SpecError, match="lv: expected finite values"):
        chk.finite("lv", [1.0, float("inf"), 0.0])


def test_tree_structure_must_match_the_first_add():
    chk = StepChecker(2, CPU)
    stored = {"a": torch.zeros(5, 2, 3)}
    assert chk.tree("obs", {"a": np.ones((2, 3), np.float32)}, stored)["a"].shape == (2, 3)
    with pytest.raises(SpecError, match=r"obs: expected keys \['a'\]"):
        chk.tree("obs", {"b": np.ones((2, 3))}, stored)
    with pytest.raises(SpecError, match=r"obs\['a'\]: expected shape \(2, 3\) dtype torch.float32"):
        chk.tree("obs", {"a": np.ones((2, 4), np.float32)}, stored)
    hidden = chk.tree("hidden", [np.ones((2, 4)), np.zeros((2, 4))], None)
    assert isinstance(hidden, tuple) and len(hidden) == 2
    with pytest.raises(SpecError, match="hidden: expected a tuple like the first add"):
        chk.tree("hidden", np.ones((2, 4)), hidden)
    with pytest.raises(SpecError, match="action: expected a leading env axis of size 2"):
        chk.tree("action", np.ones(3), None)


def test_step_validates_everything_and_writes_nothing():
    chk = StepChecker(2, CPU)
    stored = {"final_values": torch.full((4, 2), 7.0)}
    before = {k: v.clone() for k, v in stored.items()}
    res = chk.step(step_args(), stored, hidden_given=None, has_intrinsic=False)
    # rows: logp, value, reward, final_value (0: no env truncated, the stored row is not read)
    assert res.floats.tolist() == [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    assert res.terminated.dtype == torch.bool and set(res.row) == {"obs", "actions"}
    torch.testing.assert_close(stored["final_values"], before["final_values"])
    with pytest.raises(SpecError, match=r"reward: expected finite values"):
        chk.step(step_args(reward=[1.0, np.nan]), stored, hidden_given=None, has_intrinsic=False)
    with pytest.raises(SpecError, match=r"final_value: expected V\(final_obs\).*\[1\]"):
        args = step_args(truncated=np.array([False, True]))
        chk.step(args, stored, hidden_given=None, has_intrinsic=False)
    with pytest.raises(SpecError, match="hidden: expected a hidden state like the first add"):
        chk.step(step_args(), stored, hidden_given=True, has_intrinsic=False)
    with pytest.raises(ConfigError, match="int_reward/int_value: given but"):
        chk.step(step_args(int_reward=np.ones(2)), stored, hidden_given=None, has_intrinsic=False)
    with pytest.raises(SpecError, match="int_reward/int_value: expected"):
        chk.step(step_args(int_reward=np.ones(2)), stored, hidden_given=None, has_intrinsic=True)
    both = step_args(int_reward=np.ones(2), int_value=np.full(2, 3.0))
    res = chk.step(both, stored, hidden_given=None, has_intrinsic=True)
    assert res.floats.shape == (6, 2) and res.floats[5].tolist() == [3.0, 3.0]


def test_fast_step_matches_step_or_falls_back_on_anything_unusual():
    """fast_step returns step's result exactly for conversion-free inputs, else None."""
    N, chk = 3, StepChecker(3, CPU)
    stored = {
        "obs": {"x": torch.zeros(4, N, 2), "im": torch.zeros(4, N, 1, dtype=torch.uint8)},
        "actions": torch.zeros(4, N, dtype=torch.int64),
        "hidden": (torch.zeros(4, N, 5), torch.zeros(4, N, 5)),
        "final_values": torch.zeros(4, N),
    }
    g = torch.Generator().manual_seed(0)
    good = step_args(
        N,
        obs={"im": torch.ones(N, 1, dtype=torch.uint8), "x": torch.randn(N, 2, generator=g)},
        action=torch.tensor([0, 1, 2]),
        logp=torch.randn(N, generator=g),
        value=torch.randn(N, generator=g),
        reward=np.array([0.1, -2.5, 1e-9]),  # float64 numpy, as gymnasium returns it
        terminated=np.array([True, False, False]),
        truncated=torch.tensor([True, True, False]),  # env 1 bootstraps, env 0 terminates
        final_value=np.array([np.nan, 4.0, np.inf]),  # read only where truncated & ~terminated
        hidden=[torch.randn(N, 5, generator=g), torch.randn(N, 5, generator=g)],
    )
    kw = {"hidden_given": True, "has_intrinsic": False}
    fast, slow = chk.fast_step(good, stored, **kw), chk.step(good, stored, **kw)
    assert fast is not None
    assert fast.floats.numpy().tobytes() == slow.floats.numpy().tobytes()
    assert fast.floats[3].tolist() == [0.0, 4.0, 0.0]  # hand: only env 1 bootstraps
    assert list(fast.row["obs"]) == ["x", "im"]  # the stored key order
    assert isinstance(fast.row["hidden"], tuple)
    for a, b in [(fast.terminated, slow.terminated), (fast.truncated, slow.truncated)]:
        assert a.dtype == b.dtype == torch.bool and torch.equal(a, b)
    for a, b in zip(*(_leaves(r.row) for r in (fast, slow)), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    unusual = [
        {"reward": [0.0, 1.0, 2.0]},  # a list: needs conversion
        {"value": torch.zeros(N, 1)},  # (N, 1): accepted by step, reshaped
        {"logp": torch.zeros(N, dtype=torch.float64)},  # needs a cast
        {"logp": torch.zeros(N, requires_grad=True)},
        {"terminated": np.array([1, 0, 0])},  # 0/1 ints
        {"reward": np.zeros(2 * N)[::2]},  # not contiguous
        {"reward": np.array([0.0, np.nan, 0.0])},  # non-finite: step raises
        {"final_value": None},  # env 1 needs one: step raises
        {"action": torch.zeros(N, dtype=torch.int32)},
        {"obs": {"x": torch.zeros(N, 2)}},  # a key missing
        {"hidden": None},
        {"hidden": (torch.zeros(N, 5),)},
        {"int_reward": np.zeros(N), "int_value": np.zeros(N)},  # no intrinsic stream
    ]
    for over in unusual:
        assert chk.fast_step(good | over, stored, **kw) is None, over
    assert chk.fast_step(good, stored, hidden_given=None, has_intrinsic=False) is None
    assert chk.fast_step(good, stored, hidden_given=True, has_intrinsic=True) is None


def _leaves(tree):
    if isinstance(tree, dict):
        return [x for k in tree for x in _leaves(tree[k])]
    if isinstance(tree, tuple):
        return [x for v in tree for x in _leaves(v)]
    return [tree]
