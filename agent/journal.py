"""The agent's journal: every job id this node has seen, in a local SQLite file.

A job id is written (and synced) before the agent acks its commit, so after a crash, a
restart or a server failover that re-sends ``run``, the job never starts twice. Each job's
outcome (the reply that ended it) is kept too, so it can be sent again to a server that
restarted and lost it: results survive a failover. The process group of the job running
now is kept while it runs (with the kernel's start time of its leader, so a reused pid is
never taken for it): an agent that died with a job running finds it there on restart.

A write that fails (a full disk, a read-only file system) raises ``JournalError`` naming
the file and why, and changes nothing; the caller decides (``agent.journalwrites``). An
outcome that cannot be written is held in memory instead, and read back as if stored, so
a server failover still gets it; it is lost if the agent restarts before a later write
succeeds and ``store_held`` writes it. Opened with
``wait=True``, a journal its file system keeps from opening (full, read-only) is opened
at its first use that can: until then every use raises ``JournalError``.

Killed at any line: SQLite's write-ahead log keeps each write whole or absent; outcomes
held in memory are lost.

*What is synced.* Only a job id is fsynced (``synchronous=FULL`` for that commit): it is
the one write that keeps a job from running twice, even across the node's power loss.
The outcome and the running row are written with ``synchronous=NORMAL``: in the
operating system's cache at once, so they survive the agent's ``kill -9`` and any server
failover, but a power loss of the node may take the last of them (and the job's process
with it: the server then counts the node's new incarnation, never a second run). An
fsync costs about 0.4 ms of the disk and 0.2 ms of CPU here; four per job made the
journal the largest cost of a short job on a node, and 50 agents on one host queued 200
fsyncs on one disk per job.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from pushjobs.errors import JournalError

FULL = "disk full"
READ_ONLY = "read-only file system"
MAX_HELD = 100  # outcomes held in memory; only jobs acked before the disk filled


class Journal:
    def __init__(self, path: Path, *, wait: bool = False) -> None:
        self.path = path
        self._held: dict[str, tuple[str, bytes, int]] = {}  # outcomes not written
        self._db: sqlite3.Connection | None = None
        try:
            self._db = self._open()
        except JournalError as exc:
            # Only a file system that may take writes later is waited for; a corrupt
            # file or a bad path stays an error at start-up.
            if not (wait and str(exc).endswith((FULL, READ_ONLY))):
                raise

    def _open(self) -> sqlite3.Connection:
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(path), isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise JournalError(f"{path}: cannot open the job journal: {why(exc, path)}") from exc
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS seen (job_id TEXT PRIMARY KEY, at_ms INTEGER)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS outcomes"
                " (job_id TEXT PRIMARY KEY, kind TEXT NOT NULL, body BLOB NOT NULL,"
                " at_ms INTEGER NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS running"
                " (job_id TEXT PRIMARY KEY, pgid INTEGER NOT NULL, started INTEGER NOT NULL)"
            )
        except sqlite3.Error as exc:
            db.close()
            raise JournalError(f"{path}: cannot open the job journal: {why(exc, path)}") from exc
        return db

    def _execute(self, sql: str, args: tuple[object, ...] = ()) -> sqlite3.Cursor:
        if self._db is None:
            self._db = self._open()
        try:
            return self._db.execute(sql, args)
        except sqlite3.Error as exc:
            raise JournalError(f"{self.path}: {why(exc, self.path)}") from exc

    @property
    def is_open(self) -> bool:
        return self._db is not None

    def seen(self, job_id: str) -> bool:
        row = self._execute("SELECT 1 FROM seen WHERE job_id = ?", (job_id,)).fetchone()
        return row is not None

    def remember(self, job_id: str, at_ms: int) -> None:
        # Synced: this row is what keeps a job from running twice (see "What is synced").
        self._execute("PRAGMA synchronous=FULL")
        try:
            self._execute("INSERT OR IGNORE INTO seen VALUES (?, ?)", (job_id, at_ms))
        finally:
            if self._db is not None:
                self._db.execute("PRAGMA synchronous=NORMAL")

    def store_outcome(self, job_id: str, kind: str, body: bytes, at_ms: int) -> None:
        """Write ``job_id``'s outcome; if it cannot be, hold it in memory, then raise."""
        try:
            self._execute(
                "INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?, ?)", (job_id, kind, body, at_ms)
            )
        except JournalError:
            self._held.pop(job_id, None)
            self._held[job_id] = (kind, body, at_ms)
            while len(self._held) > MAX_HELD:  # the oldest go first
                del self._held[next(iter(self._held))]
            raise
        self._held.pop(job_id, None)

    def store_held(self) -> None:
        """Write the outcomes held in memory, now that the journal takes writes."""
        for job_id, (kind, body, at_ms) in list(self._held.items()):
            self.store_outcome(job_id, kind, body, at_ms)

    def outcome(self, job_id: str) -> tuple[str, bytes] | None:
        if (held := self._held.get(job_id)) is not None:
            return held[0], held[1]
        row = self._execute(
            "SELECT kind, body FROM outcomes WHERE job_id = ?", (job_id,)
        ).fetchone()
        return None if row is None else (str(row[0]), bytes(row[1]))

    def last_outcome(self, since_ms: int) -> tuple[str, str, bytes] | None:
        """(job id, kind, body) of the most recent outcome recorded after ``since_ms``."""
        row = self._execute(
            "SELECT job_id, kind, body, at_ms FROM outcomes WHERE at_ms >= ?"
            " ORDER BY at_ms DESC LIMIT 1",
            (since_ms,),
        ).fetchone()
        found = [(int(row[3]), str(row[0]), str(row[1]), bytes(row[2]))] if row else []
        found += [(at, job, kind, body) for job, (kind, body, at) in self._held.items()]
        latest = max((f for f in found if f[0] >= since_ms), default=None)
        return None if latest is None else latest[1:]

    def running(self, job_id: str, pgid: int, started: int) -> None:
        """``job_id`` runs as process group ``pgid`` whose leader started at ``started``."""
        self._execute("INSERT OR REPLACE INTO running VALUES (?, ?, ?)", (job_id, pgid, started))

    def ended(self, job_id: str) -> None:
        self._execute("DELETE FROM running WHERE job_id = ?", (job_id,))

    def still_running(self) -> list[tuple[str, int, int]]:
        """(job id, pgid, leader start time) of jobs recorded running and never ended."""
        rows = self._execute("SELECT job_id, pgid, started FROM running").fetchall()
        return [(str(r[0]), int(r[1]), int(r[2])) for r in rows]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


def why(exc: Exception, path: Path) -> str:
    """Why a write to ``path`` failed, in an operator's words where the file system says."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    directory = next((p for p in path.parents if p.exists()), None)
    try:
        fs = None if directory is None else os.statvfs(directory)
    except OSError:
        fs = None
    if (fs is not None and fs.f_flag & os.ST_RDONLY) or code == sqlite3.SQLITE_READONLY:
        return READ_ONLY
    if (fs is not None and fs.f_bavail == 0) or code == sqlite3.SQLITE_FULL:
        return FULL
    return str(exc)
