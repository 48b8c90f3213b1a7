"""PPO+D (Libardi, De Fabritiis, Dittert, ICML 2021): PPO over a rollout that replays demos.

The PPO agent, loss, rollout buffer, minibatches and run infrastructure are PPO's
(:mod:`rlstore.agents.ppo`); what PPO+D adds is the collection step. Every vector-env step goes
through a :class:`~rlstore.buffers.demo_mixer.DemoMixer` over a
:class:`~rlstore.buffers.demos.DemoStore` (``run_rollout(..., mix=...)``): when a slot starts an
episode it replays a reward demo with probability ``rho``, a value demo with ``phi``, else runs
the real env (reset when a demo ends). On demo steps

* the stored action and reward are the demo's, and its **log-prob is 0** (PyTorchRL's
  ``PPODBuffer``: the behaviour probability of a demo action is 1, so the ratio is
  ``pi(a_demo | s) <= 1`` and, for ``A > 0``, the clipped objective keeps pushing ``pi(a_demo)``
  up until it reaches ``1 - clip_coef``; for ``A < 0`` it is clipped: no gradient);
* the value is ``V(demo obs)`` of the current policy (the agent acts on the demo frame, so its
  own forward pass gives it), and GAE runs over demo and env steps alike (the demo's last
  step is terminal).

The logged ``approx_kl`` and ``clipfrac`` include the demo steps (stored log-prob 0), so they
are large by design and ``online.target_kl`` would stop updates early: leave it None.

Every finished env episode is offered to the store (cut after its last positive reward): a
reward demo if its return reaches the reward threshold, else a value demo ranked by its max
``V``. The human demos come from ``ppod.demos_dir`` (``rlstore train --algo ppod --demos DIR``;
default for ``rlstore/KeyDoor-v0``: its shipped demo); ``ppod.supplementary_demos_dir`` is
polled after every update for ``.npz`` demos added by hand; the top
``num_agent_demos_to_save`` agent reward demos are written to ``ppod.target_demos_dir``
(default ``<run folder>/demos``) every ``save_demos_every`` updates and at the end.

Checkpoints are PPO's plus ``ppod_*`` files (:mod:`rlstore.agents.ppod_checkpoint`): the store
(demos, rho / phi, thresholds, RNG), the mixer (replays in progress, open episodes) and the
real envs' observations, so a resumed run continues bit for bit on CPU.

Example::

    from rlstore.agents.ppod import PPODTrainConfig, train_ppod

    cfg = PPODTrainConfig.from_dict({"environment": {"env_id": "rlstore/KeyDoor-v0"},
                                     "run": {"track": False}})
    agent, stats = train_ppod(cfg)
    stats.evaluations[-1]  # (env step, deterministic success rate)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator

from rlstore.agents.config import BaseConfig, folder_runner
from rlstore.agents.envs import make_vector_env
from rlstore.agents.networks import PPOAgent
from rlstore.agents.ppo import TrainResult, build_learner, ppo_update
from rlstore.agents.ppo_config import TrainConfig
from rlstore.agents.rollout import (
    RolloutState,
    evaluate_in_run,
    finish_stats,
    log_update,
    run_rollout,
)
from rlstore.agents.run import TrainingRun, evaluation_due
from rlstore.agents.run_checkpoint import checkpoint_schedule
from rlstore.buffers.demo_files import load_npz_demo, save_npz_demo
from rlstore.buffers.demos import Demo, DemoMixer, DemoStore
from rlstore.envs.keydoor import DEMO_FILE, KEYDOOR_ID
from rlstore.errors import ConfigError

__all__ = [
    "CLI_KEYS",
    "DEFAULT_CONFIGS",
    "DemoRollout",
    "PPODConfig",
    "PPODTrainConfig",
    "load_config",
    "runner",
    "train_ppod",
]

DEFAULT_CONFIGS: dict[str, str] = {
    KEYDOOR_ID: "ppod_fc_rlstore_KeyDoor-v0.yaml",  # the first: the fallback of other envs
    "MountainCar-v0": "ppod_fc_MountainCar-v0.yaml",
}
"""Env id -> packaged config in ``rlstore/configs/`` (``/`` in an id becomes ``_``)."""
CLI_KEYS: dict[str, str | None] = {"demos": "ppod.demos_dir"}
"""``rlstore train`` flags of PPO+D beyond PPO's: ``--demos DIR``."""


