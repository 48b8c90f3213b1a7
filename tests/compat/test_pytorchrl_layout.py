"""rlstore.compat.pytorchrl package layout: re-exports and the layout-C helpers (_layout)."""

from __future__ import annotations

import importlib

import pytest
import torch

import rlstore.compat.pytorchrl as prl
from rlstore.compat.pytorchrl.vanilla import column, gather, index_plan, layout_a
from rlstore.errors import ConfigError

CPU = torch.device("cpu")


def test_every_public_name_is_re_exported_from_its_module():
    owners = {
        "VanillaOnPolicyBuffer": "vanilla",
        "GAEBuffer": "vanilla",
        "VTraceBuffer": "vanilla",
        "Actor": "protocols",
        "Algorithm": "protocols",
        "OnPolicyDataKeys": "protocols",
        "PPODBuffer": ".ppod",  # their modules import this package: resolved on first use
        "MBReplayBuffer": ".model_based",
    }
    for name in prl.__all__:
        mod = importlib.import_module(f".{owners.get(name, 'protocols')}", prl.__name__)
        assert getattr(prl, name) is getattr(mod, name), name
    assert issubclass(prl.GAEBuffer, prl.VanillaOnPolicyBuffer)
    assert issubclass(prl.VTraceBuffer, prl.VanillaOnPolicyBuffer)
    assert prl.OnPolicyDataKeys[:3] == ("Observation", "RecurrentHiddenStates", "Done")


def test_layout_a_hand_case():
    # L = 3 transitions, one env; Done[t + 1] ends transition t; slot 3 holds V(Observation[3])
    values = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0]).reshape(5, 1, 1)
    dones = torch.tensor([0, 1, 1, 0, 0]).reshape(5, 1, 1)  # transitions 0 and 1 ended
    trunc = torch.tensor([0, 0, 1, 0, 0]).reshape(5, 1, 1)  # ... transition 1 by a time limit
    final = torch.tensor([0.0, 0.0, 9.0, 0.0, 0.0]).reshape(5, 1, 1)
    v, nv, term, tr = layout_a(3, values, dones, trunc, final)
    assert v.flatten().tolist() == [1.0, 2.0, 3.0]
    assert nv.flatten().tolist() == [2.0, 9.0, 4.0]  # V(final obs) replaces the reset obs
    assert term.flatten().tolist() == [True, False, False]
    assert tr.flatten().tolist() == [False, True, False]
    _, nv0, term0, tr0 = layout_a(3, values, dones, None, None)  # seed: every done terminates
    assert nv0.flatten().tolist() == [2.0, 3.0, 4.0] and term0.flatten().tolist()[:2] == [1, 1]
    assert not tr0.any()


def test_gather_flattens_time_major():
    t = torch.arange(12.0).reshape(3, 2, 2)  # (size + 1, N, 2); flat row t * N + n
    got = gather({"Observation": t}, torch.tensor([3, 0]), 2, recurrent=False)["Observation"]
    assert got.tolist() == [[6.0, 7.0], [0.0, 1.0]]


def test_column_writes_parts_into_zeros_like_the_row():
    row = torch.zeros(2, 1)  # (N, 1) float: the stored shape and dtype of one slot
    stack = torch.tensor([[True, False], [False, True]])  # 2 rows of bools, cast to float
    out = column(row, 4, [(1, stack), (3, torch.tensor([[7.0], [8.0]]))])
    assert out.shape == (4, 2, 1) and out.dtype == torch.float32
    assert out[:, :, 0].tolist() == [[0, 0], [1, 0], [0, 1], [7, 8]]
    d = column({"a": torch.zeros(2, dtype=torch.long)}, 2, [(0, {"a": torch.tensor([1, 2])})])
    assert d["a"].tolist() == [[1, 2], [0, 0]]


def test_index_plan_covers_every_step_once_and_checks_sizes():
    flat = list(index_plan(4, 3, CPU, False, 2, None, 2, True))
    assert len(flat) == 4 and all(i.shape == (6,) for i in flat)  # 2 epochs x 2 minibatches
    for epoch in (flat[:2], flat[2:]):
        assert sorted(torch.cat(epoch).tolist()) == list(range(12))
    cols = list(index_plan(4, 4, CPU, True, 2, None, 1, False))
    assert [c.shape for c in cols] == [(4, 2), (4, 2)]  # (L, E) whole env columns
    assert sorted(torch.cat([c.flatten() for c in cols]).tolist()) == list(range(16))
    for c in cols:  # each column of the plan is one env: t * N + n with a fixed n
        torch.testing.assert_close(c - c[0], torch.arange(4)[:, None].expand(4, 2) * 4)
    with pytest.raises(ConfigError, match="mini_batch_size=5 conflicts"):
        next(index_plan(4, 4, CPU, True, 2, 5, 1, False))


def test_gather_takes_the_hidden_state_of_the_first_step_only():
    L, N = 2, 2
    data = {
        "Observation": torch.arange(6.0).reshape(3, N, 1),
        "RecurrentHiddenStates": torch.arange(30.0, 36.0).reshape(3, N, 1),
        "Truncated": torch.zeros(3, N, 1),
        "Action": None,
    }
    idx = torch.tensor([[1], [3]])  # env 1, steps 0 and 1
    b = gather(data, idx, L, recurrent=True)
    assert set(b) == {"Observation", "RecurrentHiddenStates"}  # no extension keys, no None
    assert b["Observation"].flatten().tolist() == [1.0, 3.0]
    assert b["RecurrentHiddenStates"].flatten().tolist() == [31.0]  # step 0 of env 1
    ff = gather(data, torch.tensor([3, 0]), L, recurrent=False)
    assert ff["RecurrentHiddenStates"].flatten().tolist() == [30.0, 30.0]  # placeholder row 0


def test_storage_api_is_written_once():
    """issue 9: create_factory / update_storage_parameter were written in vanilla.py and again
    in model_based.py; every PyTorchRL facade now inherits the one pair."""
    from rlstore.compat import MBReplayBuffer, PPODBuffer
    from rlstore.compat._common import PyTorchRLStorage, create_factory

    for cls in (prl.VanillaOnPolicyBuffer, prl.GAEBuffer, prl.VTraceBuffer, PPODBuffer,
                MBReplayBuffer):  # fmt: skip
        assert issubclass(cls, PyTorchRLStorage)
        assert "update_storage_parameter" not in vars(cls), cls.__name__
        assert cls.create_factory.func is create_factory and cls.create_factory.args == (cls,)
    make = prl.GAEBuffer.create_factory(4, gae_lambda=0.5)
    actor = type("A", (), {"is_recurrent": False})()
    buf = make("cpu", actor, type("G", (), {"gamma": 0.9})(), None)
    assert isinstance(buf, prl.GAEBuffer) and buf.gae_lambda == 0.5
    buf.update_storage_parameter("gae_lambda", 0.25)
    assert buf.gae_lambda == 0.25
    with pytest.raises(ConfigError, match="parameter_name"):
        buf.update_storage_parameter("no_such_thing", 1.0)
