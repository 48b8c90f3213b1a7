"""The config base and sections shared by every trainer (rlstore.agents.config)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

import rlstore.agents
import rlstore.checkpoint
from rlstore.agents import config as shared
from rlstore.agents import ppo_config
from rlstore.agents.dqn import DQNTrainConfig
from rlstore.agents.sac import SACTrainConfig
from rlstore.errors import ConfigError

AGENTS = Path(rlstore.agents.__file__).parent


def test_ppo_config_reexports_the_shared_sections() -> None:
    assert ppo_config.RunConfig is shared.RunConfig
    assert ppo_config.EnvironmentConfig is shared.EnvironmentConfig
    for cls in (ppo_config.TrainConfig, DQNTrainConfig, SACTrainConfig):
        assert issubclass(cls, shared.BaseConfig)


@pytest.mark.parametrize("cls", [ppo_config.TrainConfig, DQNTrainConfig, SACTrainConfig])
def test_every_train_config_writes_its_yaml_through_the_one_writer(tmp_path, cls) -> None:
    cfg = cls.from_dict({"run": {"seed": 7}})
    cfg.to_yaml(tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    assert yaml.safe_load(text) == cfg.to_dict()
    assert cls.from_dict(yaml.safe_load(text)) == cfg
    with pytest.raises(ConfigError, match="seed"):
        cls.from_dict({"run": {"seed": -1}})


def test_the_atomic_text_writer_is_public() -> None:
    assert "write_text_atomic" in rlstore.checkpoint.__all__


def _private_imports(path: Path) -> list[str]:
    """Imports in ``path`` of a private name (``from m import _x``) or of a private module of a
    subpackage (``rlstore.checkpoint._atomic``). The top-level ``rlstore._checks`` and
    ``rlstore._trees`` are the library's shared internals, imported by every package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            names = [a.name for a in node.names]
            sub = node.module.split(".")[2:]
            if any(p.startswith("_") for p in sub) or any(n.startswith("_") for n in names):
                found.append(f"{node.module}: {names}")
    return found


def test_no_agents_module_imports_a_private_name_of_another_module() -> None:
    offenders = {
        str(p.relative_to(AGENTS)): bad
        for p in sorted(AGENTS.rglob("*.py"))
        if (bad := _private_imports(p))
    }
    assert offenders == {}


def _one_section_configs() -> list[type[shared.AlgorithmTrainConfig]]:
    from rlstore.agents.apex import ApexTrainConfig
    from rlstore.agents.impala import ImpalaTrainConfig

    return [DQNTrainConfig, SACTrainConfig, ImpalaTrainConfig, ApexTrainConfig]


def test_one_section_runs_are_named_after_their_section_when_run_is_left_out(tmp_path) -> None:
    envs = {"dqn": "CartPole-v1", "sac": "Pendulum-v1", "impala": "CartPole-v1"}
    for cls in _one_section_configs():
        section = list(cls.model_fields)[2]
        assert list(cls.model_fields)[:2] == ["run", "environment"]
        assert issubclass(cls.model_fields[section].annotation, shared.AlgorithmConfig)
        cfg = cls()
        assert cfg.run.exp_name == section and cls.from_dict(None) == cfg
        assert cfg.environment.env_id == envs.get(section, "CartPole-v1")
        # given sections are taken as they are (a run without exp_name keeps RunConfig's)
        given = cls.from_dict({"run": {"seed": 4}, "environment": {"env_id": "Acrobot-v1"}})
        assert (given.run.exp_name, given.run.seed) == ("ppo", 4)
        assert given.environment.env_id == "Acrobot-v1"
        # the algorithm modules' load_config is from_file: the round trip through a file
        cfg.to_yaml(tmp_path / f"{section}.yaml")
        assert cls.from_file(tmp_path / f"{section}.yaml") == cfg
        with pytest.raises(ConfigError, match="eval_interval: moved to run.eval_interval"):
            cls.from_dict({section: {"eval_interval": 10}})


def test_the_async_learners_share_their_collector_fields() -> None:
    from rlstore.agents.apex import ApexConfig
    from rlstore.agents.async_run import LearnerConfig
    from rlstore.agents.impala import ImpalaConfig

    shared_fields = set(LearnerConfig.model_fields)
    assert {"num_collectors", "address", "timeout_s", "checkpoint_interval"} <= shared_fields
    for cls in (ApexConfig, ImpalaConfig):
        assert issubclass(cls, LearnerConfig)
        assert cls().num_envs == 4 and cls().timeout_s == 120.0
        with pytest.raises(ConfigError, match="num_collectors"):
            cls.from_dict({"num_collectors": 0})


