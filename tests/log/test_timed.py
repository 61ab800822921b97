"""Append latency around any backend: the histogram's quantiles, and the wrapper's timing."""

from __future__ import annotations

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import UnknownTopic
from pushjobs.log.base import Fence, TopicPolicy
from pushjobs.log.memory import MemoryLog
from pushjobs.log.timed import BOUNDS_S, Latency, TimedLog


class SlowLog(MemoryLog):
    """A memory log whose appends take ``took_s`` of its fake clock."""

    def __init__(self, clock: FakeClock, took_s: float) -> None:
        super().__init__(clock=clock)
        self.fake = clock
        self.took_s = took_s

    def append_batch(self, topic, records, *, fence: Fence | None = None):  # type: ignore[no-untyped-def]
        self.fake.advance(self.took_s)
        return super().append_batch(topic, records, fence=fence)


def test_an_empty_histogram_has_no_quantile() -> None:
    latency = Latency()
    assert latency.quantile(0.5) is None
    assert latency.summary()["p99_ms"] is None


def test_quantiles_are_the_bound_of_the_bucket_that_holds_them() -> None:
    latency = Latency()
    for _ in range(98):
        latency.observe(0.0012)  # the 1.5 ms bucket
    latency.observe(0.04)  # the 50 ms bucket
    latency.observe(0.09)
    assert latency.quantile(0.5) == 0.0015
    assert latency.quantile(0.99) == 0.05
    summary = latency.summary()
    assert summary["count"] == 100
    assert summary["max_ms"] == 90.0
    assert summary["sum_s"] == pytest.approx(98 * 0.0012 + 0.13)


def test_a_quantile_is_never_above_the_longest_seen() -> None:
    latency = Latency()
    latency.observe(0.0021)  # in the 3 ms bucket
    assert latency.quantile(0.99) == 0.0021


def test_beyond_the_last_bound_the_quantile_is_the_longest_seen() -> None:
    latency = Latency()
    latency.observe(BOUNDS_S[-1] * 3)
    assert latency.quantile(0.5) == BOUNDS_S[-1] * 3
    assert latency.summary()["buckets"][-1] == [BOUNDS_S[-1], 0]


def test_cumulative_buckets_end_at_the_count_below_the_last_bound() -> None:
    latency = Latency()
    for seconds in (0.00001, 0.001, 0.001, 2.0):
        latency.observe(seconds)
    buckets = dict((bound, n) for bound, n in latency.summary()["buckets"])
    assert buckets[0.00001] == 1
    assert buckets[0.001] == 3
    assert buckets[1.5] == 3
    assert buckets[2.0] == 4


def test_the_wrapper_times_appends_and_passes_everything_through() -> None:
    clock = FakeClock()
    log = TimedLog(SlowLog(clock, 0.004), clock=clock)
    log.create_topic("jobs", TopicPolicy())
    assert log.append("jobs", "a", b"1") == 0
    assert log.append_batch("jobs", [("b", b"2"), ("a", b"3")]) == [1, 2]
    assert log.append_batch("jobs", []) == []  # nothing written, nothing timed
    assert [r.value for r in log.read("jobs")] == [b"1", b"2", b"3"]
    assert log.latest("jobs")["a"].value == b"3"
    assert log.end_offset("jobs") == 3
    assert log.latency.count == 2
    assert log.latency.quantile(0.5) == pytest.approx(0.004)  # its bucket (5 ms), capped at the max
    assert log.latency.sum_s == pytest.approx(0.008)  # the empty batch was not counted


def test_a_refused_append_is_a_failure_not_a_duration() -> None:
    clock = FakeClock()
    log = TimedLog(MemoryLog(clock=clock), clock=clock)
    with pytest.raises(UnknownTopic):
        log.append("nope", "a", b"1")
    assert log.failures == 1
    assert log.latency.count == 0
