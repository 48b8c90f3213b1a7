"""The config pieces every rlstore trainer shares (PPO, DQN, SAC, IMPALA, Ape-X):
:class:`BaseConfig`, the base of their configs, the ``run`` and ``environment`` sections of
every run's config, and the bases of the one-section algorithms' configs
(:class:`AlgorithmConfig`, the section; :class:`AlgorithmTrainConfig`, the whole run).

Each is a pydantic model on :class:`rlstore.config.StrictModel`: unknown keys and bad values
raise :class:`rlstore.errors.ConfigError` naming the field, the expectation and what arrived;
every field is documented by its attribute docstring.

Example::

    >>> RunConfig.from_dict({"seed": 3}).to_dict()["seed"]
    3
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import ConfigDict, Field, model_validator
from typing_extensions import Self

from rlstore.checkpoint import write_text_atomic
from rlstore.config import StrictModel, load_config_file
from rlstore.errors import ConfigError

__all__ = [
    "BaseConfig", "RunConfig", "EnvironmentConfig", "AlgorithmConfig", "AlgorithmTrainConfig",
    "Encoder", "folder_runner",
]  # fmt: skip

Encoder = Literal["auto", "mlp", "cnn"]
"""The observation encoder a config picks (PPO's ``online.encoder``, DQN's ``dqn.encoder``;
:func:`rlstore.agents.encoders.resolve_encoder`): ``cnn``, NatureCNN for pixel images;
``mlp``, the flattened observation into the MLP; ``auto``, ``cnn`` for pixel images
NatureCNN's kernels fit (at least 36x36) and ``mlp`` otherwise."""


logger = logging.getLogger(__name__)

_ENV_ID = re.compile(r"(?:[\w.-]+/)?[\w.-]+")
"""Shape of the env ids rlstore accepts: Gymnasium's ``namespace/name-vN`` without ``module:``."""


