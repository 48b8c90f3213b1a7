"""PyTorchRL's on-policy storages (layout C and truncation: :mod:`rlstore.compat.pytorchrl`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import torch

from rlstore import returns as R
from rlstore._checks import as_device, check_count, real_number
from rlstore._trees import as_tensor, tree_map
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.buffers.rollout_targets import IntrinsicConfig
from rlstore.compat._common import PyTorchRLStorage
from rlstore.compat.pytorchrl import _layout as C
from rlstore.compat.pytorchrl import protocols as K
from rlstore.compat.pytorchrl.protocols import Actor, Algorithm
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError
from rlstore.normalize import DiscountedReturnNormalizer

__all__ = ["VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer"]


class VanillaOnPolicyBuffer(PyTorchRLStorage):
    """PyTorchRL's ``VanillaOnPolicyBuffer(size, device, actor, algorithm, envs)``
    (``pytorchrl.agent.storages.on_policy``), a facade over a
    :class:`~rlstore.buffers.rollout.RolloutBuffer` keeping only layout C's slot ``L`` and the
    ``Done`` of slot 0: Monte-Carlo returns (:func:`rlstore.returns.gae` with lambda 1,
    bootstrapped with ``V(Observation[L])`` and ``FinalValue`` on truncation) and ``Advantage =
    normalize(ExternalReturn - Value)``. ``size`` is the rollout length T; ``envs`` (with
    ``num_envs``, or None) checks N.

    Differences from PyTorchRL: ``data`` is a layout-C view rebuilt after each insertion,
    :meth:`reset` or :meth:`after_gradients` (writes into it are not stored; ``Reward`` /
    ``Value`` / ``LogProbability`` are float32); advantages use the population std plus eps 1e-5
    (1e-8 in :class:`VTraceBuffer`); a partial rollout uses all ``L`` transitions (PyTorchRL
    dropped the last); slot 0 comes from the first sample's ``Observation`` /
    ``RecurrentHiddenStates`` / ``Done`` (PyTorchRL left zeros); a full rollout raises
    :class:`~rlstore.errors.CapacityError` instead of wrapping; a running
    :meth:`generate_batches` keeps its view across :meth:`after_gradients`; ``before_gradients``
    keeps the stored recurrent state of slot ``L``; ``update_storage_parameter`` and
    ``insert_data_slice`` validate (ConfigError / SpecError, all or nothing); multiple critics and
    RND observation statistics are not handled; intrinsic rewards are scaled by rlstore's forward
    discounted-return normalizer, per env, never reset at episode ends.
    """

    storage_tensors: ClassVar[tuple[str, ...]] = K.OnPolicyDataKeys
    _adv_eps: ClassVar[float] = 1e-5
    _lam: float = 1.0

    def __init__(
        self, size: int, device: str | torch.device, actor: Actor, algorithm: Algorithm, envs: Any
    ) -> None:
        self.max_size = check_count("size", size)
        if not isinstance(getattr(actor, "is_recurrent", None), bool):
            raise ConfigError("actor: expected an Actor with a bool attribute 'is_recurrent'")
        real_number("algorithm.gamma", getattr(algorithm, "gamma", None), 0.0, 1.0)
        self.envs, self.actor, self.algo = envs, actor, algorithm
        self.num_envs = getattr(envs, "num_envs", None) if envs is not None else None
        self.device, self.recurrent_actor = as_device(device), actor.is_recurrent
        self._rb: RolloutBuffer | None = None
        self._rows: C.Data = {}  # per stored key one zero (N, ...) row: its shape and dtype
        self._next: C.Data = {}  # Observation / RecurrentHiddenStates / Done of slot L
        self._done0: Any = None  # Done of slot 0
        self._view: C.Data | None = None
        self.int_reward_normalizer: DiscountedReturnNormalizer | None = None
        self.reset()

    # ------------------------------------------------------------------ storage
    size = property(lambda self: 0 if self._rb is None else self._rb.pos, doc="Transitions L.")
    step = property(lambda self: self.size % self.max_size, doc="``size`` modulo the capacity.")
    used_capacity = property(lambda self: self.size, doc="Transitions L (slot L: bootstrap).")

    def _env_kwargs(self) -> dict[str, Any]:
        return getattr(self.envs, "env_kwargs", None) or {}

    def init_tensors(self, sample: Mapping[str, Any]) -> None:
        """Take the stored keys, shapes and dtypes from ``sample``."""
        self._rows = C.row_specs(sample, self.device, self.recurrent_actor, self.num_envs)
        self._view = None

    def get_num_channels_obs(self, sample: Mapping[str, Any]) -> int:
        """Set and return ``num_channels_obs``: ``Observation`` channels per frame
        (``envs.env_kwargs["frame_stack"]`` frames, else 1)."""
        frame_stack = int(self._env_kwargs().get("frame_stack", 1))
        obs = sample[K.OBS]
        first = next(iter(obs.values())) if isinstance(obs, Mapping) else obs
        channels = int(as_tensor(K.OBS, first).shape[1])
        if frame_stack < 1 or channels % frame_stack:
            raise SpecError(
                f"{K.OBS}: expected {channels} channels to be a multiple of "
                f"frame_stack={frame_stack}"
            )
        self.num_channels_obs = channels // frame_stack
        return self.num_channels_obs

    def insert_transition(self, sample: Mapping[str, Any]) -> None:
        """Store one vector-env step; CapacityError when full, SpecError naming the key on a
        missing key, a wrong shape or a lossy dtype (nothing changes, the first sample too)."""
        specs, got, nxt, args = self._prepare(sample)
        hidden = nxt.get(K.RHS) if self.recurrent_actor else None
        rb = self._rb or RolloutBuffer(
            self.max_size,
            specs[K.DONE].shape[0],
            advantage_normalization="none",
            intrinsic=IntrinsicConfig() if K.IREW in specs else None,  # stores the int fields
            device=self.device,
        )
        hidden = tuple(hidden.values()) if isinstance(hidden, dict) else hidden  # RB: tuples
        rb.add(nxt[K.OBS], got[K.ACT], **args, hidden=hidden)
        if rb.pos == 1:
            self._done0 = nxt[K.DONE]
        self._rb, self._rows, self._fresh, self._view = rb, specs, False, None
        done = (got[K.DONE2] != 0).to(specs[K.DONE].dtype)
        self._next = {**nxt, K.OBS: got[K.OBS2], K.DONE: done}
        if K.RHS2 in got:
            self._next[K.RHS] = got[K.RHS2]

    def _prepare(self, sample: Mapping[str, Any]) -> tuple[C.Data, C.Data, C.Data, C.Data]:
        """Validate ``sample`` without changing anything."""
        if self.size >= self.max_size:
            raise CapacityError(
                f"insert_transition: the rollout is full ({self.max_size} transitions); call "
                "before_gradients() / after_gradients() (or reset()) first"
            )
        if not isinstance(sample, Mapping):
            raise SpecError(f"sample: expected a dict of tensors, got {type(sample).__name__}")
        specs = self._rows or C.row_specs(sample, self.device, self.recurrent_actor, self.num_envs)
        fresh = self._fresh or not self._next  # slot 0 of a new rollout comes from the sample
        nxt = dict(self._next)
        got, args = C.check_sample(sample, specs, nxt, fresh, self.device, self.recurrent_actor)
        return specs, got, nxt, args

    @property
    def data(self) -> C.Data:
        """The layout-C view: every key ``(size + 1, N, ...)`` (None: not stored), plus
        ``Truncated`` / ``FinalValue``."""
        if self._view is None:
            self._view = {k: None for k in self.storage_tensors}
            if self._next:
                b = self._rb.get() if self._rb is not None and self.size else None
                nxt, done0, rec = self._next, self._done0, self.recurrent_actor
                self._view |= C.view(self._rows, b, self.max_size, nxt, done0, rec)
        return self._view

    def get_all_buffer_data(self, data_to_cpu: bool = False) -> C.Data:
        """The stored keys of :attr:`data` as a new dict (on the CPU with ``data_to_cpu``)."""
        move = (lambda t: t.cpu()) if data_to_cpu else (lambda t: t)
        return {k: tree_map(move, v) for k, v in self.data.items() if v is not None}

    def insert_data_slice(self, new_data: Mapping[str, Any]) -> None:
        """Replace the data by ``new_data`` (a :meth:`get_all_buffer_data` result of a full
        rollout), inserted and validated step by step, all or nothing; its returns and
        advantages are kept until the next change."""
        allowed = {*self.storage_tensors, K.TRUNC, K.FVAL}
        if unknown := sorted(set(new_data) - allowed):
            raise SpecError(f"new_data: unknown keys {unknown} (allowed: {sorted(allowed)})")
        for k, v in new_data.items():
            for t in v.values() if isinstance(v, dict) else (v,):
                rows = 1 if k == K.RHS and not self.recurrent_actor else self.max_size + 1
                if t.shape[0] != rows:
                    raise SpecError(f"{k}: expected a leading axis of {rows}, got {tuple(t.shape)}")
        d = {k: v for k, v in new_data.items() if k != K.TRUNC or K.FVAL in new_data}
        saved = (self._rb, self._rows, self._next, self._done0, self._fresh, self._view)
        self._rb, self._rows, self._next, self._fresh = None, {}, {}, True
        try:
            for t in range(self.max_size):
                sample = {k: C.take(v, t) for k, v in d.items()}  # RHS of a FF actor: one row
                sample |= {K.SHIFTED.get(k, k): C.take(d[k], t + 1) for k in (*K.SHIFTED, K.FVAL)
                           if k in d}  # fmt: skip
                VanillaOnPolicyBuffer.insert_transition(self, sample)
        except Exception:
            self._rb, self._rows, self._next, self._done0, self._fresh, self._view = saved
            raise
        self.data.update(
            {k: d[k].to(self.device) for k in (K.RET, K.ADV, K.IRET, K.IADV) if k in d}
        )

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

    @torch.no_grad()
    def _values(self, obs: Any, rhs: Any, done: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{Value: .., IntrinsicValue: ..}`` of the critics ``actor.get_value`` returns."""
        out = self.actor.get_value(obs, rhs, done)
        if "value_net1" not in out:
            raise SpecError(f"actor.get_value: expected a dict with 'value_net1', got {list(out)}")
        return {k: out[n] for k, n in ((K.VAL, "value_net1"), (K.IVAL, "ivalue_net1")) if n in out}

    def _bootstrap(self, L: int) -> None:
        """Write V(Observation[L]) (and the intrinsic value) into slot L of the view."""
        d = self.data
        rhs = None if d[K.RHS] is None else C.take(d[K.RHS], L)  # FF actors: the placeholder
        for key, v in self._values(C.take(d[K.OBS], L), rhs, d[K.DONE][L]).items():
            if d.get(key) is not None:
                d[key][L].copy_(v.reshape(d[key][L].shape))

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
        """Fill the layout-C ``returns[:L + 1]`` in place: lambda-returns (lambda 1 here), then
        ``returns[L] = values[L]``; ``truncated`` / ``final_values``: the extension channel."""
        L = self._length()
        v, nv, term, trunc = C.layout_a(L, values, dones, truncated, final_values)
        _, ret = R.gae(rewards[:L].reshape(L, -1), v, nv, term, trunc, gamma=gamma, lam=self._lam)
        returns[:L] = ret.reshape(returns[:L].shape).to(returns.dtype)
        returns[L] = values[L]

    def compute_advantages(self, returns: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``normalize(returns[:L] - values[:L])`` over the rollout, shape ``(L, N, 1)``."""
        L = self._length()
        return R.normalize_advantages((returns[:L] - values[:L]).float(), eps=self._adv_eps)

    def _store_adv(self, key: str, adv: torch.Tensor) -> None:
        L = adv.shape[0]
        self.data[key][:L] = adv.reshape(self.data[key][:L].shape)
        self.data[key][L:] = 0

    def before_gradients(self) -> None:
        """Bootstrap from V(Observation[L]), then compute returns and normalized advantages."""
        L = self._length()
        self._bootstrap(L)
        d, g_int = self.data, getattr(self.algo, "gamma_intrinsic", None)
        trunc = {"truncated": d[K.TRUNC], "final_values": d[K.FVAL]}
        self.compute_returns(d[K.REW], d[K.RET], d[K.VAL], d[K.DONE], self.algo.gamma, **trunc)
        self._store_adv(K.ADV, self.compute_advantages(d[K.RET], d[K.VAL]))
        if d[K.IREW] is not None and g_int is not None:
            self.normalize_int_rewards()
            no_done = torch.zeros_like(d[K.DONE])  # non-episodic intrinsic stream
            self.compute_returns(d[K.IREW], d[K.IRET], d[K.IVAL], no_done, g_int)
            self._store_adv(K.IADV, self.compute_advantages(d[K.IRET], d[K.IVAL]))

    def normalize_int_rewards(self) -> None:
        """Divide ``IntrinsicReward[:L]`` by the running std of its forward discounted sum
        (``algo.gamma_intrinsic``, per env, across rollouts and episodes; RND)."""
        L = self._length()
        if self.int_reward_normalizer is None:
            g_int = self.algo.gamma_intrinsic  # type: ignore[attr-defined]
            self.int_reward_normalizer = DiscountedReturnNormalizer(g_int)
        irew = self.data[K.IREW][:L]
        irew.copy_(self.int_reward_normalizer(irew.reshape(L, -1)).reshape(irew.shape))

    def after_gradients(self, batch: Any, info: dict[str, Any]) -> dict[str, Any]:
        """Start a new rollout from slot ``L`` (it becomes slot 0); returns ``info``. Repeated
        calls before the next insertion change nothing."""
        if self._rb is not None:  # not reset(): subclasses keep their per-episode state
            self._rb.reset()
        self._fresh, self._view = False, None
        return info

    # ------------------------------------------------------------------ batches
    def _index_plan(
        self, num_mini_batch: int | None, mini_batch_size: int | None, epochs: int, shuffle: bool
    ) -> Iterator[torch.Tensor]:
        """Flat time-major indices ``t * N + n`` per minibatch."""
        L, n = self._length(), self._rows[K.DONE].shape[0]
        sizes = (num_mini_batch, mini_batch_size, epochs, shuffle)
        yield from C.index_plan(L, n, self.device, self.recurrent_actor, *sizes)

    def generate_batches(
        self,
        num_mini_batch: int | None,
        mini_batch_size: int | None = None,
        num_epochs: int = 1,
        shuffle: bool = True,
    ) -> Iterator[C.Data]:
        """Yield minibatch dicts of every stored key: shuffled steps (feed-forward actors) or
        ``N / num_mini_batch`` whole env columns flattened time-major, ``RecurrentHiddenStates``
        of their first step (recurrent actors). Sizes that do not divide raise ConfigError."""
        L, data = self._length(), self.data
        for idx in self._index_plan(num_mini_batch, mini_batch_size, num_epochs, shuffle):
            yield C.gather(data, idx, L, self.recurrent_actor)


class GAEBuffer(VanillaOnPolicyBuffer):
    """PyTorchRL's ``GAEBuffer``: :class:`VanillaOnPolicyBuffer` (and its differences) with
    GAE(gamma, ``gae_lambda``) returns ``ExternalReturn = A + Value``."""

    def __init__(
        self,
        size: int,
        device: str | torch.device,
        actor: Actor,
        algorithm: Algorithm,
        envs: Any,
        gae_lambda: float = 0.95,
    ) -> None:
        self.gae_lambda = real_number("gae_lambda", gae_lambda, 0.0, 1.0)  # no bools, strings
        super().__init__(size, device, actor, algorithm, envs)

    @property
    def _lam(self) -> float:  # type: ignore[override]
        return self.gae_lambda


class VTraceBuffer(VanillaOnPolicyBuffer):
    """PyTorchRL's ``VTraceBuffer``: :class:`VanillaOnPolicyBuffer` with V-trace targets
    (IMPALA): :meth:`compute_vtrace` re-evaluates the stored actions and values with the current
    actor, then :func:`rlstore.returns.vtrace` with the stored log-probs as behaviour policy
    (``ExternalReturn[:L] = vs``, normalized PG ``Advantage``, ``LogProbability[:L]`` = current).
    Difference: PyTorchRL's ``compute_vtrace`` (returns in delta, unmasked next values at
    episode ends, wrong call arguments) is not copied."""

    _adv_eps: ClassVar[float] = 1e-8

    def before_gradients(self) -> None:
        """Bootstrap from V(Observation[L]) and compute the V-trace targets and advantages."""
        L = self._length()
        self._bootstrap(L)
        self.compute_vtrace()

    @torch.no_grad()
    def get_updated_action_log_probs(self) -> torch.Tensor:
        """Re-evaluate the stored actions with the current actor (``algorithm.num_mini_batch``
        unshuffled minibatches) and refresh ``Value[:L]``; returns the new log-probs."""
        L = self._length()
        logp_store, val_store = self.data[K.LOGP], self.data[K.VAL]
        new_logp = torch.empty_like(logp_store[:L]).reshape(L * logp_store.shape[1], -1)
        new_val = torch.empty_like(val_store[:L]).reshape(L * val_store.shape[1], -1)
        num_mb = getattr(self.algo, "num_mini_batch", 1)
        for idx in self._index_plan(num_mb, None, 1, False):
            b = C.gather(self.data, idx, L, self.recurrent_actor)
            obs, rhs, done = b[K.OBS], b.get(K.RHS), b[K.DONE]
            logp = self.actor.evaluate_actions(obs, rhs, done, b[K.ACT])[0]
            val = self.actor.get_value(obs, rhs, done)["value_net1"]
            flat = idx.reshape(-1)
            new_logp[flat] = logp.reshape(flat.shape[0], -1).to(new_logp.dtype)
            new_val[flat] = val.reshape(flat.shape[0], -1).to(new_val.dtype)
        val_store[:L] = new_val.reshape(val_store[:L].shape)
        return new_logp.reshape(logp_store[:L].shape)

    @torch.no_grad()
    def compute_vtrace(self, clip_rho_thres: float = 1.0, clip_c_thres: float = 1.0) -> None:
        """Store V-trace targets, PG advantages and the updated log-probs (``clip_rho_thres``:
        rho-bar and PG rho-bar; ``clip_c_thres``: c-bar)."""
        L = self._length()
        d = self.data
        target = self.get_updated_action_log_probs()
        v, nv, term, trunc = C.layout_a(L, d[K.VAL], d[K.DONE], d[K.TRUNC], d[K.FVAL])
        blogp, tlogp, rew = (x.reshape(L, -1) for x in (d[K.LOGP][:L], target, d[K.REW][:L]))
        rho, c = clip_rho_thres, clip_c_thres
        vs, pg = R.vtrace(blogp, tlogp, rew, v, nv, term, trunc, gamma=self.algo.gamma,
                          rho_bar=rho, c_bar=c, pg_rho_bar=rho)  # fmt: skip
        d[K.RET][:L] = vs.reshape(d[K.RET][:L].shape).to(d[K.RET].dtype)
        d[K.RET][L] = d[K.VAL][L]
        d[K.LOGP][:L] = target
        self._store_adv(K.ADV, R.normalize_advantages(pg.float(), eps=self._adv_eps))
