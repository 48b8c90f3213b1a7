"""N-step replay: n-step returns computed at sample time from any one-step replay buffer.

:class:`NStepReplay` reads a buffer only through its public API (``len``, ``num_envs``,
``sample_indices``, ``gather``), so it works with any index source: uniform indices from
:meth:`NStepReplay.sample`, or indices drawn by a prioritized sampler passed to
:meth:`NStepReplay.batch`.

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

from typing import Any, NamedTuple

import numpy as np
import torch

from rlstore._checks import check_count, real_number
from rlstore.errors import ConfigError, SpecError

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
        indices: ``(B,)`` int64 flat buffer indices of the first rows (for priority updates).
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


_CORE = ("action", "reward", "terminated", "truncated")


def obs_names(arrays: dict[str, np.ndarray]) -> list[str]:
    """The observation fields of a gathered batch: ``obs`` or ``obs.<key>``."""
    return [k for k in arrays if k == "obs" or k.startswith("obs.")]


def episode_ends(arrays: dict[str, np.ndarray], shape: tuple[int, int]) -> np.ndarray:
    """``(B, W)`` bool: step ``k`` of each window ends its episode (terminated, truncated, or the
    next step's ``obs`` does not continue this step's ``next_obs``; the last step only by its
    flags). ``arrays`` are gathered windows flattened to ``B * W`` rows."""
    ends = (arrays["terminated"] | arrays["truncated"]).reshape(shape)
    for k in obs_names(arrays):
        obs, nxt = arrays[k].reshape(*shape, -1), arrays["next_" + k].reshape(*shape, -1)
        ends[:, :-1] |= (nxt[:, :-1] != obs[:, 1:]).any(-1)
    return ends


def extra_names(arrays: dict[str, np.ndarray]) -> list[str]:
    """The extra fields of a gathered batch (neither observations nor the core fields)."""
    obs = obs_names(arrays)
    nxt = ["next_" + k for k in obs]
    return [k for k in arrays if k not in _CORE and k not in obs and k not in nxt]


def to_torch(arrays: dict[str, np.ndarray], device: torch.device) -> dict[str, torch.Tensor]:
    """Numpy arrays as tensors on ``device`` (zero-copy on the CPU)."""
    if device.type == "cpu":
        return {k: torch.from_numpy(v) for k, v in arrays.items()}
    return {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in arrays.items()}


def split_obs(t: dict[str, torch.Tensor], prefix: str) -> torch.Tensor | dict[str, torch.Tensor]:
    """``t[prefix]``, or ``{key: t[prefix + "." + key]}`` for dict observations."""
    if prefix in t:
        return t[prefix]
    return {k[len(prefix) + 1 :]: v for k, v in t.items() if k.startswith(prefix + ".")}


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

    def sample(self, batch_size: int) -> NStepBatch:
        """Uniform first rows from the buffer's own sampler, then :meth:`batch`."""
        return self.batch(self.buffer.sample_indices(batch_size))

    def batch(self, indices: Any) -> NStepBatch:
        """The n-step transitions starting at flat buffer ``indices`` (``row * num_envs + env``).

        Raises:
            EmptyBufferError: the buffer is empty.
            SpecError: ``indices`` not a 1-D integer array within ``[0, len(buffer))``.
        """
        buf, n = self.buffer, self.n
        first = buf.gather(indices)  # checks the indices before anything else is read
        idx = np.asarray(indices, dtype=np.int64)
        envs, rows = buf.num_envs, len(buf) // buf.num_envs
        b = len(idx)
        row, col = np.divmod(idx, envs)
        win = np.minimum(row[:, None] + np.arange(n), rows - 1)  # clamp at the head, masked below
        a = buf.gather((win * envs + col[:, None]).ravel()) if n > 1 else first
        ends = episode_ends(a, (b, n))
        ends[:, -1] = True
        ends |= win == rows - 1  # the newest row: cut there, bootstrap from its next_obs
        last = ends.argmax(1)  # m - 1
        live = np.arange(n) <= last[:, None]
        if a["reward"].ndim != 1:
            raise SpecError(f"reward: expected scalar rewards, got shape {a['reward'].shape[1:]}")
        reward = a["reward"].reshape(b, n)
        dtype = reward.dtype if reward.dtype == np.float64 else np.dtype(np.float32)
        g = np.where(live, reward * self._powers[:n], 0.0).sum(1).astype(dtype)
        pick = np.arange(b) * n + last
        term, trunc = a["terminated"][pick], a["truncated"][pick]
        disc = np.where(term, 0.0, self._powers[last + 1]).astype(dtype)
        out = {k: v for k, v in first.items() if not k.startswith("next_obs")}
        out.update({k: a[k][pick] for k in a if k.startswith("next_obs")})
        out.update(reward=g, discount=disc, terminated=term, truncated=trunc)
        out.update(steps=last + 1, indices=idx)
        t = to_torch(out, torch.device(getattr(buf, "device", "cpu")))
        extras = {k: t[k] for k in extra_names(first)}
        return NStepBatch(
            split_obs(t, "obs"),
            t["action"],
            t["reward"],
            split_obs(t, "next_obs"),
            t["discount"],
            t["terminated"],
            t["truncated"],
            t["steps"],
            extras,
            t["indices"],
        )
