"""An ensemble of probabilistic MLP dynamics models, fit on the model-based buffer's split.

Each of ``E`` members maps an input ``x = concat(obs, action)`` to a Gaussian over the target
``y = concat(next_obs - obs, reward)`` (PETS, Chua et al. 2018; MBPO, Janner et al. 2019):

    mean, raw = MLP_e(x_scaled)                        # (E, B, D_out) each
    logvar = max_lv - softplus(max_lv - raw)           # soft upper bound
    logvar = min_lv + softplus(logvar - min_lv)        # soft lower bound
    NLL = 0.5 * ((y_scaled - mean)^2 * exp(-logvar) + logvar + log(2 pi))

``min_lv`` / ``max_lv`` (``(D_out,)``, shared by the members, initialised to -10 and 0.5) are
learned, with the PETS penalty ``0.01 * (sum(max_lv) - sum(min_lv))`` keeping the bounds tight.
Inputs and targets are standardised with statistics of the training split only (the input
scaler of :func:`rlstore.buffers.model_based.model_dataset`, a target scaler fit here); the
statistics live in the module's buffers, so :meth:`DynamicsEnsemble.predict` takes raw inputs
and returns raw targets.

:func:`fit` trains every member on its own bootstrap rows (:func:`ensemble_minibatches`) and
stops when the validation NLL (all holdout rows, every member, mean) has not improved for
``patience`` epochs, restoring the weights of the best epoch.

Example:
    >>> import numpy as np
    >>> from rlstore.buffers.model_based import ModelBasedReplay, model_dataset
    >>> rng = np.random.default_rng(0)
    >>> obs, act = rng.normal(size=(400, 2)), rng.normal(size=(400, 1))
    >>> buf = ModelBasedReplay(1000, seed=0)
    >>> buf.insert_data_slice({"obs": obs, "action": act, "next_obs": 0.9 * obs + act,
    ...                        "reward": obs[:, 0]})
    >>> ds = model_dataset(buf.get_all(), buf.train_validation_split(0.2, ensemble_size=3))
    >>> model = DynamicsEnsemble(3, 3, ensemble_size=3, hidden=32, seed=0)
    >>> result = fit(model, ds, max_epochs=5, seed=0)
    >>> len(result.train_losses) == len(result.val_losses) == 5
    True
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlstore._checks import check_count, real_number
from rlstore.agents.run import adam
from rlstore.buffers.model_based import ModelDataset, StandardScaler, ensemble_minibatches
from rlstore.errors import ConfigError, EmptyBufferError, SpecError
from rlstore.samplers import make_rng

__all__ = ["DynamicsEnsemble", "FitResult", "HoldoutMSE", "gaussian_nll", "fit", "holdout_mse"]

LOG_2PI = math.log(2.0 * math.pi)


def gaussian_nll(mean: torch.Tensor, logvar: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-member Gaussian negative log-likelihood ``(E,)``: mean over rows and features of
    ``0.5 * ((target - mean)^2 * exp(-logvar) + logvar + log(2 pi))``; inputs ``(E, B, D)``."""
    nll = 0.5 * ((target - mean) ** 2 * torch.exp(-logvar) + logvar + LOG_2PI)
    return nll.mean(dim=(1, 2))


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers applied at once: ``(E, B, i) -> (E, B, o)``."""

    def __init__(self, members: int, d_in: int, d_out: int, gen: torch.Generator) -> None:
        super().__init__()
        w = torch.empty(members, d_in, d_out)
        std = 1.0 / (2.0 * math.sqrt(d_in))  # MBPO's truncated-normal initialisation
        nn.init.trunc_normal_(w, std=std, a=-2 * std, b=2 * std, generator=gen)
        self.weight = nn.Parameter(w)
        self.bias = nn.Parameter(torch.zeros(members, 1, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class DynamicsEnsemble(nn.Module):
    """``ensemble_size`` probabilistic MLPs (``layers`` hidden layers of ``hidden`` SiLU units).

    Args:
        in_dim: input features ``D_in`` (obs + action, one-hot for discrete actions).
        out_dim: target features ``D_out`` (obs delta + reward).
        ensemble_size: members ``E``.
        hidden, layers: width and number of hidden layers of each member.
        seed: seed of the weight initialisation (a private ``torch.Generator``).
    """

    input_mean: torch.Tensor  # scaler statistics (buffers, saved in the state dict)
    input_std: torch.Tensor
    target_mean: torch.Tensor
    target_std: torch.Tensor

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        *,
        ensemble_size: int = 5,
        hidden: int = 200,
        layers: int = 4,
        seed: int = 0,
    ) -> None:
        super().__init__()
        named = {"in_dim": in_dim, "out_dim": out_dim, "ensemble_size": ensemble_size}
        named |= {"hidden": hidden, "layers": layers}
        dims = {k: check_count(k, v, error=ConfigError) for k, v in named.items()}
        self.in_dim, self.out_dim, self.ensemble_size = (dims[k] for k in list(named)[:3])
        gen = torch.Generator().manual_seed(check_count("seed", seed, minimum=0, error=ConfigError))
        sizes = [self.in_dim] + [dims["hidden"]] * dims["layers"]
        self.hidden = nn.ModuleList(
            EnsembleLinear(self.ensemble_size, a, b, gen)
            for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        )
        self.head = EnsembleLinear(self.ensemble_size, sizes[-1], 2 * self.out_dim, gen)
        self.max_logvar = nn.Parameter(torch.full((self.out_dim,), 0.5))
        self.min_logvar = nn.Parameter(torch.full((self.out_dim,), -10.0))
        for name, dim in [("input", self.in_dim), ("target", self.out_dim)]:
            self.register_buffer(f"{name}_mean", torch.zeros(dim))
            self.register_buffer(f"{name}_std", torch.ones(dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Scaled ``(E, B, D_in)`` inputs -> scaled ``mean`` and bounded ``logvar``, ``(E, B,
        D_out)`` each."""
        for layer in self.hidden:
            x = F.silu(layer(x))
        mean, raw = self.head(x).split(self.out_dim, dim=-1)
        logvar = self.max_logvar - F.softplus(self.max_logvar - raw)
        return mean, self.min_logvar + F.softplus(logvar - self.min_logvar)

    def set_scalers(self, inputs: StandardScaler, targets: StandardScaler) -> None:
        """Store the training split's input and target statistics (float32)."""
        for name, s in [("input", inputs), ("target", targets)]:
            getattr(self, f"{name}_mean").copy_(torch.as_tensor(s.mean, dtype=torch.float32))
            getattr(self, f"{name}_std").copy_(torch.as_tensor(s.std, dtype=torch.float32))

    @torch.no_grad()
    def predict(self, inputs: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw ``(B, D_in)`` inputs -> each member's raw target ``mean`` and ``variance``
        ``(E, B, D_out)`` (scalers are the identity until :func:`fit` sets them)."""
        x = torch.as_tensor(inputs, dtype=torch.float32)
        if x.ndim != 2 or x.shape[1] != self.in_dim or not torch.isfinite(x).all():
            raise SpecError(
                f"inputs: expected finite values of shape (B, {self.in_dim}), got {tuple(x.shape)}"
            )
        x = ((x - self.input_mean) / self.input_std).expand(self.ensemble_size, -1, -1)
        mean, logvar = self(x)
        std = self.target_std
        return mean * std + self.target_mean, torch.exp(logvar) * std**2


class FitResult(NamedTuple):
    """Per-epoch mean NLL (scaled targets, mean over members) on the train batches and on the
    holdout rows; ``best_epoch`` (0-based) is the epoch whose weights were kept."""

    train_losses: list[float]
    val_losses: list[float]
    best_epoch: int
    stopped_early: bool


def validation_loss(model: DynamicsEnsemble, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean over members of the NLL on scaled holdout rows ``x (N, D_in)``, ``y (N, D_out)``."""
    with torch.no_grad():
        mean, logvar = model(x.expand(model.ensemble_size, -1, -1))
        return float(gaussian_nll(mean, logvar, y.expand_as(mean)).mean())


def _check_dataset(model: DynamicsEnsemble, ds: ModelDataset) -> None:
    want = {
        "ds.train_inputs": (ds.train_inputs, model.in_dim),
        "ds.holdout_inputs": (ds.holdout_inputs, model.in_dim),
        "ds.train_targets": (ds.train_targets, model.out_dim),
        "ds.holdout_targets": (ds.holdout_targets, model.out_dim),
    }
    for name, (a, d) in want.items():
        if (
            not isinstance(a, np.ndarray)
            or a.dtype.kind != "f"
            or a.ndim != 2
            or a.shape[1] != d
            or not np.isfinite(a).all()
        ):
            raise SpecError(f"{name}: expected finite rows of shape (N, {d}), got {np.shape(a)}")
    if ds.holdout_inputs.shape[0] < 1:
        raise EmptyBufferError("ds.holdout_inputs: expected >= 1 validation row, got 0")
    n_train, boot = ds.train_inputs.shape[0], np.asarray(ds.bootstrap)
    if boot.ndim != 2 or boot.shape[0] != model.ensemble_size or not boot.size:
        raise SpecError(
            f"ds.bootstrap: expected shape ({model.ensemble_size}, N) (train rows per member), "
            f"got {boot.shape}"
        )
    if boot.dtype.kind not in "iu" or boot.min() < 0 or boot.max() >= n_train:
        raise SpecError(f"ds.bootstrap: expected ints in [0, {n_train}), got {boot.dtype} values")
    mean, std = ds.scaler.mean, ds.scaler.std
    if mean is None or std is None or {np.shape(mean), np.shape(std)} != {(model.in_dim,)}:
        raise SpecError(f"ds.scaler: expected statistics of shape ({model.in_dim},), got {mean}")


def fit(
    model: DynamicsEnsemble,
    ds: ModelDataset,
    *,
    max_epochs: int = 200,
    patience: int = 10,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
) -> FitResult:
    """Train ``model`` on ``ds``'s training split, early-stopping on its holdout split.

    Sets the model's scalers (inputs: ``ds.scaler``; targets: fit on ``ds.train_targets``), then
    runs Adam on ``sum_e NLL_e + 0.01 * (sum(max_logvar) - sum(min_logvar))`` over per-member
    bootstrap minibatches. After each epoch the validation NLL is computed; training stops after
    ``patience`` epochs without a strictly lower one (or at ``max_epochs``) and the weights of
    the best epoch are restored.

    Raises:
        ConfigError: bad ``max_epochs``, ``patience``, ``batch_size``, ``lr`` or ``seed``.
        SpecError / EmptyBufferError: ``ds`` does not fit the model or has no holdout rows.
        Nothing is changed when a check fails.
    """
    max_epochs = check_count("max_epochs", max_epochs, error=ConfigError)
    patience = check_count("patience", patience, error=ConfigError)
    batch_size = check_count("batch_size", batch_size, error=ConfigError)
    if not 0.0 < real_number("lr", lr, 0.0, math.inf) < math.inf:
        raise ConfigError(f"lr: expected a finite number > 0, got {lr!r}")
    seed = check_count("seed", seed, minimum=0, error=ConfigError)
    _check_dataset(model, ds)

    targets = StandardScaler().fit(ds.train_targets)
    model.set_scalers(ds.scaler, targets)
    val_x = torch.as_tensor(ds.holdout_inputs, dtype=torch.float32)
    val_y = torch.as_tensor(targets.transform(ds.holdout_targets), dtype=torch.float32)
    scaled = ds._replace(train_targets=targets.transform(ds.train_targets))
    optim = adam(model.parameters(), lr)
    rng = make_rng(seed)
    train_losses: list[float] = []
    val_losses: list[float] = []
    best, best_epoch, best_state = math.inf, 0, copy.deepcopy(model.state_dict())
    for epoch in range(max_epochs):
        total, batches = 0.0, 0
        for mb in ensemble_minibatches(scaled, batch_size, 1, seed=rng):
            mean, logvar = model(torch.as_tensor(mb.inputs, dtype=torch.float32))
            nll = gaussian_nll(mean, logvar, torch.as_tensor(mb.targets, dtype=torch.float32))
            bound = 0.01 * (model.max_logvar.sum() - model.min_logvar.sum())
            optim.zero_grad()
            (nll.sum() + bound).backward()
            optim.step()
            total, batches = total + float(nll.detach().mean()), batches + 1
        train_losses.append(total / batches)
        val_losses.append(validation_loss(model, val_x, val_y))
        if val_losses[-1] < best:
            best, best_epoch = val_losses[-1], epoch
            best_state = copy.deepcopy(model.state_dict())
        elif epoch - best_epoch >= patience:
            break
    model.load_state_dict(best_state)
    return FitResult(train_losses, val_losses, best_epoch, len(val_losses) < max_epochs)


class HoldoutMSE(NamedTuple):
    """Per-target-feature ``(D_out,)`` mean squared errors on the holdout rows (raw units) of
    the ensemble's mean prediction, of predicting zero ("no change": the state delta is 0), and
    of predicting the training split's target mean."""

    model: np.ndarray
    no_change: np.ndarray
    train_mean: np.ndarray


def holdout_mse(model: DynamicsEnsemble, ds: ModelDataset) -> HoldoutMSE:
    """Validation MSE of ``model`` (after :func:`fit`) and two baselines, per target feature."""
    _check_dataset(model, ds)
    x = torch.as_tensor(ds.holdout_inputs, dtype=torch.float32)
    with torch.no_grad():
        mean, _ = model(x.expand(model.ensemble_size, -1, -1))
        pred = (mean.mean(dim=0) * model.target_std + model.target_mean).double().numpy()
    y = ds.holdout_targets.astype(np.float64)
    train_mean = ds.train_targets.astype(np.float64).mean(axis=0)
    return HoldoutMSE(
        ((pred - y) ** 2).mean(axis=0), (y**2).mean(axis=0), ((y - train_mean) ** 2).mean(axis=0)
    )
