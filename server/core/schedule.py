"""A schedule: what it starts, when it is due, and what to do when it cannot fire. Pure.

Theory of operation. A ``Schedule`` is a frozen definition: the job it starts (the params
of ``job.start``, validated, secrets sealed), its trigger and its two policies. Its due
times are a pure function of the trigger: ``next_due(schedule, after_ms)`` is the first
due time strictly after ``after_ms`` (milliseconds since the Unix epoch), None when there
is no more (a one-shot that has passed).

A one-shot (``--at``/``--in``) is due once. A cron trigger is evaluated by ``cronsim``
(5 fields, or 6 with seconds first) in its zone (UTC unless ``tz``), with Debian cron's
rules at a change of daylight saving time, so nothing fires twice and nothing is lost:

- a schedule at fixed wall times (minute and hour fields not starting with ``*``) whose
  wall time does not exist that day (the spring gap) fires at the first valid minute
  after the gap; a wall time that happens twice (the autumn overlap) fires once, at its
  first occurrence;
- an interval schedule (``*/15 * * * *``) follows real elapsed time across the change.

A paused schedule fires nothing until resumed. The leader pauses a cron schedule on its
own, with a ``paused_reason``, when the job it keeps fails today's checks at a fire (one
kept by a version before timeouts were bounded: ``jobparams.job_request``): every fire
would be refused alike.

A fire's job id is derived from (schedule id, due time), in the format of any job id
(due time in hex, then 8 hex digits): whoever fires a due time, however often, names the
same job, and the leader starts a job id at most once.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import orjson
from cronsim import CronSim, CronSimError

from pushjobs.errors import ScheduleError


class CatchUp(Enum):
    """Fires missed while no server could fire them (late by more than the grace)."""

    SKIP = "skip"  # none: only the next due time still ahead
    ONCE = "once"  # one fire, for the latest missed due time
    ALL = "all"  # every missed due time, the first ``CATCH_UP_MAX`` of them


class Overlap(Enum):
    """A due time while the schedule's previous run is still active."""

    SKIP = "skip"  # not fired
    QUEUE = "queue"  # fired when the previous run ends, in due order (bounded)
    ALLOW = "allow"  # fired at once


CATCH_UP_MAX = 100  # missed due times fired by ``all``, and due times a queue holds
_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


@dataclass(frozen=True, slots=True)
class Trigger:
    """``at_ms`` for a one-shot, or ``cron`` (with ``tz``, an IANA zone name)."""

    at_ms: int | None = None
    cron: str | None = None
    tz: str = "UTC"

    def __post_init__(self) -> None:
        if (self.at_ms is None) == (self.cron is None):
            raise ScheduleError("a trigger is either a time (at) or a cron expression")
        if self.cron is not None:
            cron_iter(self.cron, self.tz, 0)  # raises on a bad expression or zone

    def to_json(self) -> dict[str, Any]:
        if self.at_ms is not None:
            return {"at_ms": self.at_ms}
        return {"cron": self.cron, "tz": self.tz}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Trigger:
        at = value.get("at_ms")
        cron = value.get("cron")
        tz = value.get("tz", "UTC")
        if at is not None and (isinstance(at, bool) or not isinstance(at, int)):
            raise ScheduleError(f"at_ms must be an integer, not {at!r}")
        if cron is not None and not isinstance(cron, str):
            raise ScheduleError(f"cron must be a string, not {cron!r}")
        if not isinstance(tz, str):
            raise ScheduleError(f"tz must be a zone name, not {tz!r}")
        return cls(at_ms=at, cron=cron, tz=tz)


