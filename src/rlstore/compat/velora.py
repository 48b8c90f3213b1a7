"""velora's buffer API (``velora.buffer``) as a facade over :class:`rlstore.ReplayBuffer`.

Signatures follow the velora documentation: ``ReplayBuffer(capacity, state_dim, action_dim,
hidden_dim, *, device=None)`` with ``add``, ``add_multi``, ``sample(batch_size) ->
BatchExperience``, ``warm(agent, n_samples, num_envs=8)``, ``save(dirpath, prefix="buffer_")``
writing ``<prefix>metadata.json`` and ``<prefix>state.safetensors``, the classmethod
``load(state_path, metadata)``, ``metadata()``, ``state_dict()``, ``config()`` and ``len()``.

Storage, sampling and persistence are rlstore's: each state is stored once, the sampler is
seeded (``seed=`` keyword, an rlstore addition) and saved, so a loaded buffer draws exactly the
samples the original would have, and ``save`` is crash-safe (:mod:`rlstore.checkpoint`).

Differences from velora, all in the direction of correctness:

* ``done`` given to ``add``/``add_multi`` is stored as *termination* (no bootstrap), since that
  is what a single flag can say. ``warm`` sees the env's ``terminated`` and ``truncated``
  separately and stores both; ``BatchExperience.dones`` is ``terminated``, so time-limit ends
  bootstrap from ``next_states`` as they should.
* ``warm`` drops gymnasium's next-step autoreset pseudo-transitions (final obs -> reset obs),
  which velora stores, and raises instead of looping forever when ``n_samples > capacity``.
* Errors are :mod:`rlstore.errors` classes (all ``ValueError`` subclasses, like velora's).

Example:
    >>> import torch
    >>> buf = ReplayBuffer(100, state_dim=4, action_dim=1, hidden_dim=8, seed=0)
    >>> buf.add(torch.zeros(4), torch.tensor([1.0]), 1.0, torch.ones(4), False, torch.zeros(8))
    >>> buf.sample(1).rewards.shape
    torch.Size([1, 1])
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch

from rlstore import checkpoint
from rlstore._checks import as_device, check_count
from rlstore._trees import to_numpy
from rlstore.buffers.replay import ReplayBuffer as _CoreReplayBuffer
from rlstore.config import PositiveInt, StrictModel
from rlstore.errors import CapacityError, CheckpointError, ConfigError, SpecError
from rlstore.specs import FieldSpec, as_flags, cast_to_spec

__all__ = ["BatchExperience", "BufferBase", "ReplayBuffer", "BufferConfig"]

_CLASS_NAME = "velora.ReplayBuffer"


@dataclass(frozen=True)
class BatchExperience:
    """A batch of agent experience; every field is ``(batch_size, features)`` on the device.

    Attributes:
        states: ``(B, state_dim)`` float32 observations.
        actions: ``(B, action_dim)`` float32 actions taken in ``states``.
        rewards: ``(B, 1)`` float32 rewards.
        next_states: ``(B, state_dim)`` float32 true successors (final obs of ended episodes).
        dones: ``(B, 1)`` float32, 1.0 where the episode *terminated* (use ``1 - dones`` as
            the bootstrap mask; truncated transitions have 0 here).
        hiddens: ``(B, hidden_dim)`` float32 actor hidden states.
    """

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


def _rows(name: str, x: Any, batch: int | None, dim: int | None) -> np.ndarray:
    """``x`` as ``(batch, dim)`` (``dim=None``: ``(batch,)``), accepting singleton axes."""
    a = to_numpy(name, x)
    want = tuple(d for d in (batch, dim) if d is not None)
    if a.shape != want and a.size == math.prod(want):
        a = a.reshape(want)  # e.g. (1, 4) for one state, (B, 1) rewards, () for a 1-dim action
    if a.shape != want:
        raise SpecError(f"{name}: expected shape {want}, got {a.shape}")
    return a


_F32 = np.dtype(np.float32)


def _floats(name: str, x: Any, batch: int, dim: int | None) -> np.ndarray:
    """``_rows`` as finite float32 (lossless casts only), errors named by velora's argument."""
    a = _rows(name, x, batch, dim)
    return cast_to_spec(
        name, a, FieldSpec(name, a.shape[1:], _F32), (batch,), allow_nonfinite=False
    )


