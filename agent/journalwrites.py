"""The journal as the agent uses it: a full or read-only state directory is a state the
agent lives through, said once in its log, never an exit.

Theory of operation. The journal is writable, or not since a use failed (a write, or the
opening of a journal its file system kept from opening at start-up). A failure logs one
line when the journal turns unwritable (the file and why: "disk full", "read-only file
system"), and a write that succeeds logs one line when it turns writable again; nothing
is logged per attempt, since every commit tries again. Reads succeed on a full disk, so
only a write proves it writable. What each failure costs is decided here in one place:

- ``remember`` (a commit) fails, or ``seen`` cannot be read: the commit must not be
  acked, since a crash would forget it and the job could run twice; the reason to nack
  it with is returned;
- ``running`` fails: the job runs unrecorded; if the agent dies meanwhile, the reaper
  still ends the job, but a restarted agent will not report it;
- ``store_outcome`` fails: the journal holds the outcome in memory, it is sent as usual,
  and it will not survive an agent restart (logged per job: a result at risk) until the
  journal is writable again, when it is written;
- ``ended`` fails: the row stays; a restarted agent checks the process group's start
  time before killing anything, so a stale row harms nothing;
- ``outcome``, ``last_outcome``, ``still_running`` cannot be read: none known.

Killed at any line: nothing here outlives the process; the journal's own rules hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from agent.journal import Journal
from pushjobs.errors import JournalError

log = logging.getLogger("pushjobs.agent")

T = TypeVar("T")


class JournalWrites:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.writable = True

    # --- writes -----------------------------------------------------------------------

    def remember(self, job_id: str, at_ms: int) -> str | None:
        """Record ``job_id`` as seen; None if recorded, else the reason to nack it with."""
        done = self._use(lambda: self.journal.remember(job_id, at_ms), proves_writable=True)
        return _refusal(done) if isinstance(done, JournalError) else None

    def running(self, job_id: str, pgid: int, started: int) -> None:
        self._use(lambda: self.journal.running(job_id, pgid, started), proves_writable=True)

    def ended(self, job_id: str) -> None:
        # Deleting a row never written succeeds on a full disk: no sign of recovery.
        self._use(lambda: self.journal.ended(job_id))

    def store_outcome(self, job_id: str, kind: str, body: bytes, at_ms: int) -> bool:
        """Write ``job_id``'s outcome; False if it is held in memory only."""
        done = self._use(
            lambda: self.journal.store_outcome(job_id, kind, body, at_ms), proves_writable=True
        )
        if isinstance(done, JournalError):
            log.warning(
                "job %s: its outcome is held in memory and sent, but will not survive "
                "an agent restart (%s)",
                job_id,
                done,
            )
            return False
        return True

    # --- reads ------------------------------------------------------------------------

    def seen(self, job_id: str) -> tuple[bool, str | None]:
        """Whether ``job_id`` was seen; and, if the journal cannot tell, why to nack it."""
        seen = self._use(lambda: self.journal.seen(job_id))
        return (False, _refusal(seen)) if isinstance(seen, JournalError) else (seen, None)

    def outcome(self, job_id: str) -> tuple[str, bytes] | None:
        found = self._use(lambda: self.journal.outcome(job_id))
        return None if isinstance(found, JournalError) else found

    def last_outcome(self, since_ms: int) -> tuple[str, str, bytes] | None:
        found = self._use(lambda: self.journal.last_outcome(since_ms))
        return None if isinstance(found, JournalError) else found

    def still_running(self) -> list[tuple[str, int, int]] | None:
        """The jobs recorded running (``Journal.still_running``); None if unreadable."""
        found = self._use(self.journal.still_running)
        return None if isinstance(found, JournalError) else found

    def _use(self, use: Callable[[], T], *, proves_writable: bool = False) -> T | JournalError:
        try:
            result = use()
        except JournalError as exc:
            if self.writable:
                self.writable = False
                log.error(
                    "the job journal cannot be written: %s; new jobs are nacked until it "
                    "can be, a running job finishes and reports",
                    exc,
                )
            return exc
        if not self.writable and proves_writable:
            self.writable = True
            log.warning("the job journal can be written again: %s", self.journal.path)
            self._use(self.journal.store_held)
        return result


def _refusal(error: JournalError) -> str:
    return f"the node cannot record the job: {error}"
