"""Demo files: rlstore's single-demo files (:func:`save_demo`, :func:`load_demo`,
:func:`list_demos`: safetensors + checksummed sidecar) and PyTorchRL's ``.npz`` demonstration
files (``Observation``, ``Action``, ``Reward``, ``FrameSkip``): reading (never unpickled),
loading as a :class:`~rlstore.buffers.demos.Demo` and writing.

``Observation`` holds ``L`` rows (the observation each action was taken in) or ``L + 1`` (the
final observation appended, as :func:`save_npz_demo` writes it); ``Action`` and ``Reward`` hold
``L`` rows; ``FrameSkip`` is one integer, the frame skip of the environment the demo was
recorded in.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from rlstore._checks import check_count
from rlstore._trees import real_array
from rlstore.buffers.demo_store import Demo
from rlstore.checkpoint._atomic import write_text_atomic
from rlstore.checkpoint._state import load_state, metadata_file_path, save_state
from rlstore.errors import CheckpointError, ConfigError, RLStoreError

__all__ = [
    "NPZ_FIELDS", "read_npz", "load_npz_demo", "check_demo_fits", "demo_from_arrays",
    "save_npz_demo", "save_demo", "load_demo", "list_demos",
]  # fmt: skip

NPZ_FIELDS: tuple[str, ...] = ("Observation", "Action", "Reward")


def read_npz(path: Path, fields: tuple[str, ...] = NPZ_FIELDS) -> dict[str, np.ndarray]:
    """The arrays of a PyTorchRL ``.npz`` demo (never unpickled): ``fields`` of real numbers and
    an optional integral scalar ``FrameSkip``; a :class:`CheckpointError` naming the file
    otherwise."""
    try:
        with open(path, "rb") as fh:
            if not zipfile.is_zipfile(fh):
                raise ValueError("not an .npz (zip) archive")
            fh.seek(0)
            with np.load(fh, allow_pickle=False) as f:
                arrays = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"demo_path: cannot read {str(path)!r} ({exc})") from exc
    if missing := [k for k in fields if k not in arrays]:
        raise CheckpointError(f"{path.name}: missing keys {missing}")
    for k in [*fields, "FrameSkip"]:
        a, skip = arrays.get(k, np.zeros(())), k == "FrameSkip"
        if a.dtype.kind not in "biuf"[skip:] or (  # FrameSkip: no bool
            skip and not (a.shape == () and np.isfinite(a) and a % 1 == 0)
        ):
            raise CheckpointError(
                f"{path.name}: {k}: expected real numbers{' (one int)' * skip}, got {a.dtype} "
                f"{a.shape} {a if skip else ''}"
            )
    return arrays


def load_npz_demo(
    path: str | os.PathLike[str], frame_skip: int = 1, spaces: tuple[Any, Any] | None = None
) -> Demo:
    """A human :class:`Demo` from a ``.npz`` file; ``frame_skip`` is the environment's, and
    ``spaces`` its ``(observation_space, action_space)`` (see :func:`check_demo_fits`).

    Raises:
        CheckpointError: unreadable file, missing or non-numeric arrays, inconsistent lengths.
        ConfigError: the file's ``FrameSkip`` (1 when absent) differs from ``frame_skip``, or
            the demo does not fit ``spaces``.
    """
    frame_skip = check_count("frame_skip", frame_skip, error=ConfigError)
    path = Path(path)
    arrays = read_npz(path)
    skip = int(arrays.get("FrameSkip", 1))
    if skip != frame_skip:
        raise ConfigError(
            f"{path.name}: FrameSkip {skip} differs from the environment's frame_skip {frame_skip}"
        )
    demo = demo_from_arrays(path.name, *(arrays[k] for k in NPZ_FIELDS), human=True)
    if spaces is not None:
        check_demo_fits(path.name, demo, *spaces)
    return demo


def check_demo_fits(name: str, demo: Demo, observation_space: Any, action_space: Any) -> None:
    """Raise a :class:`ConfigError` naming the demo ``name`` unless its observations are shaped
    like ``observation_space``'s and every action lies in a ``Discrete`` / ``MultiDiscrete``
    ``action_space`` (other action spaces: not checked; an action out of range failed inside
    the PPO update)."""
    shape = getattr(observation_space, "shape", None)
    if shape is not None and demo.observations.shape[1:] != tuple(shape):
        raise ConfigError(
            f"{name}: Observation: expected rows shaped {tuple(shape)} like the env's "
            f"observations, got {demo.observations.shape[1:]}"
        )
    actions = demo.actions
    start = getattr(action_space, "start", None)
    n = getattr(action_space, "n", getattr(action_space, "nvec", None))
    if start is None or n is None:
        return
    low, high = np.asarray(start), np.asarray(start) + np.asarray(n) - 1
    bad = ((actions < low) | (actions > high)).reshape(len(actions), -1).any(axis=1)
    if bad.any():
        j = int(np.argmax(bad))
        raise ConfigError(
            f"{name}: Action: expected values in [{low}, {high}] (the env's {action_space}), "
            f"got {actions[j]} at step {j}"
        )


def demo_from_arrays(
    name: str, obs: np.ndarray, act: np.ndarray, rew: np.ndarray, *, human: bool = False
) -> Demo:
    """A :class:`Demo` of a demo file's arrays: ``obs`` with ``L`` rows or ``L + 1`` (the final
    observation, in which no action was taken, is dropped); a :class:`CheckpointError` naming
    the file ``name`` when they do not make a demo."""
    try:
        return _demo(obs, act, rew, human)
    except RLStoreError as exc:
        raise CheckpointError(f"{name}: {exc}") from exc


def _demo(obs: Any, act: Any, rew: Any, human: bool = False) -> Demo:
    """``Demo(obs, act, rew)`` with ``obs`` of ``L`` or ``L + 1`` rows (the last one dropped)."""
    rew, obs = np.asarray(rew).reshape(-1), real_array("observations", obs)
    if obs.ndim >= 1 and obs.shape[0] == rew.shape[0] + 1:
        obs = obs[:-1]
    return Demo(obs, act, rew, human=human)


def save_npz_demo(
    path: str | os.PathLike[str],
    observations: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    frame_skip: int = 1,
) -> Path:
    """Atomically write a ``.npz`` demo (``observations`` with ``L`` or ``L + 1`` rows, kept in
    their dtype; rewards float32 as :class:`Demo` holds them).

    Raises:
        SpecError: arrays that do not make a demo (nothing is written).
        ConfigError: ``frame_skip`` not an int >= 1.
    """
    path = Path(path)
    skip = check_count("frame_skip", frame_skip, error=ConfigError)
    demo = _demo(observations, actions, rewards)
    arrays = {
        "Observation": real_array("observations", observations),
        "Action": demo.actions,
        "Reward": demo.rewards,
        "FrameSkip": np.asarray(skip, np.int64),
    }
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    write_text_atomic(path, buf.getvalue())
    return path


def save_demo(demo: Demo, dirpath: str | os.PathLike[str], name: str) -> Path:
    """Write one demo as ``<dirpath>/<name>_state.safetensors`` + ``<name>_metadata.json``."""
    return save_state(dirpath, demo.state(), prefix=f"{name}_", class_name="Demo")


def load_demo(dirpath: str | os.PathLike[str], name: str) -> Demo:
    """Read a demo written by :func:`save_demo` (the store assigns a new ``demo_id``)."""
    return Demo.from_state(load_state(dirpath, prefix=f"{name}_"))


def list_demos(dirpath: str | os.PathLike[str]) -> list[str]:
    """Sorted names of the demos saved in ``dirpath`` (``[]`` if it does not exist)."""
    d = Path(dirpath)
    if not d.is_dir():
        return []
    suffix = "_metadata.json"
    names = [p.name[: -len(suffix)] for p in d.glob(f"*{suffix}")]
    return sorted(n for n in names if metadata_file_path(d, f"{n}_").is_file())
