"""``rlstore train`` through the real dispatcher (tiny budgets)."""

from __future__ import annotations

import sys

import pytest

from rlstore.agents.ppo_checkpoint import load_saved_checkpoint
from rlstore.agents.ppo_config import load_train_config
from rlstore.agents.train_cli import build_config
from rlstore.cli import main

TINY = ["--total-steps", "512", "--no-progress"]


def test_default_config_is_the_tuned_cartpole_one() -> None:
    import argparse

    from rlstore.agents.train_cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(p.parse_args([]))
    assert cfg.environment.env_id == "CartPole-v1" and cfg.agent == "fc"
    assert (cfg.online.num_envs, cfg.online.num_steps, cfg.online.update_epochs) == (8, 32, 10)
    assert cfg.online.total_timesteps == 40_000 and cfg.run.progress_bar


def test_train_writes_run_folder_and_prints_summary(tmp_path, capsys) -> None:
    rc = main(["train", *TINY, "--seed", "4", "--runs-dir", str(tmp_path)])
    assert rc == 0
    run = tmp_path / "CartPole-v1-fc-s4"
    cfg = load_train_config(run / "config.yaml")
    assert cfg.run.seed == 4 and cfg.online.total_timesteps == 512 and cfg.online.num_envs == 8
    assert (run / "learning_curve.png").is_file() and list((run / "tb").iterdir())
    ckpts = sorted((run / "checkpoints").iterdir())
    assert len(ckpts) == 2  # 512 // 256 = 2 updates, checkpoints capped at one per update
    assert load_saved_checkpoint(ckpts[-1], num_envs=1).train_config == cfg
    out = capsys.readouterr().out
    assert "env steps       512 in 2 updates" in out and "mean return" in out
    # a second run with the same name does not overwrite the first
    assert main(["train", *TINY, "--seed", "4", "--runs-dir", str(tmp_path)]) == 0
    assert (tmp_path / "CartPole-v1-fc-s4-1" / "config.yaml").is_file()


def test_lstm_agent_and_config_file(tmp_path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "run: {exp_name: mine}\n"
        "online: {num_envs: 2, num_steps: 16, num_minibatches: 2, update_epochs: 1, "
        "num_checkpoints: 1}\n"
        "lstm: {recurrence: 4, memory_dim: 16}\n"
    )
    rc = main(["train", "--config", str(cfg), "--agent", "lstm", "--total-steps", "32",
               "--exp-name", "mine", "--runs-dir", str(tmp_path), "--no-progress"])  # fmt: skip
    assert rc == 0
    loaded = load_train_config(tmp_path / "mine" / "config.yaml")
    assert loaded.agent == "lstm" and loaded.lstm.memory_dim == 16


def test_resume_finished_run_and_conflicting_options(tmp_path, capsys) -> None:
    assert main(["train", *TINY, "--exp-name", "r", "--runs-dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r"), "--no-progress"]) == 0
    assert "env steps       512" in capsys.readouterr().out
    assert main(["train", "--resume", str(tmp_path / "r"), "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert "--resume: continues the run with its own config.yaml; drop --seed" in err


def test_bad_config_is_reported_not_raised(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("online: {learning_rat: 0.1}\n")
    assert main(["train", "--config", str(bad)]) == 2
    assert "TrainConfig: online.learning_rat: unknown key" in capsys.readouterr().err


def test_wandb_missing_is_skipped_with_a_warning(tmp_path, capsys, monkeypatch) -> None:
    """The ignored setting is a UserWarning (it was a print to stderr); the CLI still tells the
    user where the run is written (the trainer's info log, shown by the CLI)."""
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.warns(UserWarning, match="--wandb ignored: the wandb package is not installed"):
        rc = main(["train", *TINY, "--wandb", "--no-tensorboard", "--runs-dir", str(tmp_path)])
    assert rc == 0
    assert f"rlstore train: writing {tmp_path / 'CartPole-v1-fc-s1'}" in capsys.readouterr().err
    assert not (tmp_path / "CartPole-v1-fc-s1" / "tb").exists()


@pytest.mark.parametrize("env_id", ["nosuchmod:X-v0", "a:b:c", "NoSuch-v0", "CartPole-v99"])
def test_bad_env_id_is_one_clear_line_and_writes_nothing(tmp_path, capsys, env_id) -> None:
    rc = main(["train", *TINY, "--env", env_id, "--runs-dir", str(tmp_path / "runs")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith("rlstore train: error: ") and "env_id: expected" in err[0]
    assert repr(env_id) in err[0]
    assert not (tmp_path / "runs").exists()  # rejected before the run folder is created


def test_module_env_id_never_imports_the_module(tmp_path, capsys, monkeypatch) -> None:
    # gymnasium imports `mod` for an id "mod:Name-v0": a config must not be able to run code
    marker = tmp_path / "imported"
    (tmp_path / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["train", *TINY, "--env", "evilmod:X-v0", "--runs-dir", str(tmp_path)]) == 2
    assert not marker.exists() and "evilmod" not in sys.modules
    assert "no 'module:' prefix" in capsys.readouterr().err


def test_resume_of_a_run_folder_naming_a_module_runs_nothing(tmp_path, capsys, monkeypatch):
    # a crafted run folder: its config.yaml names a module to import through the env id
    marker = tmp_path / "imported"
    (tmp_path / "evilmod2.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("environment: {env_id: 'evilmod2:X-v0'}\n")
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    assert not marker.exists() and "evilmod2" not in sys.modules
    assert "env_id: expected a registered Gymnasium id" in capsys.readouterr().err
