"""PPO+D demonstrations, the public names in one place: the records and their store
(:mod:`rlstore.buffers.demo_store`: :class:`Demo`, :class:`DemoStore`), the single-demo files
(:mod:`rlstore.buffers.demo_files`) and the rollout mixer that stands on them
(:mod:`rlstore.buffers.demo_mixer`: :class:`DemoMixer`, :class:`MixedStep`, the source codes
``ENV``, ``REWARD_DEMO``, ``VALUE_DEMO``)."""

from __future__ import annotations

from rlstore.buffers.demo_files import list_demos, load_demo, save_demo
from rlstore.buffers.demo_mixer import ENV, REWARD_DEMO, VALUE_DEMO, DemoMixer, MixedStep
from rlstore.buffers.demo_store import (
    Demo,
    DemoStore,
    cut_after_last_positive,
    value_demo_probabilities,
)

__all__ = [
    "Demo", "DemoStore", "DemoMixer", "MixedStep", "cut_after_last_positive",
    "value_demo_probabilities", "save_demo", "load_demo", "list_demos", "ENV", "REWARD_DEMO",
    "VALUE_DEMO",
]  # fmt: skip
