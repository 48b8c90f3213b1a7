"""Input validation of :class:`rlstore.buffers.rollout.RolloutBuffer` (constructor and ``add``).

Everything here validates and converts, and writes nothing: ``RolloutBuffer.add`` calls
:meth:`StepChecker.fast_step` (after the first add) or :meth:`StepChecker.step` first and only
then touches its storage, so a rejected add leaves the buffer unchanged. ``fast_step`` is the
cached fast path for inputs that already have the stored dtypes, device and shapes (cheap
attribute comparisons, no conversion); it returns None for anything unusual, and ``step`` (the
slow, obviously-correct twin) then validates, converts and raises the error messages.
Errors are :class:`~rlstore.errors.SpecError` / :class:`ConfigError` whose messages name
the argument, the expected shape/dtype/range and what arrived.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, cast

import numpy as np
import torch

from rlstore._checks import real_number
from rlstore._trees import (
    as_tensor,
    check_real,
    tree_leaves,
    tree_map,
)
from rlstore.buffers.rollout_targets import IntrinsicConfig
from rlstore.errors import ConfigError, SpecError

__all__ = [
    "AdvNorm",
    "CheckedStep",
    "StepChecker",
    "check_rollout_args",
    "FLAGS",
    "TREES",
]

AdvNorm = Literal["none", "batch", "minibatch"]
FLAGS = ("terminated", "truncated", "final_obs_given")
"""The per-step flags, stored together as one ``(3, T, N)`` bool block."""
TREES = ("obs", "actions", "hidden", "final_obs")
"""Fields allocated lazily from the first add that gives them (dtypes preserved)."""
_FLOAT_ARGS = ("logp", "value", "reward", "final_value", "int_reward", "int_value")


def check_rollout_args(
    num_steps: Any,
    num_envs: Any,
    gamma: Any,
    lam: Any,
    advantage_normalization: Any,
    intrinsic: IntrinsicConfig | dict[str, Any] | None,
) -> IntrinsicConfig | None:
    """Validate the RolloutBuffer constructor arguments; return ``intrinsic`` as a config.

    ``intrinsic`` may be the dict of an :class:`IntrinsicConfig` (a JSON round trip of
    ``RolloutBuffer.config()``).

    Raises:
        ConfigError: ``num_steps``/``num_envs`` not ints >= 1, ``gamma``/``lam`` outside [0, 1],
            an unknown ``advantage_normalization``, or a malformed ``intrinsic``.
    """
    for name, v in (("num_steps", num_steps), ("num_envs", num_envs)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"{name}: expected an int >= 1, got {v!r}")
    for name, g in (("gamma", gamma), ("lam", lam)):
        real_number(name, g, 0.0, 1.0)
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
    return intrinsic


class CheckedStep(NamedTuple):
    """One validated step of N envs, ready to be written at the cursor.

    Attributes:
        row: ``{"obs", "actions"[, "hidden"]}`` trees of ``(N, ...)`` tensors on the device.
        floats: ``(K, N)`` float32, finite: logp, value, reward, final_value (0 where not
            truncated-and-not-terminated)[, int_reward, int_value].
        terminated: ``(N,)`` bool.
        truncated: ``(N,)`` bool.
        final_obs_given: ``(N,)`` bool, a ``final_obs`` row was given for a truncated and not
            terminated env (``row["final_obs"]`` then holds it; other rows are zeros).
    """

    row: dict[str, Any]
    floats: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs_given: torch.Tensor


@dataclass(frozen=True)
class StepChecker:
    """Validates per-step inputs of ``num_envs`` envs and converts them to tensors on ``device``."""

    num_envs: int
    device: torch.device

    def vector(
        self, name: str, x: Any, *, flag: bool = False, finite_where: torch.Tensor | None = None
    ) -> torch.Tensor:
        """A per-env scalar or flag: shape ``(N,)`` (``(N, 1)`` accepted) -> float32 / bool.

        Finiteness is checked by the caller; ``finite_where`` zeroes the entries outside it.
        """
        t = as_tensor(name, x, self.device)
        N = self.num_envs
        if t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.dim() == 0 and N == 1:
            t = t.reshape(1)
        if tuple(t.shape) != (N,):
            raise SpecError(f"{name}: expected shape ({N},) (one per env), got {tuple(t.shape)}")
        if flag:
            if t.dtype != torch.bool:
                if t.is_complex() or not bool(((t == 0) | (t == 1)).all()):
                    raise SpecError(
                        f"{name}: expected bool or 0/1 flags, got {t.dtype} {t.tolist()}"
                    )
                t = t != 0
            return t
        if t.dtype == torch.bool or t.is_complex():
            raise SpecError(f"{name}: expected a real number per env, got dtype {t.dtype}")
        t = t.to(torch.float32)
        return t if finite_where is None else torch.where(finite_where, t, 0.0)

    def finite(self, name: str, x: Any) -> torch.Tensor:
        """:meth:`vector` that also rejects NaN / inf."""
        t = self.vector(name, x)
        if not bool(torch.isfinite(t).all()):
            raise SpecError(f"{name}: expected finite values, got {t.tolist()}")
        return t

    def tree(self, name: str, x: Any, stored: Any) -> Any:
        """A tensor / dict (obs, final_obs) / tuple (hidden) tree with a leading env axis, like
        ``stored``.

        ``stored`` is the ``(T, N, ...)`` storage allocated from the first add (None before it):
        later adds must match its structure, per-step shapes and dtypes.
        """
        N = self.num_envs
        if isinstance(x, dict) and name in ("obs", "final_obs"):
            if stored is not None and (not isinstance(stored, dict) or set(x) != set(stored)):
                want = sorted(stored) if isinstance(stored, dict) else "an array"
                raise SpecError(f"{name}: expected keys {want} like the first add, got {sorted(x)}")
            if not x:
                raise SpecError(f"{name}: expected a non-empty dict, got {{}}")
            keys = x if stored is None else stored  # the stored key order: leaves are zipped
            return {k: self.tree(f"{name}[{k!r}]", x[k], stored and stored[k]) for k in keys}
        if isinstance(x, (tuple, list)) and name.startswith("hidden"):
            if stored is not None and (not isinstance(stored, tuple) or len(stored) != len(x)):
                raise SpecError(
                    f"{name}: expected the structure of the first add, got {len(x)} items"
                )
            return tuple(
                self.tree(f"{name}[{i}]", v, None if stored is None else stored[i])
                for i, v in enumerate(x)
            )
        if isinstance(stored, (dict, tuple)):
            raise SpecError(
                f"{name}: expected a {type(stored).__name__} like the first add, "
                f"got {type(x).__name__}"
            )
        t = check_real(name, as_tensor(name, x, self.device))  # finite floats, no complex
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

    def step(
        self,
        args: Mapping[str, Any],
        stored: Mapping[str, Any],
        *,
        hidden_given: bool | None,
        has_intrinsic: bool,
    ) -> CheckedStep:
        """Validate the arguments of one ``RolloutBuffer.add`` (see its docstring).

        Args:
            args: ``obs, action, logp, value, reward, terminated, truncated, final_value,
                hidden, int_reward, int_value`` and optionally ``final_obs`` by name
                (optional ones may be None).
            stored: the buffer's storage (``obs`` / ``actions`` / ``hidden`` once allocated and
                the ``(T, N)`` ``final_values``).
            hidden_given: whether earlier adds had a hidden state (None: no add yet).
            has_intrinsic: whether the buffer has an intrinsic stream.
        """
        row: dict[str, Any] = {
            "obs": self.tree("obs", args["obs"], stored.get("obs")),
            "actions": self.tree("action", args["action"], stored.get("actions")),
        }
        floats = [self.vector(k, args[k]) for k in ("logp", "value", "reward")]
        term = self.vector("terminated", args["terminated"], flag=True)
        trunc = self.vector("truncated", args["truncated"], flag=True)
        boot = trunc & ~term  # termination wins: no bootstrap
        final_value = args["final_value"]
        if final_value is None:
            if bool(boot.any()):
                raise SpecError(
                    "final_value: expected V(final_obs) for the truncated envs "
                    f"{torch.nonzero(boot).flatten().tolist()}, got None"
                )
            final_value = stored["final_values"][0]  # any finite (N,) row: ignored
        floats.append(self.vector("final_value", final_value, finite_where=boot))
        hidden = args["hidden"]
        if hidden_given is not None and (hidden is not None) != hidden_given:
            want = "a hidden state" if hidden_given else "hidden=None"
            raise SpecError(
                f"hidden: expected {want} like the first add, got {type(hidden).__name__}"
            )
        if hidden is not None:
            row["hidden"] = self.tree("hidden", hidden, stored.get("hidden"))
        int_reward, int_value = args["int_reward"], args["int_value"]
        if not has_intrinsic and (int_reward is not None or int_value is not None):
            raise ConfigError(
                "int_reward/int_value: given but the buffer has no intrinsic stream; construct "
                "it with intrinsic=IntrinsicConfig(...)"
            )
        if has_intrinsic:
            if int_reward is None or int_value is None:
                raise SpecError(
                    "int_reward/int_value: expected (N,) arrays (the buffer has an intrinsic "
                    f"stream), got {type(int_reward).__name__}, {type(int_value).__name__}"
                )
            floats += [self.vector("int_reward", int_reward), self.vector("int_value", int_value)]
        block = torch.stack(floats)  # (K, N)
        if not bool(torch.isfinite(block).all()):  # one check for all streams
            i = int((~torch.isfinite(block)).any(dim=1).nonzero()[0])
            raise SpecError(f"{_FLOAT_ARGS[i]}: expected finite values, got {floats[i].tolist()}")
        given = torch.zeros_like(boot)
        final_obs = args.get("final_obs")
        if final_obs is not None:  # like obs (the stored obs, or this add's on the first add)
            like = stored.get("obs")
            like = tree_map(lambda x: x[None], row["obs"]) if like is None else like
            fo = self.tree("final_obs", final_obs, like)
            row["final_obs"] = tree_map(lambda x: _rows_where(boot, x), fo)
            given = boot
        elif "final_obs" in stored:  # keep unused rows zero, like the slow and fast paths
            row["final_obs"] = tree_map(lambda x: x.new_zeros(x.shape[1:]), stored["final_obs"])
        return CheckedStep(row, block, term, trunc, given)

    # ------------------------------------------------------------------ fast path

    def fast_step(
        self,
        args: Mapping[str, Any],
        stored: Mapping[str, Any],
        *,
        hidden_given: bool | None,
        has_intrinsic: bool,
    ) -> CheckedStep | None:
        """The :meth:`step` of inputs that need no conversion, or None to fall back to it.

        Taken after the first add when ``obs`` / ``action`` / ``hidden`` are tensors of the
        stored dtype, device and per-step shape (not requiring grad), the per-env scalars are
        ``(N,)`` float32 tensors or native float32/float64 numpy arrays, the flags are ``(N,)``
        bool tensors or arrays, and all floats are finite (one fused reduction). Anything else
        (including every input :meth:`step` would reject) returns None; the result is then
        computed, or the error raised, by :meth:`step`, which this matches byte for byte.
        """
        if hidden_given is None or "obs" not in stored or "actions" not in stored:
            return None
        if args.get("final_obs") is not None:  # rare (truncations): validated by step
            return None
        obs = _same_tree(args["obs"], stored["obs"])
        action = _same_tree(args["action"], stored["actions"])
        if obs is None or action is None:
            return None
        row: dict[str, Any] = {"obs": obs, "actions": action}
        hidden = args["hidden"]
        if (hidden is not None) != hidden_given:
            return None
        if hidden is not None:
            row["hidden"] = _same_tree(hidden, stored.get("hidden"))
            if row["hidden"] is None:
                return None
        dev = stored["final_values"].device  # resolved ("cuda:0", not "cuda") like the inputs
        term = self._fast_vector(args["terminated"], dev, flag=True)
        trunc = self._fast_vector(args["truncated"], dev, flag=True)
        names = ["logp", "value", "reward"]
        if has_intrinsic:
            names += ["int_reward", "int_value"]
        elif args["int_reward"] is not None or args["int_value"] is not None:
            return None
        vecs = [self._fast_vector(args[k], dev) for k in names]
        if term is None or trunc is None or any(v is None for v in vecs):
            return None
        if args["final_value"] is None:
            if bool(trunc.any()) and bool((trunc & ~term).any()):  # needs a final_value
                return None
            final = torch.zeros(self.num_envs, device=dev)
        else:
            given_final = self._fast_vector(args["final_value"], dev)
            if given_final is None:
                return None
            final = given_final.to(dev, torch.float32).masked_fill(term | ~trunc, 0.0)
        floats = cast("list[torch.Tensor]", vecs)  # no None: checked above
        floats.insert(3, final)  # the final_value row keeps only trunc & ~term
        # (K, N) float32; numpy float64 views are cast like ``vector``'s ``.to``
        block = torch.stack([v.to(dev, torch.float32) for v in floats])
        # one fused reduction over the scalars and every float leaf of obs / action / hidden: the
        # sum is finite unless an entry is NaN / inf (or it overflows, a false alarm that only
        # costs the fallback)
        total = block.sum()
        for leaf in tree_leaves(tuple(row.values())):
            if leaf.is_floating_point():
                total = total + leaf.sum(dtype=torch.float32)
        if not math.isfinite(total.item()):
            return None
        if "final_obs" in stored:
            row["final_obs"] = tree_map(lambda x: x.new_zeros(x.shape[1:]), stored["final_obs"])
        return CheckedStep(row, block, term, trunc, torch.zeros_like(term))

    def _fast_vector(
        self, x: Any, device: torch.device, *, flag: bool = False
    ) -> torch.Tensor | None:
        """``x`` as a tensor if it is an ``(N,)`` per-env vector needing no validation, else None.

        Flags come back bool on the device; float numpy arrays come back as CPU views (the
        caller's ``copy_`` casts them to float32 exactly like :meth:`vector`'s ``.to``).
        """
        if isinstance(x, torch.Tensor):
            ok = x.dtype == torch.bool if flag else x.dtype == torch.float32
            ok = ok and x.device == device and not x.requires_grad
        elif isinstance(x, np.ndarray):
            ok = x.dtype == np.bool_ if flag else x.dtype in (np.float32, np.float64)
            ok = ok and x.flags.c_contiguous and x.flags.writeable  # from_numpy: no warning
            if not (ok and x.shape == (self.num_envs,)):
                return None
            t = torch.from_numpy(x)
            return t.to(device) if flag else t
        else:
            return None
        return x if ok and x.shape == (self.num_envs,) else None


def _rows_where(rows: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``x`` ``(N, ...)`` with the rows where ``rows`` ``(N,)`` is False set to zero."""
    keep = rows.reshape(-1, *([1] * (x.dim() - 1)))
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _same_tree(x: Any, stored: Any) -> Any:
    """``x`` as a tree like ``stored`` (tuple for list) if every leaf is a tensor of the stored
    dtype, device and per-step shape ``stored.shape[1:]`` not requiring grad, else None."""
    if isinstance(stored, torch.Tensor):
        ok = isinstance(x, torch.Tensor) and x.dtype == stored.dtype and x.device == stored.device
        return x if ok and x.shape == stored.shape[1:] and not x.requires_grad else None
    if isinstance(stored, dict):
        if not isinstance(x, dict) or len(x) != len(stored):
            return None
        out: dict[Any, Any] | tuple[Any, ...] = {
            k: _same_tree(x.get(k), v) for k, v in stored.items()
        }
    elif isinstance(stored, tuple):
        if not isinstance(x, (tuple, list)) or len(x) != len(stored):
            return None
        out = tuple(_same_tree(a, b) for a, b in zip(x, stored, strict=True))
    else:
        return None
    return None if any(v is None for v in (out.values() if isinstance(out, dict) else out)) else out
