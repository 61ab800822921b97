"""The ordered log in one SQLite file: the default backend, embedded, multi-process.

Theory of operation.

*One file, many processes.* The server, the CLI and the archiver open the same file. The
file is in WAL mode, so readers never block the writer nor each other; every write is a
``BEGIN IMMEDIATE`` transaction, which takes SQLite's single write lock up front (waiting
up to the busy timeout) instead of discovering a conflict at commit. Whatever a write
decides from what it read (the next offset, the current epoch, a lease) therefore holds
until it commits: writes are serialised across processes.

*Offsets.* Each topic row keeps ``end_offset``, the next offset to hand out; an append
bumps it and inserts its records in the same transaction, so offsets are gap-free and in
commit order. Compaction and retention delete records but never touch ``end_offset``, so
an offset is never reused; ``read`` over a hole simply returns the survivors. A record's
rowid is ``topic_id << 40 | offset`` (see ``sqlite_file``). ``heads`` maps each key to
its latest record (tombstones included): ``latest`` reads one row per key, and
compaction keeps exactly the heads.

*Durability.* ``synchronous=FULL`` fsyncs the WAL at every commit, so ``append`` returns
only once the record is on disk: it survives ``kill -9`` of the writer and, as far as the
disk honours fsync, power loss. A batch is one transaction, hence one fsync.
Membership writes (a lease's or a roster row's heartbeat, a release) are committed with
``synchronous=NORMAL``, without an fsync of their own: the WAL is one file written in
order, so the next synced commit (any append, by any process on the file) makes them
durable too, and a record fenced by an epoch is never durable without the lease that
granted it. A power loss may forget a lease granted since the last append, together
with its holder (the same host, down too), which never wrote with it. Idle, those
heartbeats were nearly every fsync a server made (six a second).

*Groups.* ``offsets`` holds committed offsets (the next offset to consume). ``leases``
holds one row per (group, topic), which ``sqlite_member`` owns. A fenced append compares
its epoch with the group's current (highest) epoch in its own write transaction, so a
successor's takeover and a deposed leader's write cannot interleave: whichever commits
second sees the other. ``roster`` holds the members of groups over several topics, one
row per member with its heartbeat (``group()``, emulated as ``shares`` says).

*Cleanup.* ``compact()`` applies each topic's policy in one write transaction: time
retention drops the oldest records up to the first young one, size retention drops the
oldest until the rest fits, compacted topics keep only each key's head and drop
tombstones older than ``delete_retention_ms``. Freed pages are reused by later appends;
the file does not shrink. With ``compact_every_appends`` > 0, a handle also compacts a
topic after that many appends to it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pushjobs.clock import Clock
from pushjobs.errors import LogError, UnknownTopic
from pushjobs.log import checks, leases
from pushjobs.log.base import (
    DEFAULT_MAX_VALUE_BYTES,
    Batch,
    CompactionStats,
    Fence,
    GroupInfo,
    ListsGroups,
    OrderedLog,
    Record,
    TopicInfo,
    TopicPolicy,
    record_bytes,
)
from pushjobs.log.compaction import DEFAULT_DELETE_RETENTION_MS, Compaction
from pushjobs.log.embedded import EmbeddedLog
from pushjobs.log.shares import EmulatedShare
from pushjobs.log.sqlite import sqlite_member
from pushjobs.log.sqlite.sqlite_cleaner import Cleaner
from pushjobs.log.sqlite.sqlite_file import MAX_OFFSET, OFFSET_BITS, connect, topic_range, translate
from pushjobs.log.sqlite.sqlite_member import SqliteMember, group_epoch

__all__ = ["DEFAULT_BUSY_TIMEOUT_S", "SqliteLog"]

DEFAULT_BUSY_TIMEOUT_S = 10.0


class SqliteLog(EmbeddedLog[SqliteMember]):
    """An ``OrderedLog`` in one SQLite file; a handle may be shared between threads."""

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = True,
        clock: Clock | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
        compact_every_appends: int = 0,
    ) -> None:
        """Open (or, if ``create``, create) the log at ``path``."""
        compaction = Compaction(compact_every_appends, delete_retention_ms)
        super().__init__(clock, max_value_bytes, compaction)
        self.path = Path(path)
        # One connection per handle; the lock keeps threads from interleaving transactions.
        self._lock = threading.RLock()
        self._batched = False  # inside ``batch``: transactions join the batch's own
        self._db: sqlite3.Connection | None = connect(
            self.path, create=create, busy_timeout_s=busy_timeout_s
        )

    def __repr__(self) -> str:
        return f"SqliteLog({str(self.path)!r})"

    # Topics.

    def create_topic(self, topic: str, policy: TopicPolicy) -> None:
        checks.check_policy(topic, policy)
        with self.transaction(f"creating topic {topic}") as db:
            db.execute(
                "INSERT INTO topics (name, compacted, retention_ms, retention_bytes) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
                (topic, int(policy.compacted), policy.retention_ms, policy.retention_bytes),
            )

    def topics(self) -> list[TopicInfo]:
        with self._read("listing topics") as db:
            rows = db.execute(
                "SELECT t.name, t.compacted, t.retention_ms, t.retention_bytes, t.end_offset,"
                " t.records, t.bytes, (SELECT min(r.id) FROM records r"
                f"  WHERE r.id >= t.id << {OFFSET_BITS} AND r.id < (t.id + 1) << {OFFSET_BITS})"
                " FROM topics t ORDER BY t.name"
            ).fetchall()
        return [
            TopicInfo(
                name,
                TopicPolicy(bool(compacted), retention_ms, retention_bytes),
                end if first is None else first & MAX_OFFSET,
                end,
                records,
                size,
            )
            for name, compacted, retention_ms, retention_bytes, end, records, size, first in rows
        ]

    # Writing.

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        checks.check_records(topic, records, self.max_value_bytes)
        if not records:
            self.end_offset(topic)  # an unknown topic is still an error
            return []
        count = len(records)
        size = sum(record_bytes(key, value) for key, value in records)
        with self.transaction(f"appending to {topic}") as db:
            row = db.execute(
                "UPDATE topics SET end_offset = end_offset + ?1, records = records + ?1,"
                " bytes = bytes + ?2 WHERE name = ?3 RETURNING id, end_offset - ?1",
                (count, size, topic),
            ).fetchone()
            if row is None:
                raise UnknownTopic(f"unknown topic {topic!r}")
            topic_id, first = row
            if first + count - 1 > MAX_OFFSET:
                raise LogError(f"{topic}: full: offsets past {MAX_OFFSET} do not fit a rowid")
            epoch = (
                0
                if fence is None
                else checks.check_epoch(topic, fence, group_epoch(db, fence.group))
            )
            now_ms = self._clock.wall_ms()
            ids = [topic_range(topic_id)[0] | (first + i) for i in range(count)]
            db.executemany(
                "INSERT INTO records (id, key, value, timestamp_ms, epoch) VALUES (?, ?, ?, ?, ?)",
                [(rid, k, v, now_ms, epoch) for rid, (k, v) in zip(ids, records, strict=True)],
            )
            # One head per key of the batch, its last record: a job's events all share
            # its key, and 10,000 upserts of one row cost more than the records did.
            heads = {k: rid for rid, (k, _) in zip(ids, records, strict=True)}
            db.executemany(
                "INSERT INTO heads (topic_id, key, rid) VALUES (?, ?, ?)"
                " ON CONFLICT (topic_id, key) DO UPDATE SET rid = excluded.rid",
                [(topic_id, k, rid) for k, rid in heads.items()],
            )
        if self.compaction.due(topic, count):
            self._compact_topic(topic)
        return [first + i for i in range(count)]

    # Reading.

    def read(self, topic: str, from_offset: int = 0, limit: int = 1000) -> list[Record]:
        with self._read(f"reading {topic}") as db:
            topic_id, end = self._topic(db, topic)
            checks.check_read_offset(topic, from_offset, end)
            if limit <= 0:
                return []
            low, high = topic_range(topic_id)
            rows = db.execute(
                "SELECT id, key, value, timestamp_ms, epoch FROM records"
                " WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (low | from_offset, high, limit),
            ).fetchall()
        return [Record(topic, rid & MAX_OFFSET, *rest) for rid, *rest in rows]

    def latest(self, topic: str) -> dict[str, Record]:
        with self._read(f"reading the latest values of {topic}") as db:
            topic_id, _ = self._topic(db, topic)
            rows = db.execute(
                "SELECT r.id, r.key, r.value, r.timestamp_ms, r.epoch"
                " FROM heads h JOIN records r ON r.id = h.rid"
                " WHERE h.topic_id = ? AND r.value IS NOT NULL ORDER BY r.id",
                (topic_id,),
            ).fetchall()
        return {key: Record(topic, rid & MAX_OFFSET, key, *rest) for rid, key, *rest in rows}

    def end_offset(self, topic: str) -> int:
        with self._read(f"reading the end offset of {topic}") as db:
            return self._topic(db, topic)[1]

    # Consumer groups.

    def committed(self, group: str, topic: str) -> int | None:
        with self._read(f"reading the offset of group {group!r} on {topic}") as db:
            topic_id, _ = self._topic(db, topic)
            row = db.execute(
                "SELECT next_offset FROM offsets WHERE grp = ? AND topic_id = ?",
                (group, topic_id),
            ).fetchone()
        return None if row is None else int(row[0])

    def commit(self, group: str, topic: str, offset: int) -> None:
        with self.transaction(f"committing offset {offset} of group {group!r} on {topic}") as db:
            topic_id, end = self._topic(db, topic)
            checks.check_commit_offset(topic, offset, end)
            db.execute(
                "INSERT INTO offsets (grp, topic_id, next_offset) VALUES (?, ?, ?)"
                " ON CONFLICT (grp, topic_id) DO UPDATE SET next_offset = excluded.next_offset",
                (group, topic_id, offset),
            )

    def member(
        self, group: str, topic: str, member_id: str, *, session_timeout_s: float
    ) -> SqliteMember:
        session_ms = checks.session_ms(session_timeout_s)
        with self._read(f"joining group {group!r} on {topic}") as db:
            topic_id, _ = self._topic(db, topic)
            member = SqliteMember(self, group, (topic, topic_id), member_id, session_ms)
            self._members.append(member)
            return member

    def group(
        self, group: str, topics: Sequence[str], member_id: str, *, session_timeout_s: float
    ) -> EmulatedShare:
        session_ms = checks.session_ms(session_timeout_s)
        with self._read(f"joining group {group!r}") as db:
            for topic in topics:
                self._topic(db, topic)
            share = EmulatedShare(self, group, topics, member_id, session_ms)
            self._shares.append(share)
            return share

    def roster_heartbeat(self, group: str, me: leases.Claimant) -> list[str] | None:
        if not self.is_open:
            return None
        with self.transaction(f"polling group {group!r}", synced=False) as db:
            return sqlite_member.roster_heartbeat(db, group, me, self.now_ms())

    def roster_leave(self, group: str, token: str) -> None:
        if self.is_open:
            with self.transaction(f"leaving group {group!r}", synced=False) as db:
                sqlite_member.roster_leave(db, group, token)

    def groups(self) -> list[GroupInfo]:
        with self._read("listing groups") as db:
            rows = db.execute(
                "SELECT g.grp, t.name, o.next_offset, l.owner, coalesce(l.epoch, 0)"
                " FROM (SELECT grp, topic_id FROM offsets UNION SELECT grp, topic_id FROM leases)"
                " AS g JOIN topics t ON t.id = g.topic_id"
                " LEFT JOIN offsets o ON o.grp = g.grp AND o.topic_id = g.topic_id"
                " LEFT JOIN leases l ON l.grp = g.grp AND l.topic_id = g.topic_id"
                " ORDER BY g.grp, t.name"
            ).fetchall()
        return [GroupInfo(*row) for row in rows]

    # Maintenance.

    def compact(self, topics: Iterable[str] | None = None) -> list[CompactionStats]:
        names = [info.name for info in self.topics()] if topics is None else list(topics)
        return [self._compact_topic(name) for name in names]

    def close(self) -> None:
        with self._lock:
            if self._db is None:
                return
            self._close_members()
            self._db.close()
            self._db = None

    # For SqliteMember.

    @property
    def is_open(self) -> bool:
        return self._db is not None

    @contextlib.contextmanager
    def batch(self, what: str, *, synced: bool = True) -> Iterator[None]:
        """The transactions this thread opens inside are one: the membership's writes of a
        poll (a roster row and a lease per topic) cost one fsync, not one each. An error in
        any of them rolls back all of them; the poll is tried again whole."""
        with self.transaction(what, synced=synced):
            self._batched = True
            try:
                yield
            finally:
                self._batched = False

    @contextlib.contextmanager
    def transaction(self, what: str, *, synced: bool = True) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, rolled back on any error; ``synced=False``:
        committed without an fsync of its own (membership writes: see *Durability*)."""
        with self._lock, self._translated(what):
            db = self._open_db()
            if self._batched:  # the lock is held by this thread's ``batch``: join it
                yield db
                return
            if not synced:
                db.execute("PRAGMA synchronous=NORMAL")
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            finally:
                if not synced:
                    db.execute("PRAGMA synchronous=FULL")

    @contextlib.contextmanager
    def _read(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._lock, self._translated(what):
            yield self._open_db()

    # Internals.

    @contextlib.contextmanager
    def _translated(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise translate(exc, self.path, what) from exc

    def _open_db(self) -> sqlite3.Connection:
        if self._db is None:
            raise LogError(f"{self.path}: the log handle is closed")
        return self._db

    def _topic(self, db: sqlite3.Connection, topic: str) -> tuple[int, int]:
        """(id, end offset) of a topic."""
        row = db.execute("SELECT id, end_offset FROM topics WHERE name = ?", (topic,)).fetchone()
        if row is None:
            raise UnknownTopic(f"unknown topic {topic!r}")
        return int(row[0]), int(row[1])

    def _compact_topic(self, topic: str) -> CompactionStats:
        started = self._clock.monotonic()
        with self.transaction(f"compacting {topic}") as db:
            row = db.execute(
                "SELECT id, compacted, retention_ms, retention_bytes, records FROM topics"
                " WHERE name = ?",
                (topic,),
            ).fetchone()
            if row is None:
                raise UnknownTopic(f"unknown topic {topic!r}")
            topic_id, compacted, retention_ms, retention_bytes, before = row
            cleaner = Cleaner(db, topic_id, self._clock.wall_ms())
            if retention_ms is not None:
                cleaner.drop_older_than(retention_ms)
            if retention_bytes is not None:
                cleaner.drop_beyond_size(retention_bytes)
            if compacted:
                cleaner.keep_heads(self.delete_retention_ms)
            after = cleaner.recount() if cleaner.deleted else before
        return CompactionStats(topic, before, after, self._clock.monotonic() - started)


if TYPE_CHECKING:
    from pushjobs.log.shares import Roster

    _log: type[OrderedLog] = SqliteLog
    _lists: type[ListsGroups] = SqliteLog
    _roster: type[Roster] = SqliteLog
