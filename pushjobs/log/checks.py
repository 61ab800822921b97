"""The argument checks of the ordered log, shared by the backends so they word errors alike.

Pure: no I/O, no clock. The embedded backends (memory, sqlite) run every check inside
their critical section (a lock, a write transaction); the Kafka backend checks records
before it produces them, and an offset once it knows the topic exists (its sign first,
then against the end the cluster reports), so every backend names a missing topic first.
"""

from __future__ import annotations

from pushjobs.errors import FencedError, LogError, OffsetOutOfRange, RecordTooLarge
from pushjobs.log.base import Batch, Fence, TopicPolicy


def check_policy(topic: str, policy: TopicPolicy) -> None:
    for name, limit in (
        ("retention_ms", policy.retention_ms),
        ("retention_bytes", policy.retention_bytes),
    ):
        if limit is not None and limit < 0:
            raise LogError(f"{topic}: {name} must not be negative, got {limit}")


def check_records(topic: str, records: Batch, max_value_bytes: int) -> None:
    for key, value in records:
        if not isinstance(key, str):
            raise LogError(f"{topic}: a key must be a str, got {type(key).__name__}")
        if value is not None and not isinstance(value, bytes):
            raise LogError(f"{topic}: a value must be bytes or None, got {type(value).__name__}")
        check_value_size(topic, key, value, max_value_bytes)


def check_value_size(topic: str, key: str, value: bytes | None, max_value_bytes: int) -> None:
    if value is not None and len(value) > max_value_bytes:
        raise RecordTooLarge(
            f"{topic}: value of {len(value)} bytes for key {key!r} is over the "
            f"{max_value_bytes}-byte limit"
        )


def check_read_offset(topic: str, from_offset: int, end_offset: int) -> None:
    check_read_start(topic, from_offset)
    check_not_past_end(topic, from_offset, end_offset)


def check_commit_offset(topic: str, offset: int, end_offset: int) -> None:
    check_commit_start(topic, offset)
    check_not_past_end(topic, offset, end_offset)


def check_read_start(topic: str, from_offset: int) -> None:
    if from_offset < 0:
        raise OffsetOutOfRange(f"{topic}: negative offset {from_offset}")


def check_commit_start(topic: str, offset: int) -> None:
    if offset < 0:
        raise OffsetOutOfRange(f"{topic}: cannot commit negative offset {offset}")


def check_not_past_end(topic: str, offset: int, end_offset: int) -> None:
    if offset > end_offset:
        raise OffsetOutOfRange(f"{topic}: offset {offset} is past the end {end_offset}")


def check_epoch(topic: str, fence: Fence, current: int) -> int:
    """The fence's epoch if it is still its group's ``current`` one, else ``FencedError``."""
    if fence.epoch != current:
        raise FencedError(
            f"{topic}: epoch {fence.epoch} is stale: the current epoch of group "
            f"{fence.group!r} is {current}"
        )
    return fence.epoch


def session_ms(session_timeout_s: float) -> int:
    if not session_timeout_s > 0:
        raise LogError(f"session timeout must be greater than 0, got {session_timeout_s}")
    return max(1, round(session_timeout_s * 1000))
