"""Shared test configuration.

Torch is limited to one thread so that the suite runs predictably on 2 cores under xdist.

Every run is reproducible: each test starts with the global ``random``, numpy and torch RNGs
seeded from ``RLSTORE_TEST_SEED`` (default 0; so is the ``rng`` fixture), and Hypothesis draws
the same examples each run. To look for tests that pass by luck, change the seed
(``RLSTORE_TEST_SEED=3 python -m pytest -n 2``: Hypothesis then draws fresh examples too); to
look for counterexamples, ``HYPOTHESIS_PROFILE=explore`` (fresh examples, 500 per property).
"""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)
os.environ.setdefault("MPLBACKEND", "Agg")

SEED = int(os.environ.get("RLSTORE_TEST_SEED", "0"))
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("rlstore", max_examples=60, derandomize=SEED == 0, **_COMMON)
settings.register_profile("explore", max_examples=500, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "rlstore"))


@pytest.fixture(autouse=True)
def _seed_global_rngs() -> None:
    """The same global RNG state at the start of every test, whatever ran before it."""
    random.seed(SEED)
    np.random.seed(SEED)  # noqa: NPY002 (the legacy global RNG, for tests that still use it)
    torch.manual_seed(SEED)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)
