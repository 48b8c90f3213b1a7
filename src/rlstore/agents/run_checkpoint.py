"""The algorithm-agnostic pieces of every rlstore trainer's checkpoints (PPO, DQN, SAC):

* the global RNG states: :func:`global_rng_state`, :func:`check_global_rng_state`,
  :func:`set_global_rng_state`;
* optimizer and module state: :func:`optimizer_state`, :func:`check_optimizer_state`,
  :func:`check_module_state`, :func:`check_updates_log`, :func:`check_like` (a state
  dict's structure against a reference one), and :data:`RAW_OBS` (the raw-observation
  agent of :func:`rlstore.agents.envs.restore_envs`);
* the checkpoint folders of a run: :func:`checkpoint_path`, :func:`list_checkpoints`,
  :func:`latest_checkpoint`, :func:`checkpoint_schedule`;
* :func:`check_resumed_config`: what a resumed run may change in its config (a larger budget).

Every check raises :class:`~rlstore.errors.CheckpointError` naming the entry, what was expected
and what arrived, before anything changes. Nothing here imports an algorithm module."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from rlstore._checks import check_keys
from rlstore.checkpoint import metadata_file_path
from rlstore.errors import CheckpointError

__all__ = [
    "global_rng_state",
    "check_global_rng_state",
    "set_global_rng_state",
    "optimizer_state",
    "check_optimizer_state",
    "check_module_state",
    "check_updates_log",
    "check_like",
    "RAW_OBS",
    "checkpoint_path",
    "list_checkpoints",
    "latest_checkpoint",
    "checkpoint_schedule",
    "check_resumed_config",
]


# ----------------------------------------------------------------- global RNGs


def global_rng_state() -> dict[str, Any]:
    """The states of torch's CPU generator (a uint8 tensor), NumPy's legacy global RNG and
    Python's ``random`` (JSON-able), as stored by :func:`rlstore.checkpoint.save_state`."""
    npst = np.random.get_state(legacy=False)  # noqa: NPY002 - saving the legacy global RNG
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": npst["bit_generator"],
            "key": npst["state"]["key"].astype(np.uint32),
            "pos": int(npst["state"]["pos"]),
            "has_gauss": int(npst["has_gauss"]),
            "gauss": float(npst["gauss"]),
        },
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
    }


def check_global_rng_state(rng: Any, where: str = "resume.rng") -> None:
    """Raise :class:`CheckpointError` (naming ``where``) unless ``rng`` is a well-formed
    :func:`global_rng_state`."""
    ref = global_rng_state()
    check_keys(where, rng, ref)
    t = rng["torch"]
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.shape != ref["torch"].shape:
        raise CheckpointError(f"{where}.torch: expected a uint8 tensor of {ref['torch'].numel()}")
    n = rng["numpy"]
    ok = (
        isinstance(n, dict) and set(n) == set(ref["numpy"]) and n["bit_generator"] == "MT19937"
        and isinstance(n["key"], np.ndarray) and n["key"].dtype == np.uint32
        and n["key"].shape == (624,) and type(n["pos"]) is int and 0 <= n["pos"] <= 624
        and n["has_gauss"] in (0, 1) and type(n["has_gauss"]) is int
        and type(n["gauss"]) is float and math.isfinite(n["gauss"])
    )  # fmt: skip
    if not ok:
        raise CheckpointError(f"{where}.numpy: expected an MT19937 state (key, pos, gauss)")
    p = rng["python"]
    ok = (
        isinstance(p, dict) and set(p) == {"version", "internal", "gauss"} and p["version"] == 3
        and isinstance(p["internal"], list) and len(p["internal"]) == 625
        and all(type(x) is int and 0 <= x < 2**32 for x in p["internal"])
        and p["internal"][-1] <= 624
        and (p["gauss"] is None or (type(p["gauss"]) is float and math.isfinite(p["gauss"])))
    )  # fmt: skip
    if not ok:
        raise CheckpointError(f"{where}.python: expected a version-3 Mersenne Twister state")


