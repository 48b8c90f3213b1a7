"""Backpressure between inserts and samples: Reverb's ``SampleToInsertRatio``, in plain Python.

Reverb's semantics (``reverb.rate_limiters.SampleToInsertRatio``): with ``I`` items inserted and
``S`` items sampled so far, ``diff = I * samples_per_insert - S`` must stay inside
``[min_diff, max_diff] = samples_per_insert * min_size_to_sample -/+ error_buffer``:

* a sample is allowed once ``I >= min_size_to_sample`` and while ``diff >= min_diff`` (the learner
  waits for collectors when it has sampled too much);
* an insert is allowed while ``I < min_size_to_sample`` or ``diff <= max_diff`` (collectors wait
  for the learner when they have inserted too much).

Whole calls. rlstore inserts whole fragments (``T * num_envs`` transitions) and samples whole
batches, where Reverb admits one item at a time. A call is admitted when the state *before* it
allows one more item, and then counts all of its items, so the ratio overshoots its band by at
most one call's items (per concurrent caller). This can never block both sides at once: an
insert waits only while ``diff > max_diff``, a sample only while ``diff < min_diff`` or
``I < min_size_to_sample``, and ``min_diff < max_diff``.

Blocking. :meth:`SampleToInsertRatio.wait_insert` / :meth:`~SampleToInsertRatio.wait_sample`
wait on a condition variable until the call is admitted or ``timeout_s`` passes, then raise
:class:`ReplayTimeoutError` with the limiter's state, never hang silently;
:meth:`~SampleToInsertRatio.record_insert` / :meth:`~SampleToInsertRatio.record_sample` count
a finished call (so a call that failed is never counted) and wake the other side.

Example:
    >>> lim = SampleToInsertRatio(samples_per_insert=2.0, min_size_to_sample=4, error_buffer=8.0)
    >>> lim.can_sample(1)
    False
    >>> lim.record_insert(4)
    >>> lim.can_sample(32), lim.can_insert(1)  # diff = 4 * 2 - 0 = 8 in [0, 16]
    (True, True)
    >>> lim.record_insert(8)  # diff = 24 > 16: collectors wait for the learner
    >>> lim.can_insert(1)
    False
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from rlstore._checks import check_count, check_keys, real_number
from rlstore.errors import CheckpointError, ConfigError

__all__ = ["ReplayTimeoutError", "SampleToInsertRatio"]


class ReplayTimeoutError(TimeoutError):
    """A distributed replay call did not finish in time: a remote call without an answer, or an
    insert or sample the rate limiter kept waiting. The message names the shard and the call."""


class SampleToInsertRatio:
    """Keep ``samples / inserts`` near ``samples_per_insert`` (module docstring).

    Args:
        samples_per_insert: target number of sampled items per inserted item (> 0).
        min_size_to_sample: inserts needed before the first sample (int >= 1).
        error_buffer: half-width of the allowed ``diff`` band; at least
            ``max(1, samples_per_insert)`` (Reverb's bound: a smaller band could block both).

    Raises:
        ConfigError: an argument out of range or of the wrong type.
    """

    def __init__(self, samples_per_insert: float, min_size_to_sample: int, error_buffer: float):
        spi = real_number("samples_per_insert", samples_per_insert, 0.0)
        if not 0.0 < spi < float("inf"):
            raise ConfigError(
                f"samples_per_insert: expected a finite number > 0, got {samples_per_insert!r}"
            )
        self.samples_per_insert = spi
        self.min_size_to_sample = check_count(
            "min_size_to_sample", min_size_to_sample, error=ConfigError
        )
        eb = real_number("error_buffer", error_buffer, 0.0)
        if not max(1.0, spi) <= eb < float("inf"):
            raise ConfigError(
                f"error_buffer: expected a finite number >= max(1, samples_per_insert) = "
                f"{max(1.0, spi)}, got {error_buffer!r}"
            )
        self.error_buffer = eb
        offset = spi * self.min_size_to_sample
        self.min_diff, self.max_diff = offset - eb, offset + eb
        self.inserts = self.samples = 0
        self._cond = threading.Condition()

    def config(self) -> dict[str, Any]:
        """Constructor kwargs: ``SampleToInsertRatio(**lim.config())`` is a fresh twin."""
        return {
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
            "error_buffer": self.error_buffer,
        }

    def _diff(self) -> float:
        return self.inserts * self.samples_per_insert - self.samples

    def can_insert(self, n: int) -> bool:
        """Whether an insert of ``n`` items is admitted now (the state allows one more item)."""
        check_count("n", n)
        return self.inserts < self.min_size_to_sample or self._diff() <= self.max_diff

    def can_sample(self, n: int) -> bool:
        """Whether a sample of ``n`` items is admitted now."""
        check_count("n", n)
        return self.inserts >= self.min_size_to_sample and self._diff() >= self.min_diff

    def _wait(self, side: str, n: int, timeout_s: float | None, where: str) -> None:
        ok = self.can_insert if side == "insert" else self.can_sample
        check_count("n", n)
        if timeout_s is not None:
            real_number("timeout_s", timeout_s, 0.0)
        with self._cond:
            if self._cond.wait_for(lambda: ok(n), timeout_s):
                return
            raise ReplayTimeoutError(
                f"{where}{side} of {n} items: blocked by the rate limiter for {timeout_s} s "
                f"(inserts={self.inserts}, samples={self.samples}, diff={self._diff():g}, "
                f"allowed diff [{self.min_diff:g}, {self.max_diff:g}], min_size_to_sample="
                f"{self.min_size_to_sample}): the other side made no progress"
            )

    def wait_insert(self, n: int, timeout_s: float | None = None, *, where: str = "") -> None:
        """Block until an insert of ``n`` items is admitted.

        Raises:
            ReplayTimeoutError: not admitted within ``timeout_s`` (``None``: wait forever);
                ``where`` (e.g. ``"shard replay/0: "``) starts the message.
        """
        self._wait("insert", n, timeout_s, where)

    def wait_sample(self, n: int, timeout_s: float | None = None, *, where: str = "") -> None:
        """Block until a sample of ``n`` items is admitted (see :meth:`wait_insert`)."""
        self._wait("sample", n, timeout_s, where)

    def record_insert(self, n: int) -> None:
        """Count ``n`` inserted items and wake waiting samplers."""
        with self._cond:
            self.inserts += check_count("n", n, minimum=0)
            self._cond.notify_all()

    def record_sample(self, n: int) -> None:
        """Count ``n`` sampled items and wake waiting inserters."""
        with self._cond:
            self.samples += check_count("n", n, minimum=0)
            self._cond.notify_all()

    def state_dict(self) -> dict[str, Any]:
        """The counters (the config is the constructor's)."""
        with self._cond:
            return {"inserts": self.inserts, "samples": self.samples}

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output.

        Raises:
            CheckpointError: missing keys or counters that are not ints >= 0 (nothing changes).
        """
        check_keys("rate_limiter", sd, ("inserts", "samples"))
        for k in ("inserts", "samples"):
            check_count(f"rate_limiter.{k}", sd[k], minimum=0, error=CheckpointError)
        with self._cond:
            self.inserts, self.samples = int(sd["inserts"]), int(sd["samples"])
            self._cond.notify_all()

    def __getstate__(self) -> dict[str, Any]:  # the condition variable does not pickle
        return {"config": self.config(), "state": self.state_dict()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state["config"])  # type: ignore[misc]
        self.load_state_dict(state["state"])
