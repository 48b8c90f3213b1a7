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
