"""PyTorchRL's ``MBReplayBuffer`` over :class:`~rlstore.buffers.model_based.ModelBasedReplay`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from rlstore._checks import as_device, check_count, real_number
from rlstore._trees import to_numpy
from rlstore.buffers.model_based import (
    ModelBasedReplay,
    StandardScaler,
    ensemble_minibatches,
    model_dataset,
)
from rlstore.compat._common import PyTorchRLStorage
from rlstore.compat.pytorchrl.protocols import ACT, DONE, DONE2, OBS, OBS2, REW, RHS, RHS2
from rlstore.errors import ConfigError, EmptyBufferError, SpecError
from rlstore.specs import FieldSpec, cast_to_spec

__all__ = ["MBReplayBuffer"]


def _rows(sample: Any, what: str, keys: Any = None) -> dict[str, np.ndarray]:
    """``{key: (L, ...) array}`` of a dict of tensors/arrays (None values, keys not in ``keys``
    skipped)."""
    if not isinstance(sample, Mapping):
        raise SpecError(f"{what}: expected a dict of tensors, got {type(sample).__name__}")
    out = {k: to_numpy(k, v) for k, v in sample.items() if v is not None and k in (keys or sample)}
    if scalar := [k for k, v in out.items() if v.ndim < 1]:
        raise SpecError(f"{scalar[0]}: expected a leading env axis, got a scalar")
    return out


class MBReplayBuffer(PyTorchRLStorage):
    """PyTorchRL's ``MBReplayBuffer(size, device, actor, algorithm, envs)``
    (``pytorchrl.agent.storages.model_based``): samples are dicts of PyTorchRL keys with a
    leading env axis ``N`` (``N`` rows per insert). ``actor.dynamics_model``'s
    ``reward_function`` (if set) drops the reward target, its ``ensemble_size`` is read when
    ``ensemble_size`` is None; Discrete actions are one-hot encoded. ``validation_ratio``,
    ``max_holdout``, ``ensemble_size``, ``seed``: rlstore's.

    Differences: rows are read oldest first across the wrap-around (PyTorchRL's ``[:step]``
    dropped the oldest) and keep the sample's dtype (PyTorchRL: float32); ``reset()`` empties;
    ``init_tensors`` allocates nothing; ``generate_batches`` holds out a random
    ``validation_ratio`` (at most ``max_holdout``), fits :attr:`scaler` on the train rows,
    honours ``num_epochs``, never yields an empty batch and bootstraps rows per ensemble member
    (``train_input`` ``(E, B, D)``, else ``(B, D)``); bad input raises a SpecError naming the key
    and stores nothing; dict values (recurrent states of several networks) are refused.
    """

    storage_tensors: ClassVar[tuple[str, ...]] = (OBS, RHS, DONE, ACT, REW, OBS2, RHS2, DONE2)

    def __init__(
        self, size: int, device: str | torch.device, actor: Any, algorithm: Any, envs: Any, *,
        validation_ratio: float = 0.2, max_holdout: int = 5000, ensemble_size: int | None = None,
        seed: int | np.random.Generator | None = None,
    ) -> None:  # fmt: skip
        if not 0.0 <= real_number("validation_ratio", validation_ratio) < 1.0:
            raise ConfigError(f"validation_ratio: expected [0, 1), got {validation_ratio!r}")
        self.max_holdout = check_count("max_holdout", max_holdout, minimum=0)
        if ensemble_size is not None:
            ensemble_size = check_count("ensemble_size", ensemble_size)
        self.device = as_device(device)
        self.core = ModelBasedReplay(size, seed=seed)
        self.max_size = self.core.max_size
        self.actor, self.algo, self.envs = actor, algorithm, envs
        self.validation_ratio, self.ensemble_size = float(validation_ratio), ensemble_size
        self.scaler: StandardScaler | None = None

    size = property(lambda self: self.core.size, doc="Number of stored transitions.")
    step = property(lambda self: self.core.step, doc="Physical write cursor.")
    data = property(lambda self: self.core.data, doc="The physical storage (not chronological).")

    def init_tensors(self, sample: Mapping[str, Any]) -> None:
        """Nothing to allocate ahead: the first insert allocates the storage."""

    def before_gradients(self) -> None:
        """Nothing to prepare: batches are built in :meth:`generate_batches`."""

    def after_gradients(self, batch: Any, info: dict[str, Any]) -> dict[str, Any]:
        """Returns ``info`` unchanged."""
        return info

    def insert_transition(self, sample: Mapping[str, Any]) -> None:
        """Append one vector step: ``N`` rows, one per env (the :attr:`storage_tensors` keys of
        the first sample; other keys are ignored, as in PyTorchRL)."""
        self.core.insert_data_slice(_rows(sample, "sample", self.storage_tensors))

    def insert_data_slice(self, new_data: Mapping[str, Any]) -> None:
        """Append rows ``{key: (L, ...)}`` at the cursor, wrapping (every key the same L)."""
        self.core.insert_data_slice(_rows(new_data, "new_data"))

    def insert_single_tensor_slice(
        self, tensor_storage: dict[str, np.ndarray], tensor_key: str, tensor_values: Any
    ) -> int:
        """Write ``tensor_values (L, ...)`` (lossless, finite) into ``tensor_storage[tensor_key]``
        from the cursor, wrapping, without moving it; returns ``L``."""
        v = _rows({tensor_key: tensor_values}, "tensor_values")[tensor_key]
        old = tensor_storage.get(tensor_key)  # absent or None (PyTorchRL's lazy data): allocate
        like = v if old is None else old
        spec = FieldSpec(tensor_key, like.shape[1:], like.dtype)
        v = cast_to_spec(tensor_key, v, spec, v.shape[:1], allow_nonfinite=False)
        if old is None:
            tensor_storage[tensor_key] = np.zeros((self.max_size, *spec.shape), spec.dtype)
        store = tensor_storage[tensor_key]
        n, keep = len(v), min(len(v), self.max_size)
        store[(self.core.step + n - keep + np.arange(keep)) % self.max_size] = v[n - keep :]
        return n

    def get_data_slice(self, start_pos: int, end_pos: int) -> dict[str, np.ndarray | None]:
        """Copies of chronological rows ``[start_pos, end_pos)`` (0: oldest); unstored keys None."""
        return dict.fromkeys(self.storage_tensors) | self.core.get_data_slice(start_pos, end_pos)

    def get_all_buffer_data(self, data_to_cpu: bool = False) -> dict[str, np.ndarray | None]:
        """:meth:`get_data_slice` of all stored rows (numpy arrays are always on the CPU)."""
        return self.get_data_slice(0, self.core.size)

    def reset(self) -> None:
        """Empty the buffer."""
        self.core.clear()

    def generate_batches(
        self, num_mini_batch: int | None = None, mini_batch_size: int = 256, num_epochs: int = 1
    ) -> Iterator[dict[str, Any]]:
        """``train_input``/``train_label``, ``holdout_input``/``holdout_label``, ``batch_number``,
        ``max_batches``, ``epoch``: inputs ``concat(obs, action)`` scaled by :attr:`scaler`,
        labels ``concat(next_obs - obs, reward)`` (no reward with a reward function)."""
        if self.core.size < 2:
            raise EmptyBufferError(f"generate_batches: need >= 2 transitions, got {self.size}")
        model = getattr(self.actor, "dynamics_model", None)
        members = self.ensemble_size or getattr(model, "ensemble_size", None)
        split = self.core.train_validation_split(
            self.validation_ratio, self.max_holdout, ensemble_size=int(members or 1)
        )
        if members is None:  # one model: every train row once per epoch, no bootstrap
            split = split._replace(bootstrap=np.arange(split.train.size, dtype=np.int64)[None])
        space = getattr(self.envs, "single_action_space", getattr(self.envs, "action_space", None))
        n_act = None if getattr(space, "n", None) is None else int(space.n)  # type: ignore[union-attr]
        reward_key = None if getattr(model, "reward_function", None) is not None else REW
        ds = model_dataset(
            self.core.get_all(), split, keys=(OBS, ACT, OBS2, reward_key), num_actions=n_act
        )
        self.scaler = ds.scaler
        arrays = {"holdout_input": ds.holdout_inputs, "holdout_label": ds.holdout_targets}
        hold = {k: torch.as_tensor(v, device=self.device) for k, v in arrays.items()}
        max_batches = -(-ds.train_inputs.shape[0] // mini_batch_size)
        for mb in ensemble_minibatches(ds, mini_batch_size, num_epochs, seed=self.core.rng):
            x, y = (mb.inputs, mb.targets) if members is not None else (mb.inputs[0], mb.targets[0])
            yield {"train_input": torch.as_tensor(x, device=self.device),
                   "train_label": torch.as_tensor(y, device=self.device), **hold,
                   "batch_number": mb.batch_number, "max_batches": max_batches,
                   "epoch": mb.epoch}  # fmt: skip
