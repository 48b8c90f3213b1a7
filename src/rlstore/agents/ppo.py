"""PPO, readable top to bottom: the learning-rate schedule, the clipped loss, the update, the
training loop and the run-folder entry points (Schulman et al. 2017; CleanRL's ``ppo.py``).

One update: :func:`~rlstore.agents.rollout.run_rollout` collects ``num_steps`` steps of every
env into a :class:`~rlstore.buffers.rollout.RolloutBuffer`, which computes the GAE returns
(``rlstore.returns.gae``); :func:`ppo_update` runs epochs of minibatches through
:func:`ppo_loss`; all inside the :class:`~rlstore.agents.run.TrainingRun` frame every trainer
shares (run folder, logging, curves, seeding, evaluation). The pieces it uses:

* :mod:`rlstore.agents.ppo_config`: :class:`TrainConfig` (run, environment, online, model);
* :mod:`rlstore.agents.networks`: :class:`FCAgent`, :class:`LSTMPPOAgent`,
  :class:`TransformerPPOAgent` (:func:`get_agent`);
* :mod:`rlstore.agents.envs`: :func:`make_vector_env` (Gymnasium vector envs);
* :mod:`rlstore.agents.rollout`: :func:`run_rollout`, :class:`RolloutState`, the episode log
  and the evaluation episodes (:func:`evaluate_agent`);
* :mod:`rlstore.agents.ppo_checkpoint`: safetensors + JSON checkpoints, exact resume;
* :mod:`rlstore.agents.sampling`: :func:`sample_from_agents` (trajectories of trained agents).

Environments are in ``AutoresetMode.SAME_STEP``: every step is a real transition, and a
truncated episode bootstraps from ``V(info["final_obs"])``. Programmatic entry (used by
``rlstore train``, ``rlstore probe`` and the learning tests)::

    from rlstore.agents.ppo import EnvironmentConfig, OnlineTrainConfig, RunConfig, train_ppo

    agent, stats = train_ppo(
        RunConfig(seed=0, track=False),
        OnlineTrainConfig(total_timesteps=20_000, num_envs=8, num_steps=32),
        EnvironmentConfig(env_id="CartPole-v1"),
        model_config=None,          # None: FC agent; LSTMModelConfig / TransformerModelConfig
    )
    stats.mean_return(last=20), stats.steps_per_second

``train_ppo`` writes nothing unless ``run_dir`` is given (then: TensorBoard logs, checkpoints
and ``learning_curve.png``); :func:`ppo_runner` also creates the run folder and its
``config.yaml``. Importing this module imports neither matplotlib, TensorBoard nor wandb.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import torch
from torch import nn

from rlstore.agents.config import folder_runner
from rlstore.agents.envs import make_env, make_vector_env
from rlstore.agents.networks import (
    FCAgent,
    LSTMPPOAgent,
    PPOAgent,
    TransformerPPOAgent,
    get_agent,
    layer_init,
)
from rlstore.agents.ppo_checkpoint import (
    latest_checkpoint,
    load_all_agents_from_checkpoints,
    load_saved_checkpoint,
    restore_training,
    store_model_checkpoint,
)
from rlstore.agents.ppo_config import (
    EnvironmentConfig,
    LSTMModelConfig,
    ModelConfig,
    OnlineTrainConfig,
    RunConfig,
    TrainConfig,
    TransformerModelConfig,
    load_train_config,
    train_config_from_parts,
)
from rlstore.agents.rollout import (
    RolloutState,
    evaluate_agent,
    evaluate_in_run,
    finish_stats,
    log_update,
    run_rollout,
)
from rlstore.agents.run import (
    EVAL_SEED_OFFSET,
    TrainingRun,
    TrainStats,
    adam,
    create_run_dir,
    evaluation_due,
)
from rlstore.agents.run_checkpoint import checkpoint_schedule
from rlstore.agents.sampling import load_trajectories, sample_from_agents
from rlstore.buffers.rollout import RolloutBuffer
from rlstore.errors import ConfigError, SpecError
from rlstore.returns import normalize_advantages

__all__ = [
    # this module
    "PPOScheduler", "PPOLoss", "ppo_loss", "ppo_update", "TrainResult", "train_ppo",
    "build_learner", "DEFAULT_CONFIGS", "CONTINUOUS_FALLBACK", "load_config", "runner",
    "ppo_runner",
    # the pieces it trains with, importable from here as well
    "TrainConfig", "load_train_config", "RunConfig", "EnvironmentConfig", "OnlineTrainConfig",
    "LSTMModelConfig", "TransformerModelConfig", "PPOAgent", "FCAgent", "LSTMPPOAgent",
    "TransformerPPOAgent", "get_agent", "layer_init", "make_vector_env", "RolloutState",
    "run_rollout", "log_update", "finish_stats", "evaluate_agent", "evaluate_in_run",
    "TrainStats", "store_model_checkpoint", "load_saved_checkpoint",
    "load_all_agents_from_checkpoints", "sample_from_agents", "load_trajectories",
    "EVAL_SEED_OFFSET",
]  # fmt: skip


# ----------------------------------------------------------------- learning-rate schedule


class PPOScheduler:
    """Linear learning-rate decay attached to an optimizer.

    The optimizer's learning rate is ``initial_lr`` before the first :meth:`step`; after ``k``
    calls it is ``initial_lr - (initial_lr - end_lr) * min(k, num_updates) / num_updates``, so it
    reaches ``end_lr`` after ``num_updates`` calls and stays there. Call :meth:`step` once after
    each PPO update, so update ``u`` (0-based) trains with ``lr(u)``.

    Args:
        optimizer: the optimizer whose param groups get the learning rate.
        initial_lr: learning rate of the first update, > 0.
        end_lr: learning rate after ``num_updates`` steps, >= 0.
        num_updates: number of steps of the decay, >= 1.

    Example::

        >>> opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        >>> s = PPOScheduler(opt, 1.0, 0.0, 4); s.step(); opt.param_groups[0]["lr"]
        0.75
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, initial_lr: float, end_lr: float, num_updates: int
    ) -> None:
        if not initial_lr > 0:
            raise ConfigError(f"initial_lr: expected > 0, got {initial_lr}")
        if not end_lr >= 0:
            raise ConfigError(f"end_lr: expected >= 0, got {end_lr}")
        if isinstance(num_updates, bool) or not isinstance(num_updates, int) or num_updates < 1:
            raise ConfigError(f"num_updates: expected an int >= 1, got {num_updates!r}")
        self.optimizer = optimizer
        self.initial_lr = float(initial_lr)
        self.end_lr = float(end_lr)
        self.num_updates = num_updates
        self.n_step_calls = 0
        self._apply()

    @property
    def lr(self) -> float:
        """The learning rate the next update uses."""
        frac = min(self.n_step_calls, self.num_updates) / self.num_updates
        return self.initial_lr - (self.initial_lr - self.end_lr) * frac

    def _apply(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr

    def step(self) -> None:
        """Advance the decay by one update and write the new rate into the optimizer."""
        self.n_step_calls += 1
        self._apply()

    def replan(self, num_updates: int) -> None:
        """Define the decay over ``num_updates`` updates in all (a run whose budget is extended
        on resume): the next update uses ``lr(n_step_calls)`` of the new plan, so the rate
        continues as if the run had been planned with the new budget from the start."""
        if isinstance(num_updates, bool) or not isinstance(num_updates, int) or num_updates < 1:
            raise ConfigError(f"num_updates: expected an int >= 1, got {num_updates!r}")
        self.num_updates = num_updates
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: the settings and the number of steps taken."""
        return {
            "initial_lr": self.initial_lr,
            "end_lr": self.end_lr,
            "num_updates": self.num_updates,
            "n_step_calls": self.n_step_calls,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` output and re-apply the learning rate."""
        self.initial_lr = float(state["initial_lr"])
        self.end_lr = float(state["end_lr"])
        self.num_updates = int(state["num_updates"])
        self.n_step_calls = int(state["n_step_calls"])
        self._apply()


# ----------------------------------------------------------------- the clipped loss
#
# Contract (all inputs are 1-D float tensors of the same length B, one entry per transition of a
# minibatch; ``mask`` marks real entries of padded recurrent minibatches):
#
# * ratio ``r = exp(new_logprob - old_logprob)``
# * advantages are normalized per minibatch when ``norm_adv`` by the library's
#   :func:`rlstore.returns.normalize_advantages`: ``(A - mean) / (std + 1e-8)`` with the
#   population std (ddof=0) over the masked entries (padded entries become 0; they are masked
#   out of every mean anyway); skipped when the mask selects no entry.
# * policy loss ``pg = mean(max(-A r, -A clip(r, 1-eps, 1+eps)))``
# * value loss, clipped: ``0.5 mean(max((v - R)^2, (v_old + clip(v - v_old, -eps, eps) - R)^2))``,
#   unclipped: ``0.5 mean((v - R)^2)``
# * total ``pg - ent_coef * mean(entropy) + vf_coef * v_loss`` (with ``ent_coef == 0`` the
#   entropy term is left out of the graph: same value, the backward pass skips the entropy branch)
# * diagnostics: ``approx_kl = mean((r - 1) - log r)`` (k3), ``old_approx_kl = mean(-log r)``,
#   ``clipfrac = mean(|r - 1| > eps)``; all means are over the masked entries.

ADV_EPS = 1e-8


class PPOLoss(NamedTuple):
    """Output of :func:`ppo_loss`: the differentiable total and its parts (0-d tensors)."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    v_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    old_approx_kl: torch.Tensor
    clipfrac: torch.Tensor


def _check(name: str, t: torch.Tensor, n: int) -> None:
    if not isinstance(t, torch.Tensor) or t.ndim != 1 or t.shape[0] != n:
        got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise SpecError(
            f"{name}: expected a 1-D tensor of shape ({n},) like new_logprob, got {got}"
        )


def _masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def ppo_loss(
    new_logprob: torch.Tensor,
    old_logprob: torch.Tensor,
    advantages: torch.Tensor,
    new_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_coef: float = 0.2,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
    clip_vloss: bool = True,
    norm_adv: bool = True,
    mask: torch.Tensor | None = None,
) -> PPOLoss:
    """PPO loss of one minibatch (the contract above).

    Args:
        new_logprob: ``(B,)`` log pi_theta(a|s) under the current parameters (differentiable).
        old_logprob: ``(B,)`` log-probabilities recorded at rollout time.
        advantages: ``(B,)`` GAE advantages (un-normalized; normalized here if ``norm_adv``).
        new_values: ``(B,)`` V_theta(s) (differentiable).
        old_values: ``(B,)`` values recorded at rollout time.
        returns: ``(B,)`` value targets ``A + V_old``.
        entropy: ``(B,)`` policy entropy at each state (differentiable).
        clip_coef: ratio clip epsilon (also the value clip range).
        vf_coef: value loss weight. ent_coef: entropy bonus weight.
        clip_vloss: clip the value loss. norm_adv: normalize advantages per minibatch
            (:func:`rlstore.returns.normalize_advantages`, population std, over the mask).
        mask: optional ``(B,)`` 0/1 tensor; means run over entries with mask 1.

    Returns:
        :class:`PPOLoss`; ``loss`` is what to backpropagate, the diagnostics are 0-d tensors.
    """
    n = new_logprob.shape[0] if isinstance(new_logprob, torch.Tensor) else -1
    for name, t in (
        ("new_logprob", new_logprob),
        ("old_logprob", old_logprob),
        ("advantages", advantages),
        ("new_values", new_values),
        ("old_values", old_values),
        ("returns", returns),
        ("entropy", entropy),
    ):
        _check(name, t, n)
    m = None
    if mask is not None:
        _check("mask", mask, n)
        m = mask.to(new_logprob.dtype)
    if norm_adv and (m is None or bool(m.any())):
        advantages = normalize_advantages(advantages, mask=m, eps=ADV_EPS)
    logratio = new_logprob - old_logprob
    ratio = logratio.exp()
    neg_adv = -advantages
    pg_loss = _masked_mean(
        torch.max(neg_adv * ratio, neg_adv * torch.clamp(ratio, 1.0 - clip_coef, 1.0 + clip_coef)),
        m,
    )
    v_unclipped = (new_values - returns) ** 2
    if clip_vloss:
        v_clipped = old_values + torch.clamp(new_values - old_values, -clip_coef, clip_coef)
        v_loss = 0.5 * _masked_mean(torch.max(v_unclipped, (v_clipped - returns) ** 2), m)
    else:
        v_loss = 0.5 * _masked_mean(v_unclipped, m)
    ent = _masked_mean(entropy, m)
    if ent_coef == 0.0:
        # pg - 0 * ent == pg exactly and the entropy branch would only add exact zeros to the
        # gradient: keep it out of ``loss`` so backward skips it (``ent`` stays differentiable)
        loss = pg_loss + vf_coef * v_loss
    else:
        loss = pg_loss - ent_coef * ent + vf_coef * v_loss
    # diagnostics on detached tensors (no graph, no grad-mode switch)
    lr_d, r1 = logratio.detach(), ratio.detach() - 1.0
    approx_kl = _masked_mean(r1 - lr_d, m)
    old_approx_kl = _masked_mean(-lr_d, m)
    clipfrac = _masked_mean((r1.abs() > clip_coef).to(ratio.dtype), m)
    return PPOLoss(loss, pg_loss, v_loss, ent, approx_kl, old_approx_kl, clipfrac)


# ----------------------------------------------------------------- the update


def ppo_update(
    agent: PPOAgent,
    memory: Any,
    args: OnlineTrainConfig,
    optimizer: torch.optim.Optimizer,
    scheduler: PPOScheduler | None,
) -> dict[str, float]:
    """One PPO update of ``agent`` on the rollout in ``memory`` (returns already computed).

    ``args.update_epochs`` epochs of the agent's minibatches (``agent.minibatches``: flat
    shuffled steps, or sequences for the recurrent agents); per minibatch the clipped loss of
    :func:`ppo_loss` on ``agent._evaluate``'s outputs, backprop, global grad-norm clip at
    ``args.max_grad_norm``, Adam step. An epoch that ends with approx-KL above
    ``args.target_kl`` stops the update. With ``args.anneal_clip`` the clip range of update
    ``u`` (``u = scheduler.n_step_calls``) is ``clip_coef * (1 - u / num_updates)``. The
    scheduler steps once at the end.

    Returns:
        Means over the minibatches of ``loss, pg_loss, v_loss, entropy, approx_kl,
        old_approx_kl, clipfrac`` plus ``explained_variance``, ``lr`` and ``clip_coef`` (used),
        ``epochs`` (run) and ``grad_steps``.
    """
    sums: dict[str, float] = {}
    clip = args.clip_coef
    if args.anneal_clip and scheduler is not None:
        clip *= 1.0 - min(scheduler.n_step_calls, scheduler.num_updates) / scheduler.num_updates
    grad_steps, epochs_run = 0, 0
    lr = float(optimizer.param_groups[0]["lr"])
    for _epoch in range(args.update_epochs):
        epochs_run += 1
        for mb in agent.minibatches(memory, args):
            params, new_values, mask = agent._evaluate(mb)
            dist = agent.distribution(params)
            out = ppo_loss(
                _flat(dist.log_prob(mb.actions)),
                _flat(mb.logprobs),
                _flat(mb.advantages),
                _flat(new_values),
                _flat(mb.values),
                _flat(mb.returns),
                _flat(dist.entropy()),
                clip_coef=clip,
                vf_coef=args.vf_coef,
                ent_coef=args.ent_coef,
                clip_vloss=args.clip_vloss,
                norm_adv=args.norm_adv,
                mask=None if mask is None else _flat(mask).to(torch.float32),
            )
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            grad_steps += 1
            for k, v in out._asdict().items():
                sums[k] = sums.get(k, 0.0) + float(v.detach())
        if args.target_kl is not None and float(out.approx_kl) > args.target_kl:
            break
    if scheduler is not None:
        scheduler.step()
    stats = {k: v / max(grad_steps, 1) for k, v in sums.items()}
    stats.update(lr=lr, clip_coef=clip, epochs=float(epochs_run), grad_steps=float(grad_steps))
    stats["explained_variance"] = _explained_variance(memory)
    return stats


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1)


def _explained_variance(memory: Any) -> float:
    batch = memory.get() if hasattr(memory, "get") else None
    if batch is None or batch.returns is None:
        return float("nan")
    y, v = batch.returns.reshape(-1), batch.values.reshape(-1)
    var_y = float(y.var()) if y.numel() > 1 else 0.0
    return float("nan") if var_y == 0 else 1.0 - float((y - v).var()) / var_y


# ----------------------------------------------------------------- the training loop


class TrainResult(NamedTuple):
    """``(agent, stats)`` returned by :func:`train_ppo`."""

    agent: PPOAgent
    stats: TrainStats


def train_ppo(
    run_config: RunConfig,
    online_config: OnlineTrainConfig,
    environment_config: EnvironmentConfig,
    model_config: ModelConfig = None,
    envs: gym.vector.VectorEnv | None = None,
    trajectory_writer: Any = None,
    *,
    run_dir: str | Path | None = None,
    resume: bool = False,
    discard_unstarted: bool = False,
) -> TrainResult:
    """Train a PPO agent; returns ``(agent, stats)``.

    Args:
        run_config, online_config, environment_config: see :mod:`rlstore.agents.ppo_config`.
        model_config: None (FC agent), :class:`LSTMModelConfig` or :class:`TransformerModelConfig`.
        envs: a vector env in SAME_STEP autoreset mode with ``online_config.num_envs`` envs
            (default: :func:`make_vector_env`, closed at the end).
        trajectory_writer: optional, receives every step (``accumulate_trajectory``).
        run_dir: folder for TensorBoard logs (if ``run_config.track``), ``checkpoints/`` and
            ``learning_curve.png``; None writes nothing.
        resume: continue from the latest checkpoint in ``run_dir/checkpoints`` (model,
            optimizer, scheduler, buffer RNG, global RNGs, env states, episode history,
            observation / reward normalization statistics), so the
            run continues the learning curve it would have had without the interruption.
            A larger ``online_config.total_timesteps`` than the run had extends its budget:
            the learning-rate decay (and ``anneal_clip``) is then defined over the new number
            of updates, i.e. from the resume point on, update ``u`` trains with the rate a run
            planned with the new budget would use at ``u`` (a finished 40k-step run decayed to
            0, extended to 80k steps, continues at half the initial rate, decaying to
            ``end_learning_rate`` at 80k). The same budget resumes bit for bit.
        discard_unstarted: remove ``run_dir`` when training fails before its first update
            (for a run folder created for this run, see :func:`runner`).

    Evaluation: with ``run_config.eval_episodes > 0``, :func:`evaluate_in_run` runs that many
    deterministic episodes after the update in which the env step count crosses a multiple of
    ``run_config.eval_interval`` and after the last one (video under ``run_dir/videos/`` with
    ``run_config.video``); the mean is logged as ``eval/mean_return``, stored in the update's
    entry of ``stats.updates`` and in ``stats.evaluations``. It draws nothing from the
    training RNGs.

    Returns:
        :class:`TrainResult` ``(agent, stats)``.
    """
    stats = TrainStats(run_dir=None if run_dir is None else Path(run_dir))
    try:
        return _train(
            run_config, online_config, environment_config, model_config, envs,
            trajectory_writer, stats, resume,
        )  # fmt: skip
    except BaseException:
        if discard_unstarted and run_dir is not None and not stats.updates:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _train(
    run_config: RunConfig,
    online_config: OnlineTrainConfig,
    environment_config: EnvironmentConfig,
    model_config: ModelConfig,
    envs: gym.vector.VectorEnv | None,
    trajectory_writer: Any,
    stats: TrainStats,
    resume: bool,
) -> TrainResult:

    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    oc, rc = online_config, run_config
    with TrainingRun(rc, stats.run_dir, stats) as run:
        own_envs = envs is None
        if envs is None:
            envs = make_vector_env(environment_config, oc.num_envs)
        try:
            if envs.num_envs != oc.num_envs:
                raise ConfigError(f"envs: expected online_config.num_envs = {oc.num_envs} envs, "
                                  f"got {envs.num_envs}")  # fmt: skip
            agent, optimizer, scheduler, buffer = build_learner(cfg, envs)
            num_updates = oc.num_updates
            state = RolloutState.start(agent, envs, rc.seed)
            ckpt_dir, start_update, ckpt_num = run.ckpt_dir, 0, 0
            if resume:
                if ckpt_dir is None or (path := latest_checkpoint(ckpt_dir)) is None:
                    raise ConfigError(f"resume: no checkpoint found under {ckpt_dir}")
                start_update, ckpt_num, stats.updates = restore_training(
                    path, agent, optimizer, scheduler, buffer, state, envs
                )
                if start_update > num_updates:
                    raise ConfigError(
                        f"online.total_timesteps: expected at least "
                        f"{start_update * oc.batch_size} (the {start_update} updates the run "
                        f"has done), got {oc.total_timesteps}"
                    )
                if scheduler.num_updates != num_updates:  # an extended budget
                    scheduler.replan(num_updates)
            logger = run.start(num_updates * oc.batch_size, state.global_step,
                               environment_config.env_id, cfg.to_dict())  # fmt: skip
            n_logged = len(state.episode_returns)
            ckpt_at = checkpoint_schedule(num_updates, oc.num_checkpoints) if ckpt_dir else set()
            for update in range(start_update, num_updates):
                run_rollout(agent, buffer, oc.num_steps, envs, state, trajectory_writer)
                info = ppo_update(agent, buffer, oc, optimizer, scheduler)
                buffer.reset()
                step = state.global_step
                info.update(global_step=float(step), sps=run.sps(step))
                if evaluation_due(rc, step, step - oc.batch_size, update + 1 == num_updates):
                    info["eval/mean_return"] = evaluate_in_run(
                        agent, environment_config, rc, stats, logger, step
                    )
                stats.updates.append(info)
                n_logged = log_update(logger, update + 1, state, info, n_logged)
                if ckpt_dir is not None and update + 1 in ckpt_at:
                    ckpt_num = store_model_checkpoint(
                        agent, oc, rc, ckpt_num, ckpt_dir, config=cfg, optimizer=optimizer,
                        scheduler=scheduler, buffer=buffer, state=state, envs=envs,
                        update=update + 1, updates_log=stats.updates,
                    )  # fmt: skip
        finally:
            if own_envs:
                envs.close()
    finish_stats(run, state, num_updates, _title(cfg))
    return TrainResult(agent, stats)


def build_learner(
    cfg: TrainConfig, envs: gym.vector.VectorEnv
) -> tuple[PPOAgent, torch.optim.Optimizer, PPOScheduler, RolloutBuffer]:
    """The agent of ``cfg`` for ``envs`` on ``cfg.run.device``, its Adam optimizer and learning
    rate schedule over the run's updates, and the rollout buffer (GAE; the advantages are
    normalized by the loss, per minibatch) that PPO and PPO+D train with."""
    oc, rc = cfg.online, cfg.run
    agent = get_agent(cfg.selected_model_config(), envs, cfg.environment, oc).to(rc.device)
    agent.device = torch.device(rc.device)
    end_lr = oc.end_learning_rate if oc.decay_lr else oc.learning_rate
    optimizer = adam(agent.parameters(), oc.learning_rate, eps=oc.adam_eps)
    scheduler = PPOScheduler(optimizer, oc.learning_rate, end_lr, oc.num_updates)
    buffer = RolloutBuffer(oc.num_steps, oc.num_envs, gamma=oc.gamma, lam=oc.gae_lambda,
                           advantage_normalization="none", device=rc.device,
                           seed=rc.seed)  # fmt: skip
    return agent, optimizer, scheduler, buffer


def _title(cfg: TrainConfig) -> str:
    """The learning curve's title: algorithm, agent, env id and seed."""
    return f"PPO ({cfg.agent}) on {cfg.environment.env_id}, seed {cfg.run.seed}"


