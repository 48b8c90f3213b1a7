"""Tests of rlstore.config: typed buffer configs, files, registry and error messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlstore import config as config_mod
from rlstore.config import (
    CONFIG_MODELS,
    BufferConfig,
    ReplayBufferConfig,
    RolloutBufferConfig,
    build_buffer,
    load_config_file,
    load_yaml,
    register_buffer,
    validate_config,
)
from rlstore.errors import CheckpointError, ConfigError


def test_every_field_of_every_model_is_documented() -> None:
    models = [*CONFIG_MODELS.values(), config_mod.FieldSpecConfig, config_mod.IntrinsicStreamConfig]
    for model in models:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"


def test_replay_from_dict() -> None:
    from rlstore.buffers.replay import ReplayBuffer

    buf = build_buffer({"type": "replay", "capacity": 64, "num_envs": 4, "seed": 3})
    assert isinstance(buf, ReplayBuffer)
    cfg = buf.config()
    assert (cfg["capacity"], cfg["num_envs"], cfg["seed"]) == (64, 4, 3)


def test_replay_with_explicit_specs_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "replay.yaml"
    path.write_text(
        "type: replay\n"
        "capacity: 10\n"
        "specs:\n"
        "  obs: {shape: [3], dtype: float32}\n"
        "  action: {shape: [], dtype: int64}\n"
        "  reward: {shape: [], dtype: float32}\n"
    )
    model = validate_config(path)
    assert isinstance(model, ReplayBufferConfig)
    specs = model.to_kwargs()["specs"]
    assert specs["obs"].shape == (3,) and specs["obs"].dtype == np.dtype(np.float32)
    assert specs["action"].shape == () and specs["action"].dtype == np.dtype(np.int64)
    assert specs["obs"].name == "obs"


def test_replay_config_round_trips_through_the_buffer() -> None:
    """``ReplayBuffer.config()`` (specs as a list, dtype codes) validates and rebuilds."""
    from rlstore.buffers.replay import ReplayBuffer

    buf = ReplayBuffer(12, num_envs=2, seed=1)
    buf.add(
        np.zeros((2, 3), np.float32),
        np.zeros(2, np.int64),
        np.zeros(2),
        np.ones((2, 3)),
        np.zeros(2, bool),
        np.zeros(2, bool),
    )
    cfg = buf.config()
    assert isinstance(cfg["specs"], list)
    twin = build_buffer({"type": "replay", **cfg})
    assert twin.config() == cfg


def test_rollout_from_json_file(tmp_path: Path) -> None:
    from rlstore.buffers.rollout import IntrinsicConfig, RolloutBuffer

    path = tmp_path / "rollout.json"
    cfg = {
        "type": "rollout",
        "num_steps": 8,
        "num_envs": 2,
        "gamma": 1,  # ints are fine for floats
        "lam": 0.9,
        "advantage_normalization": "batch",
        "intrinsic": {"int_gamma": 0.999},
    }
    path.write_text(json.dumps(cfg))
    buf = build_buffer(str(path))
    assert isinstance(buf, RolloutBuffer)
    assert (buf.num_steps, buf.num_envs, buf.gamma, buf.lam) == (8, 2, 1.0, 0.9)
    assert buf.advantage_normalization == "batch"
    assert buf.intrinsic == IntrinsicConfig(int_gamma=0.999)


def _error(cfg: Any) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    return str(info.value)


def test_unknown_key_names_the_key_and_allowed_keys() -> None:
    msg = _error({"type": "replay", "capacity": 5, "capacty": 5})
    assert "capacty: unknown key (got 5)" in msg
    assert "allowed keys: type, device, seed, capacity, num_envs" in msg


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        ({"capacity": "10"}, "capacity: Input should be a valid integer, got '10' (str)"),
        ({"capacity": True}, "capacity: Input should be a valid integer, got True (bool)"),
        ({"capacity": 2.5}, "capacity: Input should be a valid integer, got 2.5 (float)"),
        ({"capacity": 0}, "capacity: Input should be greater than 0, got 0 (int)"),
        ({"capacity": 4, "num_envs": -1}, "num_envs: Input should be greater than 0"),
        ({"capacity": 4, "seed": "0"}, "seed: Input should be a valid integer"),
        ({"capacity": 4, "device": 0}, "device: Input should be a valid string, got 0 (int)"),
        ({"capacity": 4, "specs": {"obs": {"shape": ["3"]}}}, "specs.obs.shape.0: Input should"),
        ({"capacity": 4, "specs": {"obs": {"shape": [3], "dtyp": "f"}}}, "specs.obs.dtyp: unknown"),
        # a validator's own message, once: it read "dtype: Value error, expected ..., got 'str',
        # got 'str' (str)"
        (
            {"capacity": 4, "specs": {"obs": {"dtype": "str"}}},
            "replay buffer config: specs.obs.dtype: expected a bool/int/uint/float numpy dtype "
            "name, got 'str'\n",
        ),
        (
            {"capacity": 4, "specs": [{"name": "a"}, {"name": "a"}]},
            "replay buffer config: specs: expected distinct string names, got ['a', 'a']\n",
        ),
        ({"capacity": 4, "specs": {"obs": {"shape": [-1]}}}, "specs.obs.shape.0: Input should"),
        ({}, "capacity: missing required key (Total number of transitions"),
    ],
)
def test_replay_errors_name_the_key(cfg: dict[str, Any], expected: str) -> None:
    assert expected in _error({"type": "replay", **cfg}) + "\n"


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        ({"gamma": 1.5}, "gamma: Input should be less than or equal to 1, got 1.5"),
        ({"lam": "0.9"}, "lam: Input should be a valid number, got '0.9' (str)"),
        ({"advantage_normalization": "global"}, "advantage_normalization: Input should be"),
        ({"intrinsic": {"int_lam": 2}}, "intrinsic.int_lam: Input should be less than or equal"),
        ({"intrinsic": {"bonus": 1}}, "intrinsic.bonus: unknown key"),
    ],
)
def test_rollout_errors_name_the_key(cfg: dict[str, Any], expected: str) -> None:
    assert expected in _error({"type": "rollout", "num_steps": 4, "num_envs": 2, **cfg})


def test_all_bad_keys_are_reported_at_once() -> None:
    msg = _error({"type": "replay", "capacity": "x", "num_envs": 0, "colour": 1})
    assert msg.startswith("replay buffer config: 3 invalid key(s):")
    for key in ("capacity:", "num_envs:", "colour:"):
        assert key in msg


def test_type_key_problems() -> None:
    assert "type: missing required key" in _error({"capacity": 4})
    assert "type: expected one of ['replay', 'rollout'], got 'ring'" in _error({"type": "ring"})
    assert "cfg: expected a mapping" in _error(42)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("bad.yaml", "type: replay\ncapacity: [1,\n", "invalid YAML"),
        ("bad.json", '{"type": "replay",', "invalid JSON"),
        ("list.yaml", "- 1\n- 2\n", "expected a mapping at the top level, got list"),
        ("cfg.toml", "type = 'replay'", "expected a .yaml, .yml or .json file, got suffix '.toml'"),
    ],
)
def test_bad_files(tmp_path: Path, name: str, text: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config_file(path)
    assert expected in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        build_buffer(tmp_path / "nope.yaml")


class _DummyConfig(BufferConfig):
    """Config of a test buffer."""

    type: str = "dummy"
    """Registry name."""
    size: int = 1
    """Number of slots."""


class DummyBuffer:
    def __init__(self, size: int, device: str = "cpu", seed: int | None = None) -> None:
        self.size, self.device, self.seed = size, device, seed


def test_register_a_new_buffer_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_mod, "BUFFER_REGISTRY", dict(config_mod.BUFFER_REGISTRY))
    monkeypatch.setattr(config_mod, "CONFIG_MODELS", dict(config_mod.CONFIG_MODELS))
    register_buffer("dummy", DummyBuffer, _DummyConfig)
    buf = build_buffer({"type": "dummy", "size": 3, "seed": 1})
    assert isinstance(buf, DummyBuffer) and (buf.size, buf.seed) == (3, 1)
    with pytest.raises(ConfigError, match="BufferConfig subclass"):
        register_buffer("x", DummyBuffer, dict)  # type: ignore[arg-type]
    assert "x" not in config_mod.BUFFER_REGISTRY


def test_registries_hold_classes_not_import_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """A "module:Class" string was resolved into an import; now only class objects register."""
    from rlstore import checkpoint

    monkeypatch.setattr(config_mod, "BUFFER_REGISTRY", dict(config_mod.BUFFER_REGISTRY))
    monkeypatch.setattr(checkpoint, "CHECKPOINT_REGISTRY", dict(checkpoint.CHECKPOINT_REGISTRY))
    with pytest.raises(ConfigError, match="target: expected a buffer class, got 'a:B'"):
        register_buffer("x", "a:B", _DummyConfig)  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="target: expected a class, got 'a:B'"):
        checkpoint.register_checkpointable("x", "a:B")  # type: ignore[arg-type]
    assert "x" not in config_mod.BUFFER_REGISTRY and "x" not in checkpoint.CHECKPOINT_REGISTRY
    assert all(isinstance(c, type) for c in config_mod.BUFFER_REGISTRY.values())
    assert all(isinstance(c, type) for c in checkpoint._registry().values())


@pytest.mark.parametrize("kind", ["replay", "rollout"])
def test_config_models_cover_every_constructor_argument(kind: str) -> None:
    """The typed config lists exactly the buffer's constructor parameters (no drift)."""
    import inspect as pyinspect

    cls = config_mod.BUFFER_REGISTRY[kind]
    params = pyinspect.signature(cls).parameters
    fields = CONFIG_MODELS[kind].model_fields
    assert set(fields) - {"type"} == set(params)
    for name, p in params.items():  # same defaults, same required keys
        if p.default is pyinspect.Parameter.empty:
            assert fields[name].is_required(), name
        else:
            assert fields[name].get_default() == p.default, name


