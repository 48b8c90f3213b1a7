"""``rlstore train --algo impala|apex``: the Ray flags reach the config, other algorithms refuse
them, and a short IMPALA run goes end to end from the command line on the test's Ray session."""

from __future__ import annotations

import argparse

import pytest

from rlstore.agents.train_cli import add_arguments, build_config
from rlstore.cli import main

QUIET = ["--no-progress", "--no-tensorboard"]


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_ray_flags_reach_the_distributed_configs() -> None:
    cfg = build_config(_args("--algo", "impala", "--num-collectors", "3", "--address", "h:1"))
    assert (cfg.impala.num_collectors, cfg.impala.address) == (3, "h:1")
    cfg = build_config(_args("--algo", "apex", "--num-collectors", "4", "--num-shards", "2"))
    assert (cfg.apex.num_collectors, cfg.apex.num_shards, cfg.apex.address) == (4, 2, None)
    assert cfg.run.exp_name == "CartPole-v1-apex-s1"


@pytest.mark.parametrize(
    ("algo", "flag"),
    [
        ("dqn", "--num-collectors"),
        ("ppo", "--address"),
        ("sac", "--num-shards"),
        ("impala", "--num-shards"),
        ("apex", "--num-steps"),
    ],  # fmt: skip
)
def test_flags_that_do_not_apply_are_refused(tmp_path, capsys, algo, flag) -> None:
    argv = ["train", "--algo", algo, flag, "2", *QUIET, "--runs-dir", str(tmp_path)]
    assert main(argv) == 2
    assert f"{flag}: not an option of --algo {algo}" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.xdist_group("ray")
@pytest.mark.parametrize("algo", ["impala", "apex"])
def test_short_distributed_run_from_the_cli(ray_session, tmp_path, capsys, algo) -> None:
    small = {"impala": ["--set", "impala.fragments_per_batch=1"],
             "apex": ["--set", "apex.learning_starts=64", "--set", "apex.batches_per_call=2",
                      "--set", "apex.hidden_sizes=[16]", "--num-shards", "2"]}[algo]  # fmt: skip
    argv = ["train", "--algo", algo, "--total-steps", "2048", "--num-collectors", "2",
            "--num-envs", "2", "--exp-name", "r", "--runs-dir", str(tmp_path), *QUIET, *small,
            "--set", f"{algo}.checkpoint_interval=1024"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "env steps       " in out and "episodes" in out
    run = tmp_path / "r"
    assert {"config.yaml", "learning_curve.png", "checkpoints"} <= {p.name for p in run.iterdir()}
    assert len(list((run / "checkpoints").iterdir())) >= 1
    if algo == "impala":  # (one resume is enough: both learners checkpoint through async_run)
        # the run continues from its latest checkpoint (weights, optimizer, counters, history)
        assert main(["train", "--resume", str(run), "--total-steps", "4096"]) == 0
        steps = int(capsys.readouterr().out.split("env steps")[1].split()[0])
        assert steps >= 4096
