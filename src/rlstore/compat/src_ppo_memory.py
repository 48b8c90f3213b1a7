"""DecisionTransformerInterpretability's ``src.ppo.memory``: ``Memory`` over a RolloutBuffer.

``Memory(envs, args, device)`` with ``add``, ``add_vars_to_log``, ``log``,
``compute_advantages``, ``get_minibatch_indexes``, ``get_minibatches``,
``get_trajectory_minibatches``, ``get_printable_output``, ``reset``, ``sample_experiences``;
``Minibatch`` / ``TrajectoryMinibatch`` (re-exported from :mod:`rlstore.minibatches`);
``process_memory_vars_to_log``. The agents that fill it (``agent.rollout(memory, num_steps,
envs)``) are in :mod:`rlstore.compat.src_ppo`, the seed's whole namespace.

**Layout B.** ``src.ppo`` follows CleanRL: the ``done`` stored with step ``t`` says that ``obs[t]``
*starts* a new episode (it is the ``next_done`` returned by the previous env step), and the flag
of the last transition is carried separately as ``next_done``. rlstore is transition-aligned
(layout A), so at the boundary ``done_A[t] = dones[t + 1]`` for ``t < T - 1`` and
``done_A[T - 1] = next_done``. Layout B has no truncation channel; in ``src.ppo`` every done is a
termination (no bootstrap). ``Memory`` adds one: see :meth:`Memory.add`.

See :mod:`rlstore.compat.src_ppo_gae` for a worked ``compute_advantages_vectorized`` example.
"""

from __future__ import annotations

import numbers
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from rlstore._checks import as_device
from rlstore._trees import as_tensor, cast_lossless, tree_map
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.compat.src_ppo_gae import compute_advantages_vectorized
from rlstore.errors import ConfigError, EmptyBufferError, SpecError
from rlstore.minibatches import Minibatch, TrajectoryMinibatch

__all__ = ["Memory", "Minibatch", "TrajectoryMinibatch", "process_memory_vars_to_log", "wandb_run"]


def wandb_run(what: str) -> Any:
    """The ``wandb`` module with an active run, for ``what`` to log to.

    Raises:
        ConfigError: naming ``what``: wandb is not installed (the ``rlstore[wandb]`` extra) or
            no run is active.
    """
    try:
        import wandb  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConfigError(
            f"{what}: needs wandb, which is not installed (pip install 'rlstore[wandb]')"
        ) from exc
    if wandb.run is None:
        raise ConfigError(f"{what}: no active wandb run; call wandb.init() first")
    return wandb


def process_memory_vars_to_log(
    memory_vars_to_log: Mapping[int, Mapping[str, Any]],
) -> dict[str, float]:
    """Summarize ``Memory.vars_to_log`` (``{global_step: {name: value}}``) for one log call.

    Returns:
        ``{name: mean}`` over every logged numeric value (Python/numpy numbers and size-1
        arrays/tensors), plus ``{name + "_count": n}``; non-numeric values are skipped.
    """
    collected: dict[str, list[float]] = defaultdict(list)
    for _, variables in sorted(memory_vars_to_log.items()):
        for name, value in variables.items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                value = value.item()
            elif isinstance(value, np.ndarray) and value.size == 1:
                value = value.reshape(()).item()
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                collected[name].append(float(value))
    out: dict[str, float] = {}
    for name, vals in collected.items():
        out[name] = float(np.mean(vals))
        out[f"{name}_count"] = float(len(vals))
    return out


def _same(old: torch.Tensor | None, new: Any) -> bool:
    """Whether ``new`` still equals the snapshot ``old`` (both None, or equal values)."""
    if old is None or new is None:
        return old is None and new is None
    new_t = torch.as_tensor(new)
    return new_t.shape == old.shape and bool(torch.equal(new_t.to(old), old))


_MB_FIELDS = ("obs", "actions", "logprobs", "advantages", "values", "returns",
              "recurrence_memory", "indices")  # fmt: skip


def _take(x: Any, i: torch.Tensor | int) -> Any:
    """Index a tensor, a dict or tuple of tensors (or None) along its first axis."""
    return None if x is None else tree_map(lambda v: v[i], x)


