"""DecisionTransformerInterpretability's ``src.ppo.memory`` (``Memory``, ``Minibatch``,
``TrajectoryMinibatch``, ``process_memory_vars_to_log``) and ``src.ppo.compute_adv_vectorized``
(``compute_advantages_vectorized``, ``shift_rows``) over :class:`RolloutBuffer` and
:func:`rlstore.returns.gae`.

**Layout B** (the original's, CleanRL's): the ``done`` stored with step ``t`` says that
``obs[t]`` *starts* an episode; rlstore's transition-aligned flag is ``done_A[t] = dones[t + 1]``
(``next_done`` at ``T - 1``). Every done terminates unless marked truncated (rlstore).

    >>> import torch
    >>> dones = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]])  # env 1: obs 1 starts anew
    >>> adv = compute_advantages_vectorized(torch.zeros(2), torch.zeros(2), torch.ones(3, 2),
    ...                                     torch.zeros(3, 2), dones, torch.device("cpu"), 1, 1)
    >>> adv[:, 1].tolist()   # env 1: the first transition ended its episode
    [1.0, 2.0, 1.0]
"""

from __future__ import annotations

import dataclasses
import numbers
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlstore import returns as R
from rlstore._checks import as_device
from rlstore._trees import as_tensor, cast_lossless, tree_map
from rlstore.agents.obs import get_obs_preprocessor
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError, EmptyBufferError, SpecError
from rlstore.minibatches import Minibatch, TrajectoryMinibatch

__all__ = ["Memory", "Minibatch", "TrajectoryMinibatch", "process_memory_vars_to_log",
           "compute_advantages_vectorized", "shift_rows", "wandb_run"]  # fmt: skip


