"""Proportional prioritized sampling (Schaul et al. 2016, arXiv:1511.05952) over a sum tree.

The sampler works on the ids of :mod:`rlstore.samplers.uniform`: the live ids form a window
``[lo, hi)`` of at most ``capacity`` ids, and id ``i`` sits in slot ``i % capacity`` of a float64
:class:`~rlstore.samplers.sum_tree.SumTree`. A live id ``i`` with priority ``p_i`` is drawn with
probability ``P(i) = (p_i + eps)^alpha / sum_k (p_k + eps)^alpha``; ids that leave the window
(overwritten) get priority 0 and are never drawn. A batch is drawn stratified: ``[0, total)`` is
cut into ``batch_size`` equal segments and one mass is drawn uniformly in each. Importance
weights are ``w_i = (N * P(i))^-beta / max_j w_j`` where the maximum runs over the WHOLE buffer
(the weight of the least likely live id, ``(N * P_min)^-beta``), not over the batch, as in
OpenAI baselines: weights only ever scale updates down, and an id's weight does not depend on
what else happened to be drawn with it. ``N`` is the number of live ids.

Example:
    >>> s = PrioritizedSampler(8, alpha=1.0, beta=1.0, seed=0)
    >>> s.on_write(0, 4)
    >>> batch = s.sample(2)
    >>> batch.indices.dtype, batch.weights.dtype, batch.weights.tolist()
    (dtype('int64'), dtype('float32'), [1.0, 1.0])
    >>> s.update_priorities(batch.indices, np.array([3.0, 0.5]))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rlstore._checks import check_count, check_keys, real_number
from rlstore._lazy import lazy_module
from rlstore.errors import CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.samplers._rng import make_rng, rng_state, set_rng_state
from rlstore.samplers.sum_tree import SumTree, _check_values, _real_array
from rlstore.samplers.uniform import SampledIds, check_ids, check_window
from rlstore.storage.ring import _count

__all__ = ["LinearSchedule", "PrioritizedSampler"]

_FLOAT_MAX = float(np.finfo(np.float64).max)
_kernels = lazy_module("rlstore.samplers._tree_kernels")  # the compiled tree walks


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
            value = real_number(f"beta.{name}", getattr(self, name), 0.0, _FLOAT_MAX,
                                expected="a finite number >= 0")  # fmt: skip
            object.__setattr__(self, name, value)
        check_count("beta.steps", self.steps, error=ConfigError)

    def __call__(self, step: int) -> float:
        return self.start + (self.end - self.start) * min(step / self.steps, 1.0)


class PrioritizedSampler:
    """Proportional prioritized sampling of the live ids (see the module docstring).

    New ids (:meth:`on_write`) enter with the largest priority seen so far (initially 1.0);
    :meth:`sample` draws a stratified batch with importance weights; :meth:`update_priorities`
    sets ``(p + eps)^alpha`` for the ids that are still live and ignores the others.

    Args:
        capacity: slots (int >= 1), or ``None`` to let the buffer size it (:meth:`bind`).
        alpha: priority exponent ``>= 0`` (0: uniform sampling).
        beta: importance exponent ``>= 0`` (0: unit weights), or a :class:`LinearSchedule`
            evaluated at the number of :meth:`sample` calls made so far.
        eps: ``> 0`` added to every priority, so that a zero error can still be drawn
            (``eps ** alpha`` must not underflow to 0).
        seed: ``int``, ``np.random.Generator`` (shared, not copied) or ``None``.

    Raises:
        ConfigError: an argument out of range or of the wrong type.
    """

    def __init__(
        self,
        capacity: int | None = None,
        alpha: float = 0.6,
        beta: float | LinearSchedule = 0.4,
        eps: float = 1e-6,
        seed: int | np.random.Generator | None = None,
    ):
        self.alpha = real_number("alpha", alpha, 0.0, _FLOAT_MAX, expected="a finite number >= 0")
        self.beta = beta if isinstance(beta, LinearSchedule) else check_beta(beta)
        self.eps = real_number("eps", eps, 0.0, _FLOAT_MAX, expected="a finite number > 0")
        if self.eps == 0.0:
            raise ConfigError(f"eps: expected a finite number > 0, got {eps!r}")
        if not _power(np.float64(self.eps), self.alpha) > 0:  # the least stored priority
            raise ConfigError(f"eps: expected eps ** alpha > 0 (a priority 0 must stay drawable), "
                              f"got {self.eps!r} ** {self.alpha!r} = 0.0")  # fmt: skip
        self.rng = make_rng(seed)
        self.capacity: int | None = None
        self.tree = SumTree(1)
        self.max_priority = 1.0  # the largest |p| + eps seen (before the alpha power)
        self.steps = 0  # sample() calls: the argument of a beta schedule
        self.lo = self.hi = 0  # live ids
        if capacity is not None:
            self.bind(capacity)

    def bind(self, capacity: int) -> None:
        """Allocate the tree for ``capacity`` slots (a buffer calls this with its slots).

        Raises:
            ConfigError: ``capacity`` not an int >= 1, or another capacity than bound before.
        """
        cap = check_count("capacity", capacity, error=ConfigError)
        if self.capacity is not None and cap != self.capacity:
            raise ConfigError(
                f"capacity: expected {self.capacity} like the sampler was built for, got {cap}"
            )
        if self.capacity is None:
            self.capacity, self.tree = cap, SumTree(cap)

    def _cap(self) -> int:
        if self.capacity is None:
            raise ConfigError("capacity: the sampler has no slots yet (give capacity or bind)")
        return self.capacity

    def config(self) -> dict[str, Any]:
        """JSON-able hyperparameters: ``{"kind": "prioritized", "alpha", "beta", "eps"}``."""
        beta = asdict(self.beta) if isinstance(self.beta, LinearSchedule) else self.beta
        return {"kind": "prioritized", "alpha": self.alpha, "beta": beta, "eps": self.eps}

    def __len__(self) -> int:
        """The number of live ids ``N``."""
        return self.hi - self.lo

    def current_beta(self) -> float:
        """The beta the next :meth:`sample` uses when none is given."""
        return self.beta(self.steps) if isinstance(self.beta, LinearSchedule) else self.beta

    def on_write(self, lo: int, hi: int) -> None:
        """The live ids are now ``[lo, hi)``: ids that left get priority 0, new ids the
        largest priority seen so far.

        Raises:
            SpecError: a window that moves back or holds more than ``capacity`` ids.
        """
        cap = self._cap()
        lo, hi = check_window(lo, hi, (self.lo, self.hi), cap)
        gone_hi, new_lo = min(lo, self.hi), max(self.hi, lo)
        if gone_hi > self.lo or hi > new_lo:
            top = float(_power(np.float64(self.max_priority), self.alpha))
            slots, vals = _kernels().window_leaves(self.lo, gone_hi, new_lo, hi, cap, top)
            self.tree._set_unique(slots, vals)
        self.lo, self.hi = lo, hi

    def sample(self, batch_size: int, beta: float | None = None) -> SampledIds:
        """Draw ``batch_size`` live ids, one per equal segment of ``[0, total)``, with weights.

        Args:
            batch_size: number of ids (int >= 1).
            beta: importance exponent for this batch; default :meth:`current_beta`.

        Returns:
            :class:`~rlstore.samplers.uniform.SampledIds`: ``indices`` int64 ids, ``weights``
            float32 in ``(0, 1]``, each of shape ``(batch_size,)``.

        Raises:
            EmptyBufferError: no live id.
            CapacityError: ``batch_size`` not an int >= 1.
            ConfigError: ``beta`` not a number >= 0.
        """
        b = check_count("batch_size", batch_size)
        b_exp = self.current_beta() if beta is None else check_beta(beta)
        if self.hi == self.lo or not self.tree.total > 0:
            raise EmptyBufferError("sample: no live id (the buffer is empty)")
        tree = self.tree
        # (N P(i))^-beta / (N P_min)^-beta = (p_min / p_i)^beta: N and the total cancel
        u = self.rng.random(b)
        ids, weights = _kernels().draw(tree._sum, tree._offs, u, tree.total, tree.min, b_exp,
                                       self.lo, self._cap())  # fmt: skip
        self.steps += 1
        return SampledIds(ids, weights)

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Store ``(p + eps)^alpha`` for the live ids ``indices`` and raise the max priority.

        Pass ``p = |TD error|``: negative priorities are refused, not folded with ``abs``.
        An id that repeats takes its last priority. Ids that are no longer live (overwritten
        since they were drawn) are ignored.

        Args:
            indices: ``(k,)`` integer ids drawn by :meth:`sample` (in ``[0, hi)``).
            priorities: ``(k,)`` finite real numbers ``>= 0`` (e.g. ``|TD error|``).

        Raises:
            SpecError: wrong shapes or dtypes, an id never written, a negative, NaN or inf
                priority; nothing changes.
        """
        idx = check_ids("indices", indices)
        pri = _real_array("priorities", priorities, len(idx))
        status, slots, stored, raw_max, top, p_top = _kernels().priority_leaves(
            idx, pri, self.lo, self.hi, self.capacity or 1,
            self.eps, self.alpha)  # fmt: skip
        if status:  # the kernel found a bad value: say which
            _check_values("priorities", pri, len(pri))  # raises on a negative or non-finite one
            bad = idx[(idx < 0) | (idx >= self.hi)][0]
            raise SpecError(f"indices: expected ids in [0, {self.hi}) (written), got {bad}")
        if not len(slots):
            return
        self._check_top(top, p_top)
        self.tree._set_unique(slots, stored)
        self.max_priority = max(self.max_priority, raw_max)

    def check_storable(self, priorities: np.ndarray) -> None:
        """SpecError unless every ``(p + eps)^alpha`` of finite ``priorities >= 0`` fits the
        sum tree (a caller that stores data before setting its priorities checks first)."""
        p_top = float(priorities.max(initial=0.0))
        self._check_top(float(_power(p_top + self.eps, self.alpha)), p_top)

    def _check_top(self, top: float, p_top: float) -> None:
        if not top <= self.tree.max_value:  # inf after the power, or a sum that could overflow
            raise SpecError(
                f"priorities: expected (p + eps)^alpha <= {self.tree.max_value:.6g}, got "
                f"{top} from p = {p_top}"
            )

    def state_dict(self) -> dict[str, Any]:
        """The tree's leaves (a copy) and JSON-able scalars (window, counters, RNG state)."""
        return {
            "tree": self.tree.state_dict(),
            "alpha": self.alpha,
            "eps": self.eps,
            "max_priority": self.max_priority,
            "steps": self.steps,
            "window": [self.lo, self.hi],
            "rng": rng_state(self.rng),
        }

    def load_state_dict(
        self,
        sd: Mapping[str, Any],
        *,
        window: tuple[int, int] | None = None,
        where: str = "sampler",
    ) -> None:
        """Restore :meth:`state_dict` output; later samples equal the original's.

        Everything is checked before anything changes: the keys, ``alpha`` and ``eps`` equal to
        this sampler's, the window (equal to ``window`` when given, e.g. the buffer's), finite
        non-negative leaves that are zero outside the window, the RNG state.

        Raises:
            CheckpointError: a malformed or mismatching state; ``self`` is unchanged.
        """
        cap = self._cap()
        sd = check_keys(
            where, sd, ("tree", "alpha", "eps", "max_priority", "steps", "window", "rng")
        )
        for name in ("alpha", "eps"):
            value = sd[name]
            if not isinstance(value, float) or value != getattr(self, name):
                raise CheckpointError(
                    f"{where}.{name}: expected {getattr(self, name)} like this sampler, got "
                    f"{value!r}"
                )
        win = sd["window"]
        if not isinstance(win, (list, tuple)) or len(win) != 2:
            raise CheckpointError(f"{where}.window: expected [lo, hi], got {win!r}")
        lo = _count(f"{where}.window", win[0], 0)
        hi = _count(f"{where}.window", win[1], lo)
        if hi - lo > cap or (window is not None and (lo, hi) != tuple(window)):
            raise CheckpointError(
                f"{where}.window: expected {list(window) if window else 'at most capacity ids'}"
                f", got {[lo, hi]}"
            )
        steps = _count(f"{where}.steps", sd["steps"], 0)
        max_p = sd["max_priority"]
        ok = isinstance(max_p, float) and math.isfinite(max_p) and max_p > 0
        if not ok or not float(_power(np.float64(max_p), self.alpha)) <= self.tree.max_value:
            raise CheckpointError(
                f"{where}.max_priority: expected a float > 0 with max_priority^alpha <= "
                f"{self.tree.max_value:.6g}, got {max_p!r}"
            )
        tree = SumTree(cap)
        tree.load_state_dict(sd["tree"], where=f"{where}.tree")
        live = np.zeros(cap, dtype=bool)
        live[np.arange(lo, hi) % cap] = True
        if (tree.leaves[~live] != 0).any() or (tree.leaves[live] == 0).any():
            raise CheckpointError(
                f"{where}.tree.leaves: expected priorities > 0 exactly on the live ids [{lo}, {hi})"
            )
        # the last check: set_rng_state checks the whole state before it changes the generator
        self.rng = set_rng_state(self.rng, sd["rng"], where=f"{where}.rng")
        self.tree, self.lo, self.hi = tree, lo, hi
        self.max_priority, self.steps = max_p, steps


def check_beta(beta: Any) -> float:
    """``beta`` as a finite float >= 0 (ConfigError otherwise: ``inf`` made every weight 0)."""
    return real_number("beta", beta, 0.0, _FLOAT_MAX,
                       expected="a finite number >= 0 or a LinearSchedule")  # fmt: skip


def _power(x: Any, alpha: float) -> Any:
    """``x ** alpha`` in float64, ``inf`` (not a warning or an OverflowError) when too large."""
    with np.errstate(over="ignore"):
        return np.power(x, alpha)
