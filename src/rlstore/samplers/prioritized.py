"""Proportional prioritized sampling (Schaul et al. 2016, arXiv:1511.05952) over a sum tree.

A slot ``i`` holds priority ``p_i`` and is drawn with probability
``P(i) = (p_i + eps)^alpha / sum_k (p_k + eps)^alpha`` over the ``N`` live slots (those written
through :meth:`PrioritizedSampler.on_write`). A batch is drawn stratified: ``[0, total)`` is cut
into ``batch_size`` equal segments and one mass is drawn uniformly in each. Importance weights are
``w_i = (N * P(i))^-beta / max_j w_j`` where the maximum runs over the WHOLE buffer (the weight of
the least likely live slot, ``(N * P_min)^-beta``), not over the batch, as in OpenAI baselines:
weights only ever scale updates down, and a slot's weight does not depend on what else happened
to be drawn with it. ``N`` is the number of live slots, not the capacity.

Example:
    >>> s = PrioritizedSampler(8, alpha=1.0, beta=1.0, seed=0)
    >>> s.on_write(np.arange(4))
    >>> batch = s.sample(4, 2)
    >>> batch.indices.dtype, batch.weights.dtype, batch.weights.tolist()
    (dtype('int64'), dtype('float32'), [1.0, 1.0])
    >>> s.update_priorities(batch.indices, np.array([3.0, 0.5]), batch.generations)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from rlstore._checks import check_count, real_number
from rlstore.errors import CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.samplers._rng import make_rng, rng_state, set_rng_state
from rlstore.samplers.sum_tree import SumTree, _check_indices, _check_values, _last_writes
from rlstore.storage import _checked_array, _count, _mapping

__all__ = ["LinearSchedule", "PrioritizedSample", "PrioritizedSampler"]

_FLOAT_MAX = float(np.finfo(np.float64).max)


class PrioritizedSample(NamedTuple):
    """One prioritized batch.

    Attributes:
        indices: ``(B,)`` int64 slots drawn.
        weights: ``(B,)`` float32 importance weights in ``(0, 1]``.
        generations: ``(B,)`` int64 write generation of each slot when drawn; pass it back to
            :meth:`PrioritizedSampler.update_priorities` so that updates to slots overwritten
            in the meantime are ignored.
    """

    indices: np.ndarray
    weights: np.ndarray
    generations: np.ndarray


@dataclass(frozen=True)
class LinearSchedule:
    """``start`` moving linearly to ``end`` over ``steps`` steps, then constant.

    ``value(t) = start + (end - start) * min(t / steps, 1)``; e.g. PER's beta annealed from 0.4 to
    1 over training: ``LinearSchedule(0.4, 1.0, 100_000)``.
    """

    start: float
    end: float
    steps: int

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            object.__setattr__(self, name, real_number(f"beta.{name}", getattr(self, name), 0.0))
        check_count("beta.steps", self.steps, error=ConfigError)

    def __call__(self, step: int) -> float:
        return self.start + (self.end - self.start) * min(step / self.steps, 1.0)


class PrioritizedSampler:
    """Proportional prioritized sampling over ``capacity`` slots (see the module docstring).

    New or overwritten slots (:meth:`on_write`) enter with the largest priority seen so far
    (initially 1.0) and a new generation number; :meth:`sample` draws a stratified batch with
    importance weights; :meth:`update_priorities` sets ``(|p| + eps)^alpha`` for the sampled
    slots that were not overwritten since.

    Args:
        capacity: number of slots (int >= 1).
        alpha: priority exponent ``>= 0`` (0: uniform sampling).
        beta: importance exponent ``>= 0`` (0: unit weights), or a :class:`LinearSchedule`
            evaluated at the number of :meth:`sample` calls made so far.
        eps: ``> 0`` added to every priority, so that a zero error can still be drawn.
        seed: ``int``, ``np.random.Generator`` (shared, not copied) or ``None``.

    Raises:
        ConfigError: an argument out of range or of the wrong type.
    """

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = 1e-6,
        seed: int | np.random.Generator | None = None,
    ):
        self.capacity = check_count("capacity", capacity, error=ConfigError)
        self.alpha = real_number("alpha", alpha, 0.0, _FLOAT_MAX, expected="a finite number >= 0")
        self.beta = beta if isinstance(beta, LinearSchedule) else _beta(beta)
        self.eps = real_number("eps", eps, 0.0, _FLOAT_MAX, expected="a finite number > 0")
        if self.eps == 0.0:
            raise ConfigError(f"eps: expected a finite number > 0, got {eps!r}")
        self.rng = make_rng(seed)
        self.tree = SumTree(self.capacity)
        self.generations = np.zeros(self.capacity, dtype=np.int64)
        self.live = np.zeros(self.capacity, dtype=bool)
        self.max_priority = 1.0  # the largest |p| + eps seen (before the alpha power)
        self.steps = 0  # sample() calls: the argument of a beta schedule
        self._n = 0  # live slots
        self._next_generation = 1

    def __len__(self) -> int:
        """The number of live slots ``N`` (written at least once)."""
        return self._n

    def current_beta(self) -> float:
        """The beta the next :meth:`sample` uses when none is given."""
        return self.beta(self.steps) if isinstance(self.beta, LinearSchedule) else self.beta

    def on_write(self, indices: Any) -> None:
        """Mark ``indices`` as (over)written: priority = the largest seen so far, new generation.

        Raises:
            SpecError: ``indices`` not a 1-D integer array in ``[0, capacity)``; nothing changes.
        """
        idx = _check_indices("indices", indices, self.capacity)
        uniq, _ = _last_writes(idx)
        value = np.full(len(uniq), _power(np.float64(self.max_priority), self.alpha))
        self.tree._set_unique(uniq, value)
        self.generations[uniq] = self._next_generation
        self._next_generation += 1
        self._n += int(len(uniq) - np.count_nonzero(self.live[uniq]))
        self.live[uniq] = True

    def sample(self, size: int, batch_size: int, beta: float | None = None) -> PrioritizedSample:
        """Draw ``batch_size`` slots, one per equal segment of ``[0, total)``, with weights.

        Args:
            size: the number of live slots as the caller sees it; must equal ``len(self)``.
            batch_size: number of slots (int >= 1).
            beta: importance exponent for this batch; default :meth:`current_beta`.

        Returns:
            :class:`PrioritizedSample` (``indices`` int64, ``weights`` float32 in ``(0, 1]``,
            ``generations`` int64), each of shape ``(batch_size,)``.

        Raises:
            EmptyBufferError: no live slot.
            SpecError: ``size`` differs from ``len(self)``.
            CapacityError: ``batch_size`` not an int >= 1.
            ConfigError: ``beta`` not a number >= 0.
        """
        b = check_count("batch_size", batch_size)
        b_exp = self.current_beta() if beta is None else _beta(beta)
        if self._n == 0 or not self.tree.total > 0:
            raise EmptyBufferError("sample: no slot written yet (on_write first)")
        if check_count("size", size, minimum=0, error=SpecError) != self._n:
            raise SpecError(f"size: expected {self._n} live slots like on_write, got {size!r}")
        total = self.tree.total
        mass = (np.arange(b) + self.rng.random(b)) * (total / b)
        idx = self.tree._find(mass)
        # (N P(i))^-beta / (N P_min)^-beta = (p_min / p_i)^beta: N and the total cancel
        ratio = self.tree.min / self.tree.leaves[idx]
        weights = (ratio**b_exp).astype(np.float32)
        self.steps += 1
        return PrioritizedSample(idx, weights, self.generations[idx])

    def update_priorities(
        self, indices: Any, priorities: Any, generations: Any | None = None
    ) -> None:
        """Store ``(p + eps)^alpha`` for the slots ``indices`` and raise the max priority.

        Pass ``p = |TD error|``: negative priorities are refused, not folded with ``abs``.
        An index that repeats takes its last priority. With ``generations`` (from
        :meth:`sample`), entries whose slot was overwritten since it was drawn are ignored.

        Args:
            indices: ``(k,)`` integers: live slots in ``[0, capacity)``.
            priorities: ``(k,)`` finite real numbers ``>= 0`` (e.g. ``|TD error|``).
            generations: ``(k,)`` integers, or ``None`` to apply every entry.

        Raises:
            SpecError: wrong shapes or dtypes, an index out of range or never written, a
                negative, NaN or inf priority; nothing changes.
        """
        idx = _check_indices("indices", indices, self.capacity)
        pri = _check_values("priorities", priorities, len(idx))
        if len(idx) and not self.live[idx].all():
            bad = idx[~self.live[idx]][0]
            raise SpecError(f"indices: expected slots written by on_write, got {bad} (empty)")
        keep = None
        if generations is not None:
            gen = generations if isinstance(generations, np.ndarray) else np.asarray(generations)
            if gen.shape != idx.shape or gen.dtype.kind not in "iu":
                raise SpecError(
                    f"generations: expected an integer array of shape {idx.shape} like "
                    f"indices, got {gen.dtype} of shape {gen.shape}"
                )
            keep = gen == self.generations[idx]
        uniq, last = _last_writes(idx)
        raw = pri[last] + self.eps
        if keep is not None:
            k = keep[last]
            uniq, raw = uniq[k], raw[k]
        if not len(uniq):
            return
        stored = _power(raw, self.alpha)
        top = float(stored.max())
        if not top <= self.tree.max_value:  # inf after the power, or a sum that could overflow
            raise SpecError(
                f"priorities: expected (p + eps)^alpha <= {self.tree.max_value:.6g}, got "
                f"{top} from p = {float(raw[np.argmax(stored)] - self.eps)}"
            )
        self.tree._set_unique(uniq, stored)
        self.max_priority = max(self.max_priority, float(raw.max()))

    def state_dict(self) -> dict[str, Any]:
        """Arrays (tree leaves, generations, live mask) and JSON-able scalars, all copies."""
        return {
            "tree": self.tree.state_dict(),
            "generations": self.generations.copy(),
            "live": self.live.copy(),
            "alpha": self.alpha,
            "eps": self.eps,
            "max_priority": self.max_priority,
            "steps": self.steps,
            "next_generation": self._next_generation,
            "rng": rng_state(self.rng),
        }

    def load_state_dict(self, sd: Mapping[str, Any], *, where: str = "sampler") -> None:
        """Restore :meth:`state_dict` output; later samples equal the original's.

        Everything is checked before anything changes: the keys, ``alpha`` and ``eps`` equal to
        this sampler's, array shapes and dtypes, finite non-negative leaves that are zero on
        slots never written, generations below ``next_generation``, the RNG state.

        Raises:
            CheckpointError: a malformed or mismatching state; ``self`` is unchanged.
        """
        keys = ("tree", "generations", "live", "alpha", "eps", "max_priority", "steps")
        sd = _mapping(where, sd, (*keys, "next_generation", "rng"))
        for name in ("alpha", "eps"):
            value = sd[name]
            if not isinstance(value, float) or value != getattr(self, name):
                raise CheckpointError(
                    f"{where}.{name}: expected {getattr(self, name)} like this sampler, got "
                    f"{value!r}"
                )
        cap = (self.capacity,)
        live = _checked_array(f"{where}.live", sd["live"], cap, np.dtype(bool))
        gens = _checked_array(f"{where}.generations", sd["generations"], cap, np.dtype(np.int64))
        next_gen = _count(f"{where}.next_generation", sd["next_generation"], 1)
        if gens.size and (int(gens.min()) < 0 or int(gens.max()) >= next_gen):
            raise CheckpointError(
                f"{where}.generations: expected values in [0, {next_gen}), got "
                f"[{int(gens.min())}, {int(gens.max())}]"
            )
        steps = _count(f"{where}.steps", sd["steps"], 0)
        max_p = sd["max_priority"]
        ok = isinstance(max_p, float) and math.isfinite(max_p) and max_p > 0
        if not ok or not float(_power(np.float64(max_p), self.alpha)) <= self.tree.max_value:
            raise CheckpointError(
                f"{where}.max_priority: expected a float > 0 with max_priority^alpha <= "
                f"{self.tree.max_value:.6g}, got {max_p!r}"
            )
        tree = SumTree(self.capacity)
        tree.load_state_dict(sd["tree"], where=f"{where}.tree")
        if (tree.leaves[~live] != 0).any():
            raise CheckpointError(f"{where}.tree.leaves: nonzero priority on a slot never written")
        # the last check: set_rng_state checks the whole state before it changes the generator
        self.rng = set_rng_state(self.rng, sd["rng"], where=f"{where}.rng")
        self.tree, self.live, self.generations = tree, live.copy(), gens.copy()
        self.max_priority, self.steps, self._next_generation = max_p, steps, next_gen
        self._n = int(np.count_nonzero(live))


def _beta(beta: Any) -> float:
    """``beta`` as a float >= 0 (ConfigError otherwise)."""
    return real_number("beta", beta, 0.0, expected="a number >= 0 or a LinearSchedule")


def _power(x: Any, alpha: float) -> Any:
    """``x ** alpha`` in float64, ``inf`` (not a warning or an OverflowError) when too large."""
    with np.errstate(over="ignore"):
        return np.power(x, alpha)
