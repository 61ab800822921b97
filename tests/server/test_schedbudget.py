"""How often one key's schedules may fire (``server/core/schedbudget.py``), on real cron
expressions: the most each can fire in any hour, refused past the budget, one-shots free."""

from __future__ import annotations

import pytest

from pushjobs.errors import ApiError
from server.core.schedbudget import check, peak_fires_per_hour
from server.core.schedule import Trigger

EVERY_SECOND = Trigger(cron="* * * * * *")
EVERY_MINUTE = Trigger(cron="* * * * *")
HOURLY = Trigger(cron="0 * * * *")
ONCE = Trigger(at_ms=1_790_000_000_000)


def test_the_most_a_schedule_can_fire_in_an_hour() -> None:
    assert peak_fires_per_hour(EVERY_MINUTE) == 60
    assert peak_fires_per_hour(HOURLY) == 1
    assert peak_fires_per_hour(EVERY_SECOND) == 3600
    assert peak_fires_per_hour(Trigger(cron="*/2 5-10 * * * *")) == 30 * 6
    assert peak_fires_per_hour(ONCE) == 0


@pytest.mark.parametrize(
    "cron",
    [
        "* * 3 * * *",  # every second, but only from 03:00 to 03:59
        "* * * 1 * *",  # every second, but only on the first of the month
        "* * * 29 2 *",  # every second, on 29 February only
    ],
)
def test_a_burst_on_a_later_hour_or_day_counts_as_much_as_one_now(cron: str) -> None:
    """Counting only the hour ahead would let these in: they fire nothing today."""
    assert peak_fires_per_hour(Trigger(cron=cron)) == 3600


def test_a_key_may_fill_its_budget_and_not_pass_it() -> None:
    check("amy", EVERY_SECOND, [], per_minute=60)  # exactly the budget
    check("amy", EVERY_MINUTE, [EVERY_MINUTE] * 59, per_minute=60)
    with pytest.raises(ApiError) as refused:
        check("amy", HOURLY, [EVERY_SECOND], per_minute=60)
    assert refused.value.code == "busy"
    assert "amy's schedules could fire 60.0167 times a minute" in str(refused.value)
    assert "one key's may fire 60 (jobs.schedule_fires_per_minute_per_caller)" in str(refused.value)
    with pytest.raises(ApiError):
        check("amy", Trigger(cron="* * 3 * * *"), [HOURLY], per_minute=60)


def test_a_one_shot_is_never_refused_here() -> None:
    check("amy", ONCE, [EVERY_SECOND] * 5, per_minute=60)
