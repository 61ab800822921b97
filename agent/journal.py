"""The agent's journal: every job id this node has seen, in a local SQLite file.

A job id is written (and synced) before the agent acks its commit, so after a crash, a
restart or a server failover that re-sends ``run``, the job never starts twice. Each job's
outcome (the reply that ended it) is kept too, so it can be sent again to a server that
restarted and lost it: results survive a failover. The process group of the job running
now is kept while it runs (with the kernel's start time of its leader, so a reused pid is
never taken for it): an agent that died with a job running finds it there on restart.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from pushjobs.errors import JournalError


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"{path}: cannot open the job journal: {exc}") from exc
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS seen (job_id TEXT PRIMARY KEY, at_ms INTEGER)"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS outcomes"
                " (job_id TEXT PRIMARY KEY, kind TEXT NOT NULL, body BLOB NOT NULL,"
                " at_ms INTEGER NOT NULL)"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS running"
                " (job_id TEXT PRIMARY KEY, pgid INTEGER NOT NULL, started INTEGER NOT NULL)"
            )
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalError(f"{path}: cannot open the job journal: {exc}") from exc

    def seen(self, job_id: str) -> bool:
        row = self._db.execute("SELECT 1 FROM seen WHERE job_id = ?", (job_id,)).fetchone()
        return row is not None

    def remember(self, job_id: str, at_ms: int) -> None:
        try:
            self._db.execute("INSERT OR IGNORE INTO seen VALUES (?, ?)", (job_id, at_ms))
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot record job {job_id}: {exc}") from exc

    def store_outcome(self, job_id: str, kind: str, body: bytes, at_ms: int) -> None:
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?, ?)", (job_id, kind, body, at_ms)
            )
        except sqlite3.Error as exc:
            raise JournalError(
                f"{self.path}: cannot record the outcome of {job_id}: {exc}"
            ) from exc

    def outcome(self, job_id: str) -> tuple[str, bytes] | None:
        row = self._db.execute(
            "SELECT kind, body FROM outcomes WHERE job_id = ?", (job_id,)
        ).fetchone()
        return None if row is None else (str(row[0]), bytes(row[1]))

    def last_outcome(self, since_ms: int) -> tuple[str, str, bytes] | None:
        """(job id, kind, body) of the most recent outcome recorded after ``since_ms``."""
        row = self._db.execute(
            "SELECT job_id, kind, body FROM outcomes WHERE at_ms >= ? ORDER BY at_ms DESC LIMIT 1",
            (since_ms,),
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), bytes(row[2]))

    def running(self, job_id: str, pgid: int, started: int) -> None:
        """``job_id`` runs as process group ``pgid`` whose leader started at ``started``."""
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO running VALUES (?, ?, ?)", (job_id, pgid, started)
            )
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot record job {job_id} running: {exc}") from exc

    def ended(self, job_id: str) -> None:
        try:
            self._db.execute("DELETE FROM running WHERE job_id = ?", (job_id,))
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: cannot record job {job_id} ended: {exc}") from exc

    def still_running(self) -> list[tuple[str, int, int]]:
        """(job id, pgid, leader start time) of jobs recorded running and never ended."""
        rows = self._db.execute("SELECT job_id, pgid, started FROM running").fetchall()
        return [(str(r[0]), int(r[1]), int(r[2])) for r in rows]

    def close(self) -> None:
        self._db.close()
