"""One evaluation configuration for every trainer: ``run.eval_episodes``, ``run.eval_interval``
(env steps) and ``run.video``; the per-algorithm keys they replace are refused by name."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlstore.agents import apex, dqn, impala, ppod, sac
from rlstore.agents import run as run_module
from rlstore.agents.ppo_config import TrainConfig
from rlstore.agents.run import evaluation_due
from rlstore.cli import main
from rlstore.errors import ConfigError

CONFIGS = Path(str(resources.files("rlstore") / "configs"))
QUIET = ["--no-progress", "--no-tensorboard"]

MOVED = [
    (dqn.DQNTrainConfig, "dqn", "eval_interval", "run.eval_interval"),
    (dqn.DQNTrainConfig, "dqn", "eval_episodes", "run.eval_episodes"),
    (sac.SACTrainConfig, "sac", "eval_freq", "run.eval_interval"),
    (sac.SACTrainConfig, "sac", "eval_episodes", "run.eval_episodes"),
    (impala.ImpalaTrainConfig, "impala", "eval_interval", "run.eval_interval"),
    (apex.ApexTrainConfig, "apex", "eval_episodes", "run.eval_episodes"),
    (TrainConfig, "run", "eval_every", "run.eval_interval"),
    (ppod.PPODTrainConfig, "run", "eval_every", "run.eval_interval"),
]


@pytest.mark.parametrize(("model", "section", "key", "new"), MOVED)
def test_old_evaluation_keys_are_refused_naming_the_new_key(model, section, key, new) -> None:
    with pytest.raises(ConfigError, match=rf"{section}\.{key}: .*{new}.*got 10"):
        model.from_dict({section: {key: 10}})


def test_old_key_in_a_config_file_and_the_old_flag_are_refused(tmp_path, capsys) -> None:
    data = yaml.safe_load((CONFIGS / "dqn_CartPole-v1.yaml").read_text())
    data["dqn"]["eval_interval"] = 5000
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"dqn\.eval_interval: moved to run\.eval_interval"):
        dqn.load_config(tmp_path / "old.yaml")
    runs = tmp_path / "runs"
    assert main(["train", "--eval-every", "1", *QUIET, "--runs-dir", str(runs)]) == 2
    assert "run.eval_every: replaced by run.eval_interval" in capsys.readouterr().err
    assert not runs.exists()


def _schedule(cfg: Any, per_step: int, num: int) -> list[int]:
    """The env steps at which a trainer checking after every ``per_step`` steps evaluates."""
    steps = [per_step * (k + 1) for k in range(num)]
    return [s for s in steps if evaluation_due(cfg.run, s, s - per_step, s == steps[-1])]


def test_packaged_dqn_and_sac_configs_evaluate_at_the_same_steps_as_before() -> None:
    d = dqn.load_config(CONFIGS / "dqn_CartPole-v1.yaml")
    assert (d.run.eval_interval, d.run.eval_episodes, d.dqn.train_freq) == (10000, 10, 256)
    # periods of 256 steps: the first past each multiple of 10000 (40 * 256 = 10240, 79 * 256,
    # 118 * 256, 157 * 256) and the last (195 periods = 49920 steps): dqn.eval_interval's rule
    assert _schedule(d, 256, d.dqn.num_periods) == [10240, 20224, 30208, 40192, 49920]
    s = sac.load_config(CONFIGS / "sac_Pendulum-v1.yaml")
    assert (s.run.eval_interval, s.run.eval_episodes, s.sac.num_envs) == (5000, 10, 1)
    # one step per iteration: every 5000 steps, the last included (sac.eval_freq's rule)
    assert _schedule(s, 1, s.sac.total_timesteps) == [5000, 10000, 15000, 20000]


def test_evaluation_due_counts_env_steps() -> None:
    rc = run_module.RunConfig(eval_interval=100)
    # updates of 64 steps: 128 is the first past 100; 192 does not pass 200 but is the last
    assert [s for s in (64, 128, 192) if evaluation_due(rc, s, s - 64, s == 192)] == [128, 192]
    assert not evaluation_due(run_module.RunConfig(eval_episodes=0), 192, 128, True)
    assert evaluation_due(run_module.RunConfig(), 192, 128, True)  # 0: only at the end
    assert not evaluation_due(run_module.RunConfig(), 128, 64, False)


def _tiny_dqn(tmp_path: Path, *flags: str) -> list[str]:
    return ["train", "--algo", "dqn", "--total-steps", "200", "--eval-interval", "100",
            "--eval-episodes", "2", *flags, "--set", "dqn.learning_starts=50", "--set",
            "dqn.train_freq=50", "--set", "dqn.gradient_steps=1", "--set",
            "dqn.hidden_sizes=[8]", *QUIET, "--runs-dir", str(tmp_path),
            "--exp-name", "d"]  # fmt: skip


def test_dqn_video_records_every_evaluation_through_run_evaluation(tmp_path, monkeypatch, capsys):
    """``--video`` and the evaluation flags apply to DQN (moviepy stubbed: the episodes are
    played by a stand-in that checks what :func:`rlstore.agents.run.evaluate` receives)."""
    calls: list[tuple[Any, int, int]] = []

    def fake_evaluate(act, make_env, episodes, seed, *, video_dir=None, begin_episode=None):
        env = make_env()
        assert env.render_mode == "rgb_array"
        env.close()
        calls.append((video_dir, episodes, seed))
        return [1.0] * episodes

    monkeypatch.setattr(run_module, "check_video_support", lambda: None)
    monkeypatch.setattr(run_module, "evaluate", fake_evaluate)
    assert main(_tiny_dqn(tmp_path, "--video")) == 0
    assert "deterministic evaluation episodes at step 200" in capsys.readouterr().out
    videos = tmp_path / "d" / "videos"
    assert calls == [(videos / "step_100", 2, 1 + 1_000_000), (videos / "step_200", 2, 1_000_001)]
    cfg = yaml.safe_load((tmp_path / "d" / "config.yaml").read_text())["run"]
    assert (cfg["video"], cfg["eval_interval"], cfg["eval_episodes"]) == (True, 100, 2)


def test_dqn_video_without_moviepy_is_refused_before_the_run(tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "moviepy", None)  # import moviepy -> ImportError
    assert main(_tiny_dqn(tmp_path, "--video")) == 2
    assert "needs the moviepy package" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    cfg = dqn.DQNTrainConfig.from_dict({"run": {"video": True, "track": False}})
    with pytest.raises(ConfigError, match="moviepy"):
        dqn.train_dqn(cfg, run_dir=tmp_path / "lib")


def test_dqn_video_files_are_written(tmp_path) -> None:
    pytest.importorskip("moviepy")
    assert main(_tiny_dqn(tmp_path, "--video")) == 0
    assert list((tmp_path / "d" / "videos" / "step_200").glob("*.mp4"))
