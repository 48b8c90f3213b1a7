"""Saving and loading a :class:`~rlstore.buffers.replay.ReplayBuffer` (the :class:`ReplayState`
mixin: ``state_dict``, ``load_state_dict``, and ``flush`` / ``open`` of a memory-mapped buffer),
and the checks of a loaded state, all made before the buffer changes
(:meth:`ReplayState.load_state_dict` commits what :func:`checked_state` returns).

A state with valid checksums can still be inconsistent (a file written by other code, or a
state dict edited in memory); the checks accept exactly the states that adds can produce, as
far as one pass over the arrays can tell: config, specs, the ring's shapes, dtypes and
counters, sorted side-store keys with none from the future, one side entry per stored done
transition, the pending-observation flags, and finite floats unless ``allow_nonfinite``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlstore._checks import check_keys
from rlstore._trees import flat_items
from rlstore.checkpoint._atomic import fsync_dir, write_text_atomic
from rlstore.checkpoint._state import (
    load_state,
    metadata_file_path,
    save_state,
    state_file_path,
)
from rlstore.errors import CheckpointError, ConfigError, RLStoreError, SpecError
from rlstore.samplers import make_sampler
from rlstore.specs import FieldSpec, TransitionSchema
from rlstore.storage import MemmapStorage, RingStorage, Storage, StorageLayout
from rlstore.storage.frames import newest_frame_specs
from rlstore.storage.ring import SideStore, _checked_array

if TYPE_CHECKING:
    from typing_extensions import Self

    from rlstore.samplers import Sampler


class ReplayState:
    """Mixin: the state of a ``ReplayBuffer`` (attributes and methods set by the buffer)."""

    capacity: int
    num_envs: int
    capacity_per_env: int
    store_next_obs_once: bool
    allow_nonfinite: bool
    specs: dict[str, FieldSpec] | None
    _schema: TransitionSchema | None
    _pending: list[bytes] | None
    _plan: Any
    _storage: Storage | None
    _side: SideStore | None
    _disc: SideStore | None
    _prev_open: np.ndarray
    _sampler: Sampler
    _layout: StorageLayout
    _clean: bool

    def config(self) -> dict[str, Any]:
        raise NotImplementedError  # provided by ReplayBuffer

    def _allocate(self, specs: dict[str, FieldSpec], storage: Any = None) -> None:
        raise NotImplementedError  # provided by ReplayBuffer

    def state_dict(self) -> dict[str, Any]:
        """Nested dict of numpy arrays and JSON-able scalars restoring this buffer exactly
        (contents, cursor, size, pending observations, sampler state)."""
        return self._state(None if self._storage is None else self._storage.state_dict())

    def _state(self, storage: Any) -> dict[str, Any]:
        return {
            "config": self.config(),
            "storage": storage,
            "side": None if self._side is None else self._side.state_dict(),
            "disc": None if self._disc is None else self._disc.state_dict(),
            "prev_open": self._prev_open.copy(),
            "sampler": self._sampler.state_dict(),
        }

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output; later samples equal the original's.

        The whole state is checked before the buffer changes (all or nothing): the config
        (capacity, num_envs, layout, ``allow_nonfinite``, specs), the ring's arrays and
        counters, the side stores (sorted keys, none from the future, every stored done
        transition's final observation present), the pending-observation flags, finiteness
        of float fields unless ``allow_nonfinite``, and the sampler's state.

        Raises:
            CheckpointError: naming the first entry that is missing or wrong; the buffer is
                unchanged then.
        """
        new = checked_state(self, sd)
        specs, storage, side, disc = (new.pop(k) for k in ("specs", "storage", "side", "disc"))
        n = self.num_envs
        rows = 0 if storage is None else min(storage.size, self.capacity_per_env)
        written = 0 if storage is None else storage.rows_written
        window = ((written - rows) * n, written * n)
        if storage is not None and storage is not sd["storage"] and self._layout.kind == "memmap":
            # new files can still fail (a folder holding other files): check the sampler's
            # state on a twin first, so that the buffer's own changes only once they exist
            twin = make_sampler(self._sampler.config(), None)
            twin.bind((self.capacity_per_env + 1) * n)
            twin.load_state_dict(sd["sampler"], window=window)
            storage = self._layout.adopt(storage, self._storage)
        if self._clean:  # the ring files change: the last flush no longer describes them
            self._mark_unflushed()
        self._sampler.load_state_dict(sd["sampler"], window=window)  # checked before it changes
        if storage is None:
            self.specs = self._schema = self._storage = self._side = self._disc = None
            self._pending = self._plan = None
        else:
            self._allocate(specs, storage)
            self._side, self._disc = side, disc
        self.__dict__.update(new)

    # ------------------------------------------------------------------ memory-mapped files
    def flush(self) -> None:
        """Write a memory-mapped buffer's pages and everything else it needs to reopen
        (:meth:`open`) into its folder. Flush again after the last write: the first write
        after a flush marks the folder, and :meth:`open` refuses it until the next flush.

        Raises:
            ConfigError: the buffer is not memory-mapped.
        """
        if self._layout.kind != "memmap":
            raise ConfigError("flush: only a memory-mapped buffer (StorageLayout.memmap) flushes")
        st = self._storage
        if st is not None:
            st.flush()  # type: ignore[attr-defined]
        counters = None if st is None else st.counters()  # type: ignore[attr-defined]
        directory = str(self._layout.directory)
        save_state(directory, self._state(counters), prefix=_MMAP_PREFIX)
        if st is not None:
            _own_state_files(st, directory)
        _unflushed_marker(directory).unlink(missing_ok=True)  # the state describes the files
        fsync_dir(Path(directory))
        self._clean = True

    def _mark_unflushed(self) -> None:
        """Before a flushed memory-mapped ring changes: leave a durable marker, so that
        :meth:`open` refuses the folder until the next :meth:`flush` (the files would hold rows
        the flushed state does not describe, e.g. a newer observation in the oldest row)."""
        marker = _unflushed_marker(str(self._layout.directory))
        try:
            write_text_atomic(
                marker,
                "The ring files were written after the last flush(); ReplayBuffer.open "
                "refuses them until the buffer is flushed again.\n",
            )
        except OSError as exc:  # the folder went away or turned read-only: nothing written
            raise ConfigError(f"directory: cannot write {str(marker)!r} ({exc})") from exc
        self._clean = False

    @classmethod
    def open(cls, directory: str | Path, *, device: str | None = None) -> Self:
        """Reopen a memory-mapped buffer from its folder after :meth:`flush`, mapping its
        files (no copy); later adds and samples continue exactly.

        Raises:
            CheckpointError: the folder holds no flushed buffer, files that do not match, or
                a ring written after its last flush (a process that ended without flushing
                again: the files hold rows the flushed state does not describe).
        """
        if _unflushed_marker(str(directory)).exists():
            raise CheckpointError(
                f"{directory}: the ring files were written after the last flush() (the process "
                "ended before flushing again), so they no longer match the flushed state"
            )
        sd = dict(load_state(str(directory), prefix=_MMAP_PREFIX))
        cfg = sd.get("config")
        if not isinstance(cfg, Mapping) or not isinstance(cfg.get("storage"), Mapping):
            raise CheckpointError(f"{directory}: expected a flushed memory-mapped ReplayBuffer")
        layout = StorageLayout.memmap(directory, keep=bool(cfg["storage"].get("keep", True)))
        kwargs = {**cfg, "specs": None, "storage": layout}
        if device is not None:
            kwargs["device"] = device
        try:
            buf = cls(**kwargs)  # type: ignore[call-arg]  # ReplayBuffer's constructor
        except (TypeError, RLStoreError) as exc:
            raise CheckpointError(f"{directory}: config does not fit ReplayBuffer ({exc})") from exc
        if sd["storage"] is not None:
            sd["storage"] = MemmapStorage.open(directory, sd["storage"], keep=layout.keep)
            _own_state_files(sd["storage"], str(directory))
        buf.load_state_dict(sd)
        buf._clean = True
        return buf


