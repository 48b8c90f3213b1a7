"""``rlstore probe``: train PPO agents on the probe environments and print a pass/fail table.

Each probe isolates one part of the agent (see :mod:`rlstore.envs.probes`); the checks and their
tolerances are the library's learning acceptance criteria (after Andy Jones, "Debugging RL,
Without the Agonizing Pain", and DecisionTransformerInterpretability's probe tests):

========  =====================  ===================================================
probe     agents (default)       pass criterion, for every seed
========  =====================  ===================================================
Probe1    fc                     abs(V([0]) - 1) < 0.02
Probe2    fc                     abs(V([r]) - r) < 0.02 for r = -1, +1
Probe3    fc                     abs(V([0]) - gamma) < 0.02 and abs(V([1]) - 1) < 0.02
Probe4    fc                     pi(a=1) > 0.95
Probe5    fc                     pi(a=o | o) > 0.9 for o = 0, 1
Probe6    fc                     pi(a = t mod 2 | t) > 0.5 for every t = 0..9 (the greedy
                                 action is right in every state) and its median > 0.95
Probe7    lstm, transformer, fc  mean episode reward > 0.9 (memory agents); the FC agent
                                 must stay below 0.7 (negative control: memory is needed)
========  =====================  ===================================================

Values and probabilities are read by replaying the probe's scripted observation sequence
through the agent (so recurrent agents see the same history they see in the env); Probe7 is
scored by sampling 200 episodes from the trained policy.

Programmatic use::

    >>> result = run_probe(3, "fc", seed=0)            # doctest: +SKIP
    >>> [(c.name, round(c.measured, 3), c.passed) for c in result.checks]  # doctest: +SKIP
    [('V([0])', 0.99, True), ('V([1])', 1.0, True)]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlstore.agents.ppo import train_ppo
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    LSTMModelConfig,
    ModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TransformerModelConfig,
)
from rlstore.agents.sampling import sample_from_agents
from rlstore.errors import ConfigError

__all__ = [
    "AGENT_KINDS",
    "DEFAULT_AGENTS",
    "ProbeCheck",
    "ProbeResult",
    "probe_online_config",
    "probe_model_config",
    "trace_episode",
    "evaluate_probe",
    "run_probe",
    "format_table",
    "add_arguments",
    "run",
]

AGENT_KINDS: tuple[str, ...] = ("fc", "lstm", "transformer")
DEFAULT_AGENTS: dict[int, tuple[str, ...]] = {
    1: ("fc",),
    2: ("fc",),
    3: ("fc",),
    4: ("fc",),
    5: ("fc",),
    6: ("fc",),
    7: ("lstm", "transformer", "fc"),
}

# Hyper-parameters per probe (OnlineTrainConfig fields). Probes 1-5 are one- or two-step
# problems: a short run with a high, decaying learning rate and no entropy bonus (so that the
# tight policy checks are reachable). Probe 6 is ten two-armed bandits whose only input is the
# step counter: gamma = 0 keeps the (action-independent) future rewards out of the advantages,
# and a large entropy bonus (0.2: the regularised optimum is still pi = 1 / (1 + e^-5) = 0.993)
# keeps the policy stochastic while the network learns the parity of t. The learning rate must
# decay to 0: at a high final rate (2e-3 was tried) the policy never settles - per-state traces
# show states solved, knocked back to pi ~ 0.3-0.6 by a later update (normalised advantages make
# the rare wrong action of a nearly solved batch very large) and solved again, so the final
# min_t pi depended on where the run stopped (0.567-0.924 on seeds 0-2). Annealed to 0 (the
# CleanRL default), min_t pi measured 0.936-0.987 on seeds 0-5 at 40k steps and 0.943-0.988 on
# seeds 0-11 at 60k (2026-11-22). Late knock-backs remain on a few seeds: over seeds 0-25 at 40k,
# 4 ended with one state at 0.72-0.90 (the rest 0.92-0.99, every median >= 0.98), and neither 80k
# steps, 8 epochs, clip 0.1 nor 128 or 256 hidden units removed them (2026-11-24). Hence the
# criterion: the greedy action right in every state (min_t pi > 0.5, which no policy ignoring t
# reaches: half the states want each action) and the median state > 0.95 (a run that learned too
# little fails), not min_t pi > 0.9, which a correct PPO missed on about 1 seed in 7.
# Probe 7 needs credit assignment over 4 steps.
_SHORT: dict[str, Any] = dict(
    total_timesteps=2048,
    num_envs=4,
    num_steps=32,
    learning_rate=3e-3,
    num_minibatches=4,
    update_epochs=4,
    ent_coef=0.0,
)  # probes 1-5
_ONLINE: dict[int, dict[str, Any]] = {
    1: _SHORT,
    2: _SHORT,
    # gamma 0.9 instead of 0.99 so that V([0]) = gamma is told apart from a discount applied
    # twice (gamma^2 = 0.81) or not at all (1.0) by more than the 0.02 tolerance
    3: {**_SHORT, "gamma": 0.9},
    4: _SHORT,
    5: _SHORT,
    6: dict(
        total_timesteps=40_000,
        num_envs=16,
        num_steps=20,
        learning_rate=1e-2,
        end_learning_rate=0.0,
        gamma=0.0,
        gae_lambda=0.0,
        num_minibatches=2,
        update_epochs=16,
        ent_coef=0.2,
    ),
    7: {**_SHORT, "total_timesteps": 8192, "num_envs": 8, "ent_coef": 0.01},
}

# the scripted observation sequences (one list per episode) whose values / policies are checked
_EPISODES: dict[int, list[list[float]]] = {
    1: [[0.0]],
    2: [[-1.0], [1.0]],
    3: [[0.0, 1.0]],
    4: [[0.0]],
    5: [[0.0], [1.0]],
    6: [[float(t) for t in range(10)]],
}


@dataclass(frozen=True)
class ProbeCheck:
    """One measured quantity and its pass criterion."""

    name: str
    measured: float
    target: str
    passed: bool


@dataclass(frozen=True)
class ProbeResult:
    """The checks of one (probe, agent, seed) training run."""

    probe: int
    agent: str
    seed: int
    checks: tuple[ProbeCheck, ...]
    train_seconds: float
    env_steps: int

    @property
    def passed(self) -> bool:
        """True when every check passed."""
        return all(c.passed for c in self.checks)


def _check_probe(probe: int) -> int:
    if isinstance(probe, bool) or not isinstance(probe, int) or not 1 <= probe <= 7:
        raise ConfigError(f"probe: expected an int in 1..7, got {probe!r}")
    return probe


def _check_agent(agent: str) -> str:
    if agent not in AGENT_KINDS:
        raise ConfigError(f"agent: expected one of {AGENT_KINDS}, got {agent!r}")
    return agent


def probe_online_config(probe: int, **overrides: Any) -> OnlineTrainConfig:
    """The PPO hyper-parameters ``rlstore probe`` uses for ``probe`` (1..7), with overrides."""
    return OnlineTrainConfig(**{**_ONLINE[_check_probe(probe)], **overrides})


def probe_model_config(agent: str) -> ModelConfig:
    """Small model configs for the probes: None (FC), an LSTM or a 1-layer transformer."""
    _check_agent(agent)
    if agent == "lstm":
        return LSTMModelConfig(image_dim=32, memory_dim=32, recurrence=4)
    if agent == "transformer":
        return TransformerModelConfig(d_model=32, n_heads=2, d_mlp=64, n_layers=1, n_ctx=4)
    return None


def trace_episode(agent: Any, observations: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Feed one probe episode's observations ``[o_0, ..., o_{L-1}]`` through ``agent``.

    Returns:
        ``(probs, values)``: ``probs`` ``(L, num_actions)`` float64 action probabilities and
        ``values`` ``(L,)`` float64 state values at each step (recurrent memory carried along,
        episode time ``t`` = step index).
    """
    memory = agent.initial_memory(1)
    probs, values = [], []
    with torch.no_grad():
        for t, o in enumerate(observations):
            obs = torch.tensor([[float(o)]], dtype=torch.float32, device=agent.device)
            time_t = torch.tensor([t], dtype=torch.int64, device=agent.device)
            params, value, _, memory = agent._step(obs, memory, time_t)
            probs.append(torch.softmax(params, -1)[0].double().cpu().numpy())
            values.append(float(value[0]))
    return np.stack(probs), np.asarray(values)


