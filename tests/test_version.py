"""The version is written once, in pyproject.toml; ``rlstore.__version__`` reads the metadata."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

import rlstore

ROOT = Path(__file__).resolve().parents[1]


def _pyproject_version() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    if sys.version_info >= (3, 11):
        import tomllib

        return str(tomllib.loads(text)["project"]["version"])
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)  # pragma: no cover
    assert m is not None
    return m.group(1)


def test_version_agrees_with_pyproject_and_metadata() -> None:
    assert rlstore.__version__ == importlib.metadata.version("rlstore") == _pyproject_version()


def test_no_version_literal_in_the_sources() -> None:
    """Until this fix ``__init__.py`` repeated the version as ``__version__ = "0.1.0"``."""
    literal = re.compile(r"""__version__\s*(:[^=]*)?=\s*["']""")
    hits = [p for p in (ROOT / "src").rglob("*.py") if literal.search(p.read_text())]
    assert hits == []


def test_version_falls_back_without_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert rlstore._package_version() == "0+unknown"
