"""Tests of rlstore.agents.run and rlstore.agents.run_checkpoint, the run infrastructure and the
checkpoint pieces every trainer shares."""

from __future__ import annotations

import copy
import random
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlstore.agents.run as run_mod
from rlstore.agents.run import (
    RunLogger,
    TrainStats,
    adam,
    create_run_dir,
    evaluate,
    plot_learning_curve,
    safe_name,
    set_global_seeds,
)
from rlstore.agents.run_checkpoint import (
    check_global_rng_state,
    check_module_state,
    check_optimizer_state,
    check_updates_log,
    checkpoint_path,
    checkpoint_schedule,
    global_rng_state,
    latest_checkpoint,
    list_checkpoints,
    optimizer_state,
    set_global_rng_state,
)
from rlstore.checkpoint import save_state
from rlstore.errors import CheckpointError, ConfigError


def _draw() -> tuple:
    return (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002


# ---------------------------------------------------------------- seeding and RNG states


def test_set_global_seeds_reproduces_all_generators() -> None:
    set_global_seeds(123)
    first = _draw()
    set_global_seeds(123)
    assert _draw() == first
    set_global_seeds(124)
    assert _draw() != first


def test_set_global_seeds_none_leaves_the_generators_alone() -> None:
    set_global_seeds(5)
    state = global_rng_state()
    set_global_seeds(None)
    expected = _draw()
    set_global_rng_state(state)
    assert _draw() == expected


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, "3", True])
def test_set_global_seeds_rejects_bad_seed(bad: object) -> None:
    with pytest.raises(ConfigError, match="seed"):
        set_global_seeds(bad)  # type: ignore[arg-type]


def test_global_rng_state_round_trip_through_save_state(tmp_path) -> None:
    from rlstore.checkpoint import load_state

    set_global_seeds(7)
    _draw()
    save_state(tmp_path / "c", {"rng": global_rng_state()}, prefix="t_")
    expected = _draw()
    set_global_seeds(99)
    loaded = load_state(tmp_path / "c", prefix="t_")["rng"]
    check_global_rng_state(loaded)
    set_global_rng_state(loaded)
    assert _draw() == expected


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda r: r.pop("torch"), "my.rng: expected keys"),
        (lambda r: r.update(torch=torch.zeros(3, dtype=torch.uint8)), "my.rng.torch"),
        (lambda r: r["numpy"].update(pos=625), "my.rng.numpy"),
        (lambda r: r["python"].update(version=2), "my.rng.python"),
    ],
)
def test_check_global_rng_state_names_the_bad_entry(mutate, where) -> None:
    rng = global_rng_state()
    mutate(rng)
    with pytest.raises(CheckpointError, match=where):
        check_global_rng_state(rng, "my.rng")


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda sd: sd.pop("bias"),
         r"m: expected the parameters \['bias', 'weight'\], got \['weight'\]"),
        (lambda sd: sd.update(extra=torch.zeros(1)), "m: expected the parameters"),
        (lambda sd: sd.update(bias=torch.zeros(3)),
         r"m\.bias: expected a tensor of shape \(2,\) and dtype torch\.float32, got \(\(3,\), "),
        (lambda sd: sd.update(weight=sd["weight"].double()),
         r"m\.weight: .*got \(\(2, 3\), torch\.float64\)"),
        (lambda sd: sd.update(weight=[[0.0] * 3] * 2), r"m\.weight: .* got list"),
    ],
    ids=["missing", "extra", "shape", "dtype", "not-a-tensor"],
)  # fmt: skip
def test_check_module_state_names_the_key_the_expectation_and_what_arrived(edit, match) -> None:
    module = torch.nn.Linear(3, 2)
    saved = dict(module.state_dict())
    check_module_state(saved, module, "m")  # as saved: accepted
    edit(saved)
    with pytest.raises(CheckpointError, match=match):
        check_module_state(saved, module, "m")
    with pytest.raises(CheckpointError, match="m: expected the parameters .* got str"):
        check_module_state("os.system", module, "m")


