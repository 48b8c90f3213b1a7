"""What every rlstore trainer shares: the run folder, seeding, logging, curves, evaluation and
the algorithm-agnostic pieces of checkpoints. A trainer (``rlstore.agents.ppo``; SAC and DQN
the same way) imports from here:

* :class:`TrainStats`, what a run produced besides the agent;
* :func:`set_global_seeds`, the global RNG states and the optimizer state saved in checkpoints
  (:func:`global_rng_state`, :func:`check_global_rng_state`, :func:`set_global_rng_state`,
  :func:`optimizer_state`, :func:`check_optimizer_state`);
* the run folder and its checkpoint folders: :func:`safe_name`, :func:`create_run_dir`,
  :func:`checkpoint_path`, :func:`list_checkpoints`, :func:`latest_checkpoint`,
  :func:`checkpoint_schedule`;
* :class:`RunLogger` (TensorBoard ``run_dir/tb``, offline W&B, the tqdm bar),
  :func:`plot_learning_curve` and :func:`evaluate` (deterministic episodes, optional video).

Optional packages (tensorboard, wandb, tqdm, matplotlib, moviepy) are imported only when a run
asks for them. Nothing here imports an algorithm module."""

from __future__ import annotations

import math
import random
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlstore.checkpoint import metadata_file_path
from rlstore.errors import CheckpointError, ConfigError

__all__ = [
    "TrainStats",
    "set_global_seeds",
    "global_rng_state",
    "check_global_rng_state",
    "set_global_rng_state",
    "optimizer_state",
    "check_optimizer_state",
    "check_module_state",
    "check_updates_log",
    "RAW_OBS",
    "safe_name",
    "create_run_dir",
    "checkpoint_path",
    "list_checkpoints",
    "latest_checkpoint",
    "checkpoint_schedule",
    "check_resumed_config",
    "RunLogger",
    "plot_learning_curve",
    "check_video_support",
    "evaluate",
]


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


# ----------------------------------------------------------------- global RNGs


def set_global_seeds(seed: int | None) -> None:
    """Seed Python's ``random``, NumPy's legacy global RNG and torch (CPU and all CUDA devices).

    rlstore's own components take explicit seeds / generators; this is for third-party code
    (and torch's default generator used by ``nn.Module`` initialisation and ``Categorical``).

    Args:
        seed: an int in ``[0, 2**32 - 1]``; None leaves the generators as they are.

    Raises:
        ConfigError: ``seed`` is not an int in range.
    """
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ConfigError(f"seed: expected an int in [0, 2**32 - 1], got {type(seed).__name__}")
    if not 0 <= int(seed) <= 2**32 - 1:
        raise ConfigError(f"seed: expected an int in [0, 2**32 - 1], got {seed}")
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the legacy global RNG is exactly what this seeds
    torch.manual_seed(seed)  # also seeds every CUDA device


def global_rng_state() -> dict[str, Any]:
    """The states of torch's CPU generator (a uint8 tensor), NumPy's legacy global RNG and
    Python's ``random`` (JSON-able), as stored by :func:`rlstore.checkpoint.save_state`."""
    npst = np.random.get_state(legacy=False)  # noqa: NPY002 - saving the legacy global RNG
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "bit_generator": npst["bit_generator"],
            "key": npst["state"]["key"].astype(np.uint32),
            "pos": int(npst["state"]["pos"]),
            "has_gauss": int(npst["has_gauss"]),
            "gauss": float(npst["gauss"]),
        },
        "python": {"version": version, "internal": list(internal), "gauss": gauss},
    }


def check_global_rng_state(rng: Any, where: str = "resume.rng") -> None:
    """Raise :class:`CheckpointError` (naming ``where``) unless ``rng`` is a well-formed
    :func:`global_rng_state`."""
    ref = global_rng_state()
    if not isinstance(rng, dict) or set(rng) != set(ref):
        raise CheckpointError(f"{where}: expected keys ['numpy', 'python', 'torch']")
    t = rng["torch"]
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.shape != ref["torch"].shape:
        raise CheckpointError(f"{where}.torch: expected a uint8 tensor of {ref['torch'].numel()}")
    n = rng["numpy"]
    ok = (
        isinstance(n, dict) and set(n) == set(ref["numpy"]) and n["bit_generator"] == "MT19937"
        and isinstance(n["key"], np.ndarray) and n["key"].dtype == np.uint32
        and n["key"].shape == (624,) and type(n["pos"]) is int and 0 <= n["pos"] <= 624
        and n["has_gauss"] in (0, 1) and type(n["has_gauss"]) is int
        and type(n["gauss"]) is float and math.isfinite(n["gauss"])
    )  # fmt: skip
    if not ok:
        raise CheckpointError(f"{where}.numpy: expected an MT19937 state (key, pos, gauss)")
    p = rng["python"]
    ok = (
        isinstance(p, dict) and set(p) == {"version", "internal", "gauss"} and p["version"] == 3
        and isinstance(p["internal"], list) and len(p["internal"]) == 625
        and all(type(x) is int and 0 <= x < 2**32 for x in p["internal"])
        and p["internal"][-1] <= 624
        and (p["gauss"] is None or (type(p["gauss"]) is float and math.isfinite(p["gauss"])))
    )  # fmt: skip
    if not ok:
        raise CheckpointError(f"{where}.python: expected a version-3 Mersenne Twister state")