class Memory:
    """DecisionTransformerInterpretability's ``src.ppo.memory.Memory``, over a RolloutBuffer.

    The rollout loop calls ``add(obs, done, action, logprob, value, reward)`` once per vector-env
    step (layout B ``done``: "obs starts a new episode") and sets ``memory.next_obs``,
    ``memory.next_done`` and ``memory.next_value`` after the last step. The minibatch methods
    convert the steps to layout A, fill a ``RolloutBuffer`` (``advantage_normalization="none"``:
    the original normalizes per minibatch in its loss) and draw minibatches from it. Or an agent
    of :mod:`rlstore.compat.src_ppo` fills it: ``agent.rollout(memory, num_steps, envs)`` writes
    a computed ``RolloutBuffer`` (see :meth:`record_rollout`), ``memory.state`` carrying the env
    observation and the agent's recurrent state to the next rollout; ``reset()`` in between.

    ``args`` is any object with the attributes the original reads from ``OnlineTrainConfig``:
    ``gamma``, ``gae_lambda``, ``minibatch_size`` (and, optional, ``batch_size`` for
    :meth:`get_minibatch_indexes` defaults, ``num_minibatches`` for recurrent minibatches,
    ``seed`` for the shuffling RNG).

    Decisions that differ from the original (its API is kept):

    * **Truncation.** ``add(..., truncated=, final_value=)`` and the attributes
      ``next_truncated`` / ``next_final_value`` mark an episode end as a time-limit truncation
      that bootstraps from ``V(final_obs)``; without them every done is a termination, as in
      the original.
    * ``global_step`` counts env steps (``N`` per ``add``); the original only counted steps in
      which some episode finished.
    * Recurrent minibatches (``get_minibatches(recurrence=k)``) are sequences of at most ``k``
      steps that never cross an env column or an episode boundary (the original's chunks could
      cross env columns), with the hidden state before their first step and a padding mask.
    * Trajectory minibatches use the rollout-wide GAE of each target step (the original recomputed
      GAE inside each window, cutting the lambda-trace at the window end) and cover every step
      once per call (``prob_go_from_end`` moves targets to episode ends as in the original).
    * The original's assertions became :class:`~rlstore.errors.ConfigError` /
      :class:`~rlstore.errors.SpecError`; ``log`` works with wandb (when installed and a run is
      active) or any writer.

    Args:
        envs: a Gymnasium vector env (``num_envs``, ``reset()``).
        args: the training config (see above).
        device: device of the stored tensors and minibatches.
        obs_preprocessor: optional callable applied to raw observations from ``envs.reset()``.
    """

    def __init__(
        self,
        envs: Any,
        args: Any,
        device: torch.device | str = "cpu",
        *,
        obs_preprocessor: Callable[[Any], Any] | None = None,
    ) -> None:
        missing = [n for n in ("gamma", "gae_lambda", "minibatch_size") if not hasattr(args, n)]
        if missing:
            raise ConfigError(f"args: expected an OnlineTrainConfig-like object; missing {missing}")
        self.envs, self.args = envs, args
        self.num_envs = int(envs.num_envs)
        self.device = as_device(device)
        self.obs_preprocessor = obs_preprocessor
        self.next_obs: Any = None
        self.next_done: torch.Tensor | None = None
        self.next_value: torch.Tensor | None = None
        self.next_truncated: torch.Tensor | None = None
        self.next_final_value: torch.Tensor | None = None
        self.global_step = 0
        self.state: Any = None  # rlstore's RolloutState, once an agent rolled out into memory
        self._episodes_seen = 0  # episodes of ``state`` already in the statistics
        self.rng = np.random.default_rng(getattr(args, "seed", None))
        self._cache: tuple[int, list[Any], RolloutBuffer] | None = None
        self._probe: RolloutBuffer  # a one-step buffer that checks add(), new every rollout
        self.reset()

    # ------------------------------------------------------------------ rollout phase
    def add(
        self,
        *data: Any,
        info: Mapping[str, Any] | None = None,
        truncated: Any = None,
        final_value: Any = None,
    ) -> None:
        """Store one vector-env step: ``(obs, done, action, logprob, value, reward[, hidden])``.

        Args:
            data: ``obs`` ``(N, ...)`` (or a dict of such), ``done`` ``(N,)`` (layout B),
                ``action`` ``(N, ...)``, ``logprob`` ``(N,)``, ``value`` ``(N,)``, ``reward``
                ``(N,)`` and optionally the recurrent state before the step (tensor or tuple).
            info: the vector env's info of this step, for episode statistics (Gymnasium 1.x
                ``info["episode"]`` / ``info["_episode"]``, also inside ``info["final_info"]``).
            truncated: ``(N,)`` bool: the episode that ``done`` says just ended (the previous
                transition of that env) was truncated, not terminated.
            final_value: ``(N,)`` V(final observation) of those truncated envs.
        """
        if self._filled is not None:
            raise ConfigError("add: memory holds an agent's rollout; call memory.reset() first")
        if len(data) not in (6, 7):
            raise SpecError(
                "data: expected (obs, done, action, logprob, value, reward[, hidden]), "
                f"got {len(data)} items"
            )
        self._validate(data, truncated, final_value)
        self.experiences.append(tuple(data))
        self._cache = None
        self._trunc.append(None if truncated is None else (truncated, final_value))
        self.global_step += self.num_envs
        if info:
            self._record_episodes(info)

    def _validate(self, data: tuple[Any, ...], truncated: Any, final_value: Any) -> None:
        """Check one :meth:`add` before anything is stored: ``done`` here, the rest by
        :meth:`RolloutBuffer.add` into a one-step buffer that keeps the shapes and dtypes of
        the rollout's first add."""
        done = as_tensor("done", data[1])
        if tuple(done.shape) != (self.num_envs,):
            raise SpecError(f"done: expected shape ({self.num_envs},), got {tuple(done.shape)}")
        cast_lossless("done", done, torch.bool)  # 0/1 (float or int) or bool
        obs, _, action, logprob, value, reward = data[:6]
        no = torch.zeros(self.num_envs, dtype=torch.bool)
        trunc = no if truncated is None else as_tensor("truncated", truncated)
        trunc = cast_lossless("truncated", trunc, torch.bool)  # 0/1 (float or int) or bool
        self._probe.reset()
        self._probe.add(obs, action, logprob, value, reward, no, trunc, final_value=final_value,
                        hidden=data[6] if len(data) > 6 else None)  # fmt: skip
        if not self.experiences and bool(self._probe.get().truncated.any()):
            self._probe = RolloutBuffer(1, self.num_envs, device=self.device)  # as it was
            raise SpecError(
                "truncated: on the first add of a rollout it would describe the previous "
                "rollout; set memory.next_truncated / next_final_value instead"
            )

    def _record_episodes(self, info: Mapping[str, Any]) -> None:
        # Gymnasium 1.x: a vector RecordEpisodeStatistics writes info["episode"]; per-env ones
        # under SAME_STEP autoreset leave it in info["final_info"] (both with an "_episode" mask)
        for src in (info, info.get("final_info") or {}):
            if isinstance(src, Mapping) and "episode" in src and "_episode" in src:
                mask, ep = np.asarray(src["_episode"], dtype=bool), src["episode"]
                lengths, returns = np.asarray(ep["l"])[mask], np.asarray(ep["r"])[mask]
                for length, ret in zip(lengths, returns, strict=True):
                    self._log_episode(length, ret, self.global_step)

    def _log_episode(self, length: float, ret: float, step: int) -> None:
        self.episode_lengths.append(float(length))
        self.episode_returns.append(float(ret))
        self.vars_to_log[step] |= {"episode_length": float(length), "episode_return": float(ret)}

    def add_vars_to_log(self, **kwargs: Any) -> None:
        """Add variables to log at the current ``global_step`` (merged with earlier ones)."""
        self.vars_to_log[self.global_step] |= kwargs

    def log(self, writer: Any = None) -> None:
        """Write ``vars_to_log`` to ``writer`` or, with no writer, to the active wandb run.

        Args:
            writer: None (wandb), an object with ``add_scalar(tag, value, step)`` (TensorBoard
                ``SummaryWriter``), or a callable ``(dict, step)``.

        Raises:
            ConfigError: no writer given and wandb is not installed or has no active run.
        """
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
        global_step = self.global_step
        avg_episode_length = float(np.mean(self.episode_lengths))
        avg_episode_return = float(np.mean(self.episode_returns))
        return f"{global_step=:<06}\n{avg_episode_length=:<3.2f}\n{avg_episode_return=:<3.2f}"

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
        self._cache = None
        self._filled: RolloutBuffer | None = None
        self._probe = RolloutBuffer(1, self.num_envs, device=self.device)
        self._trunc: list[tuple[Any, Any] | None] = []
        self.vars_to_log: defaultdict[int, dict[str, Any]] = defaultdict(dict)
        self.episode_lengths: list[float] = []
        self.episode_returns: list[float] = []
        if self.next_obs is None:
            obs, _ = self.envs.reset()
            if self.obs_preprocessor is not None:
                obs = self.obs_preprocessor(obs)
            to_t = lambda x: torch.as_tensor(np.asarray(x), device=self.device)  # noqa: E731
            self.next_obs = (
                {k: to_t(v) for k, v in obs.items()} if isinstance(obs, dict) else to_t(obs)
            )
            self.next_done = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)

    # ------------------------------------------------------------------ agent rollouts
    def rollout_buffer(self, num_steps: int) -> RolloutBuffer:
        """An empty ``RolloutBuffer`` of ``num_steps`` x ``num_envs`` (``args.gamma`` /
        ``gae_lambda``, this memory's device and shuffling RNG), e.g. for an agent to fill."""
        return RolloutBuffer(num_steps, self.num_envs, gamma=float(self.args.gamma),
                             lam=float(self.args.gae_lambda), advantage_normalization="none",
                             device=self.device, seed=self.rng)  # fmt: skip

    def record_rollout(self, buffer: RolloutBuffer, state: Any) -> None:
        """Take over a rollout that an agent wrote into ``buffer`` (returns computed) and its
        ``RolloutState``: ``experiences`` (layout B views), ``next_obs`` / ``next_done``,
        ``global_step`` and the statistics of the episodes that ended in it."""
        b = buffer.get()
        done = (b.terminated | b.truncated).to(torch.float32)
        prev = torch.zeros(self.num_envs) if self.next_done is None else self.next_done
        starts = torch.cat([torch.as_tensor(prev).to(done).reshape(1, -1), done[:-1]])
        fields = (b.obs, starts, b.actions, b.logprobs, b.values, b.rewards)
        self.experiences = [tuple(_take(f, t) for f in fields) for t in range(len(starts))]
        self._filled, self.state, self.global_step = buffer, state, state.global_step
        self.next_obs, self.next_done = state.next_obs, done[-1]
        new = slice(self._episodes_seen, None)
        for ep in zip(*(x[new] for x in (state.episode_lengths, state.episode_returns,
                                          state.episode_end_steps)), strict=True):  # fmt: skip
            self._log_episode(*ep)
        self._episodes_seen = len(state.episode_returns)

    # ------------------------------------------------------------------ learning phase
    compute_advantages = staticmethod(compute_advantages_vectorized)
    """GAE advantages ``(T, N)`` from layout-B flags (:func:`compute_advantages_vectorized`)."""

    def _rollout(self) -> RolloutBuffer:
        """The stored steps as a computed RolloutBuffer (layout B -> A conversion).

        Cached until the next :meth:`add` / :meth:`reset` or a change of ``next_value``,
        ``next_done``, ``next_truncated`` or ``next_final_value`` (one build per rollout when
        minibatches are drawn once per epoch).
        """
        if self._filled is not None:
            return self._filled
        ends_now = [self.next_value, self.next_done, self.next_truncated, self.next_final_value]
        cached = self._cache
        if (
            cached is not None
            and cached[0] == len(self.experiences)
            and all(_same(a, b) for a, b in zip(cached[1], ends_now, strict=True))
        ):
            return cached[2]
        rb = self._build_rollout()
        snapshot = [None if x is None else torch.as_tensor(x).clone() for x in ends_now]
        self._cache = (len(self.experiences), snapshot, rb)
        return rb

    def _build_rollout(self) -> RolloutBuffer:
        T = len(self.experiences)
        if T == 0:
            raise EmptyBufferError("get_minibatches: no experience stored; call add() first")
        if self.next_value is None or self.next_done is None:
            raise EmptyBufferError(
                "next_value/next_done: set them after the rollout (V and the "
                "done flag of the observation after the last step)"
            )
        rb = self.rollout_buffer(T)
        last_tr = None
        if self.next_truncated is not None:
            if self.next_final_value is None:
                raise SpecError("next_final_value: expected V(final_obs) (N,) with next_truncated")
            last_tr = (self.next_truncated, self.next_final_value)
        ends = [(e[1], tr) for e, tr in zip(self.experiences[1:], self._trunc[1:], strict=True)]
        N, dev = self.num_envs, self.device
        for exp, (done_next, tr) in zip(self.experiences, [*ends, (self.next_done, last_tr)],
                                        strict=True):  # fmt: skip
            done = torch.as_tensor(done_next, device=dev).reshape(N) != 0
            trunc = torch.zeros_like(done)
            if tr is not None:
                trunc = done & (torch.as_tensor(tr[0], device=dev).reshape(N) != 0)
            obs, _, action, logprob, value, reward = exp[:6]
            rb.add(obs, action, logprob, value, reward, done & ~trunc, trunc,
                   final_value=None if tr is None else tr[1],
                   hidden=exp[6] if len(exp) > 6 else None)  # fmt: skip
        rb.compute_returns(torch.as_tensor(self.next_value, device=dev).reshape(N))
        return rb

    def get_minibatch_indexes(
        self, batch_size: int, minibatch_size: int, recurrence: int | None = None
    ) -> list[np.ndarray]:
        """Shuffled index arrays into the flattened batch, each index exactly once.

        Without ``recurrence``: ``batch_size // minibatch_size`` arrays of ``minibatch_size``
        flat indices. With ``recurrence = k``: start indices ``0, k, 2k, ...`` of the env-major
        flattened batch (``n * T + t``; a chunk of ``k`` steps stays inside one env column
        because ``k`` must divide ``T = batch_size / num_envs``), shuffled, ``minibatch_size //
        k`` per array.

        Raises:
            ConfigError: sizes that do not divide (the original asserted only some of them).
        """
        if minibatch_size < 1 or batch_size % minibatch_size:
            raise ConfigError(
                f"minibatch_size: expected a divisor of batch_size={batch_size}, "
                f"got {minibatch_size}"
            )
        if recurrence is None:
            perm = self.rng.permutation(batch_size)
            return list(perm.reshape(batch_size // minibatch_size, minibatch_size))
        T = batch_size // self.num_envs
        if (
            batch_size % self.num_envs
            or recurrence < 1
            or T % recurrence
            or minibatch_size % recurrence
        ):
            raise ConfigError(
                f"recurrence: expected a divisor of the {T} steps per env and of "
                f"minibatch_size={minibatch_size}, got {recurrence}"
            )
        starts = self.rng.permutation(np.arange(0, batch_size, recurrence))
        per = minibatch_size // recurrence
        return [starts[i : i + per] for i in range(0, len(starts), per)]

    def get_minibatches(
        self, recurrence: int | None = None, indexes: list[np.ndarray] | None = None
    ) -> list[Minibatch]:
        """One epoch of minibatches with GAE advantages and returns (``A + V``).

        Args:
            recurrence: None for flat shuffled minibatches of ``args.minibatch_size`` steps;
                ``k`` for time-major ``(k, B)`` sequences (see the class doc), split into
                ``args.num_minibatches`` groups.
            indexes: flat time-major indices (``t * N + n``) for each minibatch, instead of a
                fresh permutation (flat minibatches only).
        """
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
            out.append(Minibatch(**{f: _take(getattr(every, f), i) for f in _MB_FIELDS}))
        return out

    def get_trajectory_minibatches(
        self, timesteps: int, prob_go_from_end: float = 0.1
    ) -> list[TrajectoryMinibatch]:
        """Windows of up to ``timesteps`` past steps of the same episode, for Transformer agents.

        ``args.minibatch_size`` windows per minibatch, every step the target of one window
        (unless moved to its episode end with probability ``prob_go_from_end``); fields as in
        :class:`~rlstore.minibatches.TrajectoryMinibatch` (left padding, ``mask``).
        """
        rb = self._rollout()
        return list(
            rb.trajectory_minibatches(
                timesteps=timesteps,
                mini_batch_size=int(self.args.minibatch_size),
                prob_go_from_end=prob_go_from_end,
            )
        )
