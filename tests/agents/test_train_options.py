"""``rlstore train`` for practitioners: --algo, per-env configs, overrides, budget extension,
no stray run folders, safe folder names, evaluation episodes and video."""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstore.agents import ppo
from rlstore.agents import run as run_module
from rlstore.agents import train_cli as cli_train
from rlstore.agents.ppo import evaluate_agent, runner, train_ppo
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    LSTMModelConfig,
    OnlineTrainConfig,
    RunConfig,
    load_train_config,
)
from rlstore.agents.train_cli import ALGORITHMS, build_config, default_config
from rlstore.cli import main
from rlstore.errors import ConfigError

TINY = ["--total-steps", "512", "--no-progress", "--no-tensorboard"]


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli_train.add_arguments(p)
    return p.parse_args(list(argv))


# ---------------------------------------------------------------- --algo and per-env configs


def test_algo_registry_and_module_interface() -> None:
    assert ALGORITHMS["ppo"] == "rlstore.agents.ppo" and _args().algo is None  # ppo
    assert ppo.DEFAULT_CONFIGS["CartPole-v1"] == "ppo_fc_CartPole-v1.yaml"
    assert next(iter(ppo.DEFAULT_CONFIGS)) == "CartPole-v1"
    assert callable(ppo.load_config) and callable(ppo.runner)
    with pytest.raises(SystemExit):
        _args("--algo", "nope")


def test_config_lookup_by_env_and_agent(tmp_path, monkeypatch) -> None:
    path, fallback = default_config("ppo", ppo, None, None)
    assert path.name == "ppo_fc_CartPole-v1.yaml" and not fallback
    path, fallback = default_config("ppo", ppo, "CartPole-v1", "lstm")  # fc file, agent swapped
    assert path.name == "ppo_fc_CartPole-v1.yaml" and not fallback
    cfg = build_config(_args("--agent", "lstm"))
    assert cfg.agent == "lstm" and cfg.online.update_epochs == 10  # CartPole's tuned settings
    path, fallback = default_config("ppo", ppo, "Acrobot-v1", None)
    assert path.name == "ppo_fc_CartPole-v1.yaml" and fallback
    # agent-specific files are found by name: ppo_<agent>_<env>.yaml
    for name in ("ppo_fc_CartPole-v1.yaml", "ppo_lstm_CartPoleNoVel-v1.yaml"):
        (tmp_path / name).write_text("agent: fc\n" if "fc" in name else "agent: lstm\n")
    monkeypatch.setattr(cli_train, "_packaged", lambda name: tmp_path / name)
    path, fallback = default_config("ppo", ppo, "CartPoleNoVel-v1", "lstm")
    assert path.name == "ppo_lstm_CartPoleNoVel-v1.yaml" and not fallback
    # no transformer file here: the env's packaged config (the LSTM one) with the agent swapped
    assert ppo.DEFAULT_CONFIGS["CartPoleNoVel-v1"] == "ppo_lstm_CartPoleNoVel-v1.yaml"
    path, fallback = default_config("ppo", ppo, "CartPoleNoVel-v1", "transformer")
    assert path.name == "ppo_lstm_CartPoleNoVel-v1.yaml" and not fallback
    path, fallback = default_config("ppo", ppo, "Acrobot-v1", "transformer")
    assert path.name == "ppo_fc_CartPole-v1.yaml" and fallback


def test_untuned_env_runs_with_a_clear_warning(tmp_path, capsys) -> None:
    rc = main(["train", "--env", "Acrobot-v1", "--total-steps", "256", "--no-progress",
               "--no-tensorboard", "--runs-dir", str(tmp_path)])  # fmt: skip
    assert rc == 0
    err = capsys.readouterr().err
    assert "no packaged ppo config for Acrobot-v1: using the hyper-parameters tuned for " \
        "CartPole-v1 (ppo_fc_CartPole-v1.yaml)" in err  # fmt: skip
    assert load_train_config(tmp_path / "Acrobot-v1-fc-s1" / "config.yaml").environment.env_id \
        == "Acrobot-v1"  # fmt: skip
    assert main(["train", *TINY, "--runs-dir", str(tmp_path)]) == 0
    assert "no packaged" not in capsys.readouterr().err


