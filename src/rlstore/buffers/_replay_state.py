"""Checks of a loaded :class:`~rlstore.buffers.replay.ReplayBuffer` state, all made before the
buffer changes (:meth:`ReplayBuffer.load_state_dict` commits what :func:`checked_state`
returns).

A state with valid checksums can still be inconsistent (a file written by other code, or a
state dict edited in memory); the checks accept exactly the states that adds can produce, as
far as one pass over the arrays can tell: config, specs, the ring's shapes, dtypes and
counters, sorted side-store keys with none from the future, one side entry per stored done
transition, the pending-observation flags, and finite floats unless ``allow_nonfinite``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlstore._trees import flat_items
from rlstore.errors import CheckpointError, SpecError
from rlstore.specs import FieldSpec, TransitionSchema
from rlstore.storage import RingStorage, Storage, StorageLayout
from rlstore.storage.frames import newest_frame_specs
from rlstore.storage.ring import SideStore, _checked_array

if TYPE_CHECKING:
    from rlstore.buffers.replay import ReplayBuffer


def checked_state(buf: ReplayBuffer, sd: Mapping[str, Any]) -> dict[str, Any]:
    """Check a :meth:`ReplayBuffer.state_dict` whole; return the buffer's new attributes
    (``specs``, ``storage``, ``side``, ``disc`` and the rest), leaving ``buf`` untouched.
    The sampler state is checked by its own setter."""
    if not isinstance(sd, Mapping) or set(sd) != set(_STATE_KEYS):
        got = sorted(map(str, sd)) if isinstance(sd, Mapping) else type(sd).__name__
        raise CheckpointError(f"state_dict: expected the keys {list(_STATE_KEYS)}, got {got}")
    cfg = sd["config"]
    if not isinstance(cfg, Mapping):
        raise CheckpointError(f"state_dict.config: expected a dict, got {type(cfg).__name__}")
    for key in ("capacity", "num_envs", "store_next_obs_once", "allow_nonfinite"):
        value = cfg.get(key)
        if type(value) is not type(getattr(buf, key)) or value != getattr(buf, key):
            raise CheckpointError(
                f"state_dict.config.{key}: expected {getattr(buf, key)!r}, got {value!r}"
            )
    seed = cfg.get("seed")
    if seed is not None and (type(seed) is not int or seed < 0):
        raise CheckpointError(f"state_dict.config.seed: expected an int >= 0, got {seed!r}")
    n = buf.num_envs
    prev_open = sd["prev_open"]
    _checked_array("state_dict.prev_open", prev_open, (n,), np.dtype(bool))
    new: dict[str, Any] = {"_seed": seed, "_prev_open": prev_open.copy()}
    new["_prev_open_any"] = bool(prev_open.any())
    new["_prev_all"] = bool(prev_open.all())
    if sd["storage"] is None:
        if sd["side"] is not None or sd["disc"] is not None or cfg.get("specs") is not None:
            raise CheckpointError(
                "state_dict: storage is None (nothing added yet) but specs/side/disc are not"
            )
        if new["_prev_open_any"]:
            raise CheckpointError("state_dict.prev_open: expected all False before any add")
        return {**new, "specs": None, "storage": None, "side": None, "disc": None}
    try:
        specs = TransitionSchema.parse(cfg.get("specs"))
    except (SpecError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"state_dict.config.specs: malformed ({exc!r})") from exc
    if specs is None or (buf.specs is not None and specs != buf.specs):
        raise CheckpointError(f"state_dict.config.specs: expected {buf.specs}, got {specs}")
    raw = sd["storage"]
    if isinstance(raw, RingStorage):  # mapped by ReplayBuffer.open: trusted, not scanned
        st: Storage = raw
    else:
        _check_finite(raw, "storage", buf.allow_nonfinite)
        st = buf._layout.load(raw, where="state_dict.storage")
    stored = stored_specs(specs, buf.store_next_obs_once)
    if st.specs != stored or (st.rows, st.num_envs) != (
        buf.capacity_per_env + 1,
        n,
    ):
        raise CheckpointError(
            f"state_dict.storage: expected fields {list(stored.values())} with "
            f"{buf.capacity_per_env + 1} rows x {n} envs, got {list(st.specs.values())} "
            f"with {st.rows} x {st.num_envs}"
        )
    obs_specs = side_specs(specs, buf._layout)
    side, disc = SideStore(obs_specs), SideStore(obs_specs, capacity=1)
    rows_max = (buf.capacity_per_env + 1) * n
    bound = {"max_key": st.rows_written * n, "max_capacity": 3 * rows_max + 16}
    side.load_state_dict(sd["side"], where="state_dict.side", **bound)
    disc.load_state_dict(sd["disc"], where="state_dict.disc", **bound)
    for name in ("side", "disc"):
        _check_finite(sd[name], name, buf.allow_nonfinite)
    _check_consistent(st, side, disc, prev_open, buf.capacity_per_env, buf.store_next_obs_once)
    return {**new, "specs": specs, "storage": st, "side": side, "disc": disc}


_STATE_KEYS = ("config", "storage", "side", "disc", "prev_open", "sampler")
"""Keys of :meth:`ReplayBuffer.state_dict`."""


def side_specs(specs: dict[str, FieldSpec], layout: StorageLayout) -> dict[str, FieldSpec]:
    """Specs of the side stores' items: the observation fields, cut to their newest frame on
    the frames layout (the buffer checks that every ``next_obs`` continues its ``obs``)."""
    obs = {k: s for k, s in specs.items() if k == "obs" or k.startswith("obs.")}
    return newest_frame_specs(obs, layout.stack_axis) if layout.kind == "frames" else obs


def stored_specs(specs: dict[str, FieldSpec], once: bool) -> dict[str, FieldSpec]:
    """Specs of the ring's fields: ``specs`` plus ``next_<obs>`` unless ``once``."""
    stored = dict(specs)
    if not once:
        obs = [k for k in specs if k == "obs" or k.startswith("obs.")]
        stored.update({"next_" + k: FieldSpec("next_" + k, specs[k].shape, specs[k].dtype)
                       for k in obs})  # fmt: skip
    return stored


