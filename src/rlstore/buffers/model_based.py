"""Replay for model-based RL: circular storage and an MBPO-style train/validation split.

:class:`ModelBasedReplay` keeps named fields in the replay buffers' ring
(:class:`~rlstore.storage.RingStorage`, one env column, ``max_size`` rows, allocated from the first
insert) with a write cursor ``step`` and a fill level ``size``.

**Decision on PyTorchRL's ``MBReplayBuffer.get_all_buffer_data`` (``[:step]``).** It returns
the rows before the cursor, which after a wrap-around is only the newest part (and nothing right
after a wrap that lands on 0). rlstore does not copy that: :meth:`ModelBasedReplay.get_all`
returns all ``size`` rows in chronological order (oldest first), which equals ``[:step]`` until
the first wrap-around. :meth:`get_data_slice` indexes the same chronological order, so
``other.insert_data_slice(buf.get_data_slice(0, len(buf)))`` reproduces a buffer.

:meth:`ModelBasedReplay.train_validation_split` follows MBPO (Janner et al. 2019,
``mbpo/models/bnn.py``): a seeded random permutation, ``|holdout| = min(floor(N * ratio),
max_holdout)`` first permuted rows, train = the rest, and ``(E, N_train)`` with-replacement
bootstrap indices per ensemble member. :func:`model_dataset` builds inputs
``concat(obs, action)`` (one-hot for discrete actions) and targets
``concat(next_obs - obs, reward)``, with a :class:`StandardScaler` fit on the train rows only
(the older PyTorchRL split fit it on all rows, leaking holdout statistics).
:func:`ensemble_minibatches` reshuffles each member's bootstrap rows every epoch and yields
``ceil(N_train / batch_size)`` non-empty batches (PyTorchRL's ``N // mbs + 1`` yielded an empty
last batch when ``mbs`` divides ``N``).

Example:
    >>> import numpy as np
    >>> buf = ModelBasedReplay(5)
    >>> buf.insert_data_slice({"x": np.arange(3.0)[:, None]})
    >>> buf.insert_data_slice({"x": np.arange(3.0, 7.0)[:, None]})
    >>> buf.get_all()["x"][:, 0].tolist(), buf.step, len(buf)
    ([2.0, 3.0, 4.0, 5.0, 6.0], 2, 5)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from rlstore._checks import check_count, real_number
from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError
from rlstore.samplers import make_rng, rng_state, set_rng_state
from rlstore.specs import FieldSpec, cast_to_spec
from rlstore.storage import RingStorage

__all__ = [
    "ModelBasedReplay",
    "DataSplit",
    "StandardScaler",
    "ModelDataset",
    "ModelMinibatch",
    "model_dataset",
    "ensemble_minibatches",
]

Seed = int | np.random.Generator | None


class DataSplit(NamedTuple):
    """Chronological row indices (into :meth:`ModelBasedReplay.get_all`) of a split.

    ``train (N_train,)`` and ``holdout (N_hold,)`` int64 partition ``range(N)``;
    ``bootstrap (E, N_train)`` int64 are positions into ``train`` (one with-replacement draw per
    ensemble member; ``train[bootstrap[e]]`` are member e's rows).
    """

    train: np.ndarray
    holdout: np.ndarray
    bootstrap: np.ndarray


class ModelBasedReplay:
    """Circular storage of named fields for dynamics-model training.

    Args:
        max_size: capacity in rows (transitions), >= 1.
        seed: default seed of :meth:`train_validation_split` (int, Generator or None).
    """

    def __init__(self, max_size: int, *, seed: Seed = None) -> None:
        if (
            isinstance(max_size, bool)
            or not isinstance(max_size, (int, np.integer))
            or max_size < 1
        ):
            raise CapacityError(f"max_size: expected a positive int, got {max_size!r}")
        self.max_size = int(max_size)
        self._ring: RingStorage | None = None
        self.rng = make_rng(seed)

    def __len__(self) -> int:
        return self.size

    @property
    def step(self) -> int:
        """Physical write cursor."""
        return 0 if self._ring is None else self._ring.cursor

    @property
    def size(self) -> int:
        """Rows stored."""
        return 0 if self._ring is None else self._ring.size

    @property
    def data(self) -> dict[str, np.ndarray]:
        """The physical storage ``{field: (max_size, *shape)}`` (views into the ring, not in
        chronological order); ``{}`` before the first insert."""
        return {} if self._ring is None else {k: a[:, 0] for k, a in self._ring.arrays.items()}

    @data.setter
    def data(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Replace the storage by copies of ``arrays`` (``(max_size, *shape)`` each); the cursor
        and fill level are kept."""
        ring = self._new_ring({k: FieldSpec(k, a.shape[1:], a.dtype) for k, a in arrays.items()})
        for k, a in arrays.items():
            ring.arrays[k][:, 0] = a
        if self._ring is not None:
            ring.cursor, ring.size, ring.rows_written = (
                self._ring.cursor, self._ring.size, self._ring.rows_written)  # fmt: skip
        self._ring = ring

    def _new_ring(self, specs: dict[str, FieldSpec]) -> RingStorage:
        try:
            return RingStorage(self.max_size, 1, specs, packed=False)
        except CapacityError as exc:
            raise CapacityError(f"max_size: {exc}") from None

    def config(self) -> dict[str, Any]:
        """JSON-able constructor kwargs (the RNG state lives in :meth:`state_dict`)."""
        return {"max_size": self.max_size}

    # ------------------------------------------------------------------ writing
    def _check(self, new_data: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        """Validate a whole insert; nothing is written or allocated here.

        Every field must have the same leading length; later inserts must match the stored row
        shapes and convert losslessly to the stored dtypes (the rules of
        :func:`rlstore.specs.cast_to_spec`: no float -> int, no complex/object/str, integers in
        range); float fields must be finite.
        """
        if not isinstance(new_data, Mapping) or not new_data:
            raise SpecError(f"new_data: expected a non-empty dict of arrays, got {new_data!r}")
        keys = [str(k) for k in new_data]
        if self.data and sorted(keys) != sorted(self.data):
            raise SpecError(f"new_data: expected fields {sorted(self.data)}, got {sorted(keys)}")
        raw: dict[str, np.ndarray] = {}
        for k, v in zip(keys, new_data.values(), strict=True):
            if isinstance(v, Mapping):
                raise SpecError(f"{k}: expected an array with a leading row axis, got a dict")
            try:
                raw[k] = np.asarray(v)
            except (TypeError, ValueError, RuntimeError) as exc:
                raise SpecError(f"{k}: expected an array, got {type(v).__name__}") from exc
        lengths = {k: (a.shape[0] if a.ndim else None) for k, a in raw.items()}
        n = lengths[keys[0]]
        if n is None or any(v != n for v in lengths.values()):
            raise SpecError(
                f"new_data: expected every field with one leading axis L, got {lengths}"
            )
        arrays = {}
        for k, a in raw.items():
            stored = self.data.get(k)
            spec = (
                FieldSpec(k, a.shape[1:], a.dtype)  # first insert: dtype kept (bool/int/float)
                if stored is None
                else FieldSpec(k, stored.shape[1:], stored.dtype)
            )
            arrays[k] = cast_to_spec(k, a, spec, (n,), allow_nonfinite=False)
        return arrays, n

    def insert_data_slice(self, new_data: Mapping[str, Any]) -> None:
        """Append ``L`` rows (``{field: (L, *shape)}``) at the cursor, wrapping circularly.

        Storage is allocated from the first call (dtype of each field kept). With
        ``L > max_size`` only the newest ``max_size`` rows remain.

        Raises:
            SpecError: missing/extra fields, unequal lengths, wrong row shapes, a lossy cast
                (1.7 into an int field), NaN/inf; a rejected call leaves the buffer unchanged.
        """
        arrays, n = self._check(new_data)
        if self._ring is None:
            self._ring = self._new_ring({k: FieldSpec(k, a.shape[1:], a.dtype)
                                         for k, a in arrays.items()})  # fmt: skip
        ring, keep = self._ring, min(n, self.max_size)
        skip = n - keep  # rows older than the newest max_size are never written
        ring.cursor = (ring.cursor + skip) % self.max_size
        ring.rows_written += skip
        if keep:
            ring.write_block({k: a[skip:, None] for k, a in arrays.items()})

    def insert_transition(self, sample: Mapping[str, Any]) -> None:
        """Store one row ``{field: (*shape)}`` (validated like :meth:`insert_data_slice`)."""
        if not isinstance(sample, Mapping):
            raise SpecError(f"sample: expected a dict of arrays, got {type(sample).__name__}")
        rows = {}
        for k, v in sample.items():
            if isinstance(v, Mapping):
                raise SpecError(f"{k}: expected an array, got a dict")
            try:
                rows[k] = np.asarray(v)[None]
            except (TypeError, ValueError, RuntimeError) as exc:
                raise SpecError(f"{k}: expected an array, got {type(v).__name__}") from exc
        self.insert_data_slice(rows)

    # ------------------------------------------------------------------ reading
    def chronological_positions(self) -> np.ndarray:
        """Storage rows oldest -> newest, ``(size,)`` int64."""
        start = self.step if self.size == self.max_size else 0
        return (start + np.arange(self.size)) % self.max_size

    def get_data_slice(self, start_pos: int, end_pos: int) -> dict[str, np.ndarray]:
        """Copies of chronological rows ``[start_pos, end_pos)`` (0 = oldest), wrapping.

        Raises:
            SpecError: unless ``0 <= start_pos <= end_pos <= len(self)``.
        """
        ok = all(isinstance(p, (int, np.integer)) and not isinstance(p, bool)
                 for p in (start_pos, end_pos))  # fmt: skip
        if not ok or not 0 <= start_pos <= end_pos <= self.size:
            raise SpecError(
                f"start_pos, end_pos: expected 0 <= start <= end <= size={self.size}, "
                f"got {start_pos}, {end_pos}"
            )
        pos = self.chronological_positions()[start_pos:end_pos]
        return {k: v[pos] for k, v in self.data.items()}

    def get_all(self) -> dict[str, np.ndarray]:
        """Copies of all ``size`` rows, oldest first (module doc: PyTorchRL's ``[:step]``)."""
        return self.get_data_slice(0, self.size)

    def clear(self) -> None:
        """Forget every row (storage is kept and overwritten later)."""
        if self._ring is not None:
            self._ring.cursor = self._ring.size = self._ring.rows_written = 0

    # ------------------------------------------------------------------ split
    def train_validation_split(
        self,
        validation_ratio: float = 0.2,
        max_holdout: int = 5000,
        seed: Seed = None,
        *,
        ensemble_size: int = 1,
    ) -> DataSplit:
        """MBPO split of the stored rows (module doc); uses ``seed`` or the buffer's Generator.

        Raises:
            EmptyBufferError: no train row left (an empty buffer).
            ConfigError: ratio outside [0, 1), a cap that is not an int >= 0 or an
                ensemble_size that is not an int >= 1.
        """
        ratio = real_number("validation_ratio", validation_ratio, 0.0, 1.0, expected="[0, 1)")
        if ratio == 1.0:
            raise ConfigError(f"validation_ratio: expected [0, 1), got {validation_ratio!r}")
        max_holdout = check_count("max_holdout", max_holdout, minimum=0, error=ConfigError)
        ensemble_size = check_count("ensemble_size", ensemble_size, error=ConfigError)
        n = self.size
        n_hold = min(int(n * ratio), max_holdout)
        if n - n_hold < 1:
            raise EmptyBufferError(f"train_validation_split: no train row left from size={n}")
        rng = self.rng if seed is None else make_rng(seed)
        perm = rng.permutation(n)
        train = perm[n_hold:]
        boot = rng.integers(0, train.size, size=(ensemble_size, train.size))
        return DataSplit(train.astype(np.int64), perm[:n_hold].astype(np.int64), boot)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Copies of the arrays (all rows of storage), cursor, size and the RNG state."""
        return {
            "data": {k: v.copy() for k, v in self.data.items()},
            "step": self.step,
            "size": self.size,
            "rng": rng_state(self.rng),
        }

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (checked first; the buffer is unchanged on error)."""
        try:
            data = {k: np.asarray(v).copy() for k, v in dict(sd.get("data") or {}).items()}
            step, size = (check_count(k, sd[k], minimum=0, error=CheckpointError)
                          for k in ("step", "size"))  # fmt: skip
            rng = set_rng_state(self.rng, sd["rng"])
        except (KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"ModelBasedReplay state: missing or bad entry ({exc})") from exc
        if (
            any(a.ndim < 1 or a.shape[0] != self.max_size for a in data.values())
            or not 0 <= size <= self.max_size
            or not 0 <= step < self.max_size
            or (size < self.max_size and step != size)  # only a full ring wraps
            or (size and not data)
            or any(a.dtype.kind == "f" and not np.isfinite(a).all() for a in data.values())
        ):
            raise CheckpointError(f"ModelBasedReplay state: does not fit max_size={self.max_size}")
        try:
            specs = {k: FieldSpec(k, a.shape[1:], a.dtype) for k, a in data.items()}
        except SpecError as exc:
            raise CheckpointError(f"ModelBasedReplay state: {exc}") from exc
        ring = self._new_ring(specs) if data else None
        if ring is not None:
            for k, a in data.items():
                ring.arrays[k][:, 0] = a
            ring.cursor, ring.size = step, size
            ring.rows_written = size if size < self.max_size else self.max_size + step
        self._ring, self.rng = ring, rng


@dataclass
class StandardScaler:
    """Per-feature ``(x - mean) / std``; a std below 1e-12 is replaced by 1 (as MBPO)."""

    mean: np.ndarray | None = None
    std: np.ndarray | None = None

    def fit(self, x: np.ndarray) -> StandardScaler:
        """Fit on ``(B, D)`` rows (float64 statistics, population std)."""
        x64 = np.asarray(x, dtype=np.float64)
        if x64.ndim != 2 or x64.shape[0] < 1 or not np.isfinite(x64).all():
            raise SpecError(f"x: expected finite values shaped (B, D) with B >= 1, got {x64.shape}")
        self.mean, std = x64.mean(axis=0), x64.std(axis=0)
        self.std = np.where(std < 1e-12, 1.0, std)
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        """Scaled copy of ``(..., D)`` rows, dtype of ``x`` kept."""
        if self.mean is None or self.std is None:
            raise EmptyBufferError("StandardScaler.transform: call fit() first")
        x = np.asarray(x)
        return ((x - self.mean) / self.std).astype(x.dtype, copy=False)

    def inverse_transform(self, x: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`transform`."""
        if self.mean is None or self.std is None:
            raise EmptyBufferError("StandardScaler.inverse_transform: call fit() first")
        x = np.asarray(x)
        return (x * self.std + self.mean).astype(x.dtype, copy=False)


class ModelDataset(NamedTuple):
    """Scaled train/holdout arrays for a dynamics-model ensemble.

    ``train_inputs (N_train, D_in)`` / ``train_targets (N_train, D_out)``,
    ``holdout_inputs (N_hold, D_in)`` / ``holdout_targets``, float32; inputs are scaled with
    ``scaler`` (fit on the train rows only), targets are raw; ``bootstrap (E, N_train)``.
    """

    train_inputs: np.ndarray
    train_targets: np.ndarray
    holdout_inputs: np.ndarray
    holdout_targets: np.ndarray
    scaler: StandardScaler
    bootstrap: np.ndarray


def model_dataset(
    data: Mapping[str, np.ndarray],
    split: DataSplit,
    *,
    keys: tuple[str, str, str, str | None] = ("obs", "action", "next_obs", "reward"),
    num_actions: int | None = None,
) -> ModelDataset:
    """Inputs ``concat(obs, action)`` and targets ``concat(next_obs - obs, reward)``.

    Args:
        data: chronological rows (:meth:`ModelBasedReplay.get_all`), ``(N, ...)`` per field.
        split: indices from :meth:`ModelBasedReplay.train_validation_split`.
        keys: field names of obs, action, next obs and reward (None: no reward target, e.g.
            when the model has a known reward function).
        num_actions: one-hot encode integer actions with this many classes (Discrete spaces).
    """
    ok, ak, nk, rk = keys
    if missing := [k for k in keys if k is not None and k not in data]:
        raise SpecError(f"data: expected the fields {[k for k in keys if k]}, missing {missing}")
    n = np.shape(data[ok])[0] if np.ndim(data[ok]) else 0
    shapes = {k: np.shape(data[k]) for k in keys if k is not None}
    rows = np.concatenate([split.train, split.holdout])
    if any(v[:1] != (n,) for v in shapes.values()) or shapes[nk] != shapes[ok]:
        raise SpecError(f"data: expected N rows each and next_obs shaped like obs, got {shapes}")
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise SpecError(f"split: expected row indices in [0, {n}), got {rows.min()}..{rows.max()}")
    obs = np.asarray(data[ok], dtype=np.float32).reshape(n, -1)
    act = np.asarray(data[ak])
    if num_actions is not None:
        num_actions = check_count("num_actions", num_actions, error=ConfigError)
        flat = act.reshape(n)
        bad = flat.dtype.kind not in "iuf" or not np.isin(flat, np.arange(num_actions)).all()
        if bad:  # 1.7 is not silently class 1, nor 2.0 refused
            raise SpecError(
                f"{ak}: expected integers in [0, {num_actions}) for the one-hot, got "
                f"{flat.dtype} values {np.unique(flat)[:8]}"
            )
        act = np.eye(num_actions, dtype=np.float32)[flat.astype(np.int64)]
    inputs = np.concatenate([obs, act.astype(np.float32).reshape(n, -1)], axis=1)
    delta = np.asarray(data[nk], dtype=np.float32).reshape(n, -1) - obs
    targets = (
        delta
        if rk is None
        else np.concatenate([delta, np.asarray(data[rk], dtype=np.float32).reshape(n, -1)], axis=1)
    )
    scaler = StandardScaler().fit(inputs[split.train])
    return ModelDataset(
        scaler.transform(inputs[split.train]),
        targets[split.train],
        scaler.transform(inputs[split.holdout]),
        targets[split.holdout],
        scaler,
        split.bootstrap,
    )


class ModelMinibatch(NamedTuple):
    """``inputs (E, B, D_in)``, ``targets (E, B, D_out)``, batch number, epoch (B >= 1)."""

    inputs: np.ndarray
    targets: np.ndarray
    batch_number: int
    epoch: int


def ensemble_minibatches(
    ds: ModelDataset, batch_size: int = 256, num_epochs: int = 1, seed: Seed = None
) -> Iterator[ModelMinibatch]:
    """Per-member bootstrap minibatches; rows are reshuffled within each member every epoch.

    Yields ``ceil(N_train / batch_size)`` batches per epoch, each non-empty (the last may be
    smaller); every member sees each of its bootstrap rows exactly once per epoch.
    """
    if batch_size < 1 or num_epochs < 1:
        raise ConfigError(f"batch_size, num_epochs: expected >= 1, got {batch_size}, {num_epochs}")
    rng = make_rng(seed)
    boot = ds.bootstrap
    e, n = boot.shape
    for epoch in range(num_epochs):
        order = np.argsort(rng.random((e, n)), axis=1)
        rows = np.take_along_axis(boot, order, axis=1)
        for b, lo in enumerate(range(0, n, batch_size)):
            idx = rows[:, lo : lo + batch_size]
            yield ModelMinibatch(ds.train_inputs[idx], ds.train_targets[idx], b, epoch)
