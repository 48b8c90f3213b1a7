"""Validation of the PPO run config (:mod:`rlstore.agents.ppo_config`)."""

from __future__ import annotations

import pytest

from rlstore.agents.ppo_config import TrainConfig
from rlstore.errors import ConfigError


def test_lstm_minibatches_beyond_the_sequences_of_a_rollout_are_refused_up_front() -> None:
    # 1 env x 16 steps / recurrence 8 = 2 sequences when no episode ends inside the rollout:
    # 4 minibatches used to fail in the update, late in a run once episodes outlast rollouts
    online = {"num_envs": 1, "num_steps": 16, "num_minibatches": 4}
    with pytest.raises(ConfigError, match=r"num_minibatches.*at most the 2 sequences.*got 4"):
        TrainConfig.from_dict({"agent": "lstm", "online": online, "lstm": {"recurrence": 8}})
    TrainConfig.from_dict({"agent": "lstm", "online": online, "lstm": {"recurrence": 4}})
    TrainConfig.from_dict({"agent": "fc", "online": online, "lstm": {"recurrence": 8}})
