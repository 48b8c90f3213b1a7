"""Observation encoders of the agents: preprocessed observations -> a feature vector.

The networks read observations preprocessed by :mod:`rlstore.agents.obs` (float32, shape
``get_obs_shape(space)``); an encoder maps a batch ``(B, *obs_shape)`` to ``(B, out_dim)``
features for the heads (PPO's FC agent, DQN's Q-network):

* ``mlp``: the flattened observation (``out_dim = prod(obs_shape)``; no parameters), read by
  the agent's MLP as before this module existed;
* ``cnn``: :class:`NatureCNN` (Mnih et al. 2015; SB3's ``NatureCNN``, CleanRL's Atari
  scripts): Conv 32 8x8 stride 4, Conv 64 4x4 / 2, Conv 64 3x3 / 1, each ReLU, flattened,
  Linear 512, ReLU, on images in ``[0, 1]`` ``(C, H, W)``. For a MiniGrid observation with a
  pixel ``image`` (``environment.img_obs``) the image goes through the convolutions and the
  one-hot direction is concatenated to their flattened output, before the Linear 512 layer,
  so that the dense layer combines what the agent sees with where it faces.

Which one (:func:`resolve_encoder`): ``auto`` picks ``cnn`` for pixel images (``obs.py``'s
:func:`~rlstore.agents.obs.is_image_space`: uint8 ``(H, W, C)`` in 0..255, alone or as a
MiniGrid ``image``) at least :data:`MIN_IMAGE_SIZE` pixels high and wide, else ``mlp``.
NatureCNN's kernels need 36x36 (8x8 / 4 leaves 8, 4x4 / 2 leaves 3, 3x3 / 1 leaves 1); a
smaller image with ``cnn`` asked for is a :class:`~rlstore.errors.ConfigError` (no smaller
stack: a grid encoding such as MiniGrid's 7x7x3 is not an image, and is read by the MLP).

Example::

    >>> import gymnasium as gym, numpy as np, torch
    >>> space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    >>> enc = build_encoder(space, "auto")
    >>> enc(torch.zeros(2, 3, 64, 64)).shape, enc.out_dim
    (torch.Size([2, 512]), 512)
"""

from __future__ import annotations

from typing import cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlstore.agents.agent_base import layer_init
from rlstore.agents.config import Encoder
from rlstore.agents.obs import MINIGRID_SCALE, get_obs_shape, is_image_space, is_minigrid_space
from rlstore.errors import ConfigError

__all__ = ["MIN_IMAGE_SIZE", "NatureCNN", "ObsEncoder", "build_encoder", "resolve_encoder"]

MIN_IMAGE_SIZE = 36
"""Least height and width NatureCNN's kernels fit."""


def _image_of(space: gym.Space) -> gym.spaces.Box | None:
    """The pixel image of ``space`` (itself, or a MiniGrid dict's ``image``), else None."""
    if is_image_space(space):
        return cast(gym.spaces.Box, space)
    if is_minigrid_space(space) and is_image_space(space["image"]):  # type: ignore[index]
        return cast(gym.spaces.Box, space["image"])  # type: ignore[index]
    return None


def resolve_encoder(space: gym.Space, encoder: Encoder) -> str:
    """``"cnn"`` or ``"mlp"``: what ``encoder`` (a config's choice) means for ``space``.

    Raises:
        ConfigError: ``cnn`` for a space without a pixel image, or an image smaller than
            :data:`MIN_IMAGE_SIZE`.
    """
    if encoder not in ("auto", "mlp", "cnn"):
        raise ConfigError(f"encoder: expected 'auto', 'mlp' or 'cnn', got {encoder!r}")
    image = _image_of(space)
    fits = image is not None and min(image.shape[:2]) >= MIN_IMAGE_SIZE
    if encoder == "cnn" and not fits:
        got = "no pixel image" if image is None else f"a {image.shape[0]}x{image.shape[1]} image"
        raise ConfigError(
            f"encoder: 'cnn' expects pixel images (uint8 (H, W, C), values 0..255, alone or as "
            f"a MiniGrid 'image') of at least {MIN_IMAGE_SIZE}x{MIN_IMAGE_SIZE} (NatureCNN's "
            f"kernels), got {got} in {space!r}; use encoder 'mlp' or 'auto'"
        )
    return "cnn" if encoder != "mlp" and fits else "mlp"


class NatureCNN(nn.Module):
    """``images (B, C, H, W)`` in ``[0, 1]`` (and ``extra (B, E)``) -> ``(B, features)``.

    ``relu(Linear(cat(flatten(convs(images)), extra)))``; the convolutions are Conv 32 8x8 / 4,
    Conv 64 4x4 / 2, Conv 64 3x3 / 1, each followed by ReLU.
    """

    def __init__(
        self, channels: int, height: int, width: int, extra_dim: int = 0, features: int = 512
    ) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            layer_init(nn.Conv2d(channels, 32, 8, stride=4)), nn.ReLU(),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
        )  # fmt: skip
        with torch.no_grad():
            n_flat = int(self.convs(torch.zeros(1, channels, height, width)).shape[1])
        self.linear = layer_init(nn.Linear(n_flat + extra_dim, features))
        self.out_dim = features

    def forward(self, images: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        h = self.convs(images)
        if extra is not None:
            h = torch.cat([h, extra], dim=1)
        return torch.relu(self.linear(h))


class ObsEncoder(nn.Module):
    """Preprocessed observations ``(B, *get_obs_shape(space))`` (or flattened,
    ``(B, prod(obs_shape))``) -> features ``(B, out_dim)``; built by :func:`build_encoder`.
    ``kind`` is ``"mlp"`` (flatten; ``cnn`` is None) or ``"cnn"`` (``features`` wide)."""

    def __init__(self, space: gym.Space, kind: str, features: int = 512) -> None:
        super().__init__()
        self.kind = kind
        self.cnn: NatureCNN | None = None
        self.out_dim = int(np.prod(get_obs_shape(space)))
        image = _image_of(space)
        if kind == "cnn" and image is not None:
            h, w, c = (int(s) for s in image.shape)
            self.image_hwc = (h, w, c)
            self.minigrid = not is_image_space(space)
            extra = self.out_dim - h * w * c if self.minigrid else 0
            self.cnn = NatureCNN(c, h, w, extra, features)
            self.out_dim = self.cnn.out_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.cnn is None:
            return obs.reshape(obs.shape[0], -1)
        h, w, c = self.image_hwc
        if not self.minigrid:  # obs.py gives (B, C, H, W) in [0, 1]
            return self.cnn(obs.reshape(-1, c, h, w))  # type: ignore[no-any-return]
        # obs.py gives MiniGrid as (B, H*W*C / 10 + n_dir): the image flattened channels-last
        image = obs[:, : h * w * c].reshape(-1, h, w, c).permute(0, 3, 1, 2)
        return self.cnn(image * (MINIGRID_SCALE / 255.0), obs[:, h * w * c :])  # type: ignore[no-any-return]


def build_encoder(space: gym.Space, encoder: Encoder, features: int = 512) -> ObsEncoder:
    """The encoder a config's ``encoder`` choice gives for ``space`` (one env's observation
    space), see the module docstring; ``features``: the CNN's output width.

    Raises:
        ConfigError: as :func:`resolve_encoder`.
    """
    return ObsEncoder(space, resolve_encoder(space, encoder), features)
