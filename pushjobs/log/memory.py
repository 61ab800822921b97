"""An in-memory ordered log: the sqlite backend's semantics without I/O, for unit tests.

Everything lives in a ``MemoryStore``; ``MemoryLog(store=other.store)`` opens a second
handle on the same data (another "process" of a test), with its own members and its own
closed state. Nothing survives the Python process. One lock per store serialises every
operation, which is what the sqlite backend's write transactions give across processes.
"""

from __future__ import annotations

import bisect
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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
    GroupMember,
    GroupShare,
    ListsGroups,
    NamedMember,
    OrderedLog,
    Record,
    TopicInfo,
    TopicPolicy,
    record_bytes,
)
from pushjobs.log.compaction import DEFAULT_DELETE_RETENTION_MS, Compaction
from pushjobs.log.embedded import EmbeddedLog
from pushjobs.log.shares import EmulatedShare, live_keys

if TYPE_CHECKING:
    from pushjobs.log.shares import Roster


@dataclass(slots=True)
class _Topic:
    policy: TopicPolicy
    records: list[Record] = field(default_factory=list)  # ascending offsets, gaps allowed
    heads: dict[str, Record] = field(default_factory=dict)  # latest per key, tombstones too
    end_offset: int = 0
    bytes: int = 0


class MemoryStore:
    """The data of one in-memory log, shared by every handle opened on it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.topics: dict[str, _Topic] = {}
        self.offsets: dict[tuple[str, str], int] = {}
        self.leases: dict[tuple[str, str], leases.Lease] = {}
        self.roster: dict[tuple[str, str], leases.Lease] = {}  # (group, token): see shares

    def group_epoch(self, group: str) -> int:
        return max((ls.epoch for (g, _), ls in self.leases.items() if g == group), default=0)


class MemoryLog(EmbeddedLog["MemoryMember"]):
    """An ``OrderedLog`` in a ``MemoryStore``; safe to share between threads."""

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        clock: Clock | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
        compact_every_appends: int = 0,
    ) -> None:
        compaction = Compaction(compact_every_appends, delete_retention_ms)
        super().__init__(clock, max_value_bytes, compaction)
        self.store = store if store is not None else MemoryStore()
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryLog(store=0x{id(self.store):x})"

    # Topics.

    def create_topic(self, topic: str, policy: TopicPolicy) -> None:
        checks.check_policy(topic, policy)
        with self._locked():
            self.store.topics.setdefault(topic, _Topic(policy))

    def topics(self) -> list[TopicInfo]:
        with self._locked():
            return [_info(name, t) for name, t in sorted(self.store.topics.items())]

    # Writing.

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        checks.check_records(topic, records, self.max_value_bytes)
        with self._locked():
            t = self._topic(topic)
            if not records:
                return []
            epoch = 0
            if fence is not None:
                epoch = checks.check_epoch(topic, fence, self.store.group_epoch(fence.group))
            now_ms = self._clock.wall_ms()
            offsets = []
            for key, value in records:
                rec = Record(topic, t.end_offset, key, value, now_ms, epoch)
                t.records.append(rec)
                t.heads[key] = rec
                t.bytes += record_bytes(key, value)
                offsets.append(t.end_offset)
                t.end_offset += 1
            if self.compaction.due(topic, len(records)):
                self._compact_topic(topic, t)
            return offsets

    # Reading.

    def read(self, topic: str, from_offset: int = 0, limit: int = 1000) -> list[Record]:
        with self._locked():
            t = self._topic(topic)
            checks.check_read_offset(topic, from_offset, t.end_offset)
            if limit <= 0:
                return []
            start = bisect.bisect_left(t.records, from_offset, key=lambda r: r.offset)
            return t.records[start : start + limit]

    def latest(self, topic: str) -> dict[str, Record]:
        with self._locked():
            heads = self._topic(topic).heads
            return {k: r for k, r in heads.items() if r.value is not None}

    def end_offset(self, topic: str) -> int:
        with self._locked():
            return self._topic(topic).end_offset

    # Consumer groups.

    def committed(self, group: str, topic: str) -> int | None:
        with self._locked():
            self._topic(topic)
            return self.store.offsets.get((group, topic))

    def commit(self, group: str, topic: str, offset: int) -> None:
        with self._locked():
            checks.check_commit_offset(topic, offset, self._topic(topic).end_offset)
            self.store.offsets[(group, topic)] = offset

    def member(
        self, group: str, topic: str, member_id: str, *, session_timeout_s: float
    ) -> MemoryMember:
        session_ms = checks.session_ms(session_timeout_s)
        with self._locked():
            self._topic(topic)
            member = MemoryMember(self, group, topic, member_id, session_ms)
            self._members.append(member)
            return member

    def group(
        self, group: str, topics: Sequence[str], member_id: str, *, session_timeout_s: float
    ) -> EmulatedShare:
        session_ms = checks.session_ms(session_timeout_s)
        with self._locked():
            for topic in topics:
                self._topic(topic)
            share = EmulatedShare(self, group, topics, member_id, session_ms)
            self._shares.append(share)
            return share

    def roster_heartbeat(self, group: str, me: leases.Claimant) -> list[str] | None:
        store = self.store
        with store.lock:
            if self._closed:
                return None
            now_ms = self.now_ms()
            store.roster[(group, me.token)] = leases.Lease(
                me.member_id, me.token, 0, now_ms, me.session_ms
            )
            rows = [row for (g, _), row in store.roster.items() if g == group]
            live = live_keys(rows, now_ms)
            for row in rows:  # the expired go, as on sqlite
                if row.token is not None and leases.lease_expired(row, now_ms):
                    del store.roster[(group, row.token)]
            return live

    def roster_leave(self, group: str, token: str) -> None:
        with self.store.lock:
            self.store.roster.pop((group, token), None)

    def groups(self) -> list[GroupInfo]:
        with self._locked():
            keys = sorted(set(self.store.offsets) | set(self.store.leases))
            infos = []
            for group, topic in keys:
                lease = self.store.leases.get((group, topic))
                infos.append(
                    GroupInfo(
                        group,
                        topic,
                        self.store.offsets.get((group, topic)),
                        lease.owner if lease else None,
                        lease.epoch if lease else 0,
                    )
                )
            return infos

    # Maintenance.

    def compact(self, topics: Iterable[str] | None = None) -> list[CompactionStats]:
        with self._locked():
            names = sorted(self.store.topics) if topics is None else list(topics)
            return [self._compact_topic(name, self._topic(name)) for name in names]

    def close(self) -> None:
        with self.store.lock:
            if self._closed:
                return
            self._close_members()
            self._closed = True

    # Internals.

    def _locked(self) -> _Guard:
        return _Guard(self)

    def _topic(self, topic: str) -> _Topic:
        t = self.store.topics.get(topic)
        if t is None:
            raise UnknownTopic(f"unknown topic {topic!r}")
        return t

    def _compact_topic(self, name: str, t: _Topic) -> CompactionStats:
        started = self._clock.monotonic()
        before = len(t.records)
        now_ms = self._clock.wall_ms()
        keep = t.records
        if t.policy.retention_ms is not None:
            cutoff = now_ms - t.policy.retention_ms
            # Oldest first, up to the first young record: a clock that stepped back never
            # makes retention punch holes in the middle of the log.
            first = next((i for i, r in enumerate(keep) if r.timestamp_ms >= cutoff), len(keep))
            keep = keep[first:]
        if t.policy.retention_bytes is not None:
            total = sum(record_bytes(r.key, r.value) for r in keep)
            first = 0
            while first < len(keep) and total > t.policy.retention_bytes:
                total -= record_bytes(keep[first].key, keep[first].value)
                first += 1
            keep = keep[first:]
        if t.policy.compacted:
            tomb_cutoff = now_ms - self.delete_retention_ms
            heads = {r.offset for r in t.heads.values()}
            keep = [
                r
                for r in keep
                if r.offset in heads and (r.value is not None or r.timestamp_ms >= tomb_cutoff)
            ]
        kept = {r.offset for r in keep}
        t.heads = {k: r for k, r in t.heads.items() if r.offset in kept}
        t.records = keep
        t.bytes = sum(record_bytes(r.key, r.value) for r in keep)
        return CompactionStats(name, before, len(keep), self._clock.monotonic() - started)


class _Guard:
    """The store lock, refusing closed handles: ``with log._locked(): ...``."""

    __slots__ = ("_log",)

    def __init__(self, log: MemoryLog) -> None:
        self._log = log

    def __enter__(self) -> None:
        self._log.store.lock.acquire()
        if self._log._closed:
            self._log.store.lock.release()
            raise LogError("the memory log handle is closed")

    def __exit__(self, *exc: object) -> None:
        self._log.store.lock.release()


class MemoryMember(NamedMember):
    """A ``GroupMember`` holding a lease in the store (see ``leases``)."""

    def __init__(
        self, log: MemoryLog, group: str, topic: str, member_id: str, session_ms: int
    ) -> None:
        super().__init__(group, topic, member_id)
        self._log = log
        self._claimant = leases.Claimant(member_id, uuid.uuid4().hex, session_ms)
        self._open = True

    def poll(self) -> int | None:
        store = self._log.store
        with store.lock:
            if not self._open:
                return None
            key = (self.group, self.topic)
            lease = leases.poll_lease(
                store.leases.get(key),
                self._claimant,
                group_epoch=store.group_epoch(self.group),
                now_ms=self._log.now_ms(),
            )
            if lease is None:
                return None
            store.leases[key] = lease
            return lease.epoch

    def close(self) -> None:
        store = self._log.store
        with store.lock:
            if not self._open:
                return
            self._open = False
            key = (self.group, self.topic)
            lease = store.leases.get(key)
            if lease is not None and lease.token == self._claimant.token:
                store.leases[key] = leases.Lease(None, None, lease.epoch, lease.heartbeat_ms, 0)
            self._log.forget(self)


def _info(name: str, t: _Topic) -> TopicInfo:
    start = t.records[0].offset if t.records else t.end_offset
    return TopicInfo(name, t.policy, start, t.end_offset, len(t.records), t.bytes)


if TYPE_CHECKING:
    _log: type[OrderedLog] = MemoryLog
    _lists: type[ListsGroups] = MemoryLog
    _member: type[GroupMember] = MemoryMember
    _share: type[GroupShare] = EmulatedShare
    _roster: type[Roster] = MemoryLog