class PPODConfig(BaseConfig):
    """PPO+D's demo replay (PyTorchRL ``PPODBuffer`` arguments, its defaults)."""

    rho: float = Field(0.1, ge=0, le=1)
    """Probability that a new episode replays a reward demo (annealed up as phi goes down)."""
    phi: float = Field(0.3, ge=0, le=1)
    """Probability that a new episode replays a value demo."""
    alpha: float = Field(10.0, gt=0)
    """Value demos are drawn with ``P ~ max(MaxValue, 0) ** alpha``."""
    capacity: int = Field(51, ge=1)
    """Most demos kept (reward + value; ``total_buffer_demo_capacity``)."""
    reward_threshold: float | None = None
    """Least return of a reward demo (None: -inf; the human demos raise it to their minimum)."""
    demos_dir: str | None = None
    """Folder of the human ``.npz`` demos; None: the shipped demo of ``rlstore/KeyDoor-v0``."""
    frame_skip: int = Field(1, ge=1)
    """The env's frame skip: a demo file recorded with another ``FrameSkip`` is refused."""
    supplementary_demos_dir: str | None = None
    """Folder polled after every update for new ``.npz`` demos (added as agent reward demos)."""
    target_demos_dir: str | None = None
    """Where the top agent reward demos are saved; None: ``<run folder>/demos``."""
    num_agent_demos_to_save: int = Field(10, ge=0)
    """Agent reward demos saved (the best by return)."""
    save_demos_every: int = Field(10, ge=1)
    """Updates between two saves of the agent demos (also saved after the last update)."""

    @model_validator(mode="after")
    def _check_sum(self) -> PPODConfig:
        if self.rho + self.phi > 1:
            raise ValueError(f"rho + phi: expected <= 1, got {self.rho} + {self.phi}")
        return self


class PPODTrainConfig(TrainConfig):
    """A PPO run (:class:`~rlstore.agents.ppo_config.TrainConfig`) plus its ``ppod`` section."""

    ppod: PPODConfig = Field(default_factory=PPODConfig)
    """Demo replay settings."""

    def ppo_config(self) -> TrainConfig:
        """The PPO part (what PPO checkpoints record and load)."""
        return TrainConfig.model_validate(self.model_dump(exclude={"ppod"}))


load_config = PPODTrainConfig.from_file
"""A :class:`PPODTrainConfig` from a YAML or JSON file (ConfigError naming the bad key)."""


def human_demos(cfg: PPODTrainConfig, envs: Any = None) -> list[Demo]:
    """The human demos of ``cfg`` (every ``*.npz`` of ``ppod.demos_dir``, sorted by name),
    checked against the spaces of the vector env ``envs`` if given."""
    pc = cfg.ppod
    if pc.demos_dir is None:
        if cfg.environment.env_id != KEYDOOR_ID:
            raise ConfigError(
                f"ppod.demos_dir: expected a folder of .npz demos for "
                f"{cfg.environment.env_id!r} (--demos DIR; rlstore demo-record writes one), "
                f"got None"
            )
        files = [DEMO_FILE]
    elif not Path(pc.demos_dir).is_dir():
        raise ConfigError(f"ppod.demos_dir: expected a folder of .npz demos, got {pc.demos_dir!r}"
                          " (no such folder)")  # fmt: skip
    else:
        files = sorted(Path(pc.demos_dir).glob("*.npz"))
        if not files:
            raise ConfigError(f"ppod.demos_dir: expected .npz demos in {pc.demos_dir!r}, got none")
    return [load_npz_demo(f, pc.frame_skip, _spaces(envs)) for f in files]


def _spaces(envs: Any) -> tuple[Any, Any] | None:
    """``(observation_space, action_space)`` of one sub-env of ``envs`` (None: None)."""
    return None if envs is None else (envs.single_observation_space, envs.single_action_space)


