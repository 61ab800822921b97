"""How often one key's schedules may fire (``server/schedbudget.py``), on real cron
expressions: counted over the hour ahead, refused past the budget, one-shots free."""

from __future__ import annotations

import pytest

from pushjobs.errors import ApiError
from server.schedbudget import check, fires_within_hour
from server.schedule import Trigger

NOW_MS = 1_790_000_000_000  # 2026-09-21, a whole second
EVERY_SECOND = Trigger(cron="* * * * * *")
EVERY_MINUTE = Trigger(cron="* * * * *")
HOURLY = Trigger(cron="0 * * * *")
ONCE = Trigger(at_ms=NOW_MS + 60_000)


def test_fires_in_the_hour_ahead_are_counted_up_to_the_bound_asked() -> None:
    assert fires_within_hour(EVERY_MINUTE, NOW_MS, 10_000) == 60
    assert fires_within_hour(HOURLY, NOW_MS, 10_000) == 1
    assert fires_within_hour(EVERY_SECOND, NOW_MS, 10_000) == 3600
    assert fires_within_hour(EVERY_SECOND, NOW_MS, 100) == 100  # counting stops there
    assert fires_within_hour(ONCE, NOW_MS, 10_000) == 0


def test_a_key_may_fill_its_budget_and_not_pass_it() -> None:
    check("amy", EVERY_SECOND, [], NOW_MS, per_minute=60)  # exactly the budget
    check("amy", EVERY_MINUTE, [EVERY_MINUTE] * 59, NOW_MS, per_minute=60)
    with pytest.raises(ApiError) as refused:
        check("amy", HOURLY, [EVERY_SECOND], NOW_MS, per_minute=60)
    assert refused.value.code == "busy"
    assert "amy's schedules would fire more than 60 times a minute" in str(refused.value)
    assert "jobs.schedule_fires_per_minute_per_caller" in str(refused.value)


def test_a_one_shot_is_never_refused_here() -> None:
    check("amy", ONCE, [EVERY_SECOND] * 5, NOW_MS, per_minute=60)


def test_a_burst_within_the_hour_counts_at_its_average() -> None:
    # Every second of one minute an hour: 60 fires an hour, one a minute on average.
    burst = Trigger(cron="* 0 * * * *")
    assert fires_within_hour(burst, NOW_MS, 10_000) == 60
    check("amy", burst, [], NOW_MS, per_minute=1)
    with pytest.raises(ApiError):
        check("amy", burst, [HOURLY], NOW_MS, per_minute=1)
