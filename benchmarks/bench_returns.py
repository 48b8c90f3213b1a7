"""GAE and V-trace: rlstore against Stable-Baselines3, TorchRL, Tianshou and CleanRL-style loops.

One run, the same data for everyone: each implementation first has to agree numerically with
rlstore's float64 result (after converting the data to its own layout), then it is timed.

* Data: float32, time-major ``(T, N)`` rollouts with terminations (2%) and truncations (1%);
  ``next_values[t] = values[t+1]`` inside episodes, ``V(final_obs)`` on truncation.
* Layouts (conversion done once, outside the timed region):
  - rlstore: ``(T, N)`` transition-aligned flags + ``next_values``; timed with numpy inputs and
    with CPU torch tensors (conversion to and from torch included).
  - SB3 ``RolloutBuffer.compute_returns_and_advantage``: episode-start flags; truncation folded
    into the reward as SB3's ``OnPolicyAlgorithm`` does (``r += gamma * V(final_obs)``).
  - CleanRL-style torch loop (``ppo.py``): episode-start ``dones`` + ``next_done``, same folding.
  - TorchRL ``generalized_advantage_estimate`` / ``vec_generalized_advantage_estimate`` /
    ``vtrace_advantage_estimate``: batch-first ``(N, T, 1)``, ``done`` and ``terminated``.
  - Tianshou ``_gae`` (the numba kernel behind ``compute_episodic_return``): env-major flat
    arrays, ``end_flag`` set at each env's last step, ``v_s_`` masked by ``~terminated``.
  - torchbeast-style V-trace torch loop (IMPALA reference style) with separate bootstrap and
    trace masks.
* Timing: per implementation and shape, calls are batched so one repeat lasts >= 20 ms; repeats
  of all implementations are interleaved (robust to load changes); the median per-call time is
  reported. Everything runs single-threaded (torch with one thread, numba without parallel),
  so the default clock is the process CPU time (``time.process_time``), which is robust to
  other processes sharing the machine; ``--timer wall`` uses ``time.perf_counter``.

Run with the peers' virtualenv::

    /work/benchvenv/bin/python benchmarks/bench_returns.py [--repeats 7] [--quick]

Peers that cannot be imported are skipped with a note. Writes ``benchmarks/results/returns.md``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlstore.returns import gae, vtrace

GAMMA, LAM = 0.99, 0.95
SHAPES = [(2048, 1), (128, 64), (256, 1024)]
NOTES: list[str] = []


def make_data(T: int, N: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A consistent float32 rollout (see module doc); next_values is 0 after termination."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(T, N)).astype(np.float32)
    te = rng.random((T, N)) < 0.02
    tr = (rng.random((T, N)) < 0.01) & ~te
    nv = np.empty_like(v)
    nv[:-1] = v[1:]
    nv[-1] = rng.normal(size=N)
    nv[tr] = rng.normal(size=int(tr.sum()))
    nv[te] = 0.0
    bl = rng.normal(size=(T, N)).astype(np.float32) - 1.0
    return {
        "r": rng.normal(size=(T, N)).astype(np.float32), "v": v, "nv": nv, "te": te, "tr": tr,
        "bl": bl, "tl": (bl + 0.3 * rng.normal(size=(T, N))).astype(np.float32),
    }  # fmt: skip


def folded(d: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SB3/CleanRL layout B: rewards with gamma*V(final) folded in, episode starts, last done."""
    r = d["r"] + GAMMA * np.where(d["tr"], d["nv"], 0.0).astype(np.float32)
    done = d["te"] | d["tr"]
    starts = np.zeros_like(d["r"])
    starts[1:] = done[:-1]
    return r.astype(np.float32), starts, done[-1]


# --------------------------------------------------------------------------- implementations
# Each builder returns (fn, to_time_major) or raises ImportError: fn() runs the timed work,
# to_time_major(fn()) gives (advantages, returns) or (vs, pg_advantages) as (T, N) float64.


def rlstore_gae(d: dict, torch_io: bool) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    args = [d[k] for k in ("r", "v", "nv", "te", "tr")]
    if torch_io:
        args = [torch.from_numpy(a) for a in args]

    def fn() -> Any:
        return gae(*args, gamma=GAMMA, lam=LAM)

    return fn, lambda out: tuple(np.asarray(o, dtype=np.float64) for o in out)


def sb3_gae(d: dict) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer

    T, N = d["r"].shape
    box = spaces.Box(-1.0, 1.0, (1,), np.float32)
    buf = RolloutBuffer(T, box, box, device="cpu", gae_lambda=LAM, gamma=GAMMA, n_envs=N)
    r, starts, last_done = folded(d)
    buf.rewards[:] = r
    buf.values[:] = d["v"]
    buf.episode_starts[:] = starts
    last_values = torch.from_numpy(d["nv"][-1].copy())

    def fn() -> Any:
        buf.compute_returns_and_advantage(last_values=last_values, dones=last_done)
        return buf.advantages, buf.returns

    return fn, lambda out: tuple(np.asarray(o, dtype=np.float64) for o in out)


