"""Small, generic helpers shared by the benchmark scripts (timing, versions, markdown reports).

Every benchmark in this folder reports, for each row: what was measured, on what shapes, the
median of several repeats, and the versions of every library involved (GUIDE section 5). This
module keeps those mechanics in one place so that ``bench_replay.py``, ``bench_returns.py`` and
``bench_ppo.py`` format their results the same way.

Import it from a script in this folder with::

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import Timing, time_repeats, library_versions, machine_info, markdown_table

Nothing here asserts on timings; numbers are only printed and written to ``results/``.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import gc
import importlib
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "first_step_reaching",
    "median_steps",
    "fmt_steps",
    "has_sb3",
    "Timing",
    "time_repeats",
    "library_versions",
    "machine_info",
    "markdown_table",
    "format_rate",
    "write_markdown",
    "rss_bytes",
    "trim_heap",
    "limit_threads",
]


@dataclass(frozen=True)
class Timing:
    """Result of :func:`time_repeats`.

    Attributes:
        seconds: wall-clock seconds of each timed repeat (warm-up repeats excluded).
        items: number of items (transitions, batches, steps...) processed per repeat.
        cpu_seconds: CPU seconds (user + system, all threads) of this process per repeat.
            On a shared, loaded machine these are far less noisy than wall-clock seconds
            for single-threaded work; empty when not measured.
    """

    seconds: tuple[float, ...]
    items: int
    cpu_seconds: tuple[float, ...] = ()

    @property
    def median_s(self) -> float:
        """Median seconds per repeat."""
        return statistics.median(self.seconds)

    @property
    def rate(self) -> float:
        """Median throughput, items per second (``items / median_s``)."""
        return self.items / self.median_s if self.median_s > 0 else float("inf")

    @property
    def cpu_rate(self) -> float:
        """Median throughput by CPU time, items per CPU second (NaN when not measured)."""
        if not self.cpu_seconds:
            return float("nan")
        med = statistics.median(self.cpu_seconds)
        return self.items / med if med > 0 else float("inf")

    @property
    def spread(self) -> float:
        """Relative spread of the repeats, ``(max - min) / median`` (0 for one repeat)."""
        if len(self.seconds) < 2:
            return 0.0
        return (max(self.seconds) - min(self.seconds)) / self.median_s


def time_repeats(
    fn: Callable[[], object],
    *,
    items: int,
    repeats: int = 5,
    warmup: int = 1,
    setup: Callable[[], object] | None = None,
) -> Timing:
    """Time ``fn()`` ``repeats`` times (after ``warmup`` untimed calls); return every duration.

    Args:
        fn: the workload; one call processes ``items`` items.
        items: items processed by one call (used for :attr:`Timing.rate`).
        repeats: timed calls (>= 1). The report uses their median.
        warmup: untimed calls before timing (JIT, lazy allocation, caches).
        setup: optional untimed callable run before every call (warm-up and timed), e.g. to
            build a fresh buffer. The garbage collector is run and then disabled around each
            timed call so that a collection of someone else's garbage is not billed to ``fn``.

    Returns:
        A :class:`Timing` with one wall-clock and one CPU duration per timed repeat.
    """
    if repeats < 1:
        raise ValueError(f"repeats: expected >= 1, got {repeats}")
    if items < 1:
        raise ValueError(f"items: expected >= 1, got {items}")
    durations: list[float] = []
    cpu_durations: list[float] = []
    for i in range(warmup + repeats):
        if setup is not None:
            setup()
        gc.collect()
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            dc = time.process_time() - c0
        finally:
            if gc_was_enabled:
                gc.enable()
        if i >= warmup:
            durations.append(dt)
            cpu_durations.append(dc)
    return Timing(seconds=tuple(durations), items=items, cpu_seconds=tuple(cpu_durations))


def library_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed distribution version of each name (``"not installed"`` when missing).

    ``names`` are distribution names as pip knows them (``stable-baselines3``, ``torch``).
    Python itself is always included under ``"python"``.
    """
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine_info() -> dict[str, str]:
    """Date (UTC), CPU model from ``/proc/cpuinfo``, ``nproc``, platform and torch threads."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        nproc = os.cpu_count() or 0
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "nproc": str(nproc),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }
    if "torch" in sys.modules:
        info["torch_threads"] = str(sys.modules["torch"].get_num_threads())
    return info


def limit_threads(n: int = 1) -> None:
    """Limit BLAS/OpenMP and torch intra-op threads to ``n`` (call before heavy imports)."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(n)
    try:
        torch = importlib.import_module("torch")
    except ImportError:  # pragma: no cover - torch is a core dependency
        return
    torch.set_num_threads(n)


