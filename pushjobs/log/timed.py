"""How long the ordered log takes to make an append durable, measured around any backend.

Theory of operation. ``TimedLog`` wraps an ``OrderedLog`` and passes every call through;
``append_batch`` (and so ``append``) is timed with the handle's clock and its duration
counted in ``Latency``: fixed buckets, six per decade from 10 us to 70 s, a running sum
and the longest. A quantile is read as the upper bound of the bucket that holds it, so it
is at most one bucket (a factor of 1.5) above the truth, and costs nothing per append
but one bisection. An append that raised is counted in ``failures``, not timed: a full
disk answers fast and would flatter the figure.

Killed at any line: nothing here is durable; a restarted server counts from zero.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from pushjobs.clock import Clock, SystemClock
from pushjobs.log.base import Batch, Fence, OrderedLog
from pushjobs.log.passthrough import PassThroughLog

BOUNDS_S: tuple[float, ...] = tuple(
    round(m * 10.0**e, 9) for e in range(-5, 2) for m in (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
)
"""Upper bounds of the buckets, in seconds; one more bucket holds what is above the last."""


class Latency:
    """Durations counted in ``BOUNDS_S`` buckets: a histogram that never grows."""

    def __init__(self, bounds: tuple[float, ...] = BOUNDS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum_s = 0.0
        self.max_s = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum_s += seconds
        self.max_s = max(self.max_s, seconds)

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile (the longest one seen
        when it is past the last bound); None before the first observation."""
        if not self.count:
            return None
        rank = q * self.count
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if n and seen >= rank:
                # The bucket's bound, unless the longest seen is shorter: never above the max.
                return (
                    min(self.bounds[index], self.max_s) if index < len(self.bounds) else self.max_s
                )
        return self.max_s

    def summary(self) -> dict[str, Any]:
        """For ``server.info``: totals, p50/p99/max in ms, cumulative [bound_s, count] pairs."""
        cumulative, seen = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            seen += n
            cumulative.append([bound, seen])
        p50, p99 = self.quantile(0.5), self.quantile(0.99)
        return {
            "count": self.count,
            "sum_s": round(self.sum_s, 6),
            "p50_ms": None if p50 is None else round(p50 * 1000, 3),
            "p99_ms": None if p99 is None else round(p99 * 1000, 3),
            "max_ms": round(self.max_s * 1000, 3),
            "buckets": cumulative,
        }


class TimedLog(PassThroughLog):
    """``log`` with its appends timed in ``latency``; everything else passed through."""

    def __init__(self, log: OrderedLog, *, clock: Clock | None = None) -> None:
        super().__init__(log)
        self.clock: Clock = clock or SystemClock()
        self.latency = Latency()
        self.failures = 0

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        started = self.clock.monotonic()
        try:
            offsets = self.inner.append_batch(topic, records, fence=fence)
        except BaseException:
            self.failures += 1
            raise
        if records:
            self.latency.observe(self.clock.monotonic() - started)
        return offsets
