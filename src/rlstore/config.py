"""Typed buffer configs: build any registered buffer from a dict, a YAML file or a JSON file.

A config is a mapping with a ``type`` naming an entry of :data:`BUFFER_REGISTRY` plus that
buffer's constructor arguments, validated by the matching pydantic model (unknown keys, wrong
types and missing keys are rejected with a :class:`~rlstore.errors.ConfigError` that lists every
bad key with what was expected and what arrived).

This module is also the project's one typed-config mechanism: every config model (the PPO
trainer's, the compatibility classes' schemas) derives from :class:`StrictModel`, every pydantic
``ValidationError`` becomes a :class:`~rlstore.errors.ConfigError` through
:func:`format_validation_error`, and every YAML/JSON config file is read by
:func:`load_config_file`.

Example (``replay.yaml``)::

    type: replay
    capacity: 100000
    num_envs: 8
    seed: 0

    >>> from rlstore.config import build_buffer
    >>> buf = build_buffer({"type": "replay", "capacity": 1000, "num_envs": 4, "seed": 0})
    >>> type(buf).__name__, buf.config()["capacity"]
    ('ReplayBuffer', 1000)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic import ValidationError as _PydanticValidationError
from pydantic.fields import FieldInfo
from pydantic.types import Strict
from typing_extensions import Self

from rlstore._checks import read_file
from rlstore.buffers.replay import ReplayBuffer
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.buffers.rollout_targets import IntrinsicConfig
from rlstore.errors import ConfigError
from rlstore.specs import FieldSpec

__all__ = [
    "StrictModel",
    "PositiveInt",
    "BufferConfig",
    "FieldSpecConfig",
    "IntrinsicStreamConfig",
    "ReplayBufferConfig",
    "RolloutBufferConfig",
    "BUFFER_REGISTRY",
    "CONFIG_MODELS",
    "register_buffer",
    "load_config_file",
    "load_yaml",
    "validate_config",
    "build_buffer",
    "format_validation_error",
]


def _admits_bool(annotation: Any) -> bool:
    """Whether a field annotation accepts bools (``bool``, ``Any``, or a union/alias with one)."""
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(arg) for arg in get_args(annotation))


def _lax_number(field: FieldInfo) -> bool:
    """A field that pydantic's lax mode would let a bool into: not declared strict (strict
    fields refuse bools themselves, with pydantic's own message) and not admitting bools."""

    def strict(tp: Any) -> bool:
        return any(isinstance(a, Strict) or strict(a) for a in get_args(tp))

    declared = any(isinstance(m, Strict) for m in field.metadata) or strict(field.annotation)
    return not declared and not _admits_bool(field.annotation)


class StrictModel(BaseModel):
    """Base of every config model in rlstore: unknown keys are errors, instances are frozen,
    floats are finite, fields are documented by attribute docstrings, and bad input raises
    :class:`~rlstore.errors.ConfigError` (formatted by :func:`format_validation_error`), both
    from the constructor and from :meth:`validate_mapping`.

    The buffer configs below also annotate every field strict (``StrictInt``, ``strict=True``):
    values are not coerced across types ("3" is not 3, True is not 1, "0.9" is not 0.9).
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False
    )

    moved_keys: ClassVar[dict[str, str]] = {}
    """Keys this model no longer has -> where they went (``"moved to run.eval_interval"``): a
    mapping that still names one is refused with that hint, never silently ignored."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except _PydanticValidationError as exc:
            raise ConfigError(
                format_validation_error(exc, type(self).__name__, type(self))
            ) from None

    # Nested models are validated by pydantic itself, not through this __init__, so an error in
    # a nested key is reported once, with its whole path (``online.num_envs``).
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @model_validator(mode="before")
    @classmethod
    def _no_bools_as_numbers(cls, data: Any) -> Any:
        """``True`` is not 1 and ``False`` is not 0.0: a bool given to a field that does not
        admit bools is refused (pydantic's lax mode would coerce it); so is a moved key."""
        if isinstance(data, Mapping):
            for key, value in data.items():
                if isinstance(key, str) and key in cls.moved_keys:
                    raise ValueError(f"{key}: {cls.moved_keys[key]}, got {value!r}")
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if isinstance(value, (bool, np.bool_)) and field and _lax_number(field):
                    raise ValueError(f"{key}: expected a number, got {value!r} (a bool)")
        return data

    @classmethod
    def validate_mapping(cls, data: Any, where: str | None = None) -> Self:
        """Validate a mapping (e.g. a parsed config file) into this model.

        Raises:
            ConfigError: ``data`` is not a mapping, or names a bad key (all of them listed).
        """
        where = where or cls.__name__
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(dict(data))
        except _PydanticValidationError as exc:
            raise ConfigError(format_validation_error(exc, where, cls)) from None


