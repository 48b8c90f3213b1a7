"""Learning (slow; ``pytest -m slow``): IMPALA with 2 collectors and Ape-X DQN solve CartPole-v1
with their packaged configs on a 2-core machine (the runs behind the README's results)."""

from __future__ import annotations

from importlib import resources

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]


def _packaged(name: str) -> str:
    return str(resources.files("rlstore") / "configs" / name)


def test_impala_two_collectors_solve_cartpole(ray_session) -> None:
    from rlstore.agents.impala import load_config, train_impala

    cfg = load_config(_packaged("impala_CartPole-v1.yaml"))
    assert cfg.impala.num_collectors == 2
    cfg = type(cfg).from_dict({**cfg.to_dict(), "run": {**cfg.run.to_dict(), "track": False}})
    _, stats = train_impala(cfg)
    # solved: the mean of 20 training episodes (sampled actions) passes 475; asynchronous runs
    # are not repeatable, and one run in four fell back below it later (README)
    assert stats.first_step_reaching(475.0, 20) is not None


def test_apex_dqn_solves_cartpole(ray_session) -> None:
    from rlstore.agents.apex import load_config, train_apex

    cfg = load_config(_packaged("apex_CartPole-v1.yaml"))
    cfg = type(cfg).from_dict({**cfg.to_dict(), "run": {**cfg.run.to_dict(), "track": False}})
    _, stats = train_apex(cfg)
    assert cfg.run.eval_episodes == 20
    assert stats.evaluations[-1][1] > 475.0  # 20 greedy episodes at the end
