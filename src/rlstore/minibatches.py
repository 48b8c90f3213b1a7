"""Minibatch generators and their index plans over a time-major on-policy rollout (the records
they read and yield, :class:`RolloutBatch`, :class:`Minibatch` and :class:`TrajectoryMinibatch`,
are in :mod:`rlstore.rollout_records`; importable from here as well).

Contract (shared with :mod:`rlstore.buffers.rollout`):

* Input is a :class:`RolloutBatch`: every per-step field is ``(T, N, *field_shape)`` on one
  device, transition-aligned (``terminated[t]``/``truncated[t]`` describe ``obs[t] -> next``).
  A step ``(t, n)`` has the flat index ``t * N + n`` (time-major flattening).
* An *episode segment* is a maximal run of steps of one env column that contains no episode
  boundary: a segment starts at ``t = 0`` or after a ``done[t - 1] = terminated | truncated``
  and ends at a done step or at ``t = T - 1``.
* Three generators, each yielding ``num_epochs`` passes; ``rng`` is a
  :class:`numpy.random.Generator` (or a :class:`torch.Generator`) owned by the caller:

  - :func:`flat_minibatches`: shuffled steps, each step exactly once per epoch.
  - :func:`recurrent_minibatches`: time-major ``(L, B, ...)`` sequences. ``seq_len=None`` gives
    whole env columns (``L = T``, CleanRL ``ppo_atari_lstm``); ``seq_len=k`` cuts every episode
    segment into chunks of at most ``k`` steps (sequences never cross an env column *or* an
    episode boundary, as in sb3-contrib and R2D2), right-padded to ``k`` with zeros and
    ``mask = False``; ``recurrence_memory`` is the stored hidden state *before* the first step
    of each sequence.
  - :func:`trajectory_minibatches`: windows for Transformer agents
    (DecisionTransformerInterpretability's ``Memory.get_trajectory_minibatches``): the window of a
    *target* step holds the up to ``timesteps`` steps of its episode segment that end at the target,
    left-padded with zeros, ``mask = False`` and ``timesteps = 0`` on padding. Per epoch every step
    is the target of exactly one window; with ``prob_go_from_end = p`` each target is independently
    moved, with probability ``p``, to the last step of its segment (the original's oversampling of
    episode ends; exact once-per-epoch coverage then holds only for ``p = 0``).

Minibatch sizes: a size that does not divide the number of items raises :class:`ConfigError`
(we never drop or silently resize data); recurrent chunked sequences are split into
``num_minibatches`` groups whose sizes differ by at most one (their number depends on the
episode boundaries, so it cannot be required to divide).

Advantage normalization (``normalize=True``) uses :func:`rlstore.returns.normalize_advantages`
over the real (mask = True) entries of each minibatch; a minibatch with fewer than 2 real
entries is left unnormalized (its std is undefined), as SB3 does for length-1 minibatches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from rlstore._checks import check_count
from rlstore._trees import to_numpy, tree_map
from rlstore.errors import ConfigError, EmptyBufferError, SpecError
from rlstore.returns import normalize_advantages
from rlstore.returns._io import check_flags
from rlstore.rollout_records import Hidden as Hidden
from rlstore.rollout_records import Minibatch, RolloutBatch, TrajectoryMinibatch
from rlstore.rollout_records import Obs as Obs
from rlstore.rollout_records import TimeMajor as TimeMajor

__all__ = [
    "Minibatch",
    "TrajectoryMinibatch",
    "RolloutBatch",
    "flat_minibatches",
    "recurrent_minibatches",
    "trajectory_minibatches",
    "sequence_plan",
    "segment_bounds",
    "resolve_minibatch_size",
    "flat_index_plan",
    "column_index_plan",
]

RNG = np.random.Generator | torch.Generator


# ----------------------------------------------------------------------------- helpers


def _permutation(n: int, rng: RNG | None, shuffle: bool = True) -> np.ndarray:
    """A permutation of ``range(n)`` drawn from ``rng`` (identity when ``shuffle`` is False)."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    if isinstance(rng, torch.Generator):
        return torch.randperm(n, generator=rng).numpy().astype(np.int64)
    gen = rng if rng is not None else np.random.default_rng()
    return gen.permutation(n).astype(np.int64)


