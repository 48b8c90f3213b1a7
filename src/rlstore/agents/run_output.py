"""What a training run produces besides the agent, shared by every trainer: :class:`TrainStats`
(episodes, updates, evaluations, speed), the run folder (:func:`safe_name`,
:func:`create_run_dir`), :class:`RunLogger` (TensorBoard ``run_dir/tb``, offline W&B, the tqdm
bar) and the titled learning-curve PNG (:func:`plot_learning_curve`). The frame a run runs in,
:class:`~rlstore.agents.run.TrainingRun`, writes them; :mod:`rlstore.agents.run` re-exports
these names.

Optional packages (tensorboard, wandb, tqdm, matplotlib) are imported only when a run asks for
them."""

from __future__ import annotations

import io
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlstore.checkpoint import write_text_atomic
from rlstore.errors import ConfigError

__all__ = ["TrainStats", "safe_name", "create_run_dir", "RunLogger", "plot_learning_curve"]


@dataclass
class TrainStats:
    """What a training run produced (besides the agent).

    Attributes:
        global_step: env steps taken. num_updates: updates (or logging periods) done.
        episode_returns / episode_lengths / episode_end_steps: per finished episode, in order.
        updates: per update, the trainer's diagnostics plus ``global_step``, ``sps``.
        evaluations: ``(env step, mean return of the deterministic evaluation episodes)``.
        steps_per_second: env steps per wall-clock second over the run (rollouts + updates).
        wall_time: seconds of the training loop (this process only, when resumed).
        run_dir: the run folder, or None when nothing was written.
    """

    global_step: int = 0
    num_updates: int = 0
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)
    episode_end_steps: list[int] = field(default_factory=list)
    updates: list[dict[str, float]] = field(default_factory=list)
    evaluations: list[tuple[int, float]] = field(default_factory=list)
    steps_per_second: float = 0.0
    wall_time: float = 0.0
    run_dir: Path | None = None

    def mean_return(self, last: int = 20) -> float:
        """Mean return of the last ``last`` finished episodes (nan if none finished)."""
        r = self.episode_returns[-last:]
        return float(np.mean(r)) if r else float("nan")

    def first_step_reaching(self, threshold: float, window: int = 20) -> int | None:
        """First env step at which the mean of the last ``window`` episode returns is
        ``>= threshold`` (None if never); needs at least ``window`` finished episodes."""
        r = np.asarray(self.episode_returns, dtype=np.float64)
        if len(r) < window:
            return None
        means = np.convolve(r, np.ones(window) / window, mode="valid")
        hit = np.flatnonzero(means >= threshold)
        return None if hit.size == 0 else int(self.episode_end_steps[hit[0] + window - 1])


# ----------------------------------------------------------------- run folder


_UNSAFE = re.compile(r"[^\w.-]+")


def safe_name(text: str) -> str:
    """A folder name made of letters, digits, ``_``, ``.`` and ``-`` only: every other run of
    characters becomes ``_`` (``"mod:Env/v1"`` -> ``"mod_Env_v1"``); never empty, never
    ``.`` or ``..``.

    Example::

        >>> safe_name("my_pkg.envs:Maze/Small-v0")
        'my_pkg.envs_Maze_Small-v0'
    """
    name = _UNSAFE.sub("_", text).strip("_")
    return "_" if name in ("", ".", "..") else name


def create_run_dir(runs_dir: str | Path, name: str) -> Path:
    """Create and return ``runs_dir/name``, or ``name-1``, ``name-2``, ... when taken (a leading
    ``~`` of ``runs_dir`` is the home folder, as in a shell).

    Raises:
        ConfigError: ``name`` is not a :func:`safe_name` (it would leave ``runs_dir``), or the
            folder cannot be created (``runs_dir`` is a file, not writable, ...).
    """
    if not name or safe_name(name) != name:
        raise ConfigError(
            f"run.exp_name: expected a folder name of letters, digits, '_', '.', '-' "
            f"(e.g. {safe_name(name)!r}), got {name!r}"
        )
    base = Path(runs_dir).expanduser() / name  # "~/runs" from a config file: not a "~" folder
    run_dir, k = base, 1
    while True:
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            run_dir, k = base.with_name(f"{name}-{k}"), k + 1
        except OSError as err:
            raise ConfigError(
                f"run.runs_dir: expected a folder the run folder {str(run_dir)!r} can be created "
                f"in, got {str(runs_dir)!r} ({err.strerror})"
            ) from None


