"""An outage of the ordered log: the retry schedule and the few lines an operator reads."""

from __future__ import annotations

from pushjobs.errors import BackendUnavailable, FencedError, LogCorrupt
from pushjobs.log.retry import Outage, retryable

FULL = BackendUnavailable("log.db: appending to events: the disk holding the log is full")


def test_storage_and_reachability_are_retried_corruption_and_fences_are_not() -> None:
    assert retryable(FULL)
    assert not retryable(LogCorrupt("log.db: not an SQLite database"))
    assert not retryable(FencedError("epoch 3 < 4"))


def test_the_first_failure_says_so_and_backs_off_doubling_to_the_cap() -> None:
    outage = Outage(first_s=0.5, max_s=4.0)
    at, line = outage.failed(FULL, 100.0)
    assert at == 100.5
    assert line is not None and line.startswith("the ordered log cannot be written: log.db")
    assert "every 4 s at most" in line
    delays = []
    now = at
    for _ in range(5):
        nxt, line = outage.failed(FULL, now)
        assert line is None  # the same reason again: nothing more to say
        delays.append(nxt - now)
        now = nxt
    assert delays == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert outage.active and not outage.due(now - 0.1) and outage.due(now)


def test_a_new_reason_is_told_once() -> None:
    outage = Outage()
    outage.failed(FULL, 0.0)
    _, line = outage.failed(BackendUnavailable("log.db: read-only file system"), 1.0)
    assert line is not None and "still cannot be written: log.db: read-only" in line
    _, line = outage.failed(BackendUnavailable("log.db: read-only file system"), 2.0)
    assert line is None


def test_recovery_ends_the_outage_with_its_length_and_a_new_one_starts_afresh() -> None:
    outage = Outage(first_s=1.0)
    assert outage.recovered(5.0) is None  # no outage: nothing to say
    outage.failed(FULL, 10.0)
    outage.failed(FULL, 11.0)
    assert outage.status(13.0) == {"error": str(FULL), "for_s": 3.0, "tries": 2}
    assert outage.recovered(13.5) == ("the ordered log can be written again (after 3.5 s, 2 tries)")
    assert not outage.active and outage.status(14.0) is None and outage.due(14.0)
    at, line = outage.failed(FULL, 20.0)
    assert at == 21.0 and line is not None and "cannot be written" in line