def cleanrl_gae(d: dict) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    r_np, starts_np, last_done = folded(d)
    rewards, dones = torch.from_numpy(r_np), torch.from_numpy(starts_np)
    values = torch.from_numpy(d["v"])
    next_value = torch.from_numpy(d["nv"][-1].copy())
    next_done = torch.from_numpy(last_done.astype(np.float32))
    T = rewards.shape[0]

    def fn() -> Any:  # cleanrl/ppo.py, "bootstrap value if not done"
        with torch.no_grad():
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(T)):
                if t == T - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + GAMMA * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + GAMMA * LAM * nextnonterminal * lastgaelam
            return advantages, advantages + values

    return fn, lambda out: tuple(o.double().numpy() for o in out)


def _batch_first(d: dict, *keys: str) -> list[torch.Tensor]:
    return [torch.from_numpy(np.ascontiguousarray(d[k].T[..., None])) for k in keys]


def torchrl_gae(d: dict, vectorized: bool) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    from torchrl.objectives.value import functional as F

    fun = F.vec_generalized_advantage_estimate if vectorized else F.generalized_advantage_estimate
    v, nv, r = _batch_first(d, "v", "nv", "r")
    (term,) = _batch_first(d, "te")
    done = term | _batch_first(d, "tr")[0]

    def fn() -> Any:
        with torch.no_grad():
            return fun(GAMMA, LAM, v, nv, r, done, term)

    return fn, lambda out: tuple(o[..., 0].T.double().numpy() for o in out)


def tianshou_gae(d: dict) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    try:  # tianshou >= 2.0
        from tianshou.algorithm.algorithm_base import _gae
    except ImportError:  # tianshou 1.x
        from tianshou.policy.base import _gae_return as _gae

    T, N = d["r"].shape
    env_major = {k: np.ascontiguousarray(d[k].T).ravel() for k in ("r", "v", "nv", "te", "tr")}
    end_flag = (env_major["te"] | env_major["tr"]).reshape(N, T)
    end_flag[:, -1] = True  # buffer.unfinished_index(): every env's last step
    end_flag = end_flag.ravel()
    value_mask = ~env_major["te"]  # Algorithm.value_mask

    def fn() -> Any:  # compute_episodic_return without the Batch/buffer plumbing
        v_s_ = env_major["nv"] * value_mask
        adv = _gae(env_major["v"], v_s_, env_major["r"], end_flag, GAMMA, LAM)
        return adv, adv + env_major["v"]

    return fn, lambda out: tuple(o.reshape(N, T).T.astype(np.float64) for o in out)


def rlstore_vtrace(d: dict, torch_io: bool) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    args = [d[k] for k in ("bl", "tl", "r", "v", "nv", "te", "tr")]
    if torch_io:
        args = [torch.from_numpy(a) for a in args]

    def fn() -> Any:
        return vtrace(*args, gamma=GAMMA)

    return fn, lambda out: tuple(np.asarray(o, dtype=np.float64) for o in out)


def torchrl_vtrace(d: dict) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    from torchrl.objectives.value.functional import vtrace_advantage_estimate

    bl, tl, v, nv, r = _batch_first(d, "bl", "tl", "v", "nv", "r")
    (term,) = _batch_first(d, "te")
    done = term | _batch_first(d, "tr")[0]

    def fn() -> Any:  # log_pi / log_mu: the ratio is exp(log_pi - log_mu) = pi/mu
        with torch.no_grad():
            return vtrace_advantage_estimate(GAMMA, tl, bl, v, nv, r, done, term)

    # TorchRL returns (advantages, vs)
    return fn, lambda out: (out[1][..., 0].T.double().numpy(), out[0][..., 0].T.double().numpy())


def torch_loop_vtrace(d: dict) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
    bl, tl, r, v, nv = (torch.from_numpy(d[k]) for k in ("bl", "tl", "r", "v", "nv"))
    not_term = torch.from_numpy((~d["te"]).astype(np.float32))
    not_done = torch.from_numpy((~(d["te"] | d["tr"])).astype(np.float32))
    T = r.shape[0]

    def fn() -> Any:  # torchbeast vtrace.from_importance_weights, with a separate bootstrap mask
        with torch.no_grad():
            rhos = torch.exp(tl - bl)
            clipped = torch.clamp(rhos, max=1.0)
            cs = torch.clamp(rhos, max=1.0)
            deltas = clipped * (r + GAMMA * not_term * nv - v)
            acc = torch.zeros_like(v[0])
            result = []
            for t in range(T - 1, -1, -1):
                acc = deltas[t] + GAMMA * not_done[t] * cs[t] * acc
                result.append(acc)
            vs_minus_v = torch.stack(result[::-1])
            vs = vs_minus_v + v
            vs_next = nv + not_done * torch.cat([vs_minus_v[1:], torch.zeros_like(v[:1])])
            pg = clipped * (r + GAMMA * not_term * vs_next - v)
            return vs, pg

    return fn, lambda out: tuple(o.double().numpy() for o in out)


