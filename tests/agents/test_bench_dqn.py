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
                "--impls", "rlstore,rlstore PER + 3-step"]  # fmt: skip
        assert mod.main(argv) == 0
    finally:
        sys.path.remove(str(BENCH))
    text = out.read_text()
    assert "| rlstore PER + 3-step |" in text and "not reached" in text
    assert mod.first_step_reaching([475.0] * 20, list(range(1, 21))) == 20
    assert mod.first_step_reaching([474.0] * 20, list(range(1, 21))) is None