def _abs_check(name: str, value: float, target: float, tol: float) -> ProbeCheck:
    return ProbeCheck(name, float(value), f"{target:g} ± {tol:g}", bool(abs(value - target) < tol))


def _gt_check(name: str, value: float, bound: float) -> ProbeCheck:
    return ProbeCheck(name, float(value), f"> {bound:g}", bool(value > bound))


def evaluate_probe(
    probe: int, agent_kind: str, agent: Any, gamma: float, *, seed: int = 0
) -> list[ProbeCheck]:
    """Measure a trained ``agent`` on ``probe`` against the criteria of the module table."""
    _check_probe(probe)
    if probe == 7:
        (tr,) = sample_from_agents(
            [agent], rollout_length=100, num_envs=8, seed=10_000 + seed,
            environment_config=EnvironmentConfig(env_id="rlstore/Probe7-v0"),
        )  # fmt: skip
        mean = float(tr.episode_returns().mean())
        if agent_kind == "fc":
            return [ProbeCheck("mean reward (no memory)", mean, "< 0.7", bool(mean < 0.7))]
        return [_gt_check("mean reward", mean, 0.9)]
    traces = [trace_episode(agent, ep) for ep in _EPISODES[probe]]
    if probe == 1:
        return [_abs_check("V([0])", traces[0][1][0], 1.0, 0.02)]
    if probe == 2:
        return [
            _abs_check(f"V([{r:+g}])", tr[1][0], r, 0.02)
            for r, tr in zip((-1, 1), traces, strict=True)
        ]
    if probe == 3:
        v = traces[0][1]
        return [_abs_check("V([0])", v[0], gamma, 0.02), _abs_check("V([1])", v[1], 1.0, 0.02)]
    if probe == 4:
        return [_gt_check("pi(1)", traces[0][0][0, 1], 0.95)]
    if probe == 5:
        return [_gt_check(f"pi({o}|{o})", tr[0][0, o], 0.9) for o, tr in enumerate(traces)]
    probs = traces[0][0]
    correct = probs[np.arange(10), np.arange(10) % 2]
    worst = int(np.argmin(correct))
    return [
        _gt_check(f"min_t pi(t mod 2|t) (t={worst})", correct[worst], 0.5),
        _gt_check("median_t pi(t mod 2|t)", float(np.median(correct)), 0.95),
    ]


