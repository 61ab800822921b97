"""The writer side of the audit trail: chained appends and signed checkpoints.

Theory of operation. ``ChainedLog`` wraps the server's log. A fenced append to an audited
topic (``commands``, ``assignments``, ``events``, ``keys``, each ``schedules`` partition)
is chained (``pushjobs.audit.chain``) in the stream of its fence group: the leader's
writes in one stream per topic, a schedule partition owner's in another. Unfenced writes
(membership pongs on ``control``, the one-time key import, a standby's node events) are
not chained: they are not decisions, and with several writers at once they could not be
in one order. ``control`` is not audited at all: membership chatter, kept 15 minutes.

The head of each stream is kept in memory for the fence's epoch: one writer holds an
epoch, so what it appended is the stream. A new epoch (a takeover, a rebalance, a restart)
reads the head back from the end of the topic (``head_from_tail``), so a new leader
continues its predecessor's chains. An append that raised may or may not be durable: the
head is forgotten and read back at the next append.

``Checkpoints`` signs what the ``Ledger`` noted, every ``audit_checkpoint_s``, with the
server's identity key, and appends it to ``audit`` in a stream of this server
incarnation's own. A checkpoint that cannot be written is noted back and tried again.

Hot path: a chained batch costs one SHA-256 of each record's bytes and a splice of about
150 bytes in front of its value; no record is decoded or encoded again.

A stream's head read back takes in the passengers (tombstones) after its last record up to
the next record of any stream, its own and, if another stream's lie there, those too: the
check accepts any of them. One case it cannot tell: a writer that sealed a tombstone of
its own as its head and died before writing more, behind another stream's tombstone; its
successor's chain then names the other tombstone at that seq, and the check reports the
sealed head as altered. Writing any record after a tombstone (the next turn usually
does) closes the window.

Killed at any line: the chains are in the records themselves and the heads are read back;
what the ledger held since the last checkpoint is lost, and those records are sealed by
the next writer's first checkpoint, by head (``pushjobs.audit.checkpoint``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pushjobs.audit import checkpoint
from pushjobs.audit.chain import EMPTY, Head, TailRecord, head_from_tail, link_batch
from pushjobs.clock import Clock
from pushjobs.errors import LogError
from pushjobs.log.base import Batch, Fence, OrderedLog
from pushjobs.log.passthrough import PassThroughLog
from pushjobs.log.topics import TopicNames
from pushjobs.protocol.signing import Signer
from server.core.schedshards import count_topic

log = logging.getLogger("pushjobs.server")

# Records read back at first to find a stream's head, then four times more each page: the
# head is nearly always the topic's last record, and an events record may be 256 KiB.
FIRST_PAGE = 4


def audited(topics: TopicNames) -> Callable[[str], bool | None]:
    """Whether a topic is audited: None if not, else whether it is compacted."""
    fixed = {
        topics.commands: True,
        topics.assignments: True,
        topics.events: False,
        topics.keys: True,
        topics.schedules: True,
    }
    partitions, count = topics.schedules + ".", count_topic(topics.schedules)

    def policy(topic: str) -> bool | None:
        if topic in fixed:
            return fixed[topic]
        return True if topic.startswith(partitions) and topic != count else None

    return policy


class ChainedLog(PassThroughLog):
    """``inner`` with the fenced appends to audited topics chained (``audited``)."""

    def __init__(self, inner: OrderedLog, audited: Callable[[str], bool | None]) -> None:
        super().__init__(inner)
        self.audited = audited
        self.ledger = checkpoint.Ledger()
        self._heads: dict[tuple[str, str], tuple[int, Head]] = {}

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        compacted = self.audited(topic) if fence is not None else None
        if fence is None or compacted is None or not records:
            return self.inner.append_batch(topic, records, fence=fence)
        by = fence.group
        linked = link_batch(by, self._head(topic, fence), records)
        try:
            offsets = self.inner.append_batch(topic, linked.batch, fence=fence)
        except BaseException:
            self._heads.pop((topic, by), None)  # durable or not: read back next time
            raise
        self._heads[topic, by] = (fence.epoch, linked.head)
        self.ledger.note(topic, by, linked, compacted=compacted)
        return offsets

    def _head(self, topic: str, fence: Fence) -> Head:
        known = self._heads.get((topic, fence.group))
        if known is not None and known[0] == fence.epoch:
            return known[1]
        return self.read_head(topic, fence.group)

    def read_head(self, topic: str, by: str) -> Head:
        return read_head(self.inner, topic, by)


def read_head(log_: OrderedLog, topic: str, by: str) -> Head:
    """Stream ``by``'s head from the end of ``topic``, read back a page at a time."""
    end, page = log_.end_offset(topic), FIRST_PAGE
    tail: list[TailRecord] = []
    while end > 0:
        start = max(0, end - page)
        tail = [TailRecord(r.key, r.value) for r in log_.read(topic, start, end - start)] + tail
        head = head_from_tail(by, tail)
        if head is not None:
            return head
        end, page = start, page * 4
    return EMPTY


class Checkpoints:
    """Every ``every_s``, what ``ledger`` noted, signed, appended to ``topic``."""

    def __init__(
        self,
        log_: OrderedLog,
        topic: str,
        ledger: checkpoint.Ledger,
        signer: Signer,
        *,
        server: str,
        incarnation: str,
        every_s: float,
        clock: Clock,
    ) -> None:
        self.log = log_
        self.topic = topic
        self.ledger = ledger
        self.signer = signer
        self.server = server
        self.stream = f"{server}/{incarnation}"
        self.every_s = every_s
        self.clock = clock
        self.head: Head | None = EMPTY  # None: unknown, read back before the next write
        self.next_due = clock.monotonic() + every_s if every_s > 0 else None
        self.written = 0

    def tick(self, now: float) -> None:
        if self.next_due is None or now < self.next_due:
            return
        self.next_due = now + self.every_s
        self.write()

    def write(self) -> None:
        """Sign and append what was noted since the last checkpoint (nothing: no record)."""
        if not self.ledger:
            return
        key = f"checkpoint:{self.server}"
        if self.head is None:
            try:
                self.head = read_head(self.log, self.topic, self.stream)
            except LogError as exc:
                log.warning("audit checkpoint not written (tried again later): %s", exc)
                return
        parts = self.ledger.take(self.server, self.clock.wall_ms(), self.signer.key_id)
        for i, cp in enumerate(parts):
            linked = link_batch(self.stream, self.head, [(key, checkpoint.encode(cp, self.signer))])
            try:
                self.log.append_batch(self.topic, linked.batch)
            except LogError as exc:
                log.warning("audit checkpoint not written (tried again later): %s", exc)
                self.ledger.restore(parts[i:])
                self.head = None  # written or not: read back next time
                return
            self.head = linked.head
            self.written += 1
