"""Library adapters for ``bench_replay.py``: each peer used the way its docs recommend.

An adapter builds a buffer, pre-builds per-step inputs in the library's own format (numpy
arrays, TensorDicts, Batches) from a stream made by ``bench_replay.make_stream`` (arrays shaped
``(P, N, ...)``), and wraps add / sample so that only the library call is timed. Imports of the
peer libraries happen inside the methods, so this module imports without any of them.
"""

from __future__ import annotations

from typing import Any, Protocol

ACT_DIM = 6
BATCH_SIZE = 256


class CaseLike(Protocol):
    """What an adapter needs of ``bench_replay.Case``."""

    obs_shape: tuple[int, ...]
    obs_dtype: str


# --------------------------------------------------------------------------------------------
# adapters: each library used the way its docs recommend (inputs pre-built outside the timing)
# --------------------------------------------------------------------------------------------


def _rows(s: dict[str, Any], keys: tuple[str, ...], n: int | None) -> list[tuple[Any, ...]]:
    """Per-step tuples of views ``s[k][t]`` (``n=None``) or ``s[k][t, n]`` for every step t."""
    sel = (slice(None),) if n is None else (slice(None), n)
    cols = [s[k][sel] for k in keys]
    return list(zip(*cols, strict=True))


class Adapter:
    """Uniform face of one library variant. Subclasses override the methods they need."""

    module = ""  # import name whose presence makes the variant available
    notes = ""
    supports_batched = True

    def __init__(self, case: CaseLike) -> None:
        self.case = case

    def make(self, capacity: int, num_envs: int) -> Any:
        raise NotImplementedError

    def single_inputs(self, s: dict[str, Any]) -> list[Any]:
        raise NotImplementedError

    def batched_inputs(self, s: dict[str, Any]) -> list[Any]:
        raise NotImplementedError

    def add_single(self, buf: Any, inp: Any) -> None:
        raise NotImplementedError

    def add_batched(self, buf: Any, inp: Any) -> None:
        raise NotImplementedError

    def sample(self, buf: Any, batch_size: int) -> Any:
        raise NotImplementedError

    def fill(self, buf: Any, s: dict[str, Any], single_inputs: list[Any], n: int) -> None:
        """Fill a one-env buffer with ``n`` transitions (default: ``n`` single adds)."""
        p = len(single_inputs)
        for i in range(n):
            self.add_single(buf, single_inputs[i % p])

    def own_nbytes(self, buf: Any, capacity: int) -> float | None:
        return None

    # prioritized replay (``supports_per``): a buffer filled like ``fill``, then
    # ``per_step`` = sample(batch) with importance weights + update_priorities(batch)
    supports_per = False

    def make_per(self, capacity: int) -> Any:
        raise NotImplementedError

    def per_step(self, buf: Any, batch_size: int, priorities: Any) -> Any:
        raise NotImplementedError


_KEYS = ("obs", "action", "reward", "next_obs", "terminated", "truncated")


