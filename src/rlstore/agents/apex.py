"""Ape-X-style DQN on Ray (Horgan et al. 2018): distributed prioritized replay, one learner.

``K`` collectors (:mod:`rlstore.distributed.collector`) act epsilon-greedily with a CPU copy of
the Q-networks, collector ``i`` with its own fixed exploration rate (Ape-X, section 4)::

    eps_i = eps_base ** (1 + eps_alpha * i / (K - 1))        # 0.4 ** (1 + 7 i / (K - 1))

Each computes the initial priorities of its fragment, ``|G_t - Q(s_t, a_t)|`` with the n-step
return ``G_t`` of :func:`rlstore.returns.nstep` (windows cut at episode ends and at the
fragment's end, bootstrapped with the double-DQN value of the successor), and pushes the
fragment with them to :class:`~rlstore.distributed.ReplayShards`: ``S`` shards, each an
:class:`~rlstore.NStepReplay` over a prioritized :class:`~rlstore.ReplayBuffer`. A
:class:`~rlstore.distributed.SampleToInsertRatio` rate limiter keeps the learner's samples per
inserted transition near ``samples_per_insert`` (the faster side waits).

The learner (this process) draws ``batches_per_call`` prioritized batches per call across the
shards (importance weights normalised over all shards, ``beta`` annealed to 1 over the run),
takes one double-DQN step on each with :func:`rlstore.agents.dqn.td_step` (the networks and the
loss are DQN's: :class:`~rlstore.agents.dqn.DQNAgent`), sends the new priorities back, copies
the target network every ``target_update_interval`` learner steps and publishes its weights
every ``publish_interval`` steps. Run folder, progress bar, curve, evaluation (greedy) and
checkpoints are the shared ones (:mod:`rlstore.agents.run`, :mod:`rlstore.agents.async_run`).

Example::

    from rlstore.agents.apex import ApexTrainConfig, train_apex

    cfg = ApexTrainConfig.from_dict({"run": {"track": False}, "apex": {"num_shards": 2}})
    agent, stats = train_apex(cfg)       # starts a local Ray instance (loopback only)
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field, model_validator
from typing_extensions import Self

from rlstore.agents.async_run import LearnerConfig, LearnerRun
from rlstore.agents.config import AlgorithmTrainConfig, folder_runner
from rlstore.agents.dqn import DQNAgent, DQNConfig, EnvInfo, QLearningConfig, td_step, td_targets
from rlstore.agents.envs import make_vector_env
from rlstore.agents.run import TrainingRun, TrainStats, adam, safe_name
from rlstore.buffers.nstep import NStepBatch, NStepReplay
from rlstore.buffers.replay import ReplayBuffer
from rlstore.returns import nstep
from rlstore.samplers import LinearSchedule

__all__ = [
    "CLI_KEYS",
    "DEFAULT_CONFIGS",
    "ApexConfig",
    "ApexTrainConfig",
    "ApexPolicy",
    "collector_epsilon",
    "load_config",
    "runner",
    "train_apex",
]

DEFAULT_CONFIGS: dict[str, str] = {"CartPole-v1": "apex_CartPole-v1.yaml"}
"""Env id -> packaged config file in ``rlstore/configs/``."""


class ApexConfig(LearnerConfig, QLearningConfig):
    """Ape-X hyper-parameters (after :class:`QLearningConfig`'s and :class:`LearnerConfig`'s;
    ``per_beta`` is annealed over the run's env steps); strict types (no strings or bools for
    numbers)."""

    total_timesteps: int = Field(100_000, ge=1)
    """Env steps collected by all collectors together."""
    num_shards: int = Field(1, ge=1)
    """Replay shard actors (S)."""
    learning_starts: int = Field(1000, ge=1)
    """Transitions the shards hold together before the learner samples (at most the replay's
    capacity)."""
    samples_per_insert: float = Field(16.0, gt=0)
    """Target sampled transitions per inserted one (rate limiter)."""
    batches_per_call: int = Field(8, ge=1)
    """Batches drawn per call to the shards (one gradient step each)."""
    learning_rate: float = Field(5e-4, gt=0)
    """Adam learning rate (constant)."""
    n_step: int = Field(3, ge=1)
    """n-step returns."""
    target_update_interval: int = Field(500, ge=1)
    """Learner steps between target-network copies."""
    publish_interval: int = Field(16, ge=1)
    """Learner steps between weight publications to the collectors."""
    eps_base: float = Field(0.4, ge=0, le=1)
    """Ape-X exploration: ``eps_i = eps_base ** (1 + eps_alpha * i / (K - 1))``."""
    eps_alpha: float = Field(7.0, ge=0)
    """Spread of the collectors' exploration rates."""
    replay_checkpoint_s: float = Field(60.0, gt=0)
    """Seconds between the shards' checkpoints in ``<run>/replay`` (a restarted shard, or a
    resumed run, restores from them)."""

    @property
    def shard_capacity(self) -> int:
        """Transitions one shard holds: ``buffer_size / num_shards``, at least a fragment."""
        return max(self.buffer_size // self.num_shards, self.num_envs * self.fragment_length)

    @model_validator(mode="after")
    def _check_learning_starts(self) -> Self:
        if self.learning_starts > self.shard_capacity * self.num_shards:
            raise ValueError(
                f"learning_starts: expected <= the replay's {self.shard_capacity * self.num_shards}"
                f" transitions ({self.num_shards} shards of {self.shard_capacity}; buffer_size), "
                f"got {self.learning_starts} (the learner would never start)"
            )
        return self

    def dqn(self) -> DQNConfig:
        """The :class:`DQNConfig` of the same networks (what :class:`DQNAgent` is built from)."""
        return DQNConfig(hidden_sizes=self.hidden_sizes, dueling=self.dueling, encoder=self.encoder,
                         double_q=self.double_q, gamma=self.gamma, n_step=self.n_step)  # fmt: skip


class ApexTrainConfig(AlgorithmTrainConfig):
    """A whole Ape-X run: ``run``, ``environment`` (Box observations, Discrete actions) and
    ``apex``."""

    apex: ApexConfig = Field(default_factory=ApexConfig)
    """Ape-X hyper-parameters."""


load_config = ApexTrainConfig.from_file
CLI_KEYS: dict[str, str | None] = {
    **ApexTrainConfig.cli_keys(),
    "num_collectors": "apex.num_collectors",
    "num_shards": "apex.num_shards",
    "address": "apex.address",
}
"""``rlstore train`` flags -> keys of this config (None: refused for Ape-X)."""


def collector_epsilon(index: int, num_collectors: int, base: float, alpha: float) -> float:
    """Ape-X's exploration rate of collector ``index`` of ``num_collectors`` (``base`` for one)."""
    return float(base ** (1 + alpha * index / max(num_collectors - 1, 1)))


# ----------------------------------------------------------------- collector side


def _agent(envs: Any, ac: ApexConfig) -> DQNAgent:
    info = EnvInfo(None, envs.single_observation_space, envs.single_action_space)
    return DQNAgent(info, ac.dqn())


class ApexPolicy:
    """The collectors' Q-networks: epsilon-greedy actions, initial n-step priorities."""

    def __init__(self, index: int, envs: gym.vector.VectorEnv, ac: ApexConfig) -> None:
        self.agent, self.ac = _agent(envs, ac), ac
        self.epsilon = collector_epsilon(index, ac.num_collectors, ac.eps_base, ac.eps_alpha)
        self.rng = torch.Generator().manual_seed(index)

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        from rlstore.distributed.collector import load_weights

        load_weights(self.agent, weights)

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        greedy = self.agent(obs).argmax(1)
        explore = torch.rand(len(obs), generator=self.rng) < self.epsilon
        random = torch.randint(self.agent.num_actions, (len(obs),), generator=self.rng)
        return torch.where(explore, random, greedy).numpy() + self.agent.action_start, {}

    @torch.no_grad()
    def finish(self, fragment: dict[str, Any], last_obs: np.ndarray) -> dict[str, Any]:
        return {**fragment, "priorities": initial_priorities(self.agent, fragment, self.ac)}


@torch.no_grad()
def initial_priorities(agent: DQNAgent, fragment: dict[str, Any], ac: ApexConfig) -> np.ndarray:
    """``|G_t - Q(s_t, a_t)|`` ``(T, N)`` of a fragment (see the module docstring; its actions
    are the env's, ``action_start`` + Q-value index)."""
    T, N = fragment["reward"].shape
    flat = {k: torch.as_tensor(fragment[k]).reshape(T * N, *fragment[k].shape[2:])
            for k in ("obs", "next_obs", "action")}  # fmt: skip
    flat["action"] = flat["action"] - agent.action_start
    ones = torch.ones(T * N)
    one_step = NStepBatch(flat["obs"], flat["action"], torch.zeros(T * N), flat["next_obs"],
                          ones, ones.bool(), ones.bool(), ones.long(), {}, ones, ones)  # fmt: skip
    next_v = td_targets(agent, one_step, ac.double_q).reshape(T, N).numpy()  # 0 + 1 * V(s')
    g = nstep(fragment["reward"], next_v, fragment["terminated"], fragment["truncated"],
              n=ac.n_step, gamma=ac.gamma)  # fmt: skip
    q = agent(flat["obs"]).gather(1, flat["action"].long().view(-1, 1)).reshape(T, N)
    return np.abs(g - q.numpy()).astype(np.float64)


def make_replay(ac: ApexConfig, seed: int, shard: int) -> NStepReplay:
    """Shard ``shard``'s buffer: an n-step view over a prioritized ring of ``buffer_size / S``
    (sampler seed ``seed + shard``; the learner passes ``beta``)."""
    sampler = {"kind": "prioritized", "alpha": ac.per_alpha, "eps": ac.per_eps}
    buffer = ReplayBuffer(
        ac.shard_capacity, num_envs=ac.num_envs, seed=seed + shard, sampler=sampler
    )
    return NStepReplay(buffer, n=ac.n_step, gamma=ac.gamma)


def _batch(b: Any, device: torch.device, action_start: int) -> NStepBatch:
    """A :class:`~rlstore.distributed.ShardBatch` (env actions) as the torch :class:`NStepBatch`
    of DQN (Q-value indices: env action - ``action_start``)."""

    def t(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x), device=device)

    disc = t(b.discount).float()
    zero, action = torch.zeros_like(disc), t(b.action) - action_start
    return NStepBatch(t(b.obs), action, t(b.reward).float(), t(b.next_obs), disc,
                      t(b.terminated), t(b.truncated), zero.long(), {}, zero.long(),
                      t(b.weights).float())  # fmt: skip


