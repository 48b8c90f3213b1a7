"""IMPALA-style asynchronous actor-learner on Ray (Espeholt et al. 2018), readable top to bottom.

``K`` collectors (:mod:`rlstore.distributed.collector`) each run ``num_envs`` envs with a CPU
snapshot of the policy and push fragments of ``fragment_length`` steps, with the behaviour
log-probs ``log mu(a_t|x_t)`` and the policy version that acted, into a bounded
:class:`~rlstore.distributed.collector.FragmentQueue` (full: the collectors wait). The learner
(this process) repeatedly:

1. takes ``fragments_per_batch`` fragments in arrival order and lays them side by side in a
   :class:`~rlstore.buffers.rollout.RolloutBuffer` of ``T x (fragments * num_envs)`` steps
   (truncated steps keep their true final observation);
2. corrects the policy lag with V-trace: :meth:`RolloutBuffer.compute_vtrace` re-evaluates the
   stored steps with the current networks and calls :func:`rlstore.returns.vtrace`
   (``rho_t = min(rho_bar, pi/mu)``, ``c_t = lam * min(c_bar, pi/mu)``);
3. takes gradient steps on the actor-critic loss over its minibatches::

       loss = -mean(pg_adv * log pi(a|x)) + vf_coef * 0.5 * mean((vs - V(x))**2)
              - ent_coef * mean(entropy(pi(.|x)))

   (``pg_adv``, ``vs`` constants), gradients clipped to ``max_grad_norm``, Adam with a learning
   rate decaying linearly over the run's env steps;
4. publishes the new weights (one ``ray.put``, versioned) that the collectors pull before their
   next fragment, restarts dead collectors, logs the finished episodes.

The networks are the PPO FC agent's (:class:`rlstore.agents.networks.FCAgent`: separate tanh
MLPs for actor and critic); Discrete actions. Run folder, progress bar, curve, evaluation and
checkpoints are the shared ones (:mod:`rlstore.agents.run`, :mod:`rlstore.agents.async_run`).

Example::

    from rlstore.agents.impala import ImpalaTrainConfig, train_impala

    cfg = ImpalaTrainConfig.from_dict({"run": {"track": False}, "impala": {"num_collectors": 2}})
    agent, stats = train_impala(cfg)     # starts a local Ray instance (loopback only)
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field, model_validator

from rlstore.agents.async_run import LearnerConfig, LearnerRun
from rlstore.agents.config import AlgorithmTrainConfig, folder_runner
from rlstore.agents.envs import make_vector_env
from rlstore.agents.networks import FCAgent
from rlstore.agents.run import TrainingRun, TrainStats, adam
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError, RLStoreError

__all__ = [
    "CLI_KEYS",
    "DEFAULT_CONFIGS",
    "ImpalaConfig",
    "ImpalaTrainConfig",
    "ImpalaPolicy",
    "load_config",
    "runner",
    "train_impala",
    "vtrace_update",
]

DEFAULT_CONFIGS: dict[str, str] = {
    "CartPole-v1": "impala_CartPole-v1.yaml",
    "Acrobot-v1": "impala_Acrobot-v1.yaml",
}
"""Env id -> packaged config file in ``rlstore/configs/``."""


class ImpalaConfig(LearnerConfig):
    """IMPALA hyper-parameters (after :class:`LearnerConfig`'s); strict types (no strings or
    bools for numbers)."""

    total_timesteps: int = Field(250_000, ge=1)
    """Env steps collected by all collectors together."""
    fragments_per_batch: int = Field(2, ge=1)
    """Fragments per learner update (laid side by side)."""
    queue_size: int = Field(4, ge=1)
    """Fragments the queue holds before collectors wait (bounds the policy lag)."""
    learning_rate: float = Field(1e-3, gt=0)
    """Initial Adam learning rate."""
    end_learning_rate: float = Field(0.0, ge=0)
    """Learning rate at the end of the run (linear decay over env steps)."""
    vtrace_lambda: float = Field(1.0, ge=0, le=1)
    """V-trace trace lambda (multiplies c)."""
    rho_bar: float = Field(1.0, gt=0)
    """Clip of the importance weights in the value targets."""
    c_bar: float = Field(1.0, gt=0)
    """Clip of the trace-cutting weights."""
    pg_rho_bar: float = Field(1.0, gt=0)
    """Clip of the importance weights in the policy-gradient advantages."""
    ent_coef: float = Field(0.01, ge=0)
    """Entropy bonus coefficient."""
    vf_coef: float = Field(0.5, ge=0)
    """Value-loss coefficient."""
    max_grad_norm: float = Field(40.0, gt=0)
    """Global gradient-norm clip (IMPALA's 40: a tight clip lets the critic's large gradients
    scale the actor's down, which made CartPole runs collapse)."""
    num_minibatches: int = Field(1, ge=1)
    """Gradient steps per update (minibatches of the batch, each step once)."""
    advantage_normalization: Literal["none", "batch", "minibatch"] = "batch"
    """Normalization of the policy-gradient advantages (``RolloutBuffer`` semantics)."""
    hidden_size: int = Field(64, ge=1)
    """Width of the actor's and the critic's two tanh layers."""

    @model_validator(mode="after")
    def _check(self) -> ImpalaConfig:
        steps = self.fragment_length * self.fragments_per_batch * self.num_envs
        if steps % self.num_minibatches:
            raise ValueError(
                f"num_minibatches: expected a divisor of the {steps} steps of a batch "
                f"(fragment_length * fragments_per_batch * num_envs), got {self.num_minibatches}"
            )
        return self


class ImpalaTrainConfig(AlgorithmTrainConfig):
    """A whole IMPALA run: ``run``, ``environment`` (Discrete actions), ``impala``."""

    impala: ImpalaConfig = Field(default_factory=ImpalaConfig)
    """IMPALA hyper-parameters."""


load_config = ImpalaTrainConfig.from_file
CLI_KEYS: dict[str, str | None] = {
    **ImpalaTrainConfig.cli_keys(),
    "num_collectors": "impala.num_collectors",
    "address": "impala.address",
    "ent_coef": "impala.ent_coef",
    "num_shards": None,  # fragments go through a queue, not replay shards
}
"""``rlstore train`` flags -> keys of this config (None: refused for IMPALA)."""


# ----------------------------------------------------------------- collector side


def _heads(agent: FCAgent, obs: Any) -> tuple[Any, torch.Tensor]:
    """``(pi(.|obs), V(obs))`` for preprocessed observations with any leading axes."""
    x = obs.reshape(-1, agent.obs_dim)
    lead = obs.shape[: obs.dim() - len(agent.obs_shape)]
    return agent.distribution(agent.actor(x).reshape(*lead, -1)), agent.critic(x).reshape(lead)


class ImpalaPolicy:
    """The collectors' CPU policy snapshot: samples actions from pi and records ``logp``."""

    def __init__(self, index: int, envs: gym.vector.VectorEnv, hidden_size: int) -> None:
        self.agent, self.index, self.version = FCAgent(envs, hidden_dim=hidden_size), index, -1

    def load(self, weights: dict[str, np.ndarray], version: int) -> None:
        from rlstore.distributed.collector import load_weights

        load_weights(self.agent, weights)
        self.version = version

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        x = self.agent.preprocess(obs, self.agent.device)
        dist = self.agent.distribution(self.agent.actor(x.reshape(len(x), -1)))
        action = dist.sample()
        return self.agent.env_action(action), {"logp": dist.log_prob(action).numpy()}

    def finish(self, fragment: dict[str, Any], last_obs: np.ndarray) -> dict[str, Any]:
        return {**fragment, "last_obs": last_obs.copy(), "version": self.version,
                "collector": self.index}  # fmt: skip


# ----------------------------------------------------------------- learner step


def vtrace_update(
    agent: FCAgent,
    optimizer: torch.optim.Optimizer,
    buffer: RolloutBuffer,
    fragments: list[dict[str, Any]],
    ic: ImpalaConfig,
) -> dict[str, float]:
    """One learner update on ``fragments`` (each ``(T, N, ...)``, see the module docstring);
    ``buffer`` is a ``RolloutBuffer(T, len(fragments) * N)``. Returns the mean losses."""

    def cat(key: str) -> np.ndarray:
        return np.concatenate([f[key] for f in fragments], axis=1)

    prep = functools.partial(agent.preprocess, device=agent.device)
    obs, nxt, action, logp = cat("obs"), cat("next_obs"), cat("action"), cat("logp")
    reward, term, trunc = cat("reward"), cat("terminated"), cat("truncated")
    zeros = torch.zeros(obs.shape[1], device=agent.device)
    buffer.reset()
    actions = torch.as_tensor(action - agent.action_start, device=agent.device)  # env -> index
    for t in range(len(obs)):  # values / final values: unused by V-trace, which re-evaluates
        buffer.add(prep(obs[t]), actions[t], logp[t], zeros, reward[t], term[t], trunc[t],
                   final_value=zeros, final_obs=prep(nxt[t]))  # fmt: skip

    def current(o: Any, a: torch.Tensor, _hidden: Any) -> tuple[Any, Any]:
        dist, value = _heads(agent, o)
        return dist.log_prob(a), value

    with torch.no_grad():
        last_obs = np.concatenate([f["last_obs"] for f in fragments])
        last_value = _heads(agent, prep(last_obs))[1]
    buffer.compute_vtrace(current, last_value, lam=ic.vtrace_lambda, rho_bar=ic.rho_bar,
                          c_bar=ic.c_bar, pg_rho_bar=ic.pg_rho_bar)  # fmt: skip
    sums = np.zeros(4)
    for mb in buffer.minibatches(num_minibatches=ic.num_minibatches):
        dist, value = _heads(agent, mb.obs)
        pg_loss = -(mb.advantages * dist.log_prob(mb.actions)).mean()
        v_loss = 0.5 * ((mb.returns - value) ** 2).mean()
        entropy = dist.entropy().mean()
        loss = pg_loss + ic.vf_coef * v_loss - ic.ent_coef * entropy
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), ic.max_grad_norm)
        optimizer.step()
        sums += [x.item() for x in (loss, pg_loss, v_loss, entropy)]
    means = sums / ic.num_minibatches
    return dict(zip(("loss", "pg_loss", "v_loss", "entropy"), means.tolist(), strict=True))


