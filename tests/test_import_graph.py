"""The import graph of rlstore's modules: no cycle (guide: "no import cycles"; issues 9 and 11),
and only PPO's reusers import the PPO trainer (issue 11). Imports inside
functions included: a lazy import hides a cycle from Python, not from the design. Only imports
under ``if TYPE_CHECKING`` are left out (they never run). A package counts as its
``__init__.py``; importing ``pkg.mod`` is an edge to ``pkg.mod`` only (every module imports the
``rlstore`` package's ``__init__`` on the way, which would make everything one cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

import rlstore

ROOT = Path(rlstore.__file__).parent


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``root``."""
    mods = {}
    for path in root.rglob("*.py"):
        parts = ("rlstore", *path.relative_to(root).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def imported(source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports anywhere (functions included), not
    counting ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                for alias in child.names:  # ``from pkg import submodule`` imports the submodule
                    full = f"{child.module}.{alias.name}"
                    found.add(full if full in known else child.module)
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            visit(child)

    visit(ast.parse(source))
    return found & known


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node, each sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_finder_sees_lazy_imports_and_skips_type_checking_blocks() -> None:
    known = {"rlstore.a", "rlstore.b", "rlstore.pkg", "rlstore.pkg.mod"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rlstore.b import X\n"
        "def f():\n    from rlstore.a import Y\n    from rlstore.pkg import mod\n"
    )
    assert imported(source, known) == {"rlstore.a", "rlstore.pkg.mod"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_rlstore_has_no_import_cycles() -> None:
    mods = modules()
    assert "rlstore.checkpoint" in mods and "rlstore.buffers.demos" in mods
    graph = {m: imported(p.read_text(encoding="utf-8"), set(mods)) for m, p in mods.items()}
    assert cycles(graph) == []


def test_the_agents_modules_exist() -> None:
    new = ("envs", "obs", "networks", "rollout", "ppo", "ppo_config", "ppo_checkpoint", "sampling")
    assert {f"rlstore.agents.{m}" for m in new} <= set(modules())


def test_only_ppo_its_reusers_and_the_facade_import_the_ppo_trainer() -> None:
    # issue 11: the other trainers, the collectors and the CLIs import the shared pieces (envs,
    # obs, networks, rollout, run), not PPO's trainer; PPO+D reuses PPO's update, the probe CLI
    # and the seed-004 facade drive it
    mods = modules()
    allowed = {"rlstore.agents.ppod", "rlstore.agents.probe_cli", "rlstore.compat.src_ppo"}
    users = {
        m
        for m, p in mods.items()
        if m != "rlstore.agents.ppo"
        and "rlstore.agents.ppo" in imported(p.read_text(encoding="utf-8"), set(mods))
    }
    assert users <= allowed, users - allowed
