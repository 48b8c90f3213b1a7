"""Shared test configuration.

Torch is limited to one thread so that the suite runs predictably on 2 cores under xdist.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(1)
os.environ.setdefault("MPLBACKEND", "Agg")

settings.register_profile(
    "rlstore", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("rlstore")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
