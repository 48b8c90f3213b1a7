"""Replay-buffer benchmark: rlstore against cpprb, Stable-Baselines3, TorchRL and Tianshou.

One run measures every library on the same workloads and prints ratios (GUIDE section 5):

- ``single add``: one transition per call into a full buffer with one env (transitions/s), of
  a continuing stream and of independent transitions (each ``obs`` unrelated to the previous
  ``next_obs``: an offline dataset, relabelled goals);
- ``batched add``: one call per step of 8 envs, arrays with a leading axis of 8, into a full
  buffer (transitions/s; adds are timed in steady state, the ring wrapping over touched memory);
- ``PER``: prioritized ``sample(256)`` (transitions and importance weights, as torch tensors)
  plus ``update_priorities`` of the 256 drawn, on a full buffer (vector case: 1,000,000;
  iterations/s), for the libraries that ship proportional PER;
- ``sample 256``: a uniform batch of 256 from a full buffer, converted to torch tensors
  (batches/s; libraries that return numpy arrays pay ``torch.from_numpy`` per field);
- ``bytes/transition``: growth of the anonymous resident memory (``RssAnon``) of a fresh
  process from just before the buffer is built to just after it has been filled to capacity
  through the library's own add path, divided by the capacity (real memory, not a formula). A
  second column sums the ``nbytes`` of every numpy array / torch tensor reachable from the
  buffer object (``n/a`` when the storage is hidden in C++, as in cpprb).

Cases: ``vector`` (float32 obs 17, float32 action 6, capacity 1,000,000) and ``image`` (uint8
obs 84x84x4, action 6, capacity 100,000). The per-step data is a pre-generated cyclic stream of
random transitions in which ``next_obs[t] == obs[t+1]`` except where an episode ends (random
terminations and truncations), as a real environment produces; each library gets its inputs
pre-built in the form its docs use (numpy arrays, TensorDicts, Batches), so only the buffer
call is timed. Every library runs in its own fresh subprocess with one torch thread.

Usage (from the repository root, in the benchmark virtualenv)::

    /work/benchvenv/bin/python benchmarks/bench_replay.py                # full run, ~10 min
    /work/benchvenv/bin/python benchmarks/bench_replay.py --quick --out /tmp/r.md
    python benchmarks/bench_replay.py --libs rlstore --case vector --capacity 20000

Numbers are printed and written to ``--out`` (default ``benchmarks/results/replay.md``);
nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    format_rate,
    library_versions,
    machine_info,
    markdown_table,
    rss_bytes,
    time_repeats,
    trim_heap,
    write_markdown,
)
from _replay_adapters import ACT_DIM, ADAPTERS, BATCH_SIZE  # noqa: E402

HERE = Path(__file__).resolve().parent
NUM_ENVS_BATCHED = 8
VERSIONED = [
    "rlstore",
    "torch",
    "numpy",
    "cpprb",
    "stable-baselines3",
    "torchrl",
    "tensordict",
    "tianshou",
    "gymnasium",
]


@dataclass(frozen=True)
class Case:
    """One workload shape and the amount of work per timed repeat.

    Attributes:
        name: ``"vector"`` or ``"image"``.
        obs_shape: shape of one observation; dtype is ``obs_dtype``.
        obs_dtype: ``"float32"`` or ``"uint8"``.
        capacity: transitions held by the buffer (sample and memory rows).
        single_adds: transitions added per timed repeat of ``single add``.
        batched_steps: steps of 8 envs per timed repeat of ``batched add``.
        samples: batches of 256 drawn per timed repeat of ``sample 256``.
        pool: length of the cyclic pre-generated stream, per env.
        per_steps: prioritized sample + update iterations per timed repeat (0: skipped).
    """

    name: str
    obs_shape: tuple[int, ...]
    obs_dtype: str
    capacity: int
    single_adds: int
    batched_steps: int
    samples: int
    pool: int
    per_steps: int = 0

    @property
    def shapes(self) -> str:
        """Human-readable description of the shapes, for the result tables."""
        obs = "x".join(map(str, self.obs_shape))
        return f"obs {self.obs_dtype}[{obs}], act float32[{ACT_DIM}], cap {self.capacity:,}"


def make_case(name: str, *, quick: bool, capacity: int | None) -> Case:
    """The standard case ``name`` (issue 2 shapes), scaled down with ``quick`` or ``capacity``."""
    if name == "vector":
        c = Case("vector", (17,), "float32", 1_000_000, 30_000, 10_000, 2_000, 4096, 500)
        if quick:
            c = Case("vector", (17,), "float32", 20_000, 2_000, 500, 200, 512, 50)
    elif name == "image":
        c = Case("image", (84, 84, 4), "uint8", 100_000, 10_000, 1_000, 200, 128)
        if quick:
            c = Case("image", (84, 84, 4), "uint8", 1_000, 200, 50, 20, 32)
    else:
        raise ValueError(f"case: expected 'vector' or 'image', got {name!r}")
    if capacity is not None:
        if capacity < BATCH_SIZE:
            raise ValueError(f"capacity: expected >= the batch size {BATCH_SIZE}, got {capacity}")
        c = Case(
            c.name,
            c.obs_shape,
            c.obs_dtype,
            capacity,
            min(c.single_adds, capacity),
            min(c.batched_steps, capacity // NUM_ENVS_BATCHED),
            c.samples,
            min(c.pool, capacity // 4),
            c.per_steps,
        )
    return c


# --------------------------------------------------------------------------------------------
# worker side: one library, one case, in a fresh process
# --------------------------------------------------------------------------------------------


def make_stream(case: Case, num_envs: int, seed: int, independent: bool = False) -> dict[str, Any]:
    """A cyclic stream of ``case.pool`` steps of ``num_envs`` envs, numpy arrays ``(P, N, ...)``.

    ``next_obs[t, n] == obs[(t + 1) % P, n]`` unless ``terminated | truncated`` at ``(t, n)``,
    where ``next_obs`` is an independent random final observation. Rewards and actions are
    float32 normals; about 0.2% of steps terminate and 0.1% truncate. With ``independent``
    every ``next_obs`` is an independent random observation (an offline dataset, relabelled
    goals: no add continues the previous one).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    p = case.pool
    shape = (p, num_envs, *case.obs_shape)
    if case.obs_dtype == "uint8":
        obs = rng.integers(0, 256, size=shape, dtype=np.uint8)
        next_obs = rng.integers(0, 256, size=shape, dtype=np.uint8) if independent else None
    else:
        obs = rng.standard_normal(shape, dtype=np.float32)
        next_obs = rng.standard_normal(shape, dtype=np.float32) if independent else None
    if next_obs is None:
        next_obs = np.roll(obs, -1, axis=0)
    terminated = rng.random((p, num_envs)) < 0.002
    truncated = (rng.random((p, num_envs)) < 0.001) & ~terminated
    done = terminated | truncated
    t_idx, n_idx = np.nonzero(done)
    if case.obs_dtype == "uint8":
        finals = rng.integers(0, 256, size=(len(t_idx), *case.obs_shape), dtype=np.uint8)
    else:
        finals = rng.standard_normal((len(t_idx), *case.obs_shape), dtype=np.float32)
    next_obs[t_idx, n_idx] = finals
    return {
        "obs": obs,
        "next_obs": next_obs,
        "action": rng.standard_normal((p, num_envs, ACT_DIM), dtype=np.float32),
        "reward": rng.standard_normal((p, num_envs), dtype=np.float32),
        "terminated": terminated,
        "truncated": truncated,
    }


