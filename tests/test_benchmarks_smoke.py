"""Smoke tests of the replay benchmark (benchmarks/bench_replay.py) and its helpers.

They prove the script runs end to end at tiny sizes with rlstore and whichever peer libraries
are importable here, and check the helpers that produce its numbers (data stream, byte
counting, ratio tables) against hand-computed values. No test asserts on a timing.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _load(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` (the folder is not a package)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve string annotations through it
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _load("bench_replay")


@pytest.fixture(scope="module")
def common() -> ModuleType:
    return _load("_common")


def _check_result(bench: ModuleType, r: dict) -> None:
    assert "error" not in r, r
    keys = ["single_add", "sample"]
    keys += ["batched_add"] if bench.ADAPTERS[r["lib"]].supports_batched else []
    for key in keys:
        assert r[key]["seconds"] and r[key]["rate"] > 0, (r["lib"], key)
    # memory: at least the observations (stored once) must be allocated
    obs_bytes = math.prod(r["case"]["obs_shape"]) * np.dtype(r["case"]["obs_dtype"]).itemsize
    if r["array_bytes_per_transition"] is not None:
        assert r["array_bytes_per_transition"] >= obs_bytes, r
    if r["lib"] == "rlstore":
        # rlstore's own ``nbytes`` counts its storage; the walker finds every array reachable
        # (also small index/RNG arrays), so it must see at least that much and not 5% more
        own, walked = r["own_nbytes_per_transition"], r["array_bytes_per_transition"]
        assert own <= walked <= 1.05 * own, (own, walked)


def test_end_to_end_tiny(bench: ModuleType, tmp_path: Path) -> None:
    """The whole driver (a subprocess per library) on the vector case at capacity 512."""
    libs = [lib for lib in bench.ADAPTERS if bench.available(lib)]
    if "rlstore" not in libs:
        pytest.fail("rlstore.buffers.replay is not importable")
    out, raw = tmp_path / "replay.md", tmp_path / "raw.json"
    cmd = [sys.executable, str(BENCH / "bench_replay.py"), "--libs", ",".join(libs)]
    cmd += ["--case", "vector", "--quick", "--capacity", "512", "--repeats", "1"]
    cmd += ["--out", str(out), "--json", str(raw)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]

    results = json.loads(raw.read_text())
    assert sorted(r["lib"] for r in results) == sorted(libs)
    for r in results:
        assert r["case"]["name"] == "vector" and r["case"]["capacity"] == 512
        _check_result(bench, r)
    text = out.read_text()
    for part in ("# Replay-buffer benchmark", "## Summary", "| nproc |", "| rlstore |", "Method"):
        assert part in text
    assert "(failed)" not in text
    assert proc.stdout.count("| single add |") >= len(libs)


def test_worker_image_case_in_process(bench: ModuleType) -> None:
    """Every importable library through ``run_worker`` on uint8 84x84x4 observations."""
    # capacity 256, 50 single adds, 8 batched steps, 4 sampled batches, a 16-step stream
    case = bench.Case("image", (84, 84, 4), "uint8", 256, 50, 8, 4, 16)
    for lib in [lib for lib in bench.ADAPTERS if bench.available(lib)]:
        r = bench.run_worker(lib, case, repeats=1, seed=0)
        assert r["lib"] == lib and tuple(r["case"]["obs_shape"]) == (84, 84, 4)
        _check_result(bench, r)


def test_make_stream_successor_matches_naive_loop(bench: ModuleType) -> None:
    case = bench.make_case("vector", quick=True, capacity=256)
    s = bench.make_stream(case, 3, seed=7)
    p = case.pool
    assert s["obs"].shape == (p, 3, 17) and s["obs"].dtype == np.float32
    assert s["action"].shape == (p, 3, 6) and s["reward"].shape == (p, 3)
    assert not (s["terminated"] & s["truncated"]).any()
    for t in range(p):
        for n in range(3):
            ended = s["terminated"][t, n] or s["truncated"][t, n]
            same = np.array_equal(s["next_obs"][t, n], s["obs"][(t + 1) % p, n])
            assert same != ended  # successor kept iff the episode goes on (random finals differ)


def test_make_stream_image_dtype(bench: ModuleType) -> None:
    case = bench.make_case("image", quick=True, capacity=256)
    s = bench.make_stream(case, 2, seed=0)
    assert s["obs"].dtype == np.uint8 and s["obs"].shape == (case.pool, 2, 84, 84, 4)


def test_storage_nbytes_counts_each_buffer_once(bench: ModuleType) -> None:
    class Holder:
        def __init__(self) -> None:
            self.a = np.zeros((10, 3), np.float32)  # 10 * 3 * 4 = 120 B
            self.view = self.a[2:5]  # a view: no new memory
            self.nested = {"t": [torch.zeros(5, dtype=torch.float64)]}  # 5 * 8 = 40 B
            self.t_view = self.nested["t"][0][1:]  # same storage
            self.name = "x"

    assert bench.storage_nbytes(Holder()) == 120 + 40
    assert bench.storage_nbytes(object()) == 0


def test_make_case_sizes(bench: ModuleType) -> None:
    full = bench.make_case("vector", quick=False, capacity=None)
    assert (full.capacity, full.obs_shape, full.obs_dtype) == (1_000_000, (17,), "float32")
    img = bench.make_case("image", quick=False, capacity=None)
    assert (img.capacity, img.obs_shape, img.obs_dtype) == (100_000, (84, 84, 4), "uint8")
    small = bench.make_case("vector", quick=True, capacity=512)
    assert small.capacity == 512 and small.single_adds <= 512 and small.batched_steps <= 512 // 8
    with pytest.raises(ValueError, match="capacity"):
        bench.make_case("vector", quick=True, capacity=10)
    with pytest.raises(ValueError, match="case"):
        bench.make_case("atari", quick=True, capacity=None)


def test_case_tables_ratios_and_targets(bench: ModuleType) -> None:
    case = bench.make_case("vector", quick=True, capacity=None)

    def res(lib: str, single: float, rss: float) -> dict:
        return {
            "lib": lib,
            "single_add": {"rate": single, "seconds": [1.0, 2.0, 3.0]},
            "rss_bytes_per_transition": rss,
        }

    results = [res("rlstore", 300.0, 90.0), res("sb3", 100.0, 172.0), res("cpprb", 150.0, 168.0)]
    results.append({"lib": "torchrl", "error": "boom"})
    table, summary = bench.case_tables(case, results)
    rows = {(r[1]): r for r in summary}
    # best peer on single add is cpprb (150 > 100): 300 / 150 = 2.00 -> target met
    assert rows["single add"][3] == "150.0 (cpprb)" and rows["single add"][4] == "x2.00"
    assert rows["single add"][6] == "yes"
    # memory: best (lowest) peer is cpprb 168; 90 / 168 = 0.5357 -> x0.54; 90 <= 100 met
    mem = rows["memory, RssAnon growth"]
    assert mem[4] == "x0.54" and mem[6] == "yes"
    # spread column: half range (3 - 1) / 2 over median 2 = 50 %
    assert "300.0 (±50%)" in table
    assert "| (failed) | torchrl | boom |" in table


def test_timing_and_markdown_helpers(common: ModuleType) -> None:
    calls = []
    t = common.time_repeats(lambda: calls.append(1), items=10, repeats=2, warmup=1)
    assert len(calls) == 3 and len(t.seconds) == 2
    # median of (1, 3, 2) s is 2 s -> 10 items / 2 s = 5 items/s; half of (3-1)/2 = 100 % spread
    fixed = common.Timing(seconds=(1.0, 3.0, 2.0), items=10)
    assert fixed.rate == 5.0 and fixed.spread == 1.0
    with pytest.raises(ValueError, match="repeats"):
        common.time_repeats(lambda: None, items=1, repeats=0)
    assert common.format_rate(1_234_567) == "1.23M" and common.format_rate(950.0) == "950.0"
    table = common.markdown_table(["a", "b"], [[1, "x|y"]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | x\\|y |"]
    with pytest.raises(ValueError, match="row"):
        common.markdown_table(["a", "b"], [[1]])
    assert common.rss_bytes() > 0
    assert common.library_versions(["numpy", "no-such-dist-xyz"])["numpy"] == np.__version__
