"""Probe environments: tiny MDPs that each isolate one part of an RL agent.

After Andy Jones, "Debugging RL, Without the Agonizing Pain", and the ``src.ppo.my_probe_envs``
module of DecisionTransformerInterpretability. Every probe has a ``Box`` observation of shape
``(1,)`` (float32), a ``Discrete`` action space, the Gymnasium 5-tuple API, is seedable through
``reset(seed=...)``, and ends by *termination* (never truncation), so the optimal values below are
exact:

=======  =========  =================================================  ===========================
probe    actions    dynamics (t = step index within the episode)       optimal V / policy
=======  =========  =================================================  ===========================
Probe1   1          obs [0]; reward +1; terminated after 1 step          V([0]) = 1
Probe2   1          obs [r], r = +-1 (p = 1/2); reward r; 1 step         V([r]) = r
Probe3   1          obs [0] then [1]; reward 0 then +1; 2 steps          V([0]) = gamma, V([1]) = 1
Probe4   2          obs [0]; reward +1 if a == 1 else -1; 1 step          pi(1) = 1, V = 1
Probe5   2          obs [o], o in {0, 1}; reward +1 if a == o else -1    pi(o | o) = 1, V = 1
Probe6   2          obs [t], t = 0..9; reward 1 if a == t mod 2 else 0;  pi(t mod 2 | t) = 1,
                    terminated after 10 steps                          V([t]) = sum_{k<10-t} g^k
Probe7   2 (or n)   obs [c], c in {0, 1}, then [-1] (blank) x 3;          memory: V_t = g^(3-t);
                    reward 1 at the 4th decision if a == c, else 0      no memory: at most 0.5
=======  =========  =================================================  ===========================

Deliberate differences from DecisionTransformerInterpretability's ``my_probe_envs``:

* Probe6 implements the original's *documented* intent (reward 1 when the action equals ``t mod
  2``), not its code (reward 1 at t = 10 whatever the action). Its observation space is fixed to
  ``[0, 10]`` instead of being mutated every step.
* Probe7's blank observation is ``[-1]``, so the cue ``[0]`` cannot be confused with it, and it
  has 2 actions by default (``Probe7(num_actions=5)`` gives the original's action count; actions >=
  2 are never rewarded). A feed-forward agent sees only blanks at the rewarded decision, so its best
  expected reward is 0.5; an agent with memory gets 1.

Environments are NOT registered on import; call :func:`register_probes` once::

    >>> import gymnasium as gym
    >>> register_probes()
    >>> env = gym.make("rlstore/Probe3-v0")
    >>> env.reset(seed=0)[0].tolist()
    [0.0]
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from rlstore.errors import ConfigError, SpecError

__all__ = [
    "Probe1",
    "Probe2",
    "Probe3",
    "Probe4",
    "Probe5",
    "Probe6",
    "Probe7",
    "PROBE_IDS",
    "register_probes",
]

ObsType = np.ndarray
StepResult = tuple[np.ndarray, float, bool, bool, dict[str, Any]]


class _ProbeEnv(gym.Env[np.ndarray, np.int64]):
    """The skeleton every probe shares; a probe states only what differs.

    (1,)-shaped float32 observations, discrete actions, action validation, seeding, and an episode
    of ``episode_length`` steps that always ends by termination. A probe overrides:

    * ``_draw()``: the episode's hidden value, drawn from ``np_random`` at reset (default 0.0,
      drawing nothing, so probes without randomness never touch the RNG);
    * ``_observe(t)``: the observation value at step index ``t`` (``t = episode_length`` is the
      final observation), which may read the drawn value ``self._value``;
    * ``_reward(t, a)``: the reward for action ``a`` taken at step index ``t``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012
    episode_length: ClassVar[int] = 1
    _n_actions: int = 1
    _low: ClassVar[float] = -1.0  # Box bounds; gymnasium warns when low == high
    _high: ClassVar[float] = 1.0

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(
            low=np.float32(self._low), high=np.float32(self._high), shape=(1,), dtype=np.float32
        )
        self.action_space = gym.spaces.Discrete(self._n_actions)
        self._t = 0
        self._value = 0.0
        self._done = True

    def _draw(self) -> float:
        return 0.0

    def _observe(self, t: int) -> float:
        return 0.0

    def _reward(self, t: int, a: int) -> float:
        raise NotImplementedError

    def _obs(self) -> np.ndarray:
        return np.array([self._observe(self._t)], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._done = False
        self._value = self._draw()
        return self._obs(), {}

    def step(self, action: Any) -> StepResult:
        if self._done:
            raise gym.error.ResetNeeded(
                f"{type(self).__name__}: call reset() before step() (the episode has ended)"
            )
        if not self.action_space.contains(action):
            raise SpecError(
                f"action: expected an int in [0, {self._n_actions - 1}] "
                f"for {type(self).__name__}, got {action!r}"
            )
        reward = float(self._reward(self._t, int(action)))
        self._t += 1
        self._done = self._t >= self.episode_length
        return self._obs(), reward, self._done, False, {}


class Probe1(_ProbeEnv):
    """One action, observation [0.0], one step, reward +1. Tests the value loss: V([0]) = 1."""

    def _reward(self, t: int, a: int) -> float:
        return 1.0


class Probe2(_ProbeEnv):
    """One action, observation [r] with r = -1 or +1 (p = 1/2), one step, reward r.

    Tests backpropagation through the value network: V([r]) = r.
    """

    def _draw(self) -> float:
        return float(self.np_random.choice([-1.0, 1.0]))

    def _observe(self, t: int) -> float:
        return self._value

    def _reward(self, t: int, a: int) -> float:
        return self._value


class Probe3(_ProbeEnv):
    """One action, observation [0] then [1], reward 0 then +1, two steps.

    Tests discounting (gamma applied once per step): V([0]) = gamma, V([1]) = 1.
    """

    episode_length = 2

    def _observe(self, t: int) -> float:
        return 0.0 if t == 0 else 1.0

    def _reward(self, t: int, a: int) -> float:
        return 0.0 if t == 0 else 1.0


class Probe4(_ProbeEnv):
    """Two actions, observation [0], one step, reward +1 for action 1 and -1 for action 0.

    The first policy test: pi(a=1) -> 1 and V -> 1 (under pi, V = 2 pi(1) - 1).
    """

    _n_actions = 2

    def _reward(self, t: int, a: int) -> float:
        return 1.0 if a == 1 else -1.0


class Probe5(_ProbeEnv):
    """Two actions, observation [o], o = 0 or 1 (p = 1/2), one step, reward +1 if a == o else -1.

    Tests policy and value networks together: pi(a=o | o) -> 1, V([o]) -> 1.
    """

    _n_actions = 2

    def _draw(self) -> float:
        return float(self.np_random.integers(0, 2))

    def _observe(self, t: int) -> float:
        return self._value

    def _reward(self, t: int, a: int) -> float:
        return 1.0 if a == self._value else -1.0


class Probe6(_ProbeEnv):
    """Two actions, observation = step counter [t], reward 1 if a == t mod 2 else 0, 10 steps.

    Tests a state-dependent policy over a 10-step horizon: pi(a = t mod 2 | t) -> 1, and then
    V([t]) = sum_{k=0}^{9-t} gamma^k. The episode is terminated after the step at t = 9; the
    final observation is [10].
    """

    episode_length = 10
    _n_actions = 2
    _low = 0.0
    _high = 10.0

    def _observe(self, t: int) -> float:
        return float(t)

    def _reward(self, t: int, a: int) -> float:
        return 1.0 if a == t % 2 else 0.0


class Probe7(_ProbeEnv):
    """Memory task: cue [c] (c = 0 or 1) at t = 0, blank [-1] at t = 1, 2, 3; reward 1 at the
    4th decision (t = 3) if the action equals c, else 0; terminated after it.

    With memory V_t = gamma^(3-t) and the mean episode reward is 1; without memory the cue is
    invisible at t = 3 and the best expected reward is 0.5 (negative control).

    Args:
        num_actions: size of the action space, >= 2 (default 2; DecisionTransformerInterpretability
            used 5). Only actions 0 and 1 can ever be rewarded.
    """

    episode_length = 4
    num_decisions: ClassVar[int] = episode_length
    blank: ClassVar[float] = -1.0

    def __init__(self, num_actions: int = 2) -> None:
        if isinstance(num_actions, bool) or not isinstance(num_actions, int) or num_actions < 2:
            raise ConfigError(f"num_actions: expected an int >= 2, got {num_actions!r}")
        self._n_actions = num_actions
        super().__init__()

    def _draw(self) -> float:
        return float(self.np_random.integers(0, 2))

    def _observe(self, t: int) -> float:
        return self._value if t == 0 else self.blank

    def _reward(self, t: int, a: int) -> float:
        last = t == self.num_decisions - 1
        return 1.0 if last and a == self._value else 0.0


#: Gymnasium ids registered by :func:`register_probes`, in probe order.
PROBE_IDS: tuple[str, ...] = tuple(f"rlstore/Probe{i}-v0" for i in range(1, 8))


def register_probes() -> None:
    """Register ``rlstore/Probe1-v0`` ... ``rlstore/Probe7-v0`` with Gymnasium.

    Idempotent: ids that are already registered are left alone (no "overriding" warning).
    Keyword arguments reach the constructor through ``gym.make``, e.g.
    ``gym.make("rlstore/Probe7-v0", num_actions=5)``.
    """
    for i, env_id in enumerate(PROBE_IDS, start=1):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=f"rlstore.envs.probes:Probe{i}")
