"""Scale-out on Ray: ingestion and learner sampling through ``rlstore.distributed.ReplayShards``.

What is measured, for ``K`` collectors and ``S`` shards, at fragments of 256 and 1024
transitions (``T x 8`` envs; obs float32 (17,), action float32 (6,), as in ``reference/ray.md``):

* ingestion: transitions/s stored by the shards while ``K`` collector actors push pre-built
  fragments through a ``FragmentSender`` (one call in flight each, every result
  ``ray.get``-ed; the fragments made while its call is in flight leave together in the next
  call, up to ``--coalesce-bytes``; ``0``: one call per fragment, 2 in flight) for ``--seconds``,
  and the shards' own CPU: transitions per shard CPU-second ("per core"; also counting the
  CPU of the raylets, whose object store every coalesced add passes through), and the mean
  transitions per call;
* a sweep of the coalescing cap (``--sweep-mib``, ``--repeats`` runs each): per-core
  ingestion of 4 collectors into 1 shard at 1024-transition fragments, no learner;
* learner sampling: batches of 256 per second drawn at the same time by the driver with
  ``sample_many(8, 256, prefetch=1)`` (one call per shard per 8 batches);
* the baseline: the same ``ReplayBuffer`` in this process (``extend`` of the same fragments,
  and of the largest coalesced call; ``sample(256)``), single-threaded, timed in this
  process's CPU seconds like the shards (wall time on a shared machine counts other work).

Simulated multi-node (``--nodes N``): a ``ray.cluster_utils.Cluster`` of a head and ``N``
worker nodes (each its own raylet and object store, ``1`` CPU and a resource ``node<i>``) on
this host; shard ``i`` is placed on node ``i`` (``ReplayShards(placement=...)``), collectors
anywhere; throughput against ``S = 1..N``. On one host the nodes share its cores.

Every row is one run of ``--seconds`` (the machine is shared: read the absolute numbers as
orders of magnitude, the ratios as the result). Nothing is asserted on timings.

Run::

    PYTHONPATH=src python benchmarks/bench_distributed.py [--seconds 3] [--nodes 2]
        [--coalesce-bytes N] [--sweep-mib 2 4 8 16 32 64] [--repeats 3] [--out ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    format_rate,
    library_versions,
    limit_threads,
    machine_info,
    markdown_table,
    write_markdown,
)

ENVS = 8
BATCH = 256
PER_CALL = 8


def make_fragment(transitions: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``transitions / 8`` continuing steps of 8 envs (next_obs[t] = obs[t + 1])."""
    rng = np.random.default_rng(seed)
    t = transitions // ENVS
    obs = rng.normal(size=(t + 1, ENVS, 17)).astype(np.float32)
    return dict(
        obs=obs[:-1],
        action=rng.normal(size=(t, ENVS, 6)).astype(np.float32),
        reward=rng.normal(size=(t, ENVS)).astype(np.float32),
        next_obs=obs[1:],
        terminated=np.zeros((t, ENVS), bool),
        truncated=np.zeros((t, ENVS), bool),
    )


def make_buffer() -> Any:
    from rlstore import ReplayBuffer

    return ReplayBuffer(200_000, num_envs=ENVS, seed=0)


def baseline(seconds: float, sizes: list[int]) -> list[list[object]]:
    """The in-process buffer: extend rate per fragment size, sample(256) rate (CPU time)."""
    rows = []
    for size in sizes:
        buf, frag = make_buffer(), make_fragment(size)
        n, t0 = 0, time.process_time()
        while time.process_time() - t0 < seconds:
            buf.extend(**frag)
            n += size
        rows.append(["in-process", size, n / (time.process_time() - t0)])
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        buf.sample(BATCH)
        n += 1
    rows.append(["in-process sample(256)", "-", n / (time.process_time() - t0)])
    return rows