_SINGLE = ("state", "action", "reward", "next_state", "done", "hidden", "truncated")
_MULTI = ("states", "actions", "rewards", "next_states", "dones", "hiddens", "truncated")
_FIELDS = ("states", "actions", "rewards", "next_states", "dones", "hiddens")


TensorLike = torch.Tensor | np.ndarray
"""A torch tensor or numpy array (plain Python numbers are accepted for scalars)."""


def _device(device: torch.device | str | None) -> torch.device:
    return torch.device("cpu") if device is None else as_device(device)


class BufferBase(ABC):
    """A base class for all buffers: stores experiences (states, actions, rewards,
    next_states, dones, hiddens) as individual items in preallocated arrays.

    Args:
        capacity: the total capacity of the buffer (> 0).
        state_dim: dimension of state observations.
        action_dim: dimension of actions.
        hidden_dim: dimension of the actor hidden state.
        device: the device sampled tensors are put on (``None``: CPU).
        seed: seed of the sampler (rlstore addition; ``None`` draws OS entropy).
    """

    def __init__(
        self,
        capacity: int,
        state_dim: int,
        action_dim: int,
        hidden_dim: int,
        *,
        device: torch.device | str | None = None,
        seed: int | None = None,
    ) -> None:
        for name, v in (
            ("capacity", capacity),
            ("state_dim", state_dim),
            ("action_dim", action_dim),
            ("hidden_dim", hidden_dim),
        ):
            check_count(name, v)
        self.capacity = int(capacity)
        self.state_dim, self.action_dim = int(state_dim), int(action_dim)
        self.hidden_dim = int(hidden_dim)
        self.device = _device(device)
        self._device_given = device is not None
        self._seed = seed
        specs = {
            "obs": FieldSpec("obs", (self.state_dim,), np.dtype(np.float32)),
            "action": FieldSpec("action", (self.action_dim,), np.dtype(np.float32)),
            "reward": FieldSpec("reward", (), np.dtype(np.float32)),
            "terminated": FieldSpec("terminated", (), np.dtype(np.bool_)),
            "truncated": FieldSpec("truncated", (), np.dtype(np.bool_)),
            "hidden": FieldSpec("hidden", (self.hidden_dim,), np.dtype(np.float32)),
        }
        self._core = _CoreReplayBuffer(self.capacity, specs=specs, device=self.device, seed=seed)

    # ------------------------------------------------------------------ writing
    def add(
        self,
        state: TensorLike,
        action: TensorLike,
        reward: float | TensorLike,
        next_state: TensorLike,
        done: bool | TensorLike,
        hidden: TensorLike,
    ) -> None:
        """Adds a single experience to the buffer.

        Args:
            state: current state observation, ``(state_dim,)`` (or ``(1, state_dim)``).
            action: action taken, ``(action_dim,)`` (a scalar when ``action_dim == 1``).
            reward: reward received.
            next_state: next state observation, ``(state_dim,)``.
            done: whether the episode ended (stored as termination: no bootstrap).
            hidden: actor hidden state, ``(hidden_dim,)``.

        Raises:
            SpecError: as :meth:`add_multi`, naming ``state``, ``done``, ...
        """
        self._store(_SINGLE, 1, state, action, reward, next_state, done, hidden, None)

    def add_multi(
        self,
        states: TensorLike,
        actions: TensorLike,
        rewards: TensorLike,
        next_states: TensorLike,
        dones: TensorLike,
        hiddens: TensorLike,
        *,
        truncated: TensorLike | None = None,
    ) -> None:
        """Adds a set of ``B`` experiences to the buffer, oldest first.

        Args:
            states: ``(B, state_dim)`` current state observations.
            actions: ``(B, action_dim)`` (or ``(B,)`` when ``action_dim == 1``) actions taken.
            rewards: ``(B,)`` or ``(B, 1)`` rewards received.
            next_states: ``(B, state_dim)`` next state observations.
            dones: ``(B,)`` or ``(B, 1)`` whether the episode ended.
            hiddens: ``(B, hidden_dim)`` actor hidden states.
            truncated: optional ``(B,)`` time-limit flags (rlstore addition): an ended
                episode is stored as terminated where this is False, as truncated (bootstrap
                from ``next_states``) where it is True.

        Raises:
            SpecError: naming the argument: a shape that does not match the dims, NaN/inf, a
                value that is not a number, or flags other than bools or exact 0/1; nothing is
                stored then.
        """
        s = to_numpy("states", states)
        b = s.shape[0] if s.ndim >= 1 else 1
        self._store(_MULTI, b, s, actions, rewards, next_states, dones, hiddens, truncated)

    def _store(self, names: tuple[str, ...], b: int, *values: Any) -> None:
        """Validate ``b`` experiences under velora's argument ``names``, then store them."""
        ns, na, nr, nn, nd, nh, nt = names
        states, actions, rewards, next_states, dones, hiddens, truncated = values
        s = _floats(ns, states, b, self.state_dim)
        act = _floats(na, actions, b, self.action_dim)
        rew = _floats(nr, rewards, b, None)
        nxt = _floats(nn, next_states, b, self.state_dim)
        hid = _floats(nh, hiddens, b, self.hidden_dim)
        dn = as_flags(nd, _rows(nd, dones, b, None))
        tr = np.zeros(b, bool) if truncated is None else as_flags(nt, _rows(nt, truncated, b, None))
        args = (s[:, None], act[:, None], rew[:, None], nxt[:, None], (dn & ~tr)[:, None],
                (dn & tr)[:, None])  # fmt: skip
        hidden = hid[:, None]
        if b == 1:  # one row of the single env column
            self._core.add(*(a[0] for a in args), hidden=hidden[0])
        elif b > 1:
            self._core.extend(*args, hidden=hidden)

    # ------------------------------------------------------------------ reading
    @abstractmethod
    def sample(self, batch_size: int) -> BatchExperience:
        """Samples experience from the buffer (see :meth:`ReplayBuffer.sample`)."""

    def __len__(self) -> int:
        """Gets the current size of the buffer."""
        return len(self._core)

    def _position(self) -> int:
        return int(self._core.metadata()["rows_written"]) % self.capacity

    def metadata(self) -> dict[str, Any]:
        """Gets the metadata of the buffer: capacity, state_dim, action_dim, hidden_dim,
        position (next write slot in ``[0, capacity)``), size and device."""
        return {
            "capacity": self.capacity,
            "state_dim": self.state_dim,
            "action_dim": self.action_dim,
            "hidden_dim": self.hidden_dim,
            "position": self._position(),
            "size": len(self),
            "device": str(self.device) if self._device_given else None,
        }

    def _all(self) -> dict[str, np.ndarray]:
        n = len(self)
        if n == 0:
            return {
                "obs": np.zeros((0, self.state_dim), np.float32),
                "action": np.zeros((0, self.action_dim), np.float32),
                "reward": np.zeros(0, np.float32),
                "next_obs": np.zeros((0, self.state_dim), np.float32),
                "terminated": np.zeros(0, bool),
                "hidden": np.zeros((0, self.hidden_dim), np.float32),
            }
        return self._core.gather(np.arange(n, dtype=np.int64))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Return a dictionary containing the buffer's state (velora's ``Dict[str, Tensor]``).

        Exactly ``states``, ``actions``, ``rewards``, ``next_states``, ``dones`` and
        ``hiddens``: CPU tensors of the ``len(self)`` stored items, oldest first, shaped like a
        :class:`BatchExperience`. What an exact resume needs besides (cursor, sampler RNG,
        truncation flags) is in :meth:`checkpoint_state`, which :meth:`save` writes.
        """
        data = self._all()
        return {
            "states": torch.from_numpy(data["obs"]),
            "actions": torch.from_numpy(data["action"]),
            "rewards": torch.from_numpy(data["reward"]).unsqueeze(1),
            "next_states": torch.from_numpy(data["next_obs"]),
            "dones": torch.from_numpy(data["terminated"].astype(np.float32)).unsqueeze(1),
            "hiddens": torch.from_numpy(data["hidden"]),
        }

    def checkpoint_state(self) -> dict[str, Any]:
        """Everything an exact resume needs: ``{"core": ...}``, the rlstore buffer state (ring,
        cursor, side stores, sampler RNG). :meth:`save` and :func:`rlstore.checkpoint.save`
        write this; :meth:`load_state_dict` restores it exactly."""
        return {"core": self._core.state_dict()}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`checkpoint_state` output exactly, or the contents of a velora
        :meth:`state_dict` (stored again oldest first; ``dones`` as terminations; the sampler
        keeps its current state).

        Raises:
            CheckpointError: neither layout, or values that do not fit this buffer; the buffer
                is unchanged then.
        """
        if not isinstance(sd, dict):
            raise CheckpointError(f"state_dict: expected a dict, got {type(sd).__name__}")
        if "core" in sd:
            self._core.load_state_dict(sd["core"])
            return
        if sorted(sd) != sorted(_FIELDS):
            raise CheckpointError(
                f"state_dict: expected keys {sorted(_FIELDS)} (or 'core'), got {sorted(sd)}"
            )
        old, self._core = (
            self._core,
            _CoreReplayBuffer(
                self.capacity, specs=self._core.specs, device=self.device, seed=self._seed
            ),
        )
        self._core._sampler = old._sampler  # contents are replaced, the random stream goes on
        try:
            n = int(to_numpy("states", sd["states"]).shape[0])
            if n > self.capacity:
                raise SpecError(f"states: expected <= capacity={self.capacity} rows, got {n}")
            self.add_multi(*(sd[k] for k in _FIELDS))
        except BaseException as exc:
            self._core = old
            if isinstance(exc, (SpecError, IndexError)):
                raise CheckpointError(f"state_dict: {exc}") from exc
            raise

    # ------------------------------------------------------------------ persistence
    def _config_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "state_dim": self.state_dim,
            "action_dim": self.action_dim,
            "hidden_dim": self.hidden_dim,
            "device": str(self.device) if self._device_given else None,
            "seed": self._seed,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BufferBase:
        """Rebuild an empty buffer from the ``config`` recorded by :meth:`save`."""
        try:
            return cls(
                config["capacity"],
                config["state_dim"],
                config["action_dim"],
                config["hidden_dim"],
                device=config.get("device"),
                seed=config.get("seed"),
            )
        except KeyError as exc:
            raise CheckpointError(f"config: missing key {exc.args[0]!r}") from exc

    def save(self, dirpath: str | Path, prefix: str = "buffer_") -> None:
        """Saves the buffer's state to ``<dirpath>/<prefix>state.safetensors`` and its
        metadata to ``<dirpath>/<prefix>metadata.json`` (atomic; see :mod:`rlstore.checkpoint`).
        """
        checkpoint.save_state(
            dirpath,
            self.checkpoint_state(),
            prefix=prefix,
            class_name=_CLASS_NAME,
            config=self._config_dict(),
            metadata=self.metadata(),
        )

    @classmethod
    def load(cls, state_path: str | Path, metadata: dict[str, Any]) -> BufferBase:
        """Restores the buffer from a saved state.

        Args:
            state_path: the ``<prefix>state.safetensors`` file written by :meth:`save`.
            metadata: the dictionary loaded from the matching ``<prefix>metadata.json``
                (its checksum and save id are verified), or a plain :meth:`metadata` dict
                (then only the file's own layout and schema are checked).

        Returns:
            A new buffer with the saved state restored; it samples exactly as the saved one.

        Raises:
            CheckpointError: missing, truncated or corrupted file, or metadata that does not
                describe it.
        """
        if not isinstance(metadata, dict):
            raise CheckpointError(f"metadata: expected a dict, got {type(metadata).__name__}")
        if "save_id" in metadata:
            state = checkpoint.load_verified(state_path, metadata)
            record: dict[str, Any] = metadata
        else:
            state, record = checkpoint.load_state_file(state_path)
        config = record.get("config") or {}
        if record.get("class") != _CLASS_NAME:
            raise CheckpointError(
                f"{state_path}: expected a {_CLASS_NAME} checkpoint, got {record.get('class')!r}"
            )
        described = metadata.get("metadata", metadata) if "save_id" in metadata else metadata
        for key in ("capacity", "state_dim", "action_dim", "hidden_dim"):
            if key in described and described[key] != config.get(key):
                raise CheckpointError(
                    f"metadata.{key}: expected {config.get(key)!r} (state file), "
                    f"got {described[key]!r}"
                )
        if "device" in described and "save_id" not in metadata:
            config = {**config, "device": described["device"]}
        buf = cls.from_config(config)
        buf.load_state_dict(state)
        return buf