# ----------------------------------------------------------------- training


def train_apex(
    cfg: ApexTrainConfig, *, run_dir: str | Path | None = None, resume: bool = False
) -> tuple[DQNAgent, TrainStats]:
    """Train Ape-X DQN on Ray; returns ``(agent, stats)`` (``stats.global_step``: env steps
    collected, ``num_updates``: learner gradient steps; training episodes of every collector,
    whatever its epsilon: judge the policy by the greedy evaluations).

    Args:
        cfg: the run's config. run_dir: run folder (TensorBoard, ``faults.log``, checkpoints,
            ``learning_curve.png``, the shards' checkpoints in ``replay/``); None writes nothing.
            resume: continue from the latest checkpoint there (networks, optimizer, counters,
            history; the replay from its shards' last checkpoints; fresh collectors).
    """
    from rlstore.distributed import ReplayShards, SampleToInsertRatio, start_ray

    rc, ac = cfg.run, cfg.apex
    with TrainingRun(rc, run_dir) as run:
        probe = make_vector_env(cfg.environment, 1)
        try:
            agent = _agent(probe, ac).to(rc.device)
        finally:
            probe.close()
        optimizer = adam(agent.q.parameters(), ac.learning_rate)
        beta = LinearSchedule(ac.per_beta, 1.0, ac.total_timesteps)
        learner = LearnerRun(run, cfg, "Ape-X", agent, optimizer, resume)
        c = learner.counters
        start_ray(ac.address)
        shards = pool = None
        try:
            per_shard = max(ac.learning_starts // ac.num_shards, 1)
            limiter = SampleToInsertRatio(ac.samples_per_insert, per_shard,
                                          max(ac.samples_per_insert * ac.batch_size
                                              * ac.batches_per_call, 1.0) * 2)  # fmt: skip
            replay_dir = None if run.run_dir is None else run.run_dir / "replay"
            shards = ReplayShards(functools.partial(make_replay, ac, rc.seed), ac.num_shards,
                                  name=f"apex-{safe_name(rc.exp_name)}", rate_limiter=limiter,
                                  timeout_s=ac.timeout_s, num_cpus=ac.collector_cpus,
                                  checkpoint_dir=replay_dir,
                                  checkpoint_every_s=ac.replay_checkpoint_s)  # fmt: skip
            pool = learner.start_collectors(functools.partial(ApexPolicy, ac=ac), shards)
            while not learner.done:
                step = learner.collect(pool)
                if shards.size() < ac.learning_starts:
                    time.sleep(0.1)
                    continue
                losses, qs, ids, tds = [], [], [], []
                for b in shards.sample_many(ac.batches_per_call, ac.batch_size, beta(step)):
                    batch = _batch(b, agent.device, agent.action_start)
                    loss, q, td = td_step(agent, optimizer, batch, ac.double_q, ac.max_grad_norm)
                    losses.append(loss)
                    qs.append(q)
                    ids.append(b.ids)
                    tds.append(td)
                    c["num_updates"] += 1
                    if c["num_updates"] % ac.target_update_interval == 0:
                        agent.update_target(1.0)
                    if c["num_updates"] % ac.publish_interval == 0:
                        learner.publish(pool)
                shards.update_priorities(np.concatenate(ids), np.concatenate(tds))
                row = {"td_loss": torch.stack(losses).mean().item(),
                       "q_values": torch.stack(qs).mean().item(), "global_step": float(step),
                       "sps": run.sps(step), "lost_adds": float(pool.lost)}  # fmt: skip
                scalars = {"losses/td_loss": row["td_loss"], "losses/q_values": row["q_values"],
                           "charts/SPS": row["sps"], "charts/beta": beta(step)}  # fmt: skip
                run.update(step, row, scalars)
                learner.after_update(agent.act)
        finally:
            if pool is not None:
                pool.close()
            if shards is not None:
                shards.close()
    title = (f"Ape-X DQN ({ac.num_collectors} collectors, {ac.num_shards} shards) on "
             f"{cfg.environment.env_id}, seed {rc.seed}")  # fmt: skip
    return agent, run.finish(learner.step, c["num_updates"], title)


runner = folder_runner(train_apex)