# ---------------------------------------------------------------- overrides


def test_named_flags_and_set_overrides() -> None:
    cfg = build_config(_args(
        "--lr", "3e-4", "--num-steps", "64", "--gamma", "0.95", "--ent-coef", "0.02",
        "--set", "online.clip_coef=0.1", "--set", "online.anneal_clip=true",
        "--set", "run.seed=7", "--set", "lstm.memory_dim=32", "--set", "environment.max_steps=100",
    ))  # fmt: skip
    o = cfg.online
    assert (o.learning_rate, o.num_steps, o.gamma, o.ent_coef) == (3e-4, 64, 0.95, 0.02)
    assert (o.clip_coef, o.anneal_clip, cfg.run.seed) == (0.1, True, 7)
    assert cfg.lstm.memory_dim == 32 and cfg.environment.max_steps == 100
    assert cfg.run.exp_name == "CartPole-v1-fc-s7"
    assert o.num_envs == 8  # the rest is the packaged config's


def test_set_reads_exponent_floats_and_refuses_strings_for_numbers() -> None:
    """PyYAML read ``3e-4`` as a string (YAML 1.1 wants a dot), and the PPO config coerced
    strings: ``"2000"`` became 2000 and ``"true"`` True, while the IMPALA config refused 3e-4."""
    cfg = build_config(_args("--set", "online.learning_rate=3e-4", "--set", "online.ent_coef=1E-2"))
    assert (cfg.online.learning_rate, cfg.online.ent_coef) == (3e-4, 1e-2)
    for item in ('online.total_timesteps="2000"', 'online.norm_adv="true"'):
        with pytest.raises(ConfigError, match="online.(total_timesteps|norm_adv)"):
            build_config(_args("--set", item))
    impala = build_config(_args("--algo", "impala", "--set", "impala.learning_rate=3e-4"))
    assert impala.impala.learning_rate == 3e-4


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("online.learning_rat=0.1", "TrainConfig: online.learning_rat: unknown key"),
        ("online.num_envs=1.5", "online.num_envs"),
        ("online.gamma=abc", "online.gamma"),
        ("nosuch.key=1", "nosuch"),
        ("learning_rate", "--set: expected section.key=value, got 'learning_rate'"),
        ("online..x=1", "--set: expected section.key=value"),
        ("agent.x=1", "'agent' is a value, not a section"),
    ],
)
def test_bad_set_is_one_clear_error_and_writes_nothing(tmp_path, capsys, item, message) -> None:
    rc = main(["train", *TINY, "--set", item, "--runs-dir", str(tmp_path / "runs")])
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- resume with a larger budget


def test_resume_extends_the_budget_and_the_schedule_continues(tmp_path, capsys) -> None:
    """A finished 2-update run (lr 1e-3 decayed linearly to 0) extended to 4 updates: the
    decay is re-planned over the 4 updates, so updates 3 and 4 use 1e-3 * (1 - u / 4) for
    u = 2, 3 (5e-4, 2.5e-4), as a run planned with 4 updates would."""
    assert main(["train", *TINY, "--exp-name", "r", "--runs-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r"), "--total-steps", "1024"]) == 0
    out = capsys.readouterr().out
    assert "env steps       1024 in 4 updates" in out
    cfg = load_train_config(tmp_path / "r" / "config.yaml")
    assert cfg.online.total_timesteps == 1024
    # the log of the extended run: the first two updates, then the re-planned rate
    agent, stats = runner(cfg, run_dir=tmp_path / "r", resume=True)  # finished: nothing to do
    assert [u["lr"] for u in stats.updates] == pytest.approx([1e-3, 5e-4, 5e-4, 2.5e-4])
    assert len(list((tmp_path / "r" / "checkpoints").iterdir())) == 4
    # fewer steps than done, and any other override, are refused before anything changes
    assert main(["train", "--resume", str(tmp_path / "r"), "--total-steps", "512"]) == 2
    assert "online.total_timesteps: expected at least 1024" in capsys.readouterr().err
    for extra in (["--lr", "0.1"], ["--set", "online.gamma=0.9"], ["--video"]):
        assert main(["train", "--resume", str(tmp_path / "r"), *extra]) == 2
        assert f"drop {extra[0]}" in capsys.readouterr().err
    assert load_train_config(tmp_path / "r" / "config.yaml") == cfg


