"""Every schedule of every partition, as the leader reads them: for the API and for starts.

Theory of operation. The leader reads every partition topic whole when
it takes over (``load``) and then follows each one (``follow``): the definitions it wrote
itself, and the fire records each partition's owner writes. A fire record's ``pending``
fires are start requests: ``follow`` returns them, and the scheduler starts each under its
derived job id, at most once (``Jobs.start`` answers a job id it has with that job).

Which fire records a new leader must look at: the leader group's committed offset on each
partition (``<topic>.starts``) says up to where the previous leader had read and handed
every fire to ``Jobs.start``; the records after it are read for their pending fires, so a
fire written while no server led, or just before the leader died, is started, and one
started long ago (whose job may be forgotten since) is not started again. A partition
with no committed offset yet (a new installation, or the single-owner version's topic)
is judged by each schedule's latest record alone, as that version did.

Killed at any line: nothing here is durable but the committed offsets, which only ever
name records already handed to ``Jobs.start`` (whose request is written first).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from pushjobs.log.base import OrderedLog, Record
from server.core.schedfiring import Fire
from server.core.schedule import Schedule, describe, next_due
from server.shell.schedjob import shown
from server.shell.schedlog import FIRE, SCHEDULE, Fold, pages, read_all, split_key
from server.shell.schedowner import BAD_RECORD, Intern, definition

log = logging.getLogger("pushjobs.server")

COMMIT_EVERY_MS = 1000


def starts_group(topic: str) -> str:
    return f"{topic}.starts"


@dataclass(slots=True)
class Entry:
    schedule: Schedule
    from_ms: int
    topic: str


class Catalog:
    def __init__(
        self, log_: OrderedLog, topics: Iterable[str], intern: Intern = lambda s: s
    ) -> None:
        self.log = log_
        self.intern = intern  # one object for a schedule this server also fires
        self.topics = list(topics)
        self.entries: dict[str, Entry] = {}
        # Schedule id -> its latest fire state, as written: parsed only when asked (kept
        # parsed, 100,000 of them would take hundreds of MB).
        self.states: dict[str, bytes] = {}
        self.offsets: dict[str, int] = {}
        self.committed: dict[str, int] = {}
        self.handed: dict[str, int] = {}  # offsets handed on, committed at the next commit
        self.folds: dict[str, Fold] = {}
        self.commit_at_ms = 0
        self.damaged = 0

    def __len__(self) -> int:
        return len(self.entries)

    def clear(self) -> None:
        self.entries.clear()
        self.states.clear()
        self.offsets.clear()
        self.committed.clear()
        self.handed.clear()
        self.folds.clear()

    def load(self) -> list[Fire]:
        """Read every partition back; the fires that may never have been started."""
        self.clear()
        pending: list[Fire] = []
        for topic in self.topics:
            values, end, fold = read_all(self.log, topic)
            for key, value in values.items():
                self._apply(topic, key, value)
            since = self.log.committed(starts_group(topic), topic)
            if since is None:
                pending += [
                    fire
                    for sid in self._sids(topic)
                    for fire in self._pending(sid, self.state(sid))
                ]
            else:
                for record in Fold(keep=False).apply(pages(self.log, topic, since, end)):
                    pending += self._fires_of(record)
            self.offsets[topic] = end
            self.committed[topic] = -1 if since is None else since
            self.folds[topic] = fold
        return pending

    def _sids(self, topic: str) -> list[str]:
        return [sid for sid, entry in self.entries.items() if entry.topic == topic]

    def follow(self, found: list[Fire]) -> None:
        """Read what was written since: definitions, fire states, and the new fires (added
        to ``found`` as each partition is read, so a ``LogError`` loses none read)."""
        for topic in self.topics:
            offset, end = self.offsets[topic], self.log.end_offset(topic)
            if end <= offset:
                continue
            fires: list[Fire] = []
            for record in self.folds[topic].apply(pages(self.log, topic, offset, end)):
                self._apply(topic, record.key, record.value)
                fires += self._fires_of(record)
            found += fires
            self.offsets[topic] = end

    def commit(self, now_ms: int) -> None:
        """Say how far every fire read was handed on (call when none is left unstarted).

        One commit behind: what is committed now was handed to ``Jobs.start`` at least one
        turn ago, so its start request and its job's snapshot are written (the job's flush
        follows the scheduler's tick), and a new leader finds the job rather than a request
        it would leave to this one.
        """
        if now_ms < self.commit_at_ms:
            return
        self.commit_at_ms = now_ms + COMMIT_EVERY_MS
        ready, self.handed = self.handed, dict(self.offsets)
        for topic, offset in ready.items():
            if self.committed.get(topic) != offset:
                self.log.commit(starts_group(topic), topic, offset)  # LogError: next time
                self.committed[topic] = offset

    def _fires_of(self, record: Record) -> list[Fire]:
        parsed = split_key(record.key)
        if parsed is None or parsed[0] != FIRE or record.value is None:
            return []
        try:
            state = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            return []  # counted when folded
        return self._pending(parsed[1], state if isinstance(state, dict) else None)

    def _pending(self, sid: str, state: dict[str, Any] | None) -> list[Fire]:
        if not state or sid not in self.entries:
            return []
        try:
            return [
                Fire(sid, int(f["due_ms"]), str(f["job_id"])) for f in state.get("pending") or []
            ]
        except (KeyError, TypeError, ValueError):
            self.damaged += 1
            return []

    def _apply(self, topic: str, key: str, value: bytes | None) -> None:
        parsed = split_key(key)
        if parsed is None:
            return
        kind, sid = parsed
        if value is None:
            if kind == SCHEDULE:
                self.entries.pop(sid, None)
            self.states.pop(sid, None)
            return
        try:
            if kind == SCHEDULE:
                schedule, from_ms, legacy = definition(value)
                self.entries[sid] = Entry(self.intern(schedule), from_ms, topic)
                if legacy is not None and sid not in self.states:
                    self.states[sid] = value
            else:
                self.states[sid] = value
        except BAD_RECORD as exc:
            self.damaged += 1
            log.error("cannot read %s in %s: %s", key, topic, exc)

    def put(self, sid: str, entry: Entry | None) -> None:
        """A definition the leader just wrote, or deleted (None); it reads it again,
        harmlessly, later."""
        if entry is None:
            self.entries.pop(sid, None)
        else:
            self.entries[sid] = entry

    def auto_paused(self, sid: str, due_ms: int, reason: str) -> Entry | None:
        """``sid`` paused by the server, its fire due at ``due_ms`` refused for ``reason``
        (one that would refuse every fire alike); None when there is nothing to pause: a
        one-shot (no other fire to spare), one paused already or deleted, or one resumed
        since that due time (the fix may have come in between)."""
        entry = self.entries.get(sid)
        if entry is None or entry.schedule.paused or entry.schedule.trigger.cron is None:
            return None
        if due_ms < entry.from_ms:
            return None
        return Entry(entry.schedule.with_paused(True, reason), entry.from_ms, entry.topic)

    def state(self, sid: str) -> dict[str, Any] | None:
        """The latest fire state of ``sid``; None if it never fired (or it is damaged)."""
        raw = self.states.get(sid)
        if raw is None:
            return None
        try:
            state = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.damaged += 1
            return None
        return state if isinstance(state, dict) else None

    def consumed_ms(self, sid: str) -> int:
        entry = self.entries[sid]
        state = self.state(sid)
        try:
            consumed = int(state["consumed_ms"]) if state else 0
        except (KeyError, TypeError, ValueError):
            consumed = 0
        return max(consumed, entry.from_ms)

    def fires(self, sid: str) -> list[dict[str, Any]]:
        state = self.state(sid)
        fires = state.get("fires") if state else None
        return [f for f in fires if isinstance(f, dict)] if isinstance(fires, list) else []

    def view(self, sid: str) -> dict[str, Any]:
        """A schedule as the API shows it (secret values never)."""
        entry = self.entries[sid]
        schedule = entry.schedule
        consumed = self.consumed_ms(sid)
        last = next((e for e in reversed(self.fires(sid)) if e.get("job_id")), None)
        return {
            **schedule.to_json(),
            "job": shown(schedule.job),
            "command": schedule.command,
            "nodes": list(schedule.job.get("nodes", [])),
            "when": describe(schedule),
            "next_due_ms": None if schedule.paused else next_due(schedule, consumed),
            "consumed_ms": consumed,
            "last_fire": last,
            "partition": entry.topic,
        }