class RLStoreAdapter(Adapter):
    module = "rlstore.buffers.replay"
    notes = "ReplayBuffer(capacity, num_envs); add(obs, action, reward, next_obs, term, trunc)"
    once = True
    supports_per = True

    def make(self, capacity: int, num_envs: int) -> Any:
        from rlstore.buffers.replay import ReplayBuffer

        return ReplayBuffer(capacity, num_envs=num_envs, seed=0, store_next_obs_once=self.once)

    def make_per(self, capacity: int) -> Any:
        from rlstore.buffers.replay import ReplayBuffer
        from rlstore.samplers import PrioritizedSampler

        sampler = PrioritizedSampler(alpha=0.6, beta=0.4, seed=0)
        return ReplayBuffer(capacity, sampler=sampler, store_next_obs_once=self.once)

    def per_step(self, buf: Any, batch_size: int, priorities: Any) -> Any:
        batch = buf.sample(batch_size)
        buf.update_priorities(batch.indices, priorities)
        return batch

    def single_inputs(self, s: dict[str, Any]) -> list[Any]:
        return _rows(s, _KEYS, 0)

    def batched_inputs(self, s: dict[str, Any]) -> list[Any]:
        return _rows(s, _KEYS, None)

    def add_single(self, buf: Any, inp: Any) -> None:
        buf.add(*inp)

    add_batched = add_single

    def fill(self, buf: Any, s: dict[str, Any], single_inputs: list[Any], n: int) -> None:
        if not hasattr(buf, "extend"):
            return super().fill(buf, s, single_inputs, n)
        p = len(single_inputs)
        chunk = [s[k][:, :1] for k in _KEYS]  # (P, 1, ...): time-major, one env
        for _ in range(n // p):
            buf.extend(*chunk)
        for i in range(n % p):
            self.add_single(buf, single_inputs[i])

    def sample(self, buf: Any, batch_size: int) -> Any:
        return buf.sample(batch_size)

    def own_nbytes(self, buf: Any, capacity: int) -> float | None:
        return float(buf.nbytes) / capacity


class RLStorePlainAdapter(RLStoreAdapter):
    notes = "rlstore store_next_obs_once=False (next_obs stored per row)"
    once = False


class CpprbAdapter(Adapter):
    module = "cpprb"
    notes = "ReplayBuffer(size, env_dict) storing next_obs; add(**arrays), 8-row arrays batched"
    next_of = False
    supports_per = True

    def make(self, capacity: int, num_envs: int, per: bool = False) -> Any:
        import numpy as np
        from cpprb import PrioritizedReplayBuffer, ReplayBuffer

        cls: Any = PrioritizedReplayBuffer if per else ReplayBuffer
        obs = {"shape": self.case.obs_shape, "dtype": np.dtype(self.case.obs_dtype)}
        env_dict: dict[str, Any] = {"obs": obs, "act": {"shape": ACT_DIM}, "rew": {}, "done": {}}
        if self.next_of:
            return cls(capacity, env_dict, next_of="obs")
        env_dict["next_obs"] = obs
        return cls(capacity, env_dict)

    def make_per(self, capacity: int) -> Any:
        return self.make(capacity, 1, per=True)

    def per_step(self, buf: Any, batch_size: int, priorities: Any) -> Any:
        import torch

        b = buf.sample(batch_size, beta=0.4)
        buf.update_priorities(b["indexes"], priorities)
        return {k: torch.from_numpy(v) for k, v in b.items()}

    def _kw(self, s: dict[str, Any], n: int | None) -> list[Any]:
        rows = _rows(s, _KEYS, n)
        out = []
        for o, a, r, no, te, tr in rows:
            kw = {"obs": o, "act": a, "rew": r, "next_obs": no, "done": te}
            out.append((kw, bool((te | tr).any()) if n is not None else False))
        return out

    def single_inputs(self, s: dict[str, Any]) -> list[Any]:
        return self._kw(s, 0)

    def batched_inputs(self, s: dict[str, Any]) -> list[Any]:
        return [kw for kw, _ in self._kw(s, None)]

    def add_single(self, buf: Any, inp: Any) -> None:
        kw, episode_end = inp
        buf.add(**kw)
        if episode_end:
            buf.on_episode_end()

    def add_batched(self, buf: Any, inp: Any) -> None:
        buf.add(**inp)

    def fill(self, buf: Any, s: dict[str, Any], single_inputs: list[Any], n: int) -> None:
        p = len(single_inputs)
        chunk = {
            "obs": s["obs"][:, 0],
            "act": s["action"][:, 0],
            "rew": s["reward"][:, 0],
            "next_obs": s["next_obs"][:, 0],
            "done": s["terminated"][:, 0],
        }
        for _ in range(n // p):
            buf.add(**chunk)
        for i in range(n % p):
            self.add_single(buf, single_inputs[i])

    def sample(self, buf: Any, batch_size: int) -> Any:
        import torch

        return {k: torch.from_numpy(v) for k, v in buf.sample(batch_size).items()}


class CpprbNextOfAdapter(CpprbAdapter):
    notes = "cpprb next_of='obs' (obs stored once); batched n/a: rows of one add are one stream"
    next_of = True
    supports_batched = False
    supports_per = False


class SB3Adapter(Adapter):
    module = "stable_baselines3"
    notes = "ReplayBuffer(n_envs=1 or 8, handle_timeout_termination=True), add(...) per step"
    optimize = False

    def make(self, capacity: int, num_envs: int) -> Any:
        import numpy as np
        from gymnasium import spaces
        from stable_baselines3.common.buffers import ReplayBuffer

        if self.case.obs_dtype == "uint8":
            obs_space = spaces.Box(0, 255, self.case.obs_shape, np.uint8)
        else:
            obs_space = spaces.Box(-np.inf, np.inf, self.case.obs_shape, np.float32)
        act_space = spaces.Box(-1.0, 1.0, (ACT_DIM,), np.float32)
        return ReplayBuffer(
            capacity,
            obs_space,
            act_space,
            device="cpu",
            n_envs=num_envs,
            optimize_memory_usage=self.optimize,
            handle_timeout_termination=not self.optimize,
        )

    def _args(self, s: dict[str, Any], n: int | None) -> list[Any]:
        sel = slice(0, 1) if n is not None else slice(None)  # keep the env axis
        out = []
        for t in range(s["obs"].shape[0]):
            te, tr = s["terminated"][t, sel], s["truncated"][t, sel]
            infos = [{"TimeLimit.truncated": bool(x)} for x in tr]
            out.append(
                (
                    s["obs"][t, sel],
                    s["next_obs"][t, sel],
                    s["action"][t, sel],
                    s["reward"][t, sel],
                    te | tr,
                    infos,
                )
            )
        return out

    def single_inputs(self, s: dict[str, Any]) -> list[Any]:
        return self._args(s, 0)

    def batched_inputs(self, s: dict[str, Any]) -> list[Any]:
        return self._args(s, None)

    def add_single(self, buf: Any, inp: Any) -> None:
        buf.add(*inp)

    add_batched = add_single

    def sample(self, buf: Any, batch_size: int) -> Any:
        return buf.sample(batch_size)


class SB3OptMemAdapter(SB3Adapter):
    notes = "SB3 optimize_memory_usage=True (requires handle_timeout_termination=False)"
    optimize = True


class TorchRLAdapter(Adapter):
    module = "torchrl"
    notes = "ReplayBuffer(storage=LazyTensorStorage(cap)); add(TensorDict) / extend(TensorDict[8])"
    supports_per = True

    def make_per(self, capacity: int) -> Any:
        from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

        return TensorDictPrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, storage=LazyTensorStorage(capacity)
        )

    def per_step(self, buf: Any, batch_size: int, priorities: Any) -> Any:
        import torch

        td = buf.sample(batch_size)  # carries "index" and "_weight"
        buf.update_priority(td["index"], torch.from_numpy(priorities))
        return td

    def make(self, capacity: int, num_envs: int) -> Any:
        from torchrl.data import LazyTensorStorage, ReplayBuffer

        # the batch size is given to sample() (the warm-up samples a smaller batch)
        return ReplayBuffer(storage=LazyTensorStorage(capacity))

    def _tds(self, s: dict[str, Any], n: int | None) -> list[Any]:
        import torch
        from tensordict import TensorDict

        sel = (slice(None),) if n is None else (slice(None), n)
        t = {k: torch.from_numpy(s[k][sel]) for k in _KEYS}
        done = t["terminated"] | t["truncated"]
        bs = [] if n is not None else [s["obs"].shape[1]]
        return [
            TensorDict(
                {
                    "observation": t["obs"][i],
                    "action": t["action"][i],
                    "next": {
                        "observation": t["next_obs"][i],
                        "reward": t["reward"][i].unsqueeze(-1),
                        "done": done[i].unsqueeze(-1),
                        "terminated": t["terminated"][i].unsqueeze(-1),
                        "truncated": t["truncated"][i].unsqueeze(-1),
                    },
                },
                batch_size=bs,
            )
            for i in range(s["obs"].shape[0])
        ]

    def single_inputs(self, s: dict[str, Any]) -> list[Any]:
        return self._tds(s, 0)

    def batched_inputs(self, s: dict[str, Any]) -> list[Any]:
        return self._tds(s, None)

    def add_single(self, buf: Any, inp: Any) -> None:
        buf.add(inp)

    def add_batched(self, buf: Any, inp: Any) -> None:
        buf.extend(inp)

    def fill(self, buf: Any, s: dict[str, Any], single_inputs: list[Any], n: int) -> None:
        import torch

        p = len(single_inputs)
        chunk = torch.stack(single_inputs)  # TensorDict with batch_size [P]
        for _ in range(n // p):
            buf.extend(chunk)
        for i in range(n % p):
            self.add_single(buf, single_inputs[i])

    def sample(self, buf: Any, batch_size: int) -> Any:
        return buf.sample(batch_size)


class TianshouAdapter(Adapter):
    module = "tianshou"
    notes = "ReplayBuffer(size) / VectorReplayBuffer(size, 8); add(Batch) per step"
    ignore_obs_next = False
    supports_per = True

    def make_per(self, capacity: int) -> Any:
        from tianshou.data import PrioritizedReplayBuffer

        return PrioritizedReplayBuffer(
            capacity, alpha=0.6, beta=0.4, ignore_obs_next=self.ignore_obs_next
        )

    def per_step(self, buf: Any, batch_size: int, priorities: Any) -> Any:
        batch = self.sample(buf, batch_size)
        buf.update_weight(batch.pop("_indices"), priorities)
        return batch

    def make(self, capacity: int, num_envs: int) -> Any:
        from tianshou.data import ReplayBuffer, VectorReplayBuffer

        if num_envs == 1:
            return ReplayBuffer(capacity, ignore_obs_next=self.ignore_obs_next)
        return VectorReplayBuffer(capacity, num_envs, ignore_obs_next=self.ignore_obs_next)

    def _batches(self, s: dict[str, Any], n: int | None) -> list[Any]:
        from tianshou.data import Batch

        return [
            Batch(obs=o, act=a, rew=r, obs_next=no, terminated=te, truncated=tr)
            for o, a, r, no, te, tr in _rows(s, _KEYS, n)
        ]

    def single_inputs(self, s: dict[str, Any]) -> list[Any]:
        return self._batches(s, 0)

    def batched_inputs(self, s: dict[str, Any]) -> list[Any]:
        return self._batches(s, None)

    def add_single(self, buf: Any, inp: Any) -> None:
        buf.add(inp)

    add_batched = add_single

    def sample(self, buf: Any, batch_size: int) -> Any:
        import torch

        b, idx = buf.sample(batch_size)
        keys = ("obs", "act", "rew", "obs_next", "terminated", "truncated")
        out = {k: torch.from_numpy(b[k]) for k in keys}
        if "weight" in b:
            out["weight"] = torch.from_numpy(b["weight"])
        out["_indices"] = idx
        return out


class TianshouNoNextAdapter(TianshouAdapter):
    notes = "Tianshou ignore_obs_next=True (obs stored once; obs_next at an episode end is obs)"
    ignore_obs_next = True
    supports_per = False


ADAPTERS: dict[str, type[Adapter]] = {
    "rlstore": RLStoreAdapter,
    "rlstore-plain": RLStorePlainAdapter,
    "cpprb": CpprbAdapter,
    "cpprb-next_of": CpprbNextOfAdapter,
    "sb3": SB3Adapter,
    "sb3-optmem": SB3OptMemAdapter,
    "torchrl": TorchRLAdapter,
    "tianshou": TianshouAdapter,
    "tianshou-ignore_obs_next": TianshouNoNextAdapter,
}
