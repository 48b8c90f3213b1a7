"""Crash safety: write a checkpoint's two files so that a kill at any instant leaves one loadable.

A save writes both files to temporaries (the sidecar to the sibling
``.<name>.tmp-<pid>-<token>``; the state file into a private folder of that name, where
``safetensors.numpy.save_file`` puts its own ``.tmpXXXXXX`` file) and fsyncs them, keeps the
current state file reachable as ``<prefix>state.safetensors.prev`` (a hard link, no copy), then
``os.replace``-s the state file and the sidecar (the sidecar is the commit point), fsyncs the
directory and drops the ``.prev`` link. A reader (:func:`rlstore.checkpoint.load_verified`)
picks whichever of the two state files carries the ``save_id`` the sidecar names, so a process
killed at any instant of a save leaves a loadable checkpoint: the previous one until the
sidecar is replaced, the new one afterwards. Temporaries of a killed save (files, and folders
with the library's temporary inside) are removed by the next save. One writer at a time per
folder and prefix (concurrent saves to the same checkpoint are not supported).

The stages of a save, in order: both temporaries written and fsynced ("written"), the
committed state file linked as ``.prev`` ("linked"), the state file replaced
("state_replaced"), the sidecar replaced ("committed"). The crash tests interrupt a save at
each of them by wrapping ``_keep_committed_state_reachable`` and ``os.replace``.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rlstore.checkpoint._safetensors_io import _HEADER_KEY, _header, _write_safetensors
from rlstore.checkpoint._tree import SIDECAR_DIGEST_KEY, _sidecar_digest


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def write_text_atomic(path: str | Path, text: str | bytes) -> None:
    """Replace the file ``path`` by ``text`` (or bytes) so that a kill at any instant leaves either
    the old file or the new one (temporary beside it, fsynced, renamed, directory fsynced)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        if isinstance(text, bytes):
            tmp.write_bytes(text)
        else:
            tmp.write_text(text, encoding="utf-8")
        _fsync_file(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def _write_checkpoint_files(
    final_state: Path,
    final_meta: Path,
    arrays: Mapping[str, np.ndarray],
    record: Mapping[str, Any],
    header: str,
) -> Path:
    """Atomically replace ``final_state`` and ``final_meta`` (same folder, created if needed).

    Args:
        final_state: the ``<prefix>state.safetensors`` path.
        final_meta: the ``<prefix>metadata.json`` path (the commit point).
        arrays: flat ``'/'``-joined key -> array, written into the state file.
        record: the JSON-able sidecar content; ``state_file``, ``state_sha256``,
            ``state_nbytes`` and ``sidecar_sha256`` (over all the rest) are added to it.
        header: ``json.dumps(record)``, embedded in the state file's header.

    Returns:
        ``final_meta``.
    """
    directory = final_state.parent
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(directory.parent)  # make the new folder's entry durable too
    _remove_orphan_temporaries(directory, (final_state.name, final_meta.name))
    prev = final_state.with_name(final_state.name + ".prev")
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    # The state file is written inside a private folder: safetensors' save_file writes to a
    # `.tmpXXXXXX` sibling of its target first, which a killed save would otherwise leave in
    # `directory` under a name we cannot tell apart from other programs' files.
    tmp_dir = directory / f".{final_state.name}.tmp-{token}"
    tmp_state = tmp_dir / final_state.name
    tmp_meta = directory / f".{final_meta.name}.tmp-{token}"
    try:
        tmp_dir.mkdir()
        digest, nbytes = _write_safetensors(tmp_state, arrays, {_HEADER_KEY: header})
        sidecar = {
            **record,
            "state_file": final_state.name,
            "state_sha256": digest,
            "state_nbytes": nbytes,
        }
        sidecar[SIDECAR_DIGEST_KEY] = _sidecar_digest(sidecar)
        with open(tmp_meta, "w", encoding="utf-8") as f:
            json.dump(sidecar, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        _keep_committed_state_reachable(final_meta, final_state, prev)
        fsync_dir(directory)
        os.replace(tmp_state, final_state)
        os.replace(tmp_meta, final_meta)  # commit point
        fsync_dir(directory)
        prev.unlink(missing_ok=True)
        fsync_dir(directory)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_meta.unlink(missing_ok=True)
    return final_meta


def _remove_orphan_temporaries(directory: Path, names: tuple[str, ...]) -> None:
    """Delete temporaries left by saves whose process died (``.<name>.tmp-<pid>-<token>``,
    files or the state file's private folders)."""
    for name in names:
        for tmp in directory.glob(f".{name}.tmp-*"):
            pid_text = tmp.name.rsplit(".tmp-", 1)[1].split("-", 1)[0]
            if not pid_text.isdigit() or _pid_alive(int(pid_text)):
                continue
            if tmp.is_dir() and not tmp.is_symlink():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid() or os.name == "nt":  # on Windows os.kill(pid, 0) is not a probe
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _keep_committed_state_reachable(meta: Path, state: Path, prev: Path) -> None:
    """Make ``prev`` the state file the current sidecar names, before ``state`` is replaced."""
    if not state.exists():
        return
    if prev.exists():
        try:
            committed_id = json.loads(meta.read_text(encoding="utf-8")).get("save_id")
            if _header(prev).get("save_id") == committed_id:
                return  # an earlier save died after replacing `state`: prev is the committed one
        except (OSError, ValueError, AttributeError):
            pass
        prev.unlink()
    try:
        os.link(state, prev)
    except OSError:  # pragma: no cover - filesystems without hard links
        shutil.copy2(state, prev)
        _fsync_file(prev)