class BaseConfig(StrictModel):
    """Base of the run configs: :class:`rlstore.config.StrictModel` (unknown keys are errors,
    frozen, finite floats, ConfigError on bad input) with strict types (``"2000"`` is not an
    int, ``"true"`` not a bool; an int is a float), and plain dict conversions. Config files
    and ``--set`` values are read by :func:`rlstore.config.load_yaml`, which gives ``3e-4`` as
    a float."""

    model_config = ConfigDict(**StrictModel.model_config, strict=True)

    legacy_defaults: ClassVar[dict[str, Any]] = {}
    """Fields added after runs were written, with the value those runs used: a run folder's
    ``config.yaml`` or a checkpoint's config without such a key means this value, not the
    field's default (:meth:`fill_legacy`)."""

    @classmethod
    def fill_legacy(cls, data: Any) -> Any:
        """``data`` (a stored run config) with every absent :attr:`legacy_defaults` key of this
        model and its sections filled in; anything not a mapping is returned as it is."""
        if not isinstance(data, Mapping):
            return data
        out = {**cls.legacy_defaults, **data}
        for name, field in cls.model_fields.items():
            sub = field.annotation
            if isinstance(sub, type) and issubclass(sub, BaseConfig) and name in out:
                out[name] = sub.fill_legacy(out[name])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self:
        """Build from a plain dict (e.g. parsed YAML); ``None`` gives the defaults."""
        return cls.validate_mapping({} if data is None else data)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-able dict; ``from_dict(to_dict())`` round-trips."""
        return self.model_dump(mode="json")

    @classmethod
    def from_file(cls, path: str | Path, *, run_file: bool = False) -> Self:
        """Build from a YAML or JSON file (:class:`~rlstore.errors.ConfigError` naming the bad
        key); the algorithm modules' ``load_config``. ``run_file``: ``path`` is a run folder's
        ``config.yaml`` (written with every field), whose absent keys are fields added since
        the run was written (:meth:`fill_legacy`)."""
        data = load_config_file(path)
        return cls.from_dict(cls.fill_legacy(data) if run_file else data)

    @classmethod
    def budget_key(cls) -> str:
        """The ``section.field`` of the run's env-step budget, the one key a resumed run may
        change. Only whole-run configs have one (PPO's ``TrainConfig``,
        :class:`AlgorithmTrainConfig`); a section config raises ``NotImplementedError``."""
        raise NotImplementedError(f"{cls.__name__} is not a whole run's config: no budget key")

    def to_yaml(self, path: str | Path) -> None:
        """Write the fully resolved config as YAML (every field, defaults included); the file
        is replaced atomically (written beside it, then renamed)."""
        write_text_atomic(path, yaml.safe_dump(self.to_dict(), sort_keys=False))


class RunConfig(BaseConfig):
    """What the run is called, where it writes, how it is seeded and logged."""

    exp_name: str = "ppo"
    """Name of the run; the run folder is ``<runs_dir>/<exp_name>``."""
    runs_dir: str = "runs"
    """Parent folder of run folders (a leading ``~`` is the home folder)."""
    seed: int = Field(1, ge=0, le=2**31 - 1)
    """Seed of torch, numpy, Python ``random`` and the environments (env i gets ``seed + i``)."""
    device: str = "cpu"
    """Torch device of the agent and the rollout buffer."""
    torch_threads: int = Field(1, ge=1)
    """``torch.set_num_threads`` for the run; 1 is fastest for small MLPs."""
    track: bool = True
    """Write TensorBoard logs (and W&B logs when ``wandb`` is on) into the run folder."""
    wandb: bool = False
    """Also log to Weights & Biases (offline mode; needs the ``wandb`` package)."""
    wandb_project_name: str = "rlstore"
    """W&B project name."""
    wandb_entity: str | None = None
    """W&B entity (team or user); ``None`` uses the default."""
    progress_bar: bool = False
    """Show a tqdm bar (steps/s, mean episodic return)."""
    eval_episodes: int = Field(5, ge=0)
    """Deterministic evaluation episodes (greedy / mean action, observation statistics frozen)
    run at each evaluation on one separate env, episode i reset with seed ``seed + 1_000_000 +
    i`` (the same episodes every time); their mean is logged as ``eval/mean_return`` and kept
    in ``TrainStats.evaluations``. They draw nothing from the training RNGs: a run with
    evaluation is the same run as without. 0: off. Every algorithm reads it."""
    eval_interval: int = Field(0, ge=0)
    """Env steps (summed over envs) between evaluations, for every algorithm: one runs after
    the update (period, learner step) in which the step count crosses a multiple of it, and one
    after the last; 0: only after the last. A PPO update is ``online.num_envs *
    online.num_steps`` env steps."""
    video: bool = False
    """Record the evaluation episodes as MP4 files under ``<run folder>/videos/step_N/``
    (gymnasium ``RecordVideo``; needs the moviepy package)."""

    moved_keys: ClassVar[dict[str, str]] = {
        "eval_every": "replaced by run.eval_interval (rlstore train --eval-interval), counted "
        "in env steps, not PPO updates (one update is online.num_envs * online.num_steps env "
        "steps)",
    }


class EnvironmentConfig(BaseConfig):
    """Which Gymnasium environment to build and how."""

    env_id: str = "CartPole-v1"
    """Gymnasium id passed to ``gym.make`` (probe ids need ``rlstore.envs.register_probes()``)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for ``gym.make``."""
    max_steps: int | None = Field(None, ge=1)
    """Episode time limit (``max_episode_steps``); ``None`` keeps the env's own limit."""
    fully_observed: bool = False
    """MiniGrid only: wrap with ``FullyObsWrapper`` (whole grid instead of the agent's view)."""
    img_obs: bool = False
    """MiniGrid only: wrap with ``RGBImgPartialObsWrapper`` (pixels, not the grid encoding)."""

    @model_validator(mode="after")
    def _check_env_id(self) -> EnvironmentConfig:
        # Gymnasium imports the module of a "module:Name-v0" id: a config (or a run folder's
        # config.yaml) must never name code to import, so only plain registered ids pass.
        if not _ENV_ID.fullmatch(self.env_id):
            raise ValueError(
                "env_id: expected a registered Gymnasium id such as 'CartPole-v1' or "
                "'namespace/Name-v0' (letters, digits, '_', '.', '-', one optional '/'; "
                f"no 'module:' prefix, modules named in a config are never imported), "
                f"got {self.env_id!r}"
            )
        return self


class AlgorithmConfig(BaseConfig):
    """Base of the hyper-parameter sections of DQN, SAC, IMPALA and Ape-X (``dqn``, ``sac``,
    ``impala``, ``apex``), whose evaluation settings moved to ``run`` (greedy / mean-action
    evaluation: ``run.eval_episodes``, ``run.eval_interval``)."""

    moved_keys: ClassVar[dict[str, str]] = {
        "eval_interval": "moved to run.eval_interval (env steps between evaluations, as before)",
        "eval_freq": "moved to run.eval_interval (env steps between evaluations, as before)",
        "eval_episodes": "moved to run.eval_episodes",
    }