def set_global_rng_state(rng: dict[str, Any]) -> None:
    """Restore a :func:`global_rng_state` (checked first with :func:`check_global_rng_state`)."""
    torch.set_rng_state(rng["torch"])
    n = rng["numpy"]
    np.random.set_state(  # noqa: NPY002 - restoring the legacy global RNG
        {
            "bit_generator": "MT19937",
            "state": {"key": n["key"], "pos": n["pos"]},
            "has_gauss": n["has_gauss"],
            "gauss": n["gauss"],
        }
    )
    p = rng["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))


# ----------------------------------------------------------------- optimizer and module state


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` as a tree :func:`rlstore.checkpoint.save_state` stores
    (per-parameter states keyed by ``str(index)``)."""
    sd = optimizer.state_dict()
    return {
        "state": {str(k): dict(v) for k, v in sd["state"].items()},
        "param_groups": sd["param_groups"],
    }


_KERNEL_CHOICES = ("fused", "foreach")
"""Optimizer settings that pick an implementation, not the math (None: torch's default): a
checkpoint's own choice is restored with it, so a run saved with the per-tensor Adam resumes
with it, bit for bit, though new runs use the fused kernel (:func:`rlstore.agents.run.adam`)."""


def check_optimizer_state(
    saved: Any, optimizer: torch.optim.Optimizer, where: str = "resume.optimizer"
) -> dict[str, Any]:
    """The torch ``state_dict`` for ``optimizer`` from a saved :func:`optimizer_state`, checked
    against its parameter groups and parameters (:class:`CheckpointError` naming ``where``)."""
    check_keys(where, saved, ("param_groups", "state"))
    ref = optimizer.state_dict()
    groups = saved["param_groups"]
    ref_groups = ref["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(ref_groups):
        raise CheckpointError(f"{where}.param_groups: expected {len(ref_groups)} groups")
    out_groups = []
    for g, rg in zip(groups, ref_groups, strict=True):
        if not isinstance(g, dict) or set(g) != set(rg) or g["params"] != rg["params"]:
            raise CheckpointError(
                f"{where}.param_groups: expected keys {sorted(rg)} and params "
                f"{rg['params']} like this optimizer"
            )
        for k, v in g.items():
            # JSON stores tuples as lists
            want: tuple[type, ...] = (list, tuple) if isinstance(rg[k], tuple) else (type(rg[k]),)
            if k in _KERNEL_CHOICES:  # how torch runs the update: a saved choice is kept
                want = (bool, type(None))
            if type(v) not in want or isinstance(v, float) and not math.isfinite(v):
                raise CheckpointError(
                    f"{where}.param_groups.{k}: expected "
                    f"{' or '.join(t.__name__ for t in want[-2:])}, got {type(v).__name__}"
                )
        out_groups.append({k: tuple(v) if isinstance(rg[k], tuple) else v for k, v in g.items()})
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, torch.Tensor]] = {}
    if not isinstance(saved["state"], dict):
        raise CheckpointError(f"{where}.state: expected a dict of per-parameter states")
    for key, entry in saved["state"].items():
        if not key.isdigit() or int(key) >= len(params) or not isinstance(entry, dict):
            raise CheckpointError(f"{where}.state: unexpected entry {key!r}")
        p = params[int(key)]
        for name, t in entry.items():
            if not isinstance(t, torch.Tensor) or t.dtype != p.dtype and t.ndim != 0:
                raise CheckpointError(f"{where}.state.{key}.{name}: expected a {p.dtype} tensor")
            if t.ndim != 0 and t.shape != p.shape:
                raise CheckpointError(
                    f"{where}.state.{key}.{name}: expected shape {tuple(p.shape)}, "
                    f"got {tuple(t.shape)}"
                )
        state[int(key)] = dict(entry)
    return {"state": state, "param_groups": out_groups}


def check_module_state(saved: Any, module: torch.nn.Module, where: str = "model") -> None:
    """Raise :class:`CheckpointError` (naming ``where`` and the key) unless ``saved`` holds
    exactly ``module.state_dict()``'s keys, each a tensor of the same shape and dtype.

    Example::

        >>> check_module_state({"weight": torch.zeros(2, 3)}, torch.nn.Linear(3, 2, bias=False))
        >>> check_module_state(  # doctest: +ELLIPSIS
        ...     {"weight": torch.zeros(3)}, torch.nn.Linear(3, 2, bias=False))
        Traceback (most recent call last):
        ...
        rlstore.errors.CheckpointError: model.weight: expected a tensor of shape (2, 3) and ...
    """
    ref = module.state_dict()
    if not isinstance(saved, dict) or set(saved) != set(ref):
        keys = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
        raise CheckpointError(f"{where}: expected the parameters {sorted(ref)}, got {keys}")
    for k, t in ref.items():
        v = saved[k]
        if not isinstance(v, torch.Tensor) or v.shape != t.shape or v.dtype != t.dtype:
            got = (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else type(v).__name__
            raise CheckpointError(
                f"{where}.{k}: expected a tensor of shape {tuple(t.shape)} and dtype {t.dtype}, "
                f"got {got}"
            )


def check_updates_log(log: Any, where: str) -> None:
    """Raise :class:`CheckpointError` naming ``where`` unless ``log`` is a list of
    ``{name: number}`` dicts (the per-update diagnostics a checkpoint carries)."""
    if not isinstance(log, list) or not all(
        isinstance(u, dict) and all(type(v) in (int, float) for v in u.values()) for u in log
    ):
        raise CheckpointError(f"{where}: expected a list of {{name: number}} dicts")


def check_like(where: str, got: Any, ref: Any) -> None:
    """Raise :class:`CheckpointError` unless ``got`` has the structure of ``ref``: same dict
    keys, tensors / arrays of the same shape and dtype, ints >= 0 where ``ref`` has ints, lists
    of finite numbers (ints where ``ref``'s name says lengths or steps)."""
    if isinstance(ref, dict):
        check_keys(where, got, ref)
        for k in ref:
            check_like(f"{where}.{k}", got[k], ref[k])
    elif isinstance(ref, (torch.Tensor, np.ndarray)):
        if type(got) is not type(ref) or got.shape != ref.shape or got.dtype != ref.dtype:
            have = (tuple(got.shape), got.dtype) if hasattr(got, "shape") else type(got).__name__
            raise CheckpointError(
                f"{where}: expected {type(ref).__name__} of shape {tuple(ref.shape)} and dtype "
                f"{ref.dtype}, got {have}"
            )
    elif isinstance(ref, str):
        if got != ref:
            raise CheckpointError(f"{where}: expected {ref!r} like this agent, got {got!r}")
    elif isinstance(ref, int):
        if type(got) is not int or got < 0:
            raise CheckpointError(f"{where}: expected an int >= 0, got {got!r}")
    elif isinstance(ref, float):
        if type(got) not in (int, float) or not math.isfinite(got):
            raise CheckpointError(f"{where}: expected a finite number, got {got!r}")
    elif isinstance(ref, list):
        want_int = where.endswith(("lengths", "steps"))
        ok = isinstance(got, list) and all(
            type(x) is int and x >= 0 if want_int else type(x) in (int, float) and np.isfinite(x)
            for x in got
        )
        if not ok:
            raise CheckpointError(
                f"{where}: expected a list of {'ints >= 0' if want_int else 'finite numbers'}"
            )


RAW_OBS = SimpleNamespace(
    normalizer=SimpleNamespace(obs=lambda x, update: x),
    preprocess=lambda batch, device: torch.as_tensor(batch, device=device),
)
"""The ``agent`` argument of :func:`rlstore.agents.envs.restore_envs` for trainers
whose networks see the raw observations (DQN, SAC): no preprocessing, no normalization, so the
replayed observations are compared with the saved ones as they are."""


# ----------------------------------------------------------------- checkpoint folders


_CKPT = re.compile(r"^checkpoint_(\d+)$")
_LEGACY = re.compile(r"^checkpoint_(\d+)\.pt$")


def checkpoint_path(folder: str | Path, num: int) -> Path:
    """``folder / "checkpoint_{num:04d}"`` (a folder)."""
    return Path(folder) / f"checkpoint_{num:04d}"


def list_checkpoints(folder: str | Path, prefix: str) -> list[tuple[int, Path]]:
    """``(num, path)`` of the committed ``checkpoint_NNNN`` folders in ``folder`` (those holding
    ``<prefix>metadata.json``), sorted by number; ``[]`` when the folder does not exist."""
    d = Path(folder)
    if not d.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in d.iterdir()
        if (m := _CKPT.match(p.name)) and metadata_file_path(p, prefix).is_file()
    ]
    return sorted(found)


def latest_checkpoint(folder: str | Path, prefix: str) -> Path | None:
    """The highest-numbered committed checkpoint folder in ``folder`` (None if none).

    Raises:
        CheckpointError: the folder holds only ``checkpoint_NNNN.pt`` files of an earlier
            rlstore (they are never loaded: pickle inside).
    """
    found = list_checkpoints(folder, prefix)
    if found:
        return found[-1][1]
    d = Path(folder)
    legacy = sorted(p.name for p in d.iterdir() if _LEGACY.match(p.name)) if d.is_dir() else []
    if legacy:
        raise CheckpointError(
            f"checkpoints: {str(d)!r} holds only {legacy[-1]}-style files of an earlier rlstore "
            "(pickle inside); they are not loaded because loading them could run code"
        )
    return None


def checkpoint_schedule(num_periods: int, num_checkpoints: int) -> set[int]:
    """1-based period numbers after which a checkpoint is written: ``num_checkpoints`` evenly
    spaced over ``num_periods``, the last one included (``set()`` for 0 checkpoints).

    Example::

        >>> sorted(checkpoint_schedule(10, 3))
        [3, 7, 10]
    """
    if num_checkpoints <= 0 or num_periods <= 0:
        return set()
    k = min(num_checkpoints, num_periods)
    return {int(round(num_periods * (i + 1) / k)) for i in range(k)}


BUDGET_KEY = "total_timesteps"
"""The one config key a resumed run may change (raise): its total budget of env steps."""


def check_resumed_config(
    saved: Any, now: Mapping[str, Any], sections: tuple[str, ...], where: str
) -> None:
    """Raise :class:`CheckpointError` unless the config a checkpoint was written with
    (``saved``, a dict) equals the resuming run's (``now``) in every section of ``sections``,
    except a larger ``total_timesteps`` (``rlstore train --resume RUN --total-steps N``
    extends a run; the schedules planned over the budget are re-planned over the new one).

    Example::

        >>> old = {"dqn": {"lr": 1e-3, "total_timesteps": 100}}
        >>> check_resumed_config(old, {"dqn": {"lr": 1e-3, "total_timesteps": 200}}, ("dqn",), "c")
        >>> check_resumed_config(  # doctest: +ELLIPSIS
        ...     old, {"dqn": {"lr": 1e-3, "total_timesteps": 50}}, ("dqn",), "c")
        Traceback (most recent call last):
        ...
        rlstore.errors.CheckpointError: c: config.dqn.total_timesteps: expected at least 100 ...
    """

    def budgetless(section: Any) -> Any:
        if not isinstance(section, dict):
            return section
        return {k: v for k, v in section.items() if k != BUDGET_KEY}

    for name in sections:
        old = saved.get(name) if isinstance(saved, dict) else None
        new = now[name]
        if not isinstance(old, dict) or budgetless(old) != budgetless(new):
            a, b = budgetless(old) if isinstance(old, dict) else {}, budgetless(new)
            keys = sorted(k for k in {*a, *b} if a.get(k, ...) != b.get(k, ...))
            what = "; ".join(f"{k}: {a.get(k, '(absent)')!r} in the checkpoint, {b.get(k)!r} now"
                             for k in keys[:3])  # fmt: skip
            raise CheckpointError(
                f"{where}: config.{name} differs from this run's ({what}; a resumed run keeps "
                "its config, except a larger budget)"
            )
        if BUDGET_KEY in new and not old.get(BUDGET_KEY, 0) <= new[BUDGET_KEY]:
            raise CheckpointError(
                f"{where}: config.{name}.{BUDGET_KEY}: expected at least {old[BUDGET_KEY]} "
                f"(a run can be extended, not shortened), got {new[BUDGET_KEY]}"
            )