PositiveInt = Annotated[StrictInt, Field(gt=0)]
"""An int field that must be > 0 (sizes and dimensions); bools and floats are refused."""


class FieldSpecConfig(StrictModel):
    """Shape and dtype of one stored field (per transition, without batch axes)."""

    shape: list[Annotated[StrictInt, Field(ge=0)]] = Field(default_factory=list)
    """Per-transition shape, e.g. ``[4]`` for CartPole observations, ``[]`` for scalars."""
    dtype: StrictStr = "float32"
    """Numpy dtype name or code, e.g. ``float32``, ``uint8``, ``int64``, ``bool``, ``<f4``."""

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        try:
            kind: str = np.dtype(value).kind
        except TypeError:
            kind = ""
        if kind not in tuple("biuf"):
            raise ValueError(f"expected a bool/int/uint/float numpy dtype name, got {value!r}")
        return value


class BufferConfig(StrictModel):
    """Fields every buffer config shares."""

    type: StrictStr
    """Registry name of the buffer (a key of ``BUFFER_REGISTRY``), e.g. ``replay``."""
    device: StrictStr = "cpu"
    """Torch device the samples are returned on (``cpu``, ``cuda``, ``cuda:1``, ``mps``)."""
    seed: Annotated[StrictInt, Field(ge=0)] | None = None
    """Seed (>= 0) of the sampler's random generator; ``None`` draws fresh OS entropy."""

    def to_kwargs(self) -> dict[str, Any]:
        """Constructor keyword arguments of the buffer (everything but ``type``)."""
        return self.model_dump(exclude={"type"})


class ReplayBufferConfig(BufferConfig):
    """Config of :class:`rlstore.buffers.replay.ReplayBuffer` (FIFO ring, uniform sampling)."""

    type: Literal["replay"] = "replay"
    """Registry name: always ``replay``."""
    capacity: StrictInt = Field(gt=0)
    """Total number of transitions kept (over all env columns), > 0."""
    num_envs: StrictInt = Field(default=1, gt=0)
    """Number of parallel environments writing one row each per step, > 0."""
    store_next_obs_once: StrictBool = True
    """Store each observation once and rebuild ``next_obs`` from the following row."""
    allow_nonfinite: StrictBool = False
    """Accept NaN/inf in float fields (rejected by default)."""
    specs: dict[str, FieldSpecConfig] | None = None
    """Explicit field schema ``{name: {shape, dtype}}`` (or the list of ``{name, shape,
    dtype}`` that ``ReplayBuffer.config()`` writes); ``None`` infers it from the first add."""
    storage: dict[str, Any] | None = None
    """Storage layout ``{kind: memory | memmap, directory, keep}`` (see
    ``rlstore.storage.StorageLayout``); ``None``: memory."""
    sampler: dict[str, Any] | None = None
    """Sampler ``{kind: uniform}`` or ``{kind: prioritized, alpha, beta, eps}``; ``None``:
    uniform."""

    @field_validator("specs", mode="before")
    @classmethod
    def _specs_list_to_dict(cls, value: Any) -> Any:
        if isinstance(value, list) and all(isinstance(v, Mapping) and "name" in v for v in value):
            names = [v["name"] for v in value]
            if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
                raise ValueError(f"expected distinct string names, got {names!r}")
            return {v["name"]: {k: x for k, x in v.items() if k != "name"} for v in value}
        return value

    def to_kwargs(self) -> dict[str, Any]:
        """Constructor kwargs; ``specs`` become :class:`rlstore.specs.FieldSpec` objects."""
        kwargs = super().to_kwargs()
        if self.specs is not None:
            kwargs["specs"] = {
                name: FieldSpec(name=name, shape=tuple(s.shape), dtype=np.dtype(s.dtype))
                for name, s in self.specs.items()
            }
        return kwargs


