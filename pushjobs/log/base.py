"""The ordered log: the one interface every backend implements.

Theory of operation. A topic is a single partition: records get gap-free offsets 0, 1,
2... in append order. ``append`` returns only once the record is durable. Compacted topics
keep the latest value per key when compacted (a ``None`` value is a tombstone that removes
the key); readers of a compacted topic must fold anyway, because compaction is lazy, so
``latest`` folds. Retention drops the oldest records of a topic by age or size; offsets of
the survivors never change.

Consumer groups store a committed offset per topic: the offset of the next record to
consume. On a single-partition topic a group has at most one owner: ``member()`` joins,
and each ``poll()`` both heartbeats and answers whether this member owns the topic and
under which fencing epoch. A member that stops polling loses ownership after its session
timeout; each change of owner raises the epoch. A write made with ``fence=Fence(group,
epoch)`` is refused with ``FencedError`` unless ``epoch`` is still the group's current
epoch, so a deposed leader that wakes up late cannot overwrite its successor.

A group over several topics (``group()``: the partitions of a partitioned topic, each a
single-partition topic here) shares them among its live members: the log assigns each
topic to at most one member at a time, evenly (with N members each owns floor or ceil of
P/N), and moves as few as it can when members join or leave (a member keeps its topics
while membership does not change). ``GroupShare.poll()`` heartbeats and answers the
topics this member owns now, each with its own ``Fence``: its group is
``share_fence_group(group, topic)``, so every topic has its own epoch and a write fenced
for one topic says nothing about another. A topic moves only once its previous owner
released it (it was told to, or it closed) or its session expired.

Besides the interface, what every backend shares as is: ``record_bytes`` (what a record
counts for), ``AppendByBatch`` (``append`` as a batch of one) and ``NamedMember`` (the
names of a group member).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

DEFAULT_MAX_VALUE_BYTES = 1024 * 1024

# What ``append_batch`` takes: (key, value) pairs, a None value being a tombstone.
Batch = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    offset: int
    key: str
    value: bytes | None
    timestamp_ms: int
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """How a topic is cleaned up: compaction and time/size retention (None: keep forever)."""

    compacted: bool = False
    retention_ms: int | None = None
    retention_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    policy: TopicPolicy
    start_offset: int
    end_offset: int
    records: int
    bytes: int


def record_bytes(key: str, value: bytes | None) -> int:
    """What a record counts for in ``TopicInfo.bytes`` and size retention: key and value."""
    return len(key.encode()) + (len(value) if value is not None else 0)


@dataclass(frozen=True, slots=True)
class Fence:
    """Proof of ownership carried by a leader's writes."""

    group: str
    epoch: int


@dataclass(frozen=True, slots=True)
class CompactionStats:
    topic: str
    records_before: int
    records_after: int
    seconds: float


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group's position on one topic, and who owns the topic for it."""

    group: str
    topic: str
    committed: int | None
    owner: str | None = None
    epoch: int = 0


class GroupMember(Protocol):
    """One member of a consumer group on a single-partition topic."""

    @property
    def member_id(self) -> str: ...

    def poll(self) -> int | None:
        """Heartbeat; return the fencing epoch if this member owns the topic, else None."""
        ...

    def close(self) -> None:
        """Leave the group at once, handing ownership to the next member."""
        ...


class GroupShare(Protocol):
    """One member of a consumer group over several topics: its share of them."""

    @property
    def member_id(self) -> str: ...

    def poll(self) -> dict[str, Fence]:
        """Heartbeat; the topics this member owns now, each with the fence of its epoch."""
        ...

    def close(self) -> None:
        """Leave the group at once: its topics go to the other members."""
        ...


def share_fence_group(group: str, topic: str) -> str:
    """The group a ``GroupShare``'s fence for ``topic`` names: one epoch per topic."""
    return f"{group}/{topic}"


class NamedMember:
    """The names every backend's ``GroupMember`` carries: its group, topic and member id."""

    def __init__(self, group: str, topic: str, member_id: str) -> None:
        self.group = group
        self.topic = topic
        self._member_id = member_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.group!r}, {self.topic!r}, {self._member_id!r})"

    @property
    def member_id(self) -> str:
        return self._member_id


class OrderedLog(Protocol):
    def create_topic(self, topic: str, policy: TopicPolicy) -> None:
        """Create the topic if it does not exist; an existing topic keeps its policy."""
        ...

    def topics(self) -> list[TopicInfo]: ...

    def append(
        self, topic: str, key: str, value: bytes | None, *, fence: Fence | None = None
    ) -> int:
        """Append one record; return its offset once durable."""
        ...

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        """Append many records with one durable write; return their offsets in order."""
        ...

    def read(self, topic: str, from_offset: int = 0, limit: int = 1000) -> list[Record]:
        """Records with offset >= from_offset in order, at most ``limit`` of them."""
        ...

    def latest(self, topic: str) -> dict[str, Record]:
        """The latest record per key, tombstoned keys removed."""
        ...

    def end_offset(self, topic: str) -> int:
        """The offset the next appended record will get."""
        ...

    def committed(self, group: str, topic: str) -> int | None:
        """The group's committed offset (next record to consume), or None if never committed."""
        ...

    def commit(self, group: str, topic: str, offset: int) -> None: ...

    def member(
        self, group: str, topic: str, member_id: str, *, session_timeout_s: float
    ) -> GroupMember: ...

    def group(
        self, group: str, topics: Sequence[str], member_id: str, *, session_timeout_s: float
    ) -> GroupShare:
        """Join ``group`` over ``topics`` (they must exist): see the module docstring."""
        ...

    def compact(self, topics: Iterable[str] | None = None) -> list[CompactionStats]:
        """Apply compaction and retention now to the given topics (default: all)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ListsGroups(Protocol):
    """Optional: a backend that can enumerate its consumer groups (for ``log stats``).

    Kept apart from ``OrderedLog`` because Kafka's group listing needs broker support that
    not every cluster has; callers check ``isinstance(log, ListsGroups)``.
    """

    def groups(self) -> list[GroupInfo]: ...


class AppendByBatch(ABC):
    """``append`` as a batch of one, for backends whose batch is their one durable write."""

    @abstractmethod
    def append_batch(
        self, topic: str, records: Batch, *, fence: Fence | None = None
    ) -> list[int]: ...

    def append(
        self, topic: str, key: str, value: bytes | None, *, fence: Fence | None = None
    ) -> int:
        return self.append_batch(topic, [(key, value)], fence=fence)[0]
