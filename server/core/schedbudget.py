"""How often one key's schedules may fire, checked when it adds one. Pure.

A user key's ``job.start`` requests are bounded per minute (``quotas.py``), but its
schedules start jobs without asking: a writer could add a hundred every-second schedules
and start 6,000 jobs a minute. So when a key adds a recurring schedule, the most its
schedules can fire in any one hour is summed (paused ones too: a resume is not checked
again), and the add is refused ``busy`` when that passes 60 times ``per_minute``.

The most a cron expression can fire in an hour is its seconds times its minutes: hours,
days and months only decide whether an hour fires at all. Counting the fires in the hour
ahead instead would let in a schedule that fires every second only at 03:00, or only on
the first of the month. A burst within an hour (every second of one minute) counts at its
hour's average. A one-shot fires once: it costs its add's token (``quotas.py``), nothing
here.
"""

from __future__ import annotations

from collections.abc import Iterable

from pushjobs.api import methods
from pushjobs.errors import ApiError
from server.core.schedule import Trigger, cron_iter

_ANY_MOMENT = 0  # the fields of an expression do not depend on when it is read


def peak_fires_per_hour(trigger: Trigger) -> int:
    """The most ``trigger`` fires in any hour (0 for a one-shot)."""
    if trigger.cron is None:
        return 0
    fields = cron_iter(trigger.cron, "UTC", _ANY_MOMENT)
    return len(fields.seconds) * len(fields.minutes)


def check(caller: str, new: Trigger, held: Iterable[Trigger], per_minute: float) -> None:
    """Refuse (``busy``) ``new`` when ``caller``'s schedules (``held`` and ``new``) could
    fire more than ``per_minute`` times a minute, over an hour."""
    if new.cron is None:
        return
    budget = per_minute * 60
    total = peak_fires_per_hour(new) + sum(peak_fires_per_hour(t) for t in held)
    if total > budget:
        raise ApiError(
            f"{caller}'s schedules could fire {total / 60:g} times a minute; one key's may "
            f"fire {per_minute:g} (jobs.schedule_fires_per_minute_per_caller): delete one, "
            "or make them fire less often",
            code=methods.BUSY,
        )