class IntrinsicStreamConfig(StrictModel):
    """RND-style intrinsic reward stream of a rollout buffer (see ``IntrinsicConfig``)."""

    int_gamma: float = Field(default=0.99, ge=0.0, le=1.0, strict=True)
    """Discount of the intrinsic (non-episodic) return, in [0, 1]."""
    ext_coef: float = Field(default=2.0, strict=True)
    """Weight of the extrinsic advantage in the combined advantage."""
    int_coef: float = Field(default=1.0, strict=True)
    """Weight of the intrinsic advantage in the combined advantage."""
    int_lam: float | None = Field(default=None, ge=0.0, le=1.0, strict=True)
    """GAE lambda of the intrinsic stream, in [0, 1]; ``None`` uses the buffer's ``lam``."""
    normalize_rewards: StrictBool = True
    """Divide intrinsic rewards by the running std of their discounted sum."""


class RolloutBufferConfig(BufferConfig):
    """Config of :class:`rlstore.buffers.rollout.RolloutBuffer` (on-policy, GAE)."""

    type: Literal["rollout"] = "rollout"
    """Registry name: always ``rollout``."""
    num_steps: StrictInt = Field(gt=0)
    """Steps T per env in one rollout, > 0."""
    num_envs: StrictInt = Field(gt=0)
    """Number of parallel environments N, > 0."""
    gamma: float = Field(default=0.99, ge=0.0, le=1.0, strict=True)
    """Discount factor in [0, 1]."""
    lam: float = Field(default=0.95, ge=0.0, le=1.0, strict=True)
    """GAE lambda in [0, 1] (0: one-step TD, 1: Monte-Carlo)."""
    advantage_normalization: Literal["none", "batch", "minibatch"] = "minibatch"
    """Advantage normalization: ``none``, over the whole ``batch``, or per ``minibatch``."""
    intrinsic: IntrinsicStreamConfig | None = None
    """Settings of an intrinsic reward stream; ``None`` for extrinsic rewards only."""

    def to_kwargs(self) -> dict[str, Any]:
        """Constructor kwargs; ``intrinsic`` becomes a ``buffers.rollout.IntrinsicConfig``."""
        kwargs = super().to_kwargs()
        if self.intrinsic is not None:
            kwargs["intrinsic"] = IntrinsicConfig(**self.intrinsic.model_dump())
        return kwargs


# name -> buffer class built by build_buffer
BUFFER_REGISTRY: dict[str, type] = {
    "replay": ReplayBuffer,
    "rollout": RolloutBuffer,
}
# name -> pydantic model validating that buffer's config
CONFIG_MODELS: dict[str, type[BufferConfig]] = {
    "replay": ReplayBufferConfig,
    "rollout": RolloutBufferConfig,
}