def _uniform(n: int, rng: RNG | None) -> np.ndarray:
    """``n`` draws from U[0, 1) from ``rng``."""
    if isinstance(rng, torch.Generator):
        return torch.rand(n, generator=rng, dtype=torch.float64).numpy()
    gen = rng if rng is not None else np.random.default_rng()
    return gen.random(n)


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``(T, N, ...) -> (T * N, ...)`` time-major (a view when contiguous)."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _map_hidden(fn: Callable[..., torch.Tensor], hidden: Hidden | None) -> Hidden | None:
    """:func:`~rlstore._trees.tree_map` over a recurrent state, None (no state) kept."""
    return None if hidden is None else tree_map(fn, hidden)


def _gather(x: torch.Tensor, flat_idx: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``x`` ``(T, N, *s)`` gathered at ``flat_idx`` (any shape, -1 = padding) -> ``(*idx, *s)``.

    Padding positions (``mask`` False) are filled with zeros of ``x``'s dtype.
    """
    src = _flat(x)
    out = src[flat_idx.clamp(min=0)]
    if mask is not None:
        m = mask.reshape(*mask.shape, *([1] * (out.dim() - mask.dim())))
        out = torch.where(m, out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out


def _normalize(adv: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Normalize over the real entries; fewer than 2 real entries: returned unchanged."""
    count = adv.numel() if mask is None else int(mask.sum())
    if count < 2:
        return adv
    out = normalize_advantages(adv, mask=mask)
    if mask is not None:
        out = torch.where(mask, out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out


def _divisors_near(n: int, k: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    below = max((d for d in divs if d <= k), default=1)
    above = min((d for d in divs if d >= k), default=n)
    return f"{below}" if below == above else f"{below} or {above}"


def resolve_minibatch_size(
    total: int, *, num_minibatches: int | None, mini_batch_size: int | None, what: str = "steps"
) -> int:
    """Minibatch size for ``total`` items from ``num_minibatches`` *or* ``mini_batch_size``.

    Neither given: one minibatch of everything. Both given: they must agree
    (``num_minibatches * mini_batch_size == total``). A size that does not divide ``total``
    raises :class:`ConfigError` naming the nearest divisors.
    """
    num_minibatches = _positive_int("num_minibatches", num_minibatches, allow_none=True)
    mini_batch_size = _positive_int("mini_batch_size", mini_batch_size, allow_none=True)
    if total < 1:
        raise EmptyBufferError(f"rollout: expected at least one stored step, got {total} {what}")
    if num_minibatches is not None and mini_batch_size is not None:
        if num_minibatches * mini_batch_size != total:
            raise ConfigError(
                f"num_minibatches={num_minibatches} and mini_batch_size={mini_batch_size} "
                f"conflict: their product must equal the {total} {what}; give only one"
            )
        return mini_batch_size
    if num_minibatches is not None:
        if num_minibatches > total or total % num_minibatches:
            raise ConfigError(
                f"num_minibatches: expected a divisor of the {total} {what}, got "
                f"{num_minibatches} (nearest: {_divisors_near(total, num_minibatches)})"
            )
        return total // num_minibatches
    if mini_batch_size is not None:
        if mini_batch_size > total or total % mini_batch_size:
            raise ConfigError(
                f"mini_batch_size: expected a divisor of the {total} {what}, got "
                f"{mini_batch_size} (nearest: {_divisors_near(total, mini_batch_size)})"
            )
        return mini_batch_size
    return total


def _positive_int(name: str, value: Any, *, allow_none: bool = False) -> Any:
    """``value`` as an int >= 1 (:func:`~rlstore._checks.check_count`; ConfigError)."""
    return None if value is None and allow_none else check_count(name, value, error=ConfigError)


def _check_epochs(num_epochs: int) -> None:
    _positive_int("num_epochs", num_epochs)


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name}: expected a bool, got {value!r}")


def _require_returns(batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    if batch.advantages is None or batch.returns is None:
        raise EmptyBufferError(
            "advantages: not computed yet; call compute_returns(last_value) or "
            "compute_vtrace(...) before drawing minibatches"
        )
    return batch.advantages, batch.returns


def segment_bounds(dones: Any) -> tuple[np.ndarray, np.ndarray]:
    """First and last time index of the episode segment of every step.

    Args:
        dones: ``(T, N)`` bool (or 0/1 numbers, an array or a tensor on any device), ``T >= 1``:
            ``terminated | truncated`` (transition-aligned).

    Returns:
        ``(start, end)``, both ``(T, N)`` int64: ``start[t, n] <= t <= end[t, n]`` and no step in
        ``start..end`` other than ``end`` is done.

    Raises:
        SpecError: ``dones`` is not a ``(T, N)`` array of flags with ``T >= 1``.
    """
    dones = to_numpy("dones", dones)
    if dones.ndim != 2 or not dones.shape[0]:
        raise SpecError(f"dones: expected shape (T, N) with T >= 1, got {dones.shape}")
    dones = check_flags("dones", dones)  # not 0.5 -> True
    T, N = dones.shape
    t_idx = np.broadcast_to(np.arange(T, dtype=np.int64)[:, None], (T, N))
    starts = np.zeros((T, N), dtype=bool)
    starts[0] = True
    starts[1:] = dones[:-1]
    start = np.maximum.accumulate(np.where(starts, t_idx, 0), axis=0)
    ends = dones.copy()
    ends[-1] = True
    end_rev = np.minimum.accumulate(np.where(ends, t_idx, T)[::-1], axis=0)
    return start, end_rev[::-1].copy()


def sequence_plan(dones: Any, seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut every episode segment of every env column into chunks of at most ``seq_len`` steps.

    Args:
        dones: ``(T, N)`` flags, as :func:`segment_bounds` takes them.
        seq_len: maximum chunk length, an int >= 1 (:class:`ConfigError` otherwise).

    Returns:
        ``(t0, env, length)``, each ``(S,)`` int64, ordered by env then time: chunk ``s`` covers
        steps ``t0[s] .. t0[s] + length[s] - 1`` of column ``env[s]``.
    """
    seq_len = _positive_int("seq_len", seq_len)  # 0 made empty chunks, 2.5 fractional ones
    start, end = segment_bounds(dones)
    T, N = start.shape
    # a chunk starts at each segment start and every seq_len steps after it
    t_idx = np.arange(T, dtype=np.int64)[:, None]
    is_chunk_start = ((t_idx - start) % seq_len) == 0
    env_ids, t0 = np.nonzero(is_chunk_start.T)
    t0 = t0.astype(np.int64)
    env_ids = env_ids.astype(np.int64)
    seg_end = end[t0, env_ids]
    length = np.minimum(seg_end - t0 + 1, seq_len).astype(np.int64)
    return t0, env_ids, length


# ----------------------------------------------------------------------------- generators


def flat_index_plan(
    total: int,
    *,
    num_minibatches: int | None = None,
    mini_batch_size: int | None = None,
    num_epochs: int = 1,
    shuffle: bool = True,
    rng: RNG | None = None,
    device: str | torch.device = "cpu",
) -> Iterator[torch.Tensor]:
    """The index plan of :func:`flat_minibatches`: per minibatch a 1-D tensor of flat indices.

    For storages that gather their own rows (the PyTorchRL facade); ``total`` is ``T * N`` and
    the indices are ``t * N + n``. The same ``rng`` draws as :func:`flat_minibatches`.
    """
    _check_epochs(num_epochs)
    _check_flag("shuffle", shuffle)
    size = resolve_minibatch_size(
        check_count("total", total, minimum=0, error=ConfigError),
        num_minibatches=num_minibatches,
        mini_batch_size=mini_batch_size,
    )
    for _ in range(num_epochs):
        perm = _permutation(total, rng, shuffle)
        for k in range(0, total, size):
            yield torch.as_tensor(perm[k : k + size], device=device)


def column_index_plan(
    num_steps: int,
    num_envs: int,
    *,
    num_minibatches: int,
    num_epochs: int = 1,
    shuffle: bool = True,
    rng: RNG | None = None,
    device: str | torch.device = "cpu",
) -> Iterator[torch.Tensor]:
    """The plan of :func:`recurrent_minibatches` with ``seq_len=None``: ``(T, E)`` flat indices.

    Each minibatch holds ``E = num_envs // num_minibatches`` whole env columns, time-major.
    """
    _check_epochs(num_epochs)
    _check_flag("shuffle", shuffle)
    num_steps = _positive_int("num_steps", num_steps)  # 2.5 made float indices
    per = resolve_minibatch_size(
        check_count("num_envs", num_envs, minimum=0, error=ConfigError),
        num_minibatches=num_minibatches,
        mini_batch_size=None,
        what="env columns",
    )
    cols = torch.arange(num_steps, device=device)[:, None] * num_envs
    for _ in range(num_epochs):
        perm = _permutation(num_envs, rng, shuffle)
        for k in range(0, num_envs, per):
            yield cols + torch.as_tensor(perm[k : k + per], device=device)[None, :]


def flat_minibatches(
    batch: RolloutBatch,
    *,
    num_minibatches: int | None = None,
    mini_batch_size: int | None = None,
    num_epochs: int = 1,
    shuffle: bool = True,
    normalize: bool = False,
    rng: RNG | None = None,
) -> Iterator[Minibatch]:
    """Shuffled flat minibatches: each of the ``T * N`` steps exactly once per epoch.

    Example (``batch`` from ``RolloutBuffer.get()`` after ``compute_returns``)::

        for mb in flat_minibatches(batch, num_minibatches=4, num_epochs=2, rng=rng):
            loss = ppo_loss(mb.obs, mb.actions, mb.logprobs, mb.advantages, mb.returns)
    """
    advantages, returns = _require_returns(batch)
    total = batch.num_steps * batch.num_envs
    plan = flat_index_plan(
        total,
        num_minibatches=num_minibatches,
        mini_batch_size=mini_batch_size,
        num_epochs=num_epochs,
        shuffle=shuffle,
        rng=rng,
        device=batch.rewards.device,
    )
    for idx in plan:
        adv = _flat(advantages)[idx]
        yield Minibatch(
            obs=tree_map(lambda x, i=idx: _flat(x)[i], batch.obs),
            actions=_flat(batch.actions)[idx],
            logprobs=_flat(batch.logprobs)[idx],
            advantages=_normalize(adv, None) if normalize else adv,
            values=_flat(batch.values)[idx],
            returns=_flat(returns)[idx],
            recurrence_memory=_map_hidden(lambda h, i=idx: _flat(h)[i], batch.hidden),
            int_values=None if batch.int_values is None else _flat(batch.int_values)[idx],
            int_returns=None if batch.int_returns is None else _flat(batch.int_returns)[idx],
            indices=idx,
        )


def _sequence_minibatch(
    batch: RolloutBatch, flat_idx: torch.Tensor, mask: torch.Tensor, normalize: bool
) -> Minibatch:
    """Gather ``(L, B)`` flat indices (-1 = padding) into a time-major :class:`Minibatch`."""
    advantages, returns = _require_returns(batch)
    adv = _gather(advantages, flat_idx, mask)
    first = flat_idx[0]  # sequences start at row 0 and are never empty
    episode_starts = _gather(batch.episode_time == 0, flat_idx, mask)
    return Minibatch(
        obs=tree_map(lambda x: _gather(x, flat_idx, mask), batch.obs),
        actions=_gather(batch.actions, flat_idx, mask),
        logprobs=_gather(batch.logprobs, flat_idx, mask),
        advantages=_normalize(adv, mask) if normalize else adv,
        values=_gather(batch.values, flat_idx, mask),
        returns=_gather(returns, flat_idx, mask),
        recurrence_memory=_map_hidden(lambda h: _flat(h)[first], batch.hidden),
        mask=mask,
        episode_starts=episode_starts,
        int_values=None if batch.int_values is None else _gather(batch.int_values, flat_idx, mask),
        int_returns=None
        if batch.int_returns is None
        else _gather(batch.int_returns, flat_idx, mask),
        indices=torch.where(mask, flat_idx, torch.full_like(flat_idx, -1)),
    )


def recurrent_minibatches(
    batch: RolloutBatch,
    *,
    num_minibatches: int,
    num_epochs: int = 1,
    seq_len: int | None = None,
    shuffle: bool = True,
    normalize: bool = False,
    rng: RNG | None = None,
) -> Iterator[Minibatch]:
    """Time-major sequence minibatches for recurrent agents (see the module docstring).

    ``seq_len=None``: each minibatch holds ``N // num_minibatches`` whole env columns
    (``num_minibatches`` must divide N); ``mask`` is all True and ``episode_starts`` marks the
    in-sequence resets. ``seq_len=k``: chunks of at most ``k`` steps inside episode segments,
    shuffled and split into ``num_minibatches`` groups (sizes differ by at most one).
    """
    _check_epochs(num_epochs)
    _check_flag("shuffle", shuffle)
    _require_returns(batch)
    T, N = batch.num_steps, batch.num_envs
    device = batch.rewards.device
    if seq_len is None:
        plan = column_index_plan(
            T, N, num_minibatches=num_minibatches, num_epochs=num_epochs, shuffle=shuffle, rng=rng,
            device=device,
        )  # fmt: skip
        for flat_idx in plan:
            mask = torch.ones(flat_idx.shape, dtype=torch.bool, device=device)
            yield _sequence_minibatch(batch, flat_idx, mask, normalize)
        return
    num_minibatches = _positive_int("num_minibatches", num_minibatches)
    t0, env, length = sequence_plan(batch.dones, seq_len)
    S = len(t0)
    if num_minibatches > S:
        raise ConfigError(
            f"num_minibatches: expected at most the {S} sequences of seq_len={seq_len} in this "
            f"rollout, got {num_minibatches}"
        )
    offs = np.arange(seq_len, dtype=np.int64)[:, None]
    all_idx = (t0[None, :] + offs) * N + env[None, :]  # (L, S)
    all_mask = offs < length[None, :]
    for _ in range(num_epochs):
        perm = _permutation(S, rng, shuffle)
        for group in np.array_split(perm, num_minibatches):
            mask = torch.as_tensor(all_mask[:, group], device=device)
            flat_idx = torch.as_tensor(all_idx[:, group], device=device)
            flat_idx = torch.where(mask, flat_idx, torch.full_like(flat_idx, -1))
            yield _sequence_minibatch(batch, flat_idx, mask, normalize)


def trajectory_minibatches(
    batch: RolloutBatch,
    *,
    timesteps: int,
    mini_batch_size: int,
    num_epochs: int = 1,
    prob_go_from_end: float = 0.0,
    normalize: bool = False,
    rng: RNG | None = None,
) -> Iterator[TrajectoryMinibatch]:
    """Left-padded windows of past steps ending at shuffled target steps (module docstring).

    ``mini_batch_size`` must divide ``T * N``; each epoch yields ``T * N / mini_batch_size``
    minibatches. ``timesteps`` is the window length W >= 1.
    """
    advantages, returns = _require_returns(batch)
    _check_epochs(num_epochs)
    timesteps = _positive_int("timesteps", timesteps)
    p_ok = isinstance(prob_go_from_end, (int, float, np.integer, np.floating))
    if isinstance(prob_go_from_end, bool) or not p_ok or not 0.0 <= prob_go_from_end <= 1.0:
        raise ConfigError(
            f"prob_go_from_end: expected a probability in [0, 1], got {prob_go_from_end!r}"
        )
    T, N = batch.num_steps, batch.num_envs
    total = T * N
    size = resolve_minibatch_size(total, num_minibatches=None, mini_batch_size=mini_batch_size)
    start, end = segment_bounds(batch.dones)
    flat_start, flat_end = start.reshape(-1), end.reshape(-1)
    device = batch.rewards.device
    offs = np.arange(timesteps, dtype=np.int64) - (timesteps - 1)  # (W,): -(W-1) .. 0
    for _ in range(num_epochs):
        targets = _permutation(total, rng, True)
        if prob_go_from_end > 0.0:
            go_end = _uniform(total, rng) < prob_go_from_end
            env_of = targets % N
            targets = np.where(go_end, flat_end[targets] * N + env_of, targets)
        for k in range(0, total, size):
            tgt = targets[k : k + size]
            t_tgt, n_tgt = tgt // N, tgt % N
            times = t_tgt[:, None] + offs[None, :]  # (B, W)
            mask_np = times >= flat_start[tgt][:, None]
            flat_idx_np = np.where(mask_np, times * N + n_tgt[:, None], -1)
            mask = torch.as_tensor(mask_np, device=device)
            flat_idx = torch.as_tensor(flat_idx_np, device=device)
            idx = torch.as_tensor(tgt, device=device)
            adv = _flat(advantages)[idx]
            yield TrajectoryMinibatch(
                obs=tree_map(lambda x, i=flat_idx, m=mask: _gather(x, i, m), batch.obs),
                actions=_gather(batch.actions, flat_idx, mask),
                logprobs=_flat(batch.logprobs)[idx],
                advantages=_normalize(adv, None) if normalize else adv,
                values=_flat(batch.values)[idx],
                returns=_flat(returns)[idx],
                timesteps=_gather(batch.episode_time, flat_idx, mask),
                rewards=_gather(batch.rewards, flat_idx, mask),
                mask=mask,
                indices=idx,
                int_values=None if batch.int_values is None else _flat(batch.int_values)[idx],
                int_returns=None if batch.int_returns is None else _flat(batch.int_returns)[idx],
            )