class Collector:
    """Pushes pre-built fragments into the shards (a Ray actor)."""

    def __init__(self, index: int):
        self.index = index
        self.frags = {size: make_fragment(size, seed=index) for size in (256, 1024)}

    def ready(self) -> bool:
        return True

    def run(self, shards: Any, size: int, seconds: float) -> tuple[int, int]:
        """``(fragments, calls)`` sent in ``seconds``."""
        from rlstore.distributed.collector import FragmentSender

        frag, sender, sent = self.frags[size], FragmentSender(shards, self.index), 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            sender.push(frag)
            sent += 1
        sender.flush()
        if sender.lost:
            raise RuntimeError(f"collector {self.index}: {sender.lost} fragments lost")
        return sent, sender.calls


def run_case(
    ray: Any, shards: Any, collectors: list[Any], k: int, size: int, seconds: float, learn: bool
) -> dict[str, float]:
    """One row: ``k`` collectors pushing ``size``-transition fragments, the driver sampling
    (``learn``) or idle."""
    shards.clear()
    shards.add(make_fragment(1024, seed=99))  # something to sample from at once
    before, raylet0 = shards.stats(), raylet_cpu_s()
    refs = [c.run.remote(shards, size, seconds) for c in collectors[:k]]
    batches, waits, t0 = 0, [], time.perf_counter()
    while learn and time.perf_counter() - t0 < seconds:
        w0 = time.perf_counter()
        batches += len(shards.sample_many(PER_CALL, BATCH, prefetch=1))
        waits.append(time.perf_counter() - w0)
    learner_s = max(time.perf_counter() - t0, 1e-9)
    sent = ray.get(refs, timeout=seconds + 120)
    wall = time.perf_counter() - t0
    after, raylet = shards.stats(), raylet_cpu_s() - raylet0
    added = sum(a["added"] - b["added"] for a, b in zip(after, before, strict=True))
    cpu = sum(a["cpu_s"] - b["cpu_s"] for a, b in zip(after, before, strict=True))
    return {
        "ingest": added / wall,
        "per_core": added / cpu if cpu > 0 else float("nan"),
        "per_core_raylet": added / (cpu + raylet) if cpu > 0 else float("nan"),
        "shard_cpu": cpu / wall,
        "batches": batches / learner_s,
        "wait_ms": 1e3 * statistics.median(waits) / PER_CALL if waits else float("nan"),
        "per_call": size * sum(f for f, _ in sent) / max(1, sum(c for _, c in sent)),
    }


def raylet_cpu_s() -> float:
    """CPU seconds of the raylets this driver started (each runs its node's object store,
    which a coalesced add's argument passes through): ``/proc`` of the driver's children."""
    total, me, tick = 0.0, os.getpid(), os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text.rsplit(")", 1)[1].split()
        if comm == "raylet" and int(rest[1]) == me:
            total += (int(rest[11]) + int(rest[12])) / tick  # utime + stime
    return total


def scale_rows(ray: Any, shard_sets: dict[int, Any], ks: list[int], seconds: float, label: str):
    collectors = [ray.remote(num_cpus=0)(Collector).remote(i) for i in range(max(ks))]
    ray.get([c.ready.remote() for c in collectors], timeout=300)
    rows = []
    for s, shards in shard_sets.items():
        for size in (256, 1024):
            for k, learn in [(k, True) for k in ks] + [(max(ks), False)]:
                r = run_case(ray, shards, collectors, k, size, seconds, learn)
                rows.append([label, k, s, size, f"{r['per_call']:.0f}", format_rate(r["ingest"]),
                             format_rate(r["per_core"]), format_rate(r["per_core_raylet"]),
                             f"{r['shard_cpu']:.2f}",
                             f"{r['batches']:.0f}" if learn else "(no learner)",
                             f"{r['wait_ms']:.2f}" if learn else "-"])  # fmt: skip
                print(rows[-1], flush=True)
    for c in collectors:
        ray.kill(c)
    return rows