def test_defaults_match_the_constructors() -> None:
    """A config with only the required keys builds the same buffer as the bare constructor."""
    from rlstore.buffers.rollout import RolloutBuffer

    cfg = RolloutBufferConfig(num_steps=4, num_envs=2).to_kwargs()
    assert RolloutBuffer(**cfg).config() == RolloutBuffer(4, 2).config()


# --------------------------------------------------------------------------- robustness


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_binary_config_files_are_config_errors(tmp_path: Path, suffix: str) -> None:
    """Bytes that are not UTF-8 raised UnicodeDecodeError from load_config_file."""
    path = tmp_path / f"cfg{suffix}"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00binary")
    for call in (load_config_file, build_buffer):
        with pytest.raises(ConfigError, match="expected a UTF-8 text file"):
            call(path)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (None, "path: expected a file path|cfg: expected a mapping"),
        ("a\0b.yaml", "path: cannot read"),
    ],
)
def test_unreadable_paths_are_config_errors(path: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config_file(path)


def test_json_with_a_huge_integer_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "cfg.json"
    path.write_text('{"type": "replay", "capacity": ' + "9" * 5000 + "}")
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_config_file(path)


@pytest.mark.parametrize(
    ("cfg", "key"),
    [
        ({"type": "replay", "capacity": True}, "capacity"),
        ({"type": "replay", "capacity": 8, "num_envs": True}, "num_envs"),
        ({"type": "replay", "capacity": 8, "seed": -1}, "seed"),
        ({"type": "replay", "capacity": 8, "seed": True}, "seed"),
        ({"type": "rollout", "num_steps": True, "num_envs": 2}, "num_steps"),
        ({"type": "rollout", "num_steps": 4, "num_envs": 2, "gamma": "0.9"}, "gamma"),
        ({"type": "rollout", "num_steps": 4, "num_envs": 2, "lam": True}, "lam"),
        ({"type": "rollout", "num_steps": 4, "num_envs": 2,
          "intrinsic": {"ext_coef": float("inf")}}, "intrinsic.ext_coef"),
        ({"type": "rollout", "num_steps": 4, "num_envs": 2,
          "intrinsic": {"int_coef": float("nan")}}, "intrinsic.int_coef"),
        ({"type": "replay", "capacity": 8, "specs": [
            {"name": "obs", "shape": [2]}, {"name": "obs", "shape": [3]}]}, "specs"),
    ],
)  # fmt: skip
def test_strict_types_bounded_seeds_finite_floats(cfg: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=f" {key}: "):
        validate_config(cfg)


@pytest.mark.parametrize("kind", [["replay"], {"a": 1}, 3])
def test_unhashable_or_odd_types_name_the_type_key(kind: Any) -> None:
    with pytest.raises(ConfigError, match="type: expected one of"):
        validate_config({"type": kind, "capacity": 8})


# --------------------------------------------------------------------------- one mechanism


def test_every_config_model_is_on_the_one_base() -> None:
    """Three config mechanisms (buffer configs, PPO configs, compat schemas) had their own
    bases and error formatters; they now share StrictModel and format_validation_error."""
    from rlstore.agents import ppo_config
    from rlstore.compat.simple_replay import SimpleReplayBufferSchema
    from rlstore.compat.velora import BufferConfig as VeloraConfig

    models = [
        *CONFIG_MODELS.values(),
        SimpleReplayBufferSchema,
        VeloraConfig,
        ppo_config.TrainConfig,
        ppo_config.OnlineTrainConfig,
        ppo_config.TransformerModelConfig,
    ]
    for model in models:
        assert issubclass(model, config_mod.StrictModel), model
    assert not hasattr(ppo_config, "_format_validation_error")


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            lambda: config_mod.ReplayBufferConfig(capacity=0),
            "ReplayBufferConfig: capacity: Input should be greater than 0, got 0 (int)",
        ),
        (
            lambda: config_mod.ReplayBufferConfig(capacity=2, specs={"o": {"shap": []}}),
            "specs.o.shap: unknown key (got [])",
        ),
    ],
)
def test_direct_construction_raises_config_error(build: Any, expected: str) -> None:
    """Building a config model directly raised pydantic's ValidationError, not ConfigError."""
    with pytest.raises(ConfigError) as info:
        build()
    assert expected in str(info.value)


