"""Probabilistic dynamics ensemble (rlstore.agents.dynamics) and the examples/mb_fit.py script."""

from __future__ import annotations

import doctest
import importlib.util
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlstore.agents import dynamics
from rlstore.agents.dynamics import DynamicsEnsemble, fit, gaussian_nll, holdout_mse
from rlstore.buffers.model_based import (
    ModelBasedReplay,
    ModelDataset,
    StandardScaler,
    model_dataset,
)
from rlstore.errors import ConfigError, EmptyBufferError, RLStoreError, SpecError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mb_fit.py"


def _linear_buffer(n: int = 600, seed: int = 0) -> ModelBasedReplay:
    """x' = A x + B u, r = x0 - 0.5 u; x ~ N(0, 1), u ~ U(-1, 1): no noise."""
    rng = np.random.default_rng(seed)
    a = np.array([[0.9, 0.2], [-0.2, 0.9]])
    b = np.array([[0.0], [0.5]])
    x, u = rng.normal(size=(n, 2)), rng.uniform(-1, 1, size=(n, 1))
    buf = ModelBasedReplay(n, seed=seed)
    buf.insert_data_slice(
        {"obs": x, "action": u, "next_obs": x @ a.T + u @ b.T, "reward": x[:, 0] - 0.5 * u[:, 0]}
    )
    return buf


def _dataset(buf: ModelBasedReplay, members: int = 3) -> ModelDataset:
    return model_dataset(buf.get_all(), buf.train_validation_split(0.2, ensemble_size=members))


def _model(members: int = 3, seed: int = 0) -> DynamicsEnsemble:
    return DynamicsEnsemble(3, 3, ensemble_size=members, hidden=32, layers=2, seed=seed)


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_gaussian_nll_hand_values() -> None:
    # member 0: (y - mu)^2 = 1, logvar 0      -> 0.5 * (1 + 0 + log 2pi)         = 0.5 + c
    #           (y - mu)^2 = 0, logvar log 4  -> 0.5 * (0 + log 4 + log 2pi)     = log 2 + c
    # member 1: (y - mu)^2 = 4, logvar log 4  -> 0.5 * (4 / 4 + log 4 + log 2pi) = 0.5 + log 2 + c
    #           (y - mu)^2 = 9, logvar 0      -> 0.5 * (9 + 0 + log 2pi)         = 4.5 + c
    # with c = 0.5 * log(2 pi); each member averages its two features
    c = 0.5 * math.log(2 * math.pi)
    mean = torch.tensor([[[0.0, 1.0]], [[3.0, -2.0]]])
    logvar = torch.tensor([[[0.0, math.log(4.0)]], [[math.log(4.0), 0.0]]])
    target = torch.tensor([[[1.0, 1.0]], [[1.0, 1.0]]])
    expected = [(0.5 + math.log(2)) / 2 + c, (0.5 + math.log(2) + 4.5) / 2 + c]
    np.testing.assert_allclose(gaussian_nll(mean, logvar, target).numpy(), expected, rtol=1e-6)


def test_log_variance_stays_within_the_learned_bounds() -> None:
    model = _model()
    x = torch.cat([torch.full((3, 4, 3), 1e4), torch.full((3, 4, 3), -1e4)], dim=1)
    mean, logvar = model(x)
    assert mean.shape == logvar.shape == (3, 8, 3)
    # the bounds are soft: the lower softplus can lift max_logvar by log(1 + exp(min - max))
    slack = math.log1p(math.exp(-10.5))  # 2.8e-5 at the initial bounds 0.5 and -10
    assert bool((logvar <= model.max_logvar + 1.01 * slack).all())
    assert bool((logvar >= model.min_logvar).all())
    assert torch.isfinite(logvar).all() and (logvar.max() - logvar.min()) > 1  # not constant


def test_early_stopping_restores_the_best_validation_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = [3.0, 2.0, 1.0, 1.5, 1.0, 2.5, 0.5, 9.0]  # best at epoch 2 (ties do not count)
    seen: list[dict[str, torch.Tensor]] = []

    def scripted(model: DynamicsEnsemble, x: torch.Tensor, y: torch.Tensor) -> float:
        seen.append(_params(model))
        return script[len(seen) - 1]

    monkeypatch.setattr(dynamics, "validation_loss", scripted)
    model = _model()
    result = fit(model, _dataset(_linear_buffer()), max_epochs=50, patience=3, batch_size=64)
    # epochs 3, 4, 5 do not improve on epoch 2: stop after epoch 5, before the 0.5 at epoch 6
    assert result.val_losses == script[:6] and len(result.train_losses) == 6
    assert result.best_epoch == 2 and result.stopped_early
    assert _same(_params(model), seen[2]) and not _same(seen[2], seen[5])


