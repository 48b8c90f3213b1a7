"""Tests of rlstore.agents.obs with real gymnasium spaces (and MiniGrid when installed)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstore.agents.obs import (
    get_obs_preprocessor,
    get_obs_shape,
    is_image_space,
    is_minigrid_space,
    preprocess_images,
)
from rlstore.errors import SpecError


def _naive_one_hot(values: np.ndarray, n: int, start: int = 0) -> np.ndarray:
    """Loop reference: row i has a single 1 at column values[i] - start."""
    flat = values.reshape(-1)
    out = np.zeros((flat.size, n), np.float32)
    for i, v in enumerate(flat):
        out[i, int(v) - start] = 1.0
    return out.reshape(*values.shape, n)


def _naive_chw(images: np.ndarray) -> np.ndarray:
    """Loop reference for HWC uint8 -> CHW float / 255 on a batch (B, H, W, C)."""
    b, h, w, c = images.shape
    out = np.zeros((b, c, h, w), np.float32)
    for i in range(b):
        for y in range(h):
            for x in range(w):
                for k in range(c):
                    out[i, k, y, x] = images[i, y, x, k] / 255.0
    return out


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    ("space", "shape"),
    [
        (gym.make("CartPole-v1").observation_space, (4,)),
        (gym.spaces.Box(-1, 1, (2, 5), np.float32), (2, 5)),
        (gym.spaces.Discrete(7), (7,)),
        (gym.spaces.Discrete(3, start=-1), (3,)),
        (gym.spaces.MultiDiscrete([2, 3]), (5,)),
        (gym.spaces.Box(0, 255, (10, 12, 3), np.uint8), (3, 10, 12)),
        (gym.spaces.Box(0, 255, (10, 12, 2), np.uint8), (10, 12, 2)),  # 2 channels: not an image
        (
            gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2, 2)), "b": gym.spaces.Discrete(3)}),
            (7,),  # 2*2 + 3
        ),
    ],
)
def test_get_obs_shape_matches_preprocessed_sample(space: gym.Space, shape: tuple) -> None:
    assert get_obs_shape(space) == shape
    space.seed(0)
    batch = [space.sample() for _ in range(3)]
    if isinstance(space, gym.spaces.Dict):
        raw = {k: np.stack([b[k] for b in batch]) for k in space.spaces}
    else:
        raw = np.stack(batch)
    out = get_obs_preprocessor(space)(raw)
    assert out.dtype == torch.float32
    assert tuple(out.shape) == (3, *shape)


def test_unsupported_spaces_raise() -> None:
    with pytest.raises(SpecError, match="unsupported observation space"):
        get_obs_shape(gym.spaces.Text(5))
    nested = gym.spaces.Dict({"a": gym.spaces.Dict({"b": gym.spaces.Discrete(2)})})
    with pytest.raises(SpecError, match="nested"):
        get_obs_shape(nested)
    with pytest.raises(SpecError, match="unsupported"):
        get_obs_preprocessor(gym.spaces.Dict({"t": gym.spaces.Text(3)}))


def test_image_space_detection() -> None:
    assert is_image_space(gym.spaces.Box(0, 255, (4, 4, 3), np.uint8))
    assert not is_image_space(gym.spaces.Box(0, 1, (4, 4, 3), np.float32))
    assert not is_image_space(gym.spaces.Box(0, 255, (4, 4), np.uint8))


# ---------------------------------------------------------------- values


def test_box_preprocessor_keeps_values_and_batch_axes() -> None:
    space = gym.spaces.Box(-10, 10, (3,), np.float64)
    x = np.arange(2 * 4 * 3, dtype=np.float64).reshape(2, 4, 3) / 7.0  # (T, N, 3)
    out = get_obs_preprocessor(space)(x)
    assert out.dtype == torch.float32 and tuple(out.shape) == (2, 4, 3)
    np.testing.assert_allclose(out.numpy(), x.astype(np.float32))
    # no batch axis at all, and torch input
    single = get_obs_preprocessor(space)(torch.tensor([1.0, 2.0, 3.0]))
    assert single.tolist() == [1.0, 2.0, 3.0]


def test_box_preprocessor_rejects_wrong_shape_with_message() -> None:
    prep = get_obs_preprocessor(gym.spaces.Box(-1, 1, (4,)))
    with pytest.raises(SpecError, match=r"obs: expected shape \(\*batch, 4\).*got \(2, 3\)"):
        prep(np.zeros((2, 3), np.float32))


def test_discrete_one_hot_against_loop(rng: np.random.Generator) -> None:
    space = gym.spaces.Discrete(5, start=2)
    values = rng.integers(2, 7, size=(3, 4))
    out = get_obs_preprocessor(space)(values)
    np.testing.assert_array_equal(out.numpy(), _naive_one_hot(values, 5, start=2))
    # hand case: Discrete(3), obs 2 -> [0, 0, 1]
    assert get_obs_preprocessor(gym.spaces.Discrete(3))(np.int64(2)).tolist() == [0.0, 0.0, 1.0]


def test_discrete_out_of_range_raises() -> None:
    prep = get_obs_preprocessor(gym.spaces.Discrete(3))
    with pytest.raises(
        SpecError, match=r"obs: expected values in \[0, 2\], got values in \[0, 3\]"
    ):
        prep(np.array([0, 3]))
    with pytest.raises(SpecError, match="integer"):
        prep(np.array([0.5]))


def test_multidiscrete_against_loop(rng: np.random.Generator) -> None:
    space = gym.spaces.MultiDiscrete([2, 4])
    values = np.stack([rng.integers(0, 2, 6), rng.integers(0, 4, 6)], axis=-1)  # (6, 2)
    out = get_obs_preprocessor(space)(values).numpy()
    ref = np.concatenate([_naive_one_hot(values[:, 0], 2), _naive_one_hot(values[:, 1], 4)], -1)
    np.testing.assert_array_equal(out, ref)


def test_preprocess_images_against_loop(rng: np.random.Generator) -> None:
    images = rng.integers(0, 256, size=(2, 3, 5, 3), dtype=np.uint8)
    out = preprocess_images(images)
    assert out.dtype == torch.float32 and tuple(out.shape) == (2, 3, 3, 5)
    np.testing.assert_allclose(out.numpy(), _naive_chw(images), rtol=0, atol=1e-7)
    # hand values: 0 -> 0.0, 255 -> 1.0, 51 -> 0.2
    px = np.array([[[0, 255, 51]]], np.uint8)  # (1, 1, 3)
    np.testing.assert_allclose(
        preprocess_images(px).reshape(-1).numpy(), [0.0, 1.0, 0.2], atol=1e-7
    )
    # and the Box image preprocessor delegates to it
    space = gym.spaces.Box(0, 255, (3, 5, 3), np.uint8)
    np.testing.assert_array_equal(get_obs_preprocessor(space)(images).numpy(), out.numpy())


def test_preprocess_images_rejects_bad_input() -> None:
    with pytest.raises(SpecError, match="uint8"):
        preprocess_images(np.zeros((2, 2, 3), np.float32))
    with pytest.raises(SpecError, match=">= 3 axes"):
        preprocess_images(np.zeros((2, 3), np.uint8))


def test_dict_preprocessor_concatenates_in_key_order(rng: np.random.Generator) -> None:
    space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-5, 5, (2,), np.float32), "mode": gym.spaces.Discrete(3)}
    )
    # gymnasium sorts Dict keys: "mode" comes before "pos"
    assert list(space.spaces) == ["mode", "pos"]
    pos = rng.normal(size=(4, 2)).astype(np.float32)
    mode = rng.integers(0, 3, size=4)
    out = get_obs_preprocessor(space)({"pos": pos, "mode": mode}).numpy()
    np.testing.assert_allclose(out, np.concatenate([_naive_one_hot(mode, 3), pos], -1))


def test_dict_preprocessor_errors_name_the_key() -> None:
    space = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,)), "b": gym.spaces.Discrete(2)})
    prep = get_obs_preprocessor(space)
    with pytest.raises(SpecError, match="missing key 'b'"):
        prep({"a": np.zeros((3, 2), np.float32)})
    with pytest.raises(SpecError, match=r"obs\['b'\]: expected batch axes \(3,\)"):
        prep({"a": np.zeros((3, 2), np.float32), "b": np.zeros(4, np.int64)})
    with pytest.raises(SpecError, match="expected a dict"):
        prep(np.zeros(3))


def _fake_minigrid_space() -> gym.spaces.Dict:
    return gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 255, (3, 3, 3), np.uint8),
            "direction": gym.spaces.Discrete(4),
            "mission": gym.spaces.Text(20),
        }
    )


def test_minigrid_style_dict_uses_image_and_direction(rng: np.random.Generator) -> None:
    space = _fake_minigrid_space()
    assert is_minigrid_space(space)
    assert get_obs_shape(space) == (3 * 3 * 3 + 4,)
    image = rng.integers(0, 11, size=(2, 3, 3, 3), dtype=np.uint8)
    direction = np.array([3, 1])
    obs = {"image": image, "direction": direction, "mission": ("go", "go")}
    out = get_obs_preprocessor(space)(obs).numpy()
    ref = np.zeros((2, 31), np.float32)
    for i in range(2):
        ref[i, :27] = image[i].reshape(-1) / 10.0  # row-major flatten, object ids / 10
        ref[i, 27 + direction[i]] = 1.0
    np.testing.assert_allclose(out, ref, atol=1e-7)
    # hand value: object id 10 -> 1.0
    image[0, 0, 0, 0] = 10
    assert get_obs_preprocessor(space)({"image": image, "direction": direction})[0, 0] == 1.0


def test_minigrid_real_env() -> None:
    pytest.importorskip("minigrid")
    envs = gym.make_vec("MiniGrid-Empty-5x5-v0", num_envs=2, vectorization_mode="sync")
    try:
        space = envs.single_observation_space
        assert is_minigrid_space(space)
        obs, _ = envs.reset(seed=0)
        out = get_obs_preprocessor(space)(obs)
        assert tuple(out.shape) == (2, *get_obs_shape(space)) == (2, 7 * 7 * 3 + 4)
        assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
        np.testing.assert_array_equal(out[:, -4:].argmax(-1).numpy(), obs["direction"])
    finally:
        envs.close()


def test_tuple_observations_are_read_as_dicts_of_their_parts() -> None:
    """Blackjack's Tuple observations were refused ("unsupported observation space")."""
    from rlstore.agents.config import EnvironmentConfig
    from rlstore.agents.envs import make_env, make_vector_env

    cfg = EnvironmentConfig(env_id="Blackjack-v1")
    envs = make_vector_env(cfg, 2)
    same_step = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}  # as make_vector_env
    plain = gym.make_vec("Blackjack-v1", 2, "sync", vector_kwargs=same_step)
    D = gym.spaces.Discrete
    want = gym.spaces.Dict({"0": D(32), "1": D(11), "2": D(2)})
    assert envs.single_observation_space == want == make_env(cfg).observation_space
    (obs, _), (raw, _) = envs.reset(seed=5), plain.reset(seed=5)
    for _ in range(20):  # the same env underneath, relabelled
        assert set(obs) == {"0", "1", "2"}
        for i in range(3):
            np.testing.assert_array_equal(obs[str(i)], raw[i])
        acts = np.array([0, 1])
        obs, raw = envs.step(acts)[0], plain.step(acts)[0]
    x = get_obs_preprocessor(want)(obs)  # one-hots of 32 + 11 + 2 in key order
    assert x.shape == (2, 45) and get_obs_shape(want) == (45,)
    assert torch.equal(x.sum(-1), torch.full((2,), 3.0))
    make_cart = make_env(EnvironmentConfig(env_id="CartPole-v1"))
    assert isinstance(make_cart.observation_space, gym.spaces.Box)  # other envs unchanged


def test_ppo_trains_and_evaluates_on_tuple_observations() -> None:
    from rlstore.agents.ppo import (
        EnvironmentConfig,
        OnlineTrainConfig,
        RunConfig,
        evaluate_agent,
        train_ppo,
    )

    env = EnvironmentConfig(env_id="Blackjack-v1")
    online = OnlineTrainConfig(total_timesteps=64, num_envs=2, num_steps=16, num_minibatches=2)
    agent, _ = train_ppo(RunConfig(track=False, seed=0), online, env)
    assert agent.obs_shape == (45,)  # one-hots of the player sum, dealer card and usable ace
    assert len(evaluate_agent(agent, env, 3, 0)) == 3
