"""velora buffer facade against list-of-transitions and single-env references."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstore import checkpoint
from rlstore.compat.velora import BatchExperience, BufferBase, BufferConfig, ReplayBuffer
from rlstore.errors import CapacityError, CheckpointError, ConfigError, EmptyBufferError, SpecError

S, A, H = 4, 2, 3
FIELDS = ("states", "actions", "rewards", "next_states", "dones", "hiddens")


def _transitions(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "state": rng.standard_normal(S).astype(np.float32),
            "action": rng.standard_normal(A).astype(np.float32),
            "reward": float(i),
            "next_state": rng.standard_normal(S).astype(np.float32),
            "done": bool(i % 3 == 2),
            "hidden": rng.standard_normal(H).astype(np.float32),
        }
        for i in range(n)
    ]


def _expected(ts: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """velora's state_dict layout, built from the reference list (oldest first)."""
    return {
        "states": np.stack([t["state"] for t in ts]),
        "actions": np.stack([t["action"] for t in ts]),
        "rewards": np.array([[t["reward"]] for t in ts], np.float32),
        "next_states": np.stack([t["next_state"] for t in ts]),
        "dones": np.array([[float(t["done"])] for t in ts], np.float32),
        "hiddens": np.stack([t["hidden"] for t in ts]),
    }


def _assert_contents(buf: ReplayBuffer, ts: list[dict[str, Any]]) -> None:
    sd = buf.state_dict()
    for name, want in _expected(ts).items():
        np.testing.assert_array_equal(sd[name].numpy(), want, err_msg=name)


def test_add_and_add_multi_keep_the_last_capacity_items() -> None:
    ts = _transitions(11)
    one = ReplayBuffer(7, S, A, H)
    for t in ts:
        one.add(
            torch.from_numpy(t["state"]).unsqueeze(0),  # velora docs add (1, state_dim) states
            torch.from_numpy(t["action"]),
            t["reward"],
            torch.from_numpy(t["next_state"]),
            t["done"],
            torch.from_numpy(t["hidden"]),
        )
    assert len(one) == 7
    _assert_contents(one, ts[-7:])
    multi = ReplayBuffer(7, S, A, H)
    exp = _expected(ts)
    multi.add_multi(*(torch.from_numpy(exp[k][:5]) for k in FIELDS))
    multi.add_multi(*(torch.from_numpy(exp[k][5:]) for k in FIELDS))
    _assert_contents(multi, ts[-7:])
    assert multi.metadata() == {
        "capacity": 7,
        "state_dim": S,
        "action_dim": A,
        "hidden_dim": H,
        "position": 11 % 7,
        "size": 7,
        "device": None,
    }


def test_sample_rows_are_stored_transitions() -> None:
    ts = _transitions(36, seed=1)
    buf = ReplayBuffer(40, S, A, H, seed=0)
    exp = _expected(ts)
    buf.add_multi(*(exp[k] for k in FIELDS))
    rows = {tuple(np.concatenate([exp[k][i].ravel() for k in FIELDS])) for i in range(36)}
    batch = buf.sample(32)
    assert isinstance(batch, BatchExperience)
    shapes = {k: tuple(getattr(batch, k).shape) for k in FIELDS}
    assert shapes == {
        "states": (32, S),
        "actions": (32, A),
        "rewards": (32, 1),
        "next_states": (32, S),
        "dones": (32, 1),
        "hiddens": (32, H),
    }
    for j in range(32):
        row = np.concatenate([getattr(batch, k)[j].numpy().ravel() for k in FIELDS])
        assert tuple(row) in rows


def test_truncated_flag_is_not_a_termination() -> None:
    buf = ReplayBuffer(4, S, A, H, seed=0)
    z = np.zeros((2, S), np.float32)
    buf.add_multi(
        z, np.zeros((2, A)), np.ones(2), z + 1, np.array([True, True]), np.zeros((2, H)),
        truncated=np.array([True, False]),
    )  # fmt: skip
    assert buf.state_dict()["dones"].ravel().tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("states", np.zeros((3, S + 1)), r"states: expected shape \(3, 4\), got \(3, 5\)"),
        ("actions", np.zeros((3, 3)), r"actions: expected shape \(3, 2\)"),
        ("hiddens", np.zeros((2, H)), r"hiddens: expected shape \(3, 3\)"),
        ("rewards", np.zeros(4), r"rewards: expected shape \(3,\)"),
        ("rewards", np.array([0.0, np.inf, 1.0]), "reward"),
    ],
)
def test_bad_add_multi_leaves_the_buffer_unchanged(name: str, value: Any, match: str) -> None:
    ts = _transitions(5, seed=2)
    buf = ReplayBuffer(8, S, A, H, seed=0)
    exp = _expected(ts)
    buf.add_multi(*(exp[k][:2] for k in FIELDS))
    args = {k: exp[k][2:] for k in FIELDS}
    args[name] = value
    with pytest.raises(SpecError, match=match):
        buf.add_multi(*(args[k] for k in FIELDS))
    assert len(buf) == 2
    _assert_contents(buf, ts[:2])