HEADERS = ["setup", "K collectors", "S shards", "fragment", "per call", "ingest transitions/s",
           "per shard CPU-s", "per shard+raylet CPU-s", "shard CPU-s/s", "learner batches/s",
           "wait ms/batch"]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--collectors", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--shards", type=int, nargs="+", default=[1, 2])
    p.add_argument("--nodes", type=int, default=2, help="worker nodes of the simulated cluster")
    p.add_argument(
        "--coalesce-bytes",
        type=int,
        default=None,
        help="most bytes per coalesced add (default: ReplayShards' COALESCE_BYTES)",
    )
    p.add_argument(
        "--sweep-mib",
        type=float,
        nargs="*",
        default=[2, 4, 8, 16, 32, 64],
        help="coalescing caps (MiB) of the sweep: 4 collectors, 1 shard, no learner",
    )
    p.add_argument("--repeats", type=int, default=3, help="runs per cap of the sweep")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "distributed.md"))
    args = p.parse_args()
    limit_threads(1)
    import ray

    from rlstore.distributed import ReplayShards, start_ray, stop_ray
    from rlstore.distributed.client import COALESCE_BYTES

    cap = COALESCE_BYTES if args.coalesce_bytes is None else args.coalesce_bytes
    per_item = sum(v.nbytes for v in make_fragment(1024).values()) / 1024
    big = max(1024, int(cap / per_item) // 1024 * 1024)  # transitions of the largest call
    base = baseline(args.seconds, sorted({256, 1024, big}))
    print(base, flush=True)
    start_ray(num_cpus=2, object_store_memory=512 * 1024**2)
    try:
        sets = {s: ReplayShards(make_buffer, s, name=f"bench{s}", coalesce_bytes=cap)
                for s in args.shards}  # fmt: skip
        rows = scale_rows(ray, sets, args.collectors, args.seconds, "one node")
        for shards in sets.values():
            shards.close()
        sweep = coalesce_sweep(ray, args.sweep_mib, args.repeats, args.seconds)
    finally:
        stop_ray()
    cluster_rows = simulated_cluster(args.nodes, args.seconds, cap) if args.nodes else []
    ref = {row[1]: float(row[2]) for row in base[:-1]}  # type: ignore[arg-type]
    sections = [
        ("In-process baseline", markdown_table(
            ["buffer", "fragment", "rate /s"],
            [[a, b, format_rate(float(c))] for a, b, c in base])),  # type: ignore[arg-type]
        ("Ray, one node (2 CPUs)", markdown_table(HEADERS, rows)),
        ("Simulated multi-node (Ray Cluster on this host)", markdown_table(HEADERS, cluster_rows)),
        ("Per-core ingestion vs in-process (rows without a learner)", markdown_table(
            ["fragment", "rows", "per call", "per shard CPU-s", "ratio", "per shard+raylet CPU-s",
             "ratio", "in-process at fragment", f"ratio to in-process at {big}"],
            [per_core_row(size, [r for r in rows + cluster_rows
                                 if r[3] == size and r[9] == "(no learner)"], ref, big)
             for size in (256, 1024)])),
        (f"Coalescing cap sweep (4 collectors, 1 shard, 1024-transition fragments, no learner, "
         f"{args.repeats} runs each; ratio to the in-process {format_rate(ref[1024])} at 1024)",
         markdown_table(["cap MiB", "per call", "per shard CPU-s", "ratio",
                         "per shard+raylet CPU-s", "ratio"],
                        [[mib, calls, _span(a), _span(a, ref[1024]), _span(b),
                          _span(b, ref[1024])] for mib, calls, a, b in sweep])),
    ]  # fmt: skip
    out = write_markdown(
        args.out, "Distributed replay on Ray (bench_distributed.py)", sections,
        versions=library_versions(["ray", "numpy", "torch"]), machine=machine_info(),
        command="PYTHONPATH=src python benchmarks/bench_distributed.py " + " ".join(sys.argv[1:]),
    )  # fmt: skip
    print(out.read_text())


def coalesce_sweep(
    ray: Any, caps_mib: list[float], repeats: int, seconds: float
) -> list[tuple[float, str, list[float], list[float]]]:
    """Per cap: the median transitions per call, and the per-core rates (shard CPU, shard and
    raylet CPU) of ``repeats`` runs of 4 collectors into 1 shard without a learner."""
    from rlstore.distributed import ReplayShards

    collectors = [ray.remote(num_cpus=0)(Collector).remote(i) for i in range(4)]
    ray.get([c.ready.remote() for c in collectors], timeout=300)
    out = []
    for mib in caps_mib:
        shards = ReplayShards(make_buffer, 1, name=f"sweep{mib}", coalesce_bytes=int(mib * 2**20))
        run_case(ray, shards, collectors, 4, 1024, 1.0, False)  # warm up the new shard process
        runs = [run_case(ray, shards, collectors, 4, 1024, seconds, False) for _ in range(repeats)]
        shards.close()
        out.append(
            (
                mib,
                f"{statistics.median(r['per_call'] for r in runs):.0f}",
                [r["per_core"] for r in runs],
                [r["per_core_raylet"] for r in runs],
            )
        )
        print(out[-1], flush=True)
    for c in collectors:
        ray.kill(c)
    return out


def per_core_row(size: int, rows: list[list[Any]], ref: dict[int, float], big: int) -> list[Any]:
    """The no-learner rows at one fragment size: per-core rates and ratios, lowest-highest."""
    shard, both = [_rate(r[6]) for r in rows], [_rate(r[7]) for r in rows]
    calls = sorted(int(r[4]) for r in rows)
    return [size, len(rows), f"{calls[0]}-{calls[-1]}",
            _span(shard), _span(shard, ref[size]), _span(both), _span(both, ref[size]),
            format_rate(ref[size]), _span(shard, ref[big])]  # fmt: skip


def _span(values: list[float], per: float | None = None) -> str:
    """``lowest-highest`` of rates (or of their ratios to ``per``)."""
    lo, hi = min(values), max(values)
    if per is not None:
        return f"{lo / per:.2f}-{hi / per:.2f}"
    return f"{format_rate(lo)}-{format_rate(hi)}"


def _rate(text: str) -> float:
    scale = {"k": 1e3, "M": 1e6, "G": 1e9}.get(text[-1], 1.0)
    return float(text[:-1] if text[-1] in "kMG" else text) * scale


def simulated_cluster(nodes: int, seconds: float, cap: int) -> list[list[object]]:
    """Shards on ``nodes`` extra Ray nodes of a local Cluster, S = 1..nodes."""
    import os
    import shutil
    import tempfile

    import ray
    from ray.cluster_utils import Cluster

    from rlstore.distributed import ReplayShards, stop_ray

    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # loopback, as start_ray does
    store, tmp = 100 * 1024**2, tempfile.mkdtemp(prefix="ray", dir="/tmp")
    os.environ["RAY_TMPDIR"] = tmp  # Cluster writes its address file there, not in /tmp/ray
    os.makedirs(os.path.join(tmp, "ray"))
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "object_store_memory": store, "include_dashboard": False,
        "temp_dir": tmp})  # fmt: skip
    try:
        for i in range(nodes):
            cluster.add_node(num_cpus=1, resources={f"node{i}": 1}, object_store_memory=store)
        ray.init(address=cluster.address, namespace="rlstore", log_to_driver=False)
        rows = []
        for s in range(1, nodes + 1):
            shards = ReplayShards(
                make_buffer, s, name=f"cluster{s}", coalesce_bytes=cap,
                placement=lambda i: {"resources": {f"node{i}": 0.01}},
            )  # fmt: skip
            rows += scale_rows(ray, {s: shards}, [2], seconds, f"{nodes + 1} nodes")
            shards.close()
        return rows
    finally:
        stop_ray()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
