"""The schedules of the partitions this server owns: armed, fired, each fire written fenced.

Theory of operation. Every server, leader or standby, owns some
partitions (``schedpartitions.py``). Gaining one, it reads the partition back (``load``: each
schedule's definition and fire state) and arms its schedules in one heap with those of its
other partitions (``core/schedfiring.py``). It follows the definitions the leader writes there
afterwards (``follow``: added, paused, resumed, deleted). ``tick`` asks the pure core what
is due and writes, per partition, one batch of ``fire:<id>`` records fenced by that
partition's epoch: each with ``consumed_ms`` moved past the due times settled and the new
fires in ``pending``. That record is the start request: the leader reads it and starts
each fire's job under the id derived from (schedule, due time), at most once
(``scheduler.py``). The fires are returned, so a leader owning the partition starts them
at once.

A write the fence refuses means another server owns the partition now: it is dropped
here. A write the log refuses (an outage) drops it too, and it is read back once a poll
grants it again (``reload``): a due time not written is found due again.

Killed at any line: before a fire's write, the due time is unsettled and the next owner
finds it due; after it, the fire is in the log and the leader starts it, once.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from pushjobs.errors import FencedError, LogError, ScheduleError
from pushjobs.log.base import Fence, OrderedLog
from server.core.schedfiring import DEFAULT_GRACE_MS, Fire, Firing, Skip
from server.core.schedule import Schedule
from server.shell.schedlog import (
    FIRE,
    SCHEDULE,
    Fold,
    fire_key,
    fire_value,
    pages,
    read_all,
    split_key,
)

log = logging.getLogger("pushjobs.server")

HISTORY_KEPT = 20  # outcomes each fire record keeps (``schedule history``)
BAD_RECORD = (orjson.JSONDecodeError, ScheduleError, KeyError, TypeError, ValueError)


Intern = Callable[[Schedule], Schedule]


def definition(value: bytes) -> tuple[Schedule, int, dict[str, Any] | None]:
    """(schedule, from_ms, the fire state a single-owner record held, if any)."""
    raw = orjson.loads(value)
    schedule = Schedule.from_json(raw["schedule"])
    if "consumed_ms" in raw:
        return schedule, int(raw["consumed_ms"]), raw
    return schedule, int(raw["from_ms"]), None


class Owner:
    def __init__(
        self,
        log_: OrderedLog,
        *,
        grace_ms: int = DEFAULT_GRACE_MS,
        intern: Intern = lambda schedule: schedule,
    ) -> None:
        self.log = log_
        self.intern = intern  # one object for a schedule this server also holds elsewhere
        self.firing = Firing(grace_ms=grace_ms)
        self.topic_of: dict[str, str] = {}  # schedule id -> its partition topic
        self.fences: dict[str, Fence] = {}  # owned (and loaded) partition -> fence
        self.offsets: dict[str, int] = {}  # owned partition -> offset read up to
        self.folds: dict[str, Fold] = {}
        self.history: dict[str, deque[dict[str, Any]]] = {}  # of schedules fired here
        self.saved: dict[str, bytes] = {}  # the others': their fire state as read
        self.broken: set[str] = set()  # partitions to read back (a write failed)
        self.damaged = 0

    def __len__(self) -> int:
        return len(self.firing)

    # --- partitions -------------------------------------------------------------------------

    def load(self, topic: str, fence: Fence) -> int:
        """Read ``topic`` back and arm its schedules; the number armed."""
        self.drop(topic)
        values, end, fold = read_all(self.log, topic)
        states = {
            parsed[1]: value
            for key, value in values.items()
            if (parsed := split_key(key)) is not None and parsed[0] == FIRE
        }
        armed = 0
        for key, value in values.items():
            parsed = split_key(key)
            if parsed is None or parsed[0] != SCHEDULE:
                continue
            try:
                self._arm(topic, parsed[1], value, states.get(parsed[1]))
                armed += 1
            except BAD_RECORD as exc:
                self.damaged += 1
                log.error("schedule %s in %s not armed: %s", parsed[1], topic, exc)
        self.fences[topic] = fence
        self.offsets[topic] = end
        self.folds[topic] = fold
        self.broken.discard(topic)
        return armed

    def _arm(self, topic: str, sid: str, value: bytes, saved: bytes | None) -> None:
        schedule, from_ms, legacy = definition(value)
        schedule = self.intern(schedule)
        state = orjson.loads(saved) if saved is not None else legacy
        consumed, last_job = from_ms, None
        if state is not None:
            consumed = max(consumed, int(state["consumed_ms"]))
            last_job = state.get("last_job")
            if state.get("fires"):
                # Its outcomes so far, parsed when it next fires: 100,000 schedules' parsed
                # would take hundreds of MB.
                self.saved[sid] = orjson.dumps(state["fires"]) if saved is None else saved
        self.firing.put(schedule, consumed, last_job)
        self.topic_of[sid] = topic

    def drop(self, topic: str) -> None:
        """No longer this server's: its schedules are forgotten here."""
        self.fences.pop(topic, None)
        self.offsets.pop(topic, None)
        self.folds.pop(topic, None)
        for sid in [s for s, t in self.topic_of.items() if t == topic]:
            self._forget(sid)

    def _forget(self, sid: str) -> None:
        self.firing.remove(sid)
        self.topic_of.pop(sid, None)
        self.history.pop(sid, None)
        self.saved.pop(sid, None)

    def clear(self) -> None:
        for topic in list(self.fences):
            self.drop(topic)

    # --- the definitions the leader writes ---------------------------------------------------

    def follow(self) -> None:
        """Apply what the leader wrote to the owned partitions since they were read;
        ``LogError`` if the log fails (what was applied is applied again, harmlessly)."""
        for topic in list(self.fences):
            self._follow(topic)

    def _follow(self, topic: str) -> None:
        offset, end = self.offsets[topic], self.log.end_offset(topic)
        tombstones: list[tuple[str, bytes | None]] = []
        for record in self.folds[topic].apply(pages(self.log, topic, offset, end)):
            parsed = split_key(record.key)
            if parsed is None or parsed[0] != SCHEDULE:
                continue  # fire records are this server's own
            sid = parsed[1]
            if record.value is None:
                self._forget(sid)
                tombstones.append((fire_key(sid), None))
                continue
            try:
                schedule, from_ms, _ = definition(record.value)
                schedule = self.intern(schedule)
            except BAD_RECORD as exc:
                self.damaged += 1
                log.error("schedule %s in %s not armed: %s", sid, topic, exc)
                continue
            if sid in self.firing:
                consumed = max(self.firing.consumed_ms(sid), from_ms)
                self.firing.put(schedule, consumed, self.firing.last_job(sid))
            else:
                self.firing.put(schedule, from_ms)
                self.topic_of[sid] = topic
        self.offsets[topic] = end
        if tombstones:
            self._write(topic, tombstones)

    # --- firing -----------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        return self.firing.next_deadline_ms()

    def tick(self, now_ms: int, active: Callable[[str], bool]) -> list[Fire]:
        """Fire what is due; the fires whose records were written."""
        outcomes = self.firing.tick(now_ms, active)
        by_topic: dict[str, dict[str, list[Fire]]] = {}
        for outcome in outcomes:
            sid = outcome.schedule_id
            fires = by_topic.setdefault(self.topic_of[sid], {}).setdefault(sid, [])
            if isinstance(outcome, Fire):
                fires.append(outcome)
                self.remember(sid, outcome.due_ms, outcome.job_id, "fired")
            elif isinstance(outcome, Skip):
                self.remember(sid, outcome.due_ms, None, f"skipped: {outcome.reason}")
        written: list[Fire] = []
        topics = list(by_topic)
        for i, topic in enumerate(topics):
            touched = by_topic[topic]
            batch = [(fire_key(sid), self.record(sid, fires)) for sid, fires in touched.items()]
            try:
                if self._write(topic, batch):
                    written += [fire for fires in touched.values() for fire in fires]
            except LogError:
                # Not durable, here and in the partitions not written yet: read back.
                for rest in topics[i:]:
                    self._broken(rest)
                raise
        return written

    def remember(self, sid: str, due_ms: int, job_id: str | None, outcome: str) -> None:
        history = self.history.get(sid)
        if history is None:
            history = self.history[sid] = deque(self._saved(sid), maxlen=HISTORY_KEPT)
        history.append({"due_ms": due_ms, "job_id": job_id, "outcome": outcome})

    def _saved(self, sid: str) -> list[dict[str, Any]]:
        raw = self.saved.pop(sid, None)
        if raw is None:
            return []
        found = orjson.loads(raw)
        if isinstance(found, dict):  # a fire state
            found = found.get("fires")
        return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []

    def record(self, sid: str, pending: list[Fire]) -> bytes:
        core = self.firing
        return fire_value(
            core.consumed_ms(sid),
            core.last_job(sid),
            list(self.history.get(sid, ())),
            [{"due_ms": f.due_ms, "job_id": f.job_id} for f in pending],
        )

    def _write(self, topic: str, batch: Sequence[tuple[str, bytes | None]]) -> bool:
        """Written (False: fenced, the partition is another server's); ``LogError``."""
        fence = self.fences.get(topic)
        if fence is None:
            return False
        try:
            self.log.append_batch(topic, batch, fence=fence)
        except FencedError:
            log.warning("schedule partition %s: owned by another server now", topic)
            self._broken(topic)
            return False
        return True

    def _broken(self, topic: str) -> None:
        self.drop(topic)
        self.broken.add(topic)
