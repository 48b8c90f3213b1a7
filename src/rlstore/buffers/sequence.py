"""Sequence replay (R2D2, Kapturowski et al. 2019) over a one-step replay buffer.

:class:`SequenceReplay` reads a buffer only through its public API and draws fixed windows of
``burn_in + length`` consecutive rows of one env column:

* **Grid.** In each episode, windows start at steps ``0, stride, 2 * stride, ...`` with
  ``stride = burn_in + length - overlap``: ``overlap`` is the number of rows two consecutive
  windows of an episode share (``0 <= overlap < burn_in + length``). The paper's setting,
  length-80 sequences overlapping by 40: ``length=80, overlap=40`` (stride 40); with a 40-step
  burn-in in front and the same 40-step period: ``burn_in=40, length=80, overlap=80``.
* **Episode ends.** A window may run past its episode's end (terminated, truncated, or a
  discontinuous stream): ``mask`` is 1 up to and including the last step of the episode and 0
  from the step after onward (those rows belong to another episode: ignore them).
* **Ring.** Windows never cross the write head or an env column and never start in rows the
  ring has dropped; a window is drawn only once all its rows are stored.
* **Recurrent state.** ``hidden`` is the stored extra field (named by the user) at the
  window's first row: the actor's state fed into that step.
* **Priorities** (optional, ``alpha > 0``): ``p = eta * max_t |td_t| + (1 - eta) * mean_t |td_t|``
  over a sequence's masked steps, through :class:`~rlstore.samplers.PrioritizedSampler`;
  R2D2 uses ``alpha = 0.9, eta = 0.9`` and no importance weights (``beta = 0``).

Train on ``mask[:, burn_in:]``; the first ``burn_in`` steps only warm up the recurrent state.

Example:
    >>> import numpy as np
    >>> from rlstore import ReplayBuffer
    >>> buf = ReplayBuffer(100, num_envs=2, seed=0)
    >>> for t in range(6):
    ...     obs, done = np.full((2, 3), float(t)), np.array([t == 2, False])
    ...     buf.add(obs, np.zeros(2, np.int64), np.ones(2, np.float32), obs + 1, done,
    ...             np.zeros(2, bool), hidden=np.full((2, 4), t, np.float32))
    >>> seq = SequenceReplay(buf, length=2, burn_in=1, overlap=1, seed=0)  # stride 2
    >>> b = seq.sample(16)
    >>> tuple(b.obs.shape), tuple(b.mask.shape), tuple(b.hidden.shape)
    ((16, 3, 3), (16, 3), (16, 4))
    >>> sorted({(i // 2, i % 2) for i in b.ids.tolist()})  # (start row, env); env 0 restarts at 3
    [(0, 0), (0, 1), (2, 0), (2, 1), (3, 0)]
    >>> b.mask[b.ids == 2 * 2 + 0].tolist()[0]  # env 0 from row 2: its episode ends there
    [True, False, False]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from rlstore._checks import check_count, real_number
from rlstore._trees import real_array, to_numpy
from rlstore.buffers.nstep import episode_ends, fields, split_obs, to_torch
from rlstore.errors import CapacityError, CheckpointError, ConfigError, SpecError
from rlstore.samplers.prioritized import check_beta
from rlstore.samplers.sequence import SequenceSampler
from rlstore.samplers.uniform import check_ids

__all__ = ["SequenceBatch", "SequenceReplay"]


class SequenceBatch(NamedTuple):
    """``B`` windows of ``L = burn_in + length`` steps, batch-major torch tensors.

    Attributes:
        obs, action, reward, next_obs, terminated, truncated: ``(B, L, ...)`` as stored.
        mask: ``(B, L)`` bool: the step belongs to the window's first episode.
        hidden: ``(B, *hidden_shape)``: the stored recurrent state at each window's first step
            (``None`` when ``hidden=None``).
        extras: ``{name: (B, L, ...)}`` the other extra fields.
        ids: ``(B,)`` int64 sequence ids for :meth:`SequenceReplay.update_priorities`.
        weights: ``(B,)`` float32 importance weights (all 1 when ``alpha = 0`` or ``beta = 0``).
    """

    obs: torch.Tensor | dict[str, torch.Tensor]
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor | dict[str, torch.Tensor]
    terminated: torch.Tensor
    truncated: torch.Tensor
    mask: torch.Tensor
    hidden: torch.Tensor | None
    extras: dict[str, torch.Tensor]
    ids: torch.Tensor
    weights: torch.Tensor


class SequenceReplay:
    """Fixed-length sequences with burn-in and overlap from a replay buffer (module docstring).

    Args:
        buffer: a :class:`~rlstore.ReplayBuffer` (anything with its public reading API).
        length: training steps per sequence (int >= 1).
        burn_in: warm-up steps in front (int >= 0).
        overlap: rows shared by consecutive windows of an episode, ``[0, burn_in + length)``.
        hidden: name of the extra field holding the recurrent state, or ``None``.
        alpha: priority exponent (0: uniform over live sequences).
        beta: importance exponent of the weights (0: unit weights).
        eta: mix of max and mean TD error in a sequence's priority, in ``[0, 1]``.
        seed: ``int``, ``np.random.Generator`` or ``None``.

    Raises:
        ConfigError: an argument out of range or of the wrong type.
        CapacityError: ``burn_in + length`` exceeds the buffer's ``capacity_per_env``.
    """

    def __init__(
        self,
        buffer: Any,
        length: int,
        *,
        burn_in: int = 0,
        overlap: int = 0,
        hidden: str | None = "hidden",
        alpha: float = 0.0,
        beta: float = 0.0,
        eta: float = 0.9,
        seed: int | np.random.Generator | None = None,
    ):
        length = check_count("length", length, error=ConfigError)
        self.burn_in = check_count("burn_in", burn_in, minimum=0, error=ConfigError)
        self.window = self.burn_in + length
        if check_count("overlap", overlap, minimum=0, error=ConfigError) >= self.window:
            raise ConfigError(
                f"overlap: expected an int in [0, burn_in + length) = [0, {self.window}), "
                f"got {overlap!r}"
            )
        if hidden is not None and not isinstance(hidden, str):
            raise ConfigError(f"hidden: expected a field name or None, got {hidden!r}")
        self.length, self.overlap, self.hidden = length, int(overlap), hidden
        self.eta = real_number("eta", eta, 0.0, 1.0)
        cap = buffer.capacity_per_env
        if self.window > cap:
            raise CapacityError(
                f"length: expected burn_in + length <= the buffer's capacity_per_env={cap}, "
                f"got {self.burn_in} + {length} = {self.window}"
            )
        self.sampler = SequenceSampler(
            cap, buffer.num_envs, self.window, self.window - self.overlap,
            alpha=alpha, beta=beta, seed=seed,
        )  # fmt: skip
        self.buffer = buffer

    def __len__(self) -> int:
        """Live (drawable) sequences, as of the last sample."""
        return len(self.sampler)

    def _sync(self) -> None:
        """Show the sampler the rows written since the last call (their episode starts)."""
        buf, s = self.buffer, self.sampler
        hi = int(buf.metadata()["rows_written"])
        if hi < s.hi:
            raise CheckpointError(
                f"buffer: rows_written went back from {s.hi} to {hi} (restored?); load the "
                "SequenceReplay state saved with the buffer's"
            )
        lo, n = hi - len(buf) // buf.num_envs, buf.num_envs
        first = max(s.hi, lo)
        if first == hi:
            return
        read = max(first - 1, lo)  # one row back: does row `first` continue it?
        rows = np.arange(read, hi) - lo
        a = buf.gather((rows[None, :] * n + np.arange(n)[:, None]).ravel())
        ends = episode_ends(a, (n, len(rows)), fields(tuple(a)).obs).T
        starts = ends[:-1] if read < first else np.vstack([np.ones((1, n), bool), ends[:-1]])
        s.observe(first, starts)

    def sample(self, batch_size: int, beta: float | None = None) -> SequenceBatch:
        """Draw ``batch_size`` sequences (with replacement; by priority when ``alpha > 0``).

        Raises:
            EmptyBufferError: no complete window of ``burn_in + length`` rows stored yet.
            SpecError: the buffer has no extra field named ``hidden``.
        """
        buf, n, w = self.buffer, self.buffer.num_envs, self.window
        specs = getattr(buf, "specs", None) or {}
        if self.hidden is not None and specs and self.hidden not in specs:
            raise SpecError(
                f"hidden: expected an extra field {self.hidden!r} in the buffer, got fields "
                f"{sorted(specs)}"
            )
        check_count("batch_size", batch_size)  # checked before _sync changes anything
        if beta is not None:
            check_beta(beta)
        self._sync()
        ids, weights = self.sampler.sample(batch_size, beta)
        g, env = np.divmod(ids, n)
        lo = self.sampler.lo
        a = buf.gather((((g - lo)[:, None] + np.arange(w)) * n + env[:, None]).ravel())
        b, f = len(ids), fields(tuple(a))
        ends = episode_ends(a, (b, w), f.obs)
        mask = np.ones((b, w), dtype=bool)
        mask[:, 1:] = np.cumsum(ends[:, :-1], axis=1) == 0
        dev = torch.device(getattr(buf, "device", "cpu"))
        t = to_torch({k: v.reshape(b, w, *v.shape[1:]) for k, v in a.items()}, dev)
        # computed apart from the stored fields: an extra may be named "mask" or "weights"
        c = to_torch({"mask": mask, "ids": ids, "weights": weights}, dev)
        return SequenceBatch(
            split_obs(t, f.obs), t["action"], t["reward"], split_obs(t, f.next),
            t["terminated"], t["truncated"], c["mask"],
            None if self.hidden is None else t[self.hidden][:, 0],
            {k: t[k] for k in f.extras if k != self.hidden}, c["ids"], c["weights"],
        )  # fmt: skip

    def update_priorities(self, ids: Any, td_errors: Any, mask: Any = None) -> None:
        """Set sequence priorities ``eta * max |td| + (1 - eta) * mean |td|`` over masked steps.

        Sequences dropped or overwritten since they were drawn are ignored.

        Args:
            ids: ``(B,)`` from :attr:`SequenceBatch.ids`.
            td_errors: ``(B, T)`` per-step TD errors (any ``T``, e.g. the ``length`` trained
                steps), finite real numbers.
            mask: ``(B, T)`` bool, or ``None`` for all steps; a row with no step gets 0.

        Raises:
            SpecError: wrong shapes or dtypes, non-finite errors; nothing changes.
        """
        idx = check_ids("ids", ids)
        td = np.abs(real_array("td_errors", td_errors).astype(np.float64))
        if td.ndim != 2 or td.shape[0] != idx.shape[0]:
            raise SpecError(f"td_errors: expected shape ({len(idx)}, T) like ids, got {td.shape}")
        m = np.ones(td.shape, bool) if mask is None else to_numpy("mask", mask)
        if m.shape != td.shape or m.dtype != bool:
            raise SpecError(
                f"mask: expected a bool array of shape {td.shape} like td_errors, got "
                f"{m.dtype} of shape {m.shape}"
            )
        count = m.sum(1)
        mean = np.where(m, td, 0.0).sum(1) / np.maximum(count, 1)
        top = np.where(m, td, 0.0).max(1, initial=0.0)
        priorities = self.eta * top + (1 - self.eta) * mean
        self.sampler.prio.check_storable(priorities)  # before _sync changes anything
        self._sync()
        self.sampler.update_priorities(idx, priorities)

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state (starts, priorities, RNG); save the buffer's state with it."""
        return self.sampler.state_dict()

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; with the buffer restored too, later draws equal
        the original's. Raises :class:`CheckpointError` on a bad state (nothing changes)."""
        self.sampler.load_state_dict(sd)