_MMAP_PREFIX = "replay_"
"""File prefix of the state a memory-mapped buffer's :meth:`ReplayState.flush` writes."""


def _own_state_files(st: Any, directory: str) -> None:
    """With ``keep=False`` the flushed state goes with the ring's files (else it is left behind,
    naming files that no longer exist)."""
    files = [f(directory, _MMAP_PREFIX) for f in (metadata_file_path, state_file_path)]
    st.own([*files, _unflushed_marker(directory)])


def _unflushed_marker(directory: str) -> Path:
    """The file that says a memory-mapped ring changed after its last flush."""
    return Path(directory) / f"{_MMAP_PREFIX}unflushed"


def checked_state(buf: ReplayState, sd: Mapping[str, Any]) -> dict[str, Any]:
    """Check a :meth:`ReplayBuffer.state_dict` whole; return the buffer's new attributes
    (``specs``, ``storage``, ``side``, ``disc`` and the rest), leaving ``buf`` untouched.
    The sampler state is checked by its own setter."""
    check_keys("state_dict", sd, _STATE_KEYS)
    cfg = sd["config"]
    if not isinstance(cfg, Mapping):
        raise CheckpointError(f"state_dict.config: expected a dict, got {type(cfg).__name__}")
    for key in ("capacity", "num_envs", "store_next_obs_once", "allow_nonfinite"):
        value = cfg.get(key)
        if type(value) is not type(getattr(buf, key)) or value != getattr(buf, key):
            raise CheckpointError(
                f"state_dict.config.{key}: expected {getattr(buf, key)!r}, got {value!r}"
            )
    seed = cfg.get("seed")
    if seed is not None and (type(seed) is not int or seed < 0):
        raise CheckpointError(f"state_dict.config.seed: expected an int >= 0, got {seed!r}")
    n = buf.num_envs
    prev_open = sd["prev_open"]
    _checked_array("state_dict.prev_open", prev_open, (n,), np.dtype(bool))
    new: dict[str, Any] = {"_seed": seed, "_prev_open": prev_open.copy()}
    new["_prev_open_any"] = bool(prev_open.any())
    new["_prev_all"] = bool(prev_open.all())
    if sd["storage"] is None:
        if sd["side"] is not None or sd["disc"] is not None or cfg.get("specs") is not None:
            raise CheckpointError(
                "state_dict: storage is None (nothing added yet) but specs/side/disc are not"
            )
        if new["_prev_open_any"]:
            raise CheckpointError("state_dict.prev_open: expected all False before any add")
        return {**new, "specs": None, "storage": None, "side": None, "disc": None}
    try:
        specs = TransitionSchema.parse(cfg.get("specs"))
    except (SpecError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"state_dict.config.specs: malformed ({exc!r})") from exc
    if specs is None or (buf.specs is not None and specs != buf.specs):
        raise CheckpointError(f"state_dict.config.specs: expected {buf.specs}, got {specs}")
    raw = sd["storage"]
    if isinstance(raw, RingStorage):  # mapped by ReplayBuffer.open: trusted, not scanned
        st: Storage = raw
    else:
        _check_finite(raw, "storage", buf.allow_nonfinite)
        st = buf._layout.load(raw, where="state_dict.storage")
    stored = stored_specs(specs, buf.store_next_obs_once)
    if st.specs != stored or (st.rows, st.num_envs) != (
        buf.capacity_per_env + 1,
        n,
    ):
        raise CheckpointError(
            f"state_dict.storage: expected fields {list(stored.values())} with "
            f"{buf.capacity_per_env + 1} rows x {n} envs, got {list(st.specs.values())} "
            f"with {st.rows} x {st.num_envs}"
        )
    obs_specs = side_specs(specs, buf._layout)
    side, disc = SideStore(obs_specs), SideStore(obs_specs, capacity=1)
    rows_max = (buf.capacity_per_env + 1) * n
    bound = {"max_key": st.rows_written * n, "max_capacity": 3 * rows_max + 16}
    side.load_state_dict(sd["side"], where="state_dict.side", **bound)
    disc.load_state_dict(sd["disc"], where="state_dict.disc", **bound)
    for name in ("side", "disc"):
        _check_finite(sd[name], name, buf.allow_nonfinite)
    _check_consistent(st, side, disc, prev_open, buf.capacity_per_env, buf.store_next_obs_once)
    return {**new, "specs": specs, "storage": st, "side": side, "disc": disc}


