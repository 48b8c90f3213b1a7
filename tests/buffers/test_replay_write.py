"""The one write path of ReplayBuffer: typed input against converted input, byte for byte.

Two buffers get the same stream of transitions: one as numpy arrays of the stored dtype and
shape (float / bool / int scalars for single adds), which pass without conversion, the other as
input that needs converting (nested Python lists, 0/1 integer flags). After every operation
their whole ``state_dict`` must be equal byte for byte. Rejections must name the field and
leave the buffer exactly as it was.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest
from _helpers import flat_state

from rlstore.buffers.replay import ReplayBuffer
from rlstore.errors import SpecError
from rlstore.specs import FieldSpec


class Stream:
    """Rows of ``n`` envs with episode ends, truncations and discontinuities (obs jumps)."""

    def __init__(
        self,
        n: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any,
        act: str,
        seed: int,
        p_events: float = 0.3,
    ):
        self.rng = np.random.default_rng(seed)
        self.p = [1 - p_events, *[p_events / 3] * 3]
        self.n, self.shape, self.dtype, self.act = n, obs_shape, np.dtype(obs_dtype), act
        self.cur = self.fresh(n)

    def fresh(self, k: int) -> np.ndarray:
        if self.dtype.kind == "u":
            return self.rng.integers(0, 256, (k, *self.shape), dtype=self.dtype)
        return self.rng.standard_normal((k, *self.shape)).astype(self.dtype)

    def row(self) -> dict[str, np.ndarray]:
        n, rng = self.n, self.rng
        event = rng.choice(4, size=n, p=self.p)  # go on, term, trunc, jump
        obs = np.where(self._b(event == 3), self.fresh(n), self.cur)
        nxt = self.fresh(n)
        term, trunc = event == 1, event == 2
        if self.act == "float":
            action = rng.standard_normal((n, 3)).astype(np.float32)
        else:
            action = rng.integers(0, 5, n).astype(np.int64)
        reward = rng.standard_normal(n).astype(np.float32)
        self.cur = np.where(self._b(term | trunc), self.fresh(n), nxt)
        return dict(
            obs=obs, action=action, reward=reward, next_obs=nxt, terminated=term, truncated=trunc
        )

    def _b(self, mask: np.ndarray) -> np.ndarray:
        return mask.reshape(self.n, *(1,) * len(self.shape))


def fast_args(row: dict[str, np.ndarray], single: bool, step: int) -> dict[str, Any]:
    """Input that needs no conversion; single adds alternate numpy scalars (np.float32, np.bool_,
    np.int64) with Python scalars (float, bool, int)."""
    if not single:
        return dict(row)
    out: dict[str, Any] = {k: v[0] for k, v in row.items()}
    if step % 2:
        out["reward"] = float(out["reward"])
        out["terminated"], out["truncated"] = bool(out["terminated"]), bool(out["truncated"])
        if np.ndim(out["action"]) == 0:  # scalar (discrete) action: a Python int
            out["action"] = int(out["action"])
    return out


def general_args(row: dict[str, np.ndarray], single: bool) -> dict[str, Any]:
    """The same values as nested lists and 0/1 integer flags: only the general path takes them."""
    out: dict[str, Any] = {k: (v[0] if single else v).tolist() for k, v in row.items()}
    for k in ("terminated", "truncated"):
        out[k] = np.asarray(row[k][0] if single else row[k]).astype(np.int64)
    return out


CASES = [  # (num_envs, single adds, obs shape, obs dtype, action kind, capacity)
    (1, True, (4,), np.float32, "float", 5),
    (1, True, (3,), np.float32, "int", 4),
    (1, False, (4,), np.float32, "float", 5),
    (3, False, (4,), np.float32, "float", 7),
    (8, False, (17,), np.float32, "float", 40),
    (1, True, (70,), np.float32, "float", 6),  # long obs: the numpy finiteness check
    (2, False, (2, 3), np.float64, "int", 6),  # float64 stored when given as specs
    (1, True, (2, 2), np.uint8, "int", 5),  # images: no finiteness check on obs
    (4, False, (2, 2), np.uint8, "float", 9),
]


def make(
    n: int, shape: tuple[int, ...], dtype: Any, act: str, cap: int, order: int
) -> ReplayBuffer:
    specs = {
        "obs": FieldSpec("obs", shape, dtype),
        "action": FieldSpec(
            "action", (3,) if act == "float" else (), np.float32 if act == "float" else np.int64
        ),
    }
    if order:  # another field order: single adds write field by field, not one record
        specs = dict(reversed(list(specs.items())))
    return ReplayBuffer(cap, num_envs=n, specs=specs, seed=0)


@pytest.mark.parametrize(("n", "single", "shape", "dtype", "act", "cap"), CASES)
@pytest.mark.parametrize("order", [0, 1])
def test_typed_input_equals_converted_input_byte_for_byte(n, single, shape, dtype, act, cap, order):
    stream = Stream(n, shape, dtype, act, seed=cap + n)
    fast = make(n, shape, dtype, act, cap, order)
    slow = make(n, shape, dtype, act, cap, order)
    steps = 3 * cap + 5 if n < 8 else 300  # several wrap-arounds
    for step in range(steps):
        row = stream.row()
        fast.add(**fast_args(row, single, step))
        slow.add(**general_args(row, single))
        assert flat_state(fast) == flat_state(slow), f"step {step}"
    assert len(fast) == len(slow) > 0
    # and both reconstruct the same next_obs for every stored transition
    a, b = fast.gather(np.arange(len(fast))), slow.gather(np.arange(len(slow)))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("n", [1, 3])
def test_mixed_typed_converted_and_extend_stay_equal(n: int) -> None:
    """Any interleaving of typed adds, converted adds and extend blocks equals the all-converted
    run (the bytes kept of the pending observation follow every write)."""
    rng = np.random.default_rng(7)
    stream = Stream(n, (3,), np.float32, "float", seed=11)
    mixed = ReplayBuffer(6, num_envs=n, seed=0)
    plain = ReplayBuffer(6, num_envs=n, seed=0)
    for step in range(60):
        kind = rng.choice(["fast", "general", "extend"], p=[0.6, 0.2, 0.2])
        if kind == "extend":
            rows = [stream.row() for _ in range(int(rng.integers(1, 4)))]
            block = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
            mixed.extend(**block)
            plain.extend(**{k: v.tolist() for k, v in block.items()})
            continue
        row = stream.row()
        args = fast_args(row, False, step) if kind == "fast" else general_args(row, False)
        mixed.add(**args)
        plain.add(**general_args(row, False))
        assert flat_state(mixed) == flat_state(plain), f"step {step} ({kind})"


def test_pending_bytes_do_not_survive_load_state_dict() -> None:
    """After loading another buffer's state, an add must compare against the loaded
    pending observation, not the bytes kept from before the load."""
    s1, s2 = Stream(2, (3,), np.float32, "float", 1), Stream(2, (3,), np.float32, "float", 2)
    a, b = ReplayBuffer(5, num_envs=2, seed=0), ReplayBuffer(5, num_envs=2, seed=0)
    for _ in range(4):
        a.add(**s1.row())
        b.add(**s2.row())
    b.load_state_dict(a.state_dict())
    for _ in range(4):
        row = s1.row()
        a.add(**row)
        b.add(**row)
    assert flat_state(a) == flat_state(b)


def _buffer(n: int) -> tuple[ReplayBuffer, Stream]:
    stream = Stream(n, (4,), np.float32, "float", seed=3)
    buf = ReplayBuffer(6, num_envs=n, seed=0)
    for _ in range(8):
        buf.add(**stream.row())
    return buf, stream


BAD = [  # (field, index into the row, bad value, expected message)
    ("next_obs", (0, 1), np.nan, "next_obs: expected finite"),
    ("action", (0, 2), np.inf, "action: expected finite"),
    ("reward", (0,), -np.inf, "reward: expected finite"),
    ("obs", (0, 3), np.nan, "obs: expected finite"),
]


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize(("field", "idx", "value", "match"), BAD)
@pytest.mark.parametrize("after_done", [False, True])
def test_nonfinite_is_rejected_and_leaves_buffer_unchanged(
    n, field, idx, value, match, after_done
) -> None:
    buf, stream = _buffer(n)
    row = stream.row()
    if after_done:  # the previous row ended every episode: obs is checked on its own
        last = stream.row()
        last["terminated"][:] = True
        buf.add(**last)
    assert_rejected_unchanged(buf, row, field, idx, value, match)


def assert_rejected_unchanged(buf, row, field, idx, value, match) -> None:
    """Put ``value`` into the last env's ``field``: as a row (and as a single add when
    ``num_envs == 1``) the add raises ``match`` and the buffer is exactly as it was."""
    row[field] = row[field].copy()
    row[field][(-1, *idx[1:])] = value  # the last env: nothing of the others may be written
    before = flat_state(buf)
    with pytest.raises(SpecError, match=match):
        buf.add(**fast_args(row, single=False, step=0))
    if buf.num_envs == 1:
        with pytest.raises(SpecError, match=match):
            buf.add(**fast_args(row, single=True, step=1))
    assert flat_state(buf) == before


def test_single_add_reward_overflowing_float32_is_rejected() -> None:
    buf, stream = _buffer(1)
    args = fast_args(stream.row(), single=True, step=0)
    args["reward"] = np.float64(1e39)  # finite as float64, inf as the stored float32
    before = flat_state(buf)
    with pytest.raises(SpecError, match="reward: expected values within the float32 range"):
        buf.add(**args)  # no RuntimeWarning from numpy's cast either (filterwarnings=error)
    assert flat_state(buf) == before


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
@pytest.mark.parametrize("n", [1, 3])
def test_pickled_buffer_continues_like_the_original(how: str, n: int) -> None:
    """A copy writes into its own storage (the fast plan's views are rebuilt, not copied)."""
    buf, stream = _buffer(n)
    twin = pickle.loads(pickle.dumps(buf)) if how == "pickle" else copy.deepcopy(buf)
    assert flat_state(twin) == flat_state(buf)
    for step in range(9):  # across wrap-around (single adds when n == 1)
        row = stream.row()
        buf.add(**fast_args(row, single=n == 1, step=step))
        twin.add(**fast_args(row, single=n == 1, step=step))
        assert flat_state(twin) == flat_state(buf), f"step {step}"
    a, b = buf.gather(np.arange(len(buf))), twin.gather(np.arange(len(twin)))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_equal_but_not_identical_dtypes_are_accepted_as_is() -> None:
    """Dtype checks try identity first; an equal dtype object (here one with metadata) must
    still be accepted as is and store the same bytes as converted input."""
    f32 = np.dtype(np.float32, metadata={"unit": "m"})
    b8 = np.dtype(np.bool_, metadata={"unit": "flag"})
    stream = Stream(3, (4,), np.float32, "float", seed=5)
    fast, slow = ReplayBuffer(5, num_envs=3, seed=0), ReplayBuffer(5, num_envs=3, seed=0)
    fast.add(**stream.row())
    slow.load_state_dict(fast.state_dict())
    for _ in range(8):
        row = stream.row()
        odd = {
            k: v.astype(b8 if v.dtype == np.bool_ else f32) if v.dtype.kind in "fb" else v
            for k, v in row.items()
        }
        assert odd["obs"].dtype is not np.dtype(np.float32)
        fast.add(**odd)
        slow.add(**general_args(row, single=False))
        assert flat_state(fast) == flat_state(slow)


def test_observations_of_many_dims() -> None:
    obs = np.zeros((1,) * 9 + (2,), np.float32)
    buf = ReplayBuffer(4, seed=0)
    for _ in range(3):
        buf.add(obs, np.float32(0), 1.0, obs, False, False)
    assert len(buf) == 3


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nonfinite_reset_obs_beside_continuing_columns_is_rejected(value: float) -> None:
    """An obs continuing its column byte for byte is not checked again, but a column whose
    episode ended starts from a new obs: NaN/inf there is rejected, nothing changes."""
    buf, stream = _buffer(3)
    row = stream.row()
    row["terminated"][:] = [True, False, False]  # env 0 ends: its next obs is a reset
    row["truncated"][:] = False
    buf.add(**row)
    nxt = {k: v.copy() for k, v in stream.row().items()}
    nxt["obs"][1:] = row["next_obs"][1:]  # envs 1, 2 continue exactly
    nxt["obs"][0, 2] = value
    before = flat_state(buf)
    with pytest.raises(SpecError, match="obs: expected finite"):
        buf.add(**nxt)
    assert flat_state(buf) == before
    nxt["obs"][0, 2] = 0.5  # the same add, finite: accepted
    buf.add(**nxt)
    assert flat_state(buf) != before


def test_scalar_observations_of_one_env_in_every_form() -> None:
    """One env with scalar obs and actions: numpy scalars, 0-d and (1,) arrays store the bytes
    of converted input (the record item of a scalar field is a scalar); NaN obs are rejected
    in every form, continuing or not."""
    specs = {"obs": FieldSpec("obs", (), np.float32), "action": FieldSpec("action", (), np.int64)}
    typed, converted = ReplayBuffer(5, specs=specs, seed=0), ReplayBuffer(5, specs=specs, seed=0)
    rng = np.random.default_rng(0)
    obs = np.float32(0.0)
    forms = [lambda x: x, lambda x: np.asarray(x), lambda x: np.asarray(x).reshape(1)]
    for step in range(14):
        nxt = np.float32(rng.standard_normal()) if step % 4 else np.float32(-0.0)
        done, act = bool(step % 5 == 4), np.int64(step % 3)
        if step % 7 == 6:
            obs = np.float32(rng.standard_normal())  # a discontinuity
        form = forms[step % 3]
        typed.add(form(obs), form(act), np.float32(1.0), form(nxt), done, False)
        converted.add(float(obs), int(act), 1.0, float(nxt), int(done), 0)
        assert flat_state(typed) == flat_state(converted), f"step {step}"
        obs = np.float32(rng.standard_normal()) if done else nxt
        for form in forms:
            before = flat_state(typed)
            with pytest.raises(SpecError, match="obs: expected finite"):
                typed.add(form(np.float32(np.nan)), act, 1.0, nxt, False, False)
            assert flat_state(typed) == before


@pytest.mark.parametrize(
    "dtype,shape",
    [(np.uint8, (3,)), (np.uint16, (3,)), (np.float32, (17,)), (np.float64, (2, 3)),
     (np.uint8, (4, 6, 6)), (np.float32, ())],
)  # fmt: skip
def test_differ_matches_a_per_item_byte_comparison(dtype: Any, shape: tuple[int, ...]) -> None:
    # _differ compares in the widest word dividing an item's bytes; the reference compares each
    # item's bytes. One flipped byte anywhere in an item (NaN payloads, -0.0) must count.
    from rlstore.buffers._replay_write import _differ

    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (5, 3, *shape, np.dtype(dtype).itemsize), dtype=np.uint8)
    a = a.view(dtype).reshape(5, 3, *shape)
    for _ in range(20):
        b = a.copy()
        raw = b.reshape(-1).view(np.uint8)
        for pos in rng.integers(0, raw.size, rng.integers(0, 3)):
            raw[pos] ^= 1 << int(rng.integers(0, 8))
        want = np.array([[a[t, e].tobytes() != b[t, e].tobytes() for e in range(3)]
                         for t in range(5)])  # fmt: skip
        np.testing.assert_array_equal(_differ(a, b, (5, 3)), want)
        np.testing.assert_array_equal(_differ(a[:, 0], b[:, 0], 5), want[:, 0])