def storage_nbytes(obj: Any) -> int:
    """Bytes of distinct numpy arrays / torch tensors reachable from ``obj`` (0 if none found).

    Walks ``__dict__``, ``__slots__``, dicts, lists and tuples (depth <= 8); views are counted
    once through their base buffer (numpy) or untyped storage (torch).
    """
    import numpy as np
    import torch

    seen_obj: set[int] = set()
    seen_mem: dict[int, int] = {}

    def visit(o: Any, depth: int) -> None:
        if depth > 8 or id(o) in seen_obj:
            return
        seen_obj.add(id(o))
        if isinstance(o, np.ndarray):
            base = o
            while isinstance(base.base, np.ndarray):
                base = base.base
            seen_mem[base.__array_interface__["data"][0]] = base.nbytes
            return
        if isinstance(o, torch.Tensor):
            st = o.untyped_storage()
            seen_mem[st.data_ptr()] = st.nbytes()
            return
        if isinstance(o, (str, bytes, int, float, bool, type(None))):
            return
        if isinstance(o, dict):
            children = list(o.values())
        elif isinstance(o, (list, tuple)):
            children = list(o) if len(o) < 10_000 else []
        else:
            children = list(getattr(o, "__dict__", {}).values())
            for slot in getattr(type(o), "__slots__", ()):
                if isinstance(slot, str) and hasattr(o, slot):
                    children.append(getattr(o, slot))
        for child in children:
            visit(child, depth + 1)

    visit(obj, 0)
    return sum(seen_mem.values())


