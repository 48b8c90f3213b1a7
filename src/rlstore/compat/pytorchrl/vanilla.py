"""PyTorchRL's on-policy storages (``pytorchrl.agent.storages.on_policy``) over a
:class:`~rlstore.buffers.rollout.RolloutBuffer`; the sample keys are in :mod:`.protocols`.

Layout C, as in PyTorchRL: ``data`` tensors are ``(size + 1, N, *shape)``; ``Observation``,
``RecurrentHiddenStates`` and ``Done`` are written at ``step + 1`` from the ``Next*`` keys
(``Done[t + 1]`` ends transition ``t``), slot ``L`` holds the bootstrap state. Truncation is
rlstore's extension (PyTorchRL made a time limit a termination): ``NextTruncated`` and
``FinalValue`` = V(final observation), kept at ``step + 1``, bootstrap a done from ``FinalValue``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any, ClassVar

import torch

from rlstore import returns as R
from rlstore._checks import as_device, check_count, real_number
from rlstore._trees import as_tensor, cast_lossless, check_real, tree_map
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.buffers.rollout_targets import IntrinsicConfig
from rlstore.compat._common import PyTorchRLStorage
from rlstore.compat.pytorchrl import protocols as K
from rlstore.compat.pytorchrl.protocols import Actor, Algorithm
from rlstore.errors import CapacityError, ConfigError, EmptyBufferError, SpecError
from rlstore.minibatches import column_index_plan, flat_index_plan
from rlstore.normalize import DiscountedReturnNormalizer

__all__ = ["VanillaOnPolicyBuffer", "GAEBuffer", "VTraceBuffer"]

Data = dict[str, Any]
SCALARS = (K.REW, K.VAL, K.LOGP, K.IREW, K.IVAL)  # one float32 per env
_FIELDS = {K.OBS: "obs", K.RHS: "hidden", K.ACT: "actions", K.REW: "rewards", K.VAL: "values",
           K.LOGP: "logprobs", K.IREW: "int_rewards", K.IVAL: "int_values"}  # fmt: skip


def row_specs(sample: Mapping[str, Any], device: torch.device, recurrent: bool, n: Any) -> Data:
    """Per stored key a zero ``(N, ...)`` row of the first sample's shape and dtype (float32
    :data:`SCALARS`, bool ``Truncated``; the intrinsic pair only if both); ``n``: N or None."""
    specs: Data = {}
    intrinsic = sample.get(K.IREW) is not None and sample.get(K.IVAL) is not None
    for k in (K.OBS, K.RHS, K.DONE, K.ACT, *SCALARS):
        if sample.get(k) is not None and (intrinsic or k not in (K.IREW, K.IVAL)):
            f32 = torch.float32 if k in SCALARS else None
            row = tree_map(partial(_real, k, device), sample[k])
            specs[k] = tree_map(lambda v, f=f32: torch.zeros_like(v, dtype=f), row)
    for k in (K.OBS, K.DONE, K.ACT, K.REW, K.VAL, K.LOGP, *([K.RHS] if recurrent else [])):
        if k not in specs:
            raise SpecError(f"sample: missing key {k!r} (got keys {sorted(sample)})")
    if isinstance(specs[K.VAL], dict):
        raise SpecError(f"{K.VAL}: multiple critics (a dict of values) are not supported")
    got = specs[K.DONE].shape[0] if specs[K.DONE].dim() else 0
    if n is not None and got != n:
        raise SpecError(f"{K.DONE}: expected a leading env axis of {n} (envs.num_envs), got "
                        f"shape {tuple(specs[K.DONE].shape)}")  # fmt: skip
    for k, row in specs.items():
        for leaf in row.values() if isinstance(row, dict) else (row,):
            if leaf.shape[:1] != (got,) or (k in (K.DONE, *SCALARS) and leaf.numel() != got):
                what = "(one value per env for flags and scalars)"
                raise SpecError(f"{k}: expected a leading env axis of {got} {what}, got shape "
                                f"{tuple(leaf.shape)}")  # fmt: skip
    specs[K.TRUNC] = torch.zeros_like(specs[K.DONE], dtype=torch.bool)
    return specs


def _real(key: str, device: torch.device, value: Any) -> torch.Tensor:
    return check_real(key, as_tensor(key, value, device))


def check_like(device: torch.device, key: str, value: Any, row: Any) -> Any:
    """A copy of ``value`` with the keys, shape and (losslessly) dtype of ``row``."""
    if isinstance(row, dict):
        if not isinstance(value, Mapping) or set(value) != set(row):
            raise SpecError(f"{key}: expected a dict with keys {sorted(row)}, got {value!r}")
        return {x: check_like(device, f"{key}[{x!r}]", value[x], row[x]) for x in row}
    v = as_tensor(key, value, device)
    if tuple(v.shape) != tuple(row.shape):
        raise SpecError(f"{key}: expected shape {tuple(row.shape)}, got {tuple(v.shape)}")
    return cast_lossless(key, v, row.dtype).detach().clone()


def column(row: Any, length: int, parts: list[tuple[int, Any]]) -> Any:
    """A ``(length, *row.shape)`` zero tensor like ``row`` (or a dict of them) with each
    ``(start, rows)`` of ``parts`` written from ``start`` on."""
    if isinstance(row, dict):
        return {k: column(row[k], length, [(s, v[k]) for s, v in parts]) for k in row}
    out = row.new_zeros(length, *row.shape)
    for start, value in parts:
        value = value.reshape(-1, *row.shape)
        out[start : start + value.shape[0]] = value
    return out


def take(x: Any, i: int) -> Any:
    """Row ``i`` of a tensor or of each tensor of a dict (the last row if ``i`` is past it)."""
    return tree_map(lambda t: t[min(i, len(t) - 1)], x)


def layout_a(L: int, values: Any, dones: Any, truncated: Any, final_values: Any) -> tuple[Any, ...]:
    """Layout C -> A: ``(values[:L], next_values, terminated, truncated)``, each ``(L, N)``; a
    truncated transition bootstraps from ``final_values`` (``truncated`` may be None)."""
    v, nv = values[:L].reshape(L, -1), values[1 : L + 1].reshape(L, -1)
    done = dones[1 : L + 1].reshape(L, -1) != 0
    trunc = torch.zeros_like(done)
    if truncated is not None:
        trunc = done & (truncated[1 : L + 1].reshape(L, -1) != 0)
        if final_values is not None:
            nv = torch.where(trunc, final_values[1 : L + 1].reshape(L, -1).to(nv.dtype), nv)
    return v, nv, done & ~trunc, trunc


def index_plan(L: int, n: int, device: torch.device, recurrent: bool, num_mini_batch: Any,
               mini_batch_size: Any, num_epochs: int, shuffle: bool) -> Iterator[Any]:  # fmt: skip
    """Flat time-major indices ``t * N + n`` per minibatch: ``flat_index_plan``, or (recurrent)
    whole env columns ``(L, E)`` from ``column_index_plan``."""
    if not recurrent:
        yield from flat_index_plan(L * n, num_minibatches=num_mini_batch, device=device,
                                   mini_batch_size=mini_batch_size, num_epochs=num_epochs,
                                   shuffle=shuffle)  # fmt: skip
        return
    mbs, nmb = mini_batch_size, num_mini_batch
    if mbs is not None and nmb is not None and mbs != L * (n // nmb):
        raise ConfigError(f"mini_batch_size={mini_batch_size} conflicts with num_mini_batch="
                          f"{num_mini_batch} whole env columns of {L} steps")  # fmt: skip
    yield from column_index_plan(L, n, num_minibatches=num_mini_batch or 1, num_epochs=num_epochs,
                                 shuffle=shuffle, device=device)  # fmt: skip


def gather(data: Data, idx: torch.Tensor, L: int, recurrent: bool) -> Data:
    """Rows ``idx`` of every stored key flattened time-major (``RecurrentHiddenStates``: each
    sequence's first step), without ``Truncated`` / ``FinalValue``."""
    batch: Data = {}
    for k, v in data.items():
        if v is not None and k not in (K.TRUNC, K.FVAL):
            sel, n = idx.reshape(-1), L  # type: tuple[torch.Tensor, int | None]
            if k == K.RHS:  # the state before the first step of each sequence
                first = idx[0] if idx.dim() == 2 else idx
                sel, n = (first if recurrent else torch.zeros_like(first)), None
            batch[k] = tree_map(lambda t, s=sel, n=n: t[:n].reshape(-1, *t.shape[2:])[s], v)
    return batch


class VanillaOnPolicyBuffer(PyTorchRLStorage):
    """PyTorchRL's ``VanillaOnPolicyBuffer(size, device, actor, algorithm, envs)``: Monte-Carlo
    returns (:func:`rlstore.returns.gae`, lambda 1, bootstrapped with ``V(Observation[L])``) and
    ``Advantage = normalize(ExternalReturn - Value)``; ``size`` is T, ``envs.num_envs`` checks N.

    Differs from PyTorchRL: ``data`` is a view rebuilt after each change (writes into it are not
    stored; ``Reward`` / ``Value`` / ``LogProbability`` are float32); advantages use the
    population std + 1e-5; a partial rollout uses all ``L`` transitions; slot 0 comes from the
    first sample (not zeros); a full rollout raises CapacityError; :meth:`generate_batches`
    raises ConfigError for sizes that do not divide the rollout or a ``mini_batch_size`` that
    conflicts with ``num_mini_batch`` (PyTorchRL dropped the rest, ignored it) and keeps its view
    across :meth:`after_gradients`; inputs are validated, all or nothing; no multiple critics or
    RND observation statistics; intrinsic rewards are scaled by rlstore's per-env
    discounted-return normalizer (never reset at episode ends).
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
        self.num_envs = getattr(envs, "num_envs", None)
        self.device, self.recurrent_actor = as_device(device), actor.is_recurrent
        self._rb: RolloutBuffer | None = None
        self._rows: Data = {}  # per stored key one zero (N, ...) row: its shape and dtype
        self._next: Data = {}  # Observation / RecurrentHiddenStates / Done of slot L
        self._done0: Any = None  # Done of slot 0
        self._view: Data | None = None
        self.int_reward_normalizer: DiscountedReturnNormalizer | None = None
        self.reset()

    size = property(lambda self: 0 if self._rb is None else self._rb.pos, doc="Transitions L.")
    step = property(lambda self: self.size % self.max_size, doc="``size`` modulo the capacity.")
    used_capacity = property(lambda self: self.size, doc="Transitions L (slot L: bootstrap).")

    def _env_kwargs(self) -> dict[str, Any]:
        return getattr(self.envs, "env_kwargs", None) or {}

    def init_tensors(self, sample: Mapping[str, Any]) -> None:
        """Take the stored keys, shapes and dtypes from ``sample``."""
        self._rows = row_specs(sample, self.device, self.recurrent_actor, self.num_envs)
        self._view = None

    def get_num_channels_obs(self, sample: Mapping[str, Any]) -> int:
        """Set and return ``num_channels_obs``: ``Observation`` channels per frame
        (``envs.env_kwargs["frame_stack"]`` frames, else 1)."""
        stack, obs = int(self._env_kwargs().get("frame_stack", 1)), sample[K.OBS]
        ch = as_tensor(K.OBS, [*obs.values()][0] if isinstance(obs, Mapping) else obs).shape[1]
        if stack < 1 or ch % stack:
            raise SpecError(f"{K.OBS}: expected {ch} channels, a multiple of frame_stack={stack}")
        self.num_channels_obs = ch // stack
        return self.num_channels_obs

    def insert_transition(self, sample: Mapping[str, Any]) -> None:
        """Store one vector-env step; CapacityError when full, SpecError naming the key on a
        missing key, a wrong shape or a lossy dtype (nothing changes, the first sample too)."""
        specs, got, nxt, args = self._prepare(sample)
        intr = IntrinsicConfig() if K.IREW in specs else None  # stores the intrinsic fields
        rb = self._rb or RolloutBuffer(self.max_size, specs[K.DONE].shape[0], device=self.device,
                                       advantage_normalization="none", intrinsic=intr)  # fmt: skip
        hidden = nxt.get(K.RHS) if self.recurrent_actor else None
        rb.add(nxt[K.OBS], got[K.ACT], **args,
               hidden=tuple(hidden.values()) if isinstance(hidden, dict) else hidden)  # fmt: skip
        if rb.pos == 1:
            self._done0 = nxt[K.DONE]
        self._rb, self._rows, self._fresh, self._view = rb, specs, False, None
        done = (got[K.DONE2] != 0).to(specs[K.DONE].dtype)
        self._next = {**nxt, K.OBS: got[K.OBS2], K.DONE: done}
        if K.RHS2 in got:
            self._next[K.RHS] = got[K.RHS2]

    def _prepare(self, sample: Mapping[str, Any]) -> tuple[Data, Data, Data, Data]:
        """Validate ``sample``, changing nothing: the specs, the checked keys, slot ``L`` and the
        ``RolloutBuffer.add`` arguments after obs and action."""
        if self.size >= self.max_size:
            raise CapacityError(f"insert_transition: the rollout is full ({self.max_size} "
                                "steps); call after_gradients() or reset() first")  # fmt: skip
        if not isinstance(sample, Mapping):
            raise SpecError(f"sample: expected a dict of tensors, got {type(sample).__name__}")
        dev, rec = self.device, self.recurrent_actor
        specs = self._rows or row_specs(sample, dev, rec, self.num_envs)
        fresh, nxt, got = self._fresh or not self._next, dict(self._next), {}
        keys = (K.DONE, K.OBS, K.RHS, K.ACT, *SCALARS)  # a feed-forward actor's RHS: unused
        for k in [k for k in keys if k in specs and (k != K.RHS or rec)]:
            if (src := K.SHIFTED.get(k, k)) not in sample:
                raise SpecError(f"sample: missing key {src!r} (got keys {sorted(sample)})")
            got[src] = check_like(dev, src, sample[src], specs[k])
            if k in K.SHIFTED and fresh and sample.get(k) is not None:  # slot 0 of a new rollout
                nxt[k] = check_like(dev, k, sample[k], specs[k])
        N = specs[K.DONE].shape[0]
        done, fval = got[K.DONE2].reshape(N) != 0, None
        trunc = torch.zeros_like(done)
        if K.TRUNC2 in sample:
            if K.FVAL not in sample:
                raise SpecError(f"sample: {K.TRUNC2!r} needs {K.FVAL!r} = V(final observation)")
            trunc = done & check_like(dev, K.TRUNC2, sample[K.TRUNC2], specs[K.TRUNC]).reshape(N)
        if K.FVAL in sample:
            fval = check_like(dev, K.FVAL, sample[K.FVAL], specs[K.VAL]).reshape(N)
        f = {k: got[k].reshape(N) for k in SCALARS if k in got}
        args = {"logp": f[K.LOGP], "value": f[K.VAL], "reward": f[K.REW], "final_value": fval,
                "terminated": done & ~trunc, "truncated": trunc, "int_reward": f.get(K.IREW),
                "int_value": f.get(K.IVAL)}  # fmt: skip
        return specs, got, nxt, args

    @property
    def data(self) -> Data:
        """The layout-C view: every key ``(size + 1, N, ...)`` (None: not stored), plus
        ``Truncated`` / ``FinalValue``."""
        if self._view is None:
            self._view = {k: None for k in self.storage_tensors}
            self._view |= self._build_view() if self._next else {}
        return self._view

    def _build_view(self) -> Data:
        L, S, rows, nxt = self.size, self.max_size + 1, self._rows, self._next
        b = self._rb.get() if self._rb is not None and L else None
        body = {} if b is None else {k: getattr(b, n) for k, n in _FIELDS.items() if k in rows}
        if isinstance(rows.get(K.RHS), dict) and body.get(K.RHS) is not None:  # RB: a tuple
            body[K.RHS] = dict(zip(rows[K.RHS], body[K.RHS], strict=True))
        out = {}
        for k in (k for k in _FIELDS if k in rows and (k != K.RHS or self.recurrent_actor)):
            parts = ([(0, body[k])] if k in body else []) + ([(L, nxt[k])] if k in nxt else [])
            out[k] = column(rows[k], S, parts)
        if K.RHS in rows and not self.recurrent_actor:  # PyTorchRL's one-row placeholder
            out[K.RHS] = column(rows[K.RHS], 1, [])
        flags = [] if b is None else [(0, self._done0), (1, b.dones[: L - 1])]
        out[K.DONE] = column(rows[K.DONE], S, [*flags, (L, nxt[K.DONE])])
        out[K.TRUNC] = column(rows[K.TRUNC], S, [] if b is None else [(1, b.truncated)])
        out[K.FVAL] = column(rows[K.VAL], S, [] if b is None else [(1, b.final_values)])
        for k, like in ((K.RET, K.REW), (K.ADV, K.VAL), (K.IRET, K.IREW), (K.IADV, K.IVAL)):
            if like in rows:
                out[k] = column(rows[like], S, [])
        return out

    def get_all_buffer_data(self, data_to_cpu: bool = False) -> Data:
        """The stored keys of :attr:`data` as a new dict (on the CPU with ``data_to_cpu``)."""
        move = (lambda t: t.cpu()) if data_to_cpu else (lambda t: t)
        return {k: tree_map(move, v) for k, v in self.data.items() if v is not None}

    def insert_data_slice(self, new_data: Mapping[str, Any]) -> None:
        """Replace the data by ``new_data`` (a :meth:`get_all_buffer_data` of a full rollout),
        validated step by step, all or nothing; its returns and advantages are kept."""
        allowed = {*self.storage_tensors, K.TRUNC, K.FVAL}
        if unknown := sorted(set(new_data) - allowed):
            raise SpecError(f"new_data: unknown keys {unknown} (allowed: {sorted(allowed)})")
        for k, v in new_data.items():
            n = 1 if k == K.RHS and not self.recurrent_actor else self.max_size + 1
            for t in v.values() if isinstance(v, dict) else (v,):
                if t.shape[0] != n:
                    raise SpecError(f"{k}: expected a leading axis of {n}, got {tuple(t.shape)}")
        d = {k: v for k, v in new_data.items() if k != K.TRUNC or K.FVAL in new_data}
        names = ("_rb", "_rows", "_next", "_done0", "_fresh", "_view")
        saved = {k: getattr(self, k) for k in names}
        self._rb, self._rows, self._next, self._fresh = None, {}, {}, True
        try:
            for t in range(self.max_size):  # the RHS of a feed-forward actor: its one row
                s = {k: take(v, t) for k, v in d.items()}
                s |= {
                    K.SHIFTED.get(k, k): take(d[k], t + 1) for k in (*K.SHIFTED, K.FVAL) if k in d
                }
                VanillaOnPolicyBuffer.insert_transition(self, s)
        except Exception:
            self.__dict__.update(saved)
            raise
        self.data.update(
            {k: d[k].to(self.device) for k in (K.RET, K.ADV, K.IRET, K.IADV) if k in d}
        )

    def reset(self) -> None:
        """Set the counters to zero (the storage is kept and overwritten later)."""
        if self._rb is not None:
            self._rb.reset()
        self._fresh, self._view = True, None

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
        rhs = None if d[K.RHS] is None else take(d[K.RHS], L)  # FF actors: the placeholder
        for key, v in self._values(take(d[K.OBS], L), rhs, d[K.DONE][L]).items():
            if d.get(key) is not None:
                d[key][L].copy_(v.reshape(d[key][L].shape))

    def compute_returns(self, rewards: torch.Tensor, returns: torch.Tensor, values: torch.Tensor,
                        dones: torch.Tensor, gamma: float, *, truncated: Any = None,
                        final_values: Any = None) -> None:  # fmt: skip
        """Fill the layout-C ``returns[:L + 1]`` in place: lambda-returns, then ``returns[L] =
        values[L]``; ``truncated`` / ``final_values``: the truncation extension."""
        L = self._length()
        v, nv, term, trunc = layout_a(L, values, dones, truncated, final_values)
        _, ret = R.gae(rewards[:L].reshape(L, -1), v, nv, term, trunc, gamma=gamma, lam=self._lam)
        returns[:L] = ret.reshape(returns[:L].shape).to(returns.dtype)
        returns[L] = values[L]

    def compute_advantages(self, returns: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``normalize(returns[:L] - values[:L])`` over the rollout, shape ``(L, N, 1)``."""
        L = self._length()
        return R.normalize_advantages((returns[:L] - values[:L]).float(), eps=self._adv_eps)

    def _store_adv(self, key: str, adv: torch.Tensor) -> None:
        self.data[key].zero_()[: len(adv)] = adv.reshape(self.data[key][: len(adv)].shape)

    def before_gradients(self) -> None:
        """Bootstrap from V(Observation[L]), then compute returns and normalized advantages."""
        self._bootstrap(self._length())
        d, g_int = self.data, getattr(self.algo, "gamma_intrinsic", None)
        trunc = {"truncated": d[K.TRUNC], "final_values": d[K.FVAL]}
        self.compute_returns(d[K.REW], d[K.RET], d[K.VAL], d[K.DONE], self.algo.gamma, **trunc)
        self._store_adv(K.ADV, self.compute_advantages(d[K.RET], d[K.VAL]))
        if d[K.IREW] is not None and g_int is not None:  # a non-episodic intrinsic stream
            self.normalize_int_rewards()
            never = torch.zeros_like(d[K.DONE])
            self.compute_returns(d[K.IREW], d[K.IRET], d[K.IVAL], never, g_int)
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

    def _index_plan(self, num_mb: Any, mb_size: Any, epochs: int, shuffle: bool) -> Iterator[Any]:
        L, n, rec = self._length(), self._rows[K.DONE].shape[0], self.recurrent_actor
        yield from index_plan(L, n, self.device, rec, num_mb, mb_size, epochs, shuffle)

    def generate_batches(self, num_mini_batch: int | None, mini_batch_size: int | None = None,
                         num_epochs: int = 1, shuffle: bool = True) -> Iterator[Data]:  # fmt: skip
        """Yield minibatch dicts of every stored key: shuffled steps (feed-forward actors) or
        ``N / num_mini_batch`` whole env columns flattened time-major, ``RecurrentHiddenStates``
        of their first step (recurrent actors). Sizes that do not divide raise ConfigError."""
        L, data = self._length(), self.data
        for idx in self._index_plan(num_mini_batch, mini_batch_size, num_epochs, shuffle):
            yield gather(data, idx, L, self.recurrent_actor)


class GAEBuffer(VanillaOnPolicyBuffer):
    """PyTorchRL's ``GAEBuffer``: :class:`VanillaOnPolicyBuffer` (and its differences) with
    GAE(gamma, ``gae_lambda``) returns ``ExternalReturn = A + Value``."""

    def __init__(self, size: int, device: str | torch.device, actor: Actor, algorithm: Algorithm,
                 envs: Any, gae_lambda: float = 0.95) -> None:  # fmt: skip
        self.gae_lambda = real_number("gae_lambda", gae_lambda, 0.0, 1.0)  # no bools, strings
        super().__init__(size, device, actor, algorithm, envs)

    _lam = property(lambda self: self.gae_lambda)  # type: ignore[assignment]


class VTraceBuffer(VanillaOnPolicyBuffer):
    """PyTorchRL's ``VTraceBuffer``: V-trace targets (IMPALA; :func:`rlstore.returns.vtrace`)
    with the stored log-probs as behaviour policy; :meth:`compute_vtrace` re-evaluates the stored
    actions and values with the current actor (``ExternalReturn[:L] = vs``, normalized PG
    ``Advantage``, ``LogProbability[:L]`` = current). PyTorchRL's ``compute_vtrace`` (returns in
    delta, unmasked next values at episode ends, wrong call arguments) is not copied."""

    _adv_eps: ClassVar[float] = 1e-8

    def before_gradients(self) -> None:
        """Bootstrap from V(Observation[L]) and compute the V-trace targets and advantages."""
        self._bootstrap(self._length())
        self.compute_vtrace()

    @torch.no_grad()
    def get_updated_action_log_probs(self) -> torch.Tensor:
        """Re-evaluate the stored actions with the current actor (``algorithm.num_mini_batch``
        unshuffled minibatches) and refresh ``Value[:L]``; returns the new log-probs."""
        L, d = self._length(), self.data
        logp, val = d[K.LOGP][:L].clone(), d[K.VAL][:L].clone()  # written once all succeeded
        new_logp, new_val = logp.view(-1, *logp.shape[2:]), val.view(-1, *val.shape[2:])
        for idx in self._index_plan(getattr(self.algo, "num_mini_batch", 1), None, 1, False):
            b, flat = gather(d, idx, L, self.recurrent_actor), idx.reshape(-1)
            obs, rhs, done = b[K.OBS], b.get(K.RHS), b[K.DONE]
            lp = self.actor.evaluate_actions(obs, rhs, done, b[K.ACT])[0]
            v = self.actor.get_value(obs, rhs, done)["value_net1"]
            new_logp[flat] = lp.reshape(new_logp[flat].shape).to(logp.dtype)
            new_val[flat] = v.reshape(new_val[flat].shape).to(val.dtype)
        d[K.VAL][:L] = val
        return logp

    @torch.no_grad()
    def compute_vtrace(self, clip_rho_thres: float = 1.0, clip_c_thres: float = 1.0) -> None:
        """Store V-trace targets, PG advantages and the updated log-probs (``clip_rho_thres``:
        rho-bar and PG rho-bar; ``clip_c_thres``: c-bar)."""
        L, d = self._length(), self.data
        target = self.get_updated_action_log_probs()
        v, nv, term, trunc = layout_a(L, d[K.VAL], d[K.DONE], d[K.TRUNC], d[K.FVAL])
        blogp, tlogp, rew = (x.reshape(L, -1) for x in (d[K.LOGP][:L], target, d[K.REW][:L]))
        rho, c = clip_rho_thres, clip_c_thres
        vs, pg = R.vtrace(blogp, tlogp, rew, v, nv, term, trunc, gamma=self.algo.gamma,
                          rho_bar=rho, c_bar=c, pg_rho_bar=rho)  # fmt: skip
        d[K.RET][:L] = vs.reshape(d[K.RET][:L].shape).to(d[K.RET].dtype)
        d[K.RET][L] = d[K.VAL][L]
        d[K.LOGP][:L] = target
        self._store_adv(K.ADV, R.normalize_advantages(pg.float(), eps=self._adv_eps))