def register_buffer(name: str, target: type, config_model: type[BufferConfig]) -> None:
    """Register a buffer type for :func:`build_buffer`.

    Args:
        name: value of the ``type`` key in configs.
        target: the buffer class (its constructor takes the config's keys but ``type``).
        config_model: pydantic model (subclass of :class:`BufferConfig`) of its kwargs.
    """
    if not isinstance(target, type):
        raise ConfigError(
            f"target: expected a buffer class, got {target!r} "
            "(import paths such as 'module:Class' are not accepted)"
        )
    if not (isinstance(config_model, type) and issubclass(config_model, BufferConfig)):
        raise ConfigError(f"config_model: expected a BufferConfig subclass, got {config_model!r}")
    BUFFER_REGISTRY[name] = target
    CONFIG_MODELS[name] = config_model


_NAMES_ITS_KEY = re.compile(r"[A-Za-z_][\w.]*: ")
"""A model validator's message starts with the key it is about (``num_minibatches: ...``)."""


def _fields_at(model: type[BaseModel] | None, loc: list[str]) -> dict[str, Any]:
    """The fields of the (nested) model at ``loc`` inside ``model``; ``{}`` when unknown."""
    for part in loc:
        info = model.model_fields.get(part) if model is not None else None
        if info is None:
            return {}
        models = [
            a
            for a in (info.annotation, *get_args(info.annotation))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        model = models[0] if models else None
    return dict(model.model_fields) if model is not None else {}


def format_validation_error(
    exc: _PydanticValidationError, where: str = "config", model: type[BaseModel] | None = None
) -> str:
    """One readable message listing each bad key with what was expected and what arrived.

    The one formatter of pydantic errors in rlstore. Keys are dotted paths from ``model``
    (``online.num_envs``); one bad key gives one line, several give a header and a line each.
    With ``model`` given, unknown keys list the allowed ones and missing keys quote the
    field's description.
    """
    lines = []
    for err in exc.errors(include_url=False):
        loc = [str(p) for p in err["loc"]]
        key = ".".join(loc)
        kind = err["type"]
        msg = str(err["msg"])
        named = msg.removeprefix("Value error, ")
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, ConfigError):  # already formatted by a nested config
            lines.append(f"{key}: {cause}" if key else str(cause))
        elif kind == "extra_forbidden":
            fields = _fields_at(model, loc[:-1])
            allowed = f"; allowed keys: {', '.join(fields)}" if fields else ""
            lines.append(f"{key}: unknown key (got {err['input']!r}){allowed}")
        elif kind == "missing":
            info = _fields_at(model, loc[:-1]).get(loc[-1]) if loc else None
            desc = f" ({info.description})" if info is not None and info.description else ""
            lines.append(f"{key}: missing required key{desc}")
        elif kind == "value_error" and _NAMES_ITS_KEY.match(named):
            lines.append(f"{key}.{named}" if key else named)
        elif kind == "value_error" and ", got " in named:  # a validator's own full message
            lines.append(f"{key or '<root>'}: {named}")
        else:
            got = err.get("input")
            lines.append(f"{key or '<root>'}: {named}, got {got!r} ({type(got).__name__})")
    if len(lines) == 1:  # one bad key: one line (``where: key: what is wrong, got ...``)
        return f"{where}: {lines[0]}"
    return f"{where}: {len(lines)} invalid key(s):\n" + "\n".join(f"  {line}" for line in lines)


class _UniqueKeysLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last
    silently, so a duplicated section would drop the first one's settings)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if not isinstance(key, (str, int, float)):  # a list or mapping as a key: not ours
                continue
            if key in seen:
                line = key_node.start_mark.line + 1
                raise ConfigError(f"line {line}: key {key!r} given twice in one mapping")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 (PyYAML) reads ``1e-3`` and ``3E+4`` as strings (it wants a dot); YAML 1.2 and every
# user read them as floats. Configs are strict (a string is not a number), so the loader adds
# YAML 1.2's float forms. Integers keep PyYAML's resolver (``10`` stays an int).
_UniqueKeysLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)

