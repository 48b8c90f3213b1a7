"""PPO's packaged per-env configs and its fallback for envs without one: CartPole-v1's for
discrete actions, Pendulum-v1's for continuous ones (CartPole's settings do not learn there)."""

from __future__ import annotations

import argparse
import logging

import gymnasium as gym
import pytest

from rlstore.agents import ppo
from rlstore.agents import train_cli as cli_train
from rlstore.agents.ppo_config import load_train_config
from rlstore.agents.train_cli import build_config, default_config, fallback_env

PACKAGED = {
    "Pendulum-v1": "ppo_fc_Pendulum-v1.yaml",
    "MountainCar-v0": "ppo_fc_MountainCar-v0.yaml",
    "MountainCarContinuous-v0": "ppo_fc_MountainCarContinuous-v0.yaml",
}
"""The configs this file checks: env id -> file (RL Zoo's settings, cited in the files)."""


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    cli_train.add_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.parametrize(("env_id", "name"), sorted(PACKAGED.items()))
def test_packaged_config_is_picked_for_its_env_and_loads(env_id: str, name: str) -> None:
    assert ppo.DEFAULT_CONFIGS[env_id] == name
    for agent in (None, "fc"):
        path, fallback = default_config("ppo", ppo, env_id, agent)
        assert path.name == name and not fallback
    with cli_train.resources.as_file(path) as file:
        cfg = load_train_config(file)
    assert cfg.environment.env_id == env_id and cfg.agent == "fc"
    built = build_config(_args("--env", env_id, "--seed", "3"))
    assert built.online == cfg.online and built.run.exp_name == f"{env_id}-fc-s3"


def test_pendulum_config_has_rl_zoo_settings() -> None:
    cfg = build_config(_args("--env", "Pendulum-v1"))
    o = cfg.online
    assert (o.num_envs, o.num_steps, o.minibatch_size, o.update_epochs) == (4, 1024, 64, 10)
    assert (o.gamma, o.gae_lambda, o.ent_coef, o.learning_rate) == (0.9, 0.95, 0.0, 1e-3)
    assert (o.decay_lr, o.clip_coef, o.clip_vloss, o.total_timesteps) == (False, 0.2, False, 1e5)


def test_mountain_car_config_has_rl_zoo_settings() -> None:
    cfg = build_config(_args("--env", "MountainCar-v0"))
    o = cfg.online
    assert (o.num_envs, o.num_steps, o.minibatch_size, o.update_epochs) == (16, 16, 64, 4)
    assert (o.gamma, o.gae_lambda, o.ent_coef, o.learning_rate) == (0.99, 0.98, 0.0, 3e-4)
    assert (o.decay_lr, o.clip_coef, o.clip_vloss, o.total_timesteps) == (False, 0.2, False, 1e6)
    assert o.normalize_obs and o.normalize_reward and (o.clip_obs, o.clip_reward) == (10, 10)


BOX = "rlstoretest/BoxActions-v0"
"""A continuous-action env without a packaged config (MountainCarContinuous-v0 has one)."""


@pytest.fixture
def box_env():
    gym.register(BOX, entry_point=lambda: gym.make("Pendulum-v1"))
    yield
    del gym.registry[BOX]


def test_fallback_depends_on_the_action_space(box_env) -> None:
    """Before: every env without a config got CartPole-v1's (discrete-tuned) settings."""
    assert ppo.CONTINUOUS_FALLBACK == "Pendulum-v1"
    assert fallback_env(ppo, BOX) == "Pendulum-v1"
    assert fallback_env(ppo, "Acrobot-v1") == "CartPole-v1"
    path, fallback = default_config("ppo", ppo, BOX, None)
    assert path.name == "ppo_fc_Pendulum-v1.yaml" and fallback
    path, fallback = default_config("ppo", ppo, BOX, "lstm")
    assert path.name == "ppo_fc_Pendulum-v1.yaml" and fallback
    cfg = build_config(_args("--env", BOX, "--agent", "lstm"))
    assert cfg.environment.env_id == BOX and cfg.agent == "lstm"
    assert cfg.online.gamma == 0.9  # Pendulum-v1's settings
    path, fallback = default_config("ppo", ppo, "Acrobot-v1", None)
    assert path.name == "ppo_fc_CartPole-v1.yaml" and fallback


def _needs_an_argument(size: int) -> gym.Env:
    return gym.make("Pendulum-v1")


def test_fallback_of_an_id_that_does_not_build_is_the_first() -> None:
    """The run reports such an id later (no run folder), or builds it with the arguments its
    config gives (``environment.env_kwargs``); the lookup itself does not raise."""
    gym.register("rlstoretest/NeedsSize-v0", entry_point=_needs_an_argument)
    try:
        for env_id in ("rlstoretest/Nope-v0", "bad:Id-v0", "rlstoretest/NeedsSize-v0"):
            assert fallback_env(ppo, env_id) == "CartPole-v1"
    finally:
        del gym.registry["rlstoretest/NeedsSize-v0"]


def test_other_algorithms_keep_their_single_fallback() -> None:
    from rlstore.agents import dqn

    assert not hasattr(dqn, "CONTINUOUS_FALLBACK")
    assert fallback_env(dqn, "Pendulum-v1") == next(iter(dqn.DEFAULT_CONFIGS))


def test_continuous_fallback_warning_names_pendulum(caplog, box_env) -> None:
    args = _args("--env", BOX)
    with caplog.at_level(logging.WARNING, logger="rlstore.train"):
        cli_train._warn_if_untuned(args, ppo, BOX)
    assert f"no packaged ppo config for {BOX}: using the hyper-parameters " \
        "tuned for Pendulum-v1 (ppo_fc_Pendulum-v1.yaml)" in caplog.text  # fmt: skip
