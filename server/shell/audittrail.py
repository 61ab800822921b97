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

That read is on the write path (the leader's first append of its epoch to the topic waits
for it), so it is bounded: ``SCAN_BACK_RECORDS`` offsets and ``SCAN_BACK_BYTES`` of
records from the end, whichever comes first. The head is nearly always the topic's last
record; it is further back only on an installation upgraded from before the trail (a
huge ``events`` topic, and no chained record in it yet) or where another stream wrote
more since (a schedule partition's fires, between two of the leader's edits of its
definitions). Past the bound the stream starts a new chain (``chain.fresh``), which the
check accepts and reports as such, instead of reading the whole topic on the leader's
write path.

``Checkpoints`` signs what the ``Ledger`` noted, every ``audit_checkpoint_s``, with the
server's identity key, and appends it to ``audit`` in a stream of this server
incarnation's own. A checkpoint that cannot be written is noted back and tried again.

Hot path: a chained batch costs one SHA-256 of each record's bytes and a splice of about
150 bytes in front of its value; no record is decoded or encoded again.

Two fence groups write each schedules partition (``Audited.shared``): there a batch that
would end with a tombstone is closed by a trailer of its stream (``chain``, "Two writers
on one topic"), so a stream's head read back never takes the other stream's tombstones
for its own. ``append_batch`` returns the offsets of the caller's records only.

Killed at any line: the chains are in the records themselves and the heads are read back;
what the ledger held since the last checkpoint is lost, and those records are sealed by
the next writer's first checkpoint, by head (``pushjobs.audit.checkpoint``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from pushjobs.audit import checkpoint
from pushjobs.audit.chain import EMPTY, Head, TailRecord, fresh, head_from_tail, link_batch
from pushjobs.clock import Clock
from pushjobs.errors import LogError
from pushjobs.log.base import Batch, Fence, OrderedLog, record_bytes
from pushjobs.log.passthrough import PassThroughLog
from pushjobs.log.topics import TopicNames
from pushjobs.protocol.signing import Signer
from server.core.schedshards import count_topic

log = logging.getLogger("pushjobs.server")

# Records read back at first to find a stream's head, then four times more each page up
# to ``MAX_PAGE``: the head is nearly always the topic's last record, and an events record
# may be 256 KiB (a page of 64 of them is 16 MiB).
FIRST_PAGE = 4
MAX_PAGE = 64
# How far back a new writer reads for its stream's head before it starts a new chain: the
# offsets, and the bytes of the records read, whichever bound comes first. A topic's last
# thousand records hold the head of every stream that wrote lately; a leader's first
# write waits for this read (a few ms on SQLite, about 20 fetches on Kafka).
SCAN_BACK_RECORDS = 1000
SCAN_BACK_BYTES = 16 * 1024 * 1024


class Audited(NamedTuple):
    """How a topic is audited: whether it is compacted, and whether two fence groups write
    it (each batch ending with a passenger is then closed by a trailer: ``chain``)."""

    compacted: bool
    shared: bool = False


def audited(topics: TopicNames) -> Callable[[str], Audited | None]:
    """How a topic is audited (``Audited``), None if it is not."""
    fixed = {
        topics.commands: Audited(compacted=True),
        topics.assignments: Audited(compacted=True),
        topics.events: Audited(compacted=False),
        topics.keys: Audited(compacted=True),
        topics.schedules: Audited(compacted=True),
    }
    partitions, count = topics.schedules + ".", count_topic(topics.schedules)
    # A schedules partition: the leader writes the definitions, the owner the fire states.
    partition = Audited(compacted=True, shared=True)

    def policy(topic: str) -> Audited | None:
        if topic in fixed:
            return fixed[topic]
        return partition if topic.startswith(partitions) and topic != count else None

    return policy


class ChainedLog(PassThroughLog):
    """``inner`` with the fenced appends to audited topics chained (``audited``)."""

    def __init__(self, inner: OrderedLog, audited: Callable[[str], Audited | None]) -> None:
        super().__init__(inner)
        self.audited = audited
        self.ledger = checkpoint.Ledger()
        self._heads: dict[tuple[str, str], tuple[int, Head]] = {}

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        how = self.audited(topic) if fence is not None else None
        if fence is None or how is None or not records:
            return self.inner.append_batch(topic, records, fence=fence)
        by = fence.group
        linked = link_batch(by, self._head(topic, fence), records, shared=how.shared)
        try:
            offsets = self.inner.append_batch(topic, linked.batch, fence=fence)
        except BaseException:
            self._heads.pop((topic, by), None)  # durable or not: read back next time
            raise
        self._heads[topic, by] = (fence.epoch, linked.head)
        self.ledger.note(topic, by, linked, compacted=how.compacted)
        return offsets[: len(records)]  # a trailer's is not the caller's

    def _head(self, topic: str, fence: Fence) -> Head:
        known = self._heads.get((topic, fence.group))
        if known is not None and known[0] == fence.epoch:
            return known[1]
        return self.read_head(topic, fence.group)

    def read_head(self, topic: str, by: str) -> Head:
        return read_head(self.inner, topic, by)


def read_head(
    log_: OrderedLog,
    topic: str,
    by: str,
    *,
    max_records: int = SCAN_BACK_RECORDS,
    max_bytes: int = SCAN_BACK_BYTES,
) -> Head:
    """Stream ``by``'s head from the end of ``topic``, read back a page at a time; past
    ``max_records`` offsets or ``max_bytes`` read without finding it, a new chain's."""
    top = end = log_.end_offset(topic)
    page, read_bytes = FIRST_PAGE, 0
    tail: list[TailRecord] = []
    while end > 0:
        if top - end >= max_records or read_bytes >= max_bytes:
            log.info(
                "audit: no record of %s in the last %d records of %s (read back %d bytes): "
                "its chain starts anew at seq %d",
                by,
                top - end,
                topic,
                read_bytes,
                top,
            )
            return fresh(top)
        start = max(0, end - page, top - max_records)
        # A compacted topic has gaps: a read of ``end - start`` records may run past ``end``.
        records = [r for r in log_.read(topic, start, end - start) if r.offset < end]
        read_bytes += sum(record_bytes(r.key, r.value) for r in records)
        tail = [TailRecord(r.key, r.value, r.offset) for r in records] + tail
        head = head_from_tail(by, tail, top)
        if head is not None:
            return head
        end, page = start, min(page * 4, MAX_PAGE)
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