def test_empty_yaml_file_reads_as_an_empty_mapping(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config_file(path) == {}
    with pytest.raises(ConfigError, match="type: missing required key"):
        build_buffer(path)


@pytest.mark.parametrize(
    ("suffix", "text"),
    [
        (".yaml", "run:\n  seed: 1\ndqn:\n  lr: 1\nrun:\n  seed: 2\n"),
        (".yaml", "run:\n  seed: 1\n  seed: 2\n"),
        (".json", '{"run": {"seed": 1}, "run": {"seed": 2}}'),
    ],
)
def test_load_config_file_refuses_a_key_given_twice(tmp_path, suffix, text):
    """PyYAML and json keep the last of two equal keys silently: a duplicated section dropped
    the first one's settings (the shipped DQN config had a stray second ``run:`` line)."""
    path = tmp_path / f"c{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"'(run|seed)' given twice"):
        load_config_file(path)


def test_shipped_configs_have_no_duplicate_keys():
    import rlstore

    configs = sorted((Path(rlstore.__file__).parent / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        load_config_file(path)


def test_load_yaml_reads_yaml_1_2_exponent_floats() -> None:
    from rlstore.config import load_yaml

    data = load_yaml("a: 1e-3\nb: 10\nc: 3E+4\nd: -2e5\ne: '1e-3'\nf: 1e3x\ng: 0.5\nh: 1_000\n")
    assert data == {"a": 1e-3, "b": 10, "c": 3e4, "d": -2e5, "e": "1e-3", "f": "1e3x", "g": 0.5,
                    "h": 1000}  # fmt: skip
    assert type(data["b"]) is int and type(data["a"]) is float
    import yaml

    assert yaml.safe_load("a: 1e-3") == {"a": "1e-3"}  # PyYAML's own loader is left alone


@pytest.mark.parametrize(("text", "yaml11"), [("010", 8), ("-0777", -511), ("1:30", 90)])
def test_load_yaml_refuses_the_ints_yaml_1_1_reads_unlike_yaml_1_2(tmp_path, text, yaml11):
    """PyYAML read ``seed: 010`` as 8 and ``1:30`` as 90 (YAML 1.1's octal and base-60 ints),
    silently; YAML 1.2 and users read 10 and a string."""
    with pytest.raises(ConfigError, match=f"line 2: '{text}' is read as {yaml11} by YAML 1.1"):
        load_yaml(f"run:\n  seed: {text}\n")
    path = tmp_path / "c.yaml"
    path.write_text(f"seed: {text}\n")
    with pytest.raises(ConfigError, match=f"c.yaml: line 1: '{text}'"):
        load_config_file(path)
    # the same in decimal, quoted, or an int both read alike
    assert load_yaml(f"[{yaml11}, '{text}', 00, 07, -00, 0x10, 1_000, 1:70]") == [
        yaml11, text, 0, 7, 0, 16, 1000, "1:70"
    ]  # fmt: skip
