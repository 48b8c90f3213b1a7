"""The minibatch generators of :class:`~rlstore.buffers.rollout.RolloutBuffer` (the
:class:`RolloutMinibatches` mixin): the stored steps with their computed advantages,
normalized over the whole rollout or per minibatch as the buffer is configured, cut by
:mod:`rlstore.minibatches` (flat, recurrent sequences, trajectory windows) with the buffer's
own checkpointed RNG.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from rlstore.buffers.rollout_checks import AdvNorm
from rlstore.errors import EmptyBufferError
from rlstore.minibatches import (
    Minibatch,
    RolloutBatch,
    TrajectoryMinibatch,
    flat_minibatches,
    recurrent_minibatches,
    trajectory_minibatches,
)
from rlstore.returns import normalize_advantages

__all__ = ["RolloutMinibatches"]


class RolloutMinibatches:
    """Mixin: minibatches of a ``RolloutBuffer`` (attributes and methods set by the buffer)."""

    advantage_normalization: AdvNorm
    _rng: np.random.Generator

    def _view(self, p: int) -> RolloutBatch:
        raise NotImplementedError  # provided by RolloutBuffer

    def _require_steps(self, what: str) -> int:
        raise NotImplementedError  # provided by RolloutBuffer

    def _training_batch(self, what: str) -> tuple[RolloutBatch, bool]:
        """The batch minibatches are cut from, and whether to normalize per minibatch."""
        batch = self._view(self._require_steps(what))
        if batch.advantages is None:
            raise EmptyBufferError(
                f"{what}: advantages not computed; call compute_returns(last_value) or "
                "compute_vtrace(...) first"
            )
        if self.advantage_normalization == "batch" and batch.advantages.numel() > 1:
            batch = replace(batch, advantages=normalize_advantages(batch.advantages))
        return batch, self.advantage_normalization == "minibatch"

    def minibatches(
        self,
        *,
        num_minibatches: int | None = None,
        mini_batch_size: int | None = None,
        num_epochs: int = 1,
        shuffle: bool = True,
    ) -> Iterator[Minibatch]:
        """Flat shuffled minibatches ``(B, ...)``; every stored step once per epoch.

        Give ``num_minibatches`` or ``mini_batch_size`` (both only if they agree; neither: one
        minibatch of the whole rollout); the size must divide ``pos * num_envs``
        (:class:`ConfigError` otherwise). See :func:`rlstore.minibatches.flat_minibatches`.
        """
        batch, norm = self._training_batch("minibatches")
        return flat_minibatches(
            batch,
            num_minibatches=num_minibatches,
            mini_batch_size=mini_batch_size,
            num_epochs=num_epochs,
            shuffle=shuffle,
            normalize=norm,
            rng=self._rng,
        )

    def recurrent_minibatches(
        self,
        *,
        num_minibatches: int,
        num_epochs: int = 1,
        seq_len: int | None = None,
        shuffle: bool = True,
    ) -> Iterator[Minibatch]:
        """Time-major ``(L, B, ...)`` sequence minibatches with initial hidden state and mask.

        ``seq_len=None``: whole env columns (``num_minibatches`` must divide ``num_envs``);
        otherwise chunks of at most ``seq_len`` steps that never cross an env column or an
        episode boundary. See :func:`rlstore.minibatches.recurrent_minibatches`.
        """
        batch, norm = self._training_batch("recurrent_minibatches")
        n_mb, rng = num_minibatches, self._rng
        return recurrent_minibatches(
            batch,
            num_minibatches=n_mb,
            num_epochs=num_epochs,
            seq_len=seq_len,
            shuffle=shuffle,
            normalize=norm,
            rng=rng,
        )

    def trajectory_minibatches(
        self,
        *,
        timesteps: int,
        mini_batch_size: int,
        num_epochs: int = 1,
        prob_go_from_end: float = 0.0,
    ) -> Iterator[TrajectoryMinibatch]:
        """Left-padded windows of up to ``timesteps`` past steps of the same episode.

        The semantics of DecisionTransformerInterpretability's
        ``Memory.get_trajectory_minibatches``; with ``prob_go_from_end = 0`` every step is a target
        once per epoch. See :func:`rlstore.minibatches.trajectory_minibatches`.
        """
        batch, norm = self._training_batch("trajectory_minibatches")
        sizes = {
            "timesteps": timesteps,
            "mini_batch_size": mini_batch_size,
            "num_epochs": num_epochs,
        }
        p_end = prob_go_from_end
        return trajectory_minibatches(
            batch, **sizes, prob_go_from_end=p_end, normalize=norm, rng=self._rng
        )
