"""PyTorchRL's ``PPODBuffer`` over :class:`~rlstore.buffers.demos.DemoStore` and
:class:`~rlstore.buffers.demo_mixer.DemoMixer`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from rlstore._checks import check_count
from rlstore._trees import to_numpy, tree_map
from rlstore.buffers.demo_files import demo_from_arrays, read_npz
from rlstore.buffers.demos import ENV, Demo, DemoMixer, DemoStore, list_demos, load_demo, save_demo
from rlstore.compat.pytorchrl import protocols as K
from rlstore.compat.pytorchrl.protocols import Actor, Algorithm
from rlstore.compat.pytorchrl.vanilla import GAEBuffer, check_like
from rlstore.errors import ConfigError, SpecError

__all__ = ["PPODBuffer"]

_DEFAULT_DTYPES = {"Action": np.float32, "Observation": np.float32, "Reward": np.float32}


def _store_attr(name: str) -> Any:
    return property(lambda self: getattr(self.store, name), doc=f"``DemoStore.{name}``.")


class PPODBuffer(GAEBuffer):
    """PyTorchRL's ``PPODBuffer`` (``pytorchrl.agent.storages.on_policy.ppod_buffer``): PPO+D
    demo replay inside a :class:`~rlstore.compat.pytorchrl.GAEBuffer`. ``insert_transition``
    mixes the sample before storing it: a slot replaying a demo stores the demo's action, reward
    and next frame, ``LogProbability = 0``, ``Done = 0`` and ``Value`` from ``actor.get_value``;
    when a demo or an episode ends, the slot's next source is drawn with ``(rho, phi, 1 - rho -
    phi)``; every finished episode is offered to the store. ``seed`` and ``demo_dtypes`` are
    rlstore's.

    Differs from PyTorchRL: demos are :class:`~rlstore.buffers.demos.Demo` records in rlstore
    files (``.npz`` demos are read too); one seeded Generator; the MaxValue tracking bug (value
    demos kept ``-inf``) is fixed, annealing conserves ``rho + phi``, ``MaxValue ** alpha`` is
    clipped, human demos survive emptying the reward demos; ``track_potential_demos`` is folded
    into ``insert_transition`` (each step tracked once); ``sample_demo`` returns the drawn
    source; a sample rejected *after* mixing leaves the mixer a step ahead (:meth:`reset`).
    """

    demos_data_fields: ClassVar[tuple[str, ...]] = ("Observation", "Action", "Reward")
    on_policy_data_fields: ClassVar[tuple[str, ...]] = K.OnPolicyDataKeys
    mixer: DemoMixer | None

    def __init__(self, size: int, device: str | torch.device, actor: Actor, algorithm: Algorithm,
                 envs: Any, rho: float = 0.1, phi: float = 0.3, gae_lambda: float = 0.95,
                 alpha: float = 10, total_buffer_demo_capacity: int = 51,
                 initial_human_demos_dir: str | None = None,
                 initial_agent_demos_dir: str | None = None,
                 supplementary_demos_dir: str | None = None,
                 target_agent_demos_dir: str | None = None, num_agent_demos_to_save: int = 10,
                 initial_reward_threshold: float | None = None, save_demos_every: int = 10,
                 demo_dtypes: Mapping[str, Any] | None = _DEFAULT_DTYPES, *,
                 seed: int | np.random.Generator | None = None) -> None:  # fmt: skip
        super().__init__(size, device, actor, algorithm, envs, gae_lambda=gae_lambda)
        self.store = DemoStore(total_buffer_demo_capacity, rho=rho, phi=phi, alpha=alpha,
                               reward_threshold=initial_reward_threshold, seed=seed)  # fmt: skip
        self.save_demos_every = check_count("save_demos_every", save_demos_every, error=ConfigError)
        self.num_agent_demos_to_save = check_count(
            "num_agent_demos_to_save", num_agent_demos_to_save, minimum=0, error=ConfigError
        )
        self.initial_human_demos_dir = initial_human_demos_dir
        self.initial_agent_demos_dir = initial_agent_demos_dir
        self.supplementary_demos_dir = supplementary_demos_dir
        self.target_agent_demos_dir = target_agent_demos_dir
        self.demo_dtypes = dict(_DEFAULT_DTYPES if demo_dtypes is None else demo_dtypes)
        self.iter = self.num_loaded_human_demos = 0
        self._seen_supplementary: set[str] = set()
        self.load_initial_demos()

    rho, phi, alpha = _store_attr("rho"), _store_attr("phi"), _store_attr("alpha")
    reward_demos, value_demos = _store_attr("reward_demos"), _store_attr("value_demos")
    max_demos = property(lambda self: self.store.capacity, doc="total_buffer_demo_capacity")
    reward_threshold = property(lambda self: float(self.store.reward_threshold))

    def load_demo(self, demo_path: str | os.PathLike[str]) -> Demo:
        """Load one demo: a PyTorchRL ``.npz`` file or an rlstore ``<name>_metadata.json``
        (CheckpointError: unreadable; ConfigError: a ``FrameSkip`` unlike the env's)."""
        path, fields = Path(demo_path), self.demos_data_fields
        if path.name.endswith("_metadata.json"):
            d = load_demo(path.parent, path.name[: -len("_metadata.json")])
            arrays = dict(zip(fields, (d.observations, d.actions, d.rewards), strict=True))
        else:
            arrays = read_npz(path, fields)
            skip, env_skip = arrays.get("FrameSkip"), self._env_kwargs().get("frame_skip")
            if skip is not None and env_skip is not None and int(skip) != int(env_skip):
                raise ConfigError(f"{path.name}: FrameSkip {int(skip)} differs from the env's "
                                  f"frame_skip {env_skip}")  # fmt: skip
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused by Demo
            obs, act, rew = (arrays[k].astype(self.demo_dtypes.get(k, np.float32)) for k in fields)
        return demo_from_arrays(path.name, obs, act, rew)

    def _demo_files(self, directory: str | None) -> list[Path]:
        if directory is None or not Path(directory).is_dir():
            return []
        d = Path(directory)
        return sorted([*(d / f"{n}_metadata.json" for n in list_demos(d)), *d.glob("*.npz")])

    def load_initial_demos(self) -> None:
        """Load the initial human and agent demos as reward demos (CapacityError: too many)."""
        for folder, human in ((self.initial_human_demos_dir, True),
                              (self.initial_agent_demos_dir, False)):  # fmt: skip
            for path in self._demo_files(folder):
                d = self.load_demo(path)
                self.store.add_initial(Demo(d.observations, d.actions, d.rewards, human))
                self.num_loaded_human_demos += int(human)

    def load_supplementary_demos(self) -> int:
        """Add the unseen demos of ``supplementary_demos_dir`` as agent reward demos; returns
        how many."""
        paths = self._demo_files(self.supplementary_demos_dir)
        new = [p for p in paths if str(p) not in self._seen_supplementary]
        for path in new:
            self._seen_supplementary.add(str(path))
            self.store.add_bonus(self.load_demo(path))
        return len(new)

    def save_demos(self) -> list[Path]:
        """Write the top ``num_agent_demos_to_save`` agent reward demos (by total reward) and
        value demos (by MaxValue) to ``target_agent_demos_dir``; returns the sidecar paths."""
        n, folder = self.num_agent_demos_to_save, self.target_agent_demos_dir
        if folder is None:
            return []
        return [save_demo(demo, folder, f"{kind}_demo_{k:03d}") for kind in ("reward", "value")
                for k, demo in enumerate(self.store.top_demos(kind, n))]  # fmt: skip

    def anneal_parameters(self) -> None:
        """Move replay probability from value demos to reward demos (``DemoStore.anneal``)."""
        self.store.anneal()

    def check_demo_buffer_capacity(self) -> list[Demo]:
        """Evict demos beyond capacity (value demos first); returns the evicted demos."""
        return self.store.enforce_capacity()

    def _reset_env(self, i: int) -> np.ndarray:
        return to_numpy(K.OBS, self.envs.reset_single_env(i))

    def _ensure_mixer(self, obs: Any) -> DemoMixer:
        if self.mixer is None:
            if isinstance(obs, Mapping):
                raise SpecError(f"{K.OBS}: PPODBuffer supports array observations, got a dict")
            o, reset = to_numpy(K.OBS, obs), getattr(self.envs, "reset_single_env", None)
            reset_env = self._reset_env if callable(reset) else None  # a method: picklable
            stack = int(self._env_kwargs().get("frame_stack", 1))
            self.mixer = DemoMixer(self.store, o.shape[0], reset_env=reset_env, frame_stack=stack)
            self.mixer.reset(o)
        return self.mixer

    def reset(self) -> None:
        """Set the counters to zero and abandon the demo replays in progress (demos are kept)."""
        super().reset()
        self.mixer = None
        self._tracked: tuple[Mapping[str, Any], dict[str, Any]] | None = None
        self._inserted: Mapping[str, Any] | None = None

    def sample_demo(self, env_id: int) -> int:
        """Draw the source of slot ``env_id``'s next episode now and start it at slot ``L``;
        returns the source code (0 env, 1 reward demo, 2 value demo)."""
        if self.mixer is None or not self._next:
            raise SpecError("sample_demo: insert a transition first (the env slots are unknown)")
        obs, code = self.mixer.begin_episode(env_id)
        if code != ENV:  # the next rollout slot (layout-C slot L) starts the demo
            nxt = self._next
            nxt[K.OBS][env_id] = torch.as_tensor(obs).to(nxt[K.OBS].dtype)
            nxt[K.DONE][env_id] = 1
            if nxt.get(K.RHS) is not None:
                nxt[K.RHS][env_id] = 0
            if self._rb is not None and self.size:  # Done[L] = 1: the slot's episode ended
                ended = self._rb.get().dones[-1]
                self._rb.terminate_last(
                    (torch.arange(len(ended), device=ended.device) == env_id) & ~ended
                )
            self._view = None
        return code

    def insert_transition(self, sample: Mapping[str, Any]) -> None:
        """Track and mix demo replays into one vector-env step, then store it (class doc)."""
        tracked, self._tracked = self._tracked, None
        mixed = tracked[1] if tracked is not None and tracked[0] is sample else self._track(sample)
        super().insert_transition(mixed)
        self._inserted = sample

    def track_potential_demos(self, sample: Mapping[str, Any]) -> None:
        """PyTorchRL's episode tracking: the mixed step is kept for the following
        :meth:`insert_transition` of the same ``sample`` object (each step is tracked once)."""
        if sample is not self._inserted and (
            self._tracked is None or self._tracked[0] is not sample
        ):
            self._tracked = (sample, self._track(sample))

    def _track(self, sample: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``sample`` and mix demo replays into it; returns the sample to store."""
        specs = self._prepare(sample)[0]  # validates (capacity, keys, shapes, dtypes, values)
        mixer, sample = self._ensure_mixer(sample[K.OBS]), dict(sample)
        if mixer.replaying().any() and self._next:
            self._revalue(sample, mixer.replaying())
        done = to_numpy(K.DONE2, sample[K.DONE2]).reshape(-1) != 0
        trunc = np.zeros_like(done)
        if K.TRUNC2 in sample:
            trunc = done & (to_numpy(K.TRUNC2, sample[K.TRUNC2]).reshape(-1) != 0)
        m = mixer.step(to_numpy(K.ACT, sample[K.ACT]), to_numpy(K.REW, sample[K.REW]).reshape(-1),
                       done & ~trunc, trunc, to_numpy(K.OBS2, sample[K.OBS2]),
                       value=to_numpy(K.VAL, sample[K.VAL]).reshape(-1))  # fmt: skip
        new = {K.ACT: m.action, K.REW: m.reward, K.OBS: m.next_obs,
               K.DONE: m.terminated | m.truncated, K.TRUNC: m.truncated}  # fmt: skip
        for k, v in new.items():  # in the stored dtype (a demo's 0.5 reward is no int sample's 0)
            if (key := K.SHIFTED.get(k, k)) in sample:
                v = torch.as_tensor(v).reshape(specs[k].shape)
                sample[key] = check_like(self.device, key, v, specs[k])
        for key, rows in ((K.LOGP, m.from_demo), (K.RHS2, m.new_episode > ENV)):
            if sample.get(key) is not None and not isinstance(sample[key], Mapping):
                sample[key] = torch.as_tensor(sample[key]).clone()
                sample[key][torch.from_numpy(rows)] = 0  # demo log-probs, fresh hidden states
        return sample

    def _revalue(self, sample: dict[str, Any], rows: np.ndarray) -> None:
        """Recompute ``Value`` (and ``IntrinsicValue``) of replaying slots on the stored demo
        observation ``Observation[step]`` (the policy may have seen the real env's frame)."""
        idx = torch.from_numpy(np.flatnonzero(rows))
        rhs = self._next.get(K.RHS, self._rows.get(K.RHS))  # feed-forward actors: the zero row
        rhs = None if rhs is None else tree_map(lambda t: t[idx], rhs)
        for key, v in self._values(self._next[K.OBS][idx], rhs, self._next[K.DONE][idx]).items():
            if key in sample:
                new = torch.as_tensor(sample[key]).clone()
                new[idx] = v.to(new.dtype).reshape(len(idx), *new.shape[1:])
                sample[key] = new

    def after_gradients(self, batch: Any, info: dict[str, Any]) -> dict[str, Any]:
        """Start the next rollout; poll supplementary demos; save demos every
        ``save_demos_every`` calls. Adds demo statistics to ``info``."""
        info = super().after_gradients(batch, info)
        self.iter += 1
        self.load_supplementary_demos()
        if self.iter % self.save_demos_every == 0:
            self.save_demos()
        store = self.store
        info.update(NumRewardDemos=len(store.reward_demos), NumValueDemos=len(store.value_demos),
                    RewardThreshold=self.reward_threshold, rho=self.rho, phi=self.phi)  # fmt: skip
        return info