def test_errors_are_value_errors_like_velora() -> None:
    buf = ReplayBuffer(8, S, A, H)
    with pytest.raises(EmptyBufferError):
        buf.sample(1)
    with pytest.raises(ValueError):
        buf.sample(1)
    with pytest.raises(CapacityError, match="capacity: expected an int >= 1, got 0"):
        ReplayBuffer(0, S, A, H)
    with pytest.raises(TypeError):
        BufferBase(4, S, A, H)  # type: ignore[abstract]


def test_config_model() -> None:
    cfg = ReplayBuffer(9, S, A, H).config()
    assert isinstance(cfg, BufferConfig)
    assert cfg.model_dump() == {
        "type": "ReplayBuffer",
        "capacity": 9,
        "state_dim": S,
        "action_dim": A,
        "hidden_dim": H,
    }


# --------------------------------------------------------------------------- save / load


@pytest.fixture
def filled() -> ReplayBuffer:
    buf = ReplayBuffer(20, S, A, H, device="cpu", seed=5)
    exp = _expected(_transitions(25, seed=3))
    buf.add_multi(*(exp[k] for k in FIELDS))
    buf.sample(4)  # move the sampler RNG
    return buf


def _future(buf: ReplayBuffer) -> list[BatchExperience]:
    return [buf.sample(8) for _ in range(3)]


def _same_future(a: ReplayBuffer, b: ReplayBuffer) -> None:
    _assert_same_batches(_future(a), _future(b))


def _assert_same_batches(xs: list[BatchExperience], ys: list[BatchExperience]) -> None:
    for x, y in zip(xs, ys, strict=True):
        for k in FIELDS:
            assert torch.equal(getattr(x, k), getattr(y, k)), k


def test_save_files_and_exact_resume(tmp_path: Path, filled: ReplayBuffer) -> None:
    filled.save(tmp_path, prefix="agent_buffer_")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "agent_buffer_metadata.json",
        "agent_buffer_state.safetensors",
    ]
    metadata = json.loads((tmp_path / "agent_buffer_metadata.json").read_text())
    assert metadata["metadata"] == filled.metadata()
    restored = ReplayBuffer.load(tmp_path / "agent_buffer_state.safetensors", metadata)
    assert restored.metadata() == filled.metadata()
    _same_future(filled, restored)


def test_load_with_plain_metadata_and_generic_load(tmp_path: Path, filled: ReplayBuffer) -> None:
    filled.save(tmp_path)
    restored = ReplayBuffer.load(tmp_path / "buffer_state.safetensors", filled.metadata())
    generic = checkpoint.load(tmp_path)
    assert isinstance(generic, ReplayBuffer)
    twin = ReplayBuffer(20, S, A, H, seed=123)
    twin.load_state_dict(filled.checkpoint_state())
    expected = _future(filled)
    for other in (restored, generic, twin):
        _assert_same_batches(expected, _future(other))


def test_generic_save_writes_each_array_once(tmp_path: Path, filled: ReplayBuffer) -> None:
    """checkpoint.save(facade) used to store the velora-layout copies (states, actions, ...)
    next to the core's ring arrays; it now writes exactly what the facade's own save writes,
    and the generic load still resumes exactly."""
    checkpoint.save(filled, tmp_path / "generic")
    filled.save(tmp_path / "own")
    generic = checkpoint.read_metadata(tmp_path / "generic")
    own = checkpoint.read_metadata(tmp_path / "own")
    assert set(generic["schema"]) == set(own["schema"])
    assert generic["schema"] and all(k.startswith("core/") for k in generic["schema"])
    assert not set(FIELDS) & set(generic["schema"])
    assert set(filled.state_dict()) == set(FIELDS)  # velora's documented state_dict
    restored = checkpoint.load(tmp_path / "generic")
    assert isinstance(restored, ReplayBuffer)
    _same_future(filled, restored)


