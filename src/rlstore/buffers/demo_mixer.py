"""PPO+D rollout mixer: new episodes of a vector env become demonstration replays.

:class:`DemoMixer` is a per-env-slot state machine over a :class:`~rlstore.buffers.demo_store.
DemoStore` (PyTorchRL's ``PPODBuffer`` semantics): whenever a slot starts a new episode, its
source is drawn with probabilities ``(rho, phi, 1 - rho - phi)`` (reward demo, value demo, real
env; an empty demo list falls back to the env). A replaying slot emits the demo's transitions
instead of the env's; every finished env episode is offered to the store as a candidate demo.
Every draw uses the store's seeded Generator, so a given seed and env stream yield the same
rollout.

Hot path (one :meth:`DemoMixer.step` per vector-env step) is batched over slots:

* replay state is kept in ``(N,)`` arrays (position, length, row offset, running MaxValue);
  the demos being replayed are copied once into flat arrays in the env's layout
  (:class:`DemoBank`), so the demo rows of all replaying slots are gathered with one fancy
  index per field;
* the real steps are appended to preallocated ``(H, N, ...)`` arrays (:class:`StepHistory`)
  that reach back to the oldest open env episode; an ending episode is one column slice.

Python work per step is per *ending* slot (drawing the next source, offering the episode),
never per replaying slot. ``tests/buffers/test_demo_mixer.py`` checks every output and the
store's final state against the plain per-slot loop this replaced.

Example:
    >>> import numpy as np
    >>> from rlstore.buffers.demos import Demo, DemoStore
    >>> store = DemoStore(capacity=4, rho=1.0, phi=0.0, seed=0)
    >>> _ = store.add_initial(Demo(np.zeros((2, 3), np.float32), np.array([0, 1]),
    ...                        np.array([0.0, 1.0], np.float32), human=True))
    >>> mix = DemoMixer(store, num_envs=1)
    >>> _ = mix.reset(np.ones((1, 3), np.float32))
    >>> out = mix.step(np.array([1]), np.zeros(1), np.array([True]), np.zeros(1, bool),
    ...                np.ones((1, 3), np.float32))
    >>> int(out.new_episode[0])  # the next episode of slot 0 replays a reward demo
    1
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, cast

import numpy as np

from rlstore._checks import check_count
from rlstore._trees import flag_array, real_array
from rlstore.buffers._demo_rows import DemoBank, StepHistory, check_replayable
from rlstore.buffers.demo_store import Demo, DemoStore
from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError

__all__ = ["DemoMixer", "MixedStep", "ENV", "REWARD_DEMO", "VALUE_DEMO"]

ENV, REWARD_DEMO, VALUE_DEMO = 0, 1, 2
"""Episode source codes used by :class:`DemoMixer` (``-1`` = no new episode this step)."""

_NEVER = np.iinfo(np.int64).max


def _float32_column(name: str, x: Any, n: int) -> np.ndarray:
    """``(n,)`` finite numbers (not bools) that float32 holds without overflow."""
    a = real_array(name, x)
    if a.shape != (n,) or a.dtype.kind == "b":
        raise SpecError(f"{name}: expected ({n},) numbers, got {a.dtype} {a.shape}")
    with np.errstate(over="ignore"):
        out = a.astype(np.float32)
    if not np.isfinite(out).all():
        raise SpecError(f"{name}: expected values that fit float32, got [{a.min()}, {a.max()}]")
    return out


class MixedStep(NamedTuple):
    """One vector step after demo mixing; every field has a leading env axis ``N``.

    ``obs`` is what the agent acted on (``obs[t]``), ``next_obs`` what it acts on next. A demo
    step carries the demo's action and reward, ``from_demo = True`` (store logp = 0: the
    behaviour probability of a demo action is 1) and ``truncated = False``; the last step of a
    demo is ``terminated``. ``new_episode`` is the source code (:data:`ENV`,
    :data:`REWARD_DEMO`, :data:`VALUE_DEMO`) of the episode ``next_obs`` starts, else ``-1``.
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray
    from_demo: np.ndarray
    new_episode: np.ndarray


