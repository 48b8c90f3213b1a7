"""Malformed-input sweep over public APIs the buffer sweeps do not cover (issue 8).

``RunningMeanStd``, ``DiscountedReturnNormalizer``, ``Demo``, ``DemoStore``,
``TransitionAdapter`` and ``FieldSpec``: after a valid warm-up, each argument in turn gets junk
(None, strings, bytes, dicts, objects, ragged lists, complex, NaN/inf, values that overflow,
bools for numbers, fractions for ints and flags, wrong shapes, 'meta' tensors). Every call must
raise an :class:`RLStoreError` naming the argument, and the object's state must be unchanged.
Values that are accepted must be stored losslessly.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from rlstore import DiscountedReturnNormalizer, FieldSpec, RunningMeanStd, TransitionAdapter
from rlstore.buffers.demos import Demo, DemoStore
from rlstore.errors import CheckpointError, RLStoreError

F = np.float32
NAN, INF = float("nan"), float("inf")
META = torch.ones(4, device="meta")
# junk for any array argument
ARRAY = [None, "abc", b"ab", {"a": 1}, np.array([object()] * 4), [[1, 2], [3]], META]
ARRAY += [np.ones(4, complex), np.array([1.0, NAN, 2, 3]), np.array([1.0, INF, 2, 3])]
ARRAY += [np.array(["a"] * 4)]
NUMBER = [None, "0.5", b"1", {"a": 1}, 1 + 1j, NAN, True, np.ones(3), META]  # scalars
INT = [None, "3", 0.5, 2.0, NAN, True, -5, 1 + 1j]  # counts and ids


def _id(value: Any) -> str:
    """Stable test id (repr of an object array holds an address: xdist workers would differ)."""
    if isinstance(value, tuple):
        return "-".join(map(_id, value))
    return (
        type(value).__name__ if isinstance(value, (np.ndarray, torch.Tensor, dict)) else repr(value)
    )


def _state(obj: Any) -> str:
    def leaf(x: Any) -> Any:
        if isinstance(x, dict):
            return {str(k): leaf(v) for k, v in x.items()}
        if isinstance(x, np.ndarray):
            return [str(x.dtype), list(x.shape), x.tobytes().hex()]
        return repr(x)

    return json.dumps(leaf(copy.deepcopy(obj.state_dict())), sort_keys=True)


def _refused(obj: Any, call: Callable[[], Any], named: str) -> None:
    before = None if obj is None else _state(obj)
    with pytest.raises(RLStoreError, match=named):
        call()
    if obj is not None:
        assert _state(obj) == before, f"state changed by a refused call ({named})"


def _rms() -> RunningMeanStd:
    r = RunningMeanStd((4,))
    r.update(np.random.default_rng(0).random((3, 4)))
    return r


def _drn() -> DiscountedReturnNormalizer:
    d = DiscountedReturnNormalizer(0.9)
    d.update(np.random.default_rng(0).random((3, 4)))
    return d


@pytest.mark.parametrize("bad", [*ARRAY, np.full(4, 1e300), np.ones((3, 5))], ids=_id)
def test_running_mean_std_update_and_normalize(bad: Any) -> None:
    r = _rms()
    _refused(r, lambda: r.update(bad), "x")
    if not (isinstance(bad, np.ndarray) and bad.dtype == np.float64 and np.isfinite(bad).all()):
        _refused(r, lambda: r.normalize(bad), "x")


@pytest.mark.parametrize("bad", [*ARRAY, -np.ones(4)], ids=_id)
def test_running_mean_std_update_from_moments(bad: Any) -> None:
    r = _rms()
    if not (isinstance(bad, np.ndarray) and bad.dtype == np.float64 and np.all(bad == -1)):
        _refused(r, lambda: r.update_from_moments(bad, np.ones(4), 3), "batch_mean")
    _refused(r, lambda: r.update_from_moments(np.ones(4), bad, 3), "batch_var")
    for count in INT:
        if count != 2.0:
            _refused(r, lambda c=count: r.update_from_moments(np.ones(4), np.ones(4), c), "count")


def test_running_mean_std_constructor_clip_eps_and_load() -> None:
    for shape in [-1, (-1,), (2.5,), (True,), "ab", b"ab", None, (META,)]:
        _refused(None, lambda s=shape: RunningMeanStd(s), "shape")
    r = _rms()
    for clip in ["1", NAN, -1.0, 1 + 1j, True]:
        _refused(r, lambda c=clip: r.normalize(np.ones(4), clip=c), "clip")
    _refused(r, lambda: r.normalize(np.ones(4), eps=-1.0), "eps")
    good = r.state_dict()
    for key, value in [("mean", np.full(4, NAN)), ("var", -np.ones(4)), ("count", -1)]:
        _refused(r, lambda k=key, v=value: r.load_state_dict({**good, k: v}), key)
    for key, value in [("count", 2.5), ("count", "3"), ("mean", "abc"), ("var", {"a": 1})]:
        with pytest.raises(CheckpointError, match=key):
            r.load_state_dict({**good, key: value})
    _refused(r, lambda: r.load_state_dict({"mean": good["mean"]}), "sd")


def test_discounted_return_normalizer() -> None:
    for gamma in ["0.9", NAN, 1.5, -0.1, 1 + 1j, None, True]:
        _refused(None, lambda g=gamma: DiscountedReturnNormalizer(g), "gamma")
    for eps in ["0", NAN, -1.0, INF, None]:
        _refused(None, lambda e=eps: DiscountedReturnNormalizer(0.9, eps=e), "eps")
    d = _drn()
    for bad in [*ARRAY, np.ones((3, 5)), np.ones((2, 2, 4))]:
        _refused(d, lambda b=bad: d.update(b), "rewards")
    for bad in ARRAY:
        _refused(d, lambda b=bad: d.scale(b), "rewards")
    good = d.state_dict()
    for key, value in [("eps", NAN), ("returns", np.array([NAN] * 4)), ("returns", "abc")]:
        _refused(d, lambda k=key, v=value: d.load_state_dict({**good, k: v}), key)
    bad_rms = {**good, "rms": {**good["rms"], "var": -np.ones(())}}
    _refused(d, lambda: d.load_state_dict(bad_rms), "var")


def _demo(**kw: Any) -> Demo:
    args: dict[str, Any] = {
        "observations": np.ones((4, 3), F),
        "actions": np.zeros(4, np.int64),
        "rewards": np.ones(4, F),
    }
    return Demo(**{**args, **kw})


DEMO_BAD = {
    "observations": ARRAY,
    "actions": ARRAY,
    "rewards": [*ARRAY, np.full(4, 1e300), np.array([True] * 4), np.full(4, 2**31 + 1)],
    "human": [0.5, 2, -1, 1, "True", None, NAN],
    "max_value": [v for v in NUMBER if v is not True] + [True],
    "demo_id": [*INT, 2.0],
}


@pytest.mark.parametrize(
    ("arg", "bad"), [(a, b) for a, vs in DEMO_BAD.items() for b in vs], ids=_id
)
def test_demo_fields(arg: str, bad: Any) -> None:
    _refused(None, lambda: _demo(**{arg: bad}), arg)


def test_demo_accepts_lossless_values() -> None:
    d = _demo(rewards=np.array([1, 2, 3, 2**24], np.int64), human=np.bool_(True), demo_id=3)
    assert d.rewards.dtype == F and d.rewards.tolist() == [1, 2, 3, 2**24]
    assert d.human is True and d.demo_id == 3
    obs = torch.arange(12.0, requires_grad=True).reshape(4, 3)
    np.testing.assert_array_equal(_demo(observations=obs).observations, obs.detach().numpy())


def _store() -> DemoStore:
    s = DemoStore(5, seed=0)
    s.add_initial(_demo())
    s.offer_episode(np.ones((4, 3), F), np.zeros(4, np.int64), np.zeros(4, F), 1.0)
    return s


@pytest.mark.parametrize("arg", ["rho", "phi", "alpha", "reward_threshold"])
def test_demo_store_constructor(arg: str) -> None:
    for bad in [v for v in NUMBER if v is not None or arg != "reward_threshold"]:
        _refused(None, lambda b=bad: DemoStore(5, **{arg: b}), arg)


@pytest.mark.parametrize("i", range(4), ids=["observations", "actions", "rewards", "max_value"])
def test_demo_store_offer_episode(i: int) -> None:
    name = ["observations", "actions", "rewards", "max_value"][i]
    s = _store()
    for bad in DEMO_BAD[name] if i < 3 else [*NUMBER]:
        args: list[Any] = [np.ones((4, 3), F), np.zeros(4, np.int64), np.ones(4, F), 1.0]
        args[i] = bad
        _refused(s, lambda a=args: s.offer_episode(*a), name)


def test_demo_store_other_methods() -> None:
    s = _store()
    for bad in [None, "abc", {"a": 1}, np.ones(4)]:
        _refused(s, lambda b=bad: s.add_initial(b), "demo")
        _refused(s, lambda b=bad: s.add_bonus(b), "demo")
    for bad in NUMBER:
        _refused(s, lambda b=bad: s.update_max_value(1, b), "max_value")
    for bad in INT:
        if bad not in (-5, 2.0):
            _refused(s, lambda b=bad: s.update_max_value(b, 1.0), "demo_id")
    for bad in [*INT, 2**0.5]:
        if bad != 2.0:
            _refused(s, lambda b=bad: s.top_demos("reward", b), "k")
    _refused(s, lambda: s.top_demos("best", 2), "kind")
    for bad in [None, 1, np.ones(3), "demo"]:
        _refused(s, lambda b=bad: s.sample_demo(b), "source")
    good = s.state_dict()
    _refused(s, lambda: s.load_state_dict({**good, "rng": {"bit_generator": "x"}}), "rng")
    _refused(s, lambda: s.load_state_dict({**good, "next_id": "x"}), "next_id")


FLAGS = [None, "abc", {"a": 1}, np.ones(4, complex), np.full(4, 0.5), np.full(4, 2)]
FLAGS += [np.full(4, -1), np.full(4, NAN), np.array(["False"] * 4), np.zeros(3, bool), META]


@pytest.mark.parametrize("i", range(1, 5), ids=["action", "reward", "terminated", "truncated"])
def test_transition_adapter_step(i: int) -> None:
    name = ["obs", "action", "reward", "terminated", "truncated"][i]
    bad_values = FLAGS if i >= 3 else [*ARRAY, np.ones(3), np.full(4, NAN)]
    for bad in bad_values:
        ad = TransitionAdapter("NextStep", 4)
        ad.step(*_step_args(np.array([0, 1, 0, 0], bool)))
        pending = ad._autoreset.copy()
        args = _step_args(np.zeros(4, bool))
        args[i] = bad
        with pytest.raises(RLStoreError, match=name):
            ad.step(*args)
        np.testing.assert_array_equal(ad._autoreset, pending)


def _step_args(term: np.ndarray) -> list[Any]:
    return [np.ones((4, 3)), np.zeros(4), np.ones(4), term, np.zeros(4, bool), {}, np.ones((4, 3))]


def test_transition_adapter_accepts_exact_flags_and_rejects_huge_num_envs() -> None:
    tr = TransitionAdapter("NextStep", 4).step(*_step_args(np.array([0, 1.0, 0, 1])))
    assert tr.terminated.tolist() == [False, True, False, True]
    _refused(None, lambda: TransitionAdapter("NextStep", 2**70), "num_envs")


def test_field_spec() -> None:
    for name in [None, "", 3, b"x"]:
        _refused(None, lambda n=name: FieldSpec(n, (2,), F), "name")
    for shape in [b"ab", "ab", (2.5,), (True,), (np.inf,), (META,), 3]:
        _refused(None, lambda s=shape: FieldSpec("x", s, F), "x: shape")
    for dtype in [torch.ones(2), META, "nope"]:
        _refused(None, lambda d=dtype: FieldSpec("x", (2,), d), "x: invalid dtype")


def test_constructors_refuse_sizes_they_cannot_allocate() -> None:
    from rlstore import ReplayBuffer, RolloutBuffer
    from rlstore.buffers.demo_mixer import DemoMixer

    _refused(None, lambda: ReplayBuffer(8, num_envs=2**70), "num_envs")
    for steps, envs in [(2**70, 2), (4, 2**70), (2**40, 2**30)]:
        _refused(None, lambda s=steps, e=envs: RolloutBuffer(s, e), "num_steps, num_envs")
    store = DemoStore(3)
    _refused(None, lambda: DemoMixer(store, 2**70), "num_envs")
    for fs in [0.5, 2**70, 0, True]:
        _refused(None, lambda f=fs: DemoMixer(store, 2, frame_stack=f), "frame_stack")
    _refused(None, lambda: DemoMixer(store, 2, track_episodes=0.5), "track_episodes")
    _refused(None, lambda: DemoMixer(store, 2, reset_env=3), "reset_env")
    _refused(None, lambda: DemoMixer("store", 2), "store")  # type: ignore[arg-type]


def test_normalize_advantages_ragged_list_is_named() -> None:
    from rlstore.returns import normalize_advantages

    _refused(None, lambda: normalize_advantages([[1.0, 2.0], [3.0]]), "adv")


MIXER_BAD = {
    "action": [*ARRAY, np.ones(3)],
    "reward": [*ARRAY, np.full(4, 1e300), np.ones(3), np.ones((4, 1)), np.ones(4, bool)],
    "terminated": FLAGS,
    "truncated": FLAGS,
    "next_obs": [*ARRAY, np.ones((4, 2))],
    "value": [*ARRAY[1:], np.ones(3)],  # None: no values
}


def _mixer_state(mixer: Any) -> str:
    def leaf(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return [str(x.dtype), list(x.shape), x.tobytes().hex()]
        if isinstance(x, (list, tuple)):
            return [leaf(v) for v in x]
        if isinstance(x, dict):
            return {str(k): leaf(v) for k, v in x.items()}
        if isinstance(x, Demo):
            return leaf(x.state())
        if hasattr(x, "__dict__"):
            return leaf(vars(x))
        return repr(x)

    state = {k: v for k, v in vars(mixer).items() if k != "store"}
    return json.dumps([leaf(state), _state(mixer.store)], sort_keys=True)


@pytest.mark.parametrize("arg", list(MIXER_BAD))
def test_demo_mixer_step_and_reset(arg: str) -> None:
    from rlstore.buffers.demo_mixer import DemoMixer

    store = DemoStore(5, rho=0.5, seed=0)
    store.add_initial(_demo(observations=np.ones((4, 3), F), actions=np.zeros(4, np.int64)))
    mixer = DemoMixer(store, 4)
    mixer.reset(np.zeros((4, 3), F))
    good = {
        "action": np.zeros(4, np.int64),
        "reward": np.zeros(4, F),
        "terminated": np.array([1, 0, 0, 0], bool),
        "truncated": np.zeros(4, bool),
        "next_obs": np.zeros((4, 3), F),
        "value": np.zeros(4, F),
    }
    mixer.step(**good)
    before = _mixer_state(mixer)
    for bad in MIXER_BAD[arg]:
        with pytest.raises(RLStoreError, match=arg):
            mixer.step(**{**good, arg: bad})
        assert _mixer_state(mixer) == before
    for bad in ARRAY:
        with pytest.raises(RLStoreError, match="obs"):
            mixer.reset(bad)


def test_ppod_npz_demos_never_unpickle_and_refuse_junk(tmp_path: Any) -> None:
    import sys
    import zipfile

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent / "compat"))
    from test_ppod import Algo, LinearActor

    from rlstore.compat.ppod import PPODBuffer

    class Env:
        num_envs, env_kwargs = 2, {"frame_skip": 4}

    buf = PPODBuffer(4, "cpu", LinearActor(), Algo(), Env())
    good = {"Observation": np.ones((3, 2), F), "Action": np.zeros((3, 1)), "Reward": np.ones(3)}
    cases = {
        "pickled": {**good, "Observation": np.array([object()] * 3)},
        "strings": {**good, "Reward": np.array(["a"] * 3)},
        "complex": {**good, "Observation": np.ones((3, 2), complex)},
        "overflow": {**good, "Observation": np.full((3, 2), 1e300)},
        "skip_vector": {**good, "FrameSkip": np.array([4, 4])},
        "skip_string": {**good, "FrameSkip": np.array("x")},
        "skip_fraction": {**good, "FrameSkip": np.array(4.5)},
    }
    for name, arrays in cases.items():
        np.savez(tmp_path / f"{name}.npz", **arrays)
        with pytest.raises(CheckpointError, match=name):
            buf.load_demo(tmp_path / f"{name}.npz")
    (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(CheckpointError, match="garbage"):
        buf.load_demo(tmp_path / "garbage.npz")
    np.save(tmp_path / "npy.npz", np.ones(3))  # a bare .npy under an .npz name
    (tmp_path / "npy.npz.npy").rename(tmp_path / "npy.npz")
    with pytest.raises(CheckpointError, match="npy"):
        buf.load_demo(tmp_path / "npy.npz")
    assert zipfile.is_zipfile(tmp_path / "pickled.npz")


PPO_CONFIG_BOOLS = [
    ("RunConfig", "seed"),
    ("RunConfig", "torch_threads"),
    ("OnlineTrainConfig", "total_timesteps"),
    ("OnlineTrainConfig", "num_envs"),
    ("OnlineTrainConfig", "learning_rate"),
    ("OnlineTrainConfig", "gamma"),
    ("OnlineTrainConfig", "clip_coef"),
    ("LSTMModelConfig", "memory_dim"),
    ("TransformerModelConfig", "n_layers"),
]


@pytest.mark.parametrize(("model", "field"), PPO_CONFIG_BOOLS)
def test_ppo_config_numbers_refuse_bools(model: str, field: str) -> None:
    from rlstore.agents import ppo_config as config

    _refused(None, lambda: getattr(config, model)(**{field: True}), field)


@pytest.mark.parametrize("field", ["learning_rate", "adam_eps", "clip_coef", "ent_coef", "vf_coef"])
def test_ppo_config_coefficients_refuse_inf(field: str) -> None:
    from rlstore.agents.ppo_config import OnlineTrainConfig

    _refused(None, lambda: OnlineTrainConfig(**{field: INF}), field)


def _ppo_buffer() -> Any:
    from rlstore.compat.ppo_buffer import PPOBuffer

    buf = PPOBuffer(3, 2, size=8, batch_size=4)
    buf.store({"obs": np.ones(3), "act": np.zeros(2), "rew": 1.0, "val": 0.5, "logp": -0.1})
    return buf


def _ppo_state(buf: Any) -> list[Any]:
    names = ("obs_buf", "act_buf", "rew_buf", "val_buf", "logp_buf", "adv_buf", "ret_buf")
    return [buf.ptr, buf.path_start_idx, *(getattr(buf, k).tobytes() for k in names)]


@pytest.mark.parametrize("key", ["rew", "val", "logp"])
def test_ppo_buffer_store_refuses_bools(key: str) -> None:
    buf = _ppo_buffer()
    step = {"obs": np.ones(3), "act": np.zeros(2), "rew": 1.0, "val": 0.5, "logp": -0.1}
    before = _ppo_state(buf)
    with pytest.raises(RLStoreError, match=key):
        buf.store({**step, key: True})
    assert _ppo_state(buf) == before


@pytest.mark.parametrize("last_val", [1e300, True])
def test_ppo_buffer_finish_path_refuses_lossy_last_val(last_val: Any) -> None:
    buf = _ppo_buffer()
    before = _ppo_state(buf)
    with pytest.raises(RLStoreError, match="last_val"):
        buf.finish_path(last_val)
    assert _ppo_state(buf) == before


@pytest.mark.parametrize("config", [{"capacity": 5, "evil": 1}, [1], {"capacity": "5"}])
def test_demo_store_load_refuses_configs_that_do_not_fit(config: Any) -> None:
    from rlstore import checkpoint  # the one load path (DemoStore is registered)

    record = {"class": "DemoStore", "config": config}
    with pytest.raises(CheckpointError, match="config"):
        checkpoint.build_from_record(record, _store().state_dict())
