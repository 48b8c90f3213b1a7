"""velora's ``velora.buffer`` (``ReplayBuffer``, ``BufferBase``, ``BatchExperience``) over a
one-env :class:`rlstore.ReplayBuffer`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from rlstore._checks import as_device, check_count, check_keys
from rlstore._trees import to_numpy
from rlstore.buffers.replay import ReplayBuffer as _Core
from rlstore.checkpoint._state import load_state_file, load_verified, save_state
from rlstore.compat._common import rows, sampled, transition_core, write
from rlstore.config import PositiveInt, StrictModel
from rlstore.errors import CapacityError, CheckpointError, ConfigError, SpecError

__all__ = ["BatchExperience", "BufferBase", "ReplayBuffer", "BufferConfig"]

_CLASS_NAME = "velora.ReplayBuffer"
_DIMS = ("capacity", "state_dim", "action_dim", "hidden_dim")
_NAMES = ("state", "action", "reward", "next_state", "done", "hidden")
_FIELDS = ("states", "actions", "rewards", "next_states", "dones", "hiddens")

TensorLike = torch.Tensor | np.ndarray  # plain Python numbers are accepted for scalars


@dataclass(frozen=True)
class BatchExperience:
    """A batch of experience: float32 ``(batch_size, features)`` tensors on the device;
    ``dones`` is 1.0 where the episode *terminated* (truncations bootstrap: 0 here)."""

    states: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_states: torch.Tensor
    dones: torch.Tensor
    hiddens: torch.Tensor


class BufferConfig(StrictModel):
    """velora's buffer config model (``ReplayBuffer.config()``)."""

    type: Literal["ReplayBuffer"] = "ReplayBuffer"
    """Buffer class name."""
    capacity: PositiveInt
    """Total capacity of the buffer (transitions)."""
    state_dim: PositiveInt
    """Dimension of state observations."""
    action_dim: PositiveInt
    """Dimension of actions."""
    hidden_dim: PositiveInt
    """Dimension of the actor hidden state."""


def _count(name: str, x: Any) -> int:
    a = to_numpy(name, x)
    return int(a.shape[0]) if a.ndim else 1