def test_check_updates_log() -> None:
    check_updates_log([{"loss": 0.5, "global_step": 8}], "log")
    for bad in ({"loss": 0.5}, [{"loss": "x"}], [[0.5]]):
        with pytest.raises(CheckpointError, match=r"log: expected a list of \{name: number\}"):
            check_updates_log(bad, "log")


def test_adam_is_the_fused_adam_of_every_trainer_and_steps_like_the_plain_one() -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    twin = torch.nn.Linear(3, 2)
    twin.load_state_dict(net.state_dict())
    fused = adam(net.parameters(), 1e-2, eps=1e-5)
    plain = torch.optim.Adam(twin.parameters(), lr=1e-2, eps=1e-5)
    assert fused.defaults["fused"] is True and fused.defaults["lr"] == 1e-2
    assert fused.defaults["eps"] == 1e-5 and adam(net.parameters(), 1.0).defaults["eps"] == 1e-8
    x = torch.randn(8, 3)
    for m, opt in ((net, fused), (twin, plain)):
        for _ in range(3):
            opt.zero_grad()
            m(x).square().mean().backward()
            opt.step()
    for p, q in zip(net.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)  # one kernel vs per-tensor loop


def test_a_per_tensor_adam_checkpoint_resumes_with_its_own_kernel() -> None:
    """A run saved with ``torch.optim.Adam`` (fused=None) loads into :func:`adam`'s fused
    optimizer and keeps stepping exactly like the optimizer it was saved from."""
    torch.manual_seed(1)
    net, twin = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    old = torch.optim.Adam(net.parameters(), lr=1e-2)
    x = torch.randn(8, 3)

    def step(m: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()

    step(net, old)
    twin.load_state_dict(net.state_dict())
    new = adam(twin.parameters(), 1e-2)
    saved = copy.deepcopy(optimizer_state(old))  # as read from disk: no tensor shared
    new.load_state_dict(check_optimizer_state(saved, new))
    assert new.param_groups[0]["fused"] is None  # the checkpoint's own choice
    for _ in range(3):
        step(net, old)
        step(twin, new)
    for p, q in zip(net.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p, q)
    bad = optimizer_state(old)
    bad["param_groups"][0]["fused"] = "yes"
    with pytest.raises(CheckpointError, match="param_groups.fused: expected bool"):
        check_optimizer_state(bad, new)


def test_optimizer_state_round_trip_and_checks() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adam([p], lr=0.1)
    p.grad = torch.ones(3)
    opt.step()
    saved = optimizer_state(opt)
    fresh = torch.optim.Adam([torch.nn.Parameter(torch.ones(3))], lr=0.5)
    fresh.load_state_dict(check_optimizer_state(saved, fresh))
    assert fresh.param_groups[0]["lr"] == 0.1
    assert torch.equal(
        fresh.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]
    )
    other = torch.optim.Adam([torch.nn.Parameter(torch.ones(4))])
    with pytest.raises(CheckpointError, match=r"opt\.state\.0\.exp_avg: expected shape \(4,\)"):
        check_optimizer_state(saved, other, "opt")


# ---------------------------------------------------------------- run folder


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("CartPole-v1", "CartPole-v1"),
        ("my_pkg.envs:Maze/Small-v0", "my_pkg.envs_Maze_Small-v0"),
        ("rlstore/Probe1-v0", "rlstore_Probe1-v0"),
        ("a b\\c", "a_b_c"),
        ("..", "_"),
        ("", "_"),
    ],
)
def test_safe_name(text: str, name: str) -> None:
    assert safe_name(text) == name