def rss_bytes() -> int:
    """Anonymous resident memory of this process in bytes (``RssAnon``, Linux only).

    Only anonymous pages (heap, ``mmap``-ed arrays) are counted: file-backed pages of shared
    libraries come and go with the page cache under memory pressure from other processes and
    would make deltas meaningless (they can even turn negative). Falls back to the total
    resident size from ``/proc/self/statm`` on kernels without ``RssAnon``.
    """
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024  # reported in kB
    with open("/proc/self/statm", encoding="ascii") as fh:
        resident_pages = int(fh.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def trim_heap() -> None:
    """Return free heap pages to the OS (glibc ``malloc_trim(0)``) so RSS deltas are honest.

    Without it, memory freed by earlier temporaries stays resident and is silently reused by
    the next allocation (RSS under-counts), or temporaries freed after a fill stay resident
    (RSS over-counts). A no-op where glibc is not available.
    """
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
        pass


def format_rate(x: float) -> str:
    """Human-readable number with a k/M suffix: ``1_234_567 -> '1.23M'``."""
    if x != x:  # NaN
        return "n/a"
    ax = abs(x)
    if ax >= 1e9:
        return f"{x / 1e9:.2f}G"
    if ax >= 1e6:
        return f"{x / 1e6:.2f}M"
    if ax >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.1f}"


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; cells are ``str()``-ed, ``|`` escaped."""

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(cell(h) for h in headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row: expected {len(headers)} cells like headers, got {len(row)}")
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def write_markdown(
    path: str | Path,
    title: str,
    sections: Sequence[tuple[str, str]],
    *,
    versions: dict[str, str] | None = None,
    machine: dict[str, str] | None = None,
    command: str | None = None,
) -> Path:
    """Write a results file: title, machine table, versions table, then ``(heading, body)`` parts.

    Args:
        path: output ``.md`` file; parent folders are created.
        title: top-level heading.
        sections: ``(heading, markdown body)`` pairs, written in order.
        versions: ``{library: version}``, e.g. from :func:`library_versions`.
        machine: e.g. from :func:`machine_info` (default: measured now).
        command: the command line that produced the results.

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    machine = machine if machine is not None else machine_info()
    parts = [f"# {title}", ""]
    if command:
        parts += [f"Command: `{command}`", ""]
    parts += [markdown_table(["machine", ""], sorted(machine.items())), ""]
    if versions:
        parts += [markdown_table(["library", "version"], sorted(versions.items())), ""]
    for heading, body in sections:
        parts += [f"## {heading}", "", body.rstrip(), ""]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


# ---------------------------------------------------------------- learning benchmarks


def first_step_reaching(
    returns: Sequence[float], end_steps: Sequence[int], threshold: float, window: int = 20
) -> int | None:
    """First env step at which the mean of the last ``window`` episode returns is
    ``>= threshold`` (None if never); the peers' curves are read with the same rule as
    :meth:`rlstore.agents.run.TrainStats.first_step_reaching`."""
    for i in range(window - 1, len(returns)):
        if sum(returns[i - window + 1 : i + 1]) / window >= threshold:
            return int(end_steps[i])
    return None


def median_steps(reach: Sequence[int | None]) -> float | None:
    """Median of per-seed steps to the threshold; a seed that never reaches it ranks last, so
    the median exists while more than half of the seeds reach it."""
    ranked = sorted(float("inf") if x is None else float(x) for x in reach)
    if not ranked:
        return None
    mid = len(ranked) // 2
    median = ranked[mid] if len(ranked) % 2 else (ranked[mid - 1] + ranked[mid]) / 2
    return None if median == float("inf") else median


def fmt_steps(x: float | None) -> str:
    """``12.3k`` env steps, or ``not reached``."""
    return "not reached" if x is None else f"{x / 1000:.1f}k"


def has_sb3() -> bool:
    """Whether Stable-Baselines3 is importable (it lives in the benchmark virtualenv)."""
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        return False
    return True


def train_ppod_or_ppo(algo: str, cfg: Any) -> Any:
    """Train a PPO+D config (``algo == "ppo+d"``) or plain PPO with the same settings (its
    ``ppo_config()``, no demos); returns the run's ``TrainStats``."""
    from rlstore.agents.ppo import train_ppo
    from rlstore.agents.ppod import train_ppod

    if algo == "ppo+d":
        return train_ppod(cfg).stats
    c = cfg.ppo_config()
    return train_ppo(c.run, c.online, c.environment, None).stats