class DemoRollout:
    """The collection hook of PPO+D (``run_rollout(..., mix=self)``) and the demo folders.

    Args:
        store: the demo store (human demos added).
        agent: the PPO agent (action offsets, device).
        envs: the vector env of the rollout; its sub-envs are reset one by one when a demo ends
            and the env is drawn next (SyncVectorEnv ``envs.envs``).
        env_obs: ``(N, *obs_shape)`` raw observations the envs were reset to.
        cfg: the ``ppod`` section; ``target_dir`` the resolved target folder (None: no saving).
    """

    def __init__(
        self,
        store: DemoStore,
        agent: PPOAgent,
        envs: Any,
        env_obs: np.ndarray,
        cfg: PPODConfig,
        target_dir: Path | None,
    ) -> None:
        self.store, self.agent, self.envs, self.cfg = store, agent, envs, cfg
        self.target_dir = target_dir
        self.env_obs = np.array(env_obs)
        has_subs = getattr(envs, "envs", None) is not None
        self.mixer = DemoMixer(store, envs.num_envs, reset_env=self._reset if has_subs else None)
        self.mixer.reset(self.env_obs)
        self.seen: set[str] = set()  # supplementary files already added

    def _reset(self, i: int) -> np.ndarray:
        obs, _ = self.envs.envs[i].reset()
        self.env_obs[i] = obs
        return np.asarray(obs)

    def __call__(
        self,
        action: torch.Tensor,
        logp: torch.Tensor,
        value: torch.Tensor,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        next_raw: np.ndarray,
    ) -> tuple[Any, ...]:
        """Mix one vector step (see :func:`rlstore.agents.rollout.run_rollout`)."""
        self.env_obs = np.array(next_raw)  # before the step: resets overwrite their rows
        m = self.mixer.step(
            self.agent.env_action(action), reward, terminated, truncated, next_raw,
            value=value.detach().cpu().numpy(),
        )  # fmt: skip
        demo = m.from_demo
        if demo.any():
            rows = torch.as_tensor(demo, device=action.device)
            demo_action = torch.as_tensor(m.action - self.agent.action_start)
            at = rows.reshape(-1, *[1] * (action.ndim - 1))  # (N, 1, ...) over action dims
            action = torch.where(at, demo_action.to(action.device, action.dtype), action)
            logp = torch.where(rows, torch.zeros_like(logp), logp)
        reward = np.where(demo, m.reward, reward)
        return action, logp, reward, m.terminated, m.truncated, m.next_obs, demo

    def real_obs(self) -> torch.Tensor:
        """The real envs' current observations as the agent sees them (for env checkpoints)."""
        a = self.agent
        return a.normalizer.obs(a.preprocess(self.env_obs, a.device), update=False)

    def poll_supplementary(self) -> int:
        """Add the new ``.npz`` demos of the supplementary folder; returns how many."""
        d = self.cfg.supplementary_demos_dir
        new = (
            []
            if d is None
            else [p for p in sorted(Path(d).glob("*.npz")) if p.name not in self.seen]
        )
        for p in new:
            self.store.add_bonus(load_npz_demo(p, self.cfg.frame_skip, _spaces(self.envs)))
            self.seen.add(p.name)
        return len(new)

    def save_demos(self) -> list[Path]:
        """Write the top agent reward demos as ``reward_demo_NNN.npz`` (best first) into the
        target folder, replacing those of the previous save; returns the paths."""
        if self.target_dir is None:
            return []
        top = self.store.top_demos("reward", self.cfg.num_agent_demos_to_save)
        if not top:
            return []
        self.target_dir.mkdir(parents=True, exist_ok=True)
        paths = [
            save_npz_demo(self.target_dir / f"reward_demo_{k:03d}.npz", d.observations,
                          d.actions, d.rewards, self.cfg.frame_skip)
            for k, d in enumerate(top)
        ]  # fmt: skip
        for old in set(self.target_dir.glob("reward_demo_*.npz")) - set(paths):
            old.unlink()
        return paths

    def progress(self) -> dict[str, str]:
        """Progress-bar fields: rho, phi, reward threshold, reward / value demos."""
        s = self.store
        return {"rho": f"{s.rho:.2f}", "phi": f"{s.phi:.2f}",
                "thr": f"{s.reward_threshold:g}",
                "demos": f"{len(s.reward_demos)}r/{len(s.value_demos)}v"}  # fmt: skip

    def scalars(self) -> dict[str, float]:
        """Logged as ``ppod/*`` and stored in each update's entry of ``stats.updates``."""
        s = self.store
        return {"ppod/rho": s.rho, "ppod/phi": s.phi, "ppod/reward_threshold": s.reward_threshold,
                "ppod/reward_demos": float(len(s.reward_demos)),
                "ppod/value_demos": float(len(s.value_demos))}  # fmt: skip


