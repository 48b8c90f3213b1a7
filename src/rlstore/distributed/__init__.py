"""Distributed replay on Ray (optional extra: ``pip install "rlstore[ray]"``).

* :func:`start_ray` / :func:`stop_ray`: a local Ray instance bound to loopback (or join a
  cluster), with the settings of :mod:`rlstore.distributed._ray`.
* :class:`ReplayShards`: ``S`` named actors, each serving any rlstore replay buffer unchanged
  (:class:`ReplayShard`); routed fragment adds, sampling across shards in proportion to their
  sizes or priority masses with importance weights correct across shards, ``sample_many``,
  prefetch, periodic atomic checkpoints, restart and re-resolution of dead shards.
* :class:`SampleToInsertRatio`: Reverb-style backpressure (plain Python).

Importing :mod:`rlstore` never imports Ray; importing this package without Ray raises an
ImportError naming the extra.
"""

from __future__ import annotations

from rlstore.distributed._ray import require_ray, start_ray, stop_ray

require_ray()

from rlstore.distributed.client import (  # noqa: E402
    ReplayShards,
    ShardBatch,
    ShardUnavailableError,
)
from rlstore.distributed.rate_limiter import ReplayTimeoutError, SampleToInsertRatio  # noqa: E402
from rlstore.distributed.shard import ReplayShard  # noqa: E402

__all__ = [
    "ReplayShard",
    "ReplayShards",
    "ReplayTimeoutError",
    "SampleToInsertRatio",
    "ShardBatch",
    "ShardUnavailableError",
    "start_ray",
    "stop_ray",
]