# ----------------------------------------------------------------- run folders (rlstore train)


def _packaged_configs() -> dict[str, str]:
    """Env id -> packaged ``ppo_<agent>_<EnvId>.yaml``, preferring fc, then lstm, transformer."""
    names = sorted(p.name for p in resources.files("rlstore").joinpath("configs").iterdir())
    found: dict[str, str] = {}
    for agent in ("fc", "lstm", "transformer"):
        for name in names:
            if name.startswith(f"ppo_{agent}_") and name.endswith(".yaml"):
                found.setdefault(name[len(f"ppo_{agent}_") : -len(".yaml")], name)
    return {"CartPole-v1": found.pop("CartPole-v1"), **found}  # the default first


DEFAULT_CONFIGS: dict[str, str] = _packaged_configs()
"""Env id -> the packaged config ``rlstore/configs/ppo_<agent>_<EnvId>.yaml`` tuned for it (the
first entry, CartPole-v1, is ``rlstore train``'s default and the fallback of envs without one)."""

CONTINUOUS_FALLBACK = "Pendulum-v1"
"""The env whose packaged config stands in for an env with continuous (``Box``) actions and no
config of its own: CartPole-v1's discrete-tuned settings reach only about -270 on Pendulum-v1
after 500k steps, Pendulum-v1's -190 to -220 after 100k (``ppo_fc_Pendulum-v1.yaml``)."""

