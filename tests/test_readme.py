"""Every ```python block of README.md runs as written (in a scratch directory).

Keeps the API tour true: a renamed argument or a changed return type breaks this test.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = compile(BLOCKS[index], f"README.md block {index}", "exec")
    exec(code, {"__name__": f"readme_block_{index}"})


def _shell_lines() -> set[str]:
    """The ``rlstore ...`` commands of the README's shell blocks (fences without a language or
    ``bash``), comments dropped; a ``pip ... && rlstore train`` line gives its last command."""
    lines, lang = set(), None
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            lang = line[3:].strip() if lang is None else None
        elif lang in ("", "bash"):
            command = line.split("#")[0].split("&&")[-1].strip()
            if command.startswith("rlstore "):
                lines.add(command)
    return lines


COMMAND_LINES = sorted(_shell_lines())


def test_readme_has_command_lines() -> None:
    assert sum(line.startswith("rlstore train") for line in COMMAND_LINES) >= 10


@pytest.mark.parametrize("line", COMMAND_LINES)
def test_readme_command_line_parses_and_builds_its_config(line: str) -> None:
    """Every ``rlstore ...`` line of the README's shell blocks names real options; a ``train``
    line (but ``--resume``, which needs a run) builds its config: flags, ``--set`` keys and
    values, the packaged config it picks. The python blocks above do not cover these."""
    import argparse
    import shlex

    from rlstore.agents import train_cli
    from rlstore.cli import COMMANDS

    command, *argv = shlex.split(line)[1:]
    parser = argparse.ArgumentParser(prog=f"rlstore {command}")
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    args = parser.parse_args(argv)
    if command == "train" and args.resume is None:
        train_cli.build_config(args)
