"""Smoke test of benchmarks/bench_dqn.py: the script runs end to end at a tiny size with rlstore
(SB3 is not installed in the test environment) and writes its table. No timing is asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_dqn_runs_end_to_end(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("_bench_dqn", BENCH / "bench_dqn.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out = tmp_path / "dqn.md"
        argv = ["--total-steps", "512", "--seeds", "1", "--jobs", "1", "--out", str(out),
                "--impls", "rlstore uniform,rlstore PER + 3-step"]  # fmt: skip
        assert mod.main(argv) == 0
    finally:
        sys.path.remove(str(BENCH))
    text = out.read_text()
    assert "| rlstore PER + 3-step |" in text and "not reached" in text
    assert "| rlstore uniform |" in text
    assert mod.first_step_reaching([475.0] * 20, list(range(1, 21)), 475.0, 20) == 20
    assert mod.first_step_reaching([474.0] * 20, list(range(1, 21)), 475.0, 20) is None
    # a seed that never reaches the threshold ranks last in the median
    assert mod.median_steps([2000, None, 1000]) == 2000
    assert mod.median_steps([2000, None, None]) is None
    assert mod.median_steps([1000, 3000]) == 2000
