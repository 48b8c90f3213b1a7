"""ReplayBuffer on the frame-deduplicated storage (``StorageLayout.frames()``): every stored and
sampled stack equals the one added (against a memory-layout twin fed the same calls), a stack
that does not continue its observation is refused with nothing written, exact save/load, and the
bytes per Atari-style transition."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstore import ReplayBuffer, checkpoint
from rlstore.errors import ConfigError, SpecError
from rlstore.storage import StorageLayout


def _stream(rng: np.random.Generator, n: int, steps: int, shape: tuple[int, ...], p_end: float,
            p_jump: float):  # fmt: skip
    """Yield ``(obs, next_obs, terminated, truncated)`` of ``n`` envs of stacked frames: episodes
    end at random (the reset stack repeats its frame or pads it with zeros), and with probability
    ``p_jump`` an add does not continue the previous one."""
    stack = rng.integers(0, 4, (n, *shape), dtype=np.uint8)
    for _ in range(steps):
        if rng.random() < p_jump:  # an independent transition (a new stack from nowhere)
            stack = rng.integers(0, 4, (n, *shape), dtype=np.uint8)
        new = rng.integers(0, 4, (n, 1, *shape[1:]), dtype=np.uint8)
        nxt = np.concatenate([stack[:, 1:], new], axis=1)
        term = rng.random(n) < p_end
        trunc = ~term & (rng.random(n) < p_end)
        yield stack, nxt, term, trunc
        stack = nxt.copy()
        for e in np.flatnonzero(term | trunc):  # reset: one frame repeated or zero-padded
            stack[e] = rng.integers(0, 4, shape[1:], dtype=np.uint8)[None]
            stack[e, :-1] *= rng.random() < 0.5


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 3),
    capacity=st.integers(1, 24),
    steps=st.integers(1, 60),
    p_end=st.sampled_from([0.0, 0.1, 0.4]),
    p_jump=st.sampled_from([0.0, 0.1]),
    seed=st.integers(0, 2**16),
    block=st.integers(1, 5),
)
def test_frames_layout_matches_the_memory_layout(n, capacity, steps, p_end, p_jump, seed, block):
    """Single adds (``block = 1``) or ``extend`` blocks of up to ``block`` rows."""
    shape = (4, 3, 2)
    frames = ReplayBuffer(capacity, num_envs=n, storage=StorageLayout.frames(), seed=seed)
    plain = ReplayBuffer(capacity, num_envs=n, seed=seed)
    rng = np.random.default_rng(seed)
    rows = list(_stream(rng, n, steps, shape, p_end, p_jump))
    while rows:
        k = min(int(rng.integers(1, block + 1)), len(rows))
        obs, nxt, term, trunc = (np.stack(x) for x in zip(*rows[:k], strict=True))
        del rows[:k]
        for buf in (frames, plain):
            if block == 1:
                buf.add(obs[0], np.zeros(n, np.int64), np.ones(n, np.float32), nxt[0], term[0],
                        trunc[0])  # fmt: skip
            else:
                buf.extend(obs, np.zeros((k, n), np.int64), np.ones((k, n), np.float32), nxt,
                           term, trunc)  # fmt: skip
    assert len(frames) == len(plain)
    idx = np.arange(len(plain))
    got, want = frames.gather(idx), plain.gather(idx)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    a, b = frames.sample(len(plain)), plain.sample(len(plain))  # same seed: the same draws
    assert torch.equal(a.obs, b.obs) and torch.equal(a.next_obs, b.next_obs)


def test_a_stack_that_does_not_continue_is_refused_and_nothing_changes():
    buf = ReplayBuffer(16, storage=StorageLayout.frames(), seed=0)
    x = np.zeros((4, 5, 5), np.uint8)
    y = np.concatenate([x[1:], np.ones((1, 5, 5), np.uint8)])
    buf.add(x, 0, 1.0, y, False, False)
    before = buf.state_dict()
    with pytest.raises(SpecError, match=r"next_obs: expected frames 0\.\.2 .* row 0, env 0"):
        buf.add(y, 0, 1.0, np.full((4, 5, 5), 7, np.uint8), False, False)
    after = buf.state_dict()
    assert len(buf) == 1
    np.testing.assert_array_equal(
        after["storage"]["ring"]["arrays"]["reward"], before["storage"]["ring"]["arrays"]["reward"]
    )
    assert buf.gather(np.array([0]))["next_obs"].tobytes() == y.tobytes()


def test_frames_buffer_saves_and_loads_exactly():
    rng = np.random.default_rng(1)
    buf = ReplayBuffer(40, num_envs=2, storage=StorageLayout.frames(), seed=3)
    for obs, nxt, term, trunc in _stream(rng, 2, 70, (4, 6, 6), 0.1, 0.05):
        buf.add(obs, np.zeros(2, np.int64), np.ones(2, np.float32), nxt, term, trunc)
    with tempfile.TemporaryDirectory() as d:
        checkpoint.save(buf, d)
        back = checkpoint.load(d)
    assert back.config()["storage"]["kind"] == "frames"
    idx = np.arange(len(buf))
    for k, v in buf.gather(idx).items():
        np.testing.assert_array_equal(back.gather(idx)[k], v, err_msg=k)
    assert torch.equal(back.sample(16).obs, buf.sample(16).obs)


def test_named_frame_fields_leave_other_uint8_keys_alone():
    """A dict obs with a frame stack and an ordinary uint8 vector (e.g. inventory counts): by
    default every uint8 stack-shaped key counts as frames, so the vector is refused; naming the
    frame field stores the vector as is. Checked against a memory-layout twin, and saved."""
    rng, n = np.random.default_rng(2), 2
    streams = list(_stream(rng, n, 50, (4, 6, 6), 0.1, 0.05))
    vecs = rng.integers(0, 255, (51, n, 3), dtype=np.uint8)  # random: never shares "frames"

    def feed(buf: ReplayBuffer) -> ReplayBuffer:
        for t, (obs, nxt, term, trunc) in enumerate(streams):
            vec, vec_next = vecs[t], vecs[t + 1]
            buf.add({"pixels": obs, "vec": vec}, np.zeros(n, np.int64), np.ones(n, np.float32),
                    {"pixels": nxt, "vec": vec_next}, term, trunc)  # fmt: skip
        return buf

    with pytest.raises(SpecError, match="next_obs.vec"):
        feed(ReplayBuffer(30, num_envs=n, storage=StorageLayout.frames(), seed=0))
    layout = StorageLayout.frames(frame_fields=["obs.pixels"])
    assert StorageLayout.parse(layout.to_json()) == layout
    buf = feed(ReplayBuffer(30, num_envs=n, storage=layout, seed=0))
    twin = feed(ReplayBuffer(30, num_envs=n, seed=0))
    idx = np.arange(len(buf))
    got, want = buf.gather(idx), twin.gather(idx)
    assert got.keys() == want.keys() and any("vec" in k for k in got)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    assert buf.nbytes < twin.nbytes  # the pixels are still deduplicated
    with tempfile.TemporaryDirectory() as d:
        checkpoint.save(buf, d)
        back = checkpoint.load(d)
    assert back.config()["storage"]["frame_fields"] == ["obs.pixels"]
    for k, v in back.gather(idx).items():
        np.testing.assert_array_equal(v, want[k], err_msg=k)


def test_bad_frame_fields_are_named():
    with pytest.raises(ConfigError, match="storage.frame_fields"):
        StorageLayout("memory", frame_fields=("obs",))
    for bad in ([], ["obs", "obs"], [3], "obs.pixels"):  # a str is not a list of names
        with pytest.raises(ConfigError, match="storage.frame_fields"):
            StorageLayout.frames(frame_fields=bad)
    buf = ReplayBuffer(8, storage=StorageLayout.frames(frame_fields=["obs.nope"]), seed=0)
    obs = np.zeros((4, 2, 2), np.uint8)
    with pytest.raises(SpecError, match="frame_fields: 'obs.nope'"):
        buf.add(obs, 0, 0.0, obs, False, False)
    assert len(buf) == 0 and buf.specs is None


def _atari_buffer(cap: int) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(cap, storage=StorageLayout.frames(), seed=0)
    stack = np.zeros((4, 84, 84), np.uint8)
    for t in range(cap + 200):  # past wrap-around, episodes of 400 steps
        new = rng.integers(0, 255, (1, 84, 84), dtype=np.uint8)
        nxt = np.concatenate([stack[1:], new])
        end = t % 400 == 399
        buf.add(stack, 0, 1.0, nxt, end, False)
        stack = np.repeat(new, 4, axis=0) if end else nxt
    assert len(buf) == cap
    return buf


def test_atari_style_bytes_per_transition():
    """One 84x84 frame is 7,056 bytes; a full buffer adds at most 7.3 kB per transition of
    capacity (issue 10), against 28.2 kB for a stack per row. Measured as the difference of two
    capacities, so that fixed costs (the side store's first 16 final observations) cancel."""
    small, large = _atari_buffer(1000), _atari_buffer(2000)
    per = (large.nbytes - small.nbytes) / 1000
    assert 7056 <= per <= 7300
    assert small.gather(np.arange(1000))["obs"].shape == (1000, 4, 84, 84)


def test_a_loaded_frames_state_with_nan_rewards_is_refused():
    """The finiteness check of a loaded state walks every storage layout's arrays (the frames
    layout nests its other fields in an inner ring)."""
    from rlstore.errors import CheckpointError

    buf = ReplayBuffer(8, storage=StorageLayout.frames(), seed=0)
    x = np.zeros((4, 5, 5), np.uint8)
    buf.add(x, 0, 1.0, x, False, False)
    sd = buf.state_dict()
    sd["storage"]["ring"]["arrays"]["reward"][0, 0] = np.nan
    with pytest.raises(CheckpointError, match=r"storage\.ring\.arrays\.reward: expected finite"):
        ReplayBuffer(8, storage=StorageLayout.frames(), seed=0).load_state_dict(sd)
