"""Field specs: the schema of what a buffer stores, inferred from a first sample or given.

A :class:`FieldSpec` fixes the per-item ``shape`` and ``dtype`` of one field (``obs``,
``obs.image`` for one level of dict observations, ``action``, ``reward``, ...). Buffers store a
field as an array of shape ``(*lead, *spec.shape)`` where ``lead`` is e.g. ``(T, num_envs)``.

Casting rules (:func:`cast_to_spec`): only *safe* conversions are accepted.

* same kind or widening, and float narrowing (``float64 -> float32``), which is what every RL
  library does with observations, unless a value overflows to inf;
* ``int -> float`` when every integer is exactly representable (``2**24 + 1`` is never stored
  as float32 ``16777216.0``, nor ``70000`` as float16 ``inf``);
* integer narrowing (``int64 -> uint8``) only when every value fits the target range;
* ``bool`` fields accept integer or float input whose values are all exactly 0 or 1 (CleanRL's
  float dones; the rollout buffer's flags take the same);
* anything else (``float -> int``, ``bool -> int/float``, ``complex -> float``, objects,
  strings) is a :class:`SpecError`.

Float fields reject NaN and +-inf unless ``allow_nonfinite`` is set.

Example:
    >>> import numpy as np
    >>> specs = infer_specs({"obs": np.zeros((4, 17)), "reward": np.zeros(4)}, batch_ndim=1)
    >>> specs["obs"]
    FieldSpec(name='obs', shape=(17,), dtype=dtype('float32'))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlstore._trees import check_exact_ints, to_numpy
from rlstore.errors import SpecError

__all__ = [
    "FieldSpec",
    "TransitionSchema",
    "infer_specs",
    "validate_batch",
    "cast_to_spec",
    "all_finite",
]


@dataclass(frozen=True)
class FieldSpec:
    """Shape and dtype of one stored field (per item, without batch axes).

    Attributes:
        name: field name, ``"obs"``, ``"obs.<key>"`` for dict observations, ``"action"``, ...
        shape: per-item shape, e.g. ``(17,)`` or ``()`` for scalars.
        dtype: numpy dtype of the stored array (``np.dtype``, normalised on construction to
            the native byte order: torch cannot read big-endian arrays).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"name: expected a non-empty str, got {self.name!r}")
        if not isinstance(self.shape, (tuple, list)):
            raise SpecError(
                f"{self.name}: shape must be a tuple of ints, got {type(self.shape).__name__} "
                f"{self.shape!r}"
            )
        if any(
            isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer))
            for s in self.shape
        ):
            raise SpecError(f"{self.name}: shape must be a tuple of ints, got {self.shape!r}")
        shape = tuple(int(s) for s in self.shape)
        if any(s < 0 for s in shape):
            raise SpecError(f"{self.name}: shape must be non-negative, got {shape}")
        try:
            if self.dtype is None:  # np.dtype(None) is float64: never a silent default
                raise TypeError("None")
            dtype = np.dtype(self.dtype)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{self.name}: invalid dtype {self.dtype!r}") from exc
        if dtype.kind not in "biuf":
            raise SpecError(f"{self.name}: dtype must be bool, int, uint or float, got {dtype}")
        dtype = dtype.newbyteorder("=")  # stored natively: ``>f4`` input is cast losslessly
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    @property
    def is_float(self) -> bool:
        """Whether the field holds floating-point values (subject to the NaN/inf check)."""
        return self.dtype.kind == "f"

    def to_json(self) -> dict[str, Any]:
        """JSON-able form ``{"name", "shape", "dtype"}``; inverse of :meth:`from_json`."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype.str}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FieldSpec:
        """Rebuild a spec from :meth:`to_json` output.

        Raises:
            SpecError: not a dict, a missing key, a shape that is not a list of ints, a dtype
                that is not a bool/int/uint/float dtype name.
        """
        if not isinstance(d, Mapping):
            raise SpecError(f"field spec: expected a dict {{name, shape, dtype}}, got {d!r}")
        try:
            name, shape, dtype = d["name"], d["shape"], d["dtype"]
        except KeyError as exc:
            raise SpecError(f"field spec: missing key {exc.args[0]!r} in {dict(d)!r}") from exc
        if not isinstance(shape, (list, tuple)):
            raise SpecError(f"{name}: shape must be a list of ints, got {shape!r}")
        return cls(str(name), tuple(shape), dtype)


def _default_dtype(arr: np.ndarray, name: str) -> np.dtype:
    kind = arr.dtype.kind
    if kind == "f":
        # float64 (Python floats, most env wrappers) is stored as float32; pass explicit specs
        # to keep float64. float16/float32 stay as they are.
        return np.dtype(np.float32) if arr.dtype.itemsize > 4 else arr.dtype
    if kind in "biu":
        return arr.dtype
    raise SpecError(f"{name}: cannot store dtype {arr.dtype} (expected bool, int, uint or float)")


def infer_specs(
    sample: Mapping[str, Any], batch_ndim: int, *, lead: tuple[int, ...] | None = None
) -> dict[str, FieldSpec]:
    """Infer field specs from one batch of values.

    Args:
        sample: ``{field: array-like}``; a value that is itself a mapping (dict observations)
            is flattened one level into fields ``"<field>.<key>"``. Values are array-likes of
            shape ``(*batch, *item_shape)``.
        batch_ndim: number of leading batch axes to strip (0 for a single item, 1 for
            ``(num_envs, ...)``, 2 for ``(T, num_envs, ...)``).
        lead: when given, the batch axes every value must have (e.g. the reward's shape).

    Returns:
        ``{name: FieldSpec}`` in the order of ``sample``. Floats wider than 32 bits become
        ``float32``; bool/int/uint and float16/32 keep their dtype (uint8 images stay uint8).

    Raises:
        SpecError: a value has fewer than ``batch_ndim`` axes, nested dicts, or an unstorable
        dtype (object, str, complex).
    """
    specs: dict[str, FieldSpec] = {}
    for key, value in sample.items():
        if isinstance(value, Mapping):
            for sub, v in value.items():
                if isinstance(v, Mapping):
                    raise SpecError(f"{key}.{sub}: only one level of dict is supported")
                name = f"{key}.{sub}"
                specs[name] = _infer_one(name, v, batch_ndim, lead)
        else:
            specs[key] = _infer_one(key, value, batch_ndim, lead)
    return specs


def _infer_one(
    name: str, value: Any, batch_ndim: int, lead: tuple[int, ...] | None = None
) -> FieldSpec:
    arr = to_numpy(name, value)
    if lead is not None and arr.shape[:batch_ndim] != lead:
        raise SpecError(f"{name}: expected leading axes {lead} like reward, got shape {arr.shape}")
    if arr.ndim < batch_ndim:
        raise SpecError(f"{name}: expected at least {batch_ndim} batch axes, got shape {arr.shape}")
    return FieldSpec(name, arr.shape[batch_ndim:], _default_dtype(arr, name))


def all_finite(arr: np.ndarray) -> bool:
    """True when a float array holds no NaN/inf: one ``np.isfinite`` and a byte search of its
    mask (several times faster than ``.all()`` for the small arrays of an add)."""
    return 0 not in np.isfinite(arr).tobytes()


def cast_to_spec(
    name: str, value: Any, spec: FieldSpec, lead: tuple[int, ...], *, allow_nonfinite: bool
) -> np.ndarray:
    """Check one value against its spec and return it as an array of the spec's dtype.

    Args:
        name: field name used in error messages.
        value: array-like of shape ``(*lead, *spec.shape)``.
        spec: the field spec.
        lead: expected leading batch shape.
        allow_nonfinite: accept NaN/inf in float fields.

    Returns:
        ``np.ndarray`` of shape ``(*lead, *spec.shape)`` and dtype ``spec.dtype`` (the input
        itself when it already matches: no copy).

    Raises:
        SpecError: wrong shape, unsafe cast, integer overflow, numbers other than exactly 0 or 1
        for a bool field, or NaN/inf where forbidden. The message names the field, the
        expectation, what arrived.
    """
    expected = (*lead, *spec.shape)
    if type(value) is np.ndarray and value.dtype == spec.dtype and value.shape == expected:
        arr = value
    else:
        if isinstance(value, Mapping):
            raise SpecError(f"{name}: expected an array of shape {expected}, got a dict")
        if isinstance(value, torch.Tensor):
            if value.requires_grad:  # a graph is not data
                raise SpecError(
                    f"{name}: expected data, got a tensor that requires grad (pass tensor.detach())"
                )
            value = to_numpy(name, value)  # CUDA and bfloat16 tensors too
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError, RuntimeError) as exc:  # RuntimeError: torch
            raise SpecError(
                f"{name}: expected an array of shape {expected}, got {value!r}"
            ) from exc
        if arr.shape != expected:
            raise SpecError(f"{name}: expected shape {expected}, got {arr.shape}")
        if arr.dtype != spec.dtype:
            arr = _safe_cast(name, arr, spec.dtype)
    if spec.is_float and not allow_nonfinite and not all_finite(arr):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise SpecError(
            f"{name}: expected finite values, got {bad} NaN/inf entries "
            "(pass allow_nonfinite=True to store them)"
        )
    return arr


def _safe_cast(name: str, arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    src = arr.dtype
    if src.kind not in "biuf":
        raise SpecError(f"{name}: expected dtype {dtype}, got {src} which cannot be cast")
    if dtype.kind == "b":
        if src.kind in "iuf" and np.isin(arr, (0, 1)).all():  # NaN is never in (0, 1)
            return arr.astype(dtype)
        raise SpecError(f"{name}: expected dtype bool (or exact 0/1 numbers), got {src}")
    if src.kind == "b":
        raise SpecError(f"{name}: expected dtype {dtype}, got bool (a flag, not a number)")
    if dtype.kind == "f":
        # int -> float when exact and float narrowing are accepted, overflow to inf is not
        with np.errstate(over="ignore"):
            out = arr.astype(dtype)
        if src.kind in "iu":
            check_exact_ints(name, arr, out, np.finfo(dtype).nmant + 1, arr.dtype.itemsize * 8)
        if src.kind == "f" and src.itemsize > dtype.itemsize and arr.size:
            overflow = np.isinf(out) & np.isfinite(arr)
            if overflow.any():
                raise SpecError(
                    f"{name}: expected values within the {dtype} range "
                    f"(|x| <= {float(np.finfo(dtype).max):.4g}), got {arr[overflow].ravel()[0]!r}"
                )
        return out
    # integer target
    if src.kind == "f":
        raise SpecError(f"{name}: expected dtype {dtype}, got {src} (float -> int is unsafe)")
    if not np.can_cast(src, dtype, "safe") and arr.size:
        info = np.iinfo(dtype)
        lo, hi = int(arr.min()), int(arr.max())
        if lo < info.min or hi > info.max:
            raise SpecError(
                f"{name}: expected values of dtype {dtype} in [{info.min}, {info.max}], "
                f"got {src} values in [{lo}, {hi}]"
            )
    return arr.astype(dtype)


def validate_batch(
    specs: Mapping[str, FieldSpec],
    batch: Mapping[str, Any],
    lead: tuple[int, ...],
    *,
    allow_nonfinite: bool = False,
) -> dict[str, np.ndarray]:
    """Validate a whole batch (flat ``{name: value}``) against ``specs``; write nothing.

    Args:
        specs: ``{name: FieldSpec}``.
        batch: ``{name: array-like}`` with exactly the keys of ``specs``; each value of shape
            ``(*lead, *spec.shape)``.
        lead: leading batch shape, e.g. ``(num_envs,)`` or ``(T, num_envs)``.
        allow_nonfinite: accept NaN/inf in float fields.

    Returns:
        ``{name: np.ndarray}`` cast to the spec dtypes, in the order of ``specs``.

    Raises:
        SpecError: missing or extra keys, or any value failing :func:`cast_to_spec`.
    """
    missing = [k for k in specs if k not in batch]
    extra = [k for k in batch if k not in specs]
    if missing or extra:
        raise SpecError(
            f"fields: expected keys {sorted(specs)}, missing {sorted(missing)}, "
            f"unexpected {sorted(extra)}"
        )
    return {
        k: cast_to_spec(k, batch[k], s, lead, allow_nonfinite=allow_nonfinite)
        for k, s in specs.items()
    }


CORE_FIELDS = ("action", "reward", "terminated", "truncated")
DEFAULT_SPECS = {
    "reward": FieldSpec("reward", (), np.dtype(np.float32)),
    "terminated": FieldSpec("terminated", (), np.dtype(np.bool_)),
    "truncated": FieldSpec("truncated", (), np.dtype(np.bool_)),
}


class TransitionSchema:
    """Field layout of a transition buffer (its write path casts each add against it).

    Fields: ``obs`` (or ``obs.<key>`` for one level of dict observations), ``action``,
    ``reward`` (float32 by default), ``terminated`` / ``truncated`` (bool), and any extras.
    ``next_obs`` shares the specs of ``obs``.

    Args:
        specs: ``{name: FieldSpec}`` as returned by :meth:`parse`.
        allow_nonfinite: accept NaN/inf in float fields.
    """

    def __init__(self, specs: Mapping[str, FieldSpec], *, allow_nonfinite: bool = False):
        self.specs = dict(specs)
        self.allow_nonfinite = allow_nonfinite
        self.obs_names = [k for k in self.specs if k == "obs" or k.startswith("obs.")]
        self.dict_obs = self.obs_names != ["obs"]
        self.extra_names = [
            k for k in self.specs if k not in self.obs_names and k not in CORE_FIELDS
        ]
        self.nonobs = [(k, self.specs[k]) for k in (*CORE_FIELDS, *self.extra_names)]

    @staticmethod
    def parse(specs: Any) -> dict[str, FieldSpec] | None:
        """Normalise user specs (dict of FieldSpec, dict of JSON dicts, or the JSON list of
        ``config()``), adding the default reward/flag specs; ``None`` stays ``None``.

        Raises:
            SpecError: no ``obs``/``action``, ``obs`` together with ``obs.<key>`` fields, an
                empty ``<key>``, a ``next_obs`` entry, a name given twice or a spec whose
                ``name`` is not its key, a name with ``/`` (checkpoint keys join names with
                it), ``terminated`` / ``truncated`` other than scalar bools, or a malformed
                spec.
        """
        if specs is None:
            return None
        try:
            if isinstance(specs, Mapping):
                pairs = [
                    (k, s if isinstance(s, FieldSpec) else FieldSpec.from_json({"name": k, **s}))
                    for k, s in specs.items()
                ]
            elif isinstance(specs, Sequence) and not isinstance(specs, str):
                pairs = [(d["name"], FieldSpec.from_json(d)) for d in specs]
            else:
                raise TypeError(type(specs).__name__)
        except (TypeError, KeyError) as exc:
            raise SpecError(
                f"specs: expected dict of FieldSpec / dicts or list of dicts, got {specs!r}"
            ) from exc
        out = dict(pairs)
        for k, spec in pairs:  # a spec saves (to_json) under its own name: they must agree
            if spec.name != k:
                raise SpecError(
                    f"specs[{k!r}]: expected a FieldSpec named {k!r}, got {spec.name!r}"
                )
        if len(out) != len(pairs):
            names = [k for k, _ in pairs]
            raise SpecError(f"specs: expected distinct field names, got {names}")
        slashed = [k for k in out if "/" in k]
        if slashed:  # a checkpoint joins its keys with "/": the buffer could never be saved
            raise SpecError(
                f"specs: expected field names (dict observation keys, extras) without '/', "
                f"got {slashed}"
            )
        obs = [k for k in out if k == "obs" or k.startswith("obs.")]
        if not obs or "action" not in out:
            raise SpecError(f"specs: expected 'obs' (or 'obs.<key>') and 'action', got {list(out)}")
        for k in ("terminated", "truncated"):  # the write path ORs them into done flags
            if k in out and out[k] != DEFAULT_SPECS[k]:
                raise SpecError(f"specs[{k!r}]: expected shape () dtype bool, got {out[k]}")
        if ("obs" in obs and len(obs) > 1) or "obs." in obs:
            raise SpecError(
                f"specs: expected 'obs' alone or 'obs.<key>' fields with non-empty keys, got {obs}"
            )
        if any(k == "next_obs" or k.startswith("next_obs.") for k in out):
            raise SpecError("specs: 'next_obs' is implied by 'obs' and must not be given")
        return {**out, **{k: s for k, s in DEFAULT_SPECS.items() if k not in out}}

    @staticmethod
    def infer(
        lead_ndim: int, obs: Any, action: Any, reward: Any, extra: Mapping[str, Any]
    ) -> dict[str, FieldSpec]:
        """Specs from a first add with ``lead_ndim`` batch axes (rewards float32, flags bool)."""
        for name, value in (("action", action), ("reward", reward), *extra.items()):
            if isinstance(value, Mapping):  # only obs / next_obs may be dicts
                raise SpecError(f"{name}: expected an array, got a dict with keys {list(value)}")
        reward_spec = _infer_one("reward", reward, 0)  # checked first: blame the right field
        if len(reward_spec.shape) != lead_ndim:
            want = "a scalar" if lead_ndim == 0 else f"shape with {lead_ndim} axes (one per env)"
            raise SpecError(f"reward: expected {want}, got shape {reward_spec.shape}")
        sample = {"obs": obs, "action": action, "reward": reward, **extra}
        specs = infer_specs(sample, lead_ndim, lead=reward_spec.shape)
        specs.update(DEFAULT_SPECS)
        out = TransitionSchema.parse(specs)
        return {} if out is None else out  # never None: specs is a dict

    def obs_keys(self) -> list[str]:
        """Sorted keys of dict observations."""
        return sorted(k[4:] for k in self.obs_names)

    def flatten_obs(self, name: str, obs: Any) -> dict[str, Any]:
        """``{"obs": obs}`` or ``{"obs.<key>": value}``; checks array-vs-dict and the keys."""
        if not self.dict_obs:
            if isinstance(obs, Mapping):
                raise SpecError(f"{name}: expected an array, got a dict with keys {list(obs)}")
            return {"obs": obs}
        if not isinstance(obs, Mapping):
            raise SpecError(f"{name}: expected a dict with keys {self.obs_keys()}, got an array")
        keys = sorted(obs)
        if keys != self.obs_keys():
            raise SpecError(f"{name}: expected keys {self.obs_keys()}, got {keys}")
        return {"obs." + k: v for k, v in obs.items()}