_STATE_KEYS = ("config", "storage", "side", "disc", "prev_open", "sampler")
"""Keys of :meth:`ReplayBuffer.state_dict`."""


def side_specs(specs: dict[str, FieldSpec], layout: StorageLayout) -> dict[str, FieldSpec]:
    """Specs of the side stores' items: the observation fields, cut to their newest frame on
    the frames layout (the buffer checks that every ``next_obs`` continues its ``obs``)."""
    obs = {k: s for k, s in specs.items() if k == "obs" or k.startswith("obs.")}
    if layout.kind != "frames":
        return obs
    return newest_frame_specs(obs, layout.stack_axis, layout.frame_fields)


def stored_specs(specs: dict[str, FieldSpec], once: bool) -> dict[str, FieldSpec]:
    """Specs of the ring's fields: ``specs`` plus ``next_<obs>`` unless ``once``."""
    stored = dict(specs)
    if not once:
        obs = [k for k in specs if k == "obs" or k.startswith("obs.")]
        stored.update({"next_" + k: FieldSpec("next_" + k, specs[k].shape, specs[k].dtype)
                       for k in obs})  # fmt: skip
    return stored


def _check_finite(sd: Any, name: str, allow_nonfinite: bool) -> None:
    """Every float array of a state (any storage layout, walked as a tree) is finite unless
    allowed."""
    if allow_nonfinite:
        return
    for key, arr in flat_items(sd).items():
        if isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and not np.isfinite(arr).all():
            where = f"state_dict.{name}.{key.replace('/', '.')}"
            raise CheckpointError(
                f"{where}: expected finite values (allow_nonfinite is False), got NaN/inf"
            )


