"""The leader's schedules: kept in the ``schedules`` topic, fired from one heap of due times.

Theory of operation (DESIGN section 10, the single-owner version: the leader owns every
schedule). Each schedule is one compacted record, key ``schedule:<id>``: its definition,
``consumed_ms`` (its due times up to there are settled), its last fires and ``pending``,
the fires of its latest write. A change (add, pause, resume) is written, fenced by the
leader's epoch, before it is acknowledged; a delete writes a tombstone.

``tick(now_ms)`` asks the pure core (``firing.py``) what is due. A fire is written first
(the schedule's record with ``consumed_ms`` moved to the due time and the fire in
``pending``), then started through ``Jobs.start`` with the job id derived from (schedule
id, due time): the start request in ``commands`` and the job follow as for ``job.start``.

A new leader (``take_over``) reads every record back and re-arms the heap; the fires of
each record's ``pending`` that no job exists for were written but never started (the
previous leader died in between): they are started now, under their derived ids, which
``Jobs.start`` starts at most once. Due times after ``consumed_ms`` follow the catch-up
policy. Firing waits, for at most ``settle_ms`` after a takeover, until the nodes a fire
targets are online again, so a restart alone does not make a fire find its nodes away.

Killed at any line: before a fire's write, the due time is still unsettled and is found
due again; after it, the fire is in ``pending`` and is started by the next leader, once.
"""

from __future__ import annotations

import logging
import secrets
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from pushjobs.api import methods
from pushjobs.clock import Clock
from pushjobs.errors import ApiError, LogError, NotFound, PushJobsError
from server.firing import DEFAULT_GRACE_MS, Fire, Firing, Skip
from server.jobparams import job_params, job_request
from server.jobs import Jobs
from server.schedjob import shown
from server.schedlog import key_of, latest_values
from server.schedule import (
    CatchUp,
    Overlap,
    Schedule,
    ScheduleError,
    Trigger,
    describe,
    next_due,
)
from server.targeting import select

log = logging.getLogger("pushjobs.server")

RELOAD_AFTER_MS = 1000
SETTLE_POLL_MS = 100
HISTORY_KEPT = 20  # fires each record keeps (``schedule history``)
DEFAULT_SETTLE_MS = 15_000


