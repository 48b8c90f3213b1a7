"""Fixtures shared by the rlstore.checkpoint tests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch


@pytest.fixture
def nested_state() -> dict[str, Any]:
    """A state dict with every kind of leaf: dtypes, layouts, 0-d, empty, tensors, JSON."""
    rng = np.random.default_rng(123)
    return {
        "storage": {
            "obs": rng.standard_normal((5, 2, 3)).astype(np.float32),
            "image": rng.integers(0, 256, (5, 2, 4, 4), dtype=np.uint8),
            "terminated": rng.random((5, 2)) < 0.3,
            "empty": np.zeros((0, 3), np.float64),
            "scalar": np.array(7, np.int64),
            "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
            "strided": np.arange(10, dtype=np.int16)[::3],
            "big_endian": np.arange(4, dtype=">i4"),
            "half": np.linspace(0, 1, 5, dtype=np.float16),
            "u64": np.array([2**64 - 1], np.uint64),
        },
        "hidden": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "cursor": 3,
        "size": np.int64(9),  # numpy scalar -> python int
        "ratio": 0.25,
        "name": "buf",
        "flags": (True, None),
        "rng": np.random.default_rng(5).bit_generator.state,  # 128-bit ints
        "nothing": {},
    }
