"""PyTorchRL's on-policy storage with Monte-Carlo returns: VanillaOnPolicyBuffer.

The base class of :class:`~rlstore.compat.pytorchrl.GAEBuffer` and
:class:`~rlstore.compat.pytorchrl.VTraceBuffer`: layout-C storage and insertion (see
:mod:`rlstore.compat.pytorchrl` for the layout and the truncation extension), the bootstrap,
returns and advantages, and the minibatch generator. Layout conversion and row gathering live
in :mod:`rlstore.compat.pytorchrl._layout`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any, ClassVar, cast

import numpy as np
import torch

from rlstore import returns as R
from rlstore._checks import as_device, real_number
from rlstore._trees import as_tensor, cast_lossless, check_real
from rlstore.compat.pytorchrl._layout import (
    Data,
    carry_over,
    gather,
    index_plan,
    layout_a,
    map_dict,
)
from rlstore.compat.pytorchrl.protocols import (
    ACT,
    ADV,
    DONE,
    FVAL,
    IADV,
    IRET,
    IREW,
    IVAL,
    LOGP,
    OBS,
    RET,
    REW,
    RHS,
    SHIFTED,
    TRUNC,
    TRUNC2,
    VAL,
    Actor,
    Algorithm,
    OnPolicyDataKeys,
)
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError

__all__ = ["VanillaOnPolicyBuffer"]


class VanillaOnPolicyBuffer:
    """PyTorchRL's on-policy storage with Monte-Carlo returns
    (``vanilla_on_policy_buffer.VanillaOnPolicyBuffer``).

    ``ExternalReturn[t] = Reward[t] + gamma * (1 - done_A[t]) * ExternalReturn[t + 1]``,
    bootstrapped with ``V(Observation[L])`` at the rollout end and with ``FinalValue`` on
    truncation (GAE with lambda = 1 in :func:`rlstore.returns.gae`);
    ``Advantage = normalize(ExternalReturn - Value)`` over the whole rollout.

    Decisions that differ from PyTorchRL (its API is kept):

    * advantages are normalized with :func:`rlstore.returns.normalize_advantages`: population
      std (ddof=0; PyTorchRL used torch's unbiased std) plus PyTorchRL's eps 1e-5 (1e-8 in
      :class:`VTraceBuffer`);
    * a partial rollout uses all ``L = used_capacity`` stored transitions (PyTorchRL's
      ``step - 1`` dropped the last one) and bootstraps from slot ``L``;
    * the first insertion after construction or :meth:`reset` also writes slot 0 from the
      sample's ``Observation``/``RecurrentHiddenStates``/``Done`` (PyTorchRL left zeros there);
    * inserting into a full rollout raises :class:`~rlstore.errors.CapacityError` instead of
      wrapping around over unused data; after :meth:`after_gradients` the next insertion
      starts a new rollout;
    * :meth:`after_gradients` (called after every gradient step, while minibatches are still
      drawn) changes no data; PyTorchRL copied slot ``L`` over slot 0 at once, so later
      minibatches of the same update read the wrong first observation;
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
        self.max_size, self.size, self.step = int(size), 0, 0
        self.data: Data = {k: None for k in self.storage_tensors}
        self.int_reward_normalizer: Any = None
        self._fresh = True
        self.reset()

    @classmethod
    def create_factory(cls, size: int) -> Callable[..., VanillaOnPolicyBuffer]:
        """A function ``(device, actor, algorithm, envs) -> buffer`` (PyTorchRL's factory style)."""

        def create_buffer_instance(device: Any, actor: Actor, algorithm: Algorithm, envs: Any):
            return cls(size, device, actor, algorithm, envs)

        return create_buffer_instance

    # ------------------------------------------------------------------ storage
    @property
    def used_capacity(self) -> int:
        """Number of transitions stored in the current rollout (``L``; slot ``L`` is bootstrap)."""
        return self.size

    def _alloc_like(self, key: str, value: Any) -> torch.Tensor:
        v = check_real(key, as_tensor(key, value))  # no complex storage
        rows = 1 if key == RHS and not self.recurrent_actor else self.max_size + 1
        return torch.zeros(rows, *v.shape, dtype=v.dtype, device=self.device)

    def init_tensors(self, sample: Mapping[str, Any]) -> None:
        """Lazily allocate ``(size + 1, *value.shape)`` zero tensors for every key of ``sample``.

        Also allocates ``ExternalReturn``/``Advantage`` like ``Reward``/``Value``, the extension
        keys ``Truncated``/``FinalValue`` like ``Done``/``Value``, and the intrinsic returns and
        advantages when the sample has ``IntrinsicReward`` and ``IntrinsicValue``.
        """
        new: Data = {}
        for k in self.storage_tensors:
            if k in sample and sample[k] is not None:
                new[k] = map_dict(sample[k], partial(self._alloc_like, k))
        for k in (OBS, DONE, ACT, REW, VAL, LOGP):
            if k not in new:
                raise SpecError(f"sample: missing key {k!r} (got keys {sorted(sample)})")
        if self.recurrent_actor and RHS not in new:
            raise SpecError(f"sample: a recurrent actor needs the key {RHS!r}")
        if isinstance(new[VAL], dict):
            raise SpecError(f"{VAL}: multiple critics (a dict of values) are not supported")
        n = new[DONE].shape[1] if new[DONE].dim() > 1 else 0
        if self.num_envs is not None and n != self.num_envs:
            raise SpecError(
                f"{DONE}: expected a leading env axis of {self.num_envs} (envs.num_envs), "
                f"got shape {tuple(new[DONE].shape[1:])}"
            )
        new[RET] = torch.zeros_like(new[REW], dtype=torch.float32)
        new[ADV] = torch.zeros_like(new[VAL], dtype=torch.float32)
        new[TRUNC] = torch.zeros_like(new[DONE], dtype=torch.bool)
        new[FVAL] = torch.zeros_like(new[VAL])
        if IREW in new and IVAL in new:
            new[IRET] = torch.zeros_like(new[IREW], dtype=torch.float32)
            new[IADV] = torch.zeros_like(new[IVAL], dtype=torch.float32)
        self.data.update(new)

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

    def _check(self, key: str, value: Any, target: Any) -> Any:
        if isinstance(target, dict):
            if not isinstance(value, Mapping) or set(value) != set(target):
                raise SpecError(f"{key}: expected a dict with keys {sorted(target)}, got {value!r}")
            return {x: self._check(f"{key}[{x!r}]", value[x], target[x]) for x in target}
        v = as_tensor(key, value)
        if tuple(v.shape) != tuple(target.shape[1:]):
            raise SpecError(
                f"{key}: expected shape {tuple(target.shape[1:])}, got {tuple(v.shape)}"
            )
        # lossless only: no 0.5 into an int field, no NaN / inf, no float32 overflow, no complex
        return cast_lossless(key, v, target.dtype)

    def insert_transition(self, sample: Mapping[str, Any]) -> None:
        """Store one vector-env step (see the module docstring for keys and positions).

        Raises:
            CapacityError: the rollout already holds ``size`` transitions.
            SpecError: a required key is missing or a value has the wrong shape (the buffer is
                left unchanged).
        """
        data, writes = self._prepare(sample)
        self.data = data
        for k, pos, v in writes:
            if isinstance(v, dict):
                for x in v:
                    self.data[k][x][pos].copy_(v[x])
            else:
                self.data[k][pos].copy_(v)
        if TRUNC2 not in sample:
            self.data[TRUNC][self.step + 1].zero_()
        self._fresh = False
        self.step = (self.step + 1) % self.max_size
        self.size += 1

    def _prepare(self, sample: Mapping[str, Any]) -> tuple[Data, list[tuple[str, int, Any]]]:
        """Validate ``sample`` without changing anything: ``(data, writes)``, where ``data`` is
        the storage dict to use (newly allocated on the first sample) and ``writes`` the
        planned ``(key, position, value)`` copies. Raises what :meth:`insert_transition` does."""
        if self.size >= self.max_size:
            raise CapacityError(
                f"insert_transition: the rollout is full ({self.max_size} transitions); call "
                "before_gradients() / after_gradients() (or reset()) first"
            )
        if not isinstance(sample, Mapping):
            raise SpecError(f"sample: expected a dict of tensors, got {type(sample).__name__}")
        saved = self.data
        self.data = dict(saved)
        try:
            if self.data[OBS] is None:  # the first sample: allocate into the copy
                self.init_tensors(sample)
            return self.data, self._planned_writes(sample)
        finally:
            self.data = saved  # a rejected first sample leaves nothing allocated

    def _planned_writes(self, sample: Mapping[str, Any]) -> list[tuple[str, int, Any]]:
        """Validate ``sample`` against the allocated tensors: ``[(key, position, value)]``."""
        writes: list[tuple[str, int, Any]] = []
        for k in (*self.storage_tensors, TRUNC, FVAL):
            if self.data.get(k) is None or k in (RET, IRET, ADV, IADV):
                continue
            if k == RHS and not self.recurrent_actor:
                continue
            src = SHIFTED.get(k, k)
            if src not in sample:
                if k in (TRUNC, FVAL):
                    continue
                raise SpecError(f"sample: missing key {src!r} (got keys {sorted(sample)})")
            pos = self.step + 1 if k in SHIFTED or k == FVAL else self.step
            writes.append((k, pos, self._check(src, sample[src], self.data[k])))
            if k in SHIFTED and self.step == 0 and self._fresh and sample.get(k) is not None:
                writes.append((k, 0, self._check(k, sample[k], self.data[k])))
        if TRUNC2 in sample and FVAL not in sample:
            raise SpecError(f"sample: {TRUNC2!r} needs {FVAL!r} = V(final observation)")
        return writes

    def get_all_buffer_data(self, data_to_cpu: bool = False) -> Data:
        """All allocated tensors (``(size + 1, N, ...)`` each), as a new dict of views.

        Args:
            data_to_cpu: move (copy) every tensor to CPU memory.
        """
        data = {k: v for k, v in self.data.items() if v is not None}
        if data_to_cpu:
            data = {k: map_dict(v, lambda t: t.cpu()) for k, v in data.items()}
        else:
            data = {k: map_dict(v, lambda t: t) for k, v in data.items()}
        return data

    def insert_data_slice(self, new_data: Mapping[str, Any]) -> None:
        """Replace the stored data by ``new_data`` (a :meth:`get_all_buffer_data` result).

        The data is taken as one full rollout of ``size`` transitions (``used_capacity ==
        size``), moved to this buffer's device.

        Raises:
            SpecError: unknown keys, or tensors whose leading axis is not ``size + 1``.
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
        self.data = {k: None for k in self.storage_tensors}
        self.data.update({k: map_dict(v, lambda t: t.to(self.device)) for k, v in new_data.items()})
        self.step, self.size, self._fresh = 0, self.max_size, False

    def reset(self) -> None:
        """Set the counters to zero (allocated tensors are kept and overwritten later)."""
        self.step, self.size, self._fresh = 0, 0, True

    # ------------------------------------------------------------------ returns
    def _slot(self, pos: int) -> tuple[Any, Any, torch.Tensor]:
        rhs = self.data.get(RHS)
        rhs_pos = pos if self.recurrent_actor else 0
        rhs = None if rhs is None else map_dict(rhs, lambda t: t[rhs_pos])
        return map_dict(self.data[OBS], lambda t: t[pos]), rhs, self.data[DONE][pos]

    def _length(self) -> int:
        if self.size == 0:
            raise EmptyBufferError("before_gradients: no transition stored in this rollout")
        return self.size

    def _bootstrap(self, L: int) -> None:
        """Write V(Observation[L]) (and the intrinsic value) into slot L."""
        obs, rhs, done = self._slot(L)
        with torch.no_grad():
            value_dict = self.actor.get_value(obs, rhs, done)
        if "value_net1" not in value_dict:
            raise SpecError(
                f"actor.get_value: expected a dict with 'value_net1', got {list(value_dict)}"
            )
        self.data[VAL][L].copy_(value_dict["value_net1"])
        if self.data.get(IVAL) is not None and "ivalue_net1" in value_dict:
            self.data[IVAL][L].copy_(value_dict["ivalue_net1"])

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

    def _intrinsic(self) -> bool:
        return (
            self.data.get(IREW) is not None
            and self.data.get(IVAL) is not None
            and getattr(self.algo, "gamma_intrinsic", None) is not None
        )

    def before_gradients(self) -> None:
        """Bootstrap from V(Observation[L]), then compute returns and normalized advantages."""
        L = self._length()
        self._bootstrap(L)
        d = self.data
        self.compute_returns(
            d[REW],
            d[RET],
            d[VAL],
            d[DONE],
            self.algo.gamma,
            truncated=d[TRUNC],
            final_values=d[FVAL],
        )
        self._store_adv(ADV, self.compute_advantages(d[RET], d[VAL]))
        if self._intrinsic():
            self.normalize_int_rewards()
            no_done = torch.zeros_like(d[DONE])  # non-episodic intrinsic stream
            g_int = cast(Any, self.algo).gamma_intrinsic
            self.compute_returns(d[IREW], d[IRET], d[IVAL], no_done, g_int)
            self._store_adv(IADV, self.compute_advantages(d[IRET], d[IVAL]))

    def normalize_int_rewards(self) -> None:
        """Divide ``IntrinsicReward[:L]`` by the running std of its discounted sum (RND).

        The discounted sum runs forward in time per env with ``algo.gamma_intrinsic``, across
        rollouts and episode ends (:class:`rlstore.normalize.DiscountedReturnNormalizer`); no
        mean is subtracted.
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
        """Carry the bootstrap slot ``L`` over to slot 0 and start a new rollout.

        PyTorchRL calls this after *every* gradient step; later calls before the next
        insertion change nothing. A :meth:`generate_batches` generator that is still being
        consumed keeps yielding the old rollout (it snapshots slot 0 when it starts).

        Returns:
            ``info`` unchanged.
        """
        L = self.size
        if L > 0:
            for k in (OBS, RHS, DONE):
                if self.data.get(k) is not None and (k != RHS or self.recurrent_actor):
                    map_dict(self.data[k], partial(carry_over, last=L))
        self.step, self.size, self._fresh = 0, 0, False
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
        self,
        num_mini_batch: int | None,
        mini_batch_size: int | None,
        num_epochs: int,
        shuffle: bool,
    ) -> Iterator[torch.Tensor]:
        """Flat time-major indices ``t * N + n`` per minibatch (:func:`index_plan`)."""
        L = self._length()
        n = self.data[DONE].shape[1]
        sizes = (num_mini_batch, mini_batch_size, num_epochs, shuffle)
        yield from index_plan(L, n, self.device, self.recurrent_actor, *sizes)

    def _slot0(self) -> Data:
        """Copies of slot 0 of the keys that :meth:`after_gradients` overwrites."""
        keys = [OBS, DONE] + ([RHS] if self.recurrent_actor else [])
        return {k: map_dict(self.data[k], lambda t: t[0].clone()) for k in keys if k in self.data}

    def _gather(self, idx: torch.Tensor, L: int, slot0: Data) -> Data:
        return gather(self.data, idx, L, slot0, self.recurrent_actor)

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
        L, slot0 = self._length(), self._slot0()
        for idx in self._index_plan(num_mini_batch, mini_batch_size, num_epochs, shuffle):
            yield self._gather(idx, L, slot0)
