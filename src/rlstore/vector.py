"""Gymnasium 1.x vector envs: turn step outputs into real transitions for every autoreset mode.

A vector env step gives ``(next_obs, reward, terminated, truncated, info)`` for the actions
taken in ``obs``. What a "transition" is depends on ``env.metadata["autoreset_mode"]``:

* ``NEXT_STEP`` (default): an env that ended at step ``t`` is reset during step ``t + 1``; that
  step returns the reset observation with reward 0 and both flags False. It is a
  pseudo-transition (final obs -> reset obs) and is dropped (``valid`` False) for exactly the
  envs that were done on the previous step. ``next_obs`` of the done step is the true final
  observation.
* ``SAME_STEP``: the env resets inside the step that ended; ``next_obs`` holds the reset
  observation and the true final one is in ``info["final_obs"][i]`` (mask
  ``info["_final_obs"]``). The adapter puts the final observation back into ``next_obs``.
* ``DISABLED``: nothing is reset; ``next_obs`` is already the true final observation and the
  caller resets done envs (``env.reset(options={"reset_mask": done})``); :func:`collect` does.

Example:
    >>> import gymnasium as gym
    >>> env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    >>> steps = list(collect(env, None, 3, seed=0))
    >>> steps[0].valid.tolist()
    [True, True]
    >>> env.close()
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from gymnasium.vector import AutoresetMode

from rlstore._checks import check_count
from rlstore._trees import flag_array, real_array, to_numpy, tree_map
from rlstore.errors import CapacityError, ConfigError, SpecError

if TYPE_CHECKING:
    from rlstore.buffers.replay import ReplayBuffer

__all__ = [
    "AutoresetMode",
    "Transitions",
    "TransitionAdapter",
    "autoreset_mode_of",
    "collect",
    "fill_buffer",
]


class Transitions(NamedTuple):
    """One vector-env step as transitions; arrays have a leading env axis ``N``.

    Attributes:
        obs: observation the action was taken in, ``(N, *obs_shape)`` (or a dict of them).
        action: ``(N, *action_shape)``.
        reward: ``(N,)``.
        next_obs: true successor (final observation of ended episodes, never a reset obs).
        terminated, truncated: ``(N,)`` bool.
        valid: ``(N,)`` bool; False for NEXT_STEP pseudo-transitions that must not be stored.
    """

    obs: Any
    action: np.ndarray
    reward: np.ndarray
    next_obs: Any
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray


def autoreset_mode_of(env: Any) -> AutoresetMode:
    """The autoreset mode a vector env declares in ``metadata`` (NEXT_STEP when absent)."""
    mode = getattr(env, "metadata", {}).get("autoreset_mode", AutoresetMode.NEXT_STEP)
    return mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)


class TransitionAdapter:
    """Stateful per-env bookkeeping turning vector-env steps into real transitions.

    Args:
        mode: the env's :class:`AutoresetMode` (or its string value).
        num_envs: number of sub-envs ``N``.
    """

    def __init__(self, mode: AutoresetMode | str, num_envs: int):
        try:
            self.mode = mode if isinstance(mode, AutoresetMode) else AutoresetMode(mode)
        except ValueError as exc:
            raise ConfigError(
                f"mode: expected one of {[m.value for m in AutoresetMode]}, got {mode!r}"
            ) from exc
        self.num_envs = check_count("num_envs", num_envs)
        if self.num_envs > 2**40:
            raise CapacityError(f"num_envs: expected at most 2**40 envs, got {num_envs!r}")
        self._autoreset = np.zeros(self.num_envs, dtype=bool)

    @classmethod
    def from_env(cls, env: Any) -> TransitionAdapter:
        """Adapter matching a vector env's ``num_envs`` and ``metadata["autoreset_mode"]``."""
        return cls(autoreset_mode_of(env), env.num_envs)

    def reset(self) -> None:
        """Forget pending autoresets; call after ``env.reset()`` of all envs."""
        self._autoreset[:] = False

    def step(
        self,
        obs: Any,
        action: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        info: Mapping[str, Any],
        next_obs: Any,
    ) -> Transitions:
        """Turn one vector step into :class:`Transitions`.

        Args:
            obs: observations the actions were taken in, ``(N, ...)`` (or dict).
            action: ``(N, ...)``; reward, terminated, truncated: ``(N,)``.
            info: the step's info dict (SAME_STEP reads ``final_obs`` / ``_final_obs``).
            next_obs: observations returned by the step.

        Raises:
            SpecError: flags of the wrong shape, or SAME_STEP without ``final_obs`` for a done
                env.
        """
        n = self.num_envs
        term = flag_array("terminated", terminated, n)
        trunc = flag_array("truncated", truncated, n)
        for name, x in (("action", action), ("reward", reward)):
            a = real_array(name, x)
            if a.shape[:1] != (n,) or (name == "reward" and a.ndim != 1):
                want = f"({n},)" if name == "reward" else f"({n}, ...)"
                raise SpecError(f"{name}: expected shape {want}, got {a.shape}")
        done = term | trunc
        valid = np.ones(n, dtype=bool)
        if self.mode == AutoresetMode.NEXT_STEP:
            valid = ~self._autoreset
            self._autoreset = done.copy()
        elif self.mode == AutoresetMode.SAME_STEP and done.any():
            final = info.get("final_obs")
            mask = np.asarray(info.get("_final_obs", np.zeros(n, bool)), dtype=bool)
            if final is None or not mask[done].all():
                raise SpecError(
                    "info['final_obs']: expected the final observation of every "
                    f"done env in SAME_STEP mode, got mask {mask.tolist()} for done "
                    f"{done.tolist()}"
                )
            next_obs = tree_map(np.array, next_obs)  # copy before patching
            for i in np.flatnonzero(done):  # every leaf of a Box / Dict / Tuple (nested) obs
                tree_map(lambda dst, src, i=i: dst.__setitem__(i, src), next_obs, final[i])
        return Transitions(
            obs,
            to_numpy("action", action),
            to_numpy("reward", reward),
            next_obs,
            term,
            trunc,
            valid,
        )