def test_load_refuses_mismatched_or_corrupted_files(tmp_path: Path, filled: ReplayBuffer) -> None:
    filled.save(tmp_path)
    state_path = tmp_path / "buffer_state.safetensors"
    with pytest.raises(CheckpointError, match="metadata.state_dim: expected 4"):
        ReplayBuffer.load(state_path, {**filled.metadata(), "state_dim": 5})
    metadata = json.loads((tmp_path / "buffer_metadata.json").read_text())
    data = bytearray(state_path.read_bytes())
    data[-3] ^= 0xFF
    state_path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256 mismatch"):
        ReplayBuffer.load(state_path, metadata)
    state_path.write_bytes(bytes(data[:-50]))
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        ReplayBuffer.load(state_path, filled.metadata())


# --------------------------------------------------------------------------- warm

SHORT_ID = "rlstore-test/CartPoleShort-v0"


def _short_cartpole() -> str:
    if SHORT_ID not in gym.registry:  # time limit 15 steps: truncations happen quickly
        gym.register(
            SHORT_ID,
            entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
            max_episode_steps=15,
        )
    return SHORT_ID


def _policy(states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise deterministic, random-looking action and 'hidden state' (so a reference can
    replay it); the pole falls in about 10-30 steps, so episodes both end and get truncated."""
    actions = (np.abs(states[:, 1] * 1e4).astype(np.int64) % 2).astype(np.int64)
    hidden = np.stack([states[:, 0], states[:, 2], states[:, 3] * 2], axis=1)
    return actions, hidden.astype(np.float32)


class _Agent:
    def __init__(self, env_id: str) -> None:
        self.env = gym.make(env_id)
        self.calls = 0

    def predict(
        self, states: torch.Tensor, hidden: Any, train_mode: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        assert train_mode and states.dtype == torch.float32
        assert (hidden is None) == (self.calls == 0)
        self.calls += 1
        a, h = _policy(states.numpy())
        return torch.from_numpy(a), torch.from_numpy(h)


def _reference(env_id: str, num_envs: int, seed: int, n: int) -> list[dict[str, Any]]:
    """Lock-step single envs reproducing a NEXT_STEP vector env: an env that ended spends
    the following step resetting (no transition); transitions are listed step by step."""
    envs = [gym.make(env_id) for _ in range(num_envs)]
    obs = [e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]
    pending = [False] * num_envs
    out: list[dict[str, Any]] = []
    while len(out) < n:
        for i, env in enumerate(envs):
            if pending[i]:
                obs[i], _ = env.reset()
                pending[i] = False
                continue
            a, h = _policy(np.asarray(obs[i], np.float32)[None])
            nxt, r, term, trunc, _ = env.step(int(a[0]))
            out.append(
                {
                    "state": np.asarray(obs[i], np.float32),
                    "action": np.full(1, a[0], np.float32),
                    "reward": float(r),
                    "next_state": np.asarray(nxt, np.float32),
                    "done": bool(term),  # dones report terminations only
                    "hidden": h[0],
                    "truncated": bool(trunc and not term),
                }
            )
            pending[i] = term or trunc
            obs[i] = nxt
    return out[:n]


def test_warm_matches_a_single_env_reference() -> None:
    env_id = _short_cartpole()
    buf = ReplayBuffer(200, 4, 1, 3, seed=0)
    agent = _Agent(env_id)
    buf.warm(agent, 150, num_envs=3, seed=11)
    assert len(buf) == 150
    ref = _reference(env_id, 3, 11, 150)
    assert sum(t["truncated"] for t in ref) > 0 and sum(t["done"] for t in ref) > 0
    _assert_contents(buf, ref)
    buf.warm(agent, 100, num_envs=2)  # already holds more: nothing to do
    assert len(buf) == 150


def test_warm_argument_checks() -> None:
    buf = ReplayBuffer(10, 4, 1, 3)
    agent = _Agent(_short_cartpole())
    with pytest.raises(ConfigError, match="num_envs: expected an int >= 2, got 1"):
        buf.warm(agent, 5, num_envs=1)
    with pytest.raises(CapacityError, match="n_samples: expected 0 < n_samples <= capacity=10"):
        buf.warm(agent, 11)


def test_state_dict_is_exactly_the_documented_tensor_dict() -> None:
    """Issue 8: state_dict() carried a nested 'core' dict, so the documented
    ``{k: v.cpu() for k, v in buf.state_dict().items()}`` raised."""
    ts = _transitions(5)
    buf = ReplayBuffer(8, S, A, H, seed=0)
    for t in ts:
        buf.add(**t)
    sd = buf.state_dict()
    assert list(sd) == list(FIELDS) and all(isinstance(v, torch.Tensor) for v in sd.values())
    cpu = {k: v.cpu() for k, v in sd.items()}
    twin = ReplayBuffer(8, S, A, H, seed=0)
    twin.load_state_dict(cpu)  # the documented layout restores the contents
    _assert_contents(twin, ts)
    with pytest.raises(CheckpointError, match="state_dict"):
        twin.load_state_dict({**cpu, "states": torch.zeros(5, S + 1)})
    _assert_contents(twin, ts)


@pytest.mark.parametrize("bad", ["False", 0.5, 2, float("nan"), -1, None, np.array([2])])
def test_done_flags_are_bools_or_exact_zero_one(bad: Any) -> None:
    from _helpers import flat_state

    buf = ReplayBuffer(8, S, A, H, seed=0)
    t = _transitions(1)[0]
    buf.add(**t)
    before = flat_state(buf._core)
    with pytest.raises(SpecError, match="^done"):
        buf.add(**{**t, "done": bad})
    with pytest.raises(SpecError, match="^dones"):
        buf.add_multi(*(np.stack([t[k]] * 2) for k in ("state", "action")),
                      np.zeros(2), np.stack([t["next_state"]] * 2), [bad, bad],
                      np.stack([t["hidden"]] * 2))  # fmt: skip
    assert flat_state(buf._core) == before
    for ok, want in ((True, 1.0), (0, 0.0), (1.0, 1.0), (np.float32(0), 0.0)):
        buf.add(**{**t, "done": ok})
        assert buf.state_dict()["dones"][-1].item() == want


@pytest.mark.parametrize(
    ("field", "value"),
    [("state", np.full(S, np.nan)), ("next_state", np.full(S, np.inf)), ("state", "abcd"),
     ("action", np.zeros(A) + 1j), ("reward", None), ("hidden", np.full(H, np.nan)),
     ("reward", 1e300), ("next_state", np.zeros(S + 1))],
)  # fmt: skip
def test_errors_use_velora_argument_names(field: str, value: Any) -> None:
    """Errors say ``state`` / ``next_state`` (velora's names), never rlstore's ``obs``."""
    from _helpers import flat_state

    buf = ReplayBuffer(8, S, A, H, seed=0)
    t = _transitions(1)[0]
    buf.add(**t)
    before = flat_state(buf._core)
    with pytest.raises(SpecError, match=f"^{field}:") as info:
        buf.add(**{**t, field: value})
    assert "obs" not in str(info.value)
    plural = {**{k: np.stack([v] * 2) for k, v in t.items() if k != "reward"}, "reward": [1, 2]}
    plural[field] = [value, value]
    with pytest.raises(SpecError, match=f"^{field}s:"):
        buf.add_multi(*(plural[k] for k in ("state", "action", "reward", "next_state", "done",
                                             "hidden")))  # fmt: skip
    assert flat_state(buf._core) == before


def test_bad_device_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="device"):
        ReplayBuffer(8, S, A, H, device="gpu0")


def test_bfloat16_tensors_are_accepted_and_widened_exactly() -> None:
    buf = ReplayBuffer(4, S, A, H)
    bf = torch.bfloat16
    ts = _transitions(2, seed=5)
    buf.add_multi(
        torch.tensor(np.stack([t["state"] for t in ts])).to(bf),
        torch.tensor(np.stack([t["action"] for t in ts])).to(bf),
        torch.tensor([t["reward"] for t in ts], dtype=bf),
        torch.tensor(np.stack([t["next_state"] for t in ts])).to(bf),
        torch.tensor([t["done"] for t in ts]),
        torch.tensor(np.stack([t["hidden"] for t in ts])).to(bf),
    )
    want = torch.tensor(np.stack([t["state"] for t in ts])).to(bf).float()
    torch.testing.assert_close(buf.state_dict()["states"], want, rtol=0, atol=0)


def test_only_singleton_axes_are_reshaped() -> None:
    """Any array of the right size used to be reshaped: actions given as (action_dim, B)
    were silently re-paired with the wrong states. Only singleton axes may differ now."""
    buf = ReplayBuffer(8, S, A, H, seed=0)
    exp = _expected(_transitions(3))
    args = {k: exp[k] for k in FIELDS}
    with pytest.raises(SpecError, match=r"actions: expected shape \(3, 2\), got \(2, 3\)"):
        buf.add_multi(*({**args, "actions": exp["actions"].T}[k] for k in FIELDS))
    assert len(buf) == 0
    buf.add_multi(*({**args, "rewards": exp["rewards"].T}[k] for k in FIELDS))  # (1, 3): fine
    _assert_contents(buf, _transitions(3))


def test_empty_buffer_state_dict_has_zero_rows() -> None:
    sd = ReplayBuffer(4, S, A, H).state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()} == {
        "states": (0, S), "actions": (0, A), "rewards": (0, 1), "next_states": (0, S),
        "dones": (0, 1), "hiddens": (0, H),
    }  # fmt: skip
    assert all(v.dtype == torch.float32 for v in sd.values())