class ReplayBuffer(BufferBase):
    """A buffer for storing agent experiences, used by off-policy agents (DQN-style FIFO
    replay with uniform sampling with replacement). See :class:`BufferBase` for arguments."""

    def config(self) -> BufferConfig:
        """Creates a buffer config model (type, capacity, state_dim, action_dim, hidden_dim)."""
        return BufferConfig(
            capacity=self.capacity,
            state_dim=self.state_dim,
            action_dim=self.action_dim,
            hidden_dim=self.hidden_dim,
        )

    def sample(self, batch_size: int) -> BatchExperience:
        """Samples a random batch of experiences (uniform, with replacement).

        Args:
            batch_size: the number of items to sample, ``0 < batch_size <= len(self)``.

        Returns:
            :class:`BatchExperience`; all items ``(batch_size, features)`` on ``device``.

        Raises:
            EmptyBufferError: fewer than ``batch_size`` experiences stored.
            CapacityError: ``batch_size <= 0`` or larger than the capacity.
        """
        b = self._core.sample(batch_size)
        return BatchExperience(
            states=cast(torch.Tensor, b.obs),  # array observations: never a dict here
            actions=b.action,
            rewards=b.reward.unsqueeze(1),
            next_states=cast(torch.Tensor, b.next_obs),
            dones=b.terminated.to(torch.float32).unsqueeze(1),
            hiddens=b.extras["hidden"],
        )

    def warm(
        self, agent: Any, n_samples: int, num_envs: int = 8, *, seed: int | None = None
    ) -> None:
        """Warms the buffer to hold ``n_samples`` experiences, generated by ``agent`` in a
        vectorized copy of its environment (``gymnasium.make_vec(agent.env.spec.id, ...)``).

        Args:
            agent: has ``env`` (a gymnasium env with a registered ``spec.id``) and
                ``predict(states, hidden, train_mode=True) -> (actions, hidden)`` taking
                ``(num_envs, state_dim)`` float32 tensors on ``device`` and ``hidden`` of
                ``(num_envs, hidden_dim)`` or ``None`` (the first call). The stored hidden of
                a transition is the one ``predict`` returned with its action (as velora does);
                zeros when it returns ``None``.
            n_samples: the number of experiences to fill the buffer to (``<= capacity``).
            num_envs: number of vectorized environments, at least 2.
            seed: seed of the env resets (rlstore addition).

        Raises:
            ConfigError: ``num_envs < 2``. CapacityError: ``n_samples`` out of range.
        """
        import gymnasium as gym

        from rlstore.vector import TransitionAdapter

        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 2:
            raise ConfigError(f"num_envs: expected an int >= 2, got {num_envs!r}")
        if check_count("n_samples", n_samples) > self.capacity:
            raise CapacityError(
                f"n_samples: expected 0 < n_samples <= capacity={self.capacity}, got {n_samples}"
            )
        envs = gym.make_vec(agent.env.spec.id, num_envs=num_envs, vectorization_mode="sync")
        try:
            adapter = TransitionAdapter.from_env(envs)
            states, _ = envs.reset(seed=seed)
            hidden = None
            while len(self) < n_samples:
                obs_t = torch.as_tensor(states, dtype=torch.float32, device=self.device)
                actions, hidden = agent.predict(obs_t, hidden, train_mode=True)
                act = to_numpy("actions", actions)
                next_states, rewards, term, trunc, info = envs.step(act)
                tr = adapter.step(states, act, rewards, term, trunc, info, next_states)
                keep = np.flatnonzero(tr.valid)[: n_samples - len(self)]
                if keep.size:
                    h = (
                        np.zeros((num_envs, self.hidden_dim), np.float32)
                        if hidden is None  # a feed-forward agent has no hidden state
                        else _rows("hidden", hidden, num_envs, self.hidden_dim)
                    )
                    self.add_multi(
                        np.asarray(tr.obs)[keep],
                        act.reshape(num_envs, -1)[keep],
                        np.asarray(tr.reward)[keep],
                        np.asarray(tr.next_obs)[keep],
                        (tr.terminated | tr.truncated)[keep],
                        h[keep],
                        truncated=(tr.truncated & ~tr.terminated)[keep],
                    )
                states = next_states
        finally:
            envs.close()