def set_global_rng_state(rng: dict[str, Any]) -> None:
    """Restore a :func:`global_rng_state` (checked first with :func:`check_global_rng_state`)."""
    torch.set_rng_state(rng["torch"])
    n = rng["numpy"]
    np.random.set_state(  # noqa: NPY002 - restoring the legacy global RNG
        {
            "bit_generator": "MT19937",
            "state": {"key": n["key"], "pos": n["pos"]},
            "has_gauss": n["has_gauss"],
            "gauss": n["gauss"],
        }
    )
    p = rng["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))


# ----------------------------------------------------------------- optimizer state


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` as a tree :func:`rlstore.checkpoint.save_state` stores
    (per-parameter states keyed by ``str(index)``)."""
    sd = optimizer.state_dict()
    return {
        "state": {str(k): dict(v) for k, v in sd["state"].items()},
        "param_groups": sd["param_groups"],
    }


def check_optimizer_state(
    saved: Any, optimizer: torch.optim.Optimizer, where: str = "resume.optimizer"
) -> dict[str, Any]:
    """The torch ``state_dict`` for ``optimizer`` from a saved :func:`optimizer_state`, checked
    against its parameter groups and parameters (:class:`CheckpointError` naming ``where``)."""
    if not isinstance(saved, dict) or set(saved) != {"state", "param_groups"}:
        raise CheckpointError(f"{where}: expected keys ['param_groups', 'state']")
    ref = optimizer.state_dict()
    groups = saved["param_groups"]
    ref_groups = ref["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(ref_groups):
        raise CheckpointError(f"{where}.param_groups: expected {len(ref_groups)} groups")
    out_groups = []
    for g, rg in zip(groups, ref_groups, strict=True):
        if not isinstance(g, dict) or set(g) != set(rg) or g["params"] != rg["params"]:
            raise CheckpointError(
                f"{where}.param_groups: expected keys {sorted(rg)} and params "
                f"{rg['params']} like this optimizer"
            )
        for k, v in g.items():
            want = (list, tuple) if isinstance(rg[k], tuple) else (type(rg[k]),)  # JSON: lists
            if type(v) not in want or isinstance(v, float) and not math.isfinite(v):
                raise CheckpointError(
                    f"{where}.param_groups.{k}: expected {type(rg[k]).__name__}, "
                    f"got {type(v).__name__}"
                )
        out_groups.append({k: tuple(v) if isinstance(rg[k], tuple) else v for k, v in g.items()})
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, torch.Tensor]] = {}
    if not isinstance(saved["state"], dict):
        raise CheckpointError(f"{where}.state: expected a dict of per-parameter states")
    for key, entry in saved["state"].items():
        if not key.isdigit() or int(key) >= len(params) or not isinstance(entry, dict):
            raise CheckpointError(f"{where}.state: unexpected entry {key!r}")
        p = params[int(key)]
        for name, t in entry.items():
            if not isinstance(t, torch.Tensor) or t.dtype != p.dtype and t.ndim != 0:
                raise CheckpointError(f"{where}.state.{key}.{name}: expected a {p.dtype} tensor")
            if t.ndim != 0 and t.shape != p.shape:
                raise CheckpointError(
                    f"{where}.state.{key}.{name}: expected shape {tuple(p.shape)}, "
                    f"got {tuple(t.shape)}"
                )
        state[int(key)] = dict(entry)
    return {"state": state, "param_groups": out_groups}


def check_module_state(saved: Any, module: torch.nn.Module, where: str = "model") -> None:
    """Raise :class:`CheckpointError` (naming ``where`` and the key) unless ``saved`` holds
    exactly ``module.state_dict()``'s keys, each a tensor of the same shape and dtype.

    Example::

        >>> check_module_state({"weight": torch.zeros(2, 3)}, torch.nn.Linear(3, 2, bias=False))
        >>> check_module_state(  # doctest: +ELLIPSIS
        ...     {"weight": torch.zeros(3)}, torch.nn.Linear(3, 2, bias=False))
        Traceback (most recent call last):
        ...
        rlstore.errors.CheckpointError: model.weight: expected a tensor of shape (2, 3) and ...
    """
    ref = module.state_dict()
    if not isinstance(saved, dict) or set(saved) != set(ref):
        keys = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
        raise CheckpointError(f"{where}: expected the parameters {sorted(ref)}, got {keys}")
    for k, t in ref.items():
        v = saved[k]
        if not isinstance(v, torch.Tensor) or v.shape != t.shape or v.dtype != t.dtype:
            got = (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else type(v).__name__
            raise CheckpointError(
                f"{where}.{k}: expected a tensor of shape {tuple(t.shape)} and dtype {t.dtype}, "
                f"got {got}"
            )


def check_updates_log(log: Any, where: str) -> None:
    """Raise :class:`CheckpointError` naming ``where`` unless ``log`` is a list of
    ``{name: number}`` dicts (the per-update diagnostics a checkpoint carries)."""
    if not isinstance(log, list) or not all(
        isinstance(u, dict) and all(type(v) in (int, float) for v in u.values()) for u in log
    ):
        raise CheckpointError(f"{where}: expected a list of {{name: number}} dicts")


RAW_OBS = SimpleNamespace(
    normalizer=SimpleNamespace(obs=lambda x, update: x),
    preprocess=lambda batch, device: torch.as_tensor(batch, device=device),
)
"""The ``agent`` argument of :func:`rlstore.agents.ppo.env_state.restore_envs` for trainers
whose networks see the raw observations (DQN, SAC): no preprocessing, no normalization, so the
replayed observations are compared with the saved ones as they are."""


# ----------------------------------------------------------------- run folder


_UNSAFE = re.compile(r"[^\w.-]+")
_CKPT = re.compile(r"^checkpoint_(\d+)$")
_LEGACY = re.compile(r"^checkpoint_(\d+)\.pt$")


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
    """Create and return ``runs_dir/name``, or ``name-1``, ``name-2``, ... when taken.

    Raises:
        ConfigError: ``name`` is not a :func:`safe_name` (it would leave ``runs_dir``).
    """
    if not name or safe_name(name) != name:
        raise ConfigError(
            f"run.exp_name: expected a folder name of letters, digits, '_', '.', '-' "
            f"(e.g. {safe_name(name)!r}), got {name!r}"
        )
    base = Path(runs_dir) / name
    run_dir, k = base, 1
    while True:
        try:
            run_dir.mkdir(parents=True)
            return run_dir
        except FileExistsError:
            run_dir, k = base.with_name(f"{name}-{k}"), k + 1


def checkpoint_path(folder: str | Path, num: int) -> Path:
    """``folder / "checkpoint_{num:04d}"`` (a folder)."""
    return Path(folder) / f"checkpoint_{num:04d}"


def list_checkpoints(folder: str | Path, prefix: str) -> list[tuple[int, Path]]:
    """``(num, path)`` of the committed ``checkpoint_NNNN`` folders in ``folder`` (those holding
    ``<prefix>metadata.json``), sorted by number; ``[]`` when the folder does not exist."""
    d = Path(folder)
    if not d.is_dir():
        return []
    found = [
        (int(m.group(1)), p)
        for p in d.iterdir()
        if (m := _CKPT.match(p.name)) and metadata_file_path(p, prefix).is_file()
    ]
    return sorted(found)


def latest_checkpoint(folder: str | Path, prefix: str) -> Path | None:
    """The highest-numbered committed checkpoint folder in ``folder`` (None if none).

    Raises:
        CheckpointError: the folder holds only ``checkpoint_NNNN.pt`` files of an earlier
            rlstore (they are never loaded: pickle inside).
    """
    found = list_checkpoints(folder, prefix)
    if found:
        return found[-1][1]
    d = Path(folder)
    legacy = sorted(p.name for p in d.iterdir() if _LEGACY.match(p.name)) if d.is_dir() else []
    if legacy:
        raise CheckpointError(
            f"checkpoints: {str(d)!r} holds only {legacy[-1]}-style files of an earlier rlstore "
            "(pickle inside); they are not loaded because loading them could run code"
        )
    return None


def checkpoint_schedule(num_periods: int, num_checkpoints: int) -> set[int]:
    """1-based period numbers after which a checkpoint is written: ``num_checkpoints`` evenly
    spaced over ``num_periods``, the last one included (``set()`` for 0 checkpoints).

    Example::

        >>> sorted(checkpoint_schedule(10, 3))
        [3, 7, 10]
    """
    if num_checkpoints <= 0 or num_periods <= 0:
        return set()
    k = min(num_checkpoints, num_periods)
    return {int(round(num_periods * (i + 1) / k)) for i in range(k)}


BUDGET_KEY = "total_timesteps"
"""The one config key a resumed run may change (raise): its total budget of env steps."""


def check_resumed_config(
    saved: Any, now: Mapping[str, Any], sections: tuple[str, ...], where: str
) -> None:
    """Raise :class:`CheckpointError` unless the config a checkpoint was written with
    (``saved``, a dict) equals the resuming run's (``now``) in every section of ``sections``,
    except a larger ``total_timesteps`` (``rlstore train --resume RUN --total-steps N``
    extends a run; the schedules planned over the budget are re-planned over the new one).

    Example::

        >>> old = {"dqn": {"lr": 1e-3, "total_timesteps": 100}}
        >>> check_resumed_config(old, {"dqn": {"lr": 1e-3, "total_timesteps": 200}}, ("dqn",), "c")
        >>> check_resumed_config(  # doctest: +ELLIPSIS
        ...     old, {"dqn": {"lr": 1e-3, "total_timesteps": 50}}, ("dqn",), "c")
        Traceback (most recent call last):
        ...
        rlstore.errors.CheckpointError: c: config.dqn.total_timesteps: expected at least 100 ...
    """

    def budgetless(section: Any) -> Any:
        if not isinstance(section, dict):
            return section
        return {k: v for k, v in section.items() if k != BUDGET_KEY}

    for name in sections:
        old = saved.get(name) if isinstance(saved, dict) else None
        new = now[name]
        if not isinstance(old, dict) or budgetless(old) != budgetless(new):
            raise CheckpointError(f"{where}: config.{name} differs from this run's")
        if BUDGET_KEY in new and not old.get(BUDGET_KEY, 0) <= new[BUDGET_KEY]:
            raise CheckpointError(
                f"{where}: config.{name}.{BUDGET_KEY}: expected at least {old[BUDGET_KEY]} "
                f"(a run can be extended, not shortened), got {new[BUDGET_KEY]}"
            )


# ----------------------------------------------------------------- logging


class RunLogger:
    """TensorBoard (``run_dir/tb``) / offline W&B scalars and the tqdm bar of one run.

    Args:
        run_dir: the run folder; None: no TensorBoard or W&B files.
        total_steps: env steps of the whole run (the bar's total). initial_step: steps already
            done (a resumed run).
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
                self.tb = SummaryWriter(str(Path(run_dir) / "tb"))
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
    PNG at ``path``. Skipped with a warning when matplotlib is missing."""
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
    fig.savefig(str(path))


# ----------------------------------------------------------------- evaluation


def check_video_support() -> None:
    """Raise :class:`ConfigError` naming the missing extra unless videos can be recorded
    (gymnasium's ``RecordVideo`` needs moviepy); trainers call it before a run starts."""
    try:
        import moviepy  # noqa: F401
    except ImportError:
        raise ConfigError(
            "video: recording evaluation videos needs the moviepy package, which is not "
            "installed (pip install moviepy)"
        ) from None


def evaluate(
    act: Callable[[np.ndarray], np.ndarray],
    make_env: Callable[[], gym.Env],
    episodes: int,
    seed: int,
    *,
    video_dir: str | Path | None = None,
    begin_episode: Callable[[], None] | None = None,
) -> list[float]:
    """Run ``episodes`` whole episodes on one env and return their (undiscounted) returns.

    Args:
        act: maps ONE observation (no batch axis) to ONE action, deterministically (greedy /
            mean action); it must not draw from the global RNGs, so that a run with evaluation
            is the same run as without.
        make_env: builds the env (closed at the end); with ``video_dir`` it must use
            ``render_mode="rgb_array"``.
        episodes: number of episodes, >= 1. Episode ``i`` starts with ``reset(seed=seed + i)``.
        seed: seed of the first episode.
        video_dir: record every episode there with gymnasium's ``RecordVideo`` (needs moviepy).
        begin_episode: called before each episode (recurrent agents reset their memory).

    Raises:
        ConfigError: ``episodes`` < 1, or ``video_dir`` without the moviepy package.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"episodes: expected an int >= 1, got {episodes!r}")
    if video_dir is not None:
        check_video_support()
    env = make_env()
    try:
        if video_dir is not None:
            if env.render_mode != "rgb_array":
                raise ConfigError(
                    f"make_env: expected an env with render_mode='rgb_array' for video, "
                    f"got {env.render_mode!r}"
                )
            env = gym.wrappers.RecordVideo(
                env, str(video_dir), episode_trigger=lambda _: True, disable_logger=True
            )
        returns = []
        for i in range(episodes):
            if begin_episode is not None:
                begin_episode()
            obs, _ = env.reset(seed=seed + i)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total += float(reward)
                done = bool(terminated or truncated)
            returns.append(total)
        return returns
    finally:
        env.close()