def _check_consistent(
    st: Storage,
    side: SideStore,
    disc: SideStore,
    prev_open: np.ndarray,
    capacity_per_env: int,
    once: bool,
) -> None:
    """Cross-checks of a loaded state that only adds could have produced.

    Every stored done transition (``terminated | truncated``) among the live rows has its
    final observation in ``side``, and ``side`` holds no other live key; live ``disc`` keys
    are transitions that did not end; ``prev_open`` is "the newest row did not end"; float
    fields are finite unless ``allow_nonfinite``. Keys below the live range are dead entries
    the side stores drop lazily, and are allowed.
    """
    n, written = st.num_envs, st.rows_written
    if not once or written == 0:
        if side.n or disc.n or prev_open.any():
            raise CheckpointError(
                "state_dict: side/disc entries or open rows where none can exist "
                f"(store_next_obs_once={once}, rows_written={written})"
            )
        return
    flags = st.gather(np.arange(st.rows * n), ["terminated", "truncated"])
    done = (flags["terminated"] | flags["truncated"]).reshape(st.rows, n)  # (C + 1, n)
    if not np.array_equal(prev_open, ~done[(st.cursor - 1) % st.rows]):
        raise CheckpointError(
            "state_dict.prev_open: expected the newest row's 'not done' flags "
            f"{(~done[(st.cursor - 1) % st.rows]).tolist()}, got {prev_open.tolist()}"
        )
    g = np.arange(written - min(st.size, capacity_per_env), written)  # live global rows
    live_done = done[g % st.rows]  # (rows, n)
    rows, cols = np.nonzero(live_done)
    need = g[rows] * n + cols  # sorted: row-major order of (row, col)
    lo = int(g[0]) * n if len(g) else written * n
    side_live = side.keys[: side.n][side.keys[: side.n] >= lo]
    if not np.array_equal(side_live, need):
        raise CheckpointError(
            f"state_dict.side.keys: expected the live done transitions {need[:8].tolist()}"
            f"{'...' if len(need) > 8 else ''}, got {side_live[:8].tolist()}"
            f"{'...' if len(side_live) > 8 else ''}"
        )
    disc_live = disc.keys[: disc.n][disc.keys[: disc.n] >= lo]
    if disc_live.size and live_done[disc_live // n - int(g[0]), disc_live % n].any():
        raise CheckpointError(
            "state_dict.disc.keys: expected transitions that did not end, got done ones"
        )