class DemoMixer:
    """Per-slot PPO+D replay: new episodes of a vector env become demo replays.

    Args:
        store: the :class:`~rlstore.buffers.demos.DemoStore` (its Generator makes every draw).
        num_envs: number of env slots ``N``.
        reset_env: ``i -> obs`` resetting real env ``i`` when a demo ends and ``env`` is drawn
            (PyTorchRL's ``reset_single_env``). Without it the slot continues from the real
            env's current observation (documented limitation: a mid-episode start).
        frame_stack: observations are ``(C * frame_stack, ...)`` stacks along axis 0; demos
            store the last frame ``(C, ...)`` and replays rebuild the stack (first frame
            repeated, then rolled), as in PyTorchRL's ``PPODBuffer``.
        track_episodes: offer every finished env episode to the store as a candidate demo.
            The action row shape is then fixed while an env episode is open.
    """

    def __init__(
        self,
        store: DemoStore,
        num_envs: int,
        *,
        reset_env: Callable[[int], np.ndarray] | None = None,
        frame_stack: int = 1,
        track_episodes: bool = True,
    ) -> None:
        if not isinstance(store, DemoStore):
            raise ConfigError(f"store: expected a DemoStore, got {type(store).__name__}")
        for name, value in (("num_envs", num_envs), ("frame_stack", frame_stack)):
            check_count(name, value, error=ConfigError)
            if value > 2**31 - 1:
                raise CapacityError(f"{name}: expected at most 2**31 - 1, got {value!r}")
        if not isinstance(track_episodes, (bool, np.bool_)):
            raise ConfigError(f"track_episodes: expected a bool, got {track_episodes!r}")
        if reset_env is not None and not callable(reset_env):
            raise ConfigError(f"reset_env: expected a callable or None, got {reset_env!r}")
        self.store, self.num_envs, self.reset_env = store, int(num_envs), reset_env
        self.frame_stack, self.track_episodes = int(frame_stack), track_episodes
        self._obs: np.ndarray | None = None
        self._bank: DemoBank | None = None
        self._no_value = np.full(self.num_envs, -np.inf)  # read-only template
        self._no_start = np.full(self.num_envs, -1, dtype=np.int8)  # copied each step
        self.reset_tracking()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the demo bank: its keys are object ids, which do not survive a
        round trip; the replaying slots bank their demos again at the next step."""
        state = self.__dict__.copy()
        state["_bank"], state["_off"] = None, np.full_like(self._off, -1)
        state["_seen"] = state["_layout"] = state["_checked"] = None  # weak references
        return state

    def reset_tracking(self) -> None:
        """Forget replays and partial episodes (every slot restarts an env episode)."""
        n = self.num_envs
        self._demos: list[Demo | None] = [None] * n  # the demo each slot replays
        self._replaying = np.zeros(n, dtype=bool)
        self._kind = np.zeros(n, dtype=np.int8)  # REWARD_DEMO / VALUE_DEMO while replaying
        self._pos = np.zeros(n, dtype=np.int64)  # demo transition replayed at the next step
        self._len = np.zeros(n, dtype=np.int64)
        self._off = np.full(n, -1, dtype=np.int64)  # bank row of the demo's step 0 (-1: none)
        self._rmax = np.full(n, -np.inf)  # running max of V over the replay
        self._hist = StepHistory()
        self._t = 0  # global index of the next step
        self._ep_start = np.zeros(n, dtype=np.int64)  # _NEVER while replaying
        self._ep_max = np.full(n, -np.inf)
        self._seen: tuple[Any, ...] | None = None  # what _check_demos last passed
        self._layout: tuple[Any, ...] | None = None
        self._checked: weakref.WeakSet[Demo] = weakref.WeakSet()  # demos fitting _layout

    _SLOT_ARRAYS = ("_replaying", "_kind", "_pos", "_len", "_rmax", "_ep_start", "_ep_max")

    def state_dict(self) -> dict[str, Any]:
        """The slots' replays and open env episodes (arrays, copies) and the step counter.

        The demos being replayed are stored whole (``demos/<slot>``): they may have left the
        store. The store itself is saved on its own (:meth:`DemoStore.state_dict`).
        """
        if self._obs is None:
            raise EmptyBufferError("state_dict: call reset(obs) first")
        return {
            "obs": self._obs.copy(),
            "t": self._t,
            **{k[1:]: getattr(self, k).copy() for k in self._SLOT_ARRAYS},
            "demos": {str(i): d.state() for i, d in enumerate(self._demos) if d is not None},
            "hist": self._hist.state(),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output (after the store's own state): the mixer then
        emits what the original would. A replayed demo still in the store is shared with it."""
        n = self.num_envs
        try:
            obs, t, hist = real_array("obs", sd["obs"]), int(sd["t"]), sd["hist"]
            arrays = {k: np.asarray(sd[k[1:]]) for k in self._SLOT_ARRAYS}
            demos: list[Demo | None] = [None] * n
            known = {d.demo_id: d for d in (*self.store.reward_demos, *self.store.value_demos)}
            for key, d_sd in sd["demos"].items():
                d = Demo.from_state(d_sd)
                demos[int(key)] = known.get(d.demo_id, d)
            rows = hist["rows"]
            ok = isinstance(rows, dict) and all(isinstance(r, np.ndarray) for r in rows.values())
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, SpecError) as exc:
            raise CheckpointError(f"DemoMixer state: missing or bad entry ({exc})") from exc
        bad = [k for k, a in arrays.items() if a.shape != (n,) or a.dtype != getattr(self, k).dtype]
        if bad or obs.shape[:1] != (n,) or not ok or t < 0:
            raise CheckpointError(
                f"DemoMixer state: expected ({n},) slot arrays like this mixer's, an obs of {n} "
                f"rows and history arrays, got bad {bad or 'obs/hist/t'}"
            )
        self.reset_tracking()
        self._obs, self._t, self._demos = obs.copy(), t, demos
        for k, a in arrays.items():
            setattr(self, k, a.copy())
        self._hist.load(hist)

    def _frames(self, obs: np.ndarray) -> np.ndarray:
        """Last frame of each stacked observation, ``(N, C, ...)``."""
        return obs if self.frame_stack == 1 else obs[:, -(obs.shape[1] // self.frame_stack) :]

    def _first_obs(self, demo: Demo) -> np.ndarray:
        frame = demo.observations[0]
        if self.frame_stack == 1:
            return frame
        return np.concatenate([frame] * self.frame_stack, axis=0)

    def replaying(self) -> np.ndarray:
        """``(N,)`` bool: slots whose current episode is a demo replay."""
        return self._replaying.copy()

    def reset(self, obs: np.ndarray) -> np.ndarray:
        """Start all slots on real env episodes from ``obs (N, *obs_shape)``; returns it."""
        obs = real_array("obs", obs)
        if obs.shape[:1] != (self.num_envs,):
            raise SpecError(f"obs: expected a leading env axis {self.num_envs}, got {obs.shape}")
        fs = self.frame_stack
        if fs > 1 and (obs.ndim < 2 or obs.shape[1] % fs):  # else a replay failed mid-step
            raise SpecError(
                f"obs: expected (N, C * frame_stack, ...) stacks with frame_stack={fs}, got "
                f"{obs.shape}"
            )
        self._obs = obs.copy()
        self.reset_tracking()
        return self._obs.copy()

    def _begin(self, i: int, env_obs: Any, after_demo: bool, next_t: int) -> tuple[Any, int]:
        source = self.store.sample_source()
        self._ep_max[i] = -np.inf
        if source == "env":
            self._demos[i], self._replaying[i], self._ep_start[i] = None, False, next_t
            if after_demo and self.reset_env is not None:
                env_obs = self._reset_env(i, env_obs)
            return np.asarray(env_obs), ENV
        demo = self.store.sample_demo(source)
        code = REWARD_DEMO if source == "reward_demo" else VALUE_DEMO
        self._demos[i], self._replaying[i], self._kind[i] = demo, True, code
        self._pos[i], self._len[i], self._off[i], self._rmax[i] = 0, demo.length, -1, -np.inf
        self._ep_start[i] = _NEVER
        return self._first_obs(demo), code

    def _reset_env(self, i: int, like: np.ndarray) -> np.ndarray:
        """``reset_env(i)``'s observation, shaped like the env's ``like`` and convertible to its
        dtype losslessly, else a :class:`SpecError` naming ``reset_env(i)`` (the env was reset
        by then: call :meth:`reset` before stepping again)."""
        name = f"reset_env({i})"
        obs = real_array(name, cast(Callable[[int], np.ndarray], self.reset_env)(i))
        if obs.shape != like.shape:
            raise SpecError(
                f"{name}: expected an observation of shape {like.shape}, got {obs.shape}"
            )
        check_replayable(name, obs[None], like.shape, like.dtype)
        return obs

    def begin_episode(self, i: int) -> tuple[np.ndarray, int]:
        """Abandon slot ``i``'s current episode and draw its next source now.

        Returns:
            ``(obs, code)``: the observation the slot's new episode starts from and its source.
        """
        if self._obs is None:
            raise EmptyBufferError("begin_episode: call reset(obs) first")
        i = check_count("i", i, minimum=0, error=ConfigError)
        if i >= self.num_envs:  # -1 was the last slot, silently
            raise ConfigError(f"i: expected a slot in [0, {self.num_envs}), got {i}")
        self._check_demos(self._obs.dtype, self._layout[2] if self._layout else None)
        obs, code = self._begin(i, self._obs[i], after_demo=True, next_t=self._t)
        self._obs[i] = obs
        return self._obs[i].copy(), code

    def _offer(self, i: int) -> None:
        obs, act, rew = self._hist.column(i, int(self._ep_start[i]))
        self.store.offer_episode(obs, act, rew, float(self._ep_max[i]))

    def _check_demos(self, obs_dtype: np.dtype, act: tuple[Any, ...] | None) -> None:
        """Raise before anything changes unless every demo a slot may replay (the store's and
        those being replayed) fits the env: frames shaped like its own, observations and
        actions (``act = (row shape, dtype)``, None: not known yet) that convert to its dtypes
        losslessly. A demo is checked once per env layout."""
        frame = self._frames(cast(np.ndarray, self._obs))[0].shape  # callers checked reset
        layout, store = (frame, obs_dtype, act), self.store
        seen = (layout, store._next_id, id(store.reward_demos), id(store.value_demos))
        if seen == self._seen:
            return
        checked = self._checked if layout == self._layout else weakref.WeakSet()
        for d in (*store.reward_demos, *store.value_demos, *self._demos):
            if d is None or d in checked:
                continue
            if d.observations.shape[1:] != frame:
                raise SpecError(
                    f"demo {d.demo_id}: expected frames shaped {frame} like the env's "
                    f"(frame_stack={self.frame_stack}), got {d.observations.shape[1:]}"
                )
            where = f" (demo {d.demo_id})"
            check_replayable(f"demo.observations{where}", d.observations, frame, obs_dtype)
            if act is not None:
                check_replayable(f"demo.actions{where}", d.actions, *act)
            checked.add(d)
        self._seen, self._layout, self._checked = seen, layout, checked

    def _bank_replays(self, rep: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> None:
        """Give every replaying slot ``rep`` a bank offset (banking its demo if needed)."""
        key = (next_obs.shape, next_obs.dtype, action.shape, action.dtype)
        if self._bank is None or self._bank.key != key:  # first replay, or the env layout changed
            frame_shape = self._frames(next_obs).shape[1:]
            self._bank = DemoBank(key, frame_shape, action.shape[1:])
            self._off[:] = -1
        bank = self._bank
        new = rep[self._off[rep] < 0]
        if not new.size:
            return
        demos = [self._demos[i] for i in new.tolist()]
        missing = list({id(d): d for d in demos if id(d) not in bank.offsets}.values())
        if bank.rows + sum(d.length for d in missing) > bank.obs.shape[0]:
            live = [self._demos[i] for i in rep.tolist()]
            bank.rebuild(list({id(d): d for d in live}.values()))  # type: ignore[misc]
            new = rep
        else:
            bank.extend(missing)  # type: ignore[arg-type]
        self._off[new] = [bank.offsets[id(self._demos[i])] for i in new.tolist()]

    def _advance_replays(
        self,
        rep: np.ndarray,
        arrays: tuple[np.ndarray, ...],
        vals: np.ndarray,
    ) -> np.ndarray:
        """Write the demo transition of every replaying slot ``rep`` into the step's output
        ``arrays = (obs, act, rew, term, trunc, nxt)`` and advance the replays; returns the
        slots whose demo ended (their ``nxt`` rows are left for the caller)."""
        obs, act, rew, term, trunc, nxt = arrays
        bank = cast(DemoBank, self._bank)  # set by _bank_replays
        pos = self._pos[rep]
        rows = self._off[rep] + pos
        act[rep], rew[rep] = bank.act[rows], bank.rew[rows]
        rmax, v = self._rmax[rep], vals[rep]
        self._rmax[rep] = np.where(v > rmax, v, rmax)  # Python max(rmax, v): NaN never wins
        ends = pos + 1 == self._len[rep]
        term[rep], trunc[rep] = ends, False
        go = rep[~ends]
        if go.size:
            self._pos[go] += 1
            frames = bank.obs[self._off[go] + self._pos[go]]
            if self.frame_stack == 1:
                nxt[go] = frames
            else:  # roll each stack by one frame: drop the oldest, append the demo's next
                nxt[go] = np.concatenate([obs[go][:, frames.shape[1] :], frames], axis=1)
        return rep[ends]

    def step(
        self,
        action: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        next_obs: np.ndarray,
        value: np.ndarray | None = None,
    ) -> MixedStep:
        """Mix one real vector step (``(N, ...)`` arrays, next_obs after autoreset).

        Args:
            action: ``(N, *act_shape)`` actions the agent took on ``obs[t]``.
            reward: ``(N,)`` rewards (stored as float32).
            terminated, truncated: ``(N,)`` flags of the real transitions.
            next_obs: ``(N, *obs_shape)`` observations after the step (autoreset applied).
            value: ``(N,)`` ``V(obs[t])`` the agent computed (on the demo frame for replaying
                slots): tracks each episode's MaxValue.

        Raises:
            SpecError: bad shapes, or demos whose frames do not match the env's or whose
                observations / actions the env's dtypes cannot hold losslessly (a demo action
                0.5 into int actions: ``demo.actions``), checked before anything changes.
        """
        if self._obs is None:
            raise EmptyBufferError("step: call reset(obs) first")
        n = self.num_envs
        action, next_obs = real_array("action", action), real_array("next_obs", next_obs)
        reward = _float32_column("reward", reward, n)
        term, trunc = flag_array("terminated", terminated, n), flag_array("truncated", truncated, n)
        if action.shape[:1] != (n,) or next_obs.shape != self._obs.shape:
            raise SpecError(
                f"action, next_obs: expected leading axis {n} and obs shape {self._obs.shape}, "
                f"got {action.shape}, {next_obs.shape}"
            )
        vals = self._no_value if value is None else real_array("value", value).astype(float)
        if vals.shape != (n,):
            raise SpecError(f"value: expected shape ({n},), got {vals.shape}")
        if self.track_episodes:
            self._hist.check(action)
        self._check_demos(next_obs.dtype, (action.shape[1:], action.dtype))
        obs, act, rew, nxt = self._obs.copy(), action.copy(), reward.copy(), next_obs.copy()
        replay = self._replaying.copy()
        rep = replay.nonzero()[0]
        if rep.size:
            self._bank_replays(rep, action, next_obs)
        new_ep = self._no_start.copy()
        if self.track_episodes:  # the real step of every slot; env slots read it back
            self._hist.append(self._frames(obs), action, reward)
            self._ep_max = np.where(replay, self._ep_max, np.maximum(self._ep_max, vals))
        t = self._t
        if rep.size:
            ended = self._advance_replays(rep, (obs, act, rew, term, trunc, nxt), vals)
            for i in ended.tolist():  # in slot order: each draw depends on the previous ones
                demo = self._demos[i]
                if self._kind[i] == VALUE_DEMO and value is not None and demo is not None:
                    self.store.update_max_value(demo.demo_id, float(self._rmax[i]))
                nxt[i], new_ep[i] = self._begin(i, next_obs[i], after_demo=True, next_t=t + 1)
        for i in (~replay & (term | trunc)).nonzero()[0].tolist():
            if self.track_episodes:
                self._offer(i)
            nxt[i], new_ep[i] = self._begin(i, next_obs[i], after_demo=False, next_t=t + 1)
        self._t += 1
        self._hist.trim(min(int(self._ep_start.min()), self._t))  # oldest open env episode
        self._obs = nxt.copy()
        return MixedStep(obs, act, rew, term, trunc, nxt, replay, new_ep)