def test_create_run_dir_is_unique_and_refuses_unsafe_names(tmp_path) -> None:
    assert create_run_dir(tmp_path / "runs", "r") == tmp_path / "runs" / "r"
    assert create_run_dir(tmp_path / "runs", "r") == tmp_path / "runs" / "r-1"
    assert create_run_dir(tmp_path / "runs", "r") == tmp_path / "runs" / "r-2"
    with pytest.raises(ConfigError, match="exp_name.*'a_b'.*'a:b'"):
        create_run_dir(tmp_path, "a:b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_create_run_dir_in_a_file_is_a_config_error(tmp_path) -> None:
    """``--runs-dir FILE`` failed with a NotADirectoryError traceback."""
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError, match=r"run.runs_dir: expected a folder .* \(Not a dir"):
        create_run_dir(tmp_path / "f", "run")


def test_create_run_dir_expands_a_home_folder(tmp_path, monkeypatch) -> None:
    """``runs_dir: ~/runs`` in a config file made a folder named ``~`` in the working folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert create_run_dir("~/runs", "x") == tmp_path / "home" / "runs" / "x"
    assert not (tmp_path / "~").exists()


def test_checkpoint_listing(tmp_path) -> None:
    assert list_checkpoints(tmp_path / "missing", "x_") == []
    assert latest_checkpoint(tmp_path, "x_") is None
    for n in (2, 0, 10):
        save_state(checkpoint_path(tmp_path, n), {"n": n}, prefix="x_")
    (tmp_path / "checkpoint_0011").mkdir()  # uncommitted: no metadata file
    assert checkpoint_path(tmp_path, 3) == tmp_path / "checkpoint_0003"
    assert [n for n, _ in list_checkpoints(tmp_path, "x_")] == [0, 2, 10]
    assert latest_checkpoint(tmp_path, "x_") == tmp_path / "checkpoint_0010"
    assert list_checkpoints(tmp_path, "y_") == []


def test_latest_checkpoint_refuses_legacy_pickle_files(tmp_path) -> None:
    (tmp_path / "checkpoint_0001.pt").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="pickle"):
        latest_checkpoint(tmp_path, "ppo_")


@pytest.mark.parametrize(
    ("periods", "k", "expected"),
    [(10, 3, [3, 7, 10]), (10, 1, [10]), (3, 5, [1, 2, 3]), (10, 0, []), (1, 1, [1])],
)
def test_checkpoint_schedule(periods, k, expected) -> None:
    assert sorted(checkpoint_schedule(periods, k)) == expected


# ---------------------------------------------------------------- logging and plots


def test_run_logger_writes_named_scalars(tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = RunLogger(tmp_path, total_steps=100, progress_bar=False)
    log.episode(10.0, 10, 5)
    log.scalars({"losses/td_loss": 0.5}, 8)
    log.progress(8, sps=1)
    log.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert {"charts/episodic_return", "charts/episodic_length", "losses/td_loss"} <= set(
        acc.Tags()["scalars"]
    )
    assert [(e.step, e.value) for e in acc.Scalars("losses/td_loss")] == [(8, 0.5)]


def _as_an_earlier_process(tb: Path) -> None:
    """Date the event files in ``tb`` 1000 s back: TensorBoard reads a folder's files in name
    order, ``events.out.tfevents.<time>.<host>.<pid>.<n>``, so two writers of one test process
    within a second could be read resumed-run-first (a real resume is a later process)."""
    for f in tb.glob("events.out.tfevents.*"):
        parts = f.name.split(".")
        parts[3] = str(int(parts[3]) - 1000)
        f.rename(f.with_name(".".join(parts)))


def test_a_resumed_logger_replaces_the_events_logged_after_the_checkpoint(tmp_path) -> None:
    """A run interrupted at step 7 after a checkpoint at step 4 resumes from 4 and logs 5-8
    again: TensorBoard showed steps 5-7 twice (both runs' values)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    first = RunLogger(tmp_path, total_steps=8, progress_bar=False)
    for step in range(1, 8):
        first.scalars({"losses/x": -1.0}, step)
    first.close()  # the crash
    _as_an_earlier_process(tmp_path / "tb")
    resumed = RunLogger(tmp_path, total_steps=8, initial_step=4, progress_bar=False)
    for step in range(5, 9):
        resumed.scalars({"losses/x": 1.0}, step)
    resumed.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("losses/x")]
    assert got == [(s, -1.0) for s in range(1, 5)] + [(s, 1.0) for s in range(5, 9)]


