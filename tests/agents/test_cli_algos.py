"""``rlstore train --algo``: every registered algorithm runs from the command line, flags that
do not apply are refused, ``--resume`` finds the run's algorithm and extends its budget."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from rlstore.agents.train_cli import ALGORITHMS
from rlstore.cli import main

QUIET = ["--no-progress", "--no-tensorboard"]


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_algorithm_exposes_the_runner_interface(algo) -> None:
    module = importlib.import_module(ALGORITHMS[algo])
    assert callable(module.load_config) and callable(module.runner)
    assert module.DEFAULT_CONFIGS, "the first entry is the algorithm's fallback config"


def test_dqn_runs_resumes_and_extends_from_the_cli(tmp_path, capsys) -> None:
    run = tmp_path / "d"
    argv = ["train", "--algo", "dqn", "--total-steps", "512", *QUIET, "--exp-name", "d"]
    assert main([*argv, "--runs-dir", str(tmp_path), "--set", "run.eval_episodes=1"]) == 0
    assert "env steps       512" in capsys.readouterr().out
    assert {"config.yaml", "checkpoints", "learning_curve.png"} <= {p.name for p in run.iterdir()}
    # no --algo: the run's config names DQN; the budget is extended and recorded
    assert main(["train", "--resume", str(run), "--total-steps", "1024"]) == 0
    assert "env steps       1024" in capsys.readouterr().out
    assert yaml.safe_load((run / "config.yaml").read_text())["dqn"]["total_timesteps"] == 1024
    # shortening is refused before anything changes
    assert main(["train", "--resume", str(run), "--total-steps", "512"]) == 2
    assert "dqn.total_timesteps: expected at least 1024" in capsys.readouterr().err
    assert yaml.safe_load((run / "config.yaml").read_text())["dqn"]["total_timesteps"] == 1024


@pytest.mark.parametrize("flag", [["--num-steps", "8"], ["--agent", "lstm"], ["--ent-coef", "0.1"]])
def test_ppo_only_flags_are_refused_for_dqn(tmp_path, capsys, flag) -> None:
    assert main(["train", "--algo", "dqn", *flag, *QUIET, "--runs-dir", str(tmp_path)]) == 2
    assert f"{flag[0]}: not an option of --algo dqn" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_dqn_named_flags_reach_its_config(tmp_path) -> None:
    import argparse

    from rlstore.agents.train_cli import add_arguments, build_config

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--algo", "dqn", "--lr", "0.01", "--gamma", "0.9", "--total-steps", "99"])
    cfg = build_config(args)
    assert (cfg.dqn.learning_rate, cfg.dqn.gamma, cfg.dqn.total_timesteps) == (0.01, 0.9, 99)


def test_sac_runs_and_extends_from_the_cli(tmp_path, capsys) -> None:
    run = tmp_path / "s"
    argv = ["train", "--algo", "sac", "--total-steps", "300", *QUIET, "--exp-name", "s"]
    tiny = ["--eval-episodes", "1", "--set", "sac.batch_size=32", "--set",
            "sac.learning_starts=100"]  # fmt: skip
    assert main([*argv, "--runs-dir", str(tmp_path), *tiny]) == 0
    assert "env steps       300" in capsys.readouterr().out
    assert main(["train", "--resume", str(run), "--total-steps", "400"]) == 0
    assert "env steps       400" in capsys.readouterr().out
    assert yaml.safe_load((run / "config.yaml").read_text())["sac"]["total_timesteps"] == 400
    assert main(["train", "--resume", str(run), "--total-steps", "300"]) == 2
    assert "sac.total_timesteps: expected at least 400" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("algo", "env_id"), [("sac", "MountainCarContinuous-v0"), ("impala", "Acrobot-v1")]
)
def test_packaged_env_configs_are_picked_for_their_env_and_load(algo, env_id) -> None:
    """Both envs fell back to the algorithm's first config (SAC: Pendulum's, which stood still
    on MountainCarContinuous-v0; IMPALA: CartPole's 250k steps, training return -112 / -116 on
    Acrobot-v1): each now has its own file, picked without the fallback warning."""
    import argparse

    from rlstore.agents.train_cli import add_arguments, build_config, default_config

    module = importlib.import_module(ALGORITHMS[algo])
    path, fallback = default_config(algo, module, env_id, None)
    assert path.name == f"{algo}_{env_id}.yaml" and not fallback
    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(p.parse_args(["--algo", algo, "--env", env_id]))
    assert cfg.environment.env_id == env_id
    assert getattr(cfg, algo) == getattr(module.load_config(path), algo)


def test_impala_acrobot_config_is_cartpoles_run_for_500k_steps() -> None:
    from rlstore.agents import impala

    configs = Path(__file__).resolve().parents[2] / "src" / "rlstore" / "configs"
    acro = impala.load_config(configs / "impala_Acrobot-v1.yaml").impala.model_dump()
    cart = impala.load_config(configs / "impala_CartPole-v1.yaml").impala.model_dump()
    assert (cart.pop("total_timesteps"), acro.pop("total_timesteps")) == (250_000, 500_000)
    assert acro == cart
