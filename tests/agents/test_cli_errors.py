"""User errors of the ``rlstore`` commands: one clear line naming the setting, exit status 2,
no traceback and nothing written; and the user's own settings never silently replaced."""

from __future__ import annotations

import argparse
import shutil
from importlib import resources

import pytest

from rlstore.agents import train_cli
from rlstore.cli import main

TINY = ["--total-steps", "256", "--no-progress", "--no-tensorboard"]


def _packaged(name: str) -> str:
    return str(resources.files("rlstore") / "configs" / name)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "run=3"], "run: Input should be a valid dictionary"),
        (["--set", "environment=[1]"], "environment: Input should be a valid dictionary"),
        (["--algo", "dqn", "--set", "run=3"], "run: Input should be a valid dictionary"),
    ],
)
def test_a_section_set_to_a_value_is_an_error_not_a_crash(tmp_path, capsys, argv, message):
    """``--set run=3`` crashed with an AttributeError while the default run name was made."""
    rc = main(["train", *TINY, *argv, "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_set_run_exp_name_and_progress_bar_are_kept() -> None:
    """``--set run.exp_name=NAME`` was replaced by the default ``<env>-<agent>-s<seed>``."""
    p = argparse.ArgumentParser()
    train_cli.add_arguments(p)
    cfg = train_cli.build_config(p.parse_args(["--set", "run.exp_name=mine", "--seed", "3"]))
    assert cfg.run.exp_name == "mine" and cfg.run.seed == 3
    cfg = train_cli.build_config(p.parse_args(["--set", "run.seed=3"]))
    assert cfg.run.exp_name == "CartPole-v1-fc-s3"  # no name given: the default one
    # ``--set run.progress_bar=false`` was replaced by the command's default, a bar
    assert not train_cli.build_config(
        p.parse_args(["--set", "run.progress_bar=false"])
    ).run.progress_bar
    assert train_cli.build_config(p.parse_args([])).run.progress_bar
    assert not train_cli.build_config(p.parse_args(["--no-progress"])).run.progress_bar


@pytest.mark.parametrize(
    ("argv", "other"),
    [
        (["--config", _packaged("dqn_CartPole-v1.yaml")], "dqn"),
        (["--algo", "sac", "--config", _packaged("ppo_fc_CartPole-v1.yaml")], "ppo"),
        (["--algo", "dqn", "--config", _packaged("sac_Pendulum-v1.yaml")], "sac"),
    ],
)
def test_a_config_of_another_algorithm_names_the_algo_it_is_for(tmp_path, capsys, argv, other):
    """It was refused by a list of its sections as unknown keys, never naming ``--algo``."""
    rc = main(["train", *TINY, *argv, "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert rc == 2 and f"a config of --algo {other}" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_resume_with_another_algo_names_the_runs_algo(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(_packaged("dqn_CartPole-v1.yaml"), run / "config.yaml")
    before = (run / "config.yaml").read_bytes()
    assert main(["train", "--resume", str(run), "--algo", "ppo"]) == 2
    err = capsys.readouterr().err
    assert "a config of --algo dqn" in err and "run it with --algo dqn" in err
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml"]
    assert (run / "config.yaml").read_bytes() == before


@pytest.mark.parametrize("flag", ["--probes", "--seeds"])
@pytest.mark.parametrize("value", ["", ","])
def test_probe_with_an_empty_list_is_refused(capsys, flag, value) -> None:
    """``--probes ''`` ran nothing and reported ``0/0 checks passed`` with exit status 0."""
    with pytest.raises(SystemExit) as exc:
        main(["probe", flag, value])
    assert exc.value.code == 2
    assert f"argument {flag}: expected comma-separated ints" in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_status_130(tmp_path, capsys, monkeypatch) -> None:
    """A KeyboardInterrupt reached the user as a traceback; before any checkpoint there is
    nothing to resume, so no resume hint either."""
    from rlstore.agents import ppo

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ppo, "run_rollout", interrupt)
    assert main(["train", *TINY, "--runs-dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "rlstore train: interrupted" and "--resume" not in err


def test_set_value_errors_of_the_yaml_loader_name_the_key(tmp_path, capsys) -> None:
    """``--set run.seed=010`` trained with seed 8 (YAML 1.1's octal); a duplicated key in a
    ``--set`` mapping was reported without the ``--set`` it came from."""
    for item, message in [
        ("run.seed=010", "--set run.seed: value '010': line 1: '010' is read as 8"),
        ("environment.env_kwargs={a: 1, a: 2}", "--set environment.env_kwargs: value"),
    ]:
        assert main(["train", *TINY, "--set", item, "--runs-dir", str(tmp_path)]) == 2
        assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_summary_of_a_run_without_a_finished_episode_says_so() -> None:
    """It printed ``mean return     nan``."""
    from rlstore.agents.run import TrainStats

    text = train_cli._summary(TrainStats(global_step=50, evaluations=[(50, -1.5)]), "Pendulum-v1")
    assert "mean return     - (no training episode finished)" in text and "nan" not in text
    text = train_cli._summary(TrainStats(episode_returns=[1.0, 3.0]), "Pendulum-v1")
    assert "mean return     2.00 (last 20 training episodes" in text


def test_resume_honours_no_progress_and_refuses_logging_flags(tmp_path, capsys) -> None:
    """On ``--resume``, ``--no-progress`` was ignored (the bar of the saved config ran) and
    ``--wandb`` / ``--no-tensorboard`` silently did nothing."""
    run = tmp_path / "r"
    argv = ["train", "--total-steps", "256", "--no-tensorboard", "--exp-name", "r"]
    assert main([*argv, "--runs-dir", str(tmp_path)]) == 0  # with the bar
    assert "step/s" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--total-steps", "512", "--no-progress"]) == 0
    assert "step/s" not in capsys.readouterr().err
    before = (run / "config.yaml").read_text()
    assert main(["train", "--resume", str(run), "--wandb"]) == 2  # the run logs no W&B
    assert "drop --wandb" in capsys.readouterr().err
    assert (run / "config.yaml").read_text() == before
    # the run's own setting repeated is no change
    assert main(["train", "--resume", str(run), "--no-tensorboard", "--no-progress"]) == 0
    other = tmp_path / "o"
    argv = ["train", "--total-steps", "256", "--no-progress", "--exp-name", "o"]
    assert main([*argv, "--runs-dir", str(tmp_path)]) == 0  # with TensorBoard
    capsys.readouterr()
    assert main(["train", "--resume", str(other), "--no-tensorboard"]) == 2
    assert "drop --no-tensorboard" in capsys.readouterr().err


def test_an_env_keyword_the_env_refuses_is_one_line_and_writes_nothing(tmp_path, capsys) -> None:
    """``--set environment.env_kwargs.foo=1`` ended in gymnasium's TypeError traceback."""
    argv = ["train", *TINY, "--set", "environment.env_kwargs.foo=1", "--runs-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "env_kwargs: expected keyword arguments of 'CartPole-v1', got {'foo': 1}" in err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []
    # an error of the library's own (an RLStoreError is a ValueError) keeps its message
    argv = ["train", *TINY, "--env", "Nope-v0", "--set", "environment.env_kwargs.foo=1"]
    assert main([*argv, "--runs-dir", str(tmp_path)]) == 2
    assert "environment.env_id: expected an id registered" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("nonsense", "run.device: expected a device string"),
        ("cuda:99", "run.device: expected a dev"),
    ],
)
def test_a_device_torch_or_the_machine_lacks_is_one_line(tmp_path, capsys, device, message):
    """``--set run.device=cuda`` on a CPU-only torch ended in an AssertionError traceback."""
    argv = ["train", *TINY, "--set", f"run.device={device}", "--runs-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_resume_of_what_is_not_a_run_folder_says_so(tmp_path, capsys) -> None:
    """The error named the config file it looked for (``path: ... 'x/config.yaml/config.yaml'
    ... Not a directory``), not the ``--resume`` argument."""
    (tmp_path / "f").write_text("")
    (tmp_path / "d").mkdir()
    for name, what in [("f", "a file"), ("d", "no config.yaml in it"), ("n", "no such folder")]:
        assert main(["train", "--resume", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert "--resume: expected a run folder (config.yaml, checkpoints/), got " in err
        assert f"{str(tmp_path / name)!r} ({what})" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "f"]


def test_evaluation_settings_without_evaluation_episodes_warn(tmp_path, capsys) -> None:
    """``--eval-interval 128 --eval-episodes 0`` evaluated nothing, silently."""
    argv = ["train", *TINY, "--eval-interval", "128", "--eval-episodes", "0"]
    assert main([*argv, "--runs-dir", str(tmp_path)]) == 0
    assert "run.eval_episodes is 0: no evaluation runs" in capsys.readouterr().err
    assert main(["train", *TINY, "--eval-interval", "128", "--runs-dir", str(tmp_path)]) == 0
    assert "run.eval_episodes is 0" not in capsys.readouterr().err
