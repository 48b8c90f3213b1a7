"""Frame-deduplicated ring storage: stacked observations (Atari ``(4, 84, 84)`` uint8) kept once.

Consecutive observations of an episode share ``S - 1`` of their ``S`` frames. For each frame
field, row ``g`` (global, counted from the first write) of env ``e`` keeps only its newest frame
and a *kind* saying where its ``S - 1`` older frames come from:

* ``LINK``: they are the previous row's frames (``obs[:-1] == previous obs[1:]`` along the
  stack axis, detected by content, so sharing is always exact);
* ``REPEAT``: all equal to its own newest frame (a reset padded by repetition, gymnasium);
* ``ZERO``: all zero (a reset padded with zeros, Stable-Baselines3 ``VecFrameStack``);
* ``SIDE``: anything else (a discontinuity): kept in a compact keyed
  :class:`~rlstore.storage.SideStore` under ``g * num_envs + e``.

A stack is rebuilt by following at most ``S - 1`` links back (numba kernels classify, write
and rebuild, one pass over a block or batch). The newest frames live in a ring of
``rows + S - 1`` rows, so the oldest live row still finds the ``S - 1`` frames before it after
any wrap-around. A ``put_row`` of frame fields at the cursor (the buffer's pending
``next_obs``) is kept whole until ``write_block`` writes that row. Other fields go to an
ordinary :class:`~rlstore.storage.RingStorage`. Per transition this costs one frame plus one
byte, plus ``S - 1`` frames per discontinuity or episode start that is neither zero- nor
repeat-padded.

Example:
    >>> import numpy as np
    >>> from rlstore.specs import FieldSpec
    >>> st = FrameStackStorage(8, 1, {"obs": FieldSpec("obs", (4, 2, 2), np.uint8)})
    >>> frames = np.arange(12, dtype=np.uint8).repeat(4).reshape(12, 2, 2)
    >>> obs = np.stack([frames[t : t + 4] for t in range(6)])[:, None]  # (6, 1, 4, 2, 2)
    >>> st.write_block({"obs": obs})
    >>> bool((st.gather(np.arange(6))["obs"] == obs[:, 0]).all()), st.frames["obs"].side.n
    (True, 1)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlstore._checks import check_keys
from rlstore.errors import CapacityError, CheckpointError, RLStoreError, SpecError
from rlstore.specs import FieldSpec
from rlstore.storage._frame_ring import (
    LINK,
    SIDE,
    FrameRing,
    as_words,
    kernels,
    store_layout,
    word_of,
)
from rlstore.storage.ring import RingStorage

__all__ = ["FrameStackStorage"]

_SCALARS = {int, float, bool}
"""Python scalars: shape ``()`` (``np.shape`` would build an array: a microsecond)."""


def _frame_names(specs: Mapping[str, FieldSpec], axis: int, names: Any) -> list[str]:
    """Frame-stack fields: ``names`` (checked), else every uint8 ``obs`` / ``obs.<key>`` with a
    stack axis of size >= 2."""

    def stacked(s: FieldSpec | None) -> bool:
        return s is not None and -len(s.shape) <= axis < len(s.shape) and s.shape[axis] >= 2

    if names is None:
        names = [k for k, s in specs.items() if k.split(".")[0] == "obs" and stacked(s)]
        names = [k for k in names if specs[k].dtype == np.uint8]
    for k in names:
        if not stacked(specs.get(k)):
            raise SpecError(f"frame_fields: {k!r}: expected a field with a stack axis {axis} of "
                            f"size >= 2, got {specs.get(k)}")  # fmt: skip
    if not names:
        raise SpecError(f"specs: expected a frame-stack field (obs or obs.<key>, uint8, stack "
                        f"axis {axis} of size >= 2), got {list(specs.values())}")  # fmt: skip
    return list(names)


def newest_frame_specs(
    specs: Mapping[str, FieldSpec], axis: int, names: Sequence[str] | None = None
) -> dict[str, FieldSpec]:
    """``specs`` with every frame-stack field (``names``, else the default ones) cut to its
    newest frame (stack axis of size 1): what a buffer keeps aside for a ``next_obs`` that
    continues its ``obs`` (see :func:`check_shared_frames`); the rest of the stack is rebuilt
    from ``obs``."""
    names = _frame_names(specs, axis, names)
    out = dict(specs)
    for k in names:
        shape = list(specs[k].shape)
        shape[axis] = 1
        out[k] = FieldSpec(k, tuple(shape), specs[k].dtype)
    return out


def newest_frame(value: np.ndarray, axis: int, item_ndim: int) -> np.ndarray:
    """The newest frame of stacks ``(..., *item)`` (the stack axis kept, of size 1)."""
    ax = value.ndim - item_ndim + axis % item_ndim
    return value[(slice(None),) * ax + (slice(-1, None),)]


def restack(obs: np.ndarray, newest: np.ndarray, axis: int, item_ndim: int) -> np.ndarray:
    """The stacks that continue ``obs`` with the frames ``newest`` (both ``(..., *item)``)."""
    ax = obs.ndim - item_ndim + axis % item_ndim
    return np.concatenate([obs[(slice(None),) * ax + (slice(1, None),)], newest], axis=ax)


@functools.lru_cache(maxsize=256)
def _stack_layout(spec: FieldSpec, axis: int) -> tuple[int, int, int, np.dtype] | None:
    """``(stack axis >= 0, S, frame size, word)`` of a uint8 frame-stack field, else None."""
    shape = spec.shape
    if spec.dtype != np.uint8 or not -len(shape) <= axis < len(shape) or shape[axis] < 2:
        return None
    size = math.prod(shape) // shape[axis]
    return axis % len(shape), shape[axis], size, word_of(size, 1)


def check_shared_frames(
    specs: Mapping[str, FieldSpec],
    axis: int,
    obs: Mapping[str, np.ndarray],
    next_obs: Mapping[str, np.ndarray],
    names: Sequence[str] | None = None,
) -> None:
    """Check that every transition's ``next_obs`` stack continues its ``obs`` stack: frames
    ``1..S-1`` of ``obs`` are frames ``0..S-2`` of ``next_obs`` (arrays ``(k, num_envs, *shape)``
    of the frame-stack fields: ``names``, else the uint8 stacks among ``obs``'s keys; one
    compiled pass over the words).

    Raises:
        SpecError: naming the field, the first env and row whose stacks do not share frames;
            a named field that is not an observation's uint8 stack; or no frame-stack field.
    """
    checked = False
    for k in obs if names is None else names:
        layout = _stack_layout(specs[k], axis) if k in specs and k in obs else None
        if layout is None and names is not None:
            raise SpecError(f"frame_fields: {k!r}: expected a uint8 observation field with a "
                            f"stack axis {axis} of size >= 2, got {specs.get(k)}")  # fmt: skip
        if layout is None:
            continue
        a = obs[k]
        checked, (ax, depth, size, word) = True, layout
        lead = a.shape[:2]
        bad = kernels()[2](
            as_words(a, lead, ax, depth, size, word),
            as_words(next_obs[k], lead, ax, depth, size, word),
        )
        if bad >= 0:
            t, e = divmod(bad, a.shape[1])
            raise SpecError(
                f"next_{k}: expected frames 0..{depth - 2} along stack axis {axis} to equal "
                f"frames 1..{depth - 1} of {k} (storage kind 'frames' stores each frame "
                f"once), got a stack that shares none at row {t}, env {e}"
            )
    if not checked:
        _frame_names(specs, axis, None)  # raises: no frame-stack field


def _item(v: Any, name: str, shape: tuple[int, ...], item: tuple[int, ...] | None) -> Any:
    """A ring field's value of one row: ``v`` of the row ``shape`` (one env: its item), or of
    the ``item`` shape (one env only).

    Raises:
        SpecError: naming the field, the expected and the given shape.
    """
    got = np.shape(v)
    if got == shape:
        return v if item is None else v[0]
    if got == item:
        return v
    raise SpecError(f"{name}: expected an array of shape {shape}, got {got}")


class FrameStackStorage:
    """A ring of ``rows x num_envs`` items whose frame-stack fields keep each frame once.

    The :class:`~rlstore.storage.Storage` protocol: ``write_block`` (with an optional
    ``continuing`` mask), ``put_row`` (frame fields only at ``cursor``: the pending next row),
    ``gather``, ``state_dict`` / ``from_state_dict``, ``cursor``, ``rows_written``, ``size``,
    ``nbytes``.

    Args:
        rows: physical rows (> 0).
        num_envs: env columns (> 0).
        specs: ``{name: FieldSpec}``; a frame field's spec is the whole stack, e.g.
            ``(4, 84, 84)`` uint8.
        stack_axis: the stack axis of the frame fields' item shape (negative counts from the
            end).
        frame_fields: the frame-stack fields (any dtype); default: every uint8 ``obs`` /
            ``obs.<key>`` with a stack axis of size >= 2.

    Raises:
        CapacityError: ``rows`` or ``num_envs`` not an int > 0.
        SpecError: no frame-stack field, or a named one without a stack axis of size >= 2.
    """

    def __init__(
        self,
        rows: int,
        num_envs: int,
        specs: Mapping[str, FieldSpec],
        *,
        stack_axis: int = 0,
        frame_fields: Sequence[str] | None = None,
    ):
        names = self._layout(rows, num_envs, specs, stack_axis, frame_fields)
        others = {k: s for k, s in self.specs.items() if k not in names}
        self.ring = RingStorage(self.rows, self.num_envs, others)
        self.frames = {
            k: FrameRing(self.specs[k], self.stack_axis, self.rows, self.num_envs, None)
            for k in names
        }
        self._clock = self.frames[names[0]].store  # its counters are every ring's counters
        self._plan()

    def _layout(
        self, rows: Any, n: Any, specs: Mapping[str, FieldSpec], axis: Any, names: Any
    ) -> list[str]:
        for arg, v in (("rows", rows), ("num_envs", n), ("stack_axis", axis)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
                raise CapacityError(f"{arg}: expected an int, got {v!r}")
            if arg != "stack_axis" and v < 1:
                raise CapacityError(f"{arg}: expected > 0, got {v}")
        self.rows, self.num_envs, self.stack_axis = int(rows), int(n), int(axis)
        self.specs: dict[str, FieldSpec] = dict(specs)
        return _frame_names(self.specs, self.stack_axis, names)

    @property
    def rows_written(self) -> int:
        """Rows ever written by :meth:`write_block` (puts not counted)."""
        return self._clock.rows_written

    @property
    def cursor(self) -> int:
        """Physical row the next write goes to."""
        return self.rows_written % self.rows

    @property
    def size(self) -> int:
        """Rows holding written data, ``min(rows_written, rows)``."""
        return min(self.rows_written, self.rows)

    @property
    def nbytes(self) -> int:
        """Bytes held: the ring, the frame rings, side stores and pending stacks."""
        return self.ring.nbytes + sum(
            f.store.nbytes + f.side.nbytes + f.next.nbytes for f in self.frames.values()
        )

    def _plan(self) -> None:
        """What a write checks, computed once per layout: the frame fields' positions in
        ``specs`` order, the ring fields' positions, names, row and (one env) item shapes, and
        the shapes a row of ring fields arrives with when nothing needs converting."""
        n, fields = self.num_envs, list(self.specs.items())
        self._stack_at = [
            (i, k, self.frames[k]) for i, (k, _) in enumerate(fields) if k in self.frames
        ]
        plain = [(i, k, s.shape) for i, (k, s) in enumerate(fields) if k not in self.frames]
        self._plain_at = [i for i, _, _ in plain]
        self._plain_specs = [(k, (n, *shape), shape if n == 1 else None) for _, k, shape in plain]
        self._plain_want = [shape if n == 1 else (n, *shape) for _, _, shape in plain]

    def write_block(self, values: Mapping[str, np.ndarray], continuing: Any = None) -> None:
        """Write every field ``(k, num_envs, *shape)`` at ``cursor``; it advances ``k`` rows.

        Args:
            values: one array per field, ``k <= rows``.
            continuing: optional bool ``(k, num_envs)``: rows declared to continue the previous
                row of their env; their stacks must share ``S - 1`` frames with it.

        Raises:
            SpecError: missing or unexpected fields, wrong shapes or frame dtypes, or a declared
                continuation that does not share frames; nothing is written then.
            CapacityError: ``k > rows``.
        """
        k = next((int(s[0]) for s in map(np.shape, values.values()) if s), 0)  # (a scalar: named)
        if k > self.rows:
            raise CapacityError(f"block: expected at most rows={self.rows} rows, got {k}")
        if values.keys() != self.specs.keys():
            raise SpecError(f"values: expected the fields {sorted(self.specs)}, got "
                            f"{sorted(values)}")  # fmt: skip
        lead = (k, self.num_envs)
        stacks = [(f, f.words(name, values[name], lead)) for _, name, f in self._stack_at]
        plain = {}
        for name, shape, _ in self._plain_specs:
            v = values[name]
            if getattr(v, "shape", None) != (k, *shape):
                raise SpecError(f"{name}: expected an array of shape {(k, *shape)}, got "
                                f"{getattr(v, 'shape', type(v).__name__)}")  # fmt: skip
            plain[name] = v
        if continuing is not None and (
            getattr(continuing, "shape", None) != lead or continuing.dtype != np.bool_
        ):
            got = f"{np.shape(continuing)} {getattr(continuing, 'dtype', type(continuing))}"
            raise SpecError(f"continuing: expected a bool array of shape {lead}, got {got}")
        if not k:
            return
        if continuing is not None:  # a first pass classifies only
            for f, w in stacks:
                self._check_continuing(f, w, f.write(w, commit=False), continuing)
        if plain:
            self.ring.write_block(plain)
        for f, w in stacks:
            f.write(w)

    def _check_continuing(
        self, f: FrameRing, w: np.ndarray, kind: np.ndarray, continuing: np.ndarray
    ) -> None:
        """Raise if a row declared continuing does not share ``S - 1`` frames with the previous
        row of its env (``w (k, n, S, W)`` of kinds ``kind``)."""
        broken = np.nonzero(continuing & (kind != LINK))
        if not len(broken[0]):
            return
        t, e = int(broken[0][0]), int(broken[1][0])
        g = np.array([f.store.rows_written - 1])  # the stored row before block row 0
        ref = w[t - 1, e] if t else f.read(g, np.array([e]))[0].view(f.word) if g[0] >= 0 else None
        name = next(k for k, ring in self.frames.items() if ring is f)
        got = (
            "no previous row"
            if ref is None
            else f"{(w[t, e, :-1] == ref[1:]).all(axis=1).sum()} of {f.depth - 1} equal"
        )
        raise SpecError(
            f"{name}: env {e} block row {t} was declared continuing: expected "
            f"{name}[:-1] along stack axis {f.axis} to equal the previous row's "
            f"{name}[1:] ({f.depth - 1} shared frames), got {got}"
        )

    def write_row(self, values: Sequence[Any]) -> None:
        """One row at ``cursor`` (one value per field in ``specs`` order, each
        ``(num_envs, *shape)``, or ``shape`` with one env): :meth:`write_block` of one row.

        Raises:
            SpecError: not one value per field, a wrong shape or frame dtype; nothing is
                written then.
        """
        if len(values) != len(self.specs):
            raise SpecError(f"values: expected one per field {list(self.specs)}, got "
                            f"{len(values)}")  # fmt: skip
        lead = (1, self.num_envs)
        stacks = [(f, f.words(name, values[i], lead, row=True)) for i, name, f in self._stack_at]
        plain = [values[i] for i in self._plain_at]
        if [() if type(v) in _SCALARS else getattr(v, "shape", None) for v in plain] != (
            self._plain_want
        ):
            plain = [_item(v, *spec) for v, spec in zip(plain, self._plain_specs, strict=True)]
        if plain:
            self.ring.write_row(plain)
        for f, w in stacks:
            f.write(w)

    def put_row(self, row: int, values: Mapping[str, np.ndarray]) -> None:
        """Overwrite some fields ``(num_envs, *shape)`` of physical ``row``; cursor unchanged.

        Frame fields can only be put at ``cursor``: they are the pending next row (global row
        ``rows_written``), which the next :meth:`write_block` writes again.

        Raises:
            SpecError: unknown field, wrong shape or frame dtype, or a frame field put at a
                row other than ``cursor``; nothing is written then.
        """
        if not isinstance(row, (int, np.integer)) or not 0 <= row < self.rows:
            raise CapacityError(f"row: expected an int in [0, {self.rows}), got {row!r}")
        if not values.keys() <= self.specs.keys():
            raise SpecError(f"values: expected some of the fields {sorted(self.specs)}, got "
                            f"{sorted(values)}")  # fmt: skip
        frames, lead = self.frames, (self.num_envs,)
        stacks, plain = [], {}
        for name, v in values.items():
            if (f := frames.get(name)) is not None:
                stacks.append((f, f.words(name, v, lead, row=True)))
                continue
            shape, got = (*lead, *self.specs[name].shape), np.shape(v)
            if got != shape and not (lead == (1,) and got == shape[1:]):
                raise SpecError(f"{name}: expected an array of shape {shape}, got {got}")
            plain[name] = v
        if stacks and row != self._clock.rows_written % self.rows:  # (the cursor)
            raise SpecError(f"row: frame fields {[f for f in values if f in frames]} can "
                            f"only be put at the cursor row {self.cursor} (the pending next "
                            f"row), got row {row}")  # fmt: skip
        if plain:
            self.ring.put_row(row, plain)
        for f, w in stacks:
            f.put(w)

    def gather(self, flat: np.ndarray, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Contiguous copies ``{name: (B, *shape)}`` at ``flat = physical_row * num_envs + env``,
        stacks rebuilt (zeros in rows never written, like a fresh ring).

        Raises:
            SpecError: an unknown name, or ``flat`` not 1-D ints in ``[0, rows * num_envs)``.
        """
        names = list(self.specs) if names is None else list(names)
        if set(names) - set(self.specs):
            raise SpecError(f"names: expected fields of {sorted(self.specs)}, got {names}")
        flat, top = np.asarray(flat), self.rows * self.num_envs
        if (
            flat.dtype.kind not in "iu"
            or flat.ndim != 1
            or (flat.size and (flat.min() < 0 or flat.max() >= top))
        ):
            raise SpecError(f"flat: expected 1-D ints in [0, {top}), got {flat.dtype} {flat!r}")
        row, env = np.divmod(flat.astype(np.int64), self.num_envs)
        back, rw = (self.cursor - row) % self.rows, self.rows_written
        plain = [k for k in names if k not in self.frames]
        out = self.ring.gather(flat, plain) if plain else {}
        for k in names:
            if (f := self.frames.get(k)) is not None:
                g = rw - back
                g[back == 0] = rw if f.pending else rw - self.rows  # a put row, or the oldest
                x = f.read(g, env).reshape(len(g), f.depth, *f.frame)
                out[k] = np.ascontiguousarray(np.moveaxis(x, 1, 1 + f.axis)) if f.axis else x
        return {k: out[k] for k in names}

    def state_dict(self) -> dict[str, Any]:
        """Copies: the ring's and every frame field's ring and side store states, pending flags
        and stacks (``next``), and the JSON-able layout (rows, envs, stack axis, specs)."""
        return {
            "rows": self.rows,
            "num_envs": self.num_envs,
            "stack_axis": self.stack_axis,
            "specs": [s.to_json() for s in self.specs.values()],
            "ring": self.ring.state_dict(),
            "frames": {
                k: {
                    "store": f.store.state_dict(),
                    "side": f.side.state_dict(),
                    "pending": f.pending,
                    "next": f.next.copy(),
                }
                for k, f in self.frames.items()
            },
        }

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, Any], *, where: str = "storage") -> FrameStackStorage:
        """Rebuild a storage from :meth:`state_dict` output, checked whole: the layout, every
        ring and side store, one ``rows_written``, a side entry for every live ``SIDE`` row.

        Raises:
            CheckpointError: naming the first entry that is missing or wrong.
        """
        check_keys(where, sd, ("rows", "num_envs", "stack_axis", "specs", "ring", "frames"))
        st, frames = cls.__new__(cls), sd["frames"]
        try:
            specs = {d["name"]: FieldSpec.from_json(d) for d in sd["specs"]}
            if not isinstance(frames, Mapping):
                raise SpecError(f"frames: expected a dict, got {type(frames).__name__}")
            st._layout(sd["rows"], sd["num_envs"], specs, sd["stack_axis"], list(frames))
        except (RLStoreError, TypeError, KeyError) as exc:
            raise CheckpointError(f"{where}: bad layout ({type(exc).__name__}: {exc})") from None
        st.ring, n = RingStorage.from_state_dict(sd["ring"], where=f"{where}.ring"), st.num_envs
        others = {k: s for k, s in specs.items() if k not in frames}  # rows: checked key of sd
        if (sd["ring"]["capacity_per_env"], st.ring.num_envs, st.ring.specs) != (
            st.rows,
            n,
            others,
        ):
            raise CheckpointError(f"{where}.ring: expected {st.rows} rows x {n} envs of {others}")
        counts, st.frames = {st.ring.rows_written} if others else set(), {}
        for k, fsd in frames.items():
            at = f"{where}.frames.{k}"
            check_keys(at, fsd, ("store", "side", "pending", "next"))
            store = RingStorage.from_state_dict(fsd["store"], where=f"{at}.store")
            slots, kept = store_layout(specs[k], st.stack_axis, st.rows)
            if (store.specs, fsd["store"]["capacity_per_env"], store.num_envs) != (kept, slots, n):
                raise CheckpointError(f"{at}.store: expected {slots} rows x {n} envs of {kept}")
            f = st.frames[k] = FrameRing(specs[k], st.stack_axis, st.rows, n, store)
            nxt, want = fsd["next"], (f.next.shape, f.next.dtype)
            if not isinstance(nxt, np.ndarray) or (nxt.shape, nxt.dtype) != want:
                raise CheckpointError(f"{at}.next: expected an array {want}, got {nxt!r:.80}")
            if not isinstance(fsd["pending"], bool):
                raise CheckpointError(f"{at}.pending: expected a bool, got {fsd['pending']!r}")
            f.pending, f.next[:], rw = fsd["pending"], nxt, store.rows_written
            top = rw * n
            f.side.load_state_dict(
                fsd["side"], max_key=top, max_capacity=2 * top + 16, where=f"{at}.side"
            )
            g = np.arange(max(rw - f.slots + 1, 0), rw)
            kind = store.arrays["kind"][g % f.slots]
            t, e = np.nonzero(kind == SIDE)
            bad = (kind > SIDE).any() or (len(g) and g[0] == 0 and (kind[0] == LINK).any())
            if bad or not f.side.lookup(g[t] * n + e)[0].all():
                raise CheckpointError(f"{at}: kinds out of range or a SIDE row without side frames")
            counts.add(rw)
        if len(counts) > 1:
            raise CheckpointError(f"{where}: expected one rows_written for all rings, got {counts}")
        st._clock = next(iter(st.frames.values())).store
        st._plan()
        return st
