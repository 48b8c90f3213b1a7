"""Seeded rollouts of every probe against values recorded from the original implementation.

The probes share one reset/step skeleton; these strings were recorded before it was factored out,
so any change to spaces, observations, rewards, termination or seeding shows up here. Each episode
is written ``obs0 a>obs/reward[T][t] ...`` (``T`` terminated, ``t`` truncated).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rlstore.envs import probes
from rlstore.errors import SpecError

SEEDS = (0, 1, 2, 7)


def _rollouts(name: str, kwargs: dict[str, Any]) -> list[str]:
    """The spaces, then per seed: a seeded episode and two unseeded ones (RNG carried over)."""
    env = getattr(probes, name)(**kwargs)
    n = int(env.action_space.n)
    space = env.observation_space
    assert space.dtype == np.float32 and space.shape == (1,)
    out = [f"low={space.low.tolist()} high={space.high.tolist()} n={n}"]
    for seed in SEEDS:
        for k, s in ((0, seed), (1, None), (2, None)):
            obs, info = env.reset(seed=s)
            assert info == {} and obs.dtype == np.float32 and obs.shape == (1,)
            text = f"{obs[0]:g}"
            for t in range(20):
                a = (seed + t * (k + 1) + k) % n
                obs, r, term, trunc, info = env.step(a)
                assert info == {} and obs.dtype == np.float32 and obs.shape == (1,)
                assert type(r) is float and type(term) is bool and type(trunc) is bool
                text += f" {a}>{obs[0]:g}/{r:g}" + "T" * term + "t" * trunc
                if term or trunc:
                    break
            out.append(text)
    return out


CASES: dict[str, tuple[str, dict[str, Any]]] = {
    **{f"Probe{i}": (f"Probe{i}", {}) for i in range(1, 8)},
    "Probe7-5actions": ("Probe7", {"num_actions": 5}),
}

RECORDED: dict[str, list[str]] = {
    "Probe1": [
        "low=[-1.0] high=[1.0] n=1",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
        "0 0>0/1T",
    ],
    "Probe2": [
        "low=[-1.0] high=[1.0] n=1",
        "1 0>1/1T",
        "1 0>1/1T",
        "1 0>1/1T",
        "-1 0>-1/-1T",
        "1 0>1/1T",
        "1 0>1/1T",
        "1 0>1/1T",
        "-1 0>-1/-1T",
        "-1 0>-1/-1T",
        "1 0>1/1T",
        "1 0>1/1T",
        "1 0>1/1T",
    ],
    "Probe3": [
        "low=[-1.0] high=[1.0] n=1",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
        "0 0>1/0 0>1/1T",
    ],
    "Probe4": [
        "low=[-1.0] high=[1.0] n=2",
        "0 0>0/-1T",
        "0 1>0/1T",
        "0 0>0/-1T",
        "0 1>0/1T",
        "0 0>0/-1T",
        "0 1>0/1T",
        "0 0>0/-1T",
        "0 1>0/1T",
        "0 0>0/-1T",
        "0 1>0/1T",
        "0 0>0/-1T",
        "0 1>0/1T",
    ],
    "Probe5": [
        "low=[-1.0] high=[1.0] n=2",
        "1 0>1/-1T",
        "1 1>1/1T",
        "1 0>1/-1T",
        "0 1>0/-1T",
        "1 0>1/-1T",
        "1 1>1/1T",
        "1 0>1/-1T",
        "0 1>0/-1T",
        "0 0>0/1T",
        "1 1>1/1T",
        "1 0>1/-1T",
        "1 1>1/1T",
    ],
    "Probe6": [
        "low=[0.0] high=[10.0] n=2",
        "0 0>1/1 1>2/1 0>3/1 1>4/1 0>5/1 1>6/1 0>7/1 1>8/1 0>9/1 1>10/1T",
        "0 1>1/0 1>2/1 1>3/0 1>4/1 1>5/0 1>6/1 1>7/0 1>8/1 1>9/0 1>10/1T",
        "0 0>1/1 1>2/1 0>3/1 1>4/1 0>5/1 1>6/1 0>7/1 1>8/1 0>9/1 1>10/1T",
        "0 1>1/0 0>2/0 1>3/0 0>4/0 1>5/0 0>6/0 1>7/0 0>8/0 1>9/0 0>10/0T",
        "0 0>1/1 0>2/0 0>3/1 0>4/0 0>5/1 0>6/0 0>7/1 0>8/0 0>9/1 0>10/0T",
        "0 1>1/0 0>2/0 1>3/0 0>4/0 1>5/0 0>6/0 1>7/0 0>8/0 1>9/0 0>10/0T",
        "0 0>1/1 1>2/1 0>3/1 1>4/1 0>5/1 1>6/1 0>7/1 1>8/1 0>9/1 1>10/1T",
        "0 1>1/0 1>2/1 1>3/0 1>4/1 1>5/0 1>6/1 1>7/0 1>8/1 1>9/0 1>10/1T",
        "0 0>1/1 1>2/1 0>3/1 1>4/1 0>5/1 1>6/1 0>7/1 1>8/1 0>9/1 1>10/1T",
        "0 1>1/0 0>2/0 1>3/0 0>4/0 1>5/0 0>6/0 1>7/0 0>8/0 1>9/0 0>10/0T",
        "0 0>1/1 0>2/0 0>3/1 0>4/0 0>5/1 0>6/0 0>7/1 0>8/0 0>9/1 0>10/0T",
        "0 1>1/0 0>2/0 1>3/0 0>4/0 1>5/0 0>6/0 1>7/0 0>8/0 1>9/0 0>10/0T",
    ],
    "Probe7": [
        "low=[-1.0] high=[1.0] n=2",
        "1 0>-1/0 1>-1/0 0>-1/0 1>-1/1T",
        "1 1>-1/0 1>-1/0 1>-1/0 1>-1/1T",
        "1 0>-1/0 1>-1/0 0>-1/0 1>-1/1T",
        "0 1>-1/0 0>-1/0 1>-1/0 0>-1/1T",
        "1 0>-1/0 0>-1/0 0>-1/0 0>-1/0T",
        "1 1>-1/0 0>-1/0 1>-1/0 0>-1/0T",
        "1 0>-1/0 1>-1/0 0>-1/0 1>-1/1T",
        "0 1>-1/0 1>-1/0 1>-1/0 1>-1/0T",
        "0 0>-1/0 1>-1/0 0>-1/0 1>-1/0T",
        "1 1>-1/0 0>-1/0 1>-1/0 0>-1/0T",
        "1 0>-1/0 0>-1/0 0>-1/0 0>-1/0T",
        "1 1>-1/0 0>-1/0 1>-1/0 0>-1/0T",
    ],
    "Probe7-5actions": [
        "low=[-1.0] high=[1.0] n=5",
        "1 0>-1/0 1>-1/0 2>-1/0 3>-1/0T",
        "1 1>-1/0 3>-1/0 0>-1/0 2>-1/0T",
        "1 2>-1/0 0>-1/0 3>-1/0 1>-1/1T",
        "0 1>-1/0 2>-1/0 3>-1/0 4>-1/0T",
        "1 2>-1/0 4>-1/0 1>-1/0 3>-1/0T",
        "1 3>-1/0 1>-1/0 4>-1/0 2>-1/0T",
        "1 2>-1/0 3>-1/0 4>-1/0 0>-1/0T",
        "0 3>-1/0 0>-1/0 2>-1/0 4>-1/0T",
        "0 4>-1/0 2>-1/0 0>-1/0 3>-1/0T",
        "1 2>-1/0 3>-1/0 4>-1/0 0>-1/0T",
        "1 3>-1/0 0>-1/0 2>-1/0 4>-1/0T",
        "1 4>-1/0 2>-1/0 0>-1/0 3>-1/0T",
    ],
}


@pytest.mark.parametrize("case", list(CASES))
def test_seeded_rollout_matches_recording(case: str) -> None:
    name, kwargs = CASES[case]
    assert _rollouts(name, kwargs) == RECORDED[case]


def test_probe7_action_error_names_the_configured_action_count() -> None:
    # it said "[0, 1]" for Probe7(num_actions=5), whose valid actions are 0..4
    env = probes.Probe7(num_actions=5)
    env.reset(seed=0)
    with pytest.raises(SpecError, match=r"action: expected an int in \[0, 4\] for Probe7, got 5"):
        env.step(5)