def shift_rows(arr: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """``out[i, j, ...] = arr[j - i, ...]`` for ``j >= i``, else 0: ``(L, L, *batch)``, numpy
    or torch like ``arr``."""
    if arr.ndim < 1:
        raise SpecError(f"arr: expected 1 or more dimensions (L, ...), got {tuple(arr.shape)}")
    L = arr.shape[0]
    src = np.arange(L)[None, :] - np.arange(L)[:, None]
    keep, idx = (src >= 0).reshape(L, L, *([1] * (arr.ndim - 1))), np.clip(src, 0, None)
    if isinstance(arr, torch.Tensor):
        zero = torch.zeros((), dtype=arr.dtype, device=arr.device)
        return torch.where(torch.from_numpy(keep).to(arr.device), arr[torch.from_numpy(idx)], zero)
    return np.where(keep, arr[idx], np.zeros((), dtype=arr.dtype))


def compute_advantages_vectorized(
    next_value: torch.Tensor, next_done: torch.Tensor, rewards: torch.Tensor,
    values: torch.Tensor, dones: torch.Tensor, device: torch.device | str, gamma: float,
    gae_lambda: float,
) -> torch.Tensor:  # fmt: skip
    """GAE advantages ``(T, N)`` on ``device`` from layout-B ``dones`` ``(T, N)`` and ``(N,)``
    ``next_done`` / ``next_value``, in linear time (the original's closed form: O(T^2 N))."""
    rewards, values, dones, next_value, next_done = (
        torch.as_tensor(x) for x in (rewards, values, dones, next_value, next_done)
    )
    if rewards.dim() != 2:
        raise SpecError(f"rewards: expected shape (T, N), got {tuple(rewards.shape)}")
    T, N = rewards.shape
    want = {"values": (values, (T, N)), "dones": (dones, (T, N)),
            "next_value": (next_value, (N,)), "next_done": (next_done, (N,))}  # fmt: skip
    for name, (x, shape) in want.items():
        if tuple(x.shape) != shape:
            raise SpecError(f"{name}: expected shape {shape} like rewards, got {tuple(x.shape)}")
    done_a = torch.cat([dones[1:], next_done.to(dones.device).reshape(1, N)]) != 0
    next_values = torch.cat([values[1:], next_value.reshape(1, N).to(values)])
    adv, _ = R.gae(rewards, values, next_values, done_a, torch.zeros_like(done_a), gamma=gamma,
                   lam=gae_lambda)  # fmt: skip
    return adv.to(device)


def wandb_run(what: str) -> Any:
    """The ``wandb`` module with an active run; ConfigError naming ``what`` without wandb (the
    ``rlstore[wandb]`` extra) or without a run."""
    try:
        import wandb  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConfigError(f"{what}: needs wandb, which is not installed (pip install "
                          "'rlstore[wandb]')") from exc  # fmt: skip
    if wandb.run is None:
        raise ConfigError(f"{what}: no active wandb run; call wandb.init() first")
    return wandb


def process_memory_vars_to_log(
    memory_vars_to_log: Mapping[int, Mapping[str, Any]],
) -> dict[str, float]:
    """``{name: mean, name + "_count": n}`` over the numeric values (numbers, size-1
    arrays/tensors) of ``Memory.vars_to_log`` (``{global_step: {name: value}}``)."""
    got: dict[str, list[float]] = defaultdict(list)
    for _, variables in sorted(memory_vars_to_log.items()):
        for name, value in variables.items():
            if isinstance(value, torch.Tensor | np.ndarray) and value.reshape(-1).shape == (1,):
                value = value.reshape(()).item()
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                got[name].append(float(value))
    means = {k: float(np.mean(v)) for k, v in got.items()}
    return means | {f"{k}_count": float(len(v)) for k, v in got.items()}


def _take(x: Any, i: Any) -> Any:
    """Index a tensor, a dict or tuple of tensors (or None) along its first axis."""
    return None if x is None else tree_map(lambda v: v[i], x)


class Memory:
    """``src.ppo.memory.Memory(envs, args, device)``. The original's loop calls ``add(obs, done,
    action, logprob, value, reward[, hidden])`` per vector-env step (layout B) and sets
    ``next_obs`` / ``next_done`` / ``next_value`` after the last; the minibatch methods fill a
    :class:`RolloutBuffer` (no advantage normalization: the original's loss normalizes) and draw
    from it. An agent of :mod:`rlstore.compat.src_ppo` fills it through
    :meth:`record_rollout` instead, ``memory.state`` carrying the env and recurrent state.
    ``args``: ``gamma``, ``gae_lambda``, ``minibatch_size`` (optional ``num_minibatches``,
    ``seed``); ``obs_preprocessor``: the agents' (:func:`rlstore.agents.obs.get_obs_preprocessor`
    of ``envs.single_observation_space``), applied to ``envs.reset()``'s observations.

    Differences: ``add(..., truncated=, final_value=)`` and ``next_truncated`` /
    ``next_final_value`` mark time-limit ends, which bootstrap from ``V(final_obs)``;
    ``global_step`` counts env steps; recurrent minibatches never cross an env column or an
    episode and carry the hidden state before their first step and a mask; trajectory
    minibatches use the rollout-wide GAE; assertions are ConfigError / SpecError; ``log``
    writes to wandb or any writer; ``device`` defaults to ``"cpu"``, read as a ``torch.device``.
    """

    next_obs: Any = None
    next_done: torch.Tensor | None = None
    next_value: torch.Tensor | None = None
    next_truncated: torch.Tensor | None = None
    next_final_value: torch.Tensor | None = None
    state: Any = None  # rlstore's RolloutState, once an agent rolled out into memory

    def __init__(self, envs: Any, args: Any, device: torch.device | str = "cpu") -> None:
        if missing := [
            k for k in ("gamma", "gae_lambda", "minibatch_size") if not hasattr(args, k)
        ]:
            raise ConfigError(f"args: expected an OnlineTrainConfig-like object; missing {missing}")
        self.envs, self.args, self.num_envs = envs, args, int(envs.num_envs)
        self.device = as_device(device)
        self.obs_preprocessor = get_obs_preprocessor(envs.single_observation_space)
        self.global_step, self._episodes_seen = 0, 0  # episodes of ``state`` already logged
        self.rng = np.random.default_rng(getattr(args, "seed", None))
        self.reset()

    def add(
        self, *data: Any, info: Mapping[str, Any] | None = None, truncated: Any = None,
        final_value: Any = None,
    ) -> None:  # fmt: skip
        """Store one step ``(obs, done, action, logprob, value, reward[, hidden])`` of ``N``
        envs; ``info``: the vector env's (episode statistics); ``truncated`` / ``final_value``
        ``(N,)``: the episode ``done`` ends was truncated, and its V(final obs)."""
        if self._filled is not None:
            raise ConfigError("add: memory holds an agent's rollout; call memory.reset() first")
        if len(data) not in (6, 7):
            raise SpecError("data: expected (obs, done, action, logprob, value, reward[, "
                            f"hidden]), got {len(data)} items")  # fmt: skip
        done = as_tensor("done", data[1])
        if tuple(done.shape) != (self.num_envs,):
            raise SpecError(f"done: expected shape ({self.num_envs},), got {tuple(done.shape)}")
        cast_lossless("done", done, torch.bool)  # 0/1 (float or int) or bool
        no = torch.zeros(self.num_envs, dtype=torch.bool)
        trunc = no if truncated is None else as_tensor("truncated", truncated)
        if bool(cast_lossless("truncated", trunc, torch.bool).any()) and not self.experiences:
            raise SpecError("truncated: on the first add of a rollout it would describe the "
                            "previous rollout; set memory.next_truncated instead")  # fmt: skip
        self._probe.reset()  # a one-step buffer keeping the first add's shapes checks the rest
        obs, _, action, logprob, value, reward = data[:6]
        hidden = data[6] if len(data) > 6 else None
        self._probe.add(obs, action, logprob, value, reward, no, trunc != 0,
                        final_value=final_value, hidden=hidden)  # fmt: skip
        self.experiences.append(tuple(data))
        self._trunc.append((0, None) if truncated is None else (truncated, final_value))
        self.global_step += self.num_envs
        for src in (info or {}, (info or {}).get("final_info") or {}):  # vector or per-env stats
            if isinstance(src, Mapping) and "episode" in src and "_episode" in src:
                mask, ep = np.asarray(src["_episode"], dtype=bool), src["episode"]
                for n, r in zip(np.asarray(ep["l"])[mask], np.asarray(ep["r"])[mask], strict=True):
                    self._log_episode(n, r, self.global_step)

    def _log_episode(self, length: float, ret: float, step: int) -> None:
        self.episode_lengths.append(float(length))
        self.episode_returns.append(float(ret))
        self.vars_to_log[step] |= {"episode_length": float(length), "episode_return": float(ret)}

    def add_vars_to_log(self, **kwargs: Any) -> None:
        """Add variables to log at the current ``global_step`` (merged with earlier ones)."""
        self.vars_to_log[self.global_step] |= kwargs

    def log(self, writer: Any = None) -> None:
        """Write ``vars_to_log`` to ``writer`` (``add_scalar(tag, value, step)`` or a callable
        ``(dict, step)``) or, with none, to the active wandb run (ConfigError without one)."""
        if writer is None:
            writer = wandb_run("log (or pass writer=SummaryWriter(...))").log
        for step, variables in sorted(self.vars_to_log.items()):
            if hasattr(writer, "add_scalar"):
                for name, value in variables.items():
                    writer.add_scalar(name, value, step)
            else:
                writer(dict(variables), step=step)

    def get_printable_output(self) -> str:
        """A progress-bar description with the mean episode length/return ('' if none ended)."""
        if not self.episode_lengths:
            return ""
        length, ret = np.mean(self.episode_lengths), np.mean(self.episode_returns)
        return (f"global_step={self.global_step:<06}\navg_episode_length={length:<3.2f}\n"
                f"avg_episode_return={ret:<3.2f}")  # fmt: skip

    def sample_experiences(self) -> None:
        """Print one randomly chosen stored step (a sanity check)."""
        if not self.experiences:
            raise EmptyBufferError("sample_experiences: no experience stored")
        idx = int(self.rng.integers(len(self.experiences)))
        print(f"Sample {idx + 1}/{len(self.experiences)}:")
        names = ["obs", "done", "action", "logprob", "value", "reward", "hidden"]
        for name, x in zip(names, self.experiences[idx], strict=False):
            print(f"{name:8}: {tree_map(lambda v: torch.as_tensor(v).tolist(), x)}")

    def reset(self) -> None:
        """Clear the stored steps and statistics; reset the envs if there is no ``next_obs``."""
        self.experiences: list[tuple[Any, ...]] = []
        self._trunc: list[tuple[Any, Any]] = []
        self._cache: tuple[Any, RolloutBuffer] | None = None
        self._filled: RolloutBuffer | None = None
        self._probe = RolloutBuffer(1, self.num_envs, device=self.device)
        self.vars_to_log: defaultdict[int, dict[str, Any]] = defaultdict(dict)
        self.episode_lengths: list[float] = []
        self.episode_returns: list[float] = []
        if self.next_obs is None:
            obs, _ = self.envs.reset()
            self.next_obs = self.obs_preprocessor(obs, self.device)
            self.next_done = torch.zeros(self.num_envs, device=self.device)

    def rollout_buffer(self, num_steps: int) -> RolloutBuffer:
        """An empty ``RolloutBuffer`` of ``num_steps`` x ``num_envs`` (``args.gamma`` /
        ``gae_lambda``, this memory's device and shuffling RNG) for an agent to fill."""
        return RolloutBuffer(num_steps, self.num_envs, gamma=float(self.args.gamma),
                             lam=float(self.args.gae_lambda), advantage_normalization="none",
                             device=self.device, seed=self.rng)  # fmt: skip

    def record_rollout(self, buffer: RolloutBuffer, state: Any) -> None:
        """Take over an agent's rollout in ``buffer`` (returns computed) and its
        ``RolloutState``: ``experiences`` (layout-B views), ``next_obs`` / ``next_done``,
        ``global_step`` and the statistics of the episodes that ended in it."""
        b = buffer.get()
        done = b.dones.to(torch.float32)
        prev = torch.zeros(self.num_envs) if self.next_done is None else self.next_done
        starts = torch.cat([torch.as_tensor(prev).to(done).reshape(1, -1), done[:-1]])
        fields = (b.obs, starts, b.actions, b.logprobs, b.values, b.rewards)
        self.experiences = [tuple(_take(f, t) for f in fields) for t in range(len(starts))]
        self._filled, self.state, self.global_step = buffer, state, state.global_step
        self.next_obs, self.next_done = state.next_obs, done[-1]
        new = slice(self._episodes_seen, None)
        for ep in zip(state.episode_lengths[new], state.episode_returns[new],
                      state.episode_end_steps[new], strict=True):  # fmt: skip
            self._log_episode(*ep)
        self._episodes_seen = len(state.episode_returns)

    compute_advantages = staticmethod(compute_advantages_vectorized)
    """GAE advantages ``(T, N)`` from layout-B flags (:func:`compute_advantages_vectorized`)."""

    def _rollout(self) -> RolloutBuffer:
        """The stored steps as a computed RolloutBuffer (layout B -> A: ``done_A[t] = dones[t +
        1]``, ``next_done`` at ``T - 1``), rebuilt only after an :meth:`add` / :meth:`reset` or
        a change of a ``next_*`` value."""
        if self._filled is not None:
            return self._filled
        nxt = (self.next_value, self.next_done, self.next_truncated, self.next_final_value)
        key = (len(self.experiences), *(None if x is None else torch.as_tensor(x).tolist()
                                        for x in nxt))  # fmt: skip
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        if not self.experiences:
            raise EmptyBufferError("get_minibatches: no experience stored; call add() first")
        if self.next_value is None or self.next_done is None:
            raise EmptyBufferError("next_value/next_done: set them after the rollout (V and the "
                                   "done flag of the observation after the last step)")  # fmt: skip
        if self.next_truncated is not None and self.next_final_value is None:
            raise SpecError("next_final_value: expected V(final_obs) (N,) with next_truncated")
        last = (0, None) if self.next_truncated is None else (self.next_truncated,
                                                               self.next_final_value)  # fmt: skip
        dones = [*(e[1] for e in self.experiences[1:]), self.next_done]
        N, dev, rb = self.num_envs, self.device, self.rollout_buffer(len(self.experiences))
        for exp, d, (tr, fv) in zip(self.experiences, dones, [*self._trunc[1:], last], strict=True):
            done = torch.as_tensor(d, device=dev).reshape(N) != 0
            trunc = done & (torch.as_tensor(tr, device=dev).reshape(-1) != 0)
            obs, _, action, logprob, value, reward = exp[:6]
            rb.add(obs, action, logprob, value, reward, done & ~trunc, trunc, final_value=fv,
                   hidden=exp[6] if len(exp) > 6 else None)  # fmt: skip
        rb.compute_returns(torch.as_tensor(self.next_value, device=dev).reshape(N))
        self._cache = (key, rb)
        return rb

    def get_minibatch_indexes(
        self, batch_size: int, minibatch_size: int, recurrence: int | None = None
    ) -> list[np.ndarray]:
        """Shuffled index arrays, each index once: flat indices, ``minibatch_size`` per array, or
        (``recurrence = k``) chunk starts ``0, k, 2k, ...``, ``minibatch_size // k`` per array."""
        if minibatch_size < 1 or batch_size % minibatch_size:
            raise ConfigError(f"minibatch_size: expected a divisor of batch_size={batch_size}, "
                              f"got {minibatch_size}")  # fmt: skip
        k, T = 1 if recurrence is None else recurrence, batch_size // self.num_envs
        if recurrence is not None and (batch_size % self.num_envs or k < 1 or T % k
                                       or minibatch_size % k):  # fmt: skip
            raise ConfigError(f"recurrence: expected a divisor of the {T} steps per env and of "
                              f"minibatch_size={minibatch_size}, got {recurrence}")  # fmt: skip
        starts, per = self.rng.permutation(np.arange(0, batch_size, k)), minibatch_size // k
        return [starts[i : i + per] for i in range(0, len(starts), per)]

    def get_minibatches(
        self, recurrence: int | None = None, indexes: list[np.ndarray] | None = None
    ) -> list[Minibatch]:
        """One epoch of minibatches with GAE advantages and returns ``A + V``: shuffled flat
        ones of ``args.minibatch_size`` steps, those of ``indexes`` (flat time-major ``t * N +
        n``), or (``recurrence = k``) ``(k, B)`` sequences in ``args.num_minibatches`` groups."""
        rb = self._rollout()
        if recurrence is not None:
            if indexes is not None:
                raise ConfigError("indexes: only supported for flat minibatches (recurrence=None)")
            num = int(getattr(self.args, "num_minibatches", 1))
            return list(rb.recurrent_minibatches(num_minibatches=num, seq_len=recurrence))
        if indexes is None:
            return list(rb.minibatches(mini_batch_size=int(self.args.minibatch_size)))
        every = next(rb.minibatches(num_minibatches=1, shuffle=False))  # flat index order
        out = []
        for ind in indexes:
            i = torch.as_tensor(np.asarray(ind, dtype=np.int64), device=self.device)
            if i.dim() != 1 or (i.numel() and (int(i.min()) < 0 or int(i.max()) >= len(rb))):
                raise ConfigError(f"indexes: expected 1-D arrays of flat indices in [0, {len(rb)})")
            fields = dataclasses.fields(every)
            out.append(Minibatch(**{f.name: _take(getattr(every, f.name), i) for f in fields}))
        return out

    def get_trajectory_minibatches(
        self, timesteps: int, prob_go_from_end: float = 0.1
    ) -> list[TrajectoryMinibatch]:
        """Left-padded windows of up to ``timesteps`` past steps of one episode (Transformer
        agents), ``args.minibatch_size`` per minibatch, every step one window's target unless
        moved to its episode end with probability ``prob_go_from_end``."""
        size = int(self.args.minibatch_size)
        rb, p_end = self._rollout(), prob_go_from_end
        return list(rb.trajectory_minibatches(timesteps=timesteps, mini_batch_size=size,
                                              prob_go_from_end=p_end))  # fmt: skip
