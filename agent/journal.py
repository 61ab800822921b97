"""The agent's journal: every job id this node has seen, in a local SQLite file.

A job id is written (and synced) before the agent acks its commit, so after a crash, a
restart or a server failover that re-sends ``run``, the job never starts twice.
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

    def close(self) -> None:
        self._db.close()