# ----------------------------------------------------------------- training


def train_impala(
    cfg: ImpalaTrainConfig, *, run_dir: str | Path | None = None, resume: bool = False
) -> tuple[FCAgent, TrainStats]:
    """Train IMPALA on Ray; returns ``(agent, stats)`` (``stats.global_step``: env steps
    collected, ``num_updates``: learner updates).

    Args:
        cfg: the run's config. run_dir: run folder (TensorBoard, ``faults.log``, checkpoints,
            ``learning_curve.png``); None writes nothing. resume: continue from the latest
            checkpoint there (weights, optimizer, counters, history; fresh collectors).
    """
    from rlstore.distributed import start_ray
    from rlstore.distributed.collector import FragmentQueue

    rc, ic = cfg.run, cfg.impala
    with TrainingRun(rc, run_dir) as run:
        probe = make_vector_env(cfg.environment, 1)
        if not isinstance(probe.single_action_space, gym.spaces.Discrete):
            probe.close()
            raise ConfigError(f"environment: IMPALA needs Discrete actions, got "
                              f"{probe.single_action_space}")  # fmt: skip
        agent = FCAgent(probe, cfg.environment, device=rc.device, hidden_dim=ic.hidden_size)
        probe.close()
        optimizer = adam(agent.parameters(), ic.learning_rate)
        buffer = RolloutBuffer(ic.fragment_length, ic.fragments_per_batch * ic.num_envs,
                               gamma=ic.gamma, advantage_normalization=ic.advantage_normalization,
                               device=rc.device, seed=rc.seed)  # fmt: skip
        learner = LearnerRun(run, cfg, "IMPALA", agent, optimizer, resume)
        c = learner.counters
        start_ray(ic.address)
        queue = FragmentQueue(ic.queue_size)
        pool = None
        try:
            make_policy = functools.partial(ImpalaPolicy, hidden_size=ic.hidden_size)
            pool = learner.start_collectors(make_policy, queue)
            while not learner.done:
                fragments: list[dict[str, Any]] = []
                waited = time.perf_counter()
                while len(fragments) < ic.fragments_per_batch:
                    fragment = queue.get(timeout_s=1.0)
                    if fragment is not None:
                        fragments.append(fragment)
                    elif pool.check() == 0 and time.perf_counter() - waited > ic.timeout_s:
                        where = pool.log_path or "the log"
                        raise RLStoreError(f"impala: no fragment arrived in {ic.timeout_s} s "
                                           f"(timeout_s); see {where}")  # fmt: skip
                frac = min(learner.step / ic.total_timesteps, 1.0)
                for group in optimizer.param_groups:
                    group["lr"] = ic.learning_rate + frac * (
                        ic.end_learning_rate - ic.learning_rate
                    )
                row = vtrace_update(agent, optimizer, buffer, fragments, ic)
                c["num_updates"] += 1
                learner.publish(pool)
                lag = float(np.mean([c["version"] - 1 - f["version"] for f in fragments]))
                step = learner.collect(pool)
                row.update(global_step=float(step), sps=run.sps(step), policy_lag=lag)
                scalars = {f"losses/{k}": row[k] for k in ("loss", "pg_loss", "v_loss", "entropy")}
                run.update(
                    step, row, {**scalars, "charts/SPS": row["sps"], "charts/policy_lag": lag}
                )
                learner.after_update(lambda o: _greedy(agent, o))
        finally:
            if pool is not None:
                pool.close()
            queue.close()
    title = f"IMPALA ({ic.num_collectors} collectors) on {cfg.environment.env_id}, seed {rc.seed}"
    return agent, run.finish(learner.step, c["num_updates"], title)


@torch.no_grad()
def _greedy(agent: FCAgent, obs: np.ndarray) -> np.ndarray:
    """The most likely action for ONE observation (evaluation)."""
    logits = agent.actor(agent.preprocess(obs[None], agent.device).reshape(1, -1))
    return agent.env_action(logits.argmax(-1))[0]


runner = folder_runner(train_impala)