class BufferBase(ABC):
    """velora's ``BufferBase(capacity, state_dim, action_dim, hidden_dim, *, device=None)``;
    ``seed`` (rlstore) seeds the sampler, whose state :meth:`save` keeps.

    Differences: ``done`` is stored as a *termination*; ``add_multi(truncated=...)`` (rlstore)
    and ``warm`` store time-limit ends as truncations, which bootstrap (``dones`` 0). ``warm``
    drops gymnasium's next-step autoreset pseudo-transitions and raises for ``n_samples >
    capacity`` (velora loops forever). Bad input raises an :mod:`rlstore.errors` class (a
    ``ValueError``) naming velora's argument and stores nothing. ``save`` is atomic, its
    metadata file rlstore's checksummed sidecar (:meth:`metadata` under ``"metadata"``);
    ``load_state_dict`` of velora's layout restarts the sampler from the seed (an exact resume
    goes through :meth:`checkpoint_state`). ``device=None`` reads as ``torch.device("cpu")``.
    """

    def __init__(
        self, capacity: int, state_dim: int, action_dim: int, hidden_dim: int, *,
        device: torch.device | str | None = None, seed: int | None = None,
    ) -> None:  # fmt: skip
        dims = (capacity, state_dim, action_dim, hidden_dim)
        self.capacity, self.state_dim, self.action_dim, self.hidden_dim = (
            check_count(k, v) for k, v in zip(_DIMS, dims, strict=True)
        )
        self.device = torch.device("cpu") if device is None else as_device(device)
        self._device_given, self._seed = device is not None, seed
        self._core = self._new_core()

    def _new_core(self) -> _Core:
        return transition_core(self.capacity, self.state_dim, self.action_dim, seed=self._seed,
                               device=self.device, hidden=self.hidden_dim)  # fmt: skip

    def add(
        self, state: TensorLike, action: TensorLike, reward: float | TensorLike,
        next_state: TensorLike, done: bool | TensorLike, hidden: TensorLike,
    ) -> None:  # fmt: skip
        """Adds a single experience: :meth:`add_multi` without the ``B`` axis."""
        self._write(self._core, 1, "", state, action, reward, next_state, done, hidden)

    def add_multi(
        self, states: TensorLike, actions: TensorLike, rewards: TensorLike,
        next_states: TensorLike, dones: TensorLike, hiddens: TensorLike, *,
        truncated: TensorLike | None = None,
    ) -> None:  # fmt: skip
        """Adds ``B`` experiences, oldest first (singleton axes optional: ``(B, 1)`` rewards);
        ``truncated`` (rlstore): ``(B,)`` flags storing those ended episodes as truncations."""
        args = (states, actions, rewards, next_states, dones, hiddens)
        self._write(self._core, _count("states", states), "s", *args, truncated=truncated)

    def _write(self, core: _Core, b: int, s: str, *args: Any, truncated: Any = None) -> None:
        """Check ``b`` experiences under velora's names (plural suffix ``s``), then append."""
        S, A, H = (self.state_dim,), (self.action_dim,), (self.hidden_dim,)
        obs, act, rew, nxt, done, hidden = (
            rows(k + s, x, b, d, flags=k == "done")
            for k, x, d in zip(_NAMES, args, (S, A, (), S, (), H), strict=True)
        )
        trunc = np.zeros(b, bool)
        if truncated is not None:
            trunc = rows("truncated", truncated, b, (), flags=True)
        write(core, (obs, act, rew, nxt, done & ~trunc, done & trunc), hidden=hidden)

    @abstractmethod
    def sample(self) -> BatchExperience:
        """Samples experience from the buffer (:meth:`ReplayBuffer.sample` adds ``batch_size``)."""

    def __len__(self) -> int:
        """Gets the current size of the buffer."""
        return len(self._core)

    def metadata(self) -> dict[str, Any]:
        """Gets the metadata: the dims, position (next write slot), size and device."""
        position = int(self._core.metadata()["rows_written"]) % self.capacity
        device = str(self.device) if self._device_given else None
        return {**self._dims(), "position": position, "size": len(self), "device": device}

    def _dims(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in _DIMS}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """velora's ``Dict[str, Tensor]``: the stored items as CPU tensors, oldest first, under
        the :class:`BatchExperience` names (an exact resume needs :meth:`checkpoint_state`)."""
        d = self._core.gather(np.arange(len(self), dtype=np.int64))
        cols = (d["obs"], d["action"], d["reward"][:, None], d["next_obs"],
                d["terminated"][:, None].astype(np.float32), d["hidden"])  # fmt: skip
        return {k: torch.from_numpy(np.ascontiguousarray(c)) for k, c in zip(_FIELDS, cols)}  # noqa: B905

    def checkpoint_state(self) -> dict[str, Any]:
        """``{"core": ...}``: the rlstore buffer state (ring, cursor, sampler RNG) that
        :meth:`save` writes and :meth:`load_state_dict` restores exactly."""
        return {"core": self._core.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`checkpoint_state` exactly, or a velora :meth:`state_dict`'s contents
        (the sampler restarts from the seed); CheckpointError otherwise, the buffer unchanged."""
        if not isinstance(sd, dict):
            raise CheckpointError(f"state_dict: expected a dict, got {type(sd).__name__}")
        if "core" in sd:
            return self._core.load_state_dict(sd["core"])
        check_keys("state_dict", sd, _FIELDS)
        try:
            if (n := _count("states", sd["states"])) > self.capacity:
                raise SpecError(f"states: expected <= capacity={self.capacity} rows, got {n}")
            self._write(core := self._new_core(), n, "s", *(sd[k] for k in _FIELDS))
        except SpecError as exc:
            raise CheckpointError(f"state_dict: {exc}") from exc
        self._core = core

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BufferBase:
        """An empty buffer from the ``config`` recorded by :meth:`save` (dims, device, seed)."""
        if missing := [k for k in _DIMS if k not in config]:
            raise CheckpointError(f"config: missing key {missing[0]!r}")
        dims = (config[k] for k in _DIMS)
        return cls(*dims, device=config.get("device"), seed=config.get("seed"))

    def save(self, dirpath: str | Path, prefix: str = "buffer_") -> None:
        """Saves ``<dirpath>/<prefix>state.safetensors`` and ``<prefix>metadata.json``."""
        save_state(dirpath, self.checkpoint_state(), prefix=prefix, class_name=_CLASS_NAME,
                   config=self._dims(), metadata=self.metadata())  # fmt: skip

    @classmethod
    def load(cls, state_path: str | Path, metadata: dict[str, Any]) -> BufferBase:
        """Restores a buffer from :meth:`save`'s state file (``.safetensors`` suffix optional, as
        in velora) and the dict of its metadata file (checksum verified) or a :meth:`metadata`
        dict. CheckpointError: a missing or damaged file, or metadata that does not describe it."""
        if isinstance(state_path, str | Path) and not str(state_path).endswith(".safetensors"):
            state_path = f"{state_path}.safetensors"  # not with_suffix: a prefix may hold a dot
        if not isinstance(metadata, dict):
            raise CheckpointError(f"metadata: expected a dict, got {type(metadata).__name__}")
        if "save_id" in metadata:  # the metadata file's contents
            state, record = load_verified(state_path, metadata), metadata
        else:  # the state file describes itself
            state, record = load_state_file(state_path)
        if record.get("class") != _CLASS_NAME:
            raise CheckpointError(f"{state_path}: expected a {_CLASS_NAME} checkpoint, got "
                                  f"{record.get('class')!r}")  # fmt: skip
        described, config = metadata.get("metadata", metadata), record.get("config") or {}
        for key in [k for k in _DIMS if k in described and described[k] != config.get(k)]:
            raise CheckpointError(f"metadata.{key}: expected {config.get(key)!r} (state file), "
                                  f"got {described[key]!r}")  # fmt: skip
        buf = cls.from_config({**config, "device": described.get("device")})
        buf.load_state_dict(state)
        return buf


class ReplayBuffer(BufferBase):
    """velora's buffer for off-policy agents (FIFO, uniform sampling with replacement; where it
    differs from velora: :class:`BufferBase`)."""

    def config(self) -> BufferConfig:
        """Creates a buffer config model (type, capacity, state_dim, action_dim, hidden_dim)."""
        return BufferConfig(**self._dims())

    def sample(self, batch_size: int) -> BatchExperience:  # type: ignore[override]  # as velora
        """Samples ``0 < batch_size <= len(self)`` experiences uniformly with replacement."""
        batch = self._core.sample(batch_size)
        obs, act, rew, nxt, done = sampled(batch)
        return BatchExperience(obs, act, rew[:, None], nxt, done[:, None], batch.extras["hidden"])

    def warm(
        self, agent: Any, n_samples: int, num_envs: int = 8, *, seed: int | None = None
    ) -> None:
        """Warms the buffer to ``n_samples <= capacity`` experiences from ``agent.predict(states,
        hidden, train_mode=True)`` in ``gymnasium.make_vec(agent.env.spec.id, num_envs >= 2)``
        (zeros stored for a ``None`` hidden); ``seed`` seeds the resets (rlstore)."""
        import gymnasium as gym

        from rlstore.vector import collect

        check_count("num_envs", num_envs, minimum=2, error=ConfigError)
        if check_count("n_samples", n_samples) > self.capacity:
            raise CapacityError(f"n_samples: expected 0 < n_samples <= capacity={self.capacity}, "
                                f"got {n_samples}")  # fmt: skip
        hidden = None

        def act(states: np.ndarray) -> np.ndarray:
            nonlocal hidden
            obs = torch.as_tensor(states, dtype=torch.float32, device=self.device)
            actions, hidden = agent.predict(obs, hidden, train_mode=True)
            return to_numpy("actions", actions)

        envs = gym.make_vec(agent.env.spec.id, num_envs=num_envs, vectorization_mode="sync")
        try:
            steps = collect(envs, act, 1 << 62, seed=seed)
            while len(self) < n_samples:
                tr = next(steps)
                keep = np.flatnonzero(tr.valid)[: n_samples - len(self)]
                h = np.zeros((num_envs, self.hidden_dim)) if hidden is None else hidden
                new = (tr.obs, tr.action.reshape(num_envs, -1), tr.reward, tr.next_obs,
                       tr.terminated | tr.truncated, to_numpy("hidden", h))  # fmt: skip
                self._write(self._core, keep.size, "s", *(np.asarray(x)[keep] for x in new),
                            truncated=(tr.truncated & ~tr.terminated)[keep])  # fmt: skip
        finally:
            envs.close()