GAE_IMPLS: dict[str, Callable[[dict], Any]] = {
    "rlstore (numpy)": lambda d: rlstore_gae(d, False),
    "rlstore (torch CPU)": lambda d: rlstore_gae(d, True),
    "Tianshou _gae (numba)": tianshou_gae,
    "SB3 RolloutBuffer": sb3_gae,
    "TorchRL GAE": lambda d: torchrl_gae(d, False),
    "TorchRL vec GAE": lambda d: torchrl_gae(d, True),
    "CleanRL-style loop": cleanrl_gae,
}
VTRACE_IMPLS: dict[str, Callable[[dict], Any]] = {
    "rlstore (numpy)": lambda d: rlstore_vtrace(d, False),
    "rlstore (torch CPU)": lambda d: rlstore_vtrace(d, True),
    "TorchRL vtrace": torchrl_vtrace,
    "torchbeast-style loop": torch_loop_vtrace,
}


# --------------------------------------------------------------------------- harness


def reference(kind: str, d: dict) -> tuple[np.ndarray, np.ndarray]:
    d64 = {k: (a.astype(np.float64) if a.dtype == np.float32 else a) for k, a in d.items()}
    if kind == "GAE":
        return gae(*(d64[k] for k in ("r", "v", "nv", "te", "tr")), gamma=GAMMA, lam=LAM)
    return vtrace(*(d64[k] for k in ("bl", "tl", "r", "v", "nv", "te", "tr")), gamma=GAMMA)


CLOCK: Callable[[], float] = time.process_time


def calibrate(fn: Callable[[], Any], min_s: float) -> int:
    n = 1
    while True:
        t0 = CLOCK()
        for _ in range(n):
            fn()
        if CLOCK() - t0 >= min_s or n >= 1 << 16:
            return n
        n *= 4


def run_kind(kind: str, impls: dict, shapes: list, repeats: int, min_s: float) -> list[dict]:
    rows = []
    for T, N in shapes:
        d = make_data(T, N)
        ref = reference(kind, d)
        fns: dict[str, tuple[Callable[[], Any], int]] = {}
        for name, build in impls.items():
            try:
                fn, conv = build(d)
            except ImportError as e:
                note = f"{kind}: {name} skipped (not importable: {e})"
                if note not in NOTES:
                    NOTES.append(note)
                continue
            got = conv(fn())
            err = max(float(np.max(np.abs(g - x))) for g, x in zip(got, ref, strict=True))
            scale = max(1.0, float(np.max(np.abs(ref[1]))))
            if not err <= 2e-4 * scale:
                NOTES.append(f"{kind} {T}x{N}: {name} DISAGREES (max abs diff {err:.2e}); untimed")
                continue
            fns[name] = (fn, calibrate(fn, min_s))
            rows.append({"kind": kind, "shape": (T, N), "impl": name, "maxdiff": err, "t": []})
        for _ in range(repeats):  # interleave repeats across implementations
            for row in rows:
                if row["shape"] != (T, N) or row["kind"] != kind:
                    continue
                fn, n = fns[row["impl"]]
                t0 = CLOCK()
                for _ in range(n):
                    fn()
                row["t"].append((CLOCK() - t0) / n)
    for row in rows:
        row["ms"] = statistics.median(row["t"]) * 1e3
    return rows


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for mod in ("rlstore", "numpy", "numba", "torch", "stable_baselines3", "torchrl", "tianshou"):
        try:
            out[mod] = importlib.import_module(mod).__version__
        except Exception:  # noqa: BLE001 - any import failure means "not available"
            out[mod] = "not installed"
    return out


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| estimator | shape (T, N) | implementation | median ms | ratio vs rlstore "
        "| max abs diff |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in rows:
        base = next(
            r["ms"] for r in rows
            if r["kind"] == row["kind"] and r["shape"] == row["shape"]
            and r["impl"] == "rlstore (numpy)"
        )  # fmt: skip
        lines.append(
            f"| {row['kind']} | {row['shape'][0]} x {row['shape'][1]} | {row['impl']} | "
            f"{row['ms']:.4f} | {row['ms'] / base:.1f}x | {row['maxdiff']:.1e} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--min-seconds", type=float, default=0.02, help="per repeat and impl")
    p.add_argument("--timer", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--quick", action="store_true", help="small shapes only, 3 repeats")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "returns.md"))
    args = p.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.timer == "cpu" else time.perf_counter
    torch.set_num_threads(1)
    shapes = [(2048, 1), (128, 64)] if args.quick else SHAPES
    repeats = 3 if args.quick else args.repeats
    rows = run_kind("GAE", GAE_IMPLS, shapes, repeats, args.min_seconds)
    rows += run_kind("V-trace", VTRACE_IMPLS, shapes, repeats, args.min_seconds)
    vers = versions()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    header = [
        "# Return estimators: rlstore vs peers",
        "",
        f"Median of {repeats} interleaved repeats per cell ({args.timer} time per call), "
        "float32 data, single-threaded (torch 1 thread); "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {load:.1f} at the end of the run.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + ".",
        "",
    ]
    lines = header + table(rows) + [""] + [f"- {n}" for n in NOTES]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