def test_runner_resume_refuses_other_changes(tmp_path) -> None:
    assert main(["train", *TINY, "--exp-name", "r", "--runs-dir", str(tmp_path)]) == 0
    cfg = load_train_config(tmp_path / "r" / "config.yaml")
    changed = cfg.model_copy(update={"online": cfg.online.model_copy(update={"gamma": 0.5})})
    with pytest.raises(ConfigError, match="only online.total_timesteps may change"):
        runner(changed, run_dir=tmp_path / "r", resume=True)


def test_extended_run_continues_like_a_resumed_one(tmp_path) -> None:
    """Interrupted at update 2 of 4, resumed with a budget of 6 updates: updates 3..6 follow the
    6-update plan; with the original budget the resume stays exact (other tests)."""
    common = dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=1, num_checkpoints=2)
    run, env = RunConfig(seed=2, track=False, eval_episodes=0), EnvironmentConfig()
    train_ppo(run, OnlineTrainConfig(total_timesteps=256, **common), env, run_dir=tmp_path)
    long = OnlineTrainConfig(total_timesteps=384, **common)
    _, stats = train_ppo(run, long, env, run_dir=tmp_path, resume=True)
    lrs = [u["lr"] for u in stats.updates]
    assert lrs == pytest.approx([2.5e-4 * (1 - u / 4) for u in (0, 1, 2, 3)]
                                + [2.5e-4 * (1 - u / 6) for u in (4, 5)])  # fmt: skip
    assert stats.global_step == 384


# ---------------------------------------------------------------- no stray run folders


def _broken_env(**kwargs) -> gym.Env:
    raise gym.error.DependencyNotInstalled("box2d is not installed (pip install box2d)")


def test_env_that_cannot_be_built_leaves_no_folder(tmp_path, capsys) -> None:
    gym.register("rlstoretest/NeedsBox2d-v0", entry_point=_broken_env)
    try:
        rc = main(["train", *TINY, "--env", "rlstoretest/NeedsBox2d-v0",
                   "--runs-dir", str(tmp_path / "runs")])  # fmt: skip
    finally:
        del gym.registry["rlstoretest/NeedsBox2d-v0"]
    assert rc == 2 and "box2d" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_failure_before_the_first_update_removes_the_folder(tmp_path, monkeypatch) -> None:
    def fail(*args, **kwargs):
        raise ConfigError("agent: cannot be built")

    monkeypatch.setattr(ppo, "get_agent", fail)
    assert main(["train", *TINY, "--runs-dir", str(tmp_path / "runs")]) == 2
    assert list((tmp_path / "runs").iterdir()) == []
    monkeypatch.undo()
    calls = []

    def interrupt(*args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(ppo, "run_rollout", interrupt)
    assert main(["train", *TINY, "--runs-dir", str(tmp_path / "runs")]) == 130
    assert calls and list((tmp_path / "runs").iterdir()) == []


def test_failure_after_the_first_update_keeps_the_folder(tmp_path, monkeypatch) -> None:
    real_update, done = ppo.ppo_update, []

    def update_once(*args, **kwargs):
        if done:
            raise KeyboardInterrupt
        done.append(1)
        return real_update(*args, **kwargs)

    monkeypatch.setattr(ppo, "ppo_update", update_once)
    assert main(["train", *TINY, "--runs-dir", str(tmp_path)]) == 130
    assert (tmp_path / "CartPole-v1-fc-s1" / "checkpoints" / "checkpoint_0000").is_dir()


# ---------------------------------------------------------------- names, solved line


def test_namespaced_env_gets_a_safe_folder_and_the_solved_line(tmp_path, capsys) -> None:
    cart = "gymnasium.envs.classic_control:CartPoleEnv"
    gym.register("rlstoretest/EasyCart-v0", cart, max_episode_steps=20, reward_threshold=5.0)
    try:
        rc = main(["train", *TINY, "--env", "rlstoretest/EasyCart-v0", "--runs-dir", str(tmp_path)])
    finally:
        del gym.registry["rlstoretest/EasyCart-v0"]
    assert rc == 0
    assert [p.name for p in tmp_path.iterdir()] == ["rlstoretest_EasyCart-v0-fc-s1"]
    assert "solved (>= 5, mean of 20) at step" in capsys.readouterr().out


def test_unsafe_exp_name_is_refused_before_anything_is_written(tmp_path, capsys) -> None:
    rc = main(["train", *TINY, "--exp-name", "../x", "--runs-dir", str(tmp_path / "runs")])
    assert rc == 2 and "run.exp_name: expected a folder name" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "x").exists()


