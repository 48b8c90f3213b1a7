"""Fit a probabilistic dynamics ensemble to random-policy Pendulum-v1 data.

    python examples/mb_fit.py --steps 5000 --ensemble 5 --seed 0 --out mb_out

Collects ``--steps`` transitions with uniformly random actions into a
:class:`~rlstore.buffers.model_based.ModelBasedReplay`, splits them into training and validation
rows (MBPO split: 20 % holdout, one bootstrap per member), fits a
:class:`~rlstore.agents.dynamics.DynamicsEnsemble` with early stopping on the validation NLL,
prints the per-epoch losses and the validation MSE against baselines, and writes
``loss_curves.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from rlstore.agents.dynamics import DynamicsEnsemble, FitResult, fit, holdout_mse
from rlstore.buffers.model_based import ModelBasedReplay, model_dataset


def collect(steps: int, seed: int) -> ModelBasedReplay:
    """``steps`` random-policy Pendulum-v1 transitions; at a time limit ``next_obs`` is the real
    final observation (never the reset one)."""
    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    rows: dict[str, list[np.ndarray]] = {"obs": [], "action": [], "next_obs": [], "reward": []}
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(rows, (obs, action, next_obs, reward), strict=True):
            rows[key].append(np.asarray(value, dtype=np.float32))
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    buf = ModelBasedReplay(steps, seed=seed)
    buf.insert_data_slice({key: np.stack(values) for key, values in rows.items()})
    return buf


def plot(result: FitResult, path: Path) -> None:
    """Train and validation NLL against epochs, the kept epoch marked (PNG, Agg backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(result.train_losses, label="train NLL (bootstrap batches)")
    ax.plot(result.val_losses, label="validation NLL (holdout)")
    ax.axvline(result.best_epoch, color="grey", linestyle=":", label="kept weights")
    ax.set_xlabel("epoch")
    ax.set_ylabel("Gaussian NLL per feature (scaled targets)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(str(path))


def main(argv: Sequence[str] | None = None) -> FitResult:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5000, help="transitions to collect")
    p.add_argument("--ensemble", type=int, default=5, help="ensemble members")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("mb_out"), help="folder for the PNG")
    p.add_argument("--hidden", type=int, default=64, help="hidden units per layer")
    p.add_argument("--max-epochs", type=int, default=100)
    p.add_argument("--patience", type=int, default=10)
    args = p.parse_args(argv)

    buf = collect(args.steps, args.seed)
    split = buf.train_validation_split(0.2, 5000, ensemble_size=args.ensemble)
    ds = model_dataset(buf.get_all(), split)  # input scaler fit on the training rows only
    print(
        f"Pendulum-v1, random policy: {len(buf)} transitions, "
        f"{split.train.size} train / {split.holdout.size} validation"
    )
    model = DynamicsEnsemble(
        ds.train_inputs.shape[1],
        ds.train_targets.shape[1],
        ensemble_size=args.ensemble,
        hidden=args.hidden,
        layers=3,
        seed=args.seed,
    )
    result = fit(model, ds, max_epochs=args.max_epochs, patience=args.patience, seed=args.seed)
    print("epoch  train NLL  val NLL   (Gaussian NLL per feature, scaled targets)")
    last = len(result.val_losses) - 1
    for epoch, (tr, va) in enumerate(zip(result.train_losses, result.val_losses, strict=True)):
        if epoch % 5 == 0 or epoch in (result.best_epoch, last):
            print(
                f"{epoch:5d}  {tr:9.4f}  {va:7.4f}" + ("  <- kept" * (epoch == result.best_epoch))
            )
    how = "early stop" if result.stopped_early else "max epochs"
    print(f"{how}: kept epoch {result.best_epoch} (val NLL {min(result.val_losses):.4f})")

    mse = holdout_mse(model, ds)
    n_obs = ds.train_targets.shape[1] - 1  # targets: obs delta (3) + reward (1)
    state, state_base = mse.model[:n_obs].mean(), mse.no_change[:n_obs].mean()
    print(f"validation MSE next state: {state:.3g} (no-change baseline {state_base:.3g}, "
          f"ratio {state / state_base:.2g})")  # fmt: skip
    print(f"validation MSE reward:     {mse.model[-1]:.3g} (train-mean baseline "
          f"{mse.train_mean[-1]:.3g}, ratio {mse.model[-1] / mse.train_mean[-1]:.2g})")  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    plot(result, args.out / "loss_curves.png")
    print(f"loss curves: {args.out / 'loss_curves.png'}")
    return result


if __name__ == "__main__":
    torch.set_num_threads(1)  # small networks: one thread is fastest and shares the machine
    main(sys.argv[1:])
