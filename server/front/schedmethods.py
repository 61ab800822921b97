"""The server half of ``pushjobs schedule``: ``schedule.*`` methods over the leader's
``Scheduler`` (``scheduler.py``), found on the backend at each call. The leader answers
from its catalog of every partition and writes a change to the schedule's partition; the
partition's owner, maybe another server, follows it within a fraction of a second (a
due time in between still fires).

``schedule.add`` takes every ``job.start`` param (checked as ``job.start`` checks them,
``schedjob.py``) and one trigger: ``at`` (ISO 8601; without an offset, in ``tz``),
``in_s`` (seconds from now) or ``cron`` (with ``tz``, an IANA zone, default UTC); and the
policies ``catch_up`` (skip, once, all) and ``overlap`` (skip, queue, allow). Changes need
the writer role, reads the reader role (``pushjobs.api.methods``), and the leader.

Killed at any line: every change is written to the log before it is answered; a client
that got no answer may look with ``schedule list``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from pushjobs.api import methods
from pushjobs.errors import ApiError, ScheduleError
from server.core import schedbudget
from server.core.schedule import CatchUp, Overlap, Trigger, parse_at_ms

# A due time further than this is a typing error, and its milliseconds would outgrow the
# log's 64-bit integers (``in_s`` of 1e17).
MAX_IN_S = 100 * 365 * 86_400

if TYPE_CHECKING:
    from server.shell.scheduler import Scheduler

Handler = Callable[[Mapping[str, Any], str], Any]


def _bad(message: str) -> ApiError:
    return ApiError(message, code=methods.BAD_REQUEST)


def _id(params: Mapping[str, Any]) -> str:
    value = params.get("schedule_id")
    if not isinstance(value, str) or not value:
        raise _bad("'schedule_id' must be a non-empty string")
    return value


def trigger(params: Mapping[str, Any], now_ms: int) -> Trigger:
    """The one trigger of ``params``: ``at``, ``in_s`` or ``cron`` (``tz`` applies to at
    and cron)."""
    given = [name for name in ("at", "in_s", "cron") if params.get(name) is not None]
    if len(given) != 1:
        raise _bad("give exactly one of 'at', 'in_s' and 'cron'")
    tz = params.get("tz") or "UTC"
    if not isinstance(tz, str):
        raise _bad("'tz' must be a zone name like Europe/Berlin")
    try:
        if given == ["at"]:
            at = params["at"]
            if not isinstance(at, str):
                raise _bad("'at' must be an ISO 8601 time")
            return Trigger(at_ms=parse_at_ms(at, tz))
        if given == ["in_s"]:
            seconds = params["in_s"]
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or not 0 < seconds <= MAX_IN_S  # NaN fails this too
            ):
                raise _bad("'in_s' must be a number of seconds, more than 0 and at most a century")
            return Trigger(at_ms=now_ms + round(seconds * 1000))
        cron = params["cron"]
        if not isinstance(cron, str):
            raise _bad("'cron' must be a cron expression")
        return Trigger(cron=cron, tz=tz)
    except ScheduleError as exc:
        raise _bad(str(exc)) from None


def policies(params: Mapping[str, Any]) -> tuple[CatchUp, Overlap]:
    try:
        return (
            CatchUp(params.get("catch_up") or CatchUp.ONCE.value),
            Overlap(params.get("overlap") or Overlap.SKIP.value),
        )
    except ValueError as exc:
        raise _bad(
            f"{exc}: catch_up is skip, once or all; overlap is skip, queue or allow"
        ) from None


class SchedAdmin:
    def __init__(
        self, holder: object, fire_budget: Callable[[str], float | None] = lambda caller: None
    ) -> None:
        """``fire_budget``: the fires a minute a caller's schedules may add up to (None: no
        bound, for admins; ``schedbudget.py``)."""
        self.holder = holder
        self.fire_budget = fire_budget

    @property
    def scheduler(self) -> Scheduler:
        found = getattr(self.holder, "scheduler", None)
        if found is None:
            raise ApiError("this server runs no scheduler", code=methods.INTERNAL)
        return cast("Scheduler", found)

    def table(self) -> dict[str, Handler]:
        return {
            "schedule.add": self.add,
            "schedule.list": lambda p, c: {"schedules": self.scheduler.rows()},
            "schedule.show": lambda p, c: {"schedule": self.scheduler.show(_id(p))},
            "schedule.pause": lambda p, c: {"schedule": self.scheduler.set_paused(_id(p), True)},
            "schedule.resume": lambda p, c: {"schedule": self.scheduler.set_paused(_id(p), False)},
            "schedule.delete": lambda p, c: self.scheduler.delete(_id(p)),
            "schedule.history": lambda p, c: {
                "schedule_id": _id(p),
                "fires": self.scheduler.fires(_id(p)),
            },
        }

    def add(self, params: Mapping[str, Any], caller: str) -> Any:
        scheduler = self.scheduler
        now_ms = scheduler.clock.wall_ms()
        when = trigger(params, now_ms)
        catch_up, overlap = policies(params)
        per_minute = self.fire_budget(caller)
        if per_minute is not None:
            held = [e.schedule for e in scheduler.catalog.entries.values()]
            mine = [s.trigger for s in held if s.created_by == caller]
            schedbudget.check(caller, when, mine, per_minute)
        return {"schedule": scheduler.add(params, caller, when, catch_up, overlap)}
