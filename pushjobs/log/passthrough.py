"""A log that passes every call through to another: the base of the wrappers that change
one thing about a backend (``timed.TimedLog`` times its appends; the server's
``ChainedLog`` chains them) and leave the rest as it is."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pushjobs.log.base import (
    AppendByBatch,
    Batch,
    CompactionStats,
    Fence,
    GroupMember,
    GroupShare,
    OrderedLog,
    Record,
    TopicInfo,
    TopicPolicy,
)


class PassThroughLog(AppendByBatch):
    """Every call of ``OrderedLog`` handed to ``inner`` as is."""

    def __init__(self, inner: OrderedLog) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        return self.inner.append_batch(topic, records, fence=fence)

    def create_topic(self, topic: str, policy: TopicPolicy) -> None:
        self.inner.create_topic(topic, policy)

    def topics(self) -> list[TopicInfo]:
        return self.inner.topics()

    def read(self, topic: str, from_offset: int = 0, limit: int = 1000) -> list[Record]:
        return self.inner.read(topic, from_offset, limit)

    def latest(self, topic: str) -> dict[str, Record]:
        return self.inner.latest(topic)

    def end_offset(self, topic: str) -> int:
        return self.inner.end_offset(topic)

    def committed(self, group: str, topic: str) -> int | None:
        return self.inner.committed(group, topic)

    def commit(self, group: str, topic: str, offset: int) -> None:
        self.inner.commit(group, topic, offset)

    def member(
        self, group: str, topic: str, member_id: str, *, session_timeout_s: float
    ) -> GroupMember:
        return self.inner.member(group, topic, member_id, session_timeout_s=session_timeout_s)

    def group(
        self, group: str, topics: Sequence[str], member_id: str, *, session_timeout_s: float
    ) -> GroupShare:
        return self.inner.group(group, topics, member_id, session_timeout_s=session_timeout_s)

    def compact(self, topics: Iterable[str] | None = None) -> list[CompactionStats]:
        return self.inner.compact(topics)

    def close(self) -> None:
        self.inner.close()
