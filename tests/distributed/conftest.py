"""One Ray instance for all distributed tests (``reference/ray.md`` section 8).

Ray tests start and stop Ray themselves: loopback only, token auth and usage stats off, a short
temp dir, a small object store. Every Ray test module sets
``pytestmark = pytest.mark.xdist_group("ray")``, so that ``--dist loadgroup`` keeps them all in
one xdist worker (one cluster, not one per worker).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.pop("RAY_ADDRESS", None)


@pytest.fixture(scope="session")
def ray_session():
    pytest.importorskip("ray")
    from rlstore.distributed import start_ray, stop_ray

    start_ray(num_cpus=2, object_store_memory=256 * 1024**2)
    import ray

    yield ray
    stop_ray()


def _fragment(t: int, n: int, start: int) -> dict[str, np.ndarray]:
    """``t`` steps of ``n`` envs; ``obs[..., 0]`` a unique counter from ``start``,
    ``next_obs = obs + 0.5``, every step truncated (its successor kept aside, exactly)."""
    obs = np.arange(start, start + t * n, dtype=np.float32).reshape(t, n, 1) * np.ones(3, "f4")
    return dict(
        obs=obs,
        action=np.arange(t * n, dtype=np.int64).reshape(t, n),
        reward=obs[..., 0] / 2,
        next_obs=obs + 0.5,
        terminated=np.zeros((t, n), bool),
        truncated=np.ones((t, n), bool),
    )


@pytest.fixture(scope="session")
def fragment():
    """``fragment(t, n, start)``: the kwargs of ``extend`` for ``t`` steps of ``n`` envs."""
    return _fragment