def test_dqn_and_apex_share_their_q_learning_fields() -> None:
    from rlstore.agents.apex import ApexConfig
    from rlstore.agents.dqn import DQNConfig, QLearningConfig

    assert {"hidden_sizes", "dueling", "double_q", "per_alpha", "per_eps"} <= set(
        QLearningConfig.model_fields
    )
    for cls in (DQNConfig, ApexConfig):
        assert issubclass(cls, QLearningConfig)
        assert cls().hidden_sizes == [256, 256] and cls().per_alpha == 0.6
        with pytest.raises(ConfigError, match="hidden_sizes"):
            cls.from_dict({"hidden_sizes": [0]})
    net = ApexConfig.from_dict({"dueling": True, "hidden_sizes": [8]}).dqn()
    assert (net.dueling, net.hidden_sizes, net.n_step) == (True, [8], 3)


def test_folder_runner_checks_new_runs_writes_the_config_then_trains(tmp_path) -> None:
    calls: list[tuple] = []

    def train(cfg, *, run_dir, resume):
        calls.append((DQNTrainConfig.from_file(Path(run_dir, "config.yaml")) == cfg, resume))
        return "trained"

    def check(cfg):
        calls.append(("check", cfg.run.exp_name))

    runner = shared.folder_runner(train, check)
    cfg = DQNTrainConfig.from_dict({"dqn": {"total_timesteps": 64}})
    assert runner(cfg, run_dir=tmp_path / "new", resume=False) == "trained"
    assert runner(cfg, run_dir=tmp_path / "new", resume=True) == "trained"
    assert calls == [("check", "dqn"), (True, False), (True, True)]  # no check on resume
    longer = cfg.model_copy(update={"dqn": cfg.dqn.model_copy(update={"total_timesteps": 96})})
    assert runner(longer, run_dir=tmp_path / "new", resume=True) == "trained"  # extended
    assert DQNTrainConfig.from_file(tmp_path / "new" / "config.yaml") == longer


@pytest.mark.parametrize(
    "change, message",
    [
        ({"learning_rate": 0.5}, "only dqn.total_timesteps may change"),
        ({"total_timesteps": 32}, "dqn.total_timesteps: expected at least 64"),
        ({"learning_rate": 0.5, "total_timesteps": 96}, "only dqn.total_timesteps may change"),
    ],
)
def test_folder_runner_refuses_a_resume_before_touching_the_folder(tmp_path, change, message):
    """A refused resume leaves the run's config.yaml as it was and trains nothing (it used to
    write the rejected config first, and the checkpoint check refused it only afterwards)."""
    runner = shared.folder_runner(lambda cfg, **kw: pytest.fail("trained"))
    cfg = DQNTrainConfig.from_dict({"dqn": {"total_timesteps": 64}})
    cfg.to_yaml(tmp_path / "config.yaml")
    before = (tmp_path / "config.yaml").read_bytes()
    bad = cfg.model_copy(update={"dqn": cfg.dqn.model_copy(update=change)})
    with pytest.raises(ConfigError, match=message):
        runner(bad, run_dir=tmp_path, resume=True)
    assert (tmp_path / "config.yaml").read_bytes() == before


def test_cli_keys_name_the_section() -> None:
    from rlstore.agents import dqn, impala

    assert dqn.CLI_KEYS == {"total_steps": "dqn.total_timesteps", "num_envs": "dqn.num_envs",
                            "lr": "dqn.learning_rate", "gamma": "dqn.gamma", "agent": None,
                            "num_steps": None, "ent_coef": None}  # fmt: skip
    assert impala.CLI_KEYS["lr"] == "impala.learning_rate" and impala.CLI_KEYS["num_shards"] is None


def test_ent_coef_flag_reaches_impala_whose_loss_has_an_entropy_bonus() -> None:
    """``--ent-coef`` was refused for IMPALA ("not an option of --algo impala") although its
    loss has the same entropy bonus as PPO's (``impala.ent_coef``)."""
    import argparse

    from rlstore.agents.train_cli import add_arguments, build_config

    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = build_config(p.parse_args(["--algo", "impala", "--ent-coef", "0"]))
    assert cfg.impala.ent_coef == 0.0


def test_each_whole_run_config_names_its_own_budget_and_sections_have_none() -> None:
    """The budget key a resume may extend belongs to whole-run configs; a section config used
    to claim PPO's ``online.total_timesteps``, which it does not have."""
    from rlstore.agents.ppo_config import TrainConfig
    from rlstore.agents.ppod import PPODTrainConfig

    assert TrainConfig.budget_key() == PPODTrainConfig.budget_key() == "online.total_timesteps"
    assert DQNTrainConfig.budget_key() == "dqn.total_timesteps"
    for section in (shared.RunConfig, shared.EnvironmentConfig, shared.AlgorithmConfig):
        with pytest.raises(NotImplementedError, match="not a whole run's config"):
            section.budget_key()
