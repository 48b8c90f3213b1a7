"""Observations of the agents: shapes, preprocessors, image conversion, and the running
observation / reward normalization of a run (:class:`RunNormalizer`).

Contract (every preprocessor built here follows it):

* ``get_obs_shape(space)`` is the shape of ONE observation *after* preprocessing, i.e. what the
  network sees. The preprocessor returned by ``get_obs_preprocessor(space)`` maps a batch of raw
  observations with any number of leading batch axes ``B...`` (a single env step ``(N, ...)``, a
  rollout ``(T, N, ...)``, or no batch axis at all) to a ``torch.float32`` tensor of shape
  ``(*B, *get_obs_shape(space))``.
* Supported spaces and what they become:

  ==========================================  ==================================================
  space                                       preprocessed observation
  ==========================================  ==================================================
  ``Box`` (not an image)                      float32, same shape, values unchanged
  ``Box`` image: uint8, ``(H, W, C)``,        float32 ``(C, H, W)`` in ``[0, 1]`` (divided by
  ``C in {1, 3, 4}``, bounds ``[0, 255]``     255), see :func:`preprocess_images`
  ``Discrete(n, start)``                      one-hot float32 ``(n,)`` of ``obs - start``
  ``MultiDiscrete(nvec)`` (1-D)               concatenated one-hots ``(sum(nvec),)``
  MiniGrid ``Dict`` (keys ``image``,          ``(H*W*C + n_dir,)``: the grid encoding flattened
  ``direction``, optional ``mission``)        and divided by 10 (object ids <= 10, colours <= 5,
                                              states <= 2, so values lie in [0, 1]), followed by
                                              the one-hot direction; the mission text is ignored;
                                              a pixel ``image`` (``img_obs``) alike, in
                                              [0, 25.5] (:mod:`~rlstore.agents.encoders`'
                                              CNN reads it unflattened in [0, 1])
  other ``Dict`` (one level)                  every sub-observation preprocessed as above,
                                              flattened and concatenated in key order, ``(D,)``
  ==========================================  ==================================================

* Bad input raises :class:`rlstore.errors.SpecError` naming the observation (``obs`` or
  ``obs['key']``), the expected trailing shape or value range, and what arrived.

Example::

    >>> import gymnasium as gym
    >>> space = gym.spaces.Discrete(3)
    >>> get_obs_shape(space)
    (3,)
    >>> get_obs_preprocessor(space)(np.array([2, 0])).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from rlstore._checks import check_keys
from rlstore.errors import CheckpointError, SpecError
from rlstore.normalize import DiscountedReturnNormalizer, RunningMeanStd

__all__ = [
    "ObsPreprocessor",
    "get_obs_shape",
    "get_obs_preprocessor",
    "preprocess_images",
    "is_image_space",
    "is_minigrid_space",
    "MINIGRID_SCALE",
    "numeric_obs",
    "RunNormalizer",
]

#: ``preprocess(obs, device=None) -> float32 tensor of shape (*B, *get_obs_shape(space))``
ObsPreprocessor = Callable[..., torch.Tensor]

MINIGRID_SCALE = 10.0  # largest MiniGrid object index; colours (<= 5) and states (<= 2) are smaller
_IMAGE_CHANNELS = (1, 3, 4)


def is_image_space(space: gym.Space) -> bool:
    """True for a pixel image ``Box``: uint8, ``(H, W, C)``, ``C in {1, 3, 4}``, bounds 0..255."""
    return (
        isinstance(space, gym.spaces.Box)
        and space.dtype == np.uint8
        and len(space.shape) == 3
        and space.shape[-1] in _IMAGE_CHANNELS
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
    )


def is_minigrid_space(space: gym.Space) -> bool:
    """True for a MiniGrid dict space: keys ``image`` (3-D Box) and ``direction`` (Discrete)
    and at most an extra ``mission`` key."""
    if not isinstance(space, gym.spaces.Dict):
        return False
    keys = set(space.spaces)
    return (
        {"image", "direction"} <= keys <= {"image", "direction", "mission"}
        and isinstance(space["image"], gym.spaces.Box)
        and len(space["image"].shape) == 3
        and isinstance(space["direction"], gym.spaces.Discrete)
    )


def numeric_obs(obs: Any) -> np.ndarray | dict[str, np.ndarray]:
    """A copy of a raw observation (batch) as a numpy array, or a dict of numpy arrays without
    the non-numeric entries (MiniGrid's ``mission`` text), as buffers and checkpoints store it."""
    if isinstance(obs, Mapping):
        out = {}
        for k, v in obs.items():
            arr = np.asarray(v)
            if arr.dtype.kind in "biuf":
                out[str(k)] = arr.copy()
        return out
    return np.array(obs, copy=True)


def _minigrid_parts(space: gym.Space) -> tuple[tuple[int, ...], gym.spaces.Discrete]:
    """The image shape and the direction space of a MiniGrid dict space."""
    d = cast(gym.spaces.Dict, space)
    image = cast(gym.spaces.Box, d["image"])
    return tuple(int(s) for s in image.shape), cast(gym.spaces.Discrete, d["direction"])


def _unsupported(space: gym.Space, where: str) -> SpecError:
    return SpecError(
        f"{where}: unsupported observation space {space!r}; expected Box, Discrete, "
        "MultiDiscrete (1-D), a MiniGrid Dict or a one-level Dict of those"
    )


def get_obs_shape(single_observation_space: gym.Space) -> tuple[int, ...]:
    """Shape of one preprocessed observation (what the network sees), see the module contract.

    Args:
        single_observation_space: the observation space of ONE env
            (``envs.single_observation_space`` for a vector env).

    Returns:
        A tuple of ints, e.g. ``(4,)`` for CartPole, ``(3, 64, 64)`` for a 64x64 RGB image,
        ``(151,)`` for MiniGrid's 7x7x3 view plus 4 directions.

    Raises:
        SpecError: unsupported space.
    """
    return _shape(single_observation_space, "obs")


def _shape(space: gym.Space, where: str) -> tuple[int, ...]:
    if isinstance(space, gym.spaces.Box):
        if is_image_space(space):
            h, w, c = space.shape
            return (c, h, w)
        return tuple(int(s) for s in space.shape)
    if isinstance(space, gym.spaces.Discrete):
        return (int(space.n),)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise _unsupported(space, where)
        return (int(space.nvec.sum()),)
    if is_minigrid_space(space):
        image_shape, direction = _minigrid_parts(space)
        return (int(np.prod(image_shape)) + int(direction.n),)
    if isinstance(space, gym.spaces.Dict):
        total = 0
        for key, sub in space.spaces.items():
            if isinstance(sub, gym.spaces.Dict):
                raise _unsupported(sub, f"{where}[{key!r}] (nested Dict)")
            total += int(np.prod(_shape(sub, f"{where}[{key!r}]")))
        return (total,)
    raise _unsupported(space, where)


def _as_tensor(x: Any, device: torch.device | str | None, where: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.to(device) if device is not None else x
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:  # pragma: no cover - exotic inputs
        raise SpecError(
            f"{where}: expected an array-like observation, got {type(x).__name__}"
        ) from exc
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise SpecError(f"{where}: expected a numeric array, got dtype {arr.dtype}")
    return torch.as_tensor(arr, device=device)


def _batch_shape(t: torch.Tensor, event_shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    nd = len(event_shape)
    if t.ndim < nd or tuple(t.shape[t.ndim - nd :]) != tuple(event_shape):
        raise SpecError(
            f"{where}: expected shape (*batch, {', '.join(map(str, event_shape))}) "
            f"(trailing {tuple(event_shape)}), got {tuple(t.shape)}"
        )
    return tuple(t.shape[: t.ndim - nd])


def _one_hot(t: torch.Tensor, n: int, start: int, where: str) -> torch.Tensor:
    if t.is_floating_point():
        if not bool(torch.all(t == torch.round(t))):
            raise SpecError(f"{where}: expected integer category indices, got non-integral floats")
    idx = t.long() - int(start)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise SpecError(
            f"{where}: expected values in [{start}, {start + n - 1}], got values in "
            f"[{int(idx.min()) + start}, {int(idx.max()) + start}]"
        )
    return torch.nn.functional.one_hot(idx, n).to(torch.float32)


def preprocess_images(images: Any, device: torch.device | str | None = None) -> torch.Tensor:
    """Convert uint8 images ``(*B, H, W, C)`` to float32 ``(*B, C, H, W)`` in ``[0, 1]``.

    Args:
        images: numpy array or tensor of dtype uint8 with at least 3 axes, channels last.
        device: where the result lives (default: the input tensor's device, or CPU).

    Returns:
        float32 tensor ``(*B, C, H, W)`` equal to ``images / 255`` with channels moved first.

    Raises:
        SpecError: fewer than 3 axes, or a dtype other than uint8.
    """
    t = _as_tensor(images, device, "images")
    if t.ndim < 3:
        raise SpecError(
            f"images: expected shape (*batch, H, W, C) with >= 3 axes, got {tuple(t.shape)}"
        )
    if t.dtype != torch.uint8:
        raise SpecError(f"images: expected dtype uint8 (values 0..255), got {t.dtype}")
    return torch.movedim(t, -1, -3).to(torch.float32) / 255.0


def _leaf_preprocessor(space: gym.Space, where: str) -> Callable[[Any, Any], torch.Tensor]:
    """Preprocessor for a non-Dict space: raw ``(*B, *raw_shape)`` -> float32 ``(*B, *shape)``."""
    if isinstance(space, gym.spaces.Box):
        raw_shape = tuple(int(s) for s in space.shape)
        if is_image_space(space):

            def prep_image(obs: Any, device: Any = None) -> torch.Tensor:
                t = _as_tensor(obs, device, where)
                _batch_shape(t, raw_shape, where)
                if t.dtype != torch.uint8:
                    raise SpecError(f"{where}: expected dtype uint8 image, got {t.dtype}")
                return preprocess_images(t)

            return prep_image

        def prep_box(obs: Any, device: Any = None) -> torch.Tensor:
            t = _as_tensor(obs, device, where)
            _batch_shape(t, raw_shape, where)
            return t.to(torch.float32)

        return prep_box
    if isinstance(space, gym.spaces.Discrete):
        n, start = int(space.n), int(space.start)

        def prep_discrete(obs: Any, device: Any = None) -> torch.Tensor:
            return _one_hot(_as_tensor(obs, device, where), n, start, where)

        return prep_discrete
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        nvec = [int(v) for v in space.nvec]
        starts = [int(s) for s in np.broadcast_to(space.start, space.nvec.shape)]

        def prep_multidiscrete(obs: Any, device: Any = None) -> torch.Tensor:
            t = _as_tensor(obs, device, where)
            _batch_shape(t, (len(nvec),), where)
            parts = [
                _one_hot(t[..., i], n, s, f"{where}[..., {i}]")
                for i, (n, s) in enumerate(zip(nvec, starts, strict=True))
            ]
            return torch.cat(parts, dim=-1)

        return prep_multidiscrete
    raise _unsupported(space, where)


def _get_key(obs: Any, key: str, where: str) -> Any:
    if not isinstance(obs, Mapping):
        raise SpecError(f"{where}: expected a dict observation, got {type(obs).__name__}")
    if key not in obs:
        raise SpecError(f"{where}: missing key {key!r}; got keys {sorted(obs)}")
    return obs[key]


def get_obs_preprocessor(obs_space: gym.Space) -> ObsPreprocessor:
    """Build ``preprocess(obs, device=None) -> torch.Tensor`` for ``obs_space`` (module contract).

    Args:
        obs_space: the observation space of ONE env.

    Returns:
        A function taking raw observations with any leading batch axes (numpy arrays, tensors,
        or dicts of them for ``Dict`` spaces) and returning float32
        ``(*B, *get_obs_shape(obs_space))``.

    Raises:
        SpecError: unsupported space (here), or observations of the wrong shape, dtype or range
        (when the preprocessor is called).

    Example::

        >>> space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
        >>> get_obs_preprocessor(space)(np.zeros((2, 8, 8, 3), np.uint8)).shape
        torch.Size([2, 3, 8, 8])
    """
    if is_minigrid_space(obs_space):
        image_shape, direction = _minigrid_parts(obs_space)
        n_dir = int(direction.n)
        dir_start = int(direction.start)

        def prep_minigrid(obs: Any, device: Any = None) -> torch.Tensor:
            image = _as_tensor(_get_key(obs, "image", "obs"), device, "obs['image']")
            batch = _batch_shape(image, image_shape, "obs['image']")
            direction = _as_tensor(_get_key(obs, "direction", "obs"), device, "obs['direction']")
            if tuple(direction.shape) != batch:
                raise SpecError(
                    f"obs['direction']: expected shape {batch} (the batch axes of obs['image']), "
                    f"got {tuple(direction.shape)}"
                )
            flat = image.reshape(*batch, -1).to(torch.float32) / MINIGRID_SCALE
            return torch.cat([flat, _one_hot(direction, n_dir, dir_start, "obs['direction']")], -1)

        return prep_minigrid

    if isinstance(obs_space, gym.spaces.Dict):
        _shape(obs_space, "obs")  # validates every subspace (no nesting, supported leaves)
        parts: list[tuple[str, Callable[[Any, Any], torch.Tensor], int]] = []
        for key, sub in obs_space.spaces.items():
            where = f"obs[{key!r}]"
            parts.append((key, _leaf_preprocessor(sub, where), len(_shape(sub, where))))

        def prep_dict(obs: Any, device: Any = None) -> torch.Tensor:
            outs: list[torch.Tensor] = []
            batch: tuple[int, ...] | None = None
            for key, prep, event_ndim in parts:
                out = prep(_get_key(obs, key, "obs"), device)
                b = tuple(out.shape[: out.ndim - event_ndim])
                if batch is None:
                    batch = b
                elif b != batch:
                    raise SpecError(
                        f"obs[{key!r}]: expected batch axes {batch} like the other keys, got {b}"
                    )
                outs.append(out.reshape(*b, -1))
            return torch.cat(outs, dim=-1)

        return prep_dict

    leaf = _leaf_preprocessor(obs_space, "obs")

    def prep(obs: Any, device: Any = None) -> torch.Tensor:
        return leaf(obs, device)

    return prep


class RunNormalizer:
    """Observation and reward normalization; with no arguments both are off (identity).

    The normalization of a PPO run (``online.normalize_obs`` / ``online.normalize_reward``),
    Stable-Baselines3 ``VecNormalize`` semantics:

    * observations: a :class:`~rlstore.normalize.RunningMeanStd` over preprocessed observations
      (for a non-image ``Box`` space: the raw values as float32), updated from every training
      step's batch ``(N, *obs_shape)`` (the reset observations included) *before* normalizing it;
      the agent sees and stores ``clip((x - mean) / sqrt(var + 1e-8), -clip_obs, clip_obs)``;
      final observations of truncated episodes are normalized without an update.
    * rewards: a :class:`~rlstore.normalize.DiscountedReturnNormalizer` with the run's ``gamma``
      whose per-env sums restart at episode ends (``dones``); the stored reward is
      ``clip(r / (std + 1e-8), -clip_reward, clip_reward)``. Episode returns stay raw.

    Statistics are updated only while ``update`` is true (the rollout passes ``agent.training``):
    evaluation and sampling in ``eval()`` mode use them frozen. :meth:`state_dict` goes into
    every checkpoint (also model-only ones, so loaded agents sample as they trained).

    Args:
        obs_shape: shape of one preprocessed observation; ``None``: observations unchanged.
        gamma: discount of the reward normalizer's running return; ``None``: rewards unchanged.
        clip_obs, clip_reward: clip ranges of the normalized values.
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...] | None = None,
        gamma: float | None = None,
        *,
        clip_obs: float = 10.0,
        clip_reward: float = 10.0,
    ) -> None:
        self.obs_rms = None if obs_shape is None else RunningMeanStd(tuple(obs_shape))
        self.reward_norm = None if gamma is None else DiscountedReturnNormalizer(gamma)
        self.clip_obs, self.clip_reward = float(clip_obs), float(clip_reward)

    def obs(self, x: torch.Tensor, update: bool) -> torch.Tensor:
        """Normalized ``x`` ``(N, *obs_shape)`` (same dtype and device); ``update`` first adds
        ``x`` to the statistics."""
        if self.obs_rms is None:
            return x
        if update:
            self.obs_rms.update(x)
        return self.obs_rms.normalize(x, clip=self.clip_obs)

    def reward(self, reward: np.ndarray, done: np.ndarray, update: bool) -> np.ndarray:
        """Scaled rewards ``(N,)`` of one step; ``update`` first advances the running returns
        (reset where ``done``) and their std."""
        if self.reward_norm is None:
            return reward
        if update:
            self.reward_norm.update(reward[None], np.asarray(done, dtype=bool)[None])
        return np.clip(self.reward_norm.scale(reward), -self.clip_reward, self.clip_reward)

    def state_dict(self) -> dict[str, Any]:
        """``{"obs": RunningMeanStd state or None, "reward": DiscountedReturnNormalizer state
        or None}`` (copies)."""
        return {
            "obs": None if self.obs_rms is None else self.obs_rms.state_dict(),
            "reward": None if self.reward_norm is None else self.reward_norm.state_dict(),
        }

    def load_state_dict(self, sd: Any) -> None:
        """Restore :meth:`state_dict` of a normalizer with the same settings; everything is
        checked before anything changes.

        Raises:
            CheckpointError: missing or extra parts, or malformed statistics.
        """
        check_keys("normalizer", sd, ("obs", "reward"))
        obs_rms, reward_norm = None, None
        for key, mine in (("obs", self.obs_rms), ("reward", self.reward_norm)):
            if (sd[key] is None) != (mine is None):
                raise CheckpointError(
                    f"normalizer.{key}: checkpoint has {'no ' if sd[key] is None else ''}"
                    f"statistics, this run's config {'asks for' if mine else 'has none'}"
                )
        if self.obs_rms is not None:
            obs_rms = RunningMeanStd(self.obs_rms.shape)
            obs_rms.load_state_dict(sd["obs"])
        if self.reward_norm is not None:
            reward_norm = DiscountedReturnNormalizer(self.reward_norm.gamma)
            reward_norm.load_state_dict(sd["reward"])
        self.obs_rms, self.reward_norm = obs_rms, reward_norm