class AlgorithmTrainConfig(BaseConfig):
    """Base of a whole DQN, SAC, IMPALA or Ape-X run (the shape of ``configs/<algo>_*.yaml`` and
    of a run's ``config.yaml``): ``run``, ``environment`` and the algorithm's section, the one
    field a subclass adds (an :class:`AlgorithmConfig`). Left out, ``run`` is named after the
    section (``exp_name: dqn``) and ``environment`` is ``default_env_id``."""

    run: RunConfig = Field(default_factory=RunConfig)
    """Run name, seed, device, logging."""
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    """Environment (Discrete actions for DQN, IMPALA, Ape-X; Box actions for SAC)."""

    default_env_id: ClassVar[str] = "CartPole-v1"

    @classmethod
    def section(cls) -> str:
        """The name of the algorithm's section (``dqn``, ``sac``, ``impala``, ``apex``)."""
        return next(k for k in cls.model_fields if k not in ("run", "environment"))

    @classmethod
    def budget_key(cls) -> str:
        """``<section>.total_timesteps``."""
        return f"{cls.section()}.total_timesteps"

    @classmethod
    def cli_keys(cls) -> dict[str, str | None]:
        """``rlstore train``'s named flags -> the keys of this config (the module's
        ``CLI_KEYS``); None: the flag does not apply (no agent choice, no rollout length, no
        entropy coefficient). The evaluation flags set ``run.*`` for every algorithm."""
        keys = ("num_envs", "learning_rate", "gamma")
        flags = ("num_envs", "lr", "gamma")
        return {
            "total_steps": cls.budget_key(),
            **{flag: f"{cls.section()}.{key}" for flag, key in zip(flags, keys, strict=True)},
            **dict.fromkeys(("agent", "num_steps", "ent_coef")),
        }

    @model_validator(mode="before")
    @classmethod
    def _default_sections(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        defaults = {
            "run": {"exp_name": cls.section()},
            "environment": {"env_id": cls.default_env_id},
        }
        return {**{k: v for k, v in defaults.items() if k not in data}, **data}


R = TypeVar("R")


def folder_runner(
    train: Callable[..., R], check: Callable[[Any], None] | None = None
) -> Callable[..., R]:
    """An algorithm module's ``runner``, the entry of ``rlstore train``: ``runner(cfg, *,
    run_dir, resume)`` checks ``cfg``, writes ``run_dir/config.yaml`` (the folder created if
    missing) and trains there: ``train(cfg, run_dir=run_dir, resume=resume)`` (TensorBoard
    logs, checkpoints, ``learning_curve.png``; ``resume`` continues the latest checkpoint).

    A new run is checked by ``check(cfg)``. A resumed run keeps the folder's ``config.yaml``
    except for a larger budget (``cfg.budget_key()``), which extends the run and is its config
    from then on, and ``run.progress_bar``; anything else is refused before the folder changes.

    Raises:
        ConfigError: on resume, ``cfg`` changes another key or shortens the budget.
    """

    def runner(cfg: BaseConfig, *, run_dir: str | Path, resume: bool) -> R:
        if resume:
            check_resume(cfg, Path(run_dir, "config.yaml"))
        else:
            if check is not None:
                check(cfg)
            logger.info("writing %s", run_dir)
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        cfg.to_yaml(Path(run_dir, "config.yaml"))
        return train(cfg, run_dir=run_dir, resume=resume)

    return runner


def check_resume(cfg: BaseConfig, saved_path: Path) -> None:
    """Refuse a resume config that differs from the run's saved one other than by a larger
    budget (:meth:`BaseConfig.budget_key`) or ``run.progress_bar`` (display only)."""
    key = type(cfg).budget_key()
    section, leaf = key.rsplit(".", 1)
    mine = cfg.to_dict()
    saved = type(cfg).from_file(saved_path, run_file=True).to_dict()
    want, have = mine[section][leaf], saved[section][leaf]
    mine[section][leaf] = have
    mine["run"]["progress_bar"] = saved["run"]["progress_bar"]
    if mine != saved:
        raise ConfigError(f"cfg: a resumed run keeps its config.yaml; only {key} may change")
    if want < have:
        raise ConfigError(
            f"{key}: expected at least {have} (a resume can extend the run's budget, not "
            f"shorten it), got {want}"
        )
    if want > have:
        logger.info("extending %s to %s = %s", saved_path.parent, key, want)
