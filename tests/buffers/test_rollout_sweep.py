"""Malformed-input sweep over RolloutBuffer's public API (issue 8).

Every rejection of ``add``, ``compute_returns``, ``compute_vtrace`` and the minibatch
generators is an :class:`RLStoreError` whose message names the argument, and the buffer's
``state_dict`` (data, cursor, results and RNG state) is exactly as it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from _helpers import flat_state as fingerprint
from _helpers import rollout_step

from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import RLStoreError

N = 2
nan, inf = float("nan"), float("inf")


def good(**over: Any) -> dict[str, Any]:
    return rollout_step(N, **over)


def ready() -> RolloutBuffer:
    """4 steps of 2 envs with returns computed (every entry point can be called)."""
    rb = RolloutBuffer(4, N, seed=0)
    for _ in range(4):
        rb.add(**good(final_obs=torch.zeros(N, 3)))
    rb.compute_returns(torch.zeros(N))
    return rb


def evaluate(obs: Any, actions: Any, hidden: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(obs.shape[:2]), torch.zeros(obs.shape[:2])


BAD_ADD = [
    ("obs", None),
    ("obs", "abc"),
    ("obs", torch.zeros(N + 1, 3)),
    ("obs", torch.zeros(N, 4)),
    ("obs", torch.zeros(N, 3, dtype=torch.float64)),
    ("obs", {"x": torch.zeros(N, 3)}),
    ("obs", torch.full((N, 3), nan)),
    ("obs", np.full((N, 3), 1j)),
    ("action", torch.tensor([0.5, 1.0])),
    ("action", np.array([None, None])),
    ("action", torch.tensor([nan, 0.0])),
    ("logp", torch.tensor([nan, 0.0])),
    ("logp", "x"),
    ("value", torch.tensor([inf, 0.0])),
    ("value", torch.zeros(N + 1)),
    ("value", np.full(N, 1j)),
    ("reward", None),
    ("reward", [True, False]),
    ("reward", np.full(N, 1e300)),  # overflows float32
    ("terminated", torch.tensor([0.5, 0.0])),
    ("terminated", torch.tensor([2, 0])),
    ("terminated", "False"),
    ("truncated", torch.tensor([nan, 0.0])),
    ("hidden", torch.zeros(N, 4)),  # the first add had none
    ("final_obs", torch.zeros(N, 5)),
    ("final_obs", torch.full((N, 3), inf)),
    ("int_reward", torch.zeros(N)),  # no intrinsic stream
]


@pytest.mark.parametrize(("name", "value"), BAD_ADD, ids=[f"{n}-{i}" for i, (n, _) in
                                                         enumerate(BAD_ADD)])  # fmt: skip
def test_add_rejections_are_named_and_change_nothing(name, value):
    rb = RolloutBuffer(4, N, seed=0)
    rb.add(**good(final_obs=torch.zeros(N, 3)))
    before = fingerprint(rb)
    args = good(final_obs=torch.zeros(N, 3)) | {name: value}
    if name == "final_obs":  # read for truncated envs
        args |= {"truncated": torch.tensor([True, False]), "final_value": torch.zeros(N)}
    field = {"truncated": "truncated", "int_reward": "int_reward"}.get(name, name)
    with pytest.raises(RLStoreError, match=field):
        rb.add(**args)
    assert fingerprint(rb) == before


BAD_CALLS = [
    ("compute_returns", {"last_value": torch.tensor([nan, 0.0])}, "last_value"),
    ("compute_returns", {"last_value": "0"}, "last_value"),
    ("compute_returns", {"last_value": torch.zeros(3)}, "last_value"),
    ("compute_returns", {"last_value": np.full(N, 1j)}, "last_value"),
    (
        "compute_returns",
        {"last_value": torch.zeros(N), "last_int_value": torch.zeros(N)},
        "last_int_value",
    ),  # fmt: skip
    ("compute_vtrace", {"evaluate": None, "last_value": torch.zeros(N)}, "evaluate"),
    ("compute_vtrace", {"evaluate": evaluate, "last_value": [nan, 0.0]}, "last_value"),
    ("compute_vtrace", {"evaluate": evaluate, "last_value": torch.zeros(N), "lam": "1"}, "lam"),
    ("compute_vtrace", {"evaluate": evaluate, "last_value": torch.zeros(N), "lam": 2.0}, "lam"),
    (
        "compute_vtrace",
        {"evaluate": evaluate, "last_value": torch.zeros(N), "rho_bar": "1"},
        "rho_bar",
    ),  # fmt: skip
    (
        "compute_vtrace",
        {"evaluate": evaluate, "last_value": torch.zeros(N), "c_bar": -1.0},
        "c_bar",
    ),  # fmt: skip
    (
        "compute_vtrace",
        {
            "evaluate": lambda o, a, h: (torch.zeros(4, N), torch.full((4, N), nan)),
            "last_value": torch.zeros(N),
        },
        "values",
    ),  # fmt: skip
    ("minibatches", {"num_minibatches": True}, "num_minibatches"),
    ("minibatches", {"num_minibatches": "2"}, "num_minibatches"),
    ("minibatches", {"num_minibatches": 3}, "num_minibatches"),
    ("minibatches", {"num_minibatches": 0}, "num_minibatches"),
    ("minibatches", {"mini_batch_size": 1.5}, "mini_batch_size"),
    ("minibatches", {"num_epochs": True}, "num_epochs"),
    ("minibatches", {"shuffle": "yes"}, "shuffle"),
    ("recurrent_minibatches", {"num_minibatches": True}, "num_minibatches"),
    ("recurrent_minibatches", {"num_minibatches": 2, "seq_len": 0}, "seq_len"),
    ("recurrent_minibatches", {"num_minibatches": 2, "seq_len": True}, "seq_len"),
    ("recurrent_minibatches", {"num_minibatches": 2, "shuffle": 1}, "shuffle"),
    ("trajectory_minibatches", {"timesteps": "4", "mini_batch_size": 2}, "timesteps"),
    ("trajectory_minibatches", {"timesteps": 2, "mini_batch_size": True}, "mini_batch_size"),
    (
        "trajectory_minibatches",
        {"timesteps": 2, "mini_batch_size": 2, "prob_go_from_end": "0.5"},
        "prob_go_from_end",
    ),  # fmt: skip
    (
        "trajectory_minibatches",
        {"timesteps": 2, "mini_batch_size": 2, "prob_go_from_end": 1.5},
        "prob_go_from_end",
    ),  # fmt: skip
]


@pytest.mark.parametrize(("method", "kwargs", "name"), BAD_CALLS,
                         ids=[f"{m}-{n}-{i}" for i, (m, _, n) in enumerate(BAD_CALLS)])  # fmt: skip
def test_call_rejections_are_named_and_change_nothing(method, kwargs, name):
    rb = ready()
    before = fingerprint(rb)
    with pytest.raises(RLStoreError, match=name):
        out = getattr(rb, method)(**kwargs)
        if out is not None:
            list(out)  # generators validate when first advanced
    assert fingerprint(rb) == before
