"""``rlstore demo-record`` and the ``.npz`` demo loader: round trip, frame-skip refusal, bad
action lists (a clear RLStoreError and no file written)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rlstore.envs  # noqa: F401
from rlstore.buffers.demo_files import load_npz_demo, read_npz
from rlstore.cli import main
from rlstore.demo_record import record
from rlstore.envs.keydoor import KEYDOOR_ID, optimal_actions
from rlstore.errors import CheckpointError, ConfigError


def test_cli_scripted_round_trip_reproduces_observations_and_return(tmp_path: Path) -> None:
    out = tmp_path / "kd.npz"
    assert main(["demo-record", "--env", KEYDOOR_ID, "--policy", "scripted", "--out", str(out),
                 "--seed", "3"]) == 0  # fmt: skip
    arrays = read_npz(out)
    assert arrays["Observation"].shape[0] == arrays["Action"].shape[0] + 1  # final obs kept
    assert arrays["Observation"].dtype == np.float32 and int(arrays["FrameSkip"]) == 1
    demo = load_npz_demo(out)
    env = gym.make(KEYDOOR_ID)
    obs, _ = env.reset(seed=3)
    ret = 0.0
    for j, a in enumerate(demo.actions):
        np.testing.assert_array_equal(obs, demo.observations[j])
        obs, r, terminated, _, _ = env.step(int(a))
        ret += r
    np.testing.assert_array_equal(obs, arrays["Observation"][-1])
    assert terminated and ret == 1.0 == demo.total_reward


def test_action_list_is_recorded_as_given(tmp_path: Path) -> None:
    out = record(KEYDOOR_ID, tmp_path / "a.npz", actions="2, 2,1")
    demo = load_npz_demo(out)
    assert demo.actions.tolist() == [2, 2, 1] and demo.rewards.tolist() == [0.0] * 3
    full = record(KEYDOOR_ID, tmp_path / "b.npz", actions=",".join(map(str, optimal_actions())))
    assert load_npz_demo(full).total_reward == 1.0


def test_frame_skip_mismatch_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "fs.npz"
    assert main(["demo-record", "--env", KEYDOOR_ID, "--actions", "1,2", "--out", str(out),
                 "--frame-skip", "4"]) == 0  # fmt: skip
    with pytest.raises(
        ConfigError, match="FrameSkip 4 differs from the environment's frame_skip 1"
    ):
        load_npz_demo(out)
    assert load_npz_demo(out, frame_skip=4).length == 2
    for bad in [0, True, 1.0]:
        with pytest.raises(ConfigError, match="frame_skip"):
            load_npz_demo(out, frame_skip=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("actions", "match"),
    [
        ("0,4", r"actions\[1\]: expected an int in 0..3, got 4"),
        ("-1", r"actions\[0\]: expected an int in 0..3, got -1"),
        ("1,1.5", r"actions\[1\]: expected an int in 0..3, got '1.5'"),
        ("up", r"actions\[0\]: .* got 'up'"),
        ("", "expected a comma-separated list"),
        ("1,,2", r"actions\[1\]"),
        (",".join(map(str, optimal_actions() + [0])), "episode ended after 24 of 25"),
    ],
)
def test_bad_action_lists_raise_and_write_nothing(
    tmp_path: Path, actions: str, match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bad.npz"
    with pytest.raises(ConfigError, match=match):
        record(KEYDOOR_ID, out, actions=actions)
    assert main(["demo-record", "--env", KEYDOOR_ID, "--actions", actions, "--out", str(out)]) == 2
    assert "rlstore demo-record: error: actions" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_bad_env_out_and_policy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="env: cannot make"):
        record("NoSuchEnv-v9", tmp_path / "x.npz", actions="0")
    with pytest.raises(ConfigError, match="out: expected a path ending in .npz"):
        record(KEYDOOR_ID, tmp_path / "x.bin", actions="0")
    with pytest.raises(ConfigError, match="no 'scripted' policy"):
        record("CartPole-v1", tmp_path / "x.npz", policy="scripted")
    with pytest.raises(ConfigError, match="Discrete"):
        record("Pendulum-v1", tmp_path / "x.npz", actions="0")
    assert list(tmp_path.iterdir()) == []


def test_unreadable_or_inconsistent_files(tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_npz_demo(tmp_path / "junk.npz")
    np.savez(tmp_path / "short.npz", Observation=np.zeros((5, 2)), Action=np.zeros(2),
             Reward=np.zeros(2))  # fmt: skip
    with pytest.raises(CheckpointError, match="short.npz: observations"):
        load_npz_demo(tmp_path / "short.npz")


def test_frame_skip_repeats_each_action(tmp_path: Path) -> None:
    demo = load_npz_demo(record(KEYDOOR_ID, tmp_path / "fs.npz", actions="1,2", frame_skip=3), 3)
    env = gym.make(KEYDOOR_ID)
    obs, _ = env.reset(seed=0)
    for a in (1, 1, 1):
        obs, *_ = env.step(a)
    np.testing.assert_array_equal(demo.observations[1], obs)  # after the 3 steps of action 1
    assert demo.actions.tolist() == [1, 2]


def test_record_from_a_trained_run_plays_its_deterministic_policy(tmp_path: Path) -> None:
    from rlstore.agents.networks import deterministic_policy
    from rlstore.agents.ppo_checkpoint import load_saved_checkpoint
    from rlstore.agents.ppod import PPODTrainConfig, train_ppod

    cfg = PPODTrainConfig.from_dict({
        "run": {"track": False, "eval_episodes": 0}, "environment": {"env_id": KEYDOOR_ID},
        "online": {"total_timesteps": 256, "num_envs": 2, "num_steps": 64, "num_checkpoints": 1},
    })  # fmt: skip
    train_ppod(cfg, run_dir=tmp_path / "run")
    assert main(["demo-record", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "r.npz"),
                 "--seed", "5"]) == 0  # fmt: skip
    demo = load_npz_demo(tmp_path / "r.npz")
    agent = load_saved_checkpoint(tmp_path / "run" / "checkpoints" / "checkpoint_0000").eval()
    begin, act = deterministic_policy(agent)
    begin()
    env = gym.make(KEYDOOR_ID)
    obs, _ = env.reset(seed=5)
    for j, a in enumerate(demo.actions):
        np.testing.assert_array_equal(obs, demo.observations[j])
        assert int(act(obs)) == int(a)
        obs, *_ = env.step(int(a))
    assert demo.length == 100 or demo.total_reward == 1.0  # the time limit or the goal
    with pytest.raises(ConfigError, match="env: expected the run's 'rlstore/KeyDoor-v0'"):
        record("CartPole-v1", tmp_path / "x.npz", run=tmp_path / "run")
    with pytest.raises(ConfigError, match=r"run: expected a PPO or PPO\+D run folder"):
        record(None, tmp_path / "x.npz", run=tmp_path)


def test_keyboard_input_records_the_typed_episode(tmp_path: Path, monkeypatch) -> None:
    import io

    typed = ["x", "9", ""] + [str(a) for a in optimal_actions()]  # two bad lines, then the path
    lines = "\n".join(typed[:2] + typed[3:]) + "\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    out = tmp_path / "typed.npz"
    assert main(["demo-record", "--env", KEYDOOR_ID, "--keyboard", "--out", str(out)]) == 0
    want = tmp_path / "listed.npz"
    record(KEYDOOR_ID, want, actions=list(optimal_actions()))
    got, ref = read_npz(out), read_npz(want)
    assert set(got) == set(ref)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    assert float(got["Reward"].sum()) == 1.0


@pytest.mark.parametrize("lines", ["1\n2\nq\n", "1\n2\n"])  # q, or the input ends
def test_keyboard_stop_before_the_end_writes_nothing(tmp_path: Path, lines: str) -> None:
    import io

    out = tmp_path / "stopped.npz"
    with pytest.raises(ConfigError, match="keyboard: stopped after 2 actions"):
        record(KEYDOOR_ID, out, keyboard=True, stdin=io.StringIO(lines), stdout=io.StringIO())
    assert not out.exists()
    with pytest.raises(ConfigError, match="exactly one"):
        record(KEYDOOR_ID, out, keyboard=True, actions=[1])


def test_save_npz_demo_refuses_bad_input_and_keeps_the_observation_dtype(tmp_path: Path) -> None:
    """save_npz_demo wrote arrays that make no demo (a file load_npz_demo then refused), cut
    frame_skip=1.5 to 1, and cast observations to float32 (0.1 float64 lost bits)."""
    from rlstore.buffers.demo_files import save_npz_demo
    from rlstore.errors import SpecError

    out = tmp_path / "d.npz"
    with pytest.raises(SpecError, match="actions: expected a leading axis L=2"):
        save_npz_demo(out, np.zeros((3, 2)), np.zeros(5), np.zeros(2))
    for bad in (1.5, 0, True, "2"):
        with pytest.raises(ConfigError, match="frame_skip: expected an int >= 1"):
            save_npz_demo(out, np.zeros((3, 2)), np.zeros(2), np.zeros(2), frame_skip=bad)
    with pytest.raises(SpecError, match="observations"):
        save_npz_demo(out, np.full((2, 2), np.nan), np.zeros(2), np.zeros(2))
    assert not out.exists()
    obs = np.full((3, 2), 0.1)  # L + 1 rows, float64
    save_npz_demo(out, obs, np.array([1, 0]), np.array([0.0, 1.0]), frame_skip=2)
    arrays = read_npz(out)
    assert arrays["Observation"].dtype == np.float64 and int(arrays["FrameSkip"]) == 2
    np.testing.assert_array_equal(arrays["Observation"], obs)
    np.testing.assert_array_equal(load_npz_demo(out, 2).observations, obs[:2])
    img = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    save_npz_demo(out, img, np.array([1, 0]), np.zeros(2))
    assert load_npz_demo(out).observations.dtype == np.uint8


def test_a_bool_frame_skip_in_a_demo_file_is_refused(tmp_path: Path) -> None:
    """FrameSkip=True was read as frame skip 1."""
    out = tmp_path / "b.npz"
    np.savez(out, Observation=np.zeros((2, 2)), Action=np.zeros(2), Reward=np.zeros(2),
             FrameSkip=np.array(True))  # fmt: skip
    with pytest.raises(CheckpointError, match="b.npz: FrameSkip: expected real numbers"):
        load_npz_demo(out)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "{tmp}"], "out: expected a path ending in .npz"),
        (["--out", "{tmp}/folder.npz"], "out: expected a file in an existing folder"),
        (["--out", "{tmp}/missing/d.npz"], "no folder"),
        (["--out", "{tmp}/d.npz", "--seed", "-1"], "seed: expected an int >= 0, got -1"),
    ],
)
def test_bad_out_or_seed_is_one_line_before_the_episode(tmp_path, capsys, argv, message) -> None:
    """A folder or a missing parent as ``--out`` failed in the writer with a traceback after
    the episode was played (typed, with ``--keyboard``); ``--seed -1`` in gymnasium's reset."""
    (tmp_path / "folder.npz").mkdir()
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(["demo-record", "--env", KEYDOOR_ID, "--keyboard", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert captured.out == ""  # no action was asked for
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.npz"]


def test_a_probe_env_is_recorded(tmp_path: Path) -> None:
    """``rlstore/Probe5-v0`` failed: the probes were not registered (only KeyDoor was)."""
    assert main(["demo-record", "--env", "rlstore/Probe5-v0", "--actions", "1",
                 "--out", str(tmp_path / "p.npz")]) == 0  # fmt: skip
    assert read_npz(tmp_path / "p.npz")["Action"].tolist() == [1]


def test_the_cli_reports_the_length_and_return_of_what_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An action list shorter than the episode writes the part played: on a -1-per-step task
    (MountainCar) a 3-step demo of return -3 outranks every real episode as a PPO+D reward demo,
    so the CLI shows the length and return (it printed only ``wrote PATH``)."""
    out = tmp_path / "part.npz"
    argv = ["demo-record", "--env", "MountainCar-v0", "--actions", "0,1,2", "--out", str(out)]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"wrote {out}: 3 steps, return -3\n"
