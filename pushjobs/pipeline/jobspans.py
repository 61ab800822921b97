"""Each job's span in the archive: the earliest and latest time of its events, over every day.

Why: a day's rollup (``rollup.py``) may fold a job's node results and latencies into that
day's counts only if *every* event of the job is in that day; then those counts are the
job's whole part in any window that holds the day. Such a job is *regular* for its day.
A job that runs over midnight, or that an archive shows on two days for any reason, is
kept as raw rows in the rollup of each of its days instead, and counted from them.

Only ``node_state`` and ``job_state`` events count: the only ones a report reads per job
(outcomes and latencies from the first, the job's marks from the second).

Kept in SQLite beside the rollups (``_rollups/jobs.db``), one row per job. A span only
ever widens. The archiver widens the spans of a batch *before* it writes the batch's
files, so a crash between the two leaves spans wider than the files show, which only
keeps more jobs raw. A job whose span leaves the one day it lay in makes that day's
rollup wrong: ``leaving`` names those days first, the archiver removes their rollups, and
only then are the spans widened (a crash between the two: the batch is archived again
from its offset, and names the days again).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from pushjobs.errors import ConfigError

DAY_MS = 86_400_000
SPAN_KINDS = frozenset({"node_state", "job_state"})

Span = tuple[int, int]  # earliest and latest ts, ms


def day_of(ts: int) -> int:
    """The UTC midnight (ms) of the day ``ts`` falls in."""
    return ts - ts % DAY_MS


def spans_of(rows: Iterable[Mapping[str, object]]) -> dict[str, Span]:
    """The span of each job among archived rows (dicts with ``kind``, ``job_id``, ``ts``)."""
    out: dict[str, Span] = {}
    for row in rows:
        job, ts = row.get("job_id"), row.get("ts")
        if row.get("kind") not in SPAN_KINDS or not isinstance(job, str) or not job:
            continue
        if type(ts) is not int:
            continue
        old = out.get(job)
        out[job] = (ts, ts) if old is None else (min(old[0], ts), max(old[1], ts))
    return out


class JobSpans:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, isolation_level=None)
            self.db.executescript(
                """
                PRAGMA journal_mode = WAL;
                PRAGMA synchronous = FULL;
                CREATE TABLE IF NOT EXISTS spans (
                    job TEXT PRIMARY KEY, lo INTEGER NOT NULL, hi INTEGER NOT NULL
                ) WITHOUT ROWID;
                CREATE INDEX IF NOT EXISTS spans_lo ON spans (lo);
                """
            )
        except sqlite3.Error as exc:
            raise ConfigError(f"{path}: cannot open the job span index: {exc}") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> JobSpans:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _batch(self, spans: Mapping[str, Span]) -> Iterator[None]:
        """``spans`` in a temporary table ``batch`` for the statements in the block."""
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS batch (job TEXT PRIMARY KEY, lo, hi)")
        self.db.execute("DELETE FROM batch")
        self.db.executemany(
            "INSERT INTO batch VALUES (?, ?, ?)", ((j, lo, hi) for j, (lo, hi) in spans.items())
        )
        try:
            yield
        finally:
            self.db.execute("DELETE FROM batch")

    def leaving(self, spans: Mapping[str, Span]) -> set[int]:
        """The days (midnights) whose jobs lay in them alone and would not with ``spans``
        merged in: their rollups counted such a job as regular."""
        out: set[int] = set()
        with self._batch(spans):
            rows = self.db.execute(
                "SELECT s.lo, s.hi, b.lo, b.hi FROM batch b JOIN spans s ON s.job = b.job"
            ).fetchall()
        for lo, hi, new_lo, new_hi in rows:
            day = day_of(lo)
            if day_of(hi) == day and (
                day_of(min(lo, new_lo)) != day or day_of(max(hi, new_hi)) != day
            ):
                out.add(day)
        return out

    def widen(self, spans: Mapping[str, Span]) -> None:
        """Merge ``spans`` in: each job's span becomes the union of what it was and this."""
        with self._batch(spans):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.execute(
                    "INSERT INTO spans SELECT job, lo, hi FROM batch WHERE true "
                    "ON CONFLICT (job) DO UPDATE SET lo = min(spans.lo, excluded.lo), "
                    "hi = max(spans.hi, excluded.hi)"
                )
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def regular(self, day: int) -> set[str]:
        """The jobs whose every event lies in the day starting at midnight ``day``."""
        rows = self.db.execute(
            "SELECT job FROM spans WHERE lo >= ? AND lo < ? AND hi < ?",
            (day, day + DAY_MS, day + DAY_MS),
        )
        return {job for (job,) in rows}

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM spans").fetchone()[0])


def remove(path: Path) -> None:
    """Delete the index and its WAL files (it is rebuilt from the raw files)."""
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
