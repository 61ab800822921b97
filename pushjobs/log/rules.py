"""Semantics shared by the embedded backends (memory, sqlite): argument checks and leases.

Pure: no I/O, no clock. Both backends call these inside their critical section (a lock, a
write transaction), so the two agree on every edge case the conformance suite pins.

Group leases. A lease is the ownership of one (group, topic). ``poll`` either renews the
caller's own lease, takes over a lease that is released or expired, or changes nothing.
A lease is tied to one member *object* (its ``token``), not to its member id: a process
that restarts with the same id is a new owner and gets a new epoch, so two live handles
that share an id can never share an epoch. Each change of owner raises the group's epoch
to one more than the highest it ever had, so epochs only grow.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pushjobs.errors import LogError, OffsetOutOfRange, RecordTooLarge
from pushjobs.log.base import Record, TopicPolicy

# Kafka's delete.retention.ms default: how long a tombstone outlives compaction, so that
# a consumer reading incrementally still sees the delete.
DEFAULT_DELETE_RETENTION_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Lease:
    owner: str | None  # member id; None once released
    token: str | None  # the owning member object's session token
    epoch: int
    heartbeat_ms: int
    session_ms: int


def lease_expired(lease: Lease, now_ms: int) -> bool:
    """Released, or no heartbeat within the owner's session timeout.

    Wall time can step. A heartbeat further in the *future* than a session timeout means
    the clock went back: the lease counts as expired, so a step costs at most one
    (fenced, hence safe) change of owner and never leaves a dead owner's lease stuck.
    """
    if lease.owner is None:
        return True
    return abs(now_ms - lease.heartbeat_ms) > lease.session_ms


def poll_lease(
    lease: Lease | None,
    *,
    group_epoch: int,
    member_id: str,
    token: str,
    session_ms: int,
    now_ms: int,
) -> Lease | None:
    """The lease after a poll by ``token``; None if another member holds it (no change)."""
    if lease is not None and lease.owner is not None and lease.token == token:
        return replace(lease, heartbeat_ms=now_ms, session_ms=session_ms)
    if lease is None or lease_expired(lease, now_ms):
        return Lease(member_id, token, group_epoch + 1, now_ms, session_ms)
    return None


def session_ms(session_timeout_s: float) -> int:
    if not session_timeout_s > 0:
        raise LogError(f"session timeout must be greater than 0, got {session_timeout_s}")
    return max(1, round(session_timeout_s * 1000))


def check_policy(topic: str, policy: TopicPolicy) -> None:
    for name, limit in (
        ("retention_ms", policy.retention_ms),
        ("retention_bytes", policy.retention_bytes),
    ):
        if limit is not None and limit < 0:
            raise LogError(f"{topic}: {name} must not be negative, got {limit}")


def check_records(
    topic: str, records: Sequence[tuple[str, bytes | None]], max_value_bytes: int
) -> None:
    for key, value in records:
        if not isinstance(key, str):
            raise LogError(f"{topic}: a key must be a str, got {type(key).__name__}")
        if value is not None and not isinstance(value, bytes):
            raise LogError(f"{topic}: a value must be bytes or None, got {type(value).__name__}")
        if value is not None and len(value) > max_value_bytes:
            raise RecordTooLarge(
                f"{topic}: value of {len(value)} bytes for key {key!r} is over the "
                f"{max_value_bytes}-byte limit"
            )


def check_read_offset(topic: str, from_offset: int, end_offset: int) -> None:
    if from_offset < 0:
        raise OffsetOutOfRange(f"{topic}: negative offset {from_offset}")
    if from_offset > end_offset:
        raise OffsetOutOfRange(f"{topic}: offset {from_offset} is past the end {end_offset}")


def check_commit_offset(topic: str, offset: int, end_offset: int) -> None:
    if offset < 0:
        raise OffsetOutOfRange(f"{topic}: cannot commit negative offset {offset}")
    if offset > end_offset:
        raise OffsetOutOfRange(f"{topic}: offset {offset} is past the end {end_offset}")


def record_bytes(key: str, value: bytes | None) -> int:
    """What a record counts for in stats and size retention: key and value bytes."""
    return len(key.encode()) + (len(value) if value is not None else 0)


def fold(records: Iterable[Record]) -> dict[str, Record]:
    """The latest record per key, tombstoned keys removed."""
    latest: dict[str, Record] = {}
    for rec in records:
        if rec.value is None:
            latest.pop(rec.key, None)
        else:
            latest[rec.key] = rec
    return latest
