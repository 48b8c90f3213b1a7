"""On-policy rollout storage with GAE / V-trace returns and PPO minibatch generators.

Layout: every per-step field is a preallocated ``(T, N, *field_shape)`` torch tensor on
``device`` (``T = num_steps``, ``N = num_envs``), transition-aligned (``terminated[t]`` /
``truncated[t]`` describe ``obs[t] -> successor``; see :mod:`rlstore.returns`). Observations
(a Box array or a one-level dict of arrays), actions and the optional recurrent ``hidden``
state are allocated lazily from the first :meth:`RolloutBuffer.add` with their dtypes
preserved; log-probs, values, rewards and ``final_value`` are stored as float32.

The class composes three pieces: input validation (:mod:`rlstore.buffers.rollout_checks`; a
rejected :meth:`RolloutBuffer.add` changes nothing), target computation
(:mod:`rlstore.buffers.rollout_targets`: :meth:`RolloutBuffer.compute_returns` builds
``next_values`` (``values[t+1]``, ``final_value`` on truncation, ``last_value`` at the last
stored step) and calls :func:`rlstore.returns.gae`, :meth:`RolloutBuffer.compute_vtrace`
re-evaluates the stored data through the caller's networks and calls
:func:`rlstore.returns.vtrace`) and minibatch generation (:mod:`rlstore.buffers.rollout_minibatches`
over :mod:`rlstore.minibatches`).

Intrinsic stream (RND, Burda et al. 2018), enabled by an :class:`IntrinsicConfig` (defined in
:mod:`rlstore.buffers.rollout_targets`, re-exported here): intrinsic rewards are divided by the
running std of their per-env discounted sum, the intrinsic GAE is non-episodic, and the
training advantage is ``ext_coef * A_ext + int_coef * A_int``.

Example:
    >>> import torch
    >>> rb = RolloutBuffer(num_steps=4, num_envs=2, gamma=0.9, lam=0.95, seed=0)
    >>> for t in range(4):
    ...     rb.add(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), torch.zeros(2),
    ...            torch.zeros(2), torch.ones(2), torch.zeros(2, dtype=torch.bool),
    ...            torch.zeros(2, dtype=torch.bool))
    >>> rb.compute_returns(torch.zeros(2))
    >>> [mb.advantages.shape for mb in rb.minibatches(num_minibatches=2)]
    [torch.Size([4]), torch.Size([4])]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from rlstore._checks import as_device
from rlstore._trees import (
    tree_leaves,
    tree_map,
    tree_to_state,
)
from rlstore.buffers._rollout_state import stage_rollout_state
from rlstore.buffers.rollout_checks import (
    FLAGS,
    TREES,
    AdvNorm,
    StepChecker,
    check_rollout_args,
)
from rlstore.buffers.rollout_minibatches import RolloutMinibatches
from rlstore.buffers.rollout_targets import IntrinsicConfig, gae_targets, vtrace_targets
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError
from rlstore.minibatches import (
    Hidden,
    Obs,
    RolloutBatch,
)
from rlstore.normalize import DiscountedReturnNormalizer
from rlstore.returns._io import _check_positive, _check_unit
from rlstore.samplers import make_rng, rng_state, set_rng_state

__all__ = ["RolloutBuffer", "RolloutBatch", "IntrinsicConfig"]

_FLOATS = ("logprobs", "values", "rewards", "final_values")
_INT_FLOATS = ("int_rewards", "int_values")


class RolloutBuffer(RolloutMinibatches):
    """Fixed-size ``(num_steps, num_envs)`` on-policy storage (see the module docstring).

    Args:
        num_steps: T, steps per env per rollout (>= 1).
        num_envs: N, vectorized envs (>= 1).
        gamma: discount of the extrinsic return, in [0, 1].
        lam: GAE lambda, in [0, 1].
        advantage_normalization: ``"none"``; ``"batch"`` (over the whole rollout, applied when
            drawing minibatches); ``"minibatch"`` (per minibatch, over real entries only).
        intrinsic: settings of an intrinsic reward stream (or their dict), or None for none.
        device: where tensors are stored and minibatches are produced.
        seed: int, :class:`numpy.random.Generator` or None; drives minibatch shuffling and its
            state is saved in :meth:`state_dict`.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        *,
        gamma: float = 0.99,
        lam: float = 0.95,
        advantage_normalization: AdvNorm = "minibatch",
        intrinsic: IntrinsicConfig | dict[str, Any] | None = None,
        device: str | torch.device = "cpu",
        seed: int | np.random.Generator | None = None,
    ) -> None:
        intrinsic = check_rollout_args(
            num_steps, num_envs, gamma, lam, advantage_normalization, intrinsic
        )
        self.num_steps, self.num_envs = int(num_steps), int(num_envs)
        self.gamma, self.lam = float(gamma), float(lam)
        self.advantage_normalization: AdvNorm = advantage_normalization
        self.intrinsic = intrinsic
        self.device = as_device(device)
        self._check = StepChecker(self.num_envs, self.device)
        self._rng = make_rng(seed)  # ConfigError for a bool, a negative int or another type
        self._seed = None if seed is None or isinstance(seed, np.random.Generator) else int(seed)
        T, N = self.num_steps, self.num_envs
        self._float_names = _FLOATS + (_INT_FLOATS if intrinsic is not None else ())
        if intrinsic is not None:  # RND reward scaling: running std of the discounted sum
            self._normalizer = DiscountedReturnNormalizer(gamma=intrinsic.int_gamma)
        # the per-env scalar streams share one (K, T, N) float32 block and the three flags one
        # (3, T, N) bool block, so that add() writes each with one copy; _data holds views.
        # obs / actions / hidden are allocated lazily from the first add (dtypes preserved),
        # final_obs from the first add that gives one.
        self._data: dict[str, Any] = {}
        try:
            self._pack(
                torch.zeros(len(self._float_names), T, N, device=self.device),
                torch.zeros(len(FLAGS), T, N, dtype=torch.bool, device=self.device),
            )
            self._data["episode_time"] = torch.zeros(T, N, dtype=torch.int64, device=self.device)
        except (TypeError, ValueError, RuntimeError, MemoryError) as exc:  # sizes torch refuses
            raise CapacityError(
                f"num_steps, num_envs: cannot allocate {T} x {N} steps ({exc})"
            ) from None
        self._hidden_given: bool | None = None
        self._next_episode_time = torch.zeros(N, dtype=torch.int64, device=self.device)
        self._pos = 0
        self._results: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ properties

    @property
    def pos(self) -> int:
        """Number of steps stored per env (0 .. num_steps)."""
        return self._pos

    @property
    def full(self) -> bool:
        """True when ``num_steps`` steps have been added since the last :meth:`reset`."""
        return self._pos == self.num_steps

    def __len__(self) -> int:
        """Number of stored transitions, ``pos * num_envs``."""
        return self._pos * self.num_envs

    @property
    def computed(self) -> bool:
        """True when advantages/returns are available for the stored steps."""
        return bool(self._results)

    @property
    def nbytes(self) -> int:
        """Bytes held by the preallocated storage."""
        return sum(x.element_size() * x.numel() for x in tree_leaves(self._data))

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments as a JSON-able dict."""
        return {
            "num_steps": self.num_steps,
            "num_envs": self.num_envs,
            "gamma": self.gamma,
            "lam": self.lam,
            "advantage_normalization": self.advantage_normalization,
            "intrinsic": None if self.intrinsic is None else asdict(self.intrinsic),
            "device": str(self.device),
            "seed": self._seed,
        }

    # ------------------------------------------------------------------ writing

    def _pack(self, floats: torch.Tensor, flags: torch.Tensor) -> None:
        self._floats, self._flags = floats, flags
        self._data |= dict(zip(self._float_names, floats, strict=True))
        self._data |= dict(zip(FLAGS, flags, strict=True))

    def add(
        self,
        obs: Any,
        action: Any,
        logp: Any,
        value: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        *,
        final_value: Any = None,
        final_obs: Any = None,
        hidden: Any = None,
        int_reward: Any = None,
        int_value: Any = None,
    ) -> None:
        """Store one step of all N envs (tensors or arrays; a rejected add changes nothing).

        Args:
            obs: ``(N, *obs_shape)`` array, or a dict of such arrays (one level).
            action: ``(N, *act_shape)``.
            logp: ``(N,)`` log-prob of ``action`` under the acting policy.
            value: ``(N,)`` ``V(obs)``.
            reward: ``(N,)`` reward of the transition.
            terminated: ``(N,)`` bool, the transition reached a terminal state.
            truncated: ``(N,)`` bool, the episode was cut (time limit) after this transition.
            final_value: ``(N,)`` ``V(final_obs)``, required when an env is truncated and not
                terminated (read only for those envs).
            final_obs: like ``obs``, the true successor observation ``final_obs`` of the
                truncated-and-not-terminated envs (the rows of other envs are ignored and
                stored as zeros, but must be finite numbers of the obs dtype). Optional for
                :meth:`compute_returns` (which uses ``final_value``); required by
                :meth:`compute_vtrace` for every such step, because V-trace re-evaluates
                ``V(final_obs)`` with the current critic. Giving it keeps a second
                ``(T, N, *obs_shape)`` array from then on.
            hidden: recurrent state *before* this step: a tensor or tuple of tensors with a
                leading env axis (e.g. LSTM ``(h, c)`` each ``(N, layers, H)``).
            int_reward, int_value: ``(N,)`` intrinsic reward and value, required exactly when
                the buffer has an :class:`IntrinsicConfig`.

        Raises:
            CapacityError: the buffer already holds ``num_steps`` steps.
            SpecError: a field has the wrong shape, dtype or structure, or non-finite values.

        After the first add, inputs that already have the stored dtypes, device and shapes
        take a conversion-free fast path (:meth:`StepChecker.fast_step`); anything else goes
        through the validating :meth:`StepChecker.step`. Both store identical bytes.
        """
        if self._pos >= self.num_steps:
            raise CapacityError(
                f"add: the buffer is full (num_steps={self.num_steps}); compute returns, draw "
                "minibatches, then reset() before adding the next rollout"
            )
        args = {
            "obs": obs,
            "action": action,
            "logp": logp,
            "value": value,
            "reward": reward,
            "terminated": terminated,
            "truncated": truncated,
            "final_value": final_value,
            "final_obs": final_obs,
            "hidden": hidden,
            "int_reward": int_reward,
            "int_value": int_value,
        }
        d = self._data
        hg, hi = self._hidden_given, self.intrinsic is not None
        # fast path (no conversion) when the inputs already match the storage; None -> the
        # validating slow twin, which also raises the errors
        checked = self._check.fast_step(args, d, hidden_given=hg, has_intrinsic=hi)
        row, block, term, trunc, given = checked or self._check.step(
            args, d, hidden_given=hg, has_intrinsic=hi
        )
        # ---- everything validated: allocate lazily, then write
        T = self.num_steps
        for k in TREES:
            if k in row and k not in d:
                d[k] = tree_map(lambda x: x.new_zeros((T, *x.shape)), row[k])
        self._hidden_given = hidden is not None
        p = self._pos
        for k, v in row.items():
            if isinstance(v, torch.Tensor):  # the common single-tensor field
                d[k][p] = v
                continue
            for dst, src in zip(tree_leaves(d[k]), tree_leaves(v), strict=True):
                dst[p] = src
        self._floats[:, p] = block
        self._flags[:, p] = torch.stack((term, trunc, given))
        d["episode_time"][p] = self._next_episode_time  # a copy: the counter moves in place
        self._next_episode_time.add_(1).masked_fill_(term | trunc, 0)
        self._pos = p + 1
        self._results = {}

    def truncate_last(self, final_value: Any) -> None:
        """Mark the last stored step of every env as truncated, bootstrapping from ``final_value``.

        For APIs that learn that a trajectory was cut only after its last step was stored
        (Spinning Up's ``finish_path(last_val)``): the step then counts as if it had been added
        with ``truncated=True, final_value=final_value`` (a step that terminated keeps its flag
        and ignores the value). Computed returns are dropped.

        Args:
            final_value: ``(N,)`` finite ``V(s_T)`` of the state after the last stored step.

        Raises:
            EmptyBufferError: no step stored. SpecError: a bad ``final_value`` (nothing changes).
        """
        p = self._require_steps("truncate_last")
        value = self._finite("final_value", final_value)
        self._data["truncated"][p - 1] = True  # terminated steps: no bootstrap, value zeroed
        self._data["final_values"][p - 1] = value.masked_fill(self._data["terminated"][p - 1], 0)
        self._next_episode_time.zero_()
        self._results = {}

    def terminate_last(self, envs: Any) -> None:
        """Mark the last stored step of the envs in the ``(N,)`` bool mask ``envs`` as terminated.

        For APIs that end an episode after its last step was stored (PyTorchRL's PPO+D starts a
        demo replay in an env slot mid-episode): the step then counts as if it had been added
        with ``terminated=True`` (no bootstrap, the trace is cut). Computed returns are dropped.

        Raises:
            EmptyBufferError: no step stored. SpecError: ``envs`` is not an ``(N,)`` bool or 0/1
                mask (nothing changes).
        """
        p = self._require_steps("terminate_last")
        mask = self._check.vector("envs", envs, flag=True)
        self._data["terminated"][p - 1] |= mask
        self._next_episode_time[mask] = 0
        self._results = {}

    def reset(self) -> None:
        """Forget the stored steps (storage is kept; episode step counters carry over)."""
        self._pos = 0
        self._results = {}

    # ------------------------------------------------------------------ returns

    def _require_steps(self, what: str) -> int:
        if self._pos == 0:
            raise EmptyBufferError(f"{what}: the buffer holds no steps; add() a rollout first")
        return self._pos

    def _finite(self, name: str, x: Any) -> torch.Tensor:
        return self._check.finite(name, x)

    def compute_returns(self, last_value: Any, *, last_int_value: Any = None) -> None:
        """GAE advantages and TD(lambda) returns of the stored steps (:func:`rlstore.returns.gae`).

        Args:
            last_value: ``(N,)`` ``V(next_obs)`` after the last stored step (the bootstrap; it is
                ignored for envs whose last step terminated and replaced by ``final_value`` for
                envs whose last step was truncated).
            last_int_value: ``(N,)`` intrinsic value of ``next_obs``; required with an intrinsic
                stream. Each call updates the intrinsic reward normalizer once.

        Afterwards :meth:`get` and the generators see ``advantages`` (with an intrinsic stream
        the combined ``ext_coef * A_ext + int_coef * A_int``) and the extrinsic ``returns``.
        """
        p = self._require_steps("compute_returns")
        last = self._finite("last_value", last_value)
        last_i = None
        if self.intrinsic is None and last_int_value is not None:
            raise ConfigError(
                "last_int_value: given but the buffer has no intrinsic stream; construct it "
                "with intrinsic=IntrinsicConfig(...)"
            )
        if self.intrinsic is not None:
            if last_int_value is None:
                raise SpecError(
                    "last_int_value: expected (N,) V_int(next_obs) (the buffer has an intrinsic "
                    "stream), got None"
                )
            last_i = self._finite("last_int_value", last_int_value)
        self._results = gae_targets(
            self._view(p),
            last,
            gamma=self.gamma,
            lam=self.lam,
            intrinsic=self.intrinsic,
            last_int_value=last_i,
            int_reward_normalizer=None if self.intrinsic is None else self._normalizer,
        )

    def compute_vtrace(
        self,
        evaluate: Callable[[Obs, torch.Tensor, Hidden | None], tuple[Any, Any]],
        last_value: Any,
        *,
        lam: float = 1.0,
        rho_bar: float = 1.0,
        c_bar: float = 1.0,
        pg_rho_bar: float = 1.0,
    ) -> None:
        """V-trace targets (IMPALA section 4) with the learner's current networks.

        ``evaluate(obs, actions, hidden)`` receives the stored ``(P, N, ...)`` observations,
        actions and per-step hidden states (None if none were stored) and returns
        ``(target_logp, values)``, each ``(P, N)``, of the current policy and critic; it runs
        under ``torch.no_grad()``. The behaviour log-probs are the stored ``logprobs``.
        Truncated (and not terminated) steps bootstrap from the *current* critic too:
        ``evaluate`` is called a second time on their stored ``final_obs``, shaped
        ``(K, 1, ...)`` with the actions and hidden states of those steps, and its values are
        used (the rollout-time ``final_value`` is not). Such steps therefore need
        ``add(..., final_obs=...)``; without it this raises a :class:`SpecError` before
        ``evaluate`` is called.
        Afterwards ``returns`` holds ``vs`` and ``advantages`` the policy-gradient advantages;
        the stored ``values`` / ``logprobs`` are unchanged (they stay PPO's "old" values).

        Args:
            evaluate: the caller's re-evaluation callable (see above).
            last_value: ``(N,)`` current-critic ``V(next_obs)`` after the last stored step.
            lam: trace lambda (IMPALA uses 1.0; independent of the buffer's GAE ``lam``).
            rho_bar, c_bar, pg_rho_bar: importance-weight clipping thresholds.
        """
        if self.intrinsic is not None:
            raise ConfigError("compute_vtrace: not supported with an intrinsic stream")
        p = self._require_steps("compute_vtrace")
        if not callable(evaluate):
            raise ConfigError(
                f"evaluate: expected a callable (obs, actions, hidden) -> (target_logp, "
                f"values), got {type(evaluate).__name__}"
            )
        last = self._finite("last_value", last_value)
        # checked like rlstore.returns.vtrace checks them, before evaluate runs the networks
        lam = _check_unit("lam", lam)
        clip = {"rho_bar": rho_bar, "c_bar": c_bar, "pg_rho_bar": pg_rho_bar}
        clip = {k: _check_positive(k, v) for k, v in clip.items()}
        batch = self._view(p)
        self._results = vtrace_targets(batch, evaluate, last, gamma=self.gamma, lam=lam, **clip)

    # ------------------------------------------------------------------ reading

    def _view(self, p: int) -> RolloutBatch:
        if "obs" not in self._data:
            raise EmptyBufferError("get: the buffer holds no steps; add() a rollout first")
        view = {k: tree_map(lambda x: x[:p], v) for k, v in self._data.items()}
        return RolloutBatch(**view, **self._results)

    def get(self) -> RolloutBatch:
        """The stored ``(pos, N, ...)`` steps as a :class:`RolloutBatch` of read-only views.

        ``advantages`` are raw (unnormalized); do not modify the tensors.
        """
        return self._view(self._require_steps("get"))

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict[str, Any]:
        """Nested dict of CPU tensors and JSON scalars: config, cursor, data, results, RNG."""
        state: dict[str, Any] = {
            "config": self.config(),
            "pos": self._pos,
            "hidden_given": self._hidden_given,
            "rng": rng_state(self._rng),
            "data": tree_to_state(self._data),
            "next_episode_time": tree_to_state(self._next_episode_time),
            "results": tree_to_state(self._results),
        }
        if self.intrinsic is not None:
            state["normalizer"] = self._normalizer.state_dict()
        return state

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a buffer with the same num_steps / num_envs.

        All or nothing: the whole state (config, field names, shapes and dtypes, ``pos``,
        ``hidden_given``, results, normalizer and RNG state) is validated before anything of
        this buffer changes.

        Raises:
            CheckpointError: anything missing, malformed or inconsistent (the message says what).
        """
        staged = stage_rollout_state(
            sd,
            num_steps=self.num_steps,
            num_envs=self.num_envs,
            float_names=self._float_names,
            device=self.device,
            normalizer=self._normalizer if self.intrinsic is not None else None,
        )
        normalizer, rng = staged.pop("normalizer"), staged.pop("rng")
        if normalizer is not None:
            self._normalizer = normalizer
        self._data, self._results = staged["data"], staged["results"]
        self._next_episode_time = staged["next_episode_time"]
        self._pack(staged["floats"], staged["flags"])
        self._pos, self._hidden_given = staged["pos"], staged["hidden_given"]
        self._rng = set_rng_state(self._rng, rng)  # validated on a scratch Generator