def _random_policy(env: Any, seed: int | None) -> Callable[[Any], Any]:
    env.action_space.seed(seed)
    return lambda _obs: env.action_space.sample()


def collect(
    env: Any, policy: Callable[[Any], Any] | None, num_steps: int, *, seed: int | None = None
) -> Iterator[Transitions]:
    """Reset ``env`` and yield :class:`Transitions` for ``num_steps`` vector steps.

    Handles all three autoreset modes: in DISABLED mode done envs are reset with
    ``reset_mask`` and their reset observation becomes the next ``obs``.

    Args:
        env: a ``gymnasium.vector.VectorEnv``.
        policy: batched ``obs -> actions``; uniform random (seeded by ``seed``) when ``None``.
        num_steps: vector steps to take, an int >= 0.
        seed: seed passed to ``env.reset``.

    Raises:
        ConfigError: ``num_steps`` is not an int >= 0 (raised here, before ``env`` is reset).
    """
    # not 2.5 -> 2, "3" or True
    steps = check_count("num_steps", num_steps, minimum=0, error=ConfigError)
    return _collect(env, policy, steps, seed)


def _collect(env: Any, policy: Any, num_steps: int, seed: int | None) -> Iterator[Transitions]:
    adapter = TransitionAdapter.from_env(env)
    act = policy if policy is not None else _random_policy(env, seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(num_steps):
        action = act(obs)
        next_obs, reward, term, trunc, info = env.step(action)
        tr = adapter.step(obs, action, reward, term, trunc, info, next_obs)
        yield tr
        done = tr.terminated | tr.truncated
        if adapter.mode == AutoresetMode.DISABLED and done.any():
            next_obs, _ = env.reset(options={"reset_mask": done})
        obs = next_obs


def fill_buffer(
    buffer: ReplayBuffer,
    policy: Callable[[Any], Any] | None,
    n_samples: int,
    *,
    env_id: str = "CartPole-v1",
    env: Any = None,
    num_envs: int = 8,
    seed: int | None = None,
    chunk: int = 64,
) -> int:
    """Add ``n_samples`` real transitions from a vector env to ``buffer``.

    Buffer column ``j`` receives the transitions of envs ``i`` with ``i % buffer.num_envs ==
    j``, one env's run of ``chunk`` steps after another, so each column is a mostly continuous
    stream (switches between envs are stored as discontinuities). Pseudo-transitions are
    dropped (see :class:`TransitionAdapter`).

    Args:
        buffer: the replay buffer; ``env.num_envs`` must be a multiple of its ``num_envs``.
        policy: batched ``obs -> actions`` or ``None`` for random actions.
        n_samples: transitions to add, rounded up to a multiple of ``buffer.num_envs``.
        env_id: gymnasium id of the env built (sync, SAME_STEP autoreset) when ``env`` is None.
        env: an existing vector env (not closed here).
        num_envs: sub-envs of the env built from ``env_id``.
        seed: reset / random-policy seed.
        chunk: vector steps collected between writes.

    Returns:
        Number of transitions added.
    """
    import gymnasium as gym

    check_count("n_samples", n_samples)
    check_count("num_envs", num_envs)
    check_count("chunk", chunk)
    own = env is None
    if own:
        env = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        )
    n_cols = buffer.num_envs
    try:
        if env.num_envs % n_cols:
            raise ConfigError(
                f"num_envs: expected a multiple of the buffer's num_envs="
                f"{n_cols}, got {env.num_envs}"
            )
        rows_needed = math.ceil(int(n_samples) / n_cols)
        queues: list[list[dict[str, Any]]] = [[] for _ in range(n_cols)]
        rows_done = 0
        steps = collect(env, policy, 1 << 62, seed=seed)
        while rows_done < rows_needed:
            block = [next(steps) for _ in range(chunk)]
            for i in range(env.num_envs):
                keep = np.array([tr.valid[i] for tr in block])
                if keep.any():
                    queues[i % n_cols].append(_env_run(block, i, keep))
            while rows_done < rows_needed and all(queues):
                length = min(sum(len(q["reward"]) for q in col) for col in queues)
                length = min(length, rows_needed - rows_done, buffer.capacity_per_env)
                cols = [_pop(col, length) for col in queues]
                buffer.extend(**{k: _stack_cols([c[k] for c in cols]) for k in cols[0]})
                rows_done += length
    finally:
        if own:
            env.close()
    return rows_done * n_cols


