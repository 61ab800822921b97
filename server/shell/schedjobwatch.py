"""Which schedule jobs are still active, as a standby reads them from ``assignments``.

A schedule's overlap policy asks whether its previous run is still active. The leader
knows (its coordinator); a standby owning a partition does not, so it follows the leader's
job snapshots: each header record (``job:<id>``, the node chunks skipped) says the job's
state. Only jobs not ended are kept, and ended ones while they are recent, so memory stays
proportional to the jobs running.

A job id it has not read may be a fire the leader has not started yet (it waits for the
nodes after a takeover, or has not flushed): a fire's id carries its due time
(``schedule.fire_job_id``), and one due less than ``pending_ms`` ago counts as active.

Killed at any line: held in memory only; a new process reads the topic again.
"""

from __future__ import annotations

import orjson

from pushjobs.log.base import OrderedLog
from pushjobs.states import TERMINAL_JOB_STATES
from server.core.records import CHUNK_KEY
from server.shell.schedlog import pages

ENDED = frozenset(state.value for state in TERMINAL_JOB_STATES)


def due_of(job_id: str) -> int | None:
    """The due time a fire's job id carries (``<due ms in hex><8 hex>``), else None."""
    try:
        return int(job_id[:-8], 16) if len(job_id) > 8 else None
    except ValueError:
        return None


class JobWatch:
    def __init__(self, log_: OrderedLog, topic: str, *, pending_ms: int) -> None:
        self.log = log_
        self.topic = topic
        self.pending_ms = pending_ms
        self.offset = 0
        self.running: set[str] = set()
        self.ended: dict[str, int] = {}  # job id -> its due time, while recent

    def follow(self, now_ms: int) -> None:
        """Read what was written since; ``LogError`` if the log fails (read again later)."""
        end = self.log.end_offset(self.topic)
        for record in pages(self.log, self.topic, self.offset, end):
            self.offset = record.offset + 1
            key = record.key
            if not key.startswith("job:") or CHUNK_KEY in key:
                continue
            job_id = key[4:]
            due = due_of(job_id)
            if due is None or record.value is None:
                continue
            try:
                state = orjson.loads(record.value).get("state")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if state in ENDED:
                self.running.discard(job_id)
                self.ended[job_id] = due
            else:
                self.running.add(job_id)
        self.offset = max(self.offset, end)
        horizon = now_ms - self.pending_ms
        for job_id in [j for j, due in self.ended.items() if due < horizon]:
            del self.ended[job_id]

    def active(self, job_id: str, now_ms: int) -> bool:
        if job_id in self.running:
            return True
        if job_id in self.ended:
            return False
        due = due_of(job_id)
        return due is not None and due >= now_ms - self.pending_ms