def run_probe(
    probe: int, agent_kind: str, seed: int, *, online_config: OnlineTrainConfig | None = None
) -> ProbeResult:
    """Train ``agent_kind`` on ``probe`` with ``seed`` and evaluate it (see the module table)."""
    _check_probe(probe)
    _check_agent(agent_kind)
    oc = online_config or probe_online_config(probe)
    t0 = time.perf_counter()
    agent, stats = train_ppo(
        RunConfig(seed=seed, track=False, exp_name=f"probe{probe}"),
        oc,
        EnvironmentConfig(env_id=f"rlstore/Probe{probe}-v0"),
        probe_model_config(agent_kind),
    )
    seconds = time.perf_counter() - t0
    agent.eval()
    checks = evaluate_probe(probe, agent_kind, agent, oc.gamma, seed=seed)
    return ProbeResult(probe, agent_kind, seed, tuple(checks), seconds, stats.global_step)


def format_table(results: Sequence[ProbeResult]) -> str:
    """Fixed-width pass/fail table, one row per check."""
    head = ("probe", "agent", "seed", "check", "measured", "target", "steps", "time", "result")
    rows = [head]
    for r in results:
        for c in r.checks:
            rows.append(
                (
                    f"Probe{r.probe}", r.agent, str(r.seed), c.name, f"{c.measured:.4f}",
                    c.target, str(r.env_steps), f"{r.train_seconds:.1f}s",
                    "PASS" if c.passed else "FAIL",
                )
            )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _int_list(text: str) -> list[int]:
    try:
        items = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        items = []
    if not items:  # an empty list would run nothing and report success
        raise argparse.ArgumentTypeError(f"expected comma-separated ints, got {text!r}")
    return items


def _agent_list(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in AGENT_KINDS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected names from {AGENT_KINDS}, got {text!r}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rlstore probe``."""
    parser.add_argument(
        "--probes", type=_int_list, default=list(range(1, 8)),
        help="comma-separated probe numbers (default: 1,2,3,4,5,6,7)",
    )  # fmt: skip
    parser.add_argument(
        "--agents", type=_agent_list, default=None,
        help="comma-separated agents from fc,lstm,transformer (default: fc for probes 1-6; "
        "lstm, transformer and fc as a negative control for probe 7)",
    )  # fmt: skip
    parser.add_argument(
        "--seeds", type=_int_list, default=[0, 1, 2], help="comma-separated seeds (default 0,1,2)"
    )
    parser.add_argument(
        "--total-steps", type=int, default=None,
        help="override every probe's training budget (env steps)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Train and evaluate every (probe, agent, seed); print the table; 0 iff all checks pass."""
    torch.set_num_threads(1)
    results: list[ProbeResult] = []
    t0 = time.perf_counter()
    try:
        for probe in args.probes:
            _check_probe(probe)
            overrides = {} if args.total_steps is None else {"total_timesteps": args.total_steps}
            oc = probe_online_config(probe, **overrides)
            for agent in args.agents or DEFAULT_AGENTS[probe]:
                for seed in args.seeds:
                    res = run_probe(probe, agent, seed, online_config=oc)
                    results.append(res)
                    print(
                        f"Probe{probe} {agent} seed {seed}: "
                        f"{'PASS' if res.passed else 'FAIL'} ({res.train_seconds:.1f}s)",
                        file=sys.stderr,
                    )
    except ConfigError as err:
        print(f"rlstore probe: error: {err}", file=sys.stderr)
        return 2
    print(format_table(results))
    n_checks = sum(len(r.checks) for r in results)
    n_pass = sum(c.passed for r in results for c in r.checks)
    print(f"\n{n_pass}/{n_checks} checks passed in {time.perf_counter() - t0:.0f}s")
    return 0 if n_pass == n_checks else 1
