"""The agents' modules import one another without cycles (issue 11: "no import cycles"), lazy
imports inside functions included; only imports under ``if TYPE_CHECKING`` are left out."""

from __future__ import annotations

import ast
from pathlib import Path

import rlstore

ROOT = Path(rlstore.__file__).parent


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = ("rlstore", *path.relative_to(ROOT).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("rlstore"):
                for alias in child.names:  # ``from pkg import submodule`` imports the submodule
                    full = f"{child.module}.{alias.name}"
                    found.add(full if full in known else str(child.module))
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("rlstore"))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found & set(known)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                out.append(sorted([v, *comp]))

    for v in graph:
        if v not in index:
            strong(v)
    return out


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_agents_have_no_import_cycles() -> None:
    mods = _modules()
    agents = {m: p for m, p in mods.items() if m.startswith("rlstore.agents")}
    new = ("envs", "obs", "networks", "rollout", "ppo", "ppo_config", "ppo_checkpoint", "sampling")
    assert {f"rlstore.agents.{m}" for m in new} <= set(agents)
    graph = {m: _imports(p, agents) for m, p in agents.items()}
    assert _cycles(graph) == []


def test_only_ppo_its_reusers_and_the_facade_import_the_ppo_trainer() -> None:
    # issue 11: the other trainers, the collectors and the CLIs import the shared pieces (envs,
    # obs, networks, rollout, run), not PPO's trainer; PPO+D reuses PPO's update, the probe CLI
    # and the seed-004 facade drive it
    mods = _modules()
    allowed = {"rlstore.agents.ppod", "rlstore.agents.probe_cli", "rlstore.compat.src_ppo"}

    def trainer(name: str) -> bool:  # the PPO module (or the package it replaced)
        return name == "rlstore.agents.ppo" or name.startswith("rlstore.agents.ppo.")

    users = {m for m, p in mods.items() if not trainer(m) and any(map(trainer, _imports(p, mods)))}
    assert users <= allowed, users - allowed