def _entry(t: Any, clock: str) -> dict[str, Any]:
    """JSON record of a :class:`_common.Timing` with ``rate``/``seconds`` from ``clock``."""
    cpu = clock == "cpu"
    return {
        "rate": t.cpu_rate if cpu else t.rate,
        "seconds": list(t.cpu_seconds if cpu else t.seconds),
        "wall_rate": t.rate,
        "cpu_rate": t.cpu_rate,
        "clock": clock,
    }


def run_worker(lib: str, case: Case, repeats: int, seed: int, clock: str = "cpu") -> dict[str, Any]:
    """Run every workload of ``case`` for library variant ``lib`` in this process.

    ``clock`` picks the durations behind ``rate`` and ``seconds``: ``"cpu"`` (process CPU
    time, robust on a shared machine) or ``"wall"``; both rates are always recorded.
    """
    import gc
    import itertools

    import torch

    torch.set_num_threads(1)
    adapter = ADAPTERS[lib](case)
    s1 = make_stream(case, 1, seed)
    s8 = make_stream(case, NUM_ENVS_BATCHED, seed + 1)
    single_inputs = adapter.single_inputs(s1)
    out: dict[str, Any] = {"lib": lib, "case": asdict(case), "notes": adapter.notes}

    # warm-up of lazy imports and code paths, so that they are not billed to memory
    small = adapter.make(64, 1)
    for inp in single_inputs[:48]:
        adapter.add_single(small, inp)
    adapter.sample(small, 16)
    del small
    gc.collect()
    trim_heap()

    # memory + sample: one buffer filled to capacity through the library's add path
    rss0 = rss_bytes()
    buf = adapter.make(case.capacity, 1)
    adapter.fill(buf, s1, single_inputs, case.capacity)
    gc.collect()
    trim_heap()
    rss1 = rss_bytes()
    out["rss_bytes_per_transition"] = (rss1 - rss0) / case.capacity
    arrays = storage_nbytes(buf)
    out["array_bytes_per_transition"] = arrays / case.capacity if arrays else None
    out["own_nbytes_per_transition"] = adapter.own_nbytes(buf, case.capacity)

    def sample_loop() -> None:
        # like a training loop: each batch is dropped when the next one is bound (holding all
        # of them would bill every library for page faults of gigabytes of image batches)
        batch = None
        for _ in range(case.samples):
            batch = adapter.sample(buf, BATCH_SIZE)
        del batch

    t = time_repeats(sample_loop, items=case.samples, repeats=repeats)
    out["sample"] = _entry(t, clock)

    # single adds into the full buffer (steady state: the ring wraps over touched memory);
    # the cycle resumes where fill() stopped, so the stream stays continuous
    it = itertools.islice(itertools.cycle(single_inputs), case.capacity % len(single_inputs), None)

    def single() -> None:
        add = adapter.add_single
        for inp in itertools.islice(it, case.single_adds):
            add(buf, inp)

    t = time_repeats(single, items=case.single_adds, repeats=repeats)
    out["single_add"] = _entry(t, clock)

    # single adds of independent transitions (each obs unrelated to the previous next_obs)
    indep = itertools.cycle(adapter.single_inputs(make_stream(case, 1, seed + 2, True)))

    def single_indep() -> None:
        add = adapter.add_single
        for inp in itertools.islice(indep, case.single_adds):  # noqa: F821 (run before the del)
            add(buf, inp)

    t = time_repeats(single_indep, items=case.single_adds, repeats=repeats)
    out["single_add_indep"] = _entry(t, clock)
    del buf, single_inputs, indep
    gc.collect()

    # batched adds of 8 envs, also into a buffer first filled to capacity (untimed)
    if adapter.supports_batched:
        buf = adapter.make(case.capacity, NUM_ENVS_BATCHED)
        it8 = itertools.cycle(adapter.batched_inputs(s8))
        for inp in itertools.islice(it8, -(-case.capacity // NUM_ENVS_BATCHED)):
            adapter.add_batched(buf, inp)

        def batched() -> None:
            add = adapter.add_batched
            for inp in itertools.islice(it8, case.batched_steps):
                add(buf, inp)

        t = time_repeats(batched, items=case.batched_steps * NUM_ENVS_BATCHED, repeats=repeats)
        out["batched_add"] = _entry(t, clock)
        del buf

    # prioritized replay: sample(256) with weights + update_priorities(256), full buffer
    if adapter.supports_per and case.per_steps:
        import numpy as np

        prio = np.random.default_rng(seed).exponential(size=(64, BATCH_SIZE))
        try:
            buf = adapter.make_per(case.capacity)
            adapter.fill(buf, s1, adapter.single_inputs(s1), case.capacity)
            adapter.per_step(buf, BATCH_SIZE, prio[0])
        except (ImportError, RuntimeError) as exc:  # e.g. torchrl built without its C++ trees
            out["per_error"] = f"{type(exc).__name__}: {exc}"[:200]
            return out

        def per_loop() -> None:
            for i in range(case.per_steps):
                adapter.per_step(buf, BATCH_SIZE, prio[i % 64])

        t = time_repeats(per_loop, items=case.per_steps, repeats=repeats)
        out["per"] = _entry(t, clock)
        del buf
        gc.collect()

    return out


# --------------------------------------------------------------------------------------------
# driver side: one subprocess per (case, library), then tables
# --------------------------------------------------------------------------------------------

# (key in the worker result, row label, unit, higher is better)
WORKLOADS = [
    ("single_add", "single add", "transitions/s", True),
    ("single_add_indep", "single add, independent", "transitions/s", True),
    ("batched_add", "batched add (8 envs)", "transitions/s", True),
    ("sample", "sample 256 -> torch", "batches/s", True),
    ("per", "PER sample 256 + update_priorities 256", "iterations/s", True),
    ("rss_bytes_per_transition", "memory, RssAnon growth", "B/transition", False),
    ("array_bytes_per_transition", "memory, sum of arrays", "B/transition", False),
]
TARGET_SPEEDUP = 2.0
TARGET_BYTES = 100.0  # vector case, observations stored once


def available(lib: str) -> bool:
    """Whether the variant's library (and for rlstore its ReplayBuffer module) is importable."""
    module = ADAPTERS[lib].module
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def run_in_subprocess(
    lib: str, case: Case, repeats: int, seed: int, timeout: float, clock: str
) -> dict:
    """Run :func:`run_worker` in a fresh interpreter; a failure becomes ``{"error": ...}``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            lib,
            "--case-json",
            json.dumps(asdict(case)),
            "--repeats",
            str(repeats),
            "--seed",
            str(seed),
            "--clock",
            clock,
            "--worker-out",
            str(out),
        ]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"lib": lib, "error": f"timed out after {timeout:.0f} s"}
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"lib": lib, "error": " / ".join(tail) or f"exit code {proc.returncode}"}
        return json.loads(out.read_text())


def merge_rounds(runs: list[dict]) -> dict:
    """One result per library from its rounds: the median over rounds of every rate and memory
    figure; ``seconds`` pools the timed repeats of all rounds (their spread is the ± column)."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    out = dict(ok[0], rounds=len(ok))
    for key, *_ in WORKLOADS:
        vals = [r.get(key) for r in ok]
        if all(isinstance(v, dict) for v in vals):
            rates = [v["rate"] for v in vals]
            out[key] = dict(
                vals[0],
                rate=statistics.median(rates),
                round_rates=rates,
                seconds=[x for v in vals for x in v["seconds"]],
            )
        elif all(isinstance(v, (int, float)) for v in vals):
            out[key] = statistics.median(vals)
    return out


def _value(res: dict, key: str) -> float | None:
    v = res.get(key)
    if isinstance(v, dict):
        v = v.get("rate")
    return None if v is None else float(v)


def _fmt(v: float, unit: str) -> str:
    return f"{v:,.0f}" if unit == "B/transition" else format_rate(v)


def case_tables(case: Case, results: list[dict]) -> tuple[str, list[list[str]]]:
    """Markdown table of every (workload, library) row, and the rlstore summary rows."""
    rows: list[list[str]] = []
    summary: list[list[str]] = []
    ok = [r for r in results if "error" not in r]
    by_lib = {r["lib"]: r for r in ok}
    for key, label, unit, higher in WORKLOADS:
        vals = {r["lib"]: _value(r, key) for r in ok}
        # a non-positive memory reading is a measurement failure, not a result
        vals = {k: v for k, v in vals.items() if v is not None and (higher or v > 0)}
        peers = {k: v for k, v in vals.items() if not k.startswith("rlstore")}
        best_lib = (max if higher else min)(peers, key=peers.__getitem__) if peers else None
        best = peers[best_lib] if best_lib else None
        for lib, v in sorted(vals.items(), key=lambda kv: -kv[1] if higher else kv[1]):
            cell = _fmt(v, unit)
            entry = by_lib[lib].get(key)
            if isinstance(entry, dict) and len(entry["seconds"]) > 1:
                secs = entry["seconds"]
                half_range = (max(secs) - min(secs)) / 2 / statistics.median(secs)
                cell += f" (±{half_range:.0%})"
            ratio = f"x{v / best:.2f}" if best else "n/a"
            rows.append([label, lib, cell, unit, ratio])
        for ours in [k for k in vals if k.startswith("rlstore")] if best else []:
            ratio = vals[ours] / best
            if higher:
                target, met = f">= x{TARGET_SPEEDUP:.0f}", ratio >= TARGET_SPEEDUP
            elif key == "rss_bytes_per_transition" and case.name == "vector" and ours == "rlstore":
                target, met = f"<= {TARGET_BYTES:.0f} B", vals[ours] <= TARGET_BYTES
            else:
                target, met = "-", None
            summary.append(
                [
                    case.name,
                    label if ours == "rlstore" else f"{label} ({ours})",
                    _fmt(vals[ours], unit),
                    f"{_fmt(best, unit)} ({best_lib})",
                    f"x{ratio:.2f}",
                    target,
                    "-" if met is None else ("yes" if met else "**no**"),
                ]
            )
    for r in results:
        if "error" in r:
            rows.append(["(failed)", r["lib"], r["error"][:200], "", ""])
        elif not ADAPTERS[r["lib"]].supports_batched:
            rows.append(["batched add (8 envs)", r["lib"], "n/a", "", ADAPTERS[r["lib"]].notes])
        if "per_error" in r:
            rows.append(["PER (n/a)", r["lib"], r["per_error"][:120], "", ""])
    headers = ["workload", "library", "median (± half range)", "unit", "vs best peer"]
    return markdown_table(headers, rows), summary


def method_text(cases: list[Case], repeats: int, clock: str = "cpu", rounds: int = 1) -> str:
    """The 'what was measured' section of the report."""
    how = (
        "process CPU time (user + system; the machine is shared, and CPU time is far less "
        "sensitive to other jobs than wall-clock time; `--clock wall` for wall-clock)"
        if clock == "cpu"
        else "wall-clock time"
    )
    lines = [
        f"{rounds} interleaved round(s) over the libraries (library order rotated each round; "
        "the machine's speed drifts by up to 2x over minutes, so one pass in a fixed order can "
        "bias a ratio), each the median of "
        f"{repeats} timed repeats after one warm-up, each library in a fresh process; a row's "
        "figure is the median over the rounds, ± the half range of all timed repeats; "
        f"torch with 1 thread; rates from {how}. Ratios are against the best peer "
        "(excluding rlstore) on that row: above 1 is faster for rates, below 1 is smaller "
        "for memory.",
        "",
    ]
    for c in cases:
        lines.append(
            f"- **{c.name}** ({c.shapes}): single add = {c.single_adds:,} one-transition calls "
            f"per repeat; batched add = {c.batched_steps:,} calls of 8 envs; sample = "
            f"{c.samples:,} batches of {BATCH_SIZE} from a buffer filled to capacity, converted "
            "to torch tensors, each dropped when the next is drawn; memory = growth of anonymous "
            "resident memory (`RssAnon`) "
            "from before building the buffer to after filling it to capacity through the "
            "library's add path, / capacity; 'sum of arrays' adds `nbytes` of every "
            "array/tensor reachable from the buffer object (not visible for cpprb's C++ storage)."
        )
    lines += ["", "Variants:", ""]
    lines += [f"- `{name}`: {a.notes}" for name, a in ADAPTERS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--libs", default="all", help="comma list of " + ", ".join(ADAPTERS))
    ap.add_argument("--case", default="vector,image", help="comma list of vector, image")
    ap.add_argument("--capacity", type=int, default=None, help="override the capacity")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5, quick 2)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for smoke tests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="interleaved rounds over the libraries (median over rounds; default 3, quick 1)",
    )
    ap.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="durations behind the rates: process CPU time (default; robust on a shared "
        "machine) or wall-clock time; both are kept in --json",
    )
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per library and case")
    ap.add_argument("--out", default=str(HERE / "results" / "replay.md"), help="markdown output")
    ap.add_argument("--json", default=None, help="also write raw results as JSON here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--case-json", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 5)
    args.rounds = args.rounds or (1 if args.quick else 3)

    if args.worker:  # child process
        fields = json.loads(args.case_json)
        case = Case(**{**fields, "obs_shape": tuple(fields["obs_shape"])})
        res = run_worker(args.worker, case, repeats, args.seed, args.clock)
        Path(args.worker_out).write_text(json.dumps(res))
        return 0

    libs = list(ADAPTERS) if args.libs == "all" else args.libs.split(",")
    unknown = [x for x in libs if x not in ADAPTERS]
    if unknown:
        ap.error(f"--libs: unknown {unknown}; expected some of {list(ADAPTERS)}")
    missing = [x for x in libs if not available(x)]
    libs = [x for x in libs if x not in missing]
    cases = [make_case(c, quick=args.quick, capacity=args.capacity) for c in args.case.split(",")]
    sections: list[tuple[str, str]] = []
    summary: list[list[str]] = []
    raw: list[dict] = []
    for case in cases:
        runs: dict[str, list[dict]] = {lib: [] for lib in libs}
        for r in range(args.rounds):  # interleaved rounds, library order rotated each round
            for lib in libs[r % len(libs) :] + libs[: r % len(libs)]:
                print(f"[{case.name}] round {r + 1}/{args.rounds} {lib} ...", file=sys.stderr)
                res = run_in_subprocess(lib, case, repeats, args.seed, args.timeout, args.clock)
                runs[lib].append(res)
        results = [merge_rounds(runs[lib]) for lib in libs]
        raw += results
        table, summ = case_tables(case, results)
        summary += summ
        sections.append((f"{case.name}: {case.shapes}", table))
    summ_headers = ["case", "workload", "rlstore", "best peer", "ratio", "target", "met"]
    sections.insert(0, ("Summary: rlstore vs the best peer", markdown_table(summ_headers, summary)))
    note = "Not importable here, skipped: " + (", ".join(missing) if missing else "none") + "."
    sections.append(
        ("Method", method_text(cases, repeats, args.clock, args.rounds) + "\n\n" + note)
    )
    for heading, body in sections:
        print(f"\n## {heading}\n\n{body}")
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))
    if args.out:
        cmd = "python benchmarks/bench_replay.py " + " ".join(argv or sys.argv[1:])
        write_markdown(
            args.out,
            "Replay-buffer benchmark",
            sections,
            versions=library_versions(VERSIONED),
            machine=machine_info(),
            command=cmd.strip(),
        )
        print(f"\nwrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