def test_fit_on_a_linear_system_beats_the_no_change_baseline() -> None:
    buf = _linear_buffer()
    ds = _dataset(buf)
    model = _model()
    result = fit(model, ds, max_epochs=100, patience=20, batch_size=64, lr=3e-3, seed=1)
    assert min(result.val_losses) < result.val_losses[0] - 1.0  # validation NLL decreased
    assert result.val_losses[result.best_epoch] == min(result.val_losses)
    mse = holdout_mse(model, ds)
    assert (mse.model[:2] < 0.02 * mse.no_change[:2]).all(), mse  # next-state delta
    assert mse.model[2] < 0.02 * mse.train_mean[2], mse  # reward
    # predict() takes raw inputs and returns raw targets: the same error as holdout_mse's
    mean, var = model.predict(ds.scaler.inverse_transform(ds.holdout_inputs))
    assert mean.shape == var.shape == (3, len(ds.holdout_inputs), 3) and (var > 0).all()
    err = ((mean.mean(0).double().numpy() - ds.holdout_targets) ** 2).mean(0)
    np.testing.assert_allclose(err, mse.model, rtol=1e-3, atol=1e-8)


def test_scalers_use_the_training_split_only_and_no_holdout_row_is_trained_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buf = _linear_buffer(200)
    data = buf.get_all()
    split = buf.train_validation_split(0.25, ensemble_size=2, seed=3)
    ds = model_dataset(data, split)
    batches: list[np.ndarray] = []
    real = dynamics.ensemble_minibatches

    def spy(*args: Any, **kwargs: Any) -> Any:
        for mb in real(*args, **kwargs):
            batches.append(mb.inputs.reshape(-1, mb.inputs.shape[-1]))
            yield mb

    monkeypatch.setattr(dynamics, "ensemble_minibatches", spy)
    model = _model(members=2)
    fit(model, ds, max_epochs=2, batch_size=32)
    inputs = np.concatenate([data["obs"], data["action"]], axis=1)[split.train]
    targets = np.concatenate([data["next_obs"] - data["obs"], data["reward"][:, None]], axis=1)[
        split.train
    ]
    for got, want in [
        (model.input_mean, inputs.mean(0)),
        (model.input_std, inputs.std(0)),
        (model.target_mean, targets.mean(0)),
        (model.target_std, targets.std(0)),
    ]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    seen = {tuple(r) for r in np.concatenate(batches).round(5)}
    assert seen <= {tuple(r) for r in ds.train_inputs.round(5)}
    assert seen.isdisjoint({tuple(r) for r in ds.holdout_inputs.round(5)})


def test_fit_is_reproducible_for_a_seed() -> None:
    ds = _dataset(_linear_buffer(200))
    runs = [fit(_model(seed=4), ds, max_epochs=3, batch_size=32, seed=5) for _ in range(2)]
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"max_epochs": 0}, "max_epochs"),
        ({"patience": 1.5}, "patience"),
        ({"batch_size": True}, "batch_size"),
        ({"lr": 0.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"lr": "0.1"}, "lr"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_fit_arguments_are_refused_and_change_nothing(
    kwargs: dict[str, Any], named: str
) -> None:
    model, ds = _model(), _dataset(_linear_buffer(100))
    before = _params(model)
    with pytest.raises(ConfigError, match=named):
        fit(model, ds, **kwargs)
    assert _same(_params(model), before)


def test_datasets_that_do_not_fit_the_model_are_refused_and_change_nothing() -> None:
    ds = _dataset(_linear_buffer(100))
    model = _model()
    before = _params(model)
    bad = {
        "ds.train_inputs": ds._replace(train_inputs=ds.train_inputs[:, :2]),
        "ds.holdout_targets": ds._replace(holdout_targets=ds.holdout_targets * np.nan),
        "ds.train_targets": ds._replace(train_targets=ds.train_targets.astype(np.int64)),
        "ds.bootstrap": ds._replace(bootstrap=ds.bootstrap[:2]),
        "ds.bootstrap: expected ints": ds._replace(bootstrap=ds.bootstrap + len(ds.train_inputs)),
        "ds.scaler": ds._replace(scaler=StandardScaler()),
    }
    for named, wrong in bad.items():
        with pytest.raises(SpecError, match=named):
            fit(model, wrong)
    no_holdout = ds._replace(
        holdout_inputs=ds.holdout_inputs[:0], holdout_targets=ds.holdout_targets[:0]
    )
    with pytest.raises(EmptyBufferError, match="holdout"):
        fit(model, no_holdout)
    for inputs in [np.zeros((4, 2)), np.full((4, 3), np.nan)]:
        with pytest.raises(SpecError, match="inputs"):
            model.predict(inputs)
    assert _same(_params(model), before)
    for arg in [{"ensemble_size": 0}, {"hidden": 2.0}, {"seed": None}]:
        with pytest.raises(RLStoreError, match=next(iter(arg))):
            DynamicsEnsemble(3, 3, **arg)  # type: ignore[arg-type]


def test_module_docstring_example_runs() -> None:
    result = doctest.testmod(dynamics)
    assert result.attempted > 0 and result.failed == 0


def test_example_script_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = importlib.util.spec_from_file_location("mb_fit_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--steps", "300", "--ensemble", "2", "--seed", "1", "--out", str(tmp_path / "o")]
    result = module.main([*argv, "--hidden", "16", "--max-epochs", "4"])
    assert len(result.val_losses) == 4 and min(result.val_losses) < result.val_losses[0]
    printed = capsys.readouterr().out
    assert "240 train / 60 validation" in printed and "no-change baseline" in printed
    assert f"kept epoch {result.best_epoch} (val NLL {min(result.val_losses):.4f})" in printed
    png = tmp_path / "o" / "loss_curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
