"""The project's one RNG-state convention: seeds to Generators, and checked state round trips.

Every sampler (and every buffer that draws random numbers) takes
``seed: int | np.random.Generator | None`` through :func:`make_rng` and saves its generator with
:func:`rng_state` / restores it with :func:`set_rng_state`, so that a restored object draws
exactly the numbers the original would have.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlstore._checks import check_keys
from rlstore.errors import CheckpointError, ConfigError

__all__ = ["BIT_GENERATORS", "make_rng", "rng_state", "set_rng_state"]


def make_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A numpy Generator from a seed (an int >= 0), an existing Generator (used as is,
    shared) or None (fresh OS entropy).

    Raises:
        ConfigError: a bool, a negative int, or any other type.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)):
        if seed < 0:
            raise ConfigError(f"seed: expected an int >= 0, got {seed}")
        return np.random.default_rng(int(seed))
    raise ConfigError(
        f"seed: expected an int >= 0, numpy Generator or None, got {type(seed).__name__}"
    )


BIT_GENERATORS: dict[str, type[np.random.BitGenerator]] = {
    "PCG64": np.random.PCG64,
    "PCG64DXSM": np.random.PCG64DXSM,
    "Philox": np.random.Philox,
    "SFC64": np.random.SFC64,
    "MT19937": np.random.MT19937,
}
"""The bit generators whose state :func:`set_rng_state` restores (an explicit allow-list: a
name read from a file never selects anything else)."""

# Exclusive upper bounds of the integer leaves of a bit-generator state (keys joined by "."):
# 128-bit PCG state words, a 32-bit buffered value, a 0/1 flag, buffer positions.
_INT_BOUNDS: dict[str, int] = {
    "state.state": 1 << 128,
    "state.inc": 1 << 128,
    "uinteger": 1 << 32,
    "has_uint32": 2,
    "buffer_pos": 5,  # Philox: 4 buffered words, position 4 = empty
    "state.pos": 625,  # MT19937: 624 key words, position 624 = refill
}


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """A deep copy of a Generator's bit-generator state, restorable by :func:`set_rng_state`.

    PCG64 states are plain JSON (Python ints may exceed 64 bits); Philox, SFC64 and MT19937
    states hold small uint arrays (a checkpoint stores them in its arrays file).
    """
    return copy.deepcopy(dict(rng.bit_generator.state))


def _checked_state_leaf(where: str, path: str, value: Any, template: Any) -> Any:
    """``value`` checked against the leaf ``template`` of a fresh generator's state."""
    if isinstance(template, dict):
        check_keys(f"{where}.{path}", value, template)
        return {
            k: _checked_state_leaf(where, f"{path}.{k}" if path else k, value[k], template[k])
            for k in template
        }
    if isinstance(template, np.ndarray):
        info = np.iinfo(template.dtype)
        arr = value if isinstance(value, np.ndarray) and value.dtype.kind in "iu" else None
        if isinstance(value, list) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            arr = np.array(value, dtype=object)  # Python ints: range-checked before casting
        ok = arr is not None and arr.shape == template.shape
        if ok and arr is not None and arr.size:
            ok = bool(0 <= arr.min()) and bool(arr.max() <= info.max)
        if not ok or arr is None:
            got = getattr(value, "dtype", type(value).__name__)
            raise CheckpointError(
                f"{where}.{path}: expected {template.size} integers in [0, {info.max}], got "
                f"{got} of shape {np.shape(value) if arr is not None else '?'}"
            )
        return arr.astype(template.dtype)
    if path == "bit_generator":
        return template  # already checked by the caller
    bound = _INT_BOUNDS.get(path)
    if bound is None or not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise CheckpointError(f"{where}.{path}: expected an int, got {value!r}")
    if not 0 <= value < bound:
        raise CheckpointError(f"{where}.{path}: expected an int in [0, {bound}), got {value}")
    return int(value)


def set_rng_state(
    rng: np.random.Generator, state: Mapping[str, Any], *, where: str = "rng_state"
) -> np.random.Generator:
    """Return a Generator in ``state`` (from :func:`rng_state`): ``rng`` itself when its bit
    generator has the state's class, otherwise a new Generator of that class.

    The state is checked whole before ``rng`` is touched: the bit generator must be one of
    :data:`BIT_GENERATORS`, and the state's keys, types, array shapes and integer ranges must
    be those of that class. A rejected state leaves ``rng`` unchanged.

    Args:
        rng: the Generator to restore into (shared: it is modified in place when it matches).
        state: a bit-generator state dict.
        where: the name of ``state`` in error messages (e.g. ``"sampler.rng"``).

    Raises:
        CheckpointError: an unknown bit generator or a malformed state.
    """
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{where}: expected a dict, got {type(state).__name__}")
    name = state.get("bit_generator")
    cls = BIT_GENERATORS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise CheckpointError(
            f"{where}.bit_generator: expected one of {sorted(BIT_GENERATORS)}, got {name!r}"
        )
    fresh = cls()
    clean = _checked_state_leaf(where, "", state, fresh.state)
    try:
        fresh.state = clean  # numpy's own checks, on a throwaway generator
    except (TypeError, ValueError, KeyError, OverflowError) as exc:  # pragma: no cover
        raise CheckpointError(f"{where}: numpy refused the {name} state ({exc})") from exc
    if type(rng.bit_generator) is not cls:
        return np.random.Generator(fresh)
    rng.bit_generator.state = clean
    return rng
