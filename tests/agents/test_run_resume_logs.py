"""What ``rlstore train`` leaves after a run interrupted mid-way and resumed: one TensorBoard
history, each update and episode logged once, and the learning curve."""

from __future__ import annotations

from rlstore.agents import ppo
from rlstore.cli import main


def test_interrupted_and_resumed_run_logs_each_update_and_episode_once(
    tmp_path, monkeypatch, capsys
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

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
    assert main(["train", "--resume", str(tmp_path / "r"), "--no-progress"]) == 0
    episodes = int(capsys.readouterr().out.split("episodes")[1].split()[0])
    acc = EventAccumulator(str(tmp_path / "r" / "tb"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("charts/SPS")] == [256 * u for u in range(1, 9)]
    assert len(acc.Scalars("charts/episodic_return")) == episodes
    assert (tmp_path / "r" / "learning_curve.png").is_file()
