"""Starting and stopping Ray with the settings rlstore needs.

A local instance is bound to 127.0.0.1 only, with usage stats off, no dashboard, token auth
disabled (Ray 2.60 writes ``~/.ray/auth_token`` otherwise and crashes with an unwritable home)
and a short temp dir under ``/tmp`` (Unix socket paths are limited to 107 bytes). Loopback
binding uses ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which Ray reads when it is imported; when
Ray was imported before, :func:`start_ray` sets the constant it read as well (Ray internals:
re-check with ``ss -ltnp`` after upgrading Ray).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

__all__ = ["require_ray", "start_ray", "stop_ray", "NAMESPACE"]

NAMESPACE = "rlstore"
"""Ray namespace of the named shard actors (clients re-resolve them by name)."""

_LOCAL_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}
_owned_temp_dir: str | None = None


def require_ray() -> Any:
    """The ``ray`` module, or an ImportError naming the extra to install."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is installed in the dev extra
        raise ImportError('rlstore.distributed needs Ray: pip install "rlstore[ray]"') from exc
    return ray


def start_ray(
    address: str | None = None,
    *,
    num_cpus: int | None = None,
    temp_dir: str | None = None,
    object_store_memory: int | None = None,
) -> None:
    """Start a local Ray instance bound to loopback, or join the cluster at ``address``.

    Idempotent: nothing happens when Ray is already initialized.

    Args:
        address: ``None`` for a new local instance (127.0.0.1 only; environment variables the
            user set win), else the address of a running cluster (``ray.init(address=...)``).
        num_cpus: CPUs the local instance advertises (default: all).
        temp_dir: Ray's session folder (default: a fresh ``/tmp/ray...``, removed by
            :func:`stop_ray`); keep it short (107-byte socket path limit).
        object_store_memory: bytes of the local object store (>= 80 MiB; default: Ray's 30 %
            of RAM, which must fit in ``/dev/shm``).
    """
    global _owned_temp_dir
    ray = require_ray()
    if ray.is_initialized():
        return
    if address is not None:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        return
    for key, value in _LOCAL_ENV.items():
        os.environ.setdefault(key, value)
    if os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False  # read at import: set it if ray came first
    if temp_dir is None:
        temp_dir = _owned_temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        ray.init(
            address="local",
            num_cpus=num_cpus,
            object_store_memory=object_store_memory,
            include_dashboard=False,
            log_to_driver=False,
            namespace=NAMESPACE,
            _temp_dir=temp_dir,
        )
    except BaseException:
        stop_ray()
        raise


def stop_ray() -> None:
    """Shut Ray down (a no-op when it is not running) and remove the temp dir
    :func:`start_ray` created."""
    global _owned_temp_dir
    ray = require_ray()
    if ray.is_initialized():
        ray.shutdown()
    if _owned_temp_dir is not None:
        shutil.rmtree(_owned_temp_dir, ignore_errors=True)
        _owned_temp_dir = None
