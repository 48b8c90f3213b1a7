"""A CleanRL-style single-file PPO for discrete-action Gymnasium envs (benchmark reference).

Written for rlstore's benchmarks in the spirit of CleanRL's ``ppo.py`` (one readable file,
a flat config, separate actor and critic MLPs with orthogonal init), but independently: it keeps
its own GAE loop on purpose (it is the peer rlstore is compared with) and handles Gymnasium 1.x
correctly: SAME_STEP autoreset, and a time-limit truncation bootstraps from ``V(final_obs)``.

Run::

    python benchmarks/cleanrl_style_ppo.py --seed 1 --total-timesteps 40000

``train(Args(...))`` returns a dict with the episode returns, the env step at which each episode
ended, and wall / CPU seconds (used by ``bench_ppo.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn


@dataclass
class Args:
    """Hyper-parameters (defaults: the RL-Zoo-like CartPole setting rlstore ships)."""

    env_id: str = "CartPole-v1"
    """Gymnasium id (discrete actions, Box observations)."""
    total_timesteps: int = 40_000
    """Environment steps summed over envs."""
    seed: int = 1
    """Seed of torch, numpy, random and the envs (env i gets seed + i)."""
    num_envs: int = 8
    """Parallel envs (synchronous vector env)."""
    num_steps: int = 32
    """Steps per env per rollout."""
    learning_rate: float = 1e-3
    """Initial Adam learning rate."""
    end_learning_rate: float = 2.5e-4
    """Learning rate after the last update (linear anneal)."""
    gamma: float = 0.98
    """Discount."""
    gae_lambda: float = 0.8
    """GAE lambda."""
    num_minibatches: int = 1
    """Minibatches per epoch."""
    update_epochs: int = 20
    """Epochs per update."""
    clip_coef: float = 0.2
    """PPO ratio clip."""
    anneal_clip: bool = False
    """Decay the ratio clip linearly to 0 over the run (update u uses clip * (1 - u / U))."""
    clip_vloss: bool = False
    """Clip the value loss around the old values."""
    ent_coef: float = 0.0
    """Entropy bonus."""
    vf_coef: float = 0.5
    """Value-loss weight."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    hidden: int = 64
    """Width of the two tanh hidden layers."""
    torch_threads: int = 1
    """torch.set_num_threads."""


def layer(n_in: int, n_out: int, std: float = float(np.sqrt(2))) -> nn.Linear:
    """Linear layer, orthogonal weights with gain ``std``, zero bias."""
    lin = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.zeros_(lin.bias)
    return lin


class Agent(nn.Module):
    """Separate actor and critic MLPs (two tanh layers each)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer(obs_dim, hidden),
            nn.Tanh(),
            layer(hidden, hidden),
            nn.Tanh(),
            layer(hidden, 1, 1.0),
        )
        self.actor = nn.Sequential(
            layer(obs_dim, hidden), nn.Tanh(), layer(hidden, hidden), nn.Tanh(),
            layer(hidden, n_actions, 0.01),
        )  # fmt: skip

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``V(obs)``, shape ``(B,)``."""
        return self.critic(obs).squeeze(-1)

    def act(self, obs: torch.Tensor, action: torch.Tensor | None = None) -> tuple[Any, ...]:
        """``(action, log_prob, entropy, value)``; samples an action when none is given."""
        dist = torch.distributions.Categorical(logits=self.actor(obs))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(obs)