def test_plot_learning_curve_has_the_title_and_the_evaluations(tmp_path, monkeypatch) -> None:
    from matplotlib.figure import Figure

    seen = {}
    real_savefig = Figure.savefig

    def spy(fig, path, *a, **k):
        ax = fig.axes[0]
        seen["title"] = ax.get_title()
        seen["labels"] = [line.get_label() for line in ax.get_lines()]
        return real_savefig(fig, path, *a, **k)

    monkeypatch.setattr(Figure, "savefig", spy)
    stats = TrainStats(episode_returns=[1.0, 2.0], episode_end_steps=[5, 9], evaluations=[(9, 3.0)])
    plot_learning_curve(stats, tmp_path / "c.png", "PPO (lstm) on CartPoleNoVel-v1, seed 1")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert seen["title"] == "PPO (lstm) on CartPoleNoVel-v1, seed 1"
    assert "evaluation mean (deterministic)" in seen["labels"]


def test_interrupted_and_resumed_run_logs_each_update_and_episode_once(
    tmp_path, monkeypatch, capsys
) -> None:
    """``rlstore train`` interrupted after a checkpoint and resumed: one TensorBoard history,
    each update and episode logged once, and the learning curve."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlstore.agents import ppo
    from rlstore.cli import main

    real_update, calls = ppo.ppo_update, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # checkpoints after updates 2, 3, 5, 6, 8: update 4 is logged twice
            raise KeyboardInterrupt
        return real_update(*args, **kwargs)

    monkeypatch.setattr(ppo, "ppo_update", interrupted)
    argv = ["train", "--total-steps", "2048", "--no-progress", "--exp-name", "r"]
    assert main([*argv, "--runs-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert f"latest checkpoint with: rlstore train --resume {tmp_path / 'r'}" in err
    assert "Traceback" not in err
    monkeypatch.undo()
    _as_an_earlier_process(tmp_path / "r" / "tb")
    assert main(["train", "--resume", str(tmp_path / "r"), "--no-progress"]) == 0
    episodes = int(capsys.readouterr().out.split("episodes")[1].split()[0])
    acc = EventAccumulator(str(tmp_path / "r" / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("charts/SPS")] == [256 * u for u in range(1, 9)]
    assert len(acc.Scalars("charts/episodic_return")) == episodes
    assert (tmp_path / "r" / "learning_curve.png").is_file()


def test_a_plot_interrupted_mid_write_leaves_the_previous_curve_whole(tmp_path, monkeypatch):
    """The PNG was written in place: a crash or Ctrl-C inside ``savefig`` left a truncated
    ``learning_curve.png`` (the resumed run's curve replaces the previous one)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = tmp_path / "learning_curve.png"
    stats = TrainStats(episode_returns=[1.0, 2.0], episode_end_steps=[5, 9])
    plot_learning_curve(stats, path, "before")
    before = path.read_bytes()

    def interrupted(canvas, target, *args, **kwargs):
        if hasattr(target, "write"):
            target.write(b"\x89PNG half")
        else:
            Path(target).write_bytes(b"\x89PNG half")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "tight_layout", lambda *args, **kwargs: None)  # renders too
    monkeypatch.setattr(FigureCanvasAgg, "print_png", interrupted)
    with pytest.raises(KeyboardInterrupt):
        plot_learning_curve(stats, path, "after")
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [path.name]


# ---------------------------------------------------------------- evaluation


