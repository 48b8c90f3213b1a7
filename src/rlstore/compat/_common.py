"""What the facades share: checks under the original's argument names, one transition layout
over :class:`rlstore.ReplayBuffer`, config-file constructors, PyTorchRL's storage API."""

from __future__ import annotations

import inspect
import numbers
import os
import sys
from collections.abc import Callable, Mapping
from functools import partial, update_wrapper
from typing import Any, ClassVar

import numpy as np
import torch

from rlstore._checks import real_number
from rlstore._trees import flag_array, to_numpy
from rlstore.buffers.replay import ReplayBatch, ReplayBuffer
from rlstore.config import PositiveInt, StrictModel, load_config_file
from rlstore.errors import ConfigError, RLStoreError, SpecError
from rlstore.specs import FieldSpec, cast_to_spec

_F32 = np.dtype(np.float32)


def rows(
    name: str, x: Any, b: int, shape: tuple[int, ...], *, flags: bool = False, batched: bool = True
) -> np.ndarray:
    """``x`` as ``(b, *shape)`` rows of finite float32 (lossless casts only) or, with ``flags``,
    of bools (bools or exact 0/1); singleton axes may differ (``(B, 1)`` rewards)."""
    a, full = to_numpy(name, x), (b, *shape)
    if a.shape != full and [d for d in a.shape if d != 1] == [d for d in full if d != 1]:
        a = a.reshape(full)
    if a.shape != full:
        want = f"shape {full}" if batched else f"shape {shape}" if shape else "a scalar"
        raise SpecError(f"{name}: expected {want}, got {a.shape}")
    if flags:
        return flag_array(name, a, b)
    return cast_to_spec(name, a, FieldSpec(name, shape, _F32), (b,), allow_nonfinite=False)


def transition_core(
    capacity: int, obs_dim: int, act_dim: int, *, seed: Any, device: Any = "cpu", **extras: int
) -> ReplayBuffer:
    """A one-env :class:`ReplayBuffer`: float32 ``obs (obs_dim,)``, ``action (act_dim,)``,
    ``reward``, a vector per ``extras`` name, and ``terminated`` / ``truncated`` flags."""
    shapes = {"obs": (obs_dim,), "action": (act_dim,), "reward": ()}
    shapes |= {k: (d,) for k, d in extras.items()}
    specs = {k: FieldSpec(k, s, _F32) for k, s in shapes.items()}
    specs |= {k: FieldSpec(k, (), np.dtype(np.bool_)) for k in ("terminated", "truncated")}
    return ReplayBuffer(capacity, specs=specs, device=device, seed=seed)


def write(core: ReplayBuffer, fields: tuple[np.ndarray, ...], **extras: np.ndarray) -> None:
    """Append checked rows ``(B, ...)`` (obs, action, reward, next_obs, terminated, truncated,
    ``extras``) to the env column of ``core``, oldest first."""
    if len(fields[0]):
        core.extend(*(f[:, None] for f in fields), **{k: v[:, None] for k, v in extras.items()})


def sampled(batch: ReplayBatch) -> tuple[torch.Tensor, ...]:
    """``(obs, action, reward, next_obs, terminated as float32)`` of a sampled batch."""
    done = batch.terminated.to(torch.float32)
    return batch.obs, batch.action, batch.reward, batch.next_obs, done  # type: ignore[return-value]


class DimsConfig(StrictModel):
    """The keys shared by ``src.buffers``' config schemas (the original's strictyaml ``Map``)."""

    obs_dim: PositiveInt
    """Observation dimension, > 0."""
    act_dim: PositiveInt
    """Action dimension, > 0."""
    size: PositiveInt
    """Buffer size: steps kept, > 0."""
    batch_size: PositiveInt
    """Minibatch size, 0 < batch_size <= size."""


class FromConfig:
    """``src.buffers``' config constructors over a pydantic ``schema`` (the original's
    strictyaml ``Map``); files may be YAML or JSON."""

    schema: ClassVar[type[StrictModel]]

    @classmethod
    def instantiate_from_config(cls, config_file_location: str | os.PathLike[str]) -> Any:
        """Build from a config file with the :attr:`schema` keys (ConfigError otherwise)."""
        return cls.instantiate_from_config_dict(load_config_file(config_file_location))

    @classmethod
    def instantiate_from_config_dict(cls, config: Mapping[str, Any]) -> Any:
        """Build from a dict with the :attr:`schema` keys; bad keys and constructor errors
        (``batch_size > size``) in one ConfigError."""
        values = cls.schema.validate_mapping(config, cls.__name__).model_dump()
        try:
            return cls(**values)
        except ConfigError:
            raise
        except RLStoreError as exc:
            raise ConfigError(str(exc)) from exc


def create_factory(cls: type, size: int, *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """A function ``(device, actor, algorithm, envs) -> buffer``; ``args`` / ``kwargs``: the
    other constructor arguments (``gae_lambda``, ``validation_ratio``, ...)."""

    def create_buffer_instance(device: Any, actor: Any, algorithm: Any, envs: Any) -> Any:
        return cls(size, device, actor, algorithm, envs, *args, **kwargs)

    return create_buffer_instance


class PyTorchRLStorage:
    """PyTorchRL's ``create_factory`` and ``update_storage_parameter``."""

    create_factory: ClassVar[Callable[..., Callable[..., Any]]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """``cls.create_factory``, signed as the constructor less device, actor, algorithm, envs."""
        super().__init_subclass__(**kwargs)
        factory: Any = update_wrapper(partial(create_factory, cls), create_factory)
        p = [*inspect.signature(cls).parameters.values()]  # size, device, actor, algorithm, envs
        factory.__signature__ = inspect.Signature(p[:1] + p[5:])
        cls.create_factory = factory

    def update_storage_parameter(self, parameter_name: str, new_parameter_value: float) -> None:
        """Set the numeric attribute ``parameter_name`` (e.g. ``gae_lambda``), keeping its type;
        ConfigError for another name (PyTorchRL ignored it) or a non-finite (int attribute:
        non-integral) value."""
        current = None if parameter_name.startswith("_") else getattr(self, parameter_name, None)
        prop = isinstance(getattr(type(self), parameter_name, None), property)
        if prop or isinstance(current, bool | np.bool_) or not isinstance(current, numbers.Real):
            raise ConfigError(f"parameter_name: {parameter_name!r} is not a numeric parameter of "
                              f"{type(self).__name__}")  # fmt: skip
        big, integral = sys.float_info.max, isinstance(current, numbers.Integral)
        want = "a number (finite, integral)" if integral else "a number (finite)"
        value = real_number("new_parameter_value", new_parameter_value, -big, big, expected=want)
        if integral and not value.is_integer():  # 2.5 is never stored as 2
            raise ConfigError(f"new_parameter_value: expected {want}, got {new_parameter_value!r}")
        kind: Any = type(current)  # keeps an int an int, a float a float
        setattr(self, parameter_name, kind(value))
