"""Smoke test of benchmarks/bench_nstep.py at a tiny size (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_bench_nstep_runs_and_writes_a_report(tmp_path, capsys) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("_bench_nstep", BENCH / "bench_nstep.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out = tmp_path / "nstep.md"
        args = ["--capacity", "800", "--iters", "2", "--repeats", "1", "--out", str(out)]
        assert mod.main(args) == 0
    finally:
        sys.path.remove(str(BENCH))
    assert (
        "| rlstore NStepReplay |" in out.read_text()
        and "rlstore NStepReplay" in capsys.readouterr().out
    )