_YAML11_ONLY_INT = re.compile(r"0[0-7_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+")
"""YAML 1.1's octal (``010``: 8) and base-60 (``1:30``: 90) ints, which YAML 1.2 and users read
as 10 and a string: refused, not silently read as 8 or 90."""


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(node.value)
    value = int(loader.construct_yaml_int(node))  # type: ignore[no-untyped-call]
    digits = text.lstrip("-+").replace("_", "")
    decimal = digits.isdigit() and abs(value) == int(digits)  # "07" is 7 either way
    if _YAML11_ONLY_INT.fullmatch(text.lstrip("-+")) and not decimal:
        raise ConfigError(
            f"line {node.start_mark.line + 1}: {text!r} is read as {value} by YAML 1.1 (an "
            "octal or base-60 int); write the int in decimal, or quote a string"
        )
    return value


_UniqueKeysLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def load_yaml(text: str) -> Any:
    """Parse YAML text the way every rlstore config is read: PyYAML's safe loader, plus YAML
    1.2's exponent floats (``1e-3``); a key given twice in one mapping, and an int that YAML 1.1
    reads unlike YAML 1.2 (octal ``010``, base-60 ``1:30``), are ConfigErrors."""
    return yaml.load(text, Loader=_UniqueKeysLoader)  # noqa: S506 (a SafeLoader)


def _unique_keys_json(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    for k in keys:
        if keys.count(k) > 1:
            raise ConfigError(f"key {k!r} given twice in one object")
    return dict(pairs)


def load_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML (``.yaml``/``.yml``) or JSON (``.json``) file holding one mapping.

    Raises:
        ConfigError: missing or unreadable file, unknown suffix, bytes that are not UTF-8, a
            parse error (with its position), or a top level that is not a mapping. An empty
            YAML file reads as ``{}`` (every key takes its default).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"path: expected a file path, got {type(path).__name__}")
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise ConfigError(
            f"path: expected a .yaml, .yml or .json file, got suffix {suffix!r} ({p})"
        )
    raw = read_file(p, "config file", ConfigError, "path")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: expected a UTF-8 text file ({exc})") from None
    try:
        if suffix == ".json":
            data = json.loads(text, object_pairs_hook=_unique_keys_json)
        else:
            data = load_yaml(text)
        if data is None and suffix != ".json":  # an empty YAML file: every key takes its default
            data = {}
    except ConfigError as exc:  # a duplicated key
        raise ConfigError(f"{p}: {exc}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{p}: invalid {'JSON' if suffix == '.json' else 'YAML'}: {exc}") from exc
    except ValueError as exc:  # JSONDecodeError, or an int of more than 4300 digits
        raise ConfigError(f"{p}: invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def validate_config(cfg: Mapping[str, Any] | str | os.PathLike[str]) -> BufferConfig:
    """Validate a buffer config (dict or file path) into its typed model.

    Raises:
        ConfigError: missing/unknown ``type``, unknown keys, wrong types, out-of-range values.
    """
    data = load_config_file(cfg) if isinstance(cfg, (str, os.PathLike)) else cfg
    if not isinstance(data, Mapping):
        raise ConfigError(f"cfg: expected a mapping or a file path, got {type(data).__name__}")
    kind = data.get("type")
    if kind is None:
        raise ConfigError(f"type: missing required key; expected one of {sorted(CONFIG_MODELS)}")
    if not isinstance(kind, str) or kind not in CONFIG_MODELS:
        raise ConfigError(f"type: expected one of {sorted(CONFIG_MODELS)}, got {kind!r}")
    return CONFIG_MODELS[kind].validate_mapping(data, f"{kind} buffer config")


def build_buffer(cfg: Mapping[str, Any] | str | os.PathLike[str]) -> Any:
    """Build a buffer from ``{"type": <registry name>, **kwargs}`` or a YAML/JSON file.

    Args:
        cfg: a mapping, or the path of a YAML/JSON file holding one.

    Returns:
        A new, empty buffer of the registered class.

    Raises:
        ConfigError: see :func:`validate_config`.
    """
    model = validate_config(cfg)
    return BUFFER_REGISTRY[model.type](**model.to_kwargs())
