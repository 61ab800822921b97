"""The archiver: the ``events`` topic to Parquet files partitioned by date, exactly once.

Theory of operation. The archiver is a consumer group on the ``events`` topic (default
``pushjobs.archiver``). Each batch of records from the group's committed offset ``C``
becomes one Parquet file per UTC date it touches, named by the offsets it holds::

    OUT/date=2026-11-23/events-<first offset>-<last offset>.parquet
    OUT/_rejected/rejected-<first>-<last>.jsonl     (records that are not usable events)

(A Parquet reader pointed at OUT skips names starting with ``_``, so the rejected records
never disturb partition discovery; an older archive's ``rejected/`` is renamed.)

Each file is written under a temporary name, fsynced, renamed into place and its
directory fsynced; only when every file of the batch is durable is the offset after the
batch committed. So a crash leaves at most files whose first offset is ``>= C``: the next
run deletes exactly those (and any temporary file) before it starts again from ``C``.
Nothing is lost (a record is archived or still ahead of ``C``) and nothing is written
twice (a file from beyond ``C`` is removed before its records are written again).

Records that retention removed before they were archived cannot be recovered; the
archiver says how many, and goes on from the oldest record still there.

Beside the raw files the archiver keeps the rollups (``rollup.py``): before it writes a
batch it widens each job's span in the job span index (``jobspans.py``), removing the
rollup of any day a job no longer lies in alone; after the last batch it rolls up every
closed day that has no valid rollup. ``rollups=False`` removes them (the spans would go
stale while batches are archived without them; they are rebuilt when kept again).

The position lives in the log (the group's committed offset), not in OUT: a new, empty
OUT with a group that has already archived elsewhere would silently get only the records
after that position, so it is refused with what to do instead (another group name).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from pushjobs.errors import ConfigError, MissingExtra, Rejected
from pushjobs.log.base import OrderedLog
from pushjobs.paths import fsync_dir
from pushjobs.pipeline import events, jobspans, rollup

DEFAULT_GROUP = "pushjobs.archiver"
REJECTED = "_rejected"
OLD_REJECTED = "rejected"  # before the reader-safe name
FILE_RE = re.compile(r"^(?:events|rejected)-(\d{20})-(\d{20})\.(?:parquet|jsonl)$")
CRASH_HOOK = "PUSHJOBS_ARCHIVE_CRASH_AFTER_FILES"  # tests only: die after N files, uncommitted


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingExtra("pyarrow", "spark") from None
    return pa, pq


def arrow_schema() -> Any:
    pa, _ = _pyarrow()
    types = {"int64": pa.int64(), "string": pa.string()}
    return pa.schema([(name, types[kind]) for name, kind in events.COLUMNS])


LIVENESS = frozenset({"node_online", "node_offline"})
JOB = frozenset({"job_created", "job_state"})


def write_events(rows: list[dict[str, Any]], path: Path) -> None:
    """One Parquet file of events (``write_table``)."""
    pa, _ = _pyarrow()
    write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), path)


def write_table(table: Any, path: Path) -> None:
    """One Parquet file of events, a row group per family: liveness, job, the rest.

    A report on a recent window still needs every node's liveness events from long before
    it, and the jobs' own events from the day before; kept apart, a reader filtering on
    ``kind`` skips the other row groups by their dictionary instead of reading them.
    """
    pa, pq = _pyarrow()
    import pyarrow.compute as pc

    kind = table["kind"]
    liveness = pc.fill_null(pc.is_in(kind, value_set=pa.array(sorted(LIVENESS))), False)
    job = pc.fill_null(pc.is_in(kind, value_set=pa.array(sorted(JOB))), False)
    rest = pc.invert(pc.or_(liveness, job))
    with pq.ParquetWriter(path, table.schema) as writer:
        for mask in (liveness, job, rest):
            part = table.filter(mask)
            if len(part):
                writer.write_table(part)


@dataclass(slots=True)
class ArchiveResult:
    from_offset: int
    to_offset: int
    archived: int = 0
    rejected: int = 0
    files: int = 0
    removed_partial: int = 0
    lost_to_retention: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    rollups: rollup.Updated | None = None  # None: not kept (``rollups=False``)


class Archiver:
    def __init__(
        self,
        log: OrderedLog,
        topic: str,
        out: Path,
        *,
        group: str = DEFAULT_GROUP,
        batch: int = 50_000,
        on_batch: Callable[[ArchiveResult], None] | None = None,
        rollups: bool = True,
        progress: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.log = log
        self.topic = topic
        self.out = out
        self.group = group
        self.batch = batch
        self.on_batch = on_batch
        self.rollups = rollups
        self.progress = progress
        crash = os.environ.get(CRASH_HOOK)
        self._crash_after = int(crash) if crash else None
        self._files_written = 0

    def run(self) -> ArchiveResult:
        """Archive everything up to the topic's end as it is now."""
        started = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        self._migrate_rejected()
        committed = self.log.committed(self.group, self.topic) or 0
        if committed > 0 and not self._holds_archive():
            raise ConfigError(
                f"consumer group {self.group!r} has already archived the events topic up to "
                f"offset {committed} elsewhere, and {self.out} holds no archive: it would get "
                "only what came after. To archive everything into a new directory, give it a "
                "group of its own (--group NAME or [archive] group); to go on with the old "
                "archive, point --out at it",
                key="archive.group",
            )
        result = ArchiveResult(committed, committed)
        result.removed_partial = self._remove_uncommitted(committed)
        info = next((t for t in self.log.topics() if t.name == self.topic), None)
        offset = committed
        if info is not None and info.start_offset > offset:
            result.lost_to_retention = info.start_offset - offset
            offset = info.start_offset
        spans, rebuilt = None, False
        if self.rollups:
            spans, rebuilt = rollup.open_index(self.out)
            if rebuilt:
                self.progress(f"job span index built from the archive: {spans.count():,} jobs")
        elif (self.out / rollup.ROLLUPS).exists():
            # Archiving on without widening the spans would leave them wrong: gone, they are
            # rebuilt from the raw files whenever rollups are kept again.
            shutil.rmtree(self.out / rollup.ROLLUPS)
            self.progress("rollups removed: they are not kept (rebuilt when they are again)")
        try:
            self._archive(result, offset, spans)
        finally:
            if spans is not None:
                spans.close()
        if self.rollups:
            result.rollups = rollup.update(self.out, progress=self.progress)
            result.rollups.index_rebuilt |= rebuilt
        result.seconds = time.monotonic() - started
        return result

    def _archive(self, result: ArchiveResult, offset: int, spans: jobspans.JobSpans | None) -> None:
        end = self.log.end_offset(self.topic)
        while offset < end:
            records = self.log.read(self.topic, offset, min(self.batch, end - offset))
            if not records:
                break
            rows: dict[str, list[dict[str, Any]]] = {}
            bad: list[dict[str, Any]] = []
            for rec in records:
                try:
                    found = events.rows(rec.offset, rec.value)
                except Rejected as exc:
                    reason = str(exc)
                    result.reasons[reason] = result.reasons.get(reason, 0) + 1
                    raw = (rec.value or b"")[:4096].decode("utf-8", errors="replace")
                    bad.append({"offset": rec.offset, "reason": reason, "value": raw})
                    continue
                for row in found:
                    rows.setdefault(events.day(row["ts"]), []).append(row)
            if spans is not None:
                batch = jobspans.spans_of(row for day_rows in rows.values() for row in day_rows)
                # First the rollups that counted a job as one day's alone, then the spans.
                for midnight in spans.leaving(batch):
                    rollup.remove_day(self.out, events.day(midnight))
                spans.widen(batch)
            for day, day_rows in sorted(rows.items()):
                self._write_parquet(day, day_rows)
                result.files += 1
            if bad:
                self._write_rejected(bad)
                result.files += 1
            offset = records[-1].offset + 1
            self.log.commit(self.group, self.topic, offset)
            result.archived += sum(len(r) for r in rows.values())
            result.rejected += len(bad)
            result.to_offset = offset
            if self.on_batch is not None:
                self.on_batch(result)

    # --- files ----------------------------------------------------------------------------

    def _holds_archive(self) -> bool:
        return any(FILE_RE.match(p.name) for p in self.out.rglob("*") if p.is_file())

    def _migrate_rejected(self) -> None:
        old, new = self.out / OLD_REJECTED, self.out / REJECTED
        if not old.is_dir():
            return
        new.mkdir(exist_ok=True)
        for path in old.iterdir():
            os.replace(path, new / path.name)
        old.rmdir()

    def _remove_uncommitted(self, committed: int) -> int:
        """Delete temporary files and files of records at or past ``committed``."""
        removed = 0
        for path in self.out.rglob("*"):
            if not path.is_file():
                continue
            if path.name.endswith(".tmp"):
                path.unlink()
                removed += 1
                continue
            match = FILE_RE.match(path.name)
            if match and int(match.group(1)) >= committed:
                path.unlink()
                removed += 1
        return removed

    def _write_parquet(self, day: str, rows: list[dict[str, Any]]) -> None:
        name = f"events-{rows[0]['offset']:020d}-{rows[-1]['offset']:020d}.parquet"
        self._durably(self.out / f"date={day}" / name, lambda tmp: write_events(rows, tmp))

    def _write_rejected(self, bad: list[dict[str, Any]]) -> None:
        name = f"rejected-{bad[0]['offset']:020d}-{bad[-1]['offset']:020d}.jsonl"
        data = b"".join(orjson.dumps(item) + b"\n" for item in bad)
        self._durably(self.out / REJECTED / name, lambda tmp: tmp.write_bytes(data))

    def _durably(self, path: Path, write: Callable[[Path], object]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        write(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
        self._files_written += 1
        if self._crash_after is not None and self._files_written >= self._crash_after:
            with contextlib.suppress(Exception):
                os.write(2, b"archive: crash hook: dying before the commit\n")
            os._exit(70)
