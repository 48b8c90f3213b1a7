"""Learning check of the sequence agents on the masked-velocity CartPole (minutes; ``-m slow``).

``rlstore train --agent lstm --env CartPoleNoVel-v1 --total-steps 100000`` with the packaged
config. A feed-forward agent stays at a 20-episode mean of ~45 on this task (it cannot see the
velocities); the check asks for several times that, i.e. that the memory is used and learned.
The measured per-seed results are in ``benchmarks/results/recurrent.md``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_recurrent.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_recurrent", _BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_lstm_learns_cartpole_novel(request) -> None:
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("long learning run; select it with -m slow")
    bench = _bench()
    res = bench.run_one(bench.make_config("lstm", 1, 100_000, []))
    print(f"lstm seed 1: {res}")
    assert res["final_mean20"] >= 150.0, res