def train(args: Args) -> dict[str, Any]:
    """Train PPO; returns episode statistics and timings (see the module docstring)."""
    torch.set_num_threads(args.torch_threads)
    random.seed(args.seed)
    np.random.seed(args.seed)  # noqa: NPY002 - legacy global seeding, like the reference scripts
    torch.manual_seed(args.seed)
    wall0, cpu0 = time.perf_counter(), time.process_time()  # setup included, as for the others
    envs = gym.make_vec(
        args.env_id, num_envs=args.num_envs, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )  # fmt: skip
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n), args.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    T, N = args.num_steps, args.num_envs
    batch_size = T * N
    minibatch_size = batch_size // args.num_minibatches
    num_updates = max(1, args.total_timesteps // batch_size)
    obs_buf = torch.zeros(T, N, obs_dim)
    act_buf = torch.zeros(T, N, dtype=torch.long)
    logp_buf, val_buf, rew_buf = torch.zeros(T, N), torch.zeros(T, N), torch.zeros(T, N)
    term_buf, trunc_buf, final_val = torch.zeros(T, N), torch.zeros(T, N), torch.zeros(T, N)

    episode_returns: list[float] = []
    episode_end_steps: list[int] = []
    running = np.zeros(N)
    global_step = 0
    raw, _ = envs.reset(seed=args.seed)
    next_obs = torch.as_tensor(raw, dtype=torch.float32)

    for update in range(num_updates):
        frac = update / num_updates
        lr = args.learning_rate + frac * (args.end_learning_rate - args.learning_rate)
        optimizer.param_groups[0]["lr"] = lr
        clip = args.clip_coef * (1 - frac) if args.anneal_clip else args.clip_coef

        # ---- rollout
        for t in range(T):
            obs_buf[t] = next_obs
            with torch.no_grad():
                action, logp, _, value = agent.act(next_obs)
            raw, reward, term, trunc, info = envs.step(action.numpy())
            global_step += N
            act_buf[t], logp_buf[t], val_buf[t] = action, logp, value
            rew_buf[t] = torch.as_tensor(reward, dtype=torch.float32)
            term_buf[t] = torch.as_tensor(term, dtype=torch.float32)
            trunc_buf[t] = torch.as_tensor(trunc & ~term, dtype=torch.float32)
            if trunc.any():  # bootstrap a time-limit end from the real final observation
                idx = np.flatnonzero(trunc & ~term)
                if idx.size:
                    fin = torch.as_tensor(np.stack([info["final_obs"][i] for i in idx]))
                    with torch.no_grad():
                        final_val[t, idx] = agent.value(fin.float())
            running += reward
            for i in np.flatnonzero(term | trunc):
                episode_returns.append(float(running[i]))
                episode_end_steps.append(global_step)
                running[i] = 0.0
            next_obs = torch.as_tensor(raw, dtype=torch.float32)

        # ---- GAE (own loop: this script is the peer reference)
        with torch.no_grad():
            last_value = agent.value(next_obs)
        adv = torch.zeros(T, N)
        gae = torch.zeros(N)
        for t in reversed(range(T)):
            nxt = last_value if t == T - 1 else val_buf[t + 1]
            nxt = torch.where(trunc_buf[t] > 0, final_val[t], nxt)
            delta = rew_buf[t] + args.gamma * nxt * (1 - term_buf[t]) - val_buf[t]
            cont = (1 - term_buf[t]) * (1 - trunc_buf[t])
            gae = delta + args.gamma * args.gae_lambda * cont * gae
            adv[t] = gae
        ret = adv + val_buf

        # ---- PPO update
        b_obs, b_act = obs_buf.reshape(batch_size, -1), act_buf.reshape(-1)
        b_logp, b_adv = logp_buf.reshape(-1), adv.reshape(-1)
        b_ret, b_val = ret.reshape(-1), val_buf.reshape(-1)
        for _ in range(args.update_epochs):
            perm = torch.randperm(batch_size)
            for start in range(0, batch_size, minibatch_size):
                mb = perm[start : start + minibatch_size]
                _, new_logp, entropy, new_val = agent.act(b_obs[mb], b_act[mb])
                ratio = (new_logp - b_logp[mb]).exp()
                mb_adv = b_adv[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(
                    -mb_adv * ratio,
                    -mb_adv * ratio.clamp(1 - clip, 1 + clip),
                ).mean()
                if args.clip_vloss:
                    clipped = b_val[mb] + (new_val - b_val[mb]).clamp(-clip, clip)
                    v_loss = (
                        0.5
                        * torch.max((new_val - b_ret[mb]) ** 2, (clipped - b_ret[mb]) ** 2).mean()
                    )
                else:
                    v_loss = 0.5 * ((new_val - b_ret[mb]) ** 2).mean()
                loss = pg_loss - args.ent_coef * entropy.mean() + args.vf_coef * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()

    envs.close()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return {
        "episode_returns": episode_returns,
        "episode_end_steps": episode_end_steps,
        "global_step": global_step,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
    }


def _parse() -> Args:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        default = f.default
        kind = type(default)
        flag = "--" + f.name.replace("_", "-")
        if kind is bool:
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"),
                                default=default)  # fmt: skip
        else:
            parser.add_argument(flag, type=kind, default=default)
    return Args(**vars(parser.parse_args()))


if __name__ == "__main__":
    out = train(_parse())
    r = out["episode_returns"]
    print(
        f"{out['global_step']} steps in {out['wall_seconds']:.1f}s "
        f"({out['global_step'] / out['wall_seconds']:.0f} steps/s); "
        f"{len(r)} episodes, mean of the last 20: {np.mean(r[-20:]):.1f}"
    )
