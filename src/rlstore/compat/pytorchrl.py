"""Seed 001 (PyTorchRL) on-policy storages: VanillaOnPolicyBuffer, GAEBuffer, VTraceBuffer.

Facades over rlstore's core: returns come from :func:`rlstore.returns.gae` /
:func:`rlstore.returns.vtrace`, advantage normalization from
:func:`rlstore.returns.normalize_advantages`, minibatch index plans from
:mod:`rlstore.minibatches`, intrinsic-reward scaling from
:class:`rlstore.normalize.DiscountedReturnNormalizer`.

**Layout C.** As in PyTorchRL, every tensor is ``(size + 1, N, *shape)``. ``Observation``,
``RecurrentHiddenStates`` and ``Done`` are written at ``step + 1`` from the sample's
``NextObservation`` / ``NextRecurrentHiddenStates`` / ``NextDone``, so ``Done[t + 1]`` is the
done flag of transition ``t`` (and ``Done[t]`` says that ``Observation[t]`` starts an episode);
slot ``L`` (``L`` = number of stored transitions) holds the bootstrap state. All other keys are
written at ``step``. Before any estimator runs the flags are converted to rlstore's
transition-aligned layout A: ``done_A[t] = Done[t + 1]``, ``next_values[t] = Value[t + 1]``.

**Truncation (extension).** PyTorchRL has one done flag, so a time-limit truncation was treated
as a termination. A sample may carry two optional extra keys, ``NextTruncated`` (N, 1) and
``FinalValue`` (N, 1) = V(final observation); they are stored at ``step + 1`` like ``Done``
under the keys ``Truncated`` and ``FinalValue``. A done transition whose ``Truncated`` flag is
set bootstraps from ``FinalValue`` (never from the reset observation) and cuts the trace.
Without these keys every done is a termination, as in the seed.

Sample keys (PyTorchRL's ``prl.*`` constants): ``Observation``, ``NextObservation``,
``RecurrentHiddenStates``/``NextRecurrentHiddenStates`` (recurrent actors), ``Done``,
``NextDone``, ``Action``, ``Reward``, ``Value``, ``LogProbability`` and, for intrinsic-reward
algorithms, ``IntrinsicReward`` and ``IntrinsicValue``. Values may be tensors or one-level dicts
of tensors (dict observations); each has a leading env axis N.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np
import torch

from rlstore import returns as R
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError
from rlstore.minibatches import RolloutBatch, flat_minibatches, recurrent_minibatches

__all__ = [
    "Actor", "Algorithm", "VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer", "OnPolicyDataKeys",
    "OBS", "OBS2", "RHS", "RHS2", "DONE", "DONE2", "ACT", "REW", "IREW", "RET", "IRET", "VAL",
    "IVAL", "LOGP", "ADV", "IADV", "TRUNC", "TRUNC2", "FVAL",
]  # fmt: skip

OBS, OBS2 = "Observation", "NextObservation"
RHS, RHS2 = "RecurrentHiddenStates", "NextRecurrentHiddenStates"
DONE, DONE2 = "Done", "NextDone"
ACT, REW, IREW = "Action", "Reward", "IntrinsicReward"
RET, IRET, VAL, IVAL = "ExternalReturn", "IntrinsicReturn", "Value", "IntrinsicValue"
LOGP, ADV, IADV = "LogProbability", "Advantage", "IntrinsicAdvantage"
TRUNC, TRUNC2, FVAL = "Truncated", "NextTruncated", "FinalValue"

OnPolicyDataKeys = (OBS, RHS, DONE, ACT, REW, IREW, RET, IRET, VAL, IVAL, LOGP, ADV, IADV)
_SHIFTED = {OBS: OBS2, RHS: RHS2, DONE: DONE2, TRUNC: TRUNC2}  # stored at step + 1
_Data = dict[str, Any]


@runtime_checkable
class Actor(Protocol):
    """What the buffers need from PyTorchRL's actor-critic.

    ``obs`` / ``rhs`` / ``done`` are batches with a leading axis ``B`` (``rhs`` may be a dict of
    tensors, or a placeholder for feed-forward actors). A recurrent actor receives whole env
    columns flattened time-major (``B = L * E``), ``rhs`` of the first step only (``E`` rows),
    and ``done`` marking the steps that start an episode (reset the state before them).
    """

    is_recurrent: bool

    def get_value(self, obs: Any, rhs: Any, done: torch.Tensor) -> Mapping[str, Any]:
        """``{"value_net1": (B, 1) tensor, ...}`` (``"ivalue_net1"`` with an intrinsic critic)."""
        ...

    def evaluate_actions(
        self, obs: Any, rhs: Any, done: torch.Tensor, action: torch.Tensor
    ) -> tuple[Any, ...]:
        """``(logp (B, 1), entropy, ...)`` of ``action`` under the current policy (VTraceBuffer)."""
        ...


@runtime_checkable
class Algorithm(Protocol):
    """What the buffers read from PyTorchRL's algorithm object.

    Required: ``gamma``. Optional attributes (read with ``getattr``): ``gamma_intrinsic``
    (enables the intrinsic stream when the samples carry intrinsic rewards and values) and
    ``num_mini_batch`` (batching of :meth:`VTraceBuffer.get_updated_action_log_probs`,
    default 1).
    """

    gamma: float


def _map(x: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    return {k: fn(v) for k, v in x.items()} if isinstance(x, dict) else fn(x)


def _carry_over(t: torch.Tensor, last: int) -> torch.Tensor:
    return t[0].copy_(t[last])


def _rows(
    t: torch.Tensor, idx: torch.Tensor, length: int | None = None, slot0: Any = None
) -> torch.Tensor:
    """Rows ``idx`` of ``t[:length]`` flattened time-major over its two leading axes.

    ``slot0`` (``t[0]`` as it was when a batch generator started) replaces the rows of time
    step 0, which :meth:`VanillaOnPolicyBuffer.after_gradients` may have overwritten since.
    """
    src = t if length is None else t[:length]
    out = src.reshape(-1, *t.shape[2:])[idx]
    if slot0 is not None:
        at0 = idx < t.shape[1]
        if bool(at0.any()):
            out[at0] = slot0[idx[at0]]
    return out


def _as_tensor(x: Any, key: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    try:
        return torch.as_tensor(np.asarray(x))
    except Exception as exc:
        raise SpecError(f"{key}: expected a tensor or array, got {type(x).__name__}") from exc


class VanillaOnPolicyBuffer:
    """PyTorchRL's on-policy storage with Monte-Carlo returns (seed 001).

    ``ExternalReturn[t] = Reward[t] + gamma * (1 - done_A[t]) * ExternalReturn[t + 1]``,
    bootstrapped with ``V(Observation[L])`` at the rollout end and with ``FinalValue`` on
    truncation (GAE with lambda = 1 in :func:`rlstore.returns.gae`);
    ``Advantage = normalize(ExternalReturn - Value)`` over the whole rollout.

    Decisions that differ from the seed (its API is kept):

    * advantages are normalized with :func:`rlstore.returns.normalize_advantages`: population
      std (ddof=0; the seed used torch's unbiased std) plus the seed's eps 1e-5 (1e-8 in
      :class:`VTraceBuffer`);
    * a partial rollout uses all ``L = used_capacity`` stored transitions (the seed's
      ``step - 1`` dropped the last one) and bootstraps from slot ``L``;
    * the first insertion after construction or :meth:`reset` also writes slot 0 from the
      sample's ``Observation``/``RecurrentHiddenStates``/``Done`` (the seed left zeros there);
    * inserting into a full rollout raises :class:`~rlstore.errors.CapacityError` instead of
      wrapping around over unused data; after :meth:`after_gradients` the next insertion
      starts a new rollout;
    * :meth:`after_gradients` (called after every gradient step, while minibatches are still
      drawn) changes no data; the seed copied slot ``L`` over slot 0 at once, so later
      minibatches of the same update read the wrong first observation;
    * ``before_gradients`` keeps the stored recurrent state of slot ``L`` (the state *before*
      that observation) instead of overwriting it with the actor's output state;
    * ``update_storage_parameter`` raises :class:`~rlstore.errors.ConfigError` for a name that is
      not a numeric attribute of the buffer (the seed silently ignored it);
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
        if not isinstance(getattr(algorithm, "gamma", None), (int, float)):
            raise ConfigError("algorithm: expected an Algorithm with a float attribute 'gamma'")
        self.envs = envs
        self.num_envs = getattr(envs, "num_envs", None) if envs is not None else None
        self.actor, self.algo = actor, algorithm
        self.device = torch.device(device)
        self.recurrent_actor = actor.is_recurrent
        self.max_size, self.size, self.step = int(size), 0, 0
        self.data: _Data = {k: None for k in self.storage_tensors}
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
        v = _as_tensor(value, key)
        rows = 1 if key == RHS and not self.recurrent_actor else self.max_size + 1
        return torch.zeros(rows, *v.shape, dtype=v.dtype, device=self.device)

    def init_tensors(self, sample: Mapping[str, Any]) -> None:
        """Lazily allocate ``(size + 1, *value.shape)`` zero tensors for every key of ``sample``.

        Also allocates ``ExternalReturn``/``Advantage`` like ``Reward``/``Value``, the extension
        keys ``Truncated``/``FinalValue`` like ``Done``/``Value``, and the intrinsic returns and
        advantages when the sample has ``IntrinsicReward`` and ``IntrinsicValue``.
        """
        new: _Data = {}
        for k in self.storage_tensors:
            if k in sample and sample[k] is not None:
                new[k] = _map(sample[k], partial(self._alloc_like, k))
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
        channels = int(_as_tensor(first, OBS).shape[1])
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
        v = _as_tensor(value, key)
        if tuple(v.shape) != tuple(target.shape[1:]):
            raise SpecError(
                f"{key}: expected shape {tuple(target.shape[1:])}, got {tuple(v.shape)}"
            )
        return v

    def insert_transition(self, sample: Mapping[str, Any]) -> None:
        """Store one vector-env step (see the module docstring for keys and positions).

        Raises:
            CapacityError: the rollout already holds ``size`` transitions.
            SpecError: a required key is missing or a value has the wrong shape (the buffer is
                left unchanged).
        """
        if self.size >= self.max_size:
            raise CapacityError(
                f"insert_transition: the rollout is full ({self.max_size} transitions); call "
                "before_gradients() / after_gradients() (or reset()) first"
            )
        saved = None if self.data[OBS] is not None else dict(self.data)
        if saved is not None:
            self.init_tensors(sample)
        try:
            writes = self._planned_writes(sample)
        except SpecError:
            if saved is not None:  # a rejected first sample leaves nothing allocated
                self.data = saved
            raise
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

    def _planned_writes(self, sample: Mapping[str, Any]) -> list[tuple[str, int, Any]]:
        """Validate ``sample`` against the allocated tensors: ``[(key, position, value)]``."""
        writes: list[tuple[str, int, Any]] = []
        for k in (*self.storage_tensors, TRUNC, FVAL):
            if self.data.get(k) is None or k in (RET, IRET, ADV, IADV):
                continue
            if k == RHS and not self.recurrent_actor:
                continue
            src = _SHIFTED.get(k, k)
            if src not in sample:
                if k in (TRUNC, FVAL):
                    continue
                raise SpecError(f"sample: missing key {src!r} (got keys {sorted(sample)})")
            pos = self.step + 1 if k in _SHIFTED or k == FVAL else self.step
            writes.append((k, pos, self._check(src, sample[src], self.data[k])))
            if k in _SHIFTED and self.step == 0 and self._fresh and sample.get(k) is not None:
                writes.append((k, 0, self._check(k, sample[k], self.data[k])))
        if TRUNC2 in sample and FVAL not in sample:
            raise SpecError(f"sample: {TRUNC2!r} needs {FVAL!r} = V(final observation)")
        return writes

    def get_all_buffer_data(self, data_to_cpu: bool = False) -> _Data:
        """All allocated tensors (``(size + 1, N, ...)`` each), as a new dict of views.

        Args:
            data_to_cpu: move (copy) every tensor to CPU memory.
        """
        data = {k: v for k, v in self.data.items() if v is not None}
        if data_to_cpu:
            data = {k: _map(v, lambda t: t.cpu()) for k, v in data.items()}
        else:
            data = {k: _map(v, lambda t: t) for k, v in data.items()}
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
        self.data.update({k: _map(v, lambda t: t.to(self.device)) for k, v in new_data.items()})
        self.step, self.size, self._fresh = 0, self.max_size, False

    def reset(self) -> None:
        """Set the counters to zero (allocated tensors are kept and overwritten later)."""
        self.step, self.size, self._fresh = 0, 0, True

    # ------------------------------------------------------------------ returns
    def _slot(self, pos: int) -> tuple[Any, Any, torch.Tensor]:
        rhs = self.data.get(RHS)
        rhs_pos = pos if self.recurrent_actor else 0
        rhs = None if rhs is None else _map(rhs, lambda t: t[rhs_pos])
        return _map(self.data[OBS], lambda t: t[pos]), rhs, self.data[DONE][pos]

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

    def _layout_a(
        self,
        L: int,
        values: torch.Tensor,
        dones: torch.Tensor,
        truncated: torch.Tensor | None,
        final_values: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layout C -> A: ``(values[:L], next_values, terminated, truncated)``, each (L, N*)."""
        v = values[:L].reshape(L, -1)
        nv = values[1 : L + 1].reshape(L, -1)
        done = dones[1 : L + 1].reshape(L, -1) != 0
        trunc = torch.zeros_like(done)
        if truncated is not None:
            trunc = done & (truncated[1 : L + 1].reshape(L, -1) != 0)
            if final_values is not None:
                nv = torch.where(trunc, final_values[1 : L + 1].reshape(L, -1).to(nv.dtype), nv)
        return v, nv, done & ~trunc, trunc

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
        v, nv, term, trunc = self._layout_a(L, values, dones, truncated, final_values)
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
                    _map(self.data[k], partial(_carry_over, last=L))
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
        """Flat time-major indices ``t * N + n`` per minibatch, from :mod:`rlstore.minibatches`."""
        L = self._length()
        n = self.data[DONE].shape[1]
        zeros = torch.zeros((), device=self.device).expand(L, n)
        flags = torch.zeros(L, n, dtype=torch.bool, device=self.device)
        plan = RolloutBatch(
            obs=zeros,
            actions=zeros,
            logprobs=zeros,
            values=zeros,
            rewards=zeros,
            terminated=flags,
            truncated=flags,
            final_values=zeros,
            episode_time=flags.long(),
            advantages=zeros,
            returns=zeros,
        )
        if self.recurrent_actor:
            if (
                mini_batch_size is not None
                and num_mini_batch is not None
                and (mini_batch_size != L * (n // num_mini_batch))
            ):
                raise ConfigError(
                    f"mini_batch_size={mini_batch_size} conflicts with "
                    f"num_mini_batch={num_mini_batch} whole env columns of {L} steps"
                )
            gen = recurrent_minibatches(
                plan, num_minibatches=num_mini_batch or 1, num_epochs=num_epochs, shuffle=shuffle
            )
        else:
            gen = flat_minibatches(
                plan,
                num_minibatches=num_mini_batch,
                num_epochs=num_epochs,
                mini_batch_size=mini_batch_size,
                shuffle=shuffle,
            )
        for mb in gen:
            if mb.indices is None:  # pragma: no cover - every rlstore generator sets it
                raise EmptyBufferError("minibatch generator returned no indices")
            yield mb.indices

    def _slot0(self) -> _Data:
        """Copies of slot 0 of the keys that :meth:`after_gradients` overwrites."""
        keys = [OBS, DONE] + ([RHS] if self.recurrent_actor else [])
        return {k: _map(self.data[k], lambda t: t[0].clone()) for k in keys if k in self.data}

    def _gather(self, idx: torch.Tensor, L: int, slot0: _Data) -> _Data:
        batch: _Data = {}
        for k, v in self.data.items():
            if v is None or k in (TRUNC, FVAL):
                continue
            rows, length = idx.reshape(-1), cast(int | None, L)
            if k == RHS:  # the state before the first step of each sequence (time-major)
                first = idx[0] if idx.dim() == 2 else idx
                rows = first if self.recurrent_actor else torch.zeros_like(first)
                length = None
            if k in slot0 and isinstance(v, dict):
                batch[k] = {x: _rows(v[x], rows, length, slot0[k][x]) for x in v}
            else:
                batch[k] = _map(v, partial(_rows, idx=rows, length=length, slot0=slot0.get(k)))
        return batch

    def generate_batches(
        self,
        num_mini_batch: int | None,
        mini_batch_size: int | None = None,
        num_epochs: int = 1,
        shuffle: bool = True,
    ) -> Iterator[_Data]:
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


class GAEBuffer(VanillaOnPolicyBuffer):
    """PyTorchRL's storage with GAE(gamma, lambda) returns (seed 001), via rlstore.returns.gae.

    ``ExternalReturn = A + Value`` (the TD(lambda) target) with
    ``delta_t = r_t + gamma*(1 - term_t)*next_value_t - V_t`` and
    ``A_t = delta_t + gamma*lambda*(1 - done_t)*A_{t+1}`` in layout A (see the module doc for the
    layout-C conversion and the truncation channel). Everything else as in
    :class:`VanillaOnPolicyBuffer`.

    Args:
        size, device, actor, algorithm, envs: as in :class:`VanillaOnPolicyBuffer`.
        gae_lambda: GAE lambda in [0, 1].
    """

    def __init__(
        self,
        size: int,
        device: str | torch.device,
        actor: Actor,
        algorithm: Algorithm,
        envs: Any,
        gae_lambda: float = 0.95,
    ) -> None:
        if not isinstance(gae_lambda, (int, float)) or not 0.0 <= float(gae_lambda) <= 1.0:
            raise ConfigError(f"gae_lambda: expected a float in [0, 1], got {gae_lambda!r}")
        self.gae_lambda = float(gae_lambda)
        super().__init__(size, device, actor, algorithm, envs)

    @property
    def _lam(self) -> float:  # type: ignore[override]
        return self.gae_lambda

    @classmethod
    def create_factory(  # type: ignore[override]
        cls, size: int, gae_lambda: float = 0.95
    ) -> Callable[..., GAEBuffer]:
        """A function ``(device, actor, algorithm, envs) -> GAEBuffer``."""

        def create_buffer_instance(device: Any, actor: Actor, algorithm: Algorithm, envs: Any):
            return cls(size, device, actor, algorithm, envs, gae_lambda=gae_lambda)

        return create_buffer_instance


class VTraceBuffer(VanillaOnPolicyBuffer):
    """PyTorchRL's storage with V-trace targets (IMPALA, Espeholt et al. 2018, arXiv:1802.01561).

    ``before_gradients`` bootstraps from V(Observation[L]) and calls :meth:`compute_vtrace`,
    which re-evaluates the stored actions and values with the *current* actor
    (:meth:`get_updated_action_log_probs`), then calls :func:`rlstore.returns.vtrace` with the
    stored log-probs as behaviour policy: ``ExternalReturn[:L] = vs``, ``Advantage`` = the
    normalized policy-gradient advantages (eps 1e-8), ``LogProbability[:L]`` = the current
    actor's log-probs (as in the seed, so the PPO ratio starts at 1).

    The seed's ``compute_vtrace`` is broken and is not copied (algorithms.md section 2.3): it
    put discounted *returns* where rewards belong in delta, did not mask the next value at
    episode ends, passed arguments to a method taking none, and ``before_gradients`` called
    ``compute_returns()`` without its arguments. Here rewards, termination/truncation and the
    bootstrap follow rlstore's conventions.
    """

    _adv_eps: ClassVar[float] = 1e-8

    def before_gradients(self) -> None:
        """Bootstrap from V(Observation[L]) and compute the V-trace targets and advantages."""
        L = self._length()
        self._bootstrap(L)
        self.compute_vtrace()

    @torch.no_grad()
    def get_updated_action_log_probs(self) -> torch.Tensor:
        """Re-evaluate the stored actions with the current actor; also refresh ``Value[:L]``.

        Batches are those of :meth:`generate_batches` without shuffling, with
        ``algorithm.num_mini_batch`` (default 1) minibatches.

        Returns:
            The new log-probabilities, shaped like ``LogProbability[:L]``.
        """
        L = self._length()
        logp_store, val_store = self.data[LOGP], self.data[VAL]
        new_logp = torch.empty_like(logp_store[:L]).reshape(L * logp_store.shape[1], -1)
        new_val = torch.empty_like(val_store[:L]).reshape(L * val_store.shape[1], -1)
        num_mb = getattr(self.algo, "num_mini_batch", 1)
        for idx in self._index_plan(num_mb, None, 1, False):
            b = self._gather(idx, L, {})
            logp = self.actor.evaluate_actions(
                b[OBS], b[RHS] if RHS in b else None, b[DONE], b[ACT]
            )[0]
            val = self.actor.get_value(b[OBS], b[RHS] if RHS in b else None, b[DONE])["value_net1"]
            flat = idx.reshape(-1)
            new_logp[flat] = logp.reshape(flat.shape[0], -1).to(new_logp.dtype)
            new_val[flat] = val.reshape(flat.shape[0], -1).to(new_val.dtype)
        val_store[:L] = new_val.reshape(val_store[:L].shape)
        return new_logp.reshape(logp_store[:L].shape)

    @torch.no_grad()
    def compute_vtrace(self, clip_rho_thres: float = 1.0, clip_c_thres: float = 1.0) -> None:
        """Compute and store V-trace targets, PG advantages and the updated log-probs.

        Args:
            clip_rho_thres: rho-bar (also used as the PG rho-bar), > 0.
            clip_c_thres: c-bar, > 0.
        """
        L = self._length()
        d = self.data
        target = self.get_updated_action_log_probs()
        v, nv, term, trunc = self._layout_a(L, d[VAL], d[DONE], d[TRUNC], d[FVAL])
        vs, pg = R.vtrace(
            d[LOGP][:L].reshape(L, -1),
            target.reshape(L, -1),
            d[REW][:L].reshape(L, -1),
            v,
            nv,
            term,
            trunc,
            gamma=self.algo.gamma,
            lam=1.0,
            rho_bar=clip_rho_thres,
            c_bar=clip_c_thres,
            pg_rho_bar=clip_rho_thres,
        )
        d[RET][:L] = vs.reshape(d[RET][:L].shape).to(d[RET].dtype)
        d[RET][L] = d[VAL][L]
        d[LOGP][:L] = target
        self._store_adv(ADV, R.normalize_advantages(pg.float(), eps=self._adv_eps))
