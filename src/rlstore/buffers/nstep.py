"""N-step replay: n-step returns computed at sample time from any one-step replay buffer.

:class:`NStepReplay` reads a buffer only through its public API (``len``, ``num_envs``,
``sample_ids``, ``first_id``, ``gather``), so it works with any index source: the buffer's own
sampler through :meth:`NStepReplay.sample` (uniform, or prioritized with importance weights and
ids for ``buffer.update_priorities``), or any indices passed to :meth:`NStepReplay.batch`.

For a transition at logical row ``r`` of env column ``e`` the window is rows ``r .. r+n-1`` of
the same column. It is cut after ``m <= n`` steps, at the first of:

* an episode end: ``terminated`` or ``truncated`` at row ``r+m-1``;
* a discontinuous stream: ``next_obs`` of row ``r+m-1`` differs from ``obs`` of row ``r+m``
  (transitions added independently, not as a continuous stream), compared as the buffer does;
* the newest stored row (the write head): nothing past it is read;
* ``m = n``.

Then (``G`` is ``reward`` of the batch)::

    G        = sum_{k<m} gamma**k * reward[r+k]
    discount = gamma**m * (1 - terminated[r+m-1])      # 0 when the episode terminated
    next_obs = next_obs[r+m-1]                          # the final observation after a truncation

so the target is ``G + discount * V(next_obs)``. Termination gives no bootstrap; truncation (and a
cut at the head or at ``n``) bootstraps from the true successor with ``gamma**m``. This is
``returns.nstep`` with ``next_values = V(next_obs)`` (tested equal); the buffer-side work is
choosing the window, which is why it lives here.

Example:
    >>> import numpy as np
    >>> from rlstore import ReplayBuffer
    >>> buf = ReplayBuffer(100, seed=0)
    >>> for t in range(4):
    ...     buf.add(np.full(2, 1.0 * t), 0, 1.0, np.full(2, t + 1.0), t == 3, False)
    >>> b = NStepReplay(buf, n=3, gamma=0.5).batch(np.array([0, 2]))
    >>> b.reward.tolist(), b.discount.tolist(), b.next_obs[:, 0].tolist()
    ([1.75, 1.5], [0.125, 0.0], [3.0, 4.0])
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np
import torch

from rlstore._checks import check_count, real_number
from rlstore.buffers._replay_write import row_words
from rlstore.errors import ConfigError, EmptyBufferError, SpecError
from rlstore.samplers.uniform import check_ids

__all__ = ["NStepBatch", "NStepReplay"]


class NStepBatch(NamedTuple):
    """``B`` n-step transitions as torch tensors on the buffer's device.

    Attributes:
        obs: ``(B, *obs_shape)`` (or a dict of them) at the window's first row.
        action: ``(B, *action_shape)`` at the first row.
        reward: ``(B,)`` float32 (float64 if rewards are stored as float64): ``G``.
        next_obs: the observation to bootstrap from (see the module docstring).
        discount: ``(B,)`` same dtype as ``reward``: ``gamma**m``, 0 after a termination.
        terminated: ``(B,)`` bool: the window ended with a termination.
        truncated: ``(B,)`` bool: the window ended with a truncation.
        steps: ``(B,)`` int64: ``m``, the transitions summed (``1 <= m <= n``).
        extras: ``{name: (B, *shape)}`` extra fields at the first row.
        indices: ``(B,)`` int64 ids of the first rows (``ReplayBuffer.sample`` ids: pass them
            to ``buffer.update_priorities``).
        weights: ``(B,)`` float32 importance weights (ones unless the buffer's sampler is
            prioritized).
    """

    obs: torch.Tensor | dict[str, torch.Tensor]
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor | dict[str, torch.Tensor]
    discount: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    steps: torch.Tensor
    extras: dict[str, torch.Tensor]
    indices: torch.Tensor
    weights: torch.Tensor


class Fields(NamedTuple):
    """The names in a gathered batch: observations (``obs`` or ``obs.<key>``), their
    ``next_`` twins, and extras (neither observations nor the core fields)."""

    obs: tuple[str, ...]
    next: tuple[str, ...]
    extras: tuple[str, ...]


@functools.lru_cache(maxsize=64)
def fields(keys: tuple[str, ...]) -> Fields:
    """:class:`Fields` of the gathered field names ``keys`` (cached: one schema per buffer)."""
    obs = tuple(k for k in keys if k == "obs" or k.startswith("obs."))
    nxt = tuple("next_" + k for k in obs)
    core = {"action", "reward", "terminated", "truncated", *obs, *nxt}
    return Fields(obs, nxt, tuple(k for k in keys if k not in core))


def episode_ends(
    arrays: dict[str, np.ndarray], shape: tuple[int, int], obs: tuple[str, ...]
) -> np.ndarray:
    """``(B, W)`` bool: step ``k`` of each window ends its episode (terminated, truncated, or the
    next step's ``obs`` does not continue this step's ``next_obs`` byte for byte, as the
    buffer's write path compares: ``-0.0`` does not continue ``0.0``, a NaN continues itself;
    the last step only by its flags). ``arrays`` are gathered windows flattened to ``B * W``
    rows; ``obs`` their observation fields."""
    ends = (arrays["terminated"] | arrays["truncated"]).reshape(shape)
    for k in obs:
        now, nxt = (row_words(arrays[j].reshape(*shape, *arrays[j].shape[1:]), shape)
                    for j in (k, "next_" + k))  # fmt: skip
        _kernels().mark_jumps(now, nxt, ends)
    return ends


_KERNELS: Any = None


def _kernels() -> Any:
    """The compiled window loops, imported on first use (numba is slow to import)."""
    global _KERNELS
    if _KERNELS is None:
        from rlstore.buffers import _windows

        _KERNELS = _windows
    return _KERNELS


def to_torch(arrays: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """Numpy arrays as tensors on ``device`` (zero-copy on the CPU)."""
    if device.type == "cpu":
        return {k: torch.from_numpy(v) for k, v in arrays.items()}
    return {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in arrays.items()}


def split_obs(
    t: dict[str, torch.Tensor], names: tuple[str, ...]
) -> torch.Tensor | dict[str, torch.Tensor]:
    """``t[name]`` for a single observation field, or ``{key: t[name]}`` for dict observations
    (``names``: ``obs.<key>`` or ``next_obs.<key>``)."""
    if len(names) == 1 and "." not in names[0]:
        return t[names[0]]
    return {k.split(".", 1)[1]: t[k] for k in names}


class NStepReplay:
    """n-step transitions from a one-step replay buffer (see the module docstring).

    Args:
        buffer: a :class:`~rlstore.ReplayBuffer` (anything with its public reading API).
        n: window length, an int ``>= 1`` (``n = 1`` gives the buffer's own transitions with
            ``discount = gamma * (1 - terminated)``).
        gamma: discount in ``[0, 1]``.

    Raises:
        ConfigError: ``n`` or ``gamma`` out of range or of the wrong type.
    """

    def __init__(self, buffer: Any, n: int, gamma: float):
        self.n = check_count("n", n, error=ConfigError)
        self.gamma = real_number("gamma", gamma, 0.0, 1.0)
        self.buffer = buffer
        self._powers = self.gamma ** np.arange(self.n + 1, dtype=np.float64)
        self._device = torch.device(getattr(buffer, "device", "cpu"))

    def sample(self, batch_size: int, beta: float | None = None) -> NStepBatch:
        """First rows drawn by the buffer's own sampler (uniform or prioritized, with its
        importance weights; ``beta`` as for ``ReplayBuffer.sample``), then :meth:`batch`."""
        drawn = self.buffer.sample_ids(batch_size, beta)
        return self._batch(drawn.indices - self.buffer.first_id, drawn.weights)

    def batch(self, indices: Any) -> NStepBatch:
        """The n-step transitions starting at flat buffer ``indices`` (``row * num_envs + env``).

        Raises:
            EmptyBufferError: the buffer is empty.
            SpecError: ``indices`` not a 1-D integer array within ``[0, len(buffer))``.
        """
        size = len(self.buffer)
        if size == 0:
            raise EmptyBufferError("indices: the buffer holds no transition yet (add first)")
        return self._batch(check_ids("indices", indices, size))

    def _batch(self, idx: np.ndarray, weights: np.ndarray | None = None) -> NStepBatch:
        buf, n = self.buffer, self.n
        envs, b, kern = buf.num_envs, len(idx), _kernels()
        flat, avail = kern.window_indices(idx, envs, len(buf) // envs, n)  # clamped at the head
        a = buf.gather(flat)
        if a["reward"].ndim != 1:
            raise SpecError(f"reward: expected scalar rewards, got shape {a['reward'].shape[1:]}")
        f = fields(tuple(a))
        ends = episode_ends(a, (b, n), f.obs)
        reward = a["reward"].reshape(b, n)
        dtype = reward.dtype if reward.dtype == np.float64 else np.dtype(np.float32)
        if reward.dtype.kind == "f" and reward.dtype.itemsize < 4:
            reward = reward.astype(np.float32)  # numba computes in float32/64 (exact)
        g, disc = np.empty(b, dtype), np.empty(b, dtype)
        flags = (a["terminated"].reshape(b, n), a["truncated"].reshape(b, n))
        steps, pick, term, trunc = kern.nstep_sums(
            reward, ends, *flags, avail, self._powers, g, disc
        )
        out = {k: a[k][::n] for k in (*f.obs, "action")}
        for k in f.next:
            out[k] = a[k][pick]
        t = to_torch(out, self._device)
        c = to_torch(  # computed apart from the stored fields: an extra may be named "discount"
            {"reward": g, "discount": disc, "terminated": term, "truncated": trunc,
             "steps": steps, "indices": idx + buf.first_id,
             "weights": np.ones(b, np.float32) if weights is None else weights},
            self._device,
        )  # fmt: skip
        return NStepBatch(
            split_obs(t, f.obs),
            t["action"],
            c["reward"],
            split_obs(t, f.next),
            c["discount"],
            c["terminated"],
            c["truncated"],
            c["steps"],
            to_torch({k: a[k][::n] for k in f.extras}, self._device),
            c["indices"],
            c["weights"],
        )
