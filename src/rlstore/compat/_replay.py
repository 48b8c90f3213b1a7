"""What the replay facades (velora, ``src.buffers.SimpleReplayBuffer``) share: one transition
layout over :class:`rlstore.ReplayBuffer` (float32 vectors, bool flags, float32 extras), row
checks under the original library's argument names, and one write of ``B`` checked rows."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

from rlstore._trees import flag_array, to_numpy
from rlstore.buffers.replay import ReplayBatch, ReplayBuffer
from rlstore.errors import SpecError
from rlstore.specs import FieldSpec, cast_to_spec

_F32, _BOOL = np.dtype(np.float32), np.dtype(np.bool_)


def transition_core(
    capacity: int, obs_dim: int, act_dim: int, *, seed: Any, device: Any = "cpu", **extras: int
) -> ReplayBuffer:
    """A one-env :class:`ReplayBuffer` of ``obs (obs_dim,)``, ``action (act_dim,)``, scalar
    ``reward``, ``terminated``/``truncated`` flags and a float32 vector per ``extras`` name."""
    shapes = {"obs": (obs_dim,), "action": (act_dim,), "reward": (), **{k: (d,) for k, d in
              extras.items()}}  # fmt: skip
    specs = {k: FieldSpec(k, s, _F32) for k, s in shapes.items()}
    specs |= {k: FieldSpec(k, (), _BOOL) for k in ("terminated", "truncated")}
    return ReplayBuffer(capacity, specs=specs, device=device, seed=seed)


def rows(
    name: str, x: Any, b: int, shape: tuple[int, ...], *, flags: bool = False, batched: bool = True
) -> np.ndarray:
    """``x`` as ``(b, *shape)`` rows of finite float32 (lossless casts only) or, with ``flags``,
    of bools (bools or exact 0/1). Singleton axes may be added or dropped (``(1, 4)`` for one
    state, ``(B, 1)`` rewards, a scalar action when its dim is 1); nothing else is reshaped.

    Raises:
        SpecError: naming ``name``: another shape (shown as ``(b, *shape)``, or ``shape`` when
            not ``batched``), NaN/inf, overflow, non-numbers, flags other than 0/1.
    """
    a, full = to_numpy(name, x), (b, *shape)
    if a.shape != full and [d for d in a.shape if d != 1] == [d for d in full if d != 1]:
        a = a.reshape(full)
    if a.shape != full:
        raise SpecError(f"{name}: expected shape {full if batched else shape}, got {a.shape}")
    if flags:
        return flag_array(name, a, b)
    return cast_to_spec(name, a, FieldSpec(name, shape, _F32), (b,), allow_nonfinite=False)


def write(
    core: ReplayBuffer, fields: tuple[np.ndarray, ...], extras: dict[str, np.ndarray] | None = None
) -> None:
    """Append checked rows ``(B, ...)``: ``fields`` (obs, action, reward, next_obs, terminated,
    truncated) and ``extras``, to the single env column of ``core``, oldest first."""
    if len(fields[0]):
        more = {k: v[:, None] for k, v in (extras or {}).items()}
        core.extend(*(f[:, None] for f in fields), **more)


def sampled(batch: ReplayBatch) -> tuple[torch.Tensor, ...]:
    """``(obs, action, reward, next_obs, terminated as float32)`` of a sampled batch."""
    obs, nxt = cast(torch.Tensor, batch.obs), cast(torch.Tensor, batch.next_obs)  # never dicts
    return obs, batch.action, batch.reward, nxt, batch.terminated.to(torch.float32)
