"""Checks of a :class:`rlstore.buffers.rollout.RolloutBuffer` state dict before it loads:
:func:`stage_rollout_state` validates every field and builds what ``load_state_dict`` then
installs, all or nothing (CheckpointError naming the field otherwise)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from rlstore._trees import flat_items, tree_from_state, tree_leaves
from rlstore.buffers.rollout_checks import FLAGS, TREES
from rlstore.errors import CheckpointError
from rlstore.samplers import set_rng_state

__all__ = ["stage_rollout_state"]


def stage_rollout_state(
    sd: Any,
    *,
    num_steps: int,
    num_envs: int,
    float_names: tuple[str, ...],
    device: torch.device,
    normalizer: Any,
) -> dict[str, Any]:
    """Validate a ``RolloutBuffer.state_dict()`` and build the new attributes, changing nothing.

    Args:
        sd: the state dict to load.
        num_steps, num_envs, float_names, device: the loading buffer's layout.
        normalizer: the buffer's intrinsic reward normalizer (None without an intrinsic
            stream); a deep copy is loaded and returned, the live one is not touched.

    Returns:
        ``{"data", "results", "next_episode_time", "floats", "flags", "pos",
        "hidden_given", "normalizer", "rng"}`` ready to be assigned.

    Raises:
        CheckpointError: anything missing, malformed or inconsistent.
    """
    T, N = num_steps, num_envs
    intrinsic = normalizer is not None
    try:
        cfg = sd["config"]
        if (cfg["num_steps"], cfg["num_envs"]) != (T, N):
            raise CheckpointError(
                f"state_dict: expected num_steps={T}, num_envs={N}, "
                f"got num_steps={cfg['num_steps']}, num_envs={cfg['num_envs']}"
            )
        if (cfg.get("intrinsic") is None) != (not intrinsic):
            raise CheckpointError("state_dict: intrinsic stream presence differs from this buffer")
        data = tree_from_state(sd["data"], device)
        results = tree_from_state(sd["results"], device)
        nxt = tree_from_state(sd["next_episode_time"], device)
        pos, hidden_given, rng = sd["pos"], sd["hidden_given"], sd["rng"]
        normalizer_state = sd.get("normalizer")
    except CheckpointError:
        raise
    except Exception as exc:  # KeyError, TypeError, torch's RuntimeError, ...
        raise CheckpointError(f"state_dict: missing or malformed entry {exc!r}") from exc
    if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)) or not 0 <= pos <= T:
        raise CheckpointError(f"pos: expected an int in [0, {T}], got {pos!r}")
    if hidden_given not in (None, True, False):
        raise CheckpointError(f"hidden_given: expected None or a bool, got {hidden_given!r}")
    if not isinstance(data, dict) or not isinstance(results, dict):
        raise CheckpointError("state_dict: expected dicts under 'data' and 'results'")
    data.setdefault("final_obs_given", torch.zeros(T, N, dtype=torch.bool))  # older states
    data["final_obs_given"] = data["final_obs_given"].to(device)
    fixed = {k: torch.float32 for k in float_names}
    fixed |= {k: torch.bool for k in FLAGS} | {"episode_time": torch.int64}
    unknown = set(data) - set(fixed) - set(TREES)
    missing = set(fixed) - set(data)
    if missing or unknown:
        raise CheckpointError(
            f"data: expected the fields {sorted(fixed)} (+ {list(TREES)}), "
            f"missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    if (hidden_given is True) != ("hidden" in data):
        raise CheckpointError(f"hidden_given={hidden_given!r} disagrees with the stored data")
    added = "obs" in data  # the first add allocates obs and actions and sets hidden_given
    if ("actions" in data) != added or (hidden_given is None) == added or (pos and not added):
        raise CheckpointError(
            f"data: expected obs, actions and a bool hidden_given once a step was added, got "
            f"pos={pos}, {sorted({'obs', 'actions'} & set(data))}, hidden_given={hidden_given!r}"
        )
    if "final_obs" in data:  # written leaf by leaf in obs's order: same keys, shapes, dtypes
        fo, obs = data["final_obs"], data.get("obs")
        if isinstance(fo, dict) and isinstance(obs, dict):
            data["final_obs"] = fo = {k: fo[k] for k in obs if k in fo} | fo
        if _layout(fo) != _layout(obs):
            raise CheckpointError(
                f"data.final_obs: expected {_layout(obs)} like obs, got {_layout(fo)}"
            )
    for k, v in data.items():
        for leaf in tree_leaves(v):
            _check_state_leaf(f"data.{k}", leaf, (T, N), fixed.get(k))
    computed = ["advantages", "returns"] + (["int_advantages", "int_returns"] if intrinsic else [])
    if results and sorted(results) != sorted(computed):
        raise CheckpointError(
            f"results: expected none or {sorted(computed)}, got {sorted(results)}"
        )
    for k, v in results.items():
        _check_state_leaf(f"results.{k}", v, (int(pos), N), torch.float32)
    _check_state_leaf("next_episode_time", nxt, (N,), torch.int64)
    new_normalizer = None
    if normalizer_state is not None and intrinsic:
        new_normalizer = copy.deepcopy(normalizer)
        try:
            new_normalizer.load_state_dict(normalizer_state)
        except Exception as exc:
            raise CheckpointError(f"normalizer: malformed state ({exc!r})") from exc
    try:
        set_rng_state(np.random.default_rng(), rng)  # a scratch Generator: nothing changes
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"rng: malformed bit-generator state ({exc!r})") from exc
    return {
        "data": data,
        "results": results,
        "next_episode_time": nxt,
        "floats": torch.stack([data[k] for k in float_names]),
        "flags": torch.stack([data[k] for k in FLAGS]),
        "pos": int(pos),
        "hidden_given": hidden_given,
        "normalizer": new_normalizer,
        "rng": rng,
    }


def _layout(tree: Any) -> list[tuple[str, tuple[int, ...], Any]]:
    """``(key path, shape, dtype)`` of every leaf of a stored tree, in order."""
    return [
        (k, tuple(getattr(x, "shape", ())), getattr(x, "dtype", type(x)))
        for k, x in flat_items(tree).items()
    ]


def _check_state_leaf(name: str, x: Any, lead: tuple[int, ...], dtype: torch.dtype | None) -> None:
    """A loaded tensor must have the leading shape ``lead`` and ``dtype`` (if given)."""
    if not isinstance(x, torch.Tensor) or tuple(x.shape[: len(lead)]) != lead:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise CheckpointError(f"{name}: expected a tensor of shape {lead}+..., got {got}")
    if dtype is not None and x.dtype != dtype:
        raise CheckpointError(f"{name}: expected dtype {dtype}, got {x.dtype}")
    if x.is_complex() or (dtype is not None and x.dim() != len(lead)):
        raise CheckpointError(f"{name}: expected shape {lead} of real numbers, got {x.shape}")