def test_evaluate_runs_seeded_episodes_and_leaves_global_rngs_alone() -> None:
    def act(obs: np.ndarray) -> np.ndarray:
        assert obs.shape == (4,)
        return np.int64(obs[2] > 0)  # push towards the pole's lean

    starts = []

    def make_env() -> gym.Env:
        return gym.make("CartPole-v1")

    set_global_seeds(3)
    state = global_rng_state()
    returns = evaluate(act, make_env, 3, seed=10, begin_episode=lambda: starts.append(1))
    expected = _draw()
    set_global_rng_state(state)
    assert _draw() == expected  # evaluation drew nothing from the global RNGs
    assert len(returns) == 3 and len(starts) == 3 and all(r >= 1 for r in returns)
    assert evaluate(act, make_env, 3, seed=10) == returns  # episode i starts from seed + i
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=11)
    total, done = 0.0, False
    while not done:
        obs, r, term, trunc, _ = env.step(act(obs))
        total, done = total + r, term or trunc
    assert returns[1] == total


def test_evaluate_cuts_episodes_of_an_env_without_a_time_limit(monkeypatch) -> None:
    # CliffWalking-v1 has no time limit: "up" from the start state never ends an episode
    monkeypatch.setattr(run_mod, "EVAL_STEP_CAP", 50)
    with pytest.warns(UserWarning, match="cut after 50 steps.*environment.max_steps"):
        returns = evaluate(lambda o: 0, lambda: gym.make("CliffWalking-v1"), 2, seed=0)
    assert returns == [-50.0, -50.0]  # -1 per step, 50 steps each
    # an env with its own limit runs to it, never to the cap
    limited = lambda: gym.make("CliffWalking-v1", max_episode_steps=70)  # noqa: E731
    assert evaluate(lambda o: 0, limited, 1, seed=0) == [-70.0]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_evaluate_rejects_bad_episode_counts(bad) -> None:
    with pytest.raises(ConfigError, match="episodes"):
        evaluate(lambda o: 0, lambda: gym.make("CartPole-v1"), bad, seed=0)


def test_evaluate_video_without_moviepy_names_the_extra(tmp_path, monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_moviepy(name, *args, **kwargs):
        if name == "moviepy" or name.startswith("moviepy."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_moviepy)
    with pytest.raises(ConfigError, match="moviepy"):
        evaluate(lambda o: 0, lambda: gym.make("CartPole-v1", render_mode="rgb_array"), 1,
                 seed=0, video_dir=tmp_path / "v")  # fmt: skip
    assert not (tmp_path / "v").exists()


# ---------------------------------------------------------------- the training frame


def _refused_runs(tmp_path):
    """Trainer calls refused after the thread count was set (before TrainingRun, each of these
    left torch at the run's thread count)."""
    from rlstore.agents.dqn import DQNTrainConfig, train_dqn
    from rlstore.agents.impala import ImpalaTrainConfig, train_impala
    from rlstore.agents.ppo import train_ppo
    from rlstore.agents.ppo_config import EnvironmentConfig, OnlineTrainConfig, RunConfig
    from rlstore.agents.sac import SACTrainConfig, train_sac

    oc = OnlineTrainConfig(total_timesteps=64, num_envs=2, num_steps=32)
    rc = RunConfig(seed=1, track=False, progress_bar=False, torch_threads=3)
    env = EnvironmentConfig(env_id="CartPole-v1")
    yield "ppo: no checkpoint", lambda: train_ppo(rc, oc, env, run_dir=tmp_path, resume=True)
    pend = {"env_id": "Pendulum-v1"}
    impala = ImpalaTrainConfig.from_dict({"run": {"torch_threads": 3}, "environment": pend})
    yield "impala: Box actions", lambda: train_impala(impala)
    sac = SACTrainConfig.from_dict({"run": {"torch_threads": 3}, "environment": pend})
    yield "sac: no checkpoint", lambda: train_sac(sac, run_dir=tmp_path, resume=True)
    dqn = DQNTrainConfig.from_dict({"run": {"torch_threads": 3}})
    yield "dqn: no checkpoint", lambda: train_dqn(dqn, run_dir=tmp_path, resume=True)


def test_a_refused_run_leaves_the_thread_count_as_it_was(tmp_path) -> None:
    before = torch.get_num_threads()
    for what, call in _refused_runs(tmp_path):
        with pytest.raises(ConfigError):
            call()
        assert torch.get_num_threads() == before, what