def _check_finite(sd: Any, name: str, allow_nonfinite: bool) -> None:
    """Every float array of a state (any storage layout, walked as a tree) is finite unless
    allowed."""
    if allow_nonfinite:
        return
    for key, arr in flat_items(sd).items():
        if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and not np.isfinite(arr).all():
            where = f"state_dict.{name}.{key.replace('/', '.')}"
            raise CheckpointError(
                f"{where}: expected finite values (allow_nonfinite is False), got NaN/inf"
            )


def _check_consistent(
    st: Storage,
    side: SideStore,
    disc: SideStore,
    prev_open: np.ndarray,
    capacity_per_env: int,
    once: bool,
) -> None:
    """Cross-checks of a loaded state that only adds could have produced.

    Every stored done transition (``terminated | truncated``) among the live rows has its
    final observation in ``side``, and ``side`` holds no other live key; live ``disc`` keys
    are transitions that did not end; ``prev_open`` is "the newest row did not end"; float
    fields are finite unless ``allow_nonfinite``. Keys below the live range are dead entries
    the side stores drop lazily, and are allowed.
    """
    n, written = st.num_envs, st.rows_written
    if not once or written == 0:
        if side.n or disc.n or prev_open.any():
            raise CheckpointError(
                "state_dict: side/disc entries or open rows where none can exist "
                f"(store_next_obs_once={once}, rows_written={written})"
            )
        return
    flags = st.gather(np.arange(st.rows * n), ["terminated", "truncated"])
    done = (flags["terminated"] | flags["truncated"]).reshape(st.rows, n)  # (C + 1, n)
    if not np.array_equal(prev_open, ~done[(st.cursor - 1) % st.rows]):
        raise CheckpointError(
            "state_dict.prev_open: expected the newest row's 'not done' flags "
            f"{(~done[(st.cursor - 1) % st.rows]).tolist()}, got {prev_open.tolist()}"
        )
    g = np.arange(written - min(st.size, capacity_per_env), written)  # live global rows
    live_done = done[g % st.rows]  # (rows, n)
    rows, cols = np.nonzero(live_done)
    need = g[rows] * n + cols  # sorted: row-major order of (row, col)
    lo = int(g[0]) * n if len(g) else written * n
    side_live = side.keys[: side.n][side.keys[: side.n] >= lo]
    if not np.array_equal(side_live, need):
        raise CheckpointError(
            f"state_dict.side.keys: expected the live done transitions {need[:8].tolist()}"
            f"{'...' if len(need) > 8 else ''}, got {side_live[:8].tolist()}"
            f"{'...' if len(side_live) > 8 else ''}"
        )
    disc_live = disc.keys[: disc.n][disc.keys[: disc.n] >= lo]
    if disc_live.size and live_done[disc_live // n - int(g[0]), disc_live % n].any():
        raise CheckpointError(
            "state_dict.disc.keys: expected transitions that did not end, got done ones"
        )
