"""The environments of every rlstore trainer: built from an :class:`EnvironmentConfig`, and
saved in checkpoints without pickle as a JSON spec plus a deterministic replay.

:func:`make_vector_env` builds Gymnasium vector envs in ``AutoresetMode.SAME_STEP`` (every step
is a real transition); :func:`make_env` one env the same way (evaluation, videos);
:func:`check_env_id` checks an id before a run folder exists.

A checkpoint does not store environment objects. It stores

* the **spec** of the vector env: env id, ``gym.make`` kwargs, time limit, the wrappers by
  their registered name (:data:`WRAPPERS`), the number of envs and the autoreset mode;
* per sub-env, what rebuilds its **current episode**: the seed its last ``reset`` got, or, for
  an unseeded reset (an autoreset), the state of its ``np_random`` generator just before that
  reset (JSON, :func:`rlstore.samplers.rng_state`), and the actions it has received since
  (one array per env).

:class:`EpisodeLog`, the outermost wrapper of every sub-env built by :func:`make_vector_env`,
records both. :func:`restore_envs` rebuilds the episode on a freshly built vector env of the
same spec: reset (with the seed, or from the saved generator state) and replay the actions.
Gymnasium environments draw their randomness from ``np_random``, so the replayed env is in the
state the original was in, bit for bit (checked: the replayed observations must equal the
checkpoint's current observation).

Nothing read from a checkpoint is resolved to code: wrapper names are only compared with the
names the run's own config gives, and generator states are accepted only for the bit
generator the rebuilt env already has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlstore._checks import check_keys
from rlstore.agents.config import EnvironmentConfig
from rlstore.errors import CheckpointError, ConfigError
from rlstore.samplers import rng_state, set_rng_state

__all__ = [
    "make_vector_env",
    "make_env",
    "check_env_id",
    "WRAPPERS",
    "EpisodeLog",
    "TupleAsDict",
    "tuple_as_dict",
    "has_episode_logs",
    "wrapper_names",
    "env_spec",
    "env_state",
    "restore_envs",
]


class EpisodeLog(gym.Wrapper):
    """Pass-through wrapper recording how the current episode started and its actions.

    Attributes:
        reset_seed: the ``seed`` of the last ``reset`` (None for an unseeded reset).
        rng_before_reset: ``np_random`` state before an unseeded reset (JSON), else None.
        reset_options: the ``options`` of the last reset.
        actions: the actions received since the last reset (copies).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.reset_seed: int | None = None
        self.rng_before_reset: dict[str, Any] | None = None
        self.reset_options: dict[str, Any] | None = None
        self.actions: list[np.ndarray | np.generic] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.rng_before_reset = None if seed is not None else rng_state(self.unwrapped.np_random)
        self.reset_seed = None if seed is None else int(seed)
        self.reset_options = options
        self.actions = []
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        # numpy scalars (what a vector env hands a Discrete sub-env) are immutable: no copy
        self.actions.append(action if isinstance(action, np.generic) else np.array(action))
        return self.env.step(action)