def test_jump_beside_an_episode_end_keeps_only_the_jumped_column() -> None:
    """Three envs: env 0 ends, then env 1's obs jumps while env 0 starts from a reset and
    env 2 continues; only env 1's previous next_obs becomes a discontinuity, and every
    stored transition reads back its exact next_obs (the open columns are compared whole
    first, column by column only when one of them differs)."""
    rng = np.random.default_rng(5)
    buf = ReplayBuffer(12, num_envs=3, seed=0)
    obs = rng.standard_normal((3, 4)).astype(np.float32)
    rows = []
    for step in range(4):
        nxt = rng.standard_normal((3, 4)).astype(np.float32)
        term = np.array([step == 1, False, False])
        row = dict(obs=obs, action=rng.standard_normal((3, 2)).astype(np.float32),
                   reward=np.zeros(3, np.float32), next_obs=nxt, terminated=term,
                   truncated=np.zeros(3, bool))  # fmt: skip
        buf.add(**row)
        rows.append(row)
        obs = nxt.copy()
        if step == 1:
            obs[0] = rng.standard_normal(4)  # env 0: a reset obs after its end
        if step == 2:
            obs[1] = rng.standard_normal(4)  # env 1: a jump without an end
    meta = buf.metadata()
    assert (meta["side_entries"], meta["discontinuities"]) == (1, 1)
    got = buf.gather(np.arange(len(buf)))
    want = np.concatenate([r["next_obs"] for r in rows])
    np.testing.assert_array_equal(got["next_obs"].view(np.uint32), want.view(np.uint32))