# ----------------------------------------------------------------- logging


class RunLogger:
    """TensorBoard (``run_dir/tb``) / offline W&B scalars and the tqdm bar of one run.

    Args:
        run_dir: the run folder; None: no TensorBoard or W&B files.
        total_steps: env steps of the whole run (the bar's total). initial_step: steps already
            done (a resumed run: TensorBoard discards the events logged after this step, which
            an interrupted run wrote after its last checkpoint).
        desc: the bar's label. track: write TensorBoard logs. progress_bar: show the bar.
        wandb, wandb_project, wandb_entity, exp_name, config: offline W&B logging (skipped with
            a warning when the package is missing).
    """

    def __init__(
        self,
        run_dir: str | Path | None,
        *,
        total_steps: int,
        initial_step: int = 0,
        desc: str = "",
        track: bool = True,
        progress_bar: bool = True,
        wandb: bool = False,
        wandb_project: str = "rlstore",
        wandb_entity: str | None = None,
        exp_name: str = "",
        config: dict[str, Any] | None = None,
    ) -> None:
        self.tb: Any = None
        self.wandb: Any = None
        self.bar: Any = None
        self.last_step = initial_step
        if run_dir is not None and track:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                warnings.warn(
                    "no TensorBoard logs: the tensorboard package is not installed "
                    "(pip install 'rlstore[train]')",
                    stacklevel=2,
                )
            else:
                # a resumed run re-logs the steps after its checkpoint: TensorBoard drops the
                # events an interrupted run wrote after initial_step instead of showing both
                purge = initial_step + 1 if initial_step > 0 else None
                self.tb = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=purge)
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError:
                warnings.warn(
                    "--wandb ignored: the wandb package is not installed "
                    "(pip install 'rlstore[wandb]'); logging to TensorBoard only.",
                    stacklevel=2,
                )
            else:
                self.wandb = wandb_module.init(
                    mode="offline", dir=str(run_dir or "."), project=wandb_project,
                    entity=wandb_entity, name=exp_name, config=config or {},
                )  # fmt: skip
        if progress_bar:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total_steps, initial=initial_step, unit="step", file=sys.stderr,
                dynamic_ncols=True, desc=desc,
            )  # fmt: skip

    def episode(self, ret: float, length: int, step: int) -> None:
        """Log one finished episode (``charts/episodic_return``, ``charts/episodic_length``)."""
        self.scalars({"charts/episodic_return": ret, "charts/episodic_length": length}, step)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """Log ``values`` under their names (e.g. ``losses/pg_loss``) at env step ``step``."""
        for name, value in values.items():
            if self.tb is not None:
                self.tb.add_scalar(name, value, step)
            if self.wandb is not None:
                self.wandb.log({name: value, "global_step": step})

    def progress(self, step: int, **postfix: Any) -> None:
        """Advance the bar to env step ``step`` and show ``postfix`` (e.g. ``sps=...``)."""
        if self.bar is not None:
            self.bar.update(step - self.last_step)
            self.bar.set_postfix(**postfix)
        self.last_step = step

    def close(self) -> None:
        """Flush and close the writers and the bar."""
        if self.bar is not None:
            self.bar.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def plot_learning_curve(stats: TrainStats, path: str | Path, title: str) -> None:
    """Episode returns against env steps, the mean of the last 20 episodes and the evaluation
    means (if any), titled ``title`` (e.g. ``"PPO (lstm) on CartPoleNoVel-v1, seed 1"``), as a
    PNG at ``path`` (replaced atomically). Skipped with a warning when matplotlib is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        warnings.warn(
            "no learning-curve plot: matplotlib is not installed (pip install 'rlstore[train]')",
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
    if stats.evaluations:
        ex, ey = zip(*stats.evaluations, strict=True)
        ax.plot(ex, ey, "o-", color="black", markersize=4, label="evaluation mean (deterministic)")
    if r.size or stats.evaluations:
        ax.legend(loc="lower right")
    ax.set_title(title)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png")
    write_text_atomic(path, png.getvalue())  # a crash mid-write leaves the previous plot whole
