"""How often one key's schedules may fire, checked when it adds one. Pure.

A user key's ``job.start`` requests are bounded per minute (``quotas.py``), but its
schedules start jobs without asking: a writer could add a hundred every-second schedules
and start 6,000 jobs a minute. So when a key adds a recurring schedule, the fires of all
its schedules in the hour ahead are counted (paused ones too: a resume is not checked
again), and the add is refused ``busy`` when they would pass 60 times ``per_minute``. Counted
over an hour, a burst within it (every second of one minute) counts at its average. A
one-shot fires once: it costs its add's token (``quotas.py``), nothing here.

Counting stops at the budget, so an add costs at most budget + 1 steps of the cron
iterator, however many schedules the key has.
"""

from __future__ import annotations

from collections.abc import Iterable

from pushjobs.api import methods
from pushjobs.errors import ApiError
from server.schedule import Trigger, cron_iter

HOUR_MS = 3_600_000


def fires_within_hour(trigger: Trigger, now_ms: int, at_most: int) -> int:
    """How many times ``trigger`` fires in the hour after ``now_ms`` (at most ``at_most``)."""
    if trigger.cron is None:
        return 0
    end_ms = now_ms + HOUR_MS
    count = 0
    for due in cron_iter(trigger.cron, trigger.tz, now_ms - now_ms % 1000):
        if count >= at_most or due.timestamp() * 1000 > end_ms:
            break
        count += 1
    return count


def check(
    caller: str, new: Trigger, held: Iterable[Trigger], now_ms: int, per_minute: float
) -> None:
    """Refuse (``busy``) ``new`` when ``caller``'s schedules (``held`` and ``new``) would
    fire more than ``per_minute`` times a minute over the hour ahead."""
    if new.cron is None:
        return
    budget = int(per_minute * 60)
    total = 0
    for trigger in (new, *held):
        total += fires_within_hour(trigger, now_ms, budget + 1 - total)
        if total > budget:
            raise ApiError(
                f"{caller}'s schedules would fire more than {per_minute:g} times a minute "
                "(jobs.schedule_fires_per_minute_per_caller, counted over the hour ahead): "
                "delete one, or make them fire less often",
                code=methods.BUSY,
            )