def _env_run(block: list[Transitions], i: int, keep: np.ndarray) -> dict[str, Any]:
    """Env ``i``'s kept transitions of a block of steps, each field ``(L, ...)``."""
    out: dict[str, Any] = {}
    for name in ("obs", "action", "reward", "next_obs", "terminated", "truncated"):
        items = [getattr(tr, name) for tr in block]
        out[name] = tree_map(lambda *xs: np.stack([np.asarray(x)[i] for x in xs])[keep], *items)
    return out


def _pop(col: list[dict[str, Any]], length: int) -> dict[str, Any]:
    """Take the first ``length`` transitions from a column's queue of runs."""
    merged = {k: _cat([r[k] for r in col]) for k in col[0]}
    head = {k: _slice(v, 0, length) for k, v in merged.items()}
    rest = {k: _slice(v, length, None) for k, v in merged.items()}
    col.clear()
    if len(rest["reward"]):
        col.append(rest)
    return head


def _cat(parts: list[Any]) -> Any:
    return tree_map(lambda *xs: np.concatenate(xs), *parts)


def _slice(v: Any, a: int, b: int | None) -> Any:
    return tree_map(lambda x: x[a:b], v)


def _stack_cols(cols: list[Any]) -> Any:
    """Per-column ``(L, ...)`` arrays -> ``(L, n_cols, ...)``."""
    return tree_map(lambda *cs: np.stack(cs, axis=1), *cols)
