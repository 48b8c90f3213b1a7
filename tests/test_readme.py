"""Every ```python block of README.md runs as written (in a scratch directory).

Keeps the API tour true: a renamed argument or a changed return type breaks this test.
"""

from __future__ import annotations

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
