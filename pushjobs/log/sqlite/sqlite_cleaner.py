"""Compaction and retention of one topic of the sqlite log, inside a write transaction.

Each step deletes records (and the ``heads`` rows that pointed at them) and leaves
``topics.end_offset`` alone, so offsets are never reused; ``recount`` then brings the
topic's record and byte totals back in line with what is left.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from pushjobs.log.sqlite.sqlite_file import topic_range

# A record's size as stats and size retention count it: key and value bytes.
_SIZE = "length(CAST(key AS BLOB)) + coalesce(length(value), 0)"


class Cleaner:
    """The deletions of one topic's compaction, inside the caller's write transaction."""

    def __init__(self, db: sqlite3.Connection, topic_id: int, now_ms: int) -> None:
        self.db = db
        self.topic_id = topic_id
        self.low, self.high = topic_range(topic_id)
        self.now_ms = now_ms
        self.deleted = 0

    def drop_older_than(self, retention_ms: int) -> None:
        # Oldest first, up to the first young record: a clock that stepped back never
        # makes retention punch holes in the middle of the log.
        row = self.db.execute(
            "SELECT id FROM records WHERE id >= ? AND id < ? AND timestamp_ms >= ?"
            " ORDER BY id LIMIT 1",
            (self.low, self.high, self.now_ms - retention_ms),
        ).fetchone()
        self._drop_before(self.high if row is None else row[0])

    def drop_beyond_size(self, retention_bytes: int) -> None:
        row = self.db.execute(
            f"SELECT id FROM (SELECT id, sum({_SIZE}) OVER (ORDER BY id DESC) AS tail"
            "  FROM records WHERE id >= ? AND id < ?)"
            " WHERE tail > ? ORDER BY id DESC LIMIT 1",
            (self.low, self.high, retention_bytes),
        ).fetchone()
        if row is not None:
            self._drop_before(row[0] + 1)

    def keep_heads(self, delete_retention_ms: int) -> None:
        self._delete(
            "DELETE FROM records WHERE id >= ? AND id < ?"
            " AND id NOT IN (SELECT rid FROM heads WHERE topic_id = ?)",
            (self.low, self.high, self.topic_id),
        )
        # Every record left is a head: old tombstones go, with their keys.
        cutoff = self.now_ms - delete_retention_ms
        self.db.execute(
            "DELETE FROM heads WHERE topic_id = ? AND rid IN (SELECT id FROM records"
            " WHERE id >= ? AND id < ? AND value IS NULL AND timestamp_ms < ?)",
            (self.topic_id, self.low, self.high, cutoff),
        )
        self._delete(
            "DELETE FROM records WHERE id >= ? AND id < ? AND value IS NULL AND timestamp_ms < ?",
            (self.low, self.high, cutoff),
        )

    def recount(self) -> int:
        count, size = self.db.execute(
            f"SELECT count(*), coalesce(sum({_SIZE}), 0) FROM records WHERE id >= ? AND id < ?",
            (self.low, self.high),
        ).fetchone()
        self.db.execute(
            "UPDATE topics SET records = ?, bytes = ? WHERE id = ?", (count, size, self.topic_id)
        )
        return int(count)

    def _drop_before(self, rid: int) -> None:
        self._delete("DELETE FROM records WHERE id >= ? AND id < ?", (self.low, rid))
        self.db.execute("DELETE FROM heads WHERE topic_id = ? AND rid < ?", (self.topic_id, rid))

    def _delete(self, sql: str, params: tuple[Any, ...]) -> None:
        self.deleted += self.db.execute(sql, params).rowcount
