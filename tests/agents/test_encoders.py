"""Observation encoders (rlstore.agents.encoders): NatureCNN for pixel images, the flattened
observation otherwise; PPO's FC agent and DQN read pixels through it; the replay keeps uint8
frames; runs written before the ``encoder`` switch resume with the MLP they trained."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rlstore.agents.dqn import DQNAgent, DQNConfig, DQNTrainConfig, EnvInfo, train_dqn
from rlstore.agents.dqn import runner as dqn_runner
from rlstore.agents.encoders import (
    MIN_IMAGE_SIZE,
    NatureCNN,
    ObsEncoder,
    build_encoder,
    resolve_encoder,
)
from rlstore.agents.networks import FCAgent, get_agent
from rlstore.agents.obs import get_obs_preprocessor
from rlstore.agents.ppo import TrainConfig, load_saved_checkpoint, train_ppo
from rlstore.agents.ppo import runner as ppo_runner
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    LSTMModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TransformerModelConfig,
)
from rlstore.checkpoint import load
from rlstore.errors import ConfigError

pytest.importorskip("minigrid")

U8 = np.uint8
IMAGE = gym.spaces.Box(0, 255, (40, 44, 3), U8)
# MiniGrid with img_obs: RGBImgPartialObsWrapper's 7 x 7 tiles of 8 pixels
MINIGRID_PIXELS = gym.spaces.Dict(
    {"direction": gym.spaces.Discrete(4), "image": gym.spaces.Box(0, 255, (56, 56, 3), U8)}
)
MINIGRID_GRID = gym.spaces.Dict(
    {"direction": gym.spaces.Discrete(4), "image": gym.spaces.Box(0, 255, (7, 7, 3), U8)}
)
IMG_ENV = {"env_id": "MiniGrid-Empty-5x5-v0", "img_obs": True}


@pytest.mark.parametrize(
    ("space", "choice", "kind", "out_dim"),
    [
        (IMAGE, "auto", "cnn", 512),
        (IMAGE, "mlp", "mlp", 40 * 44 * 3),
        (MINIGRID_PIXELS, "auto", "cnn", 512),
        (MINIGRID_PIXELS, "cnn", "cnn", 512),
        (MINIGRID_GRID, "auto", "mlp", 7 * 7 * 3 + 4),  # a grid encoding, not an image
        (gym.spaces.Box(0, 255, (35, 64, 1), U8), "auto", "mlp", 35 * 64),  # too small
        (gym.spaces.Box(-1.0, 1.0, (4,)), "auto", "mlp", 4),
        (gym.spaces.Discrete(5), "auto", "mlp", 5),
    ],
)
def test_encoder_kind_and_output_shape(
    space: gym.Space, choice: Any, kind: str, out_dim: int
) -> None:
    enc = build_encoder(space, choice)
    assert (enc.kind, enc.out_dim) == (kind, out_dim)
    obs = space.sample()
    x = get_obs_preprocessor(space)({k: np.stack([v] * 3) for k, v in obs.items()}
                                    if isinstance(obs, dict) else np.stack([obs] * 3))  # fmt: skip
    assert enc(x).shape == (3, out_dim)


@pytest.mark.parametrize(
    ("space", "got"),
    [
        (gym.spaces.Box(0, 255, (MIN_IMAGE_SIZE, MIN_IMAGE_SIZE - 1, 3), U8), "a 36x35 image"),
        (MINIGRID_GRID, "a 7x7 image"),
        (gym.spaces.Box(-1.0, 1.0, (4,)), "no pixel image"),
    ],
)
def test_cnn_on_what_it_cannot_read_is_a_config_error(space: gym.Space, got: str) -> None:
    with pytest.raises(ConfigError, match=rf"encoder: 'cnn' expects pixel images.*36x36.*{got}"):
        resolve_encoder(space, "cnn")
    with pytest.raises(ConfigError, match="encoder: 'cnn'"):
        DQNAgent(EnvInfo(None, space, gym.spaces.Discrete(2)), DQNConfig(encoder="cnn"))
    assert resolve_encoder(gym.spaces.Box(0, 255, (36, 36, 4), U8), "cnn") == "cnn"  # fits


def _twin(cnn: NatureCNN, images: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
    """NatureCNN written out with the same parameters."""
    c1, c2, c3 = (m for m in cnn.convs if isinstance(m, torch.nn.Conv2d))
    h = F.relu(F.conv2d(images, c1.weight, c1.bias, stride=4))
    h = F.relu(F.conv2d(h, c2.weight, c2.bias, stride=2))
    h = F.relu(F.conv2d(h, c3.weight, c3.bias, stride=1)).flatten(1)
    if extra is not None:
        h = torch.cat([h, extra], 1)
    return F.relu(h @ cnn.linear.weight.T + cnn.linear.bias)


def test_cnn_matches_a_hand_written_twin_on_raw_images() -> None:
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (5, 40, 44, 3), dtype=U8)
    enc = build_encoder(IMAGE, "cnn")
    assert enc.cnn is not None
    assert [tuple(m.weight.shape) for m in enc.cnn.convs if isinstance(m, torch.nn.Conv2d)] == [
        (32, 3, 8, 8), (64, 32, 4, 4), (64, 64, 3, 3)]  # fmt: skip
    # 40 x 44 -> 9 x 10 -> 3 x 4 -> 1 x 2, 64 channels
    assert enc.cnn.linear.in_features == 64 * 1 * 2
    images = torch.from_numpy(raw).permute(0, 3, 1, 2).float() / 255  # (B, C, H, W) in [0, 1]
    got = enc(get_obs_preprocessor(IMAGE)(raw))
    torch.testing.assert_close(got, _twin(enc.cnn, images, None), rtol=1e-5, atol=1e-5)
    assert float(got.detach().abs().max()) > 0.1  # not all zero


def test_minigrid_pixels_are_unflattened_and_the_direction_joins_the_dense_layer() -> None:
    rng = np.random.default_rng(1)
    raw = {"image": rng.integers(0, 256, (4, 56, 56, 3), dtype=U8), "direction": np.arange(4)}
    enc = build_encoder(MINIGRID_PIXELS, "auto")
    assert enc.cnn is not None
    assert enc.cnn.linear.in_features == 64 * 3 * 3 + 4  # 56 -> 13 -> 5 -> 3, plus 4 directions
    images = torch.from_numpy(raw["image"]).permute(0, 3, 1, 2).float() / 255
    want = _twin(enc.cnn, images, torch.eye(4))
    got = enc(get_obs_preprocessor(MINIGRID_PIXELS)(raw))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # the direction matters
    raw["direction"] = np.zeros(4, np.int64)
    assert not torch.allclose(enc(get_obs_preprocessor(MINIGRID_PIXELS)(raw))[1:], got[1:])


def test_fc_agent_and_dqn_on_a_pixel_box_space() -> None:
    envs = SimpleNamespace(
        single_observation_space=IMAGE, single_action_space=gym.spaces.Discrete(3)
    )
    agent = get_agent(None, envs, EnvironmentConfig(), OnlineTrainConfig())
    assert isinstance(agent, FCAgent) and agent.encoder.kind == "cnn"
    assert isinstance(agent.actor, torch.nn.Linear) and agent.actor.in_features == 512
    obs = agent.preprocess(IMAGE.sample()[None])
    params, value, _, _ = agent._step(obs, None, torch.zeros(1))
    assert params.shape == (1, 3) and value.shape == (1,)
    mlp_agent = get_agent(None, envs, EnvironmentConfig(), OnlineTrainConfig(encoder="mlp"))
    assert set(mlp_agent.state_dict()) == set(FCAgent(envs).state_dict())  # the old layout
    dqn = DQNAgent(EnvInfo(None, IMAGE, gym.spaces.Discrete(3)), DQNConfig(hidden_sizes=[16]))
    assert dqn.q.encoder is not None and dqn.q.body[0].in_features == 512
    assert dqn(IMAGE.sample()[None]).shape == (1, 3) and 0 <= dqn.act(IMAGE.sample()) < 3
    # the LSTM agent: a NatureCNN of image_dim features as each core's encoder
    lstm = get_agent(LSTMModelConfig(image_dim=32), envs, EnvironmentConfig(), OnlineTrainConfig())
    assert isinstance(lstm.actor_core.encoder, ObsEncoder) and lstm.actor_core.encoder.out_dim == 32
    x = lstm.preprocess(np.stack([IMAGE.sample() for _ in range(6)]))  # (6, 3, 40, 44)
    params, value, _, _ = lstm._step(x, lstm.initial_memory(6), torch.zeros(6))
    assert params.shape == (6, 3) and value.shape == (6,)
    # one sequence of 6 steps of one env gives the same as 6 single steps
    mb = SimpleNamespace(obs=x[:, None], recurrence_memory=lstm.initial_memory(1), mask=None)
    memory, steps = lstm.initial_memory(1), []
    for t in range(6):
        p, _, _, memory = lstm._step(x[t : t + 1], memory, torch.zeros(1))
        steps.append(p)
    torch.testing.assert_close(lstm._evaluate(mb)[0][:, 0], torch.cat(steps), rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="lstm.obs_encoder: the cnn encoder"):
        get_agent(
            LSTMModelConfig(obs_encoder=False), envs, EnvironmentConfig(), OnlineTrainConfig()
        )
    # the transformer refuses 'cnn' rather than ignore it
    with pytest.raises(ConfigError, match="online.encoder: 'cnn' is for the fc and lstm agents"):
        get_agent(
            TransformerModelConfig(), envs, EnvironmentConfig(), OnlineTrainConfig(encoder="cnn")
        )


def test_ppo_trains_on_minigrid_pixels_with_the_cnn() -> None:
    agent, stats = train_ppo(
        RunConfig(track=False, eval_episodes=0),
        OnlineTrainConfig(total_timesteps=64, num_envs=2, num_steps=32, num_checkpoints=0),
        EnvironmentConfig(**IMG_ENV),
        None,
    )
    assert isinstance(agent, FCAgent) and agent.encoder.kind == "cnn"
    assert stats.global_step == 64 and len(stats.updates) == 1


def _dqn_cfg(**dqn: Any) -> DQNTrainConfig:
    base = {"total_timesteps": 200, "learning_starts": 32, "batch_size": 8, "train_freq": 50,
            "gradient_steps": 2, "hidden_sizes": [16], "num_checkpoints": 1, "num_envs": 2,
            "buffer_size": 400}  # fmt: skip
    return DQNTrainConfig.from_dict({
        "run": {"track": False, "seed": 3, "eval_episodes": 0},
        "environment": IMG_ENV,
        "dqn": {**base, **dqn},
    })  # fmt: skip


def test_dqn_trains_on_minigrid_pixels_and_the_replay_keeps_uint8_frames(tmp_path: Path) -> None:
    agent, stats = train_dqn(_dqn_cfg(), run_dir=tmp_path)
    assert agent.q.encoder is not None and stats.num_updates == 2 * 2
    buf = load(tmp_path / "checkpoints" / "checkpoint_0000", prefix="buffer_")
    assert buf.specs is not None and buf.specs["obs.image"].dtype == np.dtype(U8)
    frame = 56 * 56 * 3  # bytes of one uint8 frame; float32 would be 4x
    # per transition (capacity 400): one frame (next_obs stored once) plus small fields
    per_transition = buf.nbytes / buf.capacity
    assert frame <= per_transition < 1.2 * frame, per_transition
    assert buf.sample(4).obs["image"].dtype == torch.uint8


def _without_encoder(monkeypatch: pytest.MonkeyPatch, cls: type, section: str) -> None:
    """Make ``cls.to_dict`` (config.yaml, PPO checkpoints) write what code before the
    ``encoder`` field wrote: no ``<section>.encoder``."""
    orig = cls.to_dict

    def to_dict(self: Any) -> dict[str, Any]:
        d = orig(self)
        del d[section]["encoder"]
        return d

    monkeypatch.setattr(cls, "to_dict", to_dict)


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_run_written_before_the_encoder_switch_resumes_with_its_mlp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algo: str
) -> None:
    if algo == "ppo":
        cfg: Any = TrainConfig.from_dict({
            "run": {"track": False, "seed": 2, "eval_episodes": 0},
            "environment": IMG_ENV,
            "online": {"total_timesteps": 128, "num_envs": 2, "num_steps": 16,
                       "num_checkpoints": 2, "hidden_size": 8, "encoder": "mlp"},
        })  # fmt: skip
        runner, cls, section = ppo_runner, TrainConfig, "online"
    else:
        cfg = _dqn_cfg(num_checkpoints=2, encoder="mlp")
        runner, cls, section = dqn_runner, DQNTrainConfig, "dqn"
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    with monkeypatch.context() as m:  # the "old" run: no encoder key anywhere
        _without_encoder(m, cls, section)
        agent_a, stats_a = runner(cfg, run_dir=a_dir, resume=False)
    assert "\n  encoder:" not in (a_dir / "config.yaml").read_text()
    shutil.copytree(a_dir, b_dir)
    ckpts = sorted((b_dir / "checkpoints").iterdir())
    assert len(ckpts) == 2
    shutil.rmtree(ckpts[-1])  # resume from the middle
    # what `rlstore train --resume` loads: the folder's config.yaml, missing key = mlp
    resumed = cls.from_file(b_dir / "config.yaml", run_file=True)
    assert getattr(resumed, section).encoder == "mlp"
    assert getattr(cls.from_file(b_dir / "config.yaml"), section).encoder == "auto"
    agent_b, stats_b = runner(resumed, run_dir=b_dir, resume=True)
    sd_a, sd_b = agent_a.state_dict(), agent_b.state_dict()
    assert set(sd_a) == set(sd_b) and all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)
    assert stats_b.episode_returns == stats_a.episode_returns
    if algo == "ppo":  # a model-only load of the old checkpoint builds the MLP too
        loaded = load_saved_checkpoint(ckpts[0], num_envs=1)
        assert isinstance(loaded, FCAgent) and loaded.encoder.kind == "mlp"
