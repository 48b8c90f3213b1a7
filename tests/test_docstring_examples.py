"""Every ``>>>`` example in the library's docstrings runs as shown (the README's are in
test_readme.py). The Ray modules are left to tests/distributed, which start and stop Ray."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import numpy as np
import pytest

import rlstore

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(rlstore.__path__, "rlstore.")
    if not m.name.startswith("rlstore.distributed")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"np": np}, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, name


def test_the_examples_are_found() -> None:
    found = sum(
        len(t.examples)
        for name in MODULES
        for t in doctest.DocTestFinder().find(importlib.import_module(name))
    )
    assert found > 50, found