def test_extends_of_ended_episodes_keep_a_checkpoint_that_loads() -> None:
    """Blocks of ended episodes drop the final observations gone with the previous block: the
    side store stays within what a load accepts (it grew past it when the live key was read
    before the block was written)."""
    buf = ReplayBuffer(20, seed=0)
    for t in (15, 20, 14, 20):  # (found by search: the smallest capacity that overgrew)
        obs = np.arange(2 * t, dtype=np.float32).reshape(t, 1, 2)
        ones, zeros = np.ones((t, 1), bool), np.zeros((t, 1))
        buf.extend(obs, zeros.astype(np.int64), zeros.astype(np.float32), obs + 1, ones, ~ones)
    twin = ReplayBuffer(20, seed=0)
    twin.load_state_dict(buf.state_dict())
    assert flat_state(twin) == flat_state(buf)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_tensors_of_any_device_and_bfloat16_are_stored(device: str) -> None:
    """A GPU policy's tensors (and bfloat16 ones, which numpy cannot read either) are stored as
    their host values, by add and extend, first add included; ``np.asarray`` refused them as
    "expected an array". A tensor that requires grad is still refused (nothing changes)."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    t = {"device": device}
    buf, ref = ReplayBuffer(8, num_envs=2, seed=0), ReplayBuffer(8, num_envs=2, seed=0)
    obs = torch.tensor([[0.5, 1.0], [2.0, -3.0]], dtype=torch.bfloat16, **t)
    args = (obs, torch.tensor([1, 2], **t), torch.ones(2, dtype=torch.bfloat16, **t), obs + 1,
            torch.tensor([True, False], **t), torch.zeros(2, dtype=torch.bool, **t))  # fmt: skip
    buf.add(*args)
    ref.add(*(a.cpu().float().numpy() if a.is_floating_point() else a.cpu().numpy() for a in args))
    block = [torch.stack([a, a]) for a in args]
    buf.extend(*block)
    ref.extend(*(a.cpu().float().numpy() if a.is_floating_point() else a.cpu().numpy()
                 for a in block))  # fmt: skip
    assert flat_state(buf) == flat_state(ref) and buf.specs["obs"].dtype == np.float32
    before = flat_state(buf)
    with pytest.raises(SpecError, match="obs"):
        buf.add(torch.zeros(2, 2, requires_grad=True), *args[1:])
    assert flat_state(buf) == before