load_config = load_train_config


def _train_in_folder(cfg: TrainConfig, *, run_dir: Path, resume: bool) -> TrainResult:
    """:func:`train_ppo` of ``cfg`` in ``run_dir``; a new run that fails before its first
    update removes the folder again."""
    return train_ppo(
        cfg.run, cfg.online, cfg.environment, cfg.selected_model_config(),
        run_dir=run_dir, resume=resume, discard_unstarted=not resume,
    )  # fmt: skip


runner = folder_runner(_train_in_folder)
"""``runner(cfg, *, run_dir, resume)``: train ``cfg`` in the run folder ``run_dir`` (what
``rlstore train`` calls; :func:`rlstore.agents.config.folder_runner`). A resumed run keeps
its ``config.yaml`` but for a larger ``online.total_timesteps``, which extends it (the
learning-rate schedule continues as :func:`train_ppo` documents)."""


def ppo_runner(
    run_config: RunConfig,
    environment_config: EnvironmentConfig,
    online_config: OnlineTrainConfig,
    model_config: ModelConfig = None,
    *,
    resume_dir: str | Path | None = None,
) -> TrainResult:
    """Create the run folder ``<runs_dir>/<exp_name>`` (a ``-<k>`` suffix if it exists) once the
    environment builds, then :func:`runner`: write the resolved ``config.yaml``, train with
    logging, evaluation and checkpoints, return ``(agent, stats)``.

    With ``resume_dir``, the configs are ignored: the run folder's ``config.yaml`` is loaded
    and training continues from its latest checkpoint (see :func:`train_ppo`).
    """
    if resume_dir is not None:
        cfg = load_train_config(Path(resume_dir) / "config.yaml")
        return runner(cfg, run_dir=Path(resume_dir), resume=True)
    cfg = train_config_from_parts(run_config, online_config, environment_config, model_config)
    make_env(environment_config).close()  # a failing env build leaves no run folder behind
    run_dir = create_run_dir(run_config.runs_dir, run_config.exp_name)
    return runner(cfg, run_dir=run_dir, resume=False)
