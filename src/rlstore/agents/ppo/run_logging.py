"""Logging of a PPO run: TensorBoard / W&B scalars, the tqdm bar and the learning-curve plot.

The optional packages (tensorboard, wandb, tqdm, matplotlib) are imported only when a run asks
for them, so importing the trainer stays light.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlstore.agents.ppo.config import TrainConfig
from rlstore.agents.ppo.rollout import RolloutState

if TYPE_CHECKING:
    from rlstore.agents.ppo.trainer import TrainStats

__all__ = ["RunLogger"]


class RunLogger:
    """TensorBoard / W&B scalars, the tqdm bar and the learning-curve plot of one run."""

    def __init__(
        self, cfg: TrainConfig, run_dir: str | Path | None, total_steps: int, state: RolloutState
    ) -> None:
        self.tb: Any = None
        self.wandb: Any = None
        self.bar: Any = None
        self.n_episodes = len(state.episode_returns)  # already logged (resumed runs)
        self.last_step = state.global_step
        if run_dir is not None and cfg.run.track:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                warnings.warn(
                    "no TensorBoard logs: the tensorboard package is not installed "
                    "(pip install 'rlstore[train]')",
                    stacklevel=2,
                )
            else:
                self.tb = SummaryWriter(str(Path(run_dir) / "tb"))
        if cfg.run.wandb:
            try:
                import wandb
            except ImportError:
                warnings.warn(
                    "--wandb ignored: the wandb package is not installed "
                    "(pip install 'rlstore[wandb]'); logging to TensorBoard only.",
                    stacklevel=2,
                )
            else:
                self.wandb = wandb.init(
                    mode="offline", dir=str(run_dir or "."), project=cfg.run.wandb_project_name,
                    entity=cfg.run.wandb_entity, name=cfg.run.exp_name, config=cfg.to_dict(),
                )  # fmt: skip
        if cfg.run.progress_bar:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total_steps, initial=state.global_step, unit="step", file=sys.stderr,
                dynamic_ncols=True, desc=cfg.environment.env_id,
            )  # fmt: skip

    def _scalar(self, name: str, value: float, step: int) -> None:
        if self.tb is not None:
            self.tb.add_scalar(name, value, step)
        if self.wandb is not None:
            self.wandb.log({name: value, "global_step": step})

    def log_update(self, update: int, state: RolloutState, info: dict[str, float]) -> None:
        """Log the episodes finished since the last call and the update's diagnostics."""
        for i in range(self.n_episodes, len(state.episode_returns)):
            step = state.episode_end_steps[i]
            self._scalar("charts/episodic_return", state.episode_returns[i], step)
            self._scalar("charts/episodic_length", state.episode_lengths[i], step)
        self.n_episodes = len(state.episode_returns)
        step = state.global_step
        for key in ("loss", "pg_loss", "v_loss", "entropy", "approx_kl", "old_approx_kl",
                    "clipfrac", "explained_variance"):  # fmt: skip
            if key in info:
                self._scalar(f"losses/{key}", info[key], step)
        self._scalar("charts/learning_rate", info["lr"], step)
        self._scalar("charts/SPS", info["sps"], step)
        if self.bar is not None:
            recent = state.episode_returns[-20:]
            self.bar.update(step - self.last_step)
            self.bar.set_postfix(
                sps=f"{info['sps']:.0f}",
                ret=f"{np.mean(recent):.1f}" if recent else "-",
                upd=update,
            )
        self.last_step = step

    def close(self, state: RolloutState) -> None:
        """Flush and close the writers and the bar."""
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()

    @staticmethod
    def plot_learning_curve(stats: TrainStats, path: Path) -> None:
        """Episode returns against env steps, with the mean of the last 20 episodes (PNG)."""
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            warnings.warn(
                "no learning-curve plot: matplotlib is not installed "
                "(pip install 'rlstore[train]')",
                stacklevel=2,
            )
            return

        fig = Figure(figsize=(7, 4), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        x = np.asarray(stats.episode_end_steps)
        r = np.asarray(stats.episode_returns, dtype=np.float64)
        if r.size:
            ax.plot(x, r, ".", alpha=0.3, markersize=3, label="episode return")
            w = min(20, r.size)
            ax.plot(x[w - 1 :], np.convolve(r, np.ones(w) / w, "valid"), label=f"mean of last {w}")
            ax.legend(loc="lower right")
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episodic return")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(str(path))
