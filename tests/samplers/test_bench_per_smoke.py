"""Smoke test of benchmarks/bench_per.py at a tiny size (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_per_runs() -> None:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("_bench_per", BENCH / "bench_per.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # run(), not main(): main() limits torch's threads for the whole (test) process
    r = mod.run(capacity=64, batch=8, iters=3, repeats=1)
    assert set(r) == {"rate", "cpu_rate", "spread"} and r["rate"] > 0