def train_ppod(
    cfg: PPODTrainConfig, *, run_dir: str | Path | None = None, resume: bool = False
) -> TrainResult:
    """Train PPO+D; returns ``(agent, stats)`` like :func:`~rlstore.agents.ppo.
    train_ppo` (evaluation, logging and checkpoints as there; ``run_dir`` None writes nothing,
    the demos included unless ``ppod.target_demos_dir`` is set)."""
    from rlstore.agents.ppod_checkpoint import restore, save

    oc, rc, pc = cfg.online, cfg.run, cfg.ppod
    with TrainingRun(rc, run_dir) as run:
        stats, run_dir = run.stats, run.run_dir
        envs = make_vector_env(cfg.environment, oc.num_envs)
        try:
            demos = human_demos(cfg, envs)
            agent, optimizer, scheduler, buffer = build_learner(cfg, envs)
            num_updates = oc.num_updates
            store = DemoStore(pc.capacity, rho=pc.rho, phi=pc.phi, alpha=pc.alpha,
                              reward_threshold=pc.reward_threshold, seed=rc.seed)  # fmt: skip
            for d in demos:
                store.add_initial(d)
            env_obs, _ = envs.reset(seed=rc.seed)  # RolloutState.start resets to the same
            state = RolloutState.start(agent, envs, rc.seed)
            target = Path(pc.target_demos_dir) if pc.target_demos_dir else None
            if target is None and run_dir is not None:
                target = run_dir / "demos"
            mix = DemoRollout(store, agent, envs, env_obs, pc, target)
            ckpt_dir, start_update, ckpt_num = run.ckpt_dir, 0, 0
            if resume:
                start_update, ckpt_num, stats.updates = restore(
                    ckpt_dir, cfg, agent, optimizer, scheduler, buffer, state, envs, mix
                )
            logger = run.start(num_updates * oc.batch_size, state.global_step,
                               f"PPO+D {cfg.environment.env_id}", cfg.to_dict())  # fmt: skip
            n_logged = len(state.episode_returns)
            ckpt_at = checkpoint_schedule(num_updates, oc.num_checkpoints) if ckpt_dir else set()
            for update in range(start_update, num_updates):
                run_rollout(agent, buffer, oc.num_steps, envs, state, mix=mix)
                info = ppo_update(agent, buffer, oc, optimizer, scheduler)
                buffer.reset()
                mix.poll_supplementary()
                if (update + 1) % pc.save_demos_every == 0 or update + 1 == num_updates:
                    mix.save_demos()
                step = state.global_step
                info.update(global_step=float(step), sps=run.sps(step), **mix.scalars())
                if evaluation_due(rc, step, step - oc.batch_size, update + 1 == num_updates):
                    info["eval/mean_return"] = evaluate_in_run(agent, cfg.environment, rc,
                                                               stats, logger, step)  # fmt: skip
                stats.updates.append(info)
                logger.scalars({k: v for k, v in info.items() if k.startswith("ppod/")}, step)
                n_logged = log_update(logger, update + 1, state, info, n_logged,
                                      **mix.progress())  # fmt: skip
                if ckpt_dir is not None and update + 1 in ckpt_at:
                    ckpt_num = save(ckpt_dir, ckpt_num, cfg, agent, optimizer, scheduler, buffer,
                                    state, envs, mix, update + 1, stats.updates)  # fmt: skip
        finally:
            envs.close()
    title = f"PPO+D ({cfg.agent}) on {cfg.environment.env_id}, seed {rc.seed}"
    finish_stats(run, state, num_updates, title)
    return TrainResult(agent, stats)


runner = folder_runner(train_ppod)
"""``runner(cfg, *, run_dir, resume)``: ``rlstore train --algo ppod``
(:func:`rlstore.agents.config.folder_runner`)."""