@dataclass(frozen=True, slots=True)
class Schedule:
    schedule_id: str
    # The job.start params, checked and sealed, kept encoded: a schedule waits far more
    # often than it fires, and 100,000 of them must fit in a server.
    job_json: bytes = field(compare=False, repr=False)
    trigger: Trigger
    catch_up: CatchUp = CatchUp.ONCE
    overlap: Overlap = Overlap.SKIP
    paused: bool = False
    created_ms: int = 0
    created_by: str = ""
    # Why the server paused it on its own ("" when an operator did, or it is not paused):
    # its job could never be started, so it is not fired to fail at every due time.
    paused_reason: str = ""

    def __post_init__(self) -> None:
        if not _ID.fullmatch(self.schedule_id):
            raise ScheduleError(f"bad schedule id {self.schedule_id!r}")

    @classmethod
    def of(
        cls, schedule_id: str, job: Mapping[str, Any], trigger: Trigger, **rest: Any
    ) -> Schedule:
        return cls(schedule_id, _compact(job), trigger, **rest)

    @property
    def job(self) -> dict[str, Any]:
        """The job params (a fresh copy)."""
        value: dict[str, Any] = orjson.loads(self.job_json)
        return value

    @property
    def command(self) -> str:
        return str(self.job.get("command", ""))

    def with_paused(self, paused: bool, reason: str = "") -> Schedule:
        """Paused (with the server's ``reason``, if it paused it) or resumed (no reason)."""
        return replace(self, paused=paused, paused_reason=reason if paused else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "job": self.job,
            "trigger": self.trigger.to_json(),
            "catch_up": self.catch_up.value,
            "overlap": self.overlap.value,
            "paused": self.paused,
            "created_ms": self.created_ms,
            "created_by": self.created_by,
            "paused_reason": self.paused_reason,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Schedule:
        try:
            job = value["job"]
            if not isinstance(job, dict):
                raise ScheduleError("job must be an object")
            return cls(
                schedule_id=str(value["schedule_id"]),
                job_json=_compact(job),
                trigger=Trigger.from_json(value["trigger"]),
                catch_up=CatchUp(value.get("catch_up", "once")),
                overlap=Overlap(value.get("overlap", "skip")),
                paused=bool(value.get("paused", False)),
                created_ms=int(value.get("created_ms", 0)),
                created_by=str(value.get("created_by", "")),
                paused_reason=str(value.get("paused_reason") or ""),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ScheduleError(f"not a schedule: {type(exc).__name__}: {exc}") from None


def _compact(job: Mapping[str, Any]) -> bytes:
    # orjson's bytes keep its whole write buffer (about 2 KiB) whatever the length: copied
    # to their own size, 100,000 schedules take a tenth of the memory.
    return bytes(memoryview(orjson.dumps(job)))


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(f"unknown time zone {name!r}: {exc}") from None


def cron_iter(expr: str, tz: str, after_ms: int) -> CronSim:
    """cronsim's iterator over the due times after ``after_ms``, in zone ``tz``."""
    where = zone(tz)
    start = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(where)
    try:
        return CronSim(expr, start)
    except (CronSimError, ValueError, IndexError) as exc:
        raise ScheduleError(f"bad cron expression {expr!r}: {exc}") from None


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def next_due(schedule: Schedule, after_ms: int) -> int | None:
    """The first due time strictly after ``after_ms``, or None if there is none."""
    trigger = schedule.trigger
    if trigger.at_ms is not None:
        return trigger.at_ms if trigger.at_ms > after_ms else None
    assert trigger.cron is not None
    # cronsim counts from whole seconds: start at the second that holds ``after_ms``.
    it = cron_iter(trigger.cron, trigger.tz, after_ms - after_ms % 1000)
    try:
        # A fixed-time schedule evaluated from inside the autumn overlap may name the first
        # occurrence of a wall time that already passed: never a time at or before ``after``.
        for _ in range(3):
            due = _ms(next(it))
            if due > after_ms:
                return due
    except StopIteration:
        return None
    return None


def fire_job_id(schedule_id: str, due_ms: int) -> str:
    """The job id of the fire of ``schedule_id`` due at ``due_ms`` (same for every server)."""
    digest = hashlib.sha256(f"schedule:{schedule_id}:{due_ms}".encode()).hexdigest()
    return f"{due_ms:x}{digest[:8]}"


def parse_duration_s(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``1d``, or a sum like ``1h30m``, in seconds."""
    parts = re.fullmatch(r"(?:\d+(?:\.\d+)?[smhd]?)+", text.strip())
    if parts is None or not text.strip():
        raise ScheduleError(f"not a duration: {text!r} (like 90s, 15m, 1h30m, 2d)")
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 1}
    total = sum(
        float(n) * unit[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    )
    if total <= 0:
        raise ScheduleError(f"a duration must be more than 0: {text!r}")
    return total


def parse_at_ms(text: str, tz: str = "UTC") -> int:
    """An ISO 8601 time (``2026-03-29T02:30``, ``...Z``, ``...+01:00``); a time without an
    offset is taken in ``tz``."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ScheduleError(f"not a time: {text!r} (like 2026-03-29T02:30 or ...Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone(tz))
    return _ms(moment)


def describe(schedule: Schedule) -> str:
    """The trigger as an operator reads it."""
    trigger = schedule.trigger
    if trigger.at_ms is not None:
        at = datetime.fromtimestamp(trigger.at_ms / 1000, UTC)
        return f"at {at.isoformat(timespec='seconds').replace('+00:00', 'Z')}"
    return f"cron {trigger.cron!r} {trigger.tz}"