def test_curve_is_titled(tmp_path, monkeypatch) -> None:
    titles = []
    monkeypatch.setattr(run_module, "plot_learning_curve", lambda s, p, title: titles.append(title))
    oc = OnlineTrainConfig(total_timesteps=64, num_envs=2, num_steps=32, num_minibatches=2,
                           update_epochs=1)  # fmt: skip
    train_ppo(RunConfig(seed=4, track=False), oc, EnvironmentConfig(env_id="CartPoleNoVel-v1"),
              LSTMModelConfig(recurrence=4), run_dir=tmp_path)  # fmt: skip
    assert titles == ["PPO (lstm) on CartPoleNoVel-v1, seed 4"]


# ---------------------------------------------------------------- evaluation


@pytest.mark.parametrize("model", [None, LSTMModelConfig(recurrence=4)], ids=["fc", "lstm"])
def test_evaluation_does_not_change_the_run(tmp_path, model) -> None:
    oc = OnlineTrainConfig(total_timesteps=4 * 16 * 3, num_envs=4, num_steps=16,
                           num_minibatches=2, update_epochs=1)  # fmt: skip
    env = EnvironmentConfig(max_steps=30)
    plain_agent, plain = train_ppo(RunConfig(seed=5, track=False, eval_episodes=0), oc, env, model)
    torch.manual_seed(0)
    agent, stats = train_ppo(
        RunConfig(seed=5, track=False, eval_episodes=2, eval_interval=64), oc, env, model
    )
    for p, q in zip(plain_agent.state_dict().values(), agent.state_dict().values(), strict=True):
        assert torch.equal(p, q)  # same computations in the same order
    assert stats.episode_returns == plain.episode_returns and plain.evaluations == []
    assert [s for s, _ in stats.evaluations] == [64, 128, 192]
    assert [u["eval/mean_return"] for u in stats.updates] == [r for _, r in stats.evaluations]
    # the evaluation is deterministic: the same episodes again give the same mean
    again = evaluate_agent(agent, env, 2, 5 + ppo.EVAL_SEED_OFFSET)
    assert float(np.mean(again)) == stats.evaluations[-1][1]
    assert agent.training  # evaluation restores the mode


def test_evaluation_is_logged_and_printed(tmp_path, capsys) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rc = main(["train", "--total-steps", "512", "--no-progress", "--eval-interval", "256",
               "--eval-episodes", "2", "--runs-dir", str(tmp_path)])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "evaluation      " in out and "deterministic evaluation episodes at step 512" in out
    acc = EventAccumulator(str(tmp_path / "CartPole-v1-fc-s1" / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("eval/mean_return")] == [256, 512]


def test_evaluation_on_by_default_at_the_end() -> None:
    oc = OnlineTrainConfig(total_timesteps=128, num_envs=2, num_steps=32, num_minibatches=2,
                           update_epochs=1)  # fmt: skip
    _, stats = train_ppo(RunConfig(track=False), oc, EnvironmentConfig(env_id="Pendulum-v1"))
    assert len(stats.evaluations) == 1 and stats.evaluations[0][0] == 128
    assert -2000 < stats.evaluations[0][1] <= 0  # Pendulum returns, 200 steps of cost <= 16.3


def test_video_without_moviepy_is_refused_before_the_run(tmp_path, capsys, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "moviepy", None)  # import moviepy -> ImportError
    rc = main(["train", *TINY, "--video", "--runs-dir", str(tmp_path / "runs")])
    assert rc == 2 and "needs the moviepy package" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    oc = OnlineTrainConfig(total_timesteps=64, num_envs=2, num_steps=32, num_minibatches=2)
    with pytest.raises(ConfigError, match="moviepy"):
        train_ppo(RunConfig(video=True, track=False), oc, EnvironmentConfig(), run_dir=tmp_path)
