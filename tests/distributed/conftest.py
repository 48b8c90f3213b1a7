"""One Ray instance for all distributed tests (``reference/ray.md`` section 8).

Ray tests start and stop Ray themselves: loopback only, token auth and usage stats off, a short
temp dir, a small object store. Every Ray test module sets
``pytestmark = pytest.mark.xdist_group("ray")``, so that ``--dist loadgroup`` keeps them all in
one xdist worker (one cluster, not one per worker).
"""

from __future__ import annotations

import os

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