class Scheduler:
    def __init__(
        self,
        jobs: Jobs,
        topic: str,
        *,
        clock: Clock,
        grace_ms: int = DEFAULT_GRACE_MS,
        settle_ms: int = DEFAULT_SETTLE_MS,
    ) -> None:
        self.jobs = jobs
        self.clock = clock  # for API calls; the loop's ticks bring their own time
        self.leadership = jobs.leadership
        self.topic = topic
        self.settle_ms = settle_ms
        self.firing = Firing(grace_ms=grace_ms)
        self.history: dict[str, deque[dict[str, Any]]] = {}
        self.unstarted: dict[str, Fire] = {}  # job id -> a fire written but not started
        self.loaded = False
        self.hold_until_ms = 0
        self.asked_ms = 0  # settling: when the nodes were last found away
        self.reload_at_ms: int | None = None  # a write failed: read everything back then
        self.damaged = 0

    # --- leadership -------------------------------------------------------------------------

    def take_over(self, now_ms: int) -> None:
        """Load every schedule from the log and arm it; call after ``Jobs.take_over``."""
        self.stand_by()
        for key, value in latest_values(self.leadership.log, self.topic):
            try:
                self._load(orjson.loads(value))
            except (orjson.JSONDecodeError, ScheduleError, KeyError, TypeError, ValueError) as e:
                self.damaged += 1
                log.error("cannot restore %s: %s", key, e)
        self.loaded = True
        self.hold_until_ms = now_ms + self.settle_ms
        log.info("%d schedules armed, %d fires to complete", len(self.firing), len(self.unstarted))

    def _load(self, value: Mapping[str, Any]) -> None:
        schedule = Schedule.from_json(value["schedule"])
        sid = schedule.schedule_id
        self.firing.put(schedule, int(value["consumed_ms"]), value.get("last_job"))
        fires = value.get("fires")
        if fires:  # an empty deque is 600 bytes: none for a schedule that never fired
            self.history[sid] = deque(fires, maxlen=HISTORY_KEPT)
        coordinator = self.jobs.coordinator
        for fire in value.get("pending") or []:
            job_id = str(fire["job_id"])
            if job_id not in coordinator.jobs:
                self.unstarted[job_id] = Fire(sid, int(fire["due_ms"]), job_id)

    def stand_by(self) -> None:
        self.reload_at_ms = None
        self.firing.clear()
        self.history.clear()
        self.unstarted.clear()
        self.loaded = False

    # --- time -------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        if not self.loaded:
            return None
        due = self.firing.next_deadline_ms()
        if self.unstarted:
            due = self.hold_until_ms if due is None else min(due, self.hold_until_ms)
        # Settling with the nodes away: what is due waits, asked again now and then.
        return None if due is None else max(due, self.asked_ms + SETTLE_POLL_MS)

    def tick(self, now_ms: int) -> None:
        if not self.leadership.leader:
            return
        if self.reload_at_ms is not None and now_ms >= self.reload_at_ms:
            self._reload(now_ms)
        if not self.loaded:
            return
        if now_ms < self.hold_until_ms and not self._nodes_back(now_ms):
            self.asked_ms = now_ms
            return
        for fire in list(self.unstarted.values()):
            self._start(fire, now_ms)
        outcomes = self.firing.tick(now_ms, self._active)
        if not outcomes:
            return
        fires: dict[str, list[Fire]] = {}
        for outcome in outcomes:
            sid = outcome.schedule_id
            if isinstance(outcome, Fire):
                fires.setdefault(sid, []).append(outcome)
            elif isinstance(outcome, Skip):
                self._remember(sid, outcome.due_ms, None, f"skipped: {outcome.reason}")
        touched = {o.schedule_id for o in outcomes}
        try:
            self._write([self._record(sid, fires.get(sid, [])) for sid in touched])
        except ApiError:
            return  # deposed: the next leader finds these due again
        except LogError as exc:
            # Nothing of this tick is durable: forget it, and read the log back once it
            # answers (a due time not written is found due again).
            log.error("schedules not written (%s): reading them back in 1 s", exc)
            self.stand_by()
            self.reload_at_ms = now_ms + RELOAD_AFTER_MS
            return
        for batch in fires.values():
            for fire in batch:
                self._remember(fire.schedule_id, fire.due_ms, fire.job_id, "fired")
                self.unstarted[fire.job_id] = fire
        for fire in [f for batch in fires.values() for f in batch]:
            self._start(fire, now_ms)

    def _reload(self, now_ms: int) -> None:
        try:
            self.take_over(now_ms)
        except LogError as exc:
            log.error("schedules not read back (%s): again in 1 s", exc)
            self.stand_by()
            self.reload_at_ms = now_ms + RELOAD_AFTER_MS
            return
        self.reload_at_ms = None

    def _active(self, job_id: str) -> bool:
        if job_id in self.unstarted:
            return True
        job = self.jobs.coordinator.jobs.get(job_id)
        return job is not None and not job.finished

    def _nodes_back(self, now_ms: int) -> bool:
        """Every node targeted by what would fire now is online (asked while settling)."""
        online = set(self.jobs.liveness.online_peers())
        facts = list(self.jobs.nodes.facts())
        waiting = {f.schedule_id for f in self.unstarted.values()}
        for sid in waiting | set(self.firing.due_now(now_ms)):
            schedule = self.firing.schedule(sid)
            if schedule is None:
                continue
            try:
                targets = select(schedule.job["nodes"], facts, exists=self.jobs.registered)
            except PushJobsError:
                return False
            if not set(targets) <= online:
                return False
        return True

    def _start(self, fire: Fire, now_ms: int) -> None:
        self.unstarted.pop(fire.job_id, None)
        schedule = self.firing.schedule(fire.schedule_id)
        if schedule is None:
            return  # deleted since
        try:
            self.jobs.start(
                job_request(schedule.job),
                f"schedule:{fire.schedule_id}",
                now_ms,
                job_id=fire.job_id,
                schedule_id=fire.schedule_id,
            )
        except ApiError as exc:
            if exc.code == methods.NOT_LEADER:
                return
            self._failed(fire, exc)
        except (PushJobsError, KeyError, TypeError, ValueError) as exc:
            self._failed(fire, exc)

    def _failed(self, fire: Fire, exc: Exception) -> None:
        log.warning(
            "schedule %s: fire due at %d not started: %s", fire.schedule_id, fire.due_ms, exc
        )
        self._remember(fire.schedule_id, fire.due_ms, fire.job_id, f"not started: {exc}")

    def _remember(self, sid: str, due_ms: int, job_id: str | None, outcome: str) -> None:
        history = self.history.setdefault(sid, deque(maxlen=HISTORY_KEPT))
        for entry in history:
            if entry["due_ms"] == due_ms and entry.get("job_id") == job_id:
                entry["outcome"] = outcome
                return
        history.append({"due_ms": due_ms, "job_id": job_id, "outcome": outcome})

    # --- records ----------------------------------------------------------------------------

    def _record(self, sid: str, pending: list[Fire]) -> tuple[str, bytes]:
        core = self.firing
        schedule = core.schedule(sid)
        assert schedule is not None
        kept = [
            {"due_ms": e["due_ms"], "job_id": e["job_id"]}
            for e in self.history.get(sid, ())
            if e.get("job_id") is not None
        ] + [{"due_ms": f.due_ms, "job_id": f.job_id} for f in pending]
        value = {
            "schedule": schedule.to_json(),
            "consumed_ms": core.consumed_ms(sid),
            "last_job": core.last_job(sid),
            "fires": kept[-HISTORY_KEPT:],
            "pending": [{"due_ms": f.due_ms, "job_id": f.job_id} for f in pending],
        }
        return key_of(sid), orjson.dumps(value)

    def _write(self, batch: Sequence[tuple[str, bytes | None]]) -> None:
        self.leadership.append(self.topic, batch)

    # --- the API ----------------------------------------------------------------------------

    def _leading(self) -> None:
        if not self.leadership.leader or not self.loaded:
            raise ApiError("this server is not the leader", code=methods.NOT_LEADER)

    def _get(self, schedule_id: str) -> Schedule:
        self._leading()
        schedule = self.firing.schedule(schedule_id)
        if schedule is None:
            raise NotFound(f"no schedule {schedule_id!r}")
        return schedule

    def add(
        self,
        params: Mapping[str, Any],
        caller: str,
        trigger: Trigger,
        catch_up: CatchUp,
        overlap: Overlap,
    ) -> dict[str, Any]:
        """A new schedule of the ``job.start`` params in ``params``; durable once answered."""
        self._leading()
        now_ms = self.clock.wall_ms()
        try:
            schedule = Schedule.of(
                secrets.token_hex(6),
                job_params(params, self.jobs.sender.secrets),
                trigger,
                catch_up=catch_up,
                overlap=overlap,
                created_ms=now_ms,
                created_by=caller,
            )
        except ScheduleError as exc:
            raise ApiError(str(exc), code=methods.BAD_REQUEST) from None
        if next_due(schedule, now_ms) is None:
            raise ApiError("that time has passed: it would never fire", code=methods.BAD_REQUEST)
        self.firing.put(schedule, now_ms)
        try:
            self._write([self._record(schedule.schedule_id, [])])
        except PushJobsError:  # not durable: not kept
            self.firing.remove(schedule.schedule_id)
            raise
        log.info(
            "schedule %s: %s %s, by %s",
            schedule.schedule_id,
            schedule.command,
            describe(schedule),
            caller,
        )
        return self.view(schedule)

    def set_paused(self, schedule_id: str, paused: bool) -> dict[str, Any]:
        schedule = self._get(schedule_id)
        now_ms = self.clock.wall_ms()
        core = self.firing
        before = (schedule, core.consumed_ms(schedule_id), core.last_job(schedule_id))
        # Resumed: what fell due while paused is not fired.
        consumed = before[1] if paused else max(before[1], now_ms)
        core.put(schedule.with_paused(paused), consumed, before[2])
        try:
            self._write([self._record(schedule_id, [])])
        except PushJobsError:  # not durable: as it was
            core.put(*before)
            raise
        return self.view(schedule.with_paused(paused))

    def delete(self, schedule_id: str) -> dict[str, Any]:
        schedule = self._get(schedule_id)
        self._write([(key_of(schedule_id), None)])
        self.firing.remove(schedule_id)
        self.history.pop(schedule_id, None)
        return {"deleted": schedule_id, "command": schedule.command}

    def rows(self) -> list[dict[str, Any]]:
        self._leading()
        return sorted(
            (self.view(s) for s in self.firing.schedules()), key=lambda r: r["created_ms"]
        )

    def show(self, schedule_id: str) -> dict[str, Any]:
        return self.view(self._get(schedule_id))

    def fires(self, schedule_id: str) -> list[dict[str, Any]]:
        self._get(schedule_id)
        coordinator = self.jobs.coordinator
        out = []
        for entry in self.history.get(schedule_id, ()):
            row = dict(entry)
            job = coordinator.jobs.get(str(entry.get("job_id")))
            row["job_state"] = job.state.value if job is not None else None
            row.setdefault("outcome", "fired")
            out.append(row)
        return out

    def view(self, schedule: Schedule) -> dict[str, Any]:
        sid = schedule.schedule_id
        core = self.firing
        history = self.history.get(sid)
        last = next((e for e in reversed(history or ()) if e.get("job_id")), None)
        return {
            **schedule.to_json(),
            "job": shown(schedule.job),
            "command": schedule.command,
            "nodes": list(schedule.job.get("nodes", [])),
            "when": describe(schedule),
            "next_due_ms": core.next_due_ms(sid) if sid in core else None,
            "consumed_ms": core.consumed_ms(sid) if sid in core else None,
            "last_fire": last,
        }