class TupleAsDict(gym.ObservationWrapper):  # type: ignore[type-arg]
    """A ``Tuple`` observation space as a one-level ``Dict`` with keys ``"0"``, ``"1"``, ...
    (Blackjack's ``(player sum, dealer card, usable ace)``): the agents' preprocessors, replays
    and checkpoints read dicts. A relabelling only (the env's state and randomness are
    untouched), applied by :func:`make_vector_env` / :func:`make_env` to every env whose
    observations are a ``Tuple``; not a named wrapper, so specs and old checkpoints are unchanged.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        parts = enumerate(env.observation_space.spaces)  # type: ignore[attr-defined]
        self.observation_space = gym.spaces.Dict({str(i): s for i, s in parts})

    def observation(self, observation: Any) -> dict[str, Any]:
        return {str(i): v for i, v in enumerate(observation)}


def tuple_as_dict(env: gym.Env) -> gym.Env:
    """``env``, wrapped by :class:`TupleAsDict` if its observation space is a ``Tuple``."""
    return TupleAsDict(env) if isinstance(env.observation_space, gym.spaces.Tuple) else env


def _minigrid(name: str) -> Callable[[], type]:
    def load() -> type:
        import minigrid.wrappers

        return getattr(minigrid.wrappers, name)  # type: ignore[no-any-return]

    return load


WRAPPERS: dict[str, Callable[[], type]] = {
    "FullyObsWrapper": _minigrid("FullyObsWrapper"),
    "RGBImgPartialObsWrapper": _minigrid("RGBImgPartialObsWrapper"),
    "EpisodeLog": lambda: EpisodeLog,
}
"""The wrappers rlstore applies, by registered name (innermost first); the only ones a spec
may name."""


def wrapper_names(cfg: EnvironmentConfig) -> list[str]:
    """Registered names of the wrappers of every sub-env of ``cfg``, innermost first."""
    names = []
    if cfg.fully_observed:
        names.append("FullyObsWrapper")
    if cfg.img_obs:
        names.append("RGBImgPartialObsWrapper")
    return [*names, "EpisodeLog"]


def make_vector_env(environment_config: EnvironmentConfig, num_envs: int) -> gym.vector.VectorEnv:
    """A ``SyncVectorEnv`` of ``num_envs`` copies of the configured env, autoreset SAME_STEP.

    Each sub-env is wrapped by its registered wrappers (:func:`wrapper_names`), the outermost
    being :class:`EpisodeLog` (what checkpoints replay), and ``Tuple`` observations are read as
    dicts (:class:`TupleAsDict`, innermost).

    rlstore's own ids (``CartPoleNoVel-v1``, ``rlstore/Probe*``) are registered and MiniGrid
    ids import ``minigrid`` first.
    """
    cfg = environment_config
    check_env_id(cfg)
    wrappers: list[Any] = [tuple_as_dict, *(WRAPPERS[name]() for name in wrapper_names(cfg))]
    kwargs = dict(cfg.env_kwargs)
    if cfg.max_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_steps
    try:
        return gym.make_vec(
            cfg.env_id,
            num_envs=num_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
            wrappers=wrappers,
            **kwargs,
        )
    except gym.error.Error as err:
        raise ConfigError(f"environment.env_id: cannot make {cfg.env_id!r}: {err}") from err


def make_env(environment_config: EnvironmentConfig, render_mode: str | None = None) -> gym.Env:
    """One env as :func:`make_vector_env` builds each sub-env (``Tuple`` observations as
    dicts), without the :class:`EpisodeLog` (evaluation episodes, videos)."""
    cfg = environment_config
    check_env_id(cfg)
    kwargs = dict(cfg.env_kwargs)
    if cfg.max_steps is not None:
        kwargs["max_episode_steps"] = cfg.max_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        env = tuple_as_dict(gym.make(cfg.env_id, **kwargs))
    except gym.error.Error as err:
        raise ConfigError(f"environment.env_id: cannot make {cfg.env_id!r}: {err}") from err
    for name in wrapper_names(cfg)[:-1]:  # the last one is the EpisodeLog
        env = WRAPPERS[name]()(env)
    return env


def _needs_minigrid(cfg: EnvironmentConfig) -> bool:
    return cfg.env_id.startswith(("MiniGrid", "BabyAI")) or cfg.fully_observed or cfg.img_obs


def check_env_id(environment_config: EnvironmentConfig) -> None:
    """Raise :class:`ConfigError` unless the configured id is registered with Gymnasium.

    Registers rlstore's own ids (``CartPoleNoVel-v1``, the probes ``rlstore/Probe*``) and
    imports ``minigrid`` for MiniGrid ids first; nothing else is imported
    (:class:`EnvironmentConfig` rejects ``module:`` ids).
    Called before a run folder is created, so a bad id leaves nothing behind.
    """
    cfg = environment_config
    import rlstore.envs  # noqa: F401  (registers CartPoleNoVel-v1)

    if cfg.env_id.startswith("rlstore/"):
        rlstore.envs.register_probes()
    if _needs_minigrid(cfg):
        try:
            import minigrid  # noqa: F401  (registers the MiniGrid ids)
        except ImportError as err:
            raise ConfigError(
                f"environment.env_id: {cfg.env_id!r} needs the minigrid package "
                "(pip install 'rlstore[minigrid]')"
            ) from err
    if ":" in cfg.env_id:  # a config built without validation (model_construct)
        raise ConfigError(f"environment.env_id: expected no 'module:' prefix, got {cfg.env_id!r}")
    try:
        gym.spec(cfg.env_id)
    except gym.error.Error as err:
        raise ConfigError(
            f"environment.env_id: expected an id registered with Gymnasium, got {cfg.env_id!r} "
            f"({err})"
        ) from None


def env_spec(cfg: EnvironmentConfig, num_envs: int) -> dict[str, Any]:
    """JSON spec of the vector env :func:`make_vector_env` builds for ``cfg``."""
    return {
        "env_id": cfg.env_id,
        "env_kwargs": dict(cfg.env_kwargs),
        "max_steps": cfg.max_steps,
        "wrappers": wrapper_names(cfg),
        "num_envs": int(num_envs),
        "autoreset_mode": "SameStep",
    }


def has_episode_logs(envs: Any) -> bool:
    """Whether ``envs`` is a vector env whose sub-envs carry :class:`EpisodeLog`."""
    return _logs(envs) is not None


def _logs(envs: Any) -> list[EpisodeLog] | None:
    subs = getattr(envs, "envs", None)
    if subs is None or not all(isinstance(e, EpisodeLog) for e in subs):
        return None
    return list(subs)


def env_state(envs: Any, cfg: EnvironmentConfig) -> dict[str, Any] | None:
    """``{"spec", "episodes", "actions"}`` of a vector env from :func:`make_vector_env`.

    ``None`` when the envs cannot be rebuilt from a spec (a vector env built elsewhere, or an
    episode reset with options that are not JSON).
    """
    logs = _logs(envs)
    if logs is None:
        return None
    episodes, actions = [], {}
    for i, log in enumerate(logs):
        if log.reset_options is not None:
            return None
        episodes.append({"seed": log.reset_seed, "rng": log.rng_before_reset})
        shape = getattr(log.action_space, "shape", None) or ()
        dtype = log.action_space.dtype or np.int64
        acts = np.stack(log.actions) if log.actions else np.zeros((0, *shape), dtype)
        actions[str(i)] = acts
    return {"spec": env_spec(cfg, len(logs)), "episodes": episodes, "actions": actions}


def _check_episode(i: int, ep: Any, acts: Any, log: EpisodeLog) -> None:
    where = f"envs.episodes[{i}]"
    check_keys(where, ep, ("rng", "seed"))
    seed, rng = ep["seed"], ep["rng"]
    if (seed is None) == (rng is None):
        raise CheckpointError(f"{where}: expected exactly one of seed / rng, got {ep!r}")
    if seed is not None and (type(seed) is not int or not 0 <= seed < 2**63):
        raise CheckpointError(f"{where}.seed: expected an int in [0, 2**63), got {seed!r}")
    if rng is not None:
        have = type(log.unwrapped.np_random.bit_generator).__name__
        if not isinstance(rng, dict) or rng.get("bit_generator") != have:
            got = rng.get("bit_generator") if isinstance(rng, dict) else rng
            raise CheckpointError(f"{where}.rng: expected a {have} state, got {got!r}")
    space = log.action_space
    shape = tuple(getattr(space, "shape", None) or ())
    if not isinstance(acts, np.ndarray) or acts.shape[1:] != shape or acts.dtype != space.dtype:
        got = (acts.shape, acts.dtype) if isinstance(acts, np.ndarray) else type(acts).__name__
        raise CheckpointError(
            f"envs.actions/{i}: expected an array (L, *{shape}) of {space.dtype}, got {got}"
        )


def restore_envs(envs: Any, cfg: EnvironmentConfig, saved: Any, agent: Any, next_obs: Any) -> None:
    """Replay the saved episodes on ``envs`` (freshly built by :func:`make_vector_env`).

    Args:
        envs: the vector env to put in the saved state (its sub-envs are reset and stepped).
        cfg: the run's environment config (the saved spec must equal its spec).
        saved: :func:`env_state` output read back from a checkpoint.
        agent: preprocesses (and normalizes, statistics already restored) the replayed
            observations for the check.
        next_obs: the checkpoint's current (preprocessed) observation, ``(N, *obs_shape)``.

    Raises:
        CheckpointError: a spec that differs from the run's, malformed episodes, or a replay
            that does not reproduce ``next_obs`` (the env is not deterministic given its seed,
            generator state and actions).
    """
    logs = _logs(envs)
    if logs is None:
        raise CheckpointError("envs: expected a vector env built by make_vector_env")
    check_keys("envs", saved, ("actions", "episodes", "spec"))
    spec = env_spec(cfg, len(logs))
    if saved["spec"] != spec:
        raise CheckpointError(f"envs.spec: expected {spec} like the run, got {saved['spec']!r}")
    episodes, actions = saved["episodes"], saved["actions"]
    if not isinstance(episodes, list) or len(episodes) != len(logs):
        raise CheckpointError(f"envs.episodes: expected a list of {len(logs)} episodes")
    if not isinstance(actions, dict) or set(actions) != {str(i) for i in range(len(logs))}:
        raise CheckpointError(f"envs.actions: expected arrays '0'..'{len(logs) - 1}'")
    for i, log in enumerate(logs):
        _check_episode(i, episodes[i], actions[str(i)], log)
    observations = []
    for i, log in enumerate(logs):
        ep, acts = episodes[i], actions[str(i)]
        if ep["seed"] is not None:
            obs, _ = log.reset(seed=ep["seed"])
        else:
            set_rng_state(log.unwrapped.np_random, ep["rng"])  # same class: set in place
            obs, _ = log.reset()
        for j in range(len(acts)):
            obs, _, terminated, truncated, _ = log.step(acts[j])
            if terminated or truncated:
                raise CheckpointError(
                    f"envs.actions/{i}: the replayed episode ended at step {j + 1} of {len(acts)}"
                )
        observations.append(obs)
    space = envs.single_observation_space
    batch = gym.vector.utils.concatenate(
        space,
        observations,
        gym.vector.utils.create_empty_array(space, len(logs)),  # type: ignore[arg-type]
    )
    replayed = agent.normalizer.obs(agent.preprocess(batch, next_obs.device), update=False)
    # the same preprocessing (and normalization, by the restored statistics) of the same arrays
    # as at save time: bitwise equal unless the replay went elsewhere
    if not torch.equal(replayed, next_obs):
        raise CheckpointError(
            "envs: replaying the saved episodes did not reproduce the checkpoint's observation "
            f"(is {cfg.env_id!r} deterministic given its seed and actions?)"
        )
