"""PyTorchRL's on-policy storage with Monte-Carlo returns: VanillaOnPolicyBuffer.

The base class of :class:`~rlstore.compat.pytorchrl.GAEBuffer` and
:class:`~rlstore.compat.pytorchrl.VTraceBuffer`: a facade over
:class:`~rlstore.buffers.rollout.RolloutBuffer` (see :mod:`rlstore.compat.pytorchrl` for
layout C and the truncation extension). Layout conversion, the view and row gathering live in
:mod:`rlstore.compat.pytorchrl._layout`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, cast

import numpy as np
import torch

from rlstore import returns as R
from rlstore._checks import as_device, real_number
from rlstore._trees import as_tensor
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.buffers.rollout_targets import IntrinsicConfig
from rlstore.compat.pytorchrl._layout import (
    SCALARS,
    Data,
    check_like,
    gather,
    index_plan,
    layout_a,
    map_dict,
    row_specs,
    take,
    view,
)  # fmt: skip
from rlstore.compat.pytorchrl.protocols import (
    ACT,
    ADV,
    DONE,
    DONE2,
    FVAL,
    IADV,
    IRET,
    IREW,
    IVAL,
    LOGP,
    OBS,
    OBS2,
    RET,
    REW,
    RHS,
    RHS2,
    SHIFTED,
    TRUNC,
    TRUNC2,
    VAL,
    Actor,
    Algorithm,
    OnPolicyDataKeys,
)  # fmt: skip
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError

__all__ = ["VanillaOnPolicyBuffer"]

_RESULTS = (RET, ADV, IRET, IADV)


class VanillaOnPolicyBuffer:
    """PyTorchRL's on-policy storage with Monte-Carlo returns
    (``vanilla_on_policy_buffer.VanillaOnPolicyBuffer``).

    ``ExternalReturn[t] = Reward[t] + gamma * (1 - done_A[t]) * ExternalReturn[t + 1]``,
    bootstrapped with ``V(Observation[L])`` at the rollout end and with ``FinalValue`` on
    truncation (GAE with lambda = 1 in :func:`rlstore.returns.gae`);
    ``Advantage = normalize(ExternalReturn - Value)`` over the whole rollout.

    The transitions are stored in a :class:`~rlstore.buffers.rollout.RolloutBuffer`
    (transition-aligned); the facade keeps only the one extra row of layout C (the next
    ``Observation`` / ``RecurrentHiddenStates`` / ``Done``, slot ``L``) and the ``Done`` of
    slot 0. ``data`` is a layout-C view assembled from them on first access after a change;
    :meth:`before_gradients` writes returns and advantages into it.

    Decisions that differ from PyTorchRL (its API is kept):

    * ``data`` is a view, not the storage: writing into it changes nothing stored, and it is
      rebuilt (results dropped) after the next insertion, :meth:`reset` or
      :meth:`after_gradients`. ``Reward`` / ``Value`` / ``LogProbability`` (and the intrinsic
      pair, ``FinalValue``) are stored as float32, ``Done`` as 0/1 of the sample's dtype
      (``Truncated`` and ``FinalValue`` only where a done transition was truncated);
    * advantages are normalized with :func:`rlstore.returns.normalize_advantages`: population
      std (ddof=0; PyTorchRL used torch's unbiased std) plus PyTorchRL's eps 1e-5 (1e-8 in
      :class:`VTraceBuffer`);
    * a partial rollout uses all ``L = used_capacity`` stored transitions (PyTorchRL's
      ``step - 1`` dropped the last one) and bootstraps from slot ``L``;
    * the first insertion after construction or :meth:`reset` also takes slot 0 from the
      sample's ``Observation``/``RecurrentHiddenStates``/``Done`` (PyTorchRL left zeros there);
    * inserting into a full rollout raises :class:`~rlstore.errors.CapacityError` instead of
      wrapping around; after :meth:`after_gradients` the next insertion starts a new rollout;
    * :meth:`after_gradients` (called after every gradient step, while minibatches are still
      drawn) does not disturb a running :meth:`generate_batches`, which reads the view it
      started with; PyTorchRL copied slot ``L`` over slot 0 at once, so later minibatches of
      the same update read the wrong first observation;
    * ``before_gradients`` keeps the stored recurrent state of slot ``L`` (the state *before*
      that observation) instead of overwriting it with the actor's output state;
    * ``update_storage_parameter`` raises :class:`~rlstore.errors.ConfigError` for a name that is
      not a numeric attribute of the buffer (PyTorchRL silently ignored it);
    * multiple critics (dict ``Value``) and the RND observation statistics (``algo.state_rms``)
      are not handled here; intrinsic rewards are scaled with rlstore's forward running
      discounted-return normalizer, per env and never reset at episode ends.

    Args:
        size: rollout length T (capacity along the time axis).
        device: torch device of the stored tensors (the actor's device).
        actor: an :class:`Actor`.
        algorithm: an :class:`Algorithm` (``gamma``; optional ``gamma_intrinsic``).
        envs: the vector env (anything with ``num_envs``) or None; used to check N.
    """

    storage_tensors: ClassVar[tuple[str, ...]] = OnPolicyDataKeys
    _adv_eps: ClassVar[float] = 1e-5
    _lam: float = 1.0

    def __init__(
        self, size: int, device: str | torch.device, actor: Actor, algorithm: Algorithm, envs: Any
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise CapacityError(f"size: expected a positive int, got {size!r}")
        if not isinstance(getattr(actor, "is_recurrent", None), bool):
            raise ConfigError("actor: expected an Actor with a bool attribute 'is_recurrent'")
        gamma = getattr(algorithm, "gamma", None)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)):
            raise ConfigError(
                "algorithm.gamma: expected an Algorithm with a float attribute 'gamma', "
                f"got {gamma!r}"
            )
        real_number("algorithm.gamma", gamma, 0.0, 1.0)
        self.envs = envs
        self.num_envs = getattr(envs, "num_envs", None) if envs is not None else None
        self.actor, self.algo = actor, algorithm
        self.device = as_device(device)
        self.recurrent_actor = actor.is_recurrent
        self.max_size = int(size)
        self._rb: RolloutBuffer | None = None
        self._rows: Data = {}  # per key one zero (N, ...) row: stored shape and dtype
        self._next: Data = {}  # Observation / RecurrentHiddenStates / Done of slot L
        self._done0: Any = None  # Done of slot 0
        self._view: Data | None = None
        self.int_reward_normalizer: Any = None
        self.reset()

    @classmethod
    def create_factory(cls, size: int) -> Callable[..., VanillaOnPolicyBuffer]:
        """A function ``(device, actor, algorithm, envs) -> buffer`` (PyTorchRL's factory style)."""

        def create_buffer_instance(device: Any, actor: Actor, algorithm: Algorithm, envs: Any):
            return cls(size, device, actor, algorithm, envs)

        return create_buffer_instance

    # ------------------------------------------------------------------ storage
    @property
    def size(self) -> int:
        """Number of transitions stored in the current rollout (``L``)."""
        return 0 if self._rb is None else self._rb.pos

    @property
    def step(self) -> int:
        """PyTorchRL's write cursor: ``size`` modulo the capacity."""
        return self.size % self.max_size

    @property
    def used_capacity(self) -> int:
        """Number of transitions stored in the current rollout (``L``; slot ``L`` is bootstrap)."""
        return self.size

    def init_tensors(self, sample: Mapping[str, Any]) -> None:
        """Take the stored keys, shapes and dtypes from ``sample`` (the first one, validated).

        ``Reward`` / ``Value`` / ``LogProbability`` (and ``IntrinsicReward`` /
        ``IntrinsicValue``, stored when the sample has both) are float32 with one value per env.
        """
        self._rows = row_specs(sample, self.device, self.recurrent_actor, self.num_envs)
        self._view = None

    def get_num_channels_obs(self, sample: Mapping[str, Any]) -> int:
        """Set and return ``num_channels_obs``: channels of one frame of ``sample[OBS]``.

        ``Observation`` rows are ``(C * frame_stack, ...)``; ``frame_stack`` comes from
        ``envs.env_kwargs["frame_stack"]`` when the env has it, else 1.
        """
        kwargs = getattr(self.envs, "env_kwargs", None) or {}
        frame_stack = int(kwargs.get("frame_stack", 1))
        obs = sample[OBS]
        first = next(iter(obs.values())) if isinstance(obs, Mapping) else obs
        channels = int(as_tensor(OBS, first).shape[1])
        if frame_stack < 1 or channels % frame_stack:
            raise SpecError(
                f"{OBS}: expected {channels} channels to be a multiple of frame_stack={frame_stack}"
            )
        self.num_channels_obs = channels // frame_stack
        return self.num_channels_obs

    def insert_transition(self, sample: Mapping[str, Any]) -> None:
        """Store one vector-env step (see :mod:`rlstore.compat.pytorchrl` for the keys).

        Raises:
            CapacityError: the rollout already holds ``size`` transitions.
            SpecError: a required key is missing or a value has the wrong shape or a lossy
                dtype (the buffer is left unchanged, the first sample included).
        """
        specs, got, nxt, args = self._prepare(sample)
        N, hidden = specs[DONE].shape[0], nxt.get(RHS) if self.recurrent_actor else None
        rb = self._rb or RolloutBuffer(
            self.max_size, N, intrinsic=IntrinsicConfig() if IREW in specs else None,
            device=self.device, advantage_normalization="none",
        )  # fmt: skip
        if isinstance(hidden, dict):
            hidden = tuple(hidden.values())
        rb.add(nxt[OBS], got[ACT], **args, hidden=hidden)
        if rb.pos == 1:
            self._done0 = nxt[DONE]
        self._rb, self._rows, self._fresh, self._view = rb, specs, False, None
        done_row = (got[DONE2] != 0).to(specs[DONE].dtype)
        self._next = {**nxt, OBS: got[OBS2], DONE: done_row}
        if RHS2 in got:
            self._next[RHS] = got[RHS2]

    def _prepare(self, sample: Mapping[str, Any]) -> tuple[Data, Data, Data, Data]:
        """Validate ``sample`` without changing anything: ``(row specs, checked sample values,
        the layout-C slot of the step, RolloutBuffer.add arguments from logp on)``."""
        if self.size >= self.max_size:
            raise CapacityError(
                f"insert_transition: the rollout is full ({self.max_size} transitions); call "
                "before_gradients() / after_gradients() (or reset()) first"
            )
        if not isinstance(sample, Mapping):
            raise SpecError(f"sample: expected a dict of tensors, got {type(sample).__name__}")
        specs = self._rows or row_specs(sample, self.device, self.recurrent_actor, self.num_envs)
        keys = [k for k in (DONE, OBS, RHS, ACT, *SCALARS) if k in specs]
        keys = [k for k in keys if k != RHS or self.recurrent_actor]
        got = {}
        for k in keys:
            src = SHIFTED.get(k, k)
            if src not in sample:
                raise SpecError(f"sample: missing key {src!r} (got keys {sorted(sample)})")
            got[src] = check_like(self.device, src, sample[src], specs[k])
        nxt = dict(self._next)
        if self._fresh or not nxt:  # slot 0 of a new rollout comes from the sample
            for k in (DONE, OBS, RHS):
                if k in keys and sample.get(k) is not None:
                    nxt[k] = check_like(self.device, k, sample[k], specs[k])
        N = specs[DONE].shape[0]
        done = got[DONE2].reshape(N) != 0
        trunc, fval = torch.zeros_like(done), None
        if TRUNC2 in sample:
            if FVAL not in sample:
                raise SpecError(f"sample: {TRUNC2!r} needs {FVAL!r} = V(final observation)")
            trunc = done & check_like(self.device, TRUNC2, sample[TRUNC2], specs[TRUNC]).reshape(N)
        if FVAL in sample:
            fval = check_like(self.device, FVAL, sample[FVAL], specs[VAL]).reshape(N)
        f = {k: got[k].reshape(N) for k in SCALARS if k in got}
        args = {"logp": f[LOGP], "value": f[VAL], "reward": f[REW], "terminated": done & ~trunc,
                "truncated": trunc, "final_value": fval, "int_reward": f.get(IREW),
                "int_value": f.get(IVAL)}  # fmt: skip
        return specs, got, nxt, args

    @property
    def data(self) -> Data:
        """The layout-C view: every stored key ``(size + 1, N, ...)`` (None: not stored).

        ``Observation`` / ``RecurrentHiddenStates`` / ``Done`` / ``Value`` / returns have the
        bootstrap slot ``L``; rows past it are zeros. Also ``Truncated`` / ``FinalValue``.
        """
        if self._view is None:
            self._view = {k: None for k in self.storage_tensors}
            if self._next:
                b = self._rb.get() if self._rb is not None and self.size else None
                nxt, done0, rec = self._next, self._done0, self.recurrent_actor
                self._view |= view(self._rows, b, self.max_size, nxt, done0, rec)
        return self._view

    def get_all_buffer_data(self, data_to_cpu: bool = False) -> Data:
        """All stored keys of :attr:`data` (``(size + 1, N, ...)`` each), as a new dict.

        Args:
            data_to_cpu: move (copy) every tensor to CPU memory.
        """
        move = (lambda t: t.cpu()) if data_to_cpu else (lambda t: t)
        return {k: map_dict(v, move) for k, v in self.data.items() if v is not None}

    def insert_data_slice(self, new_data: Mapping[str, Any]) -> None:
        """Replace the stored data by ``new_data`` (a :meth:`get_all_buffer_data` result).

        The data is taken as one full rollout of ``size`` transitions (``used_capacity ==
        size``), inserted step by step (validated like :meth:`insert_transition`); returns and
        advantages in it are kept until the next change.

        Raises:
            SpecError: unknown or missing keys, tensors whose leading axis is not ``size + 1``
                (the buffer is left unchanged).
        """
        allowed = set(self.storage_tensors) | {TRUNC, FVAL}
        unknown = sorted(set(new_data) - allowed)
        if unknown:
            raise SpecError(f"new_data: unknown keys {unknown} (allowed: {sorted(allowed)})")
        for k, v in new_data.items():
            for t in v.values() if isinstance(v, dict) else (v,):
                rows = 1 if k == RHS and not self.recurrent_actor else self.max_size + 1
                if t.shape[0] != rows:
                    raise SpecError(f"{k}: expected a leading axis of {rows}, got {tuple(t.shape)}")
        d = dict(new_data)
        if TRUNC not in d or FVAL not in d:
            d.pop(TRUNC, None)
        saved = (self._rb, self._rows, self._next, self._done0, self._fresh, self._view)
        self._rb, self._rows, self._next, self._fresh = None, {}, {}, True
        try:
            for t in range(self.max_size):
                sample = {k: take(v, t) for k, v in d.items()}  # RHS of a FF actor: one row
                for k, k2 in (*SHIFTED.items(), (FVAL, FVAL)):
                    if k in d:
                        sample[k2] = take(d[k], t + 1)
                VanillaOnPolicyBuffer.insert_transition(self, sample)
        except Exception:
            self._rb, self._rows, self._next, self._done0, self._fresh, self._view = saved
            raise
        self.data.update({k: d[k].to(self.device) for k in _RESULTS if k in d})

    def reset(self) -> None:
        """Set the counters to zero (the storage is kept and overwritten later)."""
        if self._rb is not None:
            self._rb.reset()
        self._fresh, self._view = True, None

    # ------------------------------------------------------------------ returns
    def _length(self) -> int:
        if self.size == 0:
            raise EmptyBufferError("before_gradients: no transition stored in this rollout")
        return self.size

    def _slot(self, pos: int) -> tuple[Any, Any, torch.Tensor]:
        d = self.data
        rhs = d.get(RHS)
        rhs = (
            None if rhs is None else map_dict(rhs, lambda t: t[pos if self.recurrent_actor else 0])
        )
        return map_dict(d[OBS], lambda t: t[pos]), rhs, d[DONE][pos]

    def _bootstrap(self, L: int) -> None:
        """Write V(Observation[L]) (and the intrinsic value) into slot L of the view."""
        obs, rhs, done = self._slot(L)
        with torch.no_grad():
            value_dict = self.actor.get_value(obs, rhs, done)
        if "value_net1" not in value_dict:
            raise SpecError(
                f"actor.get_value: expected a dict with 'value_net1', got {list(value_dict)}"
            )
        self.data[VAL][L].copy_(value_dict["value_net1"].reshape(self.data[VAL][L].shape))
        if self.data.get(IVAL) is not None and "ivalue_net1" in value_dict:
            self.data[IVAL][L].copy_(value_dict["ivalue_net1"].reshape(self.data[IVAL][L].shape))

    def compute_returns(
        self,
        rewards: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        dones: torch.Tensor,
        gamma: float,
        *,
        truncated: torch.Tensor | None = None,
        final_values: torch.Tensor | None = None,
    ) -> None:
        """Fill ``returns[:L + 1]`` in place (layout C tensors ``(size + 1, N, 1)``).

        ``returns[t]`` for ``t < L`` is the lambda-return of transition ``t`` (lambda = 1 here,
        ``gae_lambda`` in :class:`GAEBuffer`) and ``returns[L] = values[L]``; ``truncated`` /
        ``final_values`` are the optional layout-C truncation channel.
        """
        L = self._length()
        v, nv, term, trunc = layout_a(L, values, dones, truncated, final_values)
        _, ret = R.gae(rewards[:L].reshape(L, -1), v, nv, term, trunc, gamma=gamma, lam=self._lam)
        returns[:L] = ret.reshape(returns[:L].shape).to(returns.dtype)
        returns[L] = values[L]

    def compute_advantages(self, returns: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``normalize(returns[:L] - values[:L])`` over the rollout, shape ``(L, N, 1)``."""
        L = self._length()
        adv = (returns[:L] - values[:L]).float()
        return R.normalize_advantages(adv, eps=self._adv_eps)

    def _store_adv(self, key: str, adv: torch.Tensor) -> None:
        L = adv.shape[0]
        self.data[key][:L] = adv.reshape(self.data[key][:L].shape)
        self.data[key][L:] = 0

    def before_gradients(self) -> None:
        """Bootstrap from V(Observation[L]), then compute returns and normalized advantages."""
        L = self._length()
        self._bootstrap(L)
        d = self.data
        self.compute_returns(
            d[REW], d[RET], d[VAL], d[DONE], self.algo.gamma, truncated=d[TRUNC],
            final_values=d[FVAL],
        )  # fmt: skip
        self._store_adv(ADV, self.compute_advantages(d[RET], d[VAL]))
        g_int = getattr(self.algo, "gamma_intrinsic", None)
        if d.get(IREW) is not None and g_int is not None:
            self.normalize_int_rewards()
            no_done = torch.zeros_like(d[DONE])  # non-episodic intrinsic stream
            self.compute_returns(d[IREW], d[IRET], d[IVAL], no_done, g_int)
            self._store_adv(IADV, self.compute_advantages(d[IRET], d[IVAL]))

    def normalize_int_rewards(self) -> None:
        """Divide ``IntrinsicReward[:L]`` of the view by the running std of its discounted sum.

        The discounted sum runs forward in time per env with ``algo.gamma_intrinsic``, across
        rollouts and episode ends (:class:`rlstore.normalize.DiscountedReturnNormalizer`); no
        mean is subtracted (RND).
        """
        from rlstore.normalize import DiscountedReturnNormalizer

        L = self._length()
        if self.int_reward_normalizer is None:
            g_int = cast(Any, self.algo).gamma_intrinsic
            self.int_reward_normalizer = DiscountedReturnNormalizer(g_int)
        irew = self.data[IREW][:L]
        scaled = self.int_reward_normalizer(irew.reshape(L, -1))
        self.data[IREW][:L] = scaled.reshape(irew.shape).to(irew.dtype)

    def after_gradients(self, batch: Any, info: dict[str, Any]) -> dict[str, Any]:
        """Start a new rollout from the bootstrap slot ``L`` (it becomes slot 0).

        PyTorchRL calls this after *every* gradient step; later calls before the next
        insertion change nothing. A :meth:`generate_batches` generator that is still being
        consumed keeps yielding the old rollout.

        Returns:
            ``info`` unchanged.
        """
        self.reset()
        self._fresh = False
        return info

    def update_storage_parameter(self, parameter_name: str, new_parameter_value: float) -> None:
        """Set the numeric buffer attribute ``parameter_name`` (e.g. ``gae_lambda``).

        Raises:
            ConfigError: no such numeric attribute, or a non-numeric new value.
        """
        current = getattr(self, parameter_name, None)
        numeric = (int, float, np.integer, np.floating)
        if (
            parameter_name.startswith("_")
            or isinstance(current, bool)
            or not isinstance(current, numeric)
            or isinstance(getattr(type(self), parameter_name, None), property)
        ):
            raise ConfigError(
                f"parameter_name: {parameter_name!r} is not a numeric parameter of "
                f"{type(self).__name__}"
            )
        if isinstance(new_parameter_value, bool) or not isinstance(new_parameter_value, numeric):
            raise ConfigError(
                f"new_parameter_value: expected a number, got {new_parameter_value!r}"
            )
        setattr(self, parameter_name, type(current)(new_parameter_value))

    # ------------------------------------------------------------------ batches
    def _index_plan(
        self, num_mini_batch: int | None, mini_batch_size: int | None, epochs: int, shuffle: bool
    ) -> Iterator[torch.Tensor]:
        """Flat time-major indices ``t * N + n`` per minibatch (:func:`index_plan`)."""
        L, n = self._length(), self._rows[DONE].shape[0]
        sizes = (num_mini_batch, mini_batch_size, epochs, shuffle)
        yield from index_plan(L, n, self.device, self.recurrent_actor, *sizes)

    def generate_batches(
        self,
        num_mini_batch: int | None,
        mini_batch_size: int | None = None,
        num_epochs: int = 1,
        shuffle: bool = True,
    ) -> Iterator[Data]:
        """Yield minibatch dicts with every stored key.

        Feed-forward actors: shuffled flat steps, each step exactly once per epoch, minibatch
        size ``L * N / num_mini_batch`` (or ``mini_batch_size``; both given must agree).
        Recurrent actors: ``N / num_mini_batch`` whole env columns per minibatch, flattened
        time-major (``L * E`` rows), ``RecurrentHiddenStates`` of the first step only (``E``
        rows); ``Done`` rows mark episode starts. Sizes that do not divide raise ConfigError.
        """
        L, data = self._length(), self.data
        for idx in self._index_plan(num_mini_batch, mini_batch_size, num_epochs, shuffle):
            yield gather(data, idx, L, self.recurrent_actor)
