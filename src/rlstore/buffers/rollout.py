"""On-policy rollout storage with GAE / V-trace returns and PPO minibatch generators.

Layout: every per-step field is a preallocated ``(T, N, *field_shape)`` torch tensor on
``device`` (``T = num_steps``, ``N = num_envs``), transition-aligned (``terminated[t]`` /
``truncated[t]`` describe ``obs[t] -> successor``; see :mod:`rlstore.returns`). Observations
(a Box array or a one-level dict of arrays), actions and the optional recurrent ``hidden``
state are allocated lazily from the first :meth:`RolloutBuffer.add` with their dtypes
preserved; log-probs, values, rewards and ``final_value`` are stored as float32.

Returns: :meth:`RolloutBuffer.compute_returns` builds ``next_values`` (``values[t+1]``,
``final_value`` on truncation, ``last_value`` at the last stored step) and calls
:func:`rlstore.returns.gae`; :meth:`RolloutBuffer.compute_vtrace` re-evaluates the stored data
through the caller's networks and calls :func:`rlstore.returns.vtrace`.

Intrinsic stream (RND, Burda et al. 2018), enabled by an :class:`IntrinsicConfig`: intrinsic
rewards are divided by the running std of their per-env discounted sum
(:class:`rlstore.normalize.DiscountedReturnNormalizer`, no mean subtraction), the intrinsic GAE
ignores ``terminated`` / ``truncated`` (non-episodic) and bootstraps from ``int_values[t+1]``
and ``last_int_value``, and the training advantage is ``ext_coef * A_ext + int_coef * A_int``.

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

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np
import torch

from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.minibatches import (
    Hidden,
    Minibatch,
    Obs,
    RolloutBatch,
    TrajectoryMinibatch,
    flat_minibatches,
    recurrent_minibatches,
    trajectory_minibatches,
)
from rlstore.normalize import DiscountedReturnNormalizer
from rlstore.returns import gae, normalize_advantages, vtrace

__all__ = ["RolloutBuffer", "RolloutBatch", "IntrinsicConfig"]

AdvNorm = Literal["none", "batch", "minibatch"]
_FLOATS = ("logprobs", "values", "rewards", "final_values")
_INT_FLOATS = ("int_rewards", "int_values")


@dataclass(frozen=True)
class IntrinsicConfig:
    """Settings of the RND-style intrinsic reward stream.

    Attributes:
        int_gamma: discount of the intrinsic (non-episodic) return, in [0, 1].
        ext_coef: weight of the extrinsic advantage in the combined advantage.
        int_coef: weight of the intrinsic advantage.
        int_lam: GAE lambda of the intrinsic stream (None: the buffer's ``lam``).
        normalize_rewards: divide intrinsic rewards by the running std of their discounted sum.
    """

    int_gamma: float = 0.99
    ext_coef: float = 2.0
    int_coef: float = 1.0
    int_lam: float | None = None
    normalize_rewards: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.int_gamma <= 1.0:
            raise ConfigError(f"int_gamma: expected a value in [0, 1], got {self.int_gamma!r}")
        if self.int_lam is not None and not 0.0 <= self.int_lam <= 1.0:
            raise ConfigError(f"int_lam: expected a value in [0, 1] or None, got {self.int_lam!r}")


def _as_tensor(name: str, x: Any, device: torch.device) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to(device)
    try:
        return torch.as_tensor(np.asarray(x), device=device)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{name}: expected an array or tensor, got {type(x).__name__}") from exc


def _tmap(fn: Callable[[torch.Tensor], Any], tree: Any) -> Any:
    """Apply ``fn`` to every tensor leaf of a dict / tuple tree."""
    if isinstance(tree, dict):
        return {k: _tmap(fn, v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_tmap(fn, v) for v in tree)
    return fn(tree)


def _leaves(tree: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    _tmap(out.append, tree)
    return out


def _to_sd(tree: Any) -> Any:
    """Tree -> checkpointable nested dict (tuples become ``{"tuple:0": ..}``), CPU copies."""
    if isinstance(tree, dict):
        return {k: _to_sd(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return {f"tuple:{i}": _to_sd(v) for i, v in enumerate(tree)}
    return tree.detach().cpu().clone()


def _from_sd(tree: Any, device: torch.device) -> Any:
    if isinstance(tree, dict):
        if tree and all(k.startswith("tuple:") for k in tree):
            return tuple(_from_sd(tree[f"tuple:{i}"], device) for i in range(len(tree)))
        return {k: _from_sd(v, device) for k, v in tree.items()}
    return torch.as_tensor(tree).to(device)


class RolloutBuffer:
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
        for name, v in (("num_steps", num_steps), ("num_envs", num_envs)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"{name}: expected an int >= 1, got {v!r}")
        for name, g in (("gamma", gamma), ("lam", lam)):
            if not 0.0 <= float(g) <= 1.0:
                raise ConfigError(f"{name}: expected a value in [0, 1], got {g!r}")
        if advantage_normalization not in ("none", "batch", "minibatch"):
            raise ConfigError(
                "advantage_normalization: expected 'none', 'batch' or 'minibatch', "
                f"got {advantage_normalization!r}"
            )
        if isinstance(intrinsic, dict):  # e.g. from config(): JSON round trip
            try:
                intrinsic = IntrinsicConfig(**intrinsic)
            except TypeError as exc:
                raise ConfigError(f"intrinsic: {exc}") from exc
        if intrinsic is not None and not isinstance(intrinsic, IntrinsicConfig):
            raise ConfigError(
                f"intrinsic: expected an IntrinsicConfig or None, got {type(intrinsic).__name__}"
            )
        self.num_steps, self.num_envs = int(num_steps), int(num_envs)
        self.gamma, self.lam = float(gamma), float(lam)
        self.advantage_normalization: AdvNorm = advantage_normalization
        self.intrinsic = intrinsic
        self.device = torch.device(device)
        self._seed = None if seed is None or isinstance(seed, np.random.Generator) else int(seed)
        self._rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        T, N = self.num_steps, self.num_envs
        self._float_names = _FLOATS + (_INT_FLOATS if intrinsic is not None else ())
        if intrinsic is not None:  # RND reward scaling: running std of the discounted sum
            self._normalizer = DiscountedReturnNormalizer(gamma=intrinsic.int_gamma)
        # the per-env scalar streams share one (K, T, N) float32 block and the two flags one
        # (2, T, N) bool block, so that add() writes each with one copy; _data holds views.
        # obs / actions / hidden are allocated lazily from the first add (dtypes preserved).
        self._data: dict[str, Any] = {}
        self._pack(
            torch.zeros(len(self._float_names), T, N, device=self.device),
            torch.zeros(2, T, N, dtype=torch.bool, device=self.device),
        )
        self._data["episode_time"] = torch.zeros(T, N, dtype=torch.int64, device=self.device)
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
        return sum(x.element_size() * x.numel() for x in _leaves(self._data))

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

    def _finite(self, name: str, x: Any) -> torch.Tensor:
        t = self._vector(name, x)
        if not bool(torch.isfinite(t).all()):
            raise SpecError(f"{name}: expected finite values, got {t.tolist()}")
        return t

    def _pack(self, floats: torch.Tensor, flags: torch.Tensor) -> None:
        self._floats, self._flags = floats, flags
        self._data |= dict(zip(self._float_names, floats, strict=True))
        self._data |= {"terminated": flags[0], "truncated": flags[1]}

    def _vector(
        self, name: str, x: Any, *, flag: bool = False, finite_where: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Validate a per-env scalar or flag: shape ``(N,)`` (``(N, 1)`` accepted) -> float32/bool.

        Finiteness is checked by the caller; ``finite_where`` zeroes the entries outside it.
        """
        t = _as_tensor(name, x, self.device)
        N = self.num_envs
        if t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.dim() == 0 and N == 1:
            t = t.reshape(1)
        if tuple(t.shape) != (N,):
            raise SpecError(f"{name}: expected shape ({N},) (one per env), got {tuple(t.shape)}")
        if flag:
            if t.dtype != torch.bool:
                if t.is_floating_point() or t.is_complex() or not bool(((t == 0) | (t == 1)).all()):
                    raise SpecError(
                        f"{name}: expected bool or 0/1 flags, got {t.dtype} {t.tolist()}"
                    )
                t = t != 0
            return t
        if t.dtype == torch.bool or t.is_complex():
            raise SpecError(f"{name}: expected a real number per env, got dtype {t.dtype}")
        t = t.to(torch.float32)
        return t if finite_where is None else torch.where(finite_where, t, 0.0)

    def _tree(self, name: str, x: Any, stored: Any) -> Any:
        """Validate a tensor / dict / tuple tree with a leading env axis against ``stored``."""
        N = self.num_envs
        if isinstance(x, dict) and name == "obs":
            if stored is not None and (not isinstance(stored, dict) or set(x) != set(stored)):
                want = sorted(stored) if isinstance(stored, dict) else "an array"
                raise SpecError(f"{name}: expected keys {want} like the first add, got {sorted(x)}")
            if not x:
                raise SpecError(f"{name}: expected a non-empty dict, got {{}}")
            return {k: self._tree(f"{name}[{k!r}]", v, stored and stored[k]) for k, v in x.items()}
        if isinstance(x, (tuple, list)) and name.startswith("hidden"):
            if stored is not None and (not isinstance(stored, tuple) or len(stored) != len(x)):
                raise SpecError(
                    f"{name}: expected the structure of the first add, got {len(x)} items"
                )
            return tuple(
                self._tree(f"{name}[{i}]", v, None if stored is None else stored[i])
                for i, v in enumerate(x)
            )
        if isinstance(stored, (dict, tuple)):
            raise SpecError(
                f"{name}: expected a {type(stored).__name__} like the first add, "
                f"got {type(x).__name__}"
            )
        t = _as_tensor(name, x, self.device)
        if t.dim() == 0 or t.shape[0] != N:
            raise SpecError(
                f"{name}: expected a leading env axis of size {N}, got shape {tuple(t.shape)}"
            )
        if stored is not None and (t.shape[1:] != stored.shape[2:] or t.dtype != stored.dtype):
            raise SpecError(
                f"{name}: expected shape {(N, *stored.shape[2:])} dtype {stored.dtype} like the "
                f"first add, got shape {tuple(t.shape)} dtype {t.dtype}"
            )
        return t

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
            hidden: recurrent state *before* this step: a tensor or tuple of tensors with a
                leading env axis (e.g. LSTM ``(h, c)`` each ``(N, layers, H)``).
            int_reward, int_value: ``(N,)`` intrinsic reward and value, required exactly when
                the buffer has an :class:`IntrinsicConfig`.

        Raises:
            CapacityError: the buffer already holds ``num_steps`` steps.
            SpecError: a field has the wrong shape, dtype or structure, or non-finite values.
        """
        if self._pos >= self.num_steps:
            raise CapacityError(
                f"add: the buffer is full (num_steps={self.num_steps}); compute returns, draw "
                "minibatches, then reset() before adding the next rollout"
            )
        d = self._data
        row: dict[str, Any] = {
            "obs": self._tree("obs", obs, d.get("obs")),
            "actions": self._tree("action", action, d.get("actions")),
        }
        floats = [self._vector("logp", logp), self._vector("value", value)]
        floats.append(self._vector("reward", reward))
        term = self._vector("terminated", terminated, flag=True)
        trunc = self._vector("truncated", truncated, flag=True)
        boot = trunc & ~term  # termination wins: no bootstrap
        if final_value is None:
            if bool(boot.any()):
                raise SpecError(
                    "final_value: expected V(final_obs) for the truncated envs "
                    f"{torch.nonzero(boot).flatten().tolist()}, got None"
                )
            final_value = self._data["final_values"][0]  # any finite (N,) row: ignored
        floats.append(self._vector("final_value", final_value, finite_where=boot))
        if self._hidden_given is not None and (hidden is not None) != self._hidden_given:
            want = "a hidden state" if self._hidden_given else "hidden=None"
            raise SpecError(
                f"hidden: expected {want} like the first add, got {type(hidden).__name__}"
            )
        if hidden is not None:
            row["hidden"] = self._tree("hidden", hidden, d.get("hidden"))
        if self.intrinsic is None and (int_reward is not None or int_value is not None):
            raise ConfigError(
                "int_reward/int_value: given but the buffer has no intrinsic stream; construct "
                "it with intrinsic=IntrinsicConfig(...)"
            )
        if self.intrinsic is not None:
            if int_reward is None or int_value is None:
                raise SpecError(
                    "int_reward/int_value: expected (N,) arrays (the buffer has an intrinsic "
                    f"stream), got {type(int_reward).__name__}, {type(int_value).__name__}"
                )
            floats += [self._vector("int_reward", int_reward), self._vector("int_value", int_value)]
        block = torch.stack(floats)  # (K, N)
        if not bool(torch.isfinite(block).all()):  # one check for all streams
            i = int((~torch.isfinite(block)).any(dim=1).nonzero()[0])
            names = ("logp", "value", "reward", "final_value", "int_reward", "int_value")
            raise SpecError(f"{names[i]}: expected finite values, got {floats[i].tolist()}")
        # ---- everything validated: allocate lazily, then write
        T = self.num_steps
        for k in ("obs", "actions", "hidden"):
            if k in row and k not in d:
                d[k] = _tmap(lambda x: x.new_zeros((T, *x.shape)), row[k])
        self._hidden_given = hidden is not None
        p = self._pos
        for k, v in row.items():
            for dst, src in zip(_leaves(d[k]), _leaves(v), strict=True):
                dst[p] = src
        self._floats[:, p] = block
        self._flags[0, p], self._flags[1, p] = term, trunc
        d["episode_time"][p] = self._next_episode_time
        done = term | trunc
        self._next_episode_time = torch.where(done, 0, self._next_episode_time + 1)
        self._pos = p + 1
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

    def _next_values(
        self, values: torch.Tensor, last: torch.Tensor, episodic: bool
    ) -> torch.Tensor:
        """``(P, N)`` V of the true successor of each stored step (docs/architecture.md)."""
        nxt = torch.cat([values[1:], last[None]], dim=0)
        if episodic:
            p, d = values.shape[0], self._data
            boot = d["truncated"][:p] & ~d["terminated"][:p]
            nxt = torch.where(boot, d["final_values"][:p], nxt)
        return nxt

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
        p, d = self._require_steps("compute_returns"), self._data
        last = self._finite("last_value", last_value)
        v = d["values"][:p]
        term, trunc = d["terminated"][:p], d["truncated"][:p]
        ext = (d["rewards"][:p], v, self._next_values(v, last, True), term, trunc)
        adv, ret = gae(*ext, gamma=self.gamma, lam=self.lam)
        results = {"advantages": adv, "returns": ret}
        cfg = self.intrinsic
        if cfg is not None:
            if last_int_value is None:
                raise SpecError(
                    "last_int_value: expected (N,) V_int(next_obs) (the buffer has an intrinsic "
                    "stream), got None"
                )
            last_i = self._finite("last_int_value", last_int_value)
            iv, ir = d["int_values"][:p], d["int_rewards"][:p]
            if cfg.normalize_rewards:  # RND: divide by the running std of the discounted sum
                ir = self._normalizer(ir)
            never = torch.zeros_like(term)  # non-episodic: no termination, no trace cut
            lam_i = self.lam if cfg.int_lam is None else cfg.int_lam
            intr = (ir, iv, self._next_values(iv, last_i, False), never, never)
            int_adv, int_ret = gae(*intr, gamma=cfg.int_gamma, lam=lam_i)
            results |= {
                "int_advantages": int_adv,
                "int_returns": int_ret,
                "advantages": cfg.ext_coef * adv + cfg.int_coef * int_adv,
            }
        self._results = results

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
        under ``torch.no_grad()``. The behaviour log-probs are the stored ``logprobs``; the
        ``final_value`` of truncated steps is the stored rollout-time ``V(final_obs)``.
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
        p, d = self._require_steps("compute_vtrace"), self._data
        last = self._finite("last_value", last_value)
        batch = self._view(p)
        with torch.no_grad():
            out = evaluate(batch.obs, batch.actions, batch.hidden)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise SpecError(f"evaluate: expected (target_logp, values), got {type(out).__name__}")
        tl, v = (
            _as_tensor(f"evaluate: {n}", x, self.device).float()
            for n, x in zip(("target_logp", "values"), out, strict=True)
        )
        for name, x in (("target_logp", tl), ("values", v)):
            if tuple(x.shape) != (p, self.num_envs):
                raise SpecError(
                    f"evaluate: {name} expected shape ({p}, {self.num_envs}), got {tuple(x.shape)}"
                )
        nv = self._next_values(v, last, True)
        args = (d["logprobs"][:p], tl, d["rewards"][:p], v, nv, d["terminated"][:p])
        clip = {"rho_bar": rho_bar, "c_bar": c_bar, "pg_rho_bar": pg_rho_bar}
        vs, pg = vtrace(*args, d["truncated"][:p], gamma=self.gamma, lam=lam, **clip)
        self._results = {"advantages": pg, "returns": vs}

    # ------------------------------------------------------------------ reading

    def _view(self, p: int) -> RolloutBatch:
        if "obs" not in self._data:
            raise EmptyBufferError("get: the buffer holds no steps; add() a rollout first")
        view = {k: _tmap(lambda x: x[:p], v) for k, v in self._data.items()}
        return RolloutBatch(**view, **self._results)

    def get(self) -> RolloutBatch:
        """The stored ``(pos, N, ...)`` steps as a :class:`RolloutBatch` of read-only views.

        ``advantages`` are raw (unnormalized); do not modify the tensors.
        """
        return self._view(self._require_steps("get"))

    def _training_batch(self, what: str) -> tuple[RolloutBatch, bool]:
        """The batch minibatches are cut from, and whether to normalize per minibatch."""
        batch = self._view(self._require_steps(what))
        if batch.advantages is None:
            raise EmptyBufferError(
                f"{what}: advantages not computed; call compute_returns(last_value) or "
                "compute_vtrace(...) first"
            )
        if self.advantage_normalization == "batch" and batch.advantages.numel() > 1:
            batch = replace(batch, advantages=normalize_advantages(batch.advantages))
        return batch, self.advantage_normalization == "minibatch"

    def minibatches(
        self,
        *,
        num_minibatches: int | None = None,
        mini_batch_size: int | None = None,
        num_epochs: int = 1,
        shuffle: bool = True,
    ) -> Iterator[Minibatch]:
        """Flat shuffled minibatches ``(B, ...)``; every stored step once per epoch.

        Give ``num_minibatches`` or ``mini_batch_size`` (both only if they agree; neither: one
        minibatch of the whole rollout); the size must divide ``pos * num_envs``
        (:class:`ConfigError` otherwise). See :func:`rlstore.minibatches.flat_minibatches`.
        """
        batch, norm = self._training_batch("minibatches")
        return flat_minibatches(
            batch,
            num_minibatches=num_minibatches,
            mini_batch_size=mini_batch_size,
            num_epochs=num_epochs,
            shuffle=shuffle,
            normalize=norm,
            rng=self._rng,
        )

    def recurrent_minibatches(
        self,
        *,
        num_minibatches: int,
        num_epochs: int = 1,
        seq_len: int | None = None,
        shuffle: bool = True,
    ) -> Iterator[Minibatch]:
        """Time-major ``(L, B, ...)`` sequence minibatches with initial hidden state and mask.

        ``seq_len=None``: whole env columns (``num_minibatches`` must divide ``num_envs``);
        otherwise chunks of at most ``seq_len`` steps that never cross an env column or an
        episode boundary. See :func:`rlstore.minibatches.recurrent_minibatches`.
        """
        batch, norm = self._training_batch("recurrent_minibatches")
        n_mb, rng = num_minibatches, self._rng
        return recurrent_minibatches(
            batch,
            num_minibatches=n_mb,
            num_epochs=num_epochs,
            seq_len=seq_len,
            shuffle=shuffle,
            normalize=norm,
            rng=rng,
        )

    def trajectory_minibatches(
        self,
        *,
        timesteps: int,
        mini_batch_size: int,
        num_epochs: int = 1,
        prob_go_from_end: float = 0.0,
    ) -> Iterator[TrajectoryMinibatch]:
        """Left-padded windows of up to ``timesteps`` past steps of the same episode.

        Seed 004 ``get_trajectory_minibatches`` semantics; with ``prob_go_from_end = 0`` every
        step is a target once per epoch. See :func:`rlstore.minibatches.trajectory_minibatches`.
        """
        batch, norm = self._training_batch("trajectory_minibatches")
        sizes = {
            "timesteps": timesteps,
            "mini_batch_size": mini_batch_size,
            "num_epochs": num_epochs,
        }
        p_end = prob_go_from_end
        return trajectory_minibatches(
            batch, **sizes, prob_go_from_end=p_end, normalize=norm, rng=self._rng
        )

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self) -> dict[str, Any]:
        """Nested dict of CPU tensors and JSON scalars: config, cursor, data, results, RNG."""
        state: dict[str, Any] = {
            "config": self.config(),
            "pos": self._pos,
            "hidden_given": self._hidden_given,
            "rng": self._rng.bit_generator.state,
            "data": _to_sd(self._data),
            "next_episode_time": _to_sd(self._next_episode_time),
            "results": _to_sd(self._results),
        }
        if self.intrinsic is not None:
            state["normalizer"] = self._normalizer.state_dict()
        return state

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a buffer with the same num_steps / num_envs."""
        try:
            cfg = sd["config"]
            if (cfg["num_steps"], cfg["num_envs"]) != (self.num_steps, self.num_envs):
                raise CheckpointError(
                    f"state_dict: expected num_steps={self.num_steps}, num_envs={self.num_envs}, "
                    f"got num_steps={cfg['num_steps']}, num_envs={cfg['num_envs']}"
                )
            if (cfg.get("intrinsic") is None) != (self.intrinsic is None):
                raise CheckpointError(
                    "state_dict: intrinsic stream presence differs from this buffer"
                )
            data = _from_sd(sd["data"], self.device)
            results = _from_sd(sd["results"], self.device)
            nxt = _from_sd(sd["next_episode_time"], self.device)
            pos, hidden_given, rng_state = int(sd["pos"]), sd["hidden_given"], sd["rng"]
            normalizer = sd.get("normalizer")
        except (KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"state_dict: missing or malformed entry {exc!r}") from exc
        missing = set(self._data) - set(data)
        if missing or not 0 <= pos <= self.num_steps:
            raise CheckpointError(f"state_dict: missing fields {sorted(missing)} or bad pos={pos}")
        try:
            floats = torch.stack([data[k].float() for k in self._float_names])
            flags = torch.stack([data["terminated"].bool(), data["truncated"].bool()])
        except RuntimeError as exc:
            raise CheckpointError(f"state_dict: inconsistent field shapes ({exc})") from exc
        if floats.shape[1:] != (self.num_steps, self.num_envs):
            raise CheckpointError(
                f"state_dict: expected fields of shape ({self.num_steps}, {self.num_envs}), "
                f"got {tuple(floats.shape[1:])}"
            )
        if normalizer is not None:
            self._normalizer.load_state_dict(normalizer)
        self._data, self._results, self._next_episode_time = data, results, nxt
        self._pack(floats, flags)
        self._pos, self._hidden_given = pos, hidden_given
        self._rng.bit_generator.state = rng_state
