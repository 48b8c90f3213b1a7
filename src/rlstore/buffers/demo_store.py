"""PPO+D demonstration records and their store (the rollout mixer, :mod:`.demo_mixer`, stands on
this module; :mod:`rlstore.buffers.demos` gives the public names of both).

PPO+D (Libardi, De Fabritiis, Dittert 2021, arXiv:2007.03328) replays whole demonstration
episodes inside the PPO rollout. rlstore follows the documented PyTorchRL ``PPODBuffer``
semantics (``pytorchrl.agent.storages.on_policy.ppod_buffer``); choices where the paper body is
unverified are marked **Decision** below and pinned by tests against naive references.

* :class:`Demo`: one episode, ``observations (L, *obs_shape)``, ``actions (L, *act_shape)``,
  ``rewards (L,)`` float32; ``observations[j]`` is the observation ``actions[j]`` was taken in.
* :class:`DemoStore`: the two demo lists and their rules.

  - **reward demos** (sampled uniformly) are episodes whose total reward reached
    ``reward_threshold``; a new maximum empties the *agent* reward demos first (**Decision**:
    human demos survive it, as they survive eviction);
  - **value demos** (sampled with ``P_i ~ max(MaxValue_i, 0) ** alpha``, **Decision**: negative
    values are clipped to 0 and an all-zero vector samples uniformly; PyTorchRL produced NaN) are
    the other episodes, accepted when their max value is at least the smallest stored one or
    while the store is below capacity;
  - every candidate is first cut after its last positive reward (whole episode if none);
  - capacity: lowest-MaxValue value demos are evicted first, then the longest agent reward demo
    (oldest first on ties); human demos are never evicted;
  - annealing after each accepted reward demo (if value demos exist):
    ``delta = min(phi0 / |value demos|, phi)``, ``rho += delta``, ``phi -= delta``
    (**Decision**: PyTorchRL clipped rho and phi separately, which can break ``rho + phi =
    rho0 + phi0``; moving ``delta`` keeps the sum exactly).
* :class:`~rlstore.buffers.demo_mixer.DemoMixer` (module :mod:`rlstore.buffers.demo_mixer`):
  the per-env-slot state machine that replaces new episodes by demo replays with probabilities
  ``(rho, phi, 1 - rho - phi)``.

Example:
    >>> import numpy as np
    >>> store = DemoStore(capacity=4, rho=1.0, phi=0.0, seed=0)
    >>> _ = store.add_initial(Demo(np.zeros((2, 3), np.float32), np.array([0, 1]),
    ...                        np.array([0.0, 1.0], np.float32), human=True))
    >>> store.sample_source()  # rho = 1: every new episode replays a reward demo
    'reward_demo'
    >>> store.sample_demo("reward_demo").total_reward
    1.0
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import numpy as np

from rlstore._checks import check_count, real_number
from rlstore._trees import real_array
from rlstore.errors import (
    CapacityError,
    CheckpointError,
    ConfigError,
    EmptyBufferError,
    SpecError,
)
from rlstore.samplers import make_rng, rng_state, set_rng_state

__all__ = [
    "Demo", "DemoStore", "cut_after_last_positive", "value_demo_probabilities",
]  # fmt: skip

Source = Literal["reward_demo", "value_demo", "env"]


@dataclass(frozen=True, eq=False)
class Demo:
    """One demonstration episode (time range ``j = 0 .. L-1``).

    Attributes:
        observations: ``(L, *obs_shape)``; ``observations[j]`` is where ``actions[j]`` was taken.
        actions: ``(L, *act_shape)``.
        rewards: ``(L,)`` float32, ``rewards[j]`` of transition ``j``.
        human: human demos are never evicted nor emptied.
        max_value: largest ``V(obs)`` seen on this episode (``-inf`` if unknown).
        demo_id: unique id inside a :class:`DemoStore` (``-1`` before it is added).
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    human: bool = False
    max_value: float = float("-inf")
    demo_id: int = -1

    def __post_init__(self) -> None:
        obs = real_array("observations", self.observations)
        act = real_array("actions", self.actions)
        rew = real_array("rewards", self.rewards)
        if rew.dtype.kind == "b":
            raise SpecError("rewards: expected numbers, got dtype bool")
        with np.errstate(over="ignore"):
            rew32 = rew.astype(np.float32)
        if not np.isfinite(rew32).all() or (
            rew.dtype.kind in "iu" and not (rew32.astype(rew.dtype) == rew).all()
        ):
            raise SpecError(
                f"rewards: expected values that fit float32 exactly, got {rew.dtype} values in "
                f"[{rew.min()}, {rew.max()}]"
            )
        rew = rew32
        if not isinstance(self.human, (bool, np.bool_)):
            raise SpecError(f"human: expected a bool, got {self.human!r}")
        max_value = _max_value(self.max_value)
        demo_id = check_count("demo_id", self.demo_id, minimum=-1, error=SpecError)
        if rew.ndim != 1 or rew.shape[0] < 1:
            raise SpecError(f"rewards: expected shape (L,) with L >= 1, got {rew.shape}")
        for name, arr in (("observations", obs), ("actions", act)):
            if arr.ndim < 1 or arr.shape[0] != rew.shape[0]:
                raise SpecError(
                    f"{name}: expected a leading axis L={rew.shape[0]}, got {arr.shape}"
                )
        fixed = (obs, act, rew, bool(self.human), max_value, demo_id)
        for f, value in zip(dataclasses.fields(self), fixed, strict=True):
            object.__setattr__(self, f.name, value)

    @property
    def length(self) -> int:
        """Number of transitions ``L`` (DemoLength in PyTorchRL)."""
        return int(self.rewards.shape[0])

    @property
    def total_reward(self) -> float:
        """Sum of the rewards (TotalReward in PyTorchRL), accumulated in float64."""
        return float(self.rewards.astype(np.float64).sum())

    def state(self) -> dict[str, Any]:
        """Nested state for :mod:`rlstore.checkpoint` (arrays + JSON scalars)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_state(cls, sd: dict[str, Any]) -> Demo:
        """Inverse of :meth:`state`."""
        try:
            return cls(**{f.name: sd[f.name] for f in dataclasses.fields(cls)})
        except KeyError as exc:
            raise CheckpointError(f"demo state: missing key {exc}") from exc


def cut_after_last_positive(rewards: np.ndarray) -> int:
    """Length kept by the PPO+D cut: up to and including the last ``reward > 0``, else all.

    Args:
        rewards: ``(L,)`` rewards of one episode.
    """
    pos = np.flatnonzero(np.asarray(rewards) > 0)
    return int(pos[-1] + 1) if pos.size else int(np.asarray(rewards).shape[0])


def _demo_states(demos: Mapping[str, Any], sd: Mapping[str, Any], count: str) -> list[Any]:
    n = check_count(count, sd[count], minimum=0, error=CheckpointError)
    return [demos[str(i)] for i in range(n)]


def _max_value(value: Any) -> float:
    """A MaxValue: a finite number, or -inf if unknown (+inf would leave no finite sampling
    weight for :func:`value_demo_probabilities`, so every later value-demo draw would fail)."""
    return real_number(
        "max_value", value, high=sys.float_info.max, expected="a finite number (-inf if unknown)"
    )


def _alpha(value: Any) -> float:
    """The value-demo sampling exponent: a number > 0 (NaN or <= 0 gave NaN probabilities)."""
    alpha = real_number("alpha", value, 0.0, expected="a positive float")
    if alpha == 0.0:
        raise ConfigError(f"alpha: expected a positive float, got {value!r}")
    return alpha


def _check_demo(demo: Any) -> None:
    if not isinstance(demo, Demo):
        raise SpecError(f"demo: expected a Demo, got {type(demo).__name__}")


def value_demo_probabilities(max_values: np.ndarray, alpha: float) -> np.ndarray:
    """``P_i = m_i ** alpha / sum_k m_k ** alpha`` with ``m = max(MaxValue, 0)`` (float64).

    Computed as ``(m_i / max m) ** alpha`` so that large values or alphas do not overflow; an
    all-zero ``m`` gives the uniform distribution.

    Args:
        max_values: ``(K,)`` MaxValue of each value demo, K >= 1.
        alpha: temperature exponent, > 0.
    """
    alpha = _alpha(alpha)
    m = np.maximum(np.asarray(max_values, dtype=np.float64), 0.0)
    if m.ndim != 1 or not m.size:
        raise SpecError(f"max_values: expected shape (K,) with K >= 1, got {m.shape}")
    top = m.max()
    if not np.isfinite(top):
        raise SpecError(f"max_values: expected finite values, got max {top}")
    if top <= 0.0:
        return np.full(m.shape, 1.0 / m.size)
    w = (m / top) ** alpha
    return w / w.sum()


class DemoStore:
    """Reward and value demos with the PPO+D replay, acceptance and eviction rules.

    Args:
        capacity: maximum ``|reward demos| + |value demos|`` (``total_buffer_demo_capacity``).
        rho: probability that a new episode replays a reward demo.
        phi: probability that it replays a value demo (``rho + phi <= 1``).
        alpha: value-demo sampling exponent, > 0.
        reward_threshold: minimum total reward of a reward demo (None = -inf).
        seed: int, numpy Generator or None; every draw of the store and its mixers uses it.
    """

    def __init__(
        self,
        capacity: int = 51,
        *,
        rho: float = 0.1,
        phi: float = 0.3,
        alpha: float = 10.0,
        reward_threshold: float | None = None,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if (
            isinstance(capacity, bool)
            or not isinstance(capacity, (int, np.integer))
            or capacity < 1
        ):
            raise CapacityError(f"capacity: expected a positive int, got {capacity!r}")
        rho = real_number("rho", rho, 0.0, 1.0, expected="a probability in [0, 1]")
        phi = real_number("phi", phi, 0.0, 1.0, expected="a probability in [0, 1]")
        if rho + phi > 1.0 + 1e-12:
            raise ConfigError(f"rho + phi: expected <= 1, got {rho} + {phi}")
        alpha = _alpha(alpha)
        if reward_threshold is not None:
            real_number("reward_threshold", reward_threshold, expected="a number or None")
        self.capacity = int(capacity)
        self.rho0, self.phi0 = float(rho), float(phi)
        self.rho, self.phi, self.alpha = float(rho), float(phi), float(alpha)
        self.initial_reward_threshold = reward_threshold
        self.reward_threshold = -np.inf if reward_threshold is None else float(reward_threshold)
        self.max_demo_reward = -np.inf
        self.reward_demos: list[Demo] = []
        self.value_demos: list[Demo] = []
        self.rng = make_rng(seed)
        self._next_id = 0

    def __len__(self) -> int:
        return len(self.reward_demos) + len(self.value_demos)

    def config(self) -> dict[str, Any]:
        """JSON-able constructor kwargs (without the seed; the RNG state is in the state)."""
        return {
            "capacity": self.capacity,
            "rho": self.rho0,
            "phi": self.phi0,
            "alpha": self.alpha,
            "reward_threshold": self.initial_reward_threshold,
        }

    # ------------------------------------------------------------------ adding
    def _register(self, demo: Demo) -> Demo:
        demo = dataclasses.replace(demo, demo_id=self._next_id)
        self._next_id += 1
        return demo

    def _refresh_reward_stats(self) -> None:
        if self.reward_demos:
            totals = [d.total_reward for d in self.reward_demos]
            self.reward_threshold = max(self.reward_threshold, min(totals))
            self.max_demo_reward = max(self.max_demo_reward, max(totals))

    def add_initial(self, demo: Demo) -> Demo:
        """Add a loaded (human or agent) demo as a reward demo, without eviction.

        Raises:
            CapacityError: the store would exceed ``capacity``.
        """
        _check_demo(demo)
        if len(self) + 1 > self.capacity:
            raise CapacityError(
                f"initial demos: expected at most capacity={self.capacity} demos, "
                f"got {len(self) + 1}"
            )
        demo = self._register(demo)
        self.reward_demos.append(demo)
        self._refresh_reward_stats()
        return demo

    def add_bonus(self, demo: Demo) -> Demo:
        """Add an agent reward demo from outside training (supplementary demos), with eviction."""
        _check_demo(demo)
        demo = self._register(dataclasses.replace(demo, human=False))
        self.reward_demos.append(demo)
        self.enforce_capacity()
        self._refresh_reward_stats()
        return demo

    def offer_episode(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        max_value: float = float("-inf"),
    ) -> Literal["reward", "value", "rejected"]:
        """Offer a finished agent episode (``(L, ...)`` arrays) as a candidate demo.

        The episode is cut after its last positive reward, then becomes a reward demo if its total
        reward is ``>= reward_threshold``, else a value demo if ``max_value`` is at least the
        smallest stored MaxValue or the store is below capacity.

        Returns:
            Which list took it, or ``"rejected"``.
        """
        # validated whole first (built with the next id, taken only if the demo is accepted)
        full = Demo(observations, actions, rewards, False, max_value, self._next_id)
        n = cut_after_last_positive(full.rewards)
        demo = dataclasses.replace(
            full,
            observations=full.observations[:n],
            actions=full.actions[:n],
            rewards=full.rewards[:n],
        )
        max_value = demo.max_value
        total = demo.total_reward
        if total >= self.reward_threshold:
            if total > self.max_demo_reward:
                self.reward_demos = [d for d in self.reward_demos if d.human]
            self._next_id += 1
            self.reward_demos.append(demo)
            evicted = self.enforce_capacity()
            self.anneal()
            self._refresh_reward_stats()
            return "rejected" if any(d is demo for d in evicted) else "reward"
        smallest = min((d.max_value for d in self.value_demos), default=np.inf)
        if max_value >= smallest or len(self) < self.capacity:
            self._next_id += 1
            self.value_demos.append(demo)
            evicted = self.enforce_capacity()
            return "rejected" if any(d is demo for d in evicted) else "value"
        return "rejected"

    def enforce_capacity(self) -> list[Demo]:
        """Evict until ``len(self) <= capacity``; returns the evicted demos in order.

        Lowest-MaxValue value demos go first, then the longest agent reward demo (the oldest on
        ties). Human demos are never evicted.
        """
        evicted: list[Demo] = []
        while len(self) > self.capacity:
            if self.value_demos:
                i = int(np.argmin([d.max_value for d in self.value_demos]))
                evicted.append(self.value_demos.pop(i))
                continue
            agent = [i for i, d in enumerate(self.reward_demos) if not d.human]
            if not agent:
                raise CapacityError(
                    f"capacity: {len(self)} human demos exceed capacity={self.capacity}"
                )
            i = max(agent, key=lambda k: (self.reward_demos[k].length, -k))
            evicted.append(self.reward_demos.pop(i))
        return evicted

    def anneal(self) -> None:
        """Move ``min(phi0 / |value demos|, phi)`` of probability from phi to rho."""
        if not self.value_demos:
            return
        delta = min(self.phi0 / len(self.value_demos), self.phi)
        self.rho, self.phi = self.rho + delta, self.phi - delta

    def update_max_value(self, demo_id: int, max_value: float) -> bool:
        """Set MaxValue of value demo ``demo_id`` (after a replay); False if it was evicted."""
        check_count("demo_id", demo_id, minimum=-1, error=SpecError)
        max_value = _max_value(max_value)
        for i, d in enumerate(self.value_demos):
            if d.demo_id == demo_id:
                self.value_demos[i] = dataclasses.replace(d, max_value=float(max_value))
                return True
        return False

    # ------------------------------------------------------------------ sampling
    def sample_source(self) -> Source:
        """Draw ``reward_demo`` / ``value_demo`` / ``env`` with ``(rho, phi, 1 - rho - phi)``.

        One uniform draw ``u``: reward demo if ``u < rho``, value demo if ``u < rho + phi``; a
        chosen list that is empty falls back to ``env``.
        """
        u = self.rng.random()
        if u < self.rho:
            return "reward_demo" if self.reward_demos else "env"
        if u < self.rho + self.phi:
            return "value_demo" if self.value_demos else "env"
        return "env"

    def sample_demo(self, source: Source) -> Demo:
        """A reward demo uniformly, or a value demo by :func:`value_demo_probabilities`."""
        sources = ("reward_demo", "value_demo", "env")
        if not isinstance(source, str) or source not in sources:
            raise ConfigError(f"source: expected one of {list(sources)}, got {source!r}")
        if source == "reward_demo" and self.reward_demos:
            return self.reward_demos[int(self.rng.integers(len(self.reward_demos)))]
        if source == "value_demo" and self.value_demos:
            p = value_demo_probabilities(
                np.array([d.max_value for d in self.value_demos]), self.alpha
            )
            return self.value_demos[int(self.rng.choice(len(p), p=p))]
        raise EmptyBufferError(f"source: no demo to sample for {source!r}")

    def top_demos(self, kind: Literal["reward", "value"], k: int) -> list[Demo]:
        """The ``k`` best agent demos: reward demos by total reward, value demos by MaxValue."""
        if not isinstance(kind, str) or kind not in ("reward", "value"):
            raise ConfigError(f"kind: expected 'reward' or 'value', got {kind!r}")
        k = check_count("k", k, minimum=0, error=ConfigError)
        if kind == "reward":
            pool = [d for d in self.reward_demos if not d.human]
            return sorted(pool, key=lambda d: -d.total_reward)[:k]
        return sorted(self.value_demos, key=lambda d: -d.max_value)[:k]

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Nested state: demos (arrays) + probabilities, thresholds, ids and RNG state."""
        return {
            "rho": self.rho,
            "phi": self.phi,
            "reward_threshold": float(self.reward_threshold),
            "max_demo_reward": float(self.max_demo_reward),
            "next_id": self._next_id,
            "rng": rng_state(self.rng),
            "num_reward": len(self.reward_demos),
            "num_value": len(self.value_demos),
            "reward": {str(i): d.state() for i, d in enumerate(self.reward_demos)},
            "value": {str(i): d.state() for i, d in enumerate(self.value_demos)},
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (the store then draws what the original would)."""

        def entry(key: str, convert: Callable[[Any], Any]) -> Any:
            try:
                return convert(sd[key])
            except (KeyError, TypeError, ValueError, OverflowError, IndexError) as exc:
                raise CheckpointError(
                    f"DemoStore state: {key}: missing or bad entry ({exc})"
                ) from exc

        if not isinstance(sd, Mapping):
            raise CheckpointError(f"sd: expected a dict, got {type(sd).__name__}")
        reward = [
            Demo.from_state(d) for d in entry("reward", lambda v: _demo_states(v, sd, "num_reward"))
        ]
        value = [
            Demo.from_state(d) for d in entry("value", lambda v: _demo_states(v, sd, "num_value"))
        ]
        rho, phi = (entry(k, partial(real_number, k, low=0.0, high=1.0)) for k in ("rho", "phi"))
        reward_threshold, max_demo_reward = (
            entry(k, partial(real_number, k)) for k in ("reward_threshold", "max_demo_reward")
        )
        next_id = entry(
            "next_id", lambda v: check_count("next_id", v, minimum=0, error=CheckpointError)
        )
        ids = [d.demo_id for d in (*reward, *value)]
        if (
            rho + phi > 1.0 + 1e-12
            or len(ids) > self.capacity
            or len(set(ids)) < len(ids)
            or not all(0 <= i < next_id for i in ids)
        ):  # ids must stay unique: update_max_value and the mixer find demos by id
            raise CheckpointError(
                f"DemoStore state: expected rho + phi <= 1, at most capacity={self.capacity} "
                f"demos with distinct ids in [0, next_id={next_id}), got rho + phi = "
                f"{rho + phi}, ids {ids}"
            )
        rng_sd = entry("rng", lambda v: v)
        # assigned only once every entry is read: a refused state leaves the store as it was
        # (set_rng_state checks the state whole before it restores the shared rng in place)
        rng = set_rng_state(self.rng, rng_sd, where="rng")
        self.reward_demos, self.value_demos = reward, value
        self.rho, self.phi = rho, phi
        self.reward_threshold, self.max_demo_reward = reward_threshold, max_demo_reward
        self._next_id, self.rng = next_id, rng
