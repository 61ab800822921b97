"""The ordered log on Kafka, through confluent-kafka (the ``kafka`` extra).

Theory of operation. Every pushjobs topic is one partition: records are produced to and
read from partition 0 only, so offsets are the partition's offsets, and even a topic the
cluster auto-created with more partitions behaves as a single-partition topic.

- ``append``/``append_batch``: an idempotent producer (``enable.idempotence``,
  ``acks=all``) produces, flushes, and returns the offsets from the delivery reports, so an
  offset comes back only once every in-sync replica has the record. ``message.timeout.ms``
  is the delivery timeout, so a report (success or error) always arrives before the flush
  deadline. The fencing epoch travels in the ``pushjobs.epoch`` record header.
- ``read``: an unassigned consumer is assigned (topic, 0, offset) and consumes up to the
  high watermark read just before; ``latest`` folds the whole topic by key.
- Committed offsets go through a consumer with that ``group.id`` and explicit synchronous
  commits. Kafka accepts commits into a group with live members only from a member, so a
  handle that holds a member of the group commits through it.
- Topic policy: ``create_topic`` asks the cluster (CreateTopics with ``cleanup.policy``,
  ``retention.ms``, ``retention.bytes``), bounded by the admin timeout. A cluster that
  refuses (librdkafka's mock cluster answers "unsupported") gets the topic from the
  ``create_fallback`` hook or by auto-creation, and a warning says the policy is not
  enforced there. The requested policy is recorded in a compacted registry topic
  (``<internal_prefix>-topics``), which is what ``topics()`` lists and reports.
- ``compact()`` only reports: Kafka compacts and applies retention in the broker.

Fencing (see ``kafka_control`` and ``kafka_member``). The epoch of a group lives in a
compacted control topic, ``<internal_prefix>-fence``; a fenced append checks it before
producing and again once its records are durable, and ``latest`` folds with
``fold.fold_fenced``, which drops a deposed leader's late writes. ``kafka_control`` says
what that guarantees and the race that remains without transactions.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pushjobs.clock import Clock, SystemClock
from pushjobs.errors import LogError, UnknownTopic
from pushjobs.log import checks
from pushjobs.log.base import (
    DEFAULT_MAX_VALUE_BYTES,
    AppendByBatch,
    Batch,
    CompactionStats,
    Fence,
    GroupMember,
    OrderedLog,
    Record,
    TopicInfo,
    TopicPolicy,
    record_bytes,
)
from pushjobs.log.fold import fold_fenced
from pushjobs.log.kafka.kafka_admin import TopicAdmin, topic_config
from pushjobs.log.kafka.kafka_client import (
    CONSUMER_GUARANTEES,
    Config,
    KafkaTimeouts,
    client_config,
    error_name,
    load,
    producer_guarantees,
    translate,
    translate_exception,
)
from pushjobs.log.kafka.kafka_control import ControlTopics
from pushjobs.log.kafka.kafka_groups import SHARE_PROTOCOL, KafkaShare
from pushjobs.log.kafka.kafka_io import PARTITION, Reader, Writer
from pushjobs.log.kafka.kafka_member import GroupProtocol, KafkaGroupMember

log = logging.getLogger(__name__)

# Headroom over max_value_bytes for the key, headers and batch framing.
FRAMING_BYTES = 64 * 1024
# Scans read up to a known high watermark: waiting at the broker for more only delays.
FETCH_WAIT_MS = 10
COORDINATOR_RETRY_S = 0.1

__all__ = ["KafkaLog", "KafkaTimeouts", "topic_config"]


class KafkaLog(AppendByBatch):
    """An ``OrderedLog`` on a Kafka cluster; a handle may be shared between threads."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "pushjobs",
        config: Config | None = None,
        producer_config: Config | None = None,
        consumer_config: Config | None = None,
        clock: Clock | None = None,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        timeouts: KafkaTimeouts | None = None,
        group_protocol: GroupProtocol = "consumer",
        internal_prefix: str = "__pushjobs",
        replication_factor: int = -1,
        create_fallback: Callable[[str], None] | None = None,
    ) -> None:
        """Build the clients for ``bootstrap_servers``; nothing waits for the cluster yet.

        ``config`` is extra librdkafka configuration for every client; ``producer_config``
        and ``consumer_config`` only for producers or consumers (librdkafka complains about
        properties of the other kind). Settings the log's guarantees rest on (idempotence,
        acks=all, no auto-commit...) cannot be overridden. ``group_protocol`` is the group
        protocol of ``member()``: ``"consumer"`` (KIP-848, the broker's session timeout)
        or ``"classic"`` (the member's session timeout, cooperative rebalancing).
        ``internal_prefix`` names the control topics (``-fence``, ``-topics``).
        ``create_fallback`` creates a topic when the cluster refuses the admin API; by
        default such a topic is auto-created by a metadata request.
        """
        ck, admin_mod = load()
        self._ck = ck
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.timeouts = timeouts or KafkaTimeouts()
        self.max_value_bytes = max_value_bytes
        self.group_protocol: GroupProtocol = group_protocol
        self._config = dict(config or {})
        self._producer_config = dict(producer_config or {})
        self._consumer_config = dict(consumer_config or {})
        self.clock: Clock = clock or SystemClock()
        # One lock for the shared reader, writer and folded control topics: a reader scan
        # (assign, consume, unassign) must not interleave with another.
        self._lock = threading.RLock()
        self._closed = False
        self._group_clients: dict[str, Any] = {}
        self._members: list[KafkaGroupMember | KafkaShare] = []
        # librdkafka insists on a group.id; the reader never joins or commits, and a
        # unique id can never collide with a real group.
        reader_group = {"group.id": f"{client_id}.reader.{uuid.uuid4().hex}"}
        self._reader = Reader(
            ck,
            self.consumer_settings("reader", reader_group),
            self.timeouts,
            self.clock,
            keep_alive=self._keep_members_alive,
        )
        self.reach = self._reader.reach
        self._writer = Writer(
            ck,
            self.producer_settings,
            self.timeouts,
            self.clock,
            self.reach,
            keep_alive=self._keep_members_alive,
        )
        self._admin = TopicAdmin(
            ck,
            admin_mod,
            self.client_settings,
            self.timeouts,
            self._reader,
            replication_factor=replication_factor,
            max_message_bytes=max_value_bytes + FRAMING_BYTES,
            create_fallback=create_fallback,
        )
        self.control = ControlTopics(
            internal_prefix,
            reader=self._reader,
            writer=self._writer,
            admin=self._admin,
            clock=self.clock,
            lock=self._lock,
        )

    def __repr__(self) -> str:
        return f"KafkaLog({self.bootstrap_servers!r}, client_id={self.client_id!r})"

    # Client configuration.

    def client_settings(self, role: str, overrides: Config) -> dict[str, Any]:
        return client_config(
            self.bootstrap_servers, f"{self.client_id}.{role}", self._config, overrides
        )

    def consumer_settings(self, role: str, overrides: Config) -> dict[str, Any]:
        return client_config(
            self.bootstrap_servers,
            f"{self.client_id}.{role}",
            # A scan drains the prefetch queue as fast as it fills: fetch again at once
            # instead of backing off for a second whenever the queue was full. A fetch
            # parked at a partition's end delays the next request on its connection.
            {"fetch.queue.backoff.ms": 1, "fetch.wait.max.ms": FETCH_WAIT_MS},
            self._config,
            self._consumer_config,
            CONSUMER_GUARANTEES,  # extra config cannot change them
            overrides,
        )

    def producer_settings(self) -> dict[str, Any]:
        delivery_ms = max(1, round(self.timeouts.delivery_s * 1000))
        return client_config(
            self.bootstrap_servers,
            self.client_id,
            {
                "linger.ms": 1,
                "request.timeout.ms": min(delivery_ms, 30000),
                "message.max.bytes": self.max_value_bytes + FRAMING_BYTES,
            },
            self._config,
            self._producer_config,
            producer_guarantees(delivery_ms),  # extra config cannot change them
        )

    # OrderedLog: topics.

    def create_topic(self, topic: str, policy: TopicPolicy) -> None:
        with self._lock:
            self._ensure_open()
            if topic in self.control.registered():
                return
            self._admin.create(topic, policy)
            self.control.register(topic, policy)

    def topics(self) -> list[TopicInfo]:
        """The topics ``create_topic`` made, with their policy; counting records reads each."""
        with self._lock:
            self._ensure_open()
            infos = []
            for name, policy in sorted(self.control.registered().items()):
                try:
                    low, high = self._reader.watermarks(name)
                except UnknownTopic:
                    continue
                records = self._reader.fetch(name, low, high, high - low) if high > low else []
                size = sum(record_bytes(r.key, r.value) for r in records)
                infos.append(TopicInfo(name, policy, low, high, len(records), size))
            return infos

    # OrderedLog: writing.

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        # Every backend's checks: a non-str key raised AttributeError, a str value was sent.
        checks.check_records(topic, records, self.max_value_bytes)
        with self._topic_locked(topic):
            if not records:
                return []
            if fence is None:
                return self._writer.produce(topic, records, 0)
            self.control.check_fence(fence, topic, self._members)
            offsets = self._writer.produce(topic, records, fence.epoch)
            self.control.check_fence(fence, topic, self._members, written=offsets)
            return offsets

    # OrderedLog: reading.

    def read(self, topic: str, from_offset: int = 0, limit: int = 1000) -> list[Record]:
        with self._topic_locked(topic):  # a missing topic is named before a bad offset
            checks.check_read_start(topic, from_offset)
            low, high = self._reader.watermarks(topic)
            checks.check_not_past_end(topic, from_offset, high)
            # Below the first kept offset (retention): start at the first record kept.
            start = max(from_offset, low)
            if limit <= 0 or start >= high:
                return []
            return self._reader.fetch(topic, start, high, limit)

    def latest(self, topic: str) -> dict[str, Record]:
        with self._topic_locked(topic):
            low, high = self._reader.watermarks(topic)
            if high <= low:
                return {}
            return fold_fenced(self._reader.fetch(topic, low, high, high - low))

    def end_offset(self, topic: str) -> int:
        with self._topic_locked(topic):
            return self._reader.watermarks(topic)[1]

    # OrderedLog: consumer groups.

    def committed(self, group: str, topic: str) -> int | None:
        what = f"reading the offset of group {group!r} on {topic}"
        with self._topic_locked(topic), self.reach.attempt(what):
            deadline = time.monotonic() + self.timeouts.request_s
            while True:
                try:
                    (part,) = self._group_client(group).committed(
                        [self._ck.TopicPartition(topic, PARTITION)],
                        timeout=max(0.001, deadline - time.monotonic()),
                    )
                except self._ck.KafkaException as exc:
                    if _coordinator_moving(exc) and self._wait_for_coordinator(deadline):
                        continue
                    raise translate_exception(exc, what) from exc
                if part.error is not None:
                    raise translate(part.error, what)
                offset = int(part.offset)
                return offset if offset >= 0 else None

    def commit(self, group: str, topic: str, offset: int) -> None:
        what = f"committing offset {offset} of group {group!r} on {topic}"
        with self._topic_locked(topic):  # a missing topic is named before a bad offset
            checks.check_commit_start(topic, offset)
            checks.check_not_past_end(topic, offset, self._reader.watermarks(topic)[1])
            with self.reach.attempt(what):
                deadline = time.monotonic() + self.timeouts.request_s
                while True:
                    try:
                        parts = self._group_client(group).commit(
                            offsets=[self._ck.TopicPartition(topic, PARTITION, offset)],
                            asynchronous=False,
                        )
                        break
                    except self._ck.KafkaException as exc:
                        if _coordinator_moving(exc) and self._wait_for_coordinator(deadline):
                            continue
                        raise translate_exception(exc, what) from exc
            for part in parts or []:
                if part.error is not None:
                    raise translate(part.error, what)

    def member(
        self, group: str, topic: str, member_id: str, *, session_timeout_s: float
    ) -> KafkaGroupMember:
        with self._joining(group, [topic], session_timeout_s, self.group_protocol):
            member = KafkaGroupMember(self, group, topic, member_id, session_timeout_s)
            self._members.append(member)
            return member

    def group(
        self, group: str, topics: Sequence[str], member_id: str, *, session_timeout_s: float
    ) -> KafkaShare:
        """Kafka's group protocol assigns ``topics`` (see ``kafka_groups``)."""
        with self._joining(group, topics, session_timeout_s, SHARE_PROTOCOL):
            share = KafkaShare(self, group, topics, member_id, session_timeout_s)
            self._members.append(share)
            return share

    # OrderedLog: maintenance.

    def compact(self, topics: Iterable[str] | None = None) -> list[CompactionStats]:
        """Report only: Kafka's log cleaner compacts and applies retention in the broker."""
        with self._lock:
            self._ensure_open()
            names = list(topics) if topics is not None else sorted(self.control.registered())
            stats = []
            for name in names:
                started = self.clock.monotonic()
                self._reader.require_topic(name)
                low, high = self._reader.watermarks(name)
                took = self.clock.monotonic() - started
                stats.append(CompactionStats(name, high - low, high - low, took))
            log.info("compact() on Kafka changes nothing: the broker does (%d topics)", len(stats))
            return stats

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for member in list(self._members):
                member.close()
            for client in self._group_clients.values():
                try:
                    client.close()
                except (self._ck.KafkaException, RuntimeError) as exc:
                    log.debug("closing a Kafka group client: %s", exc)
            self._group_clients.clear()
            self._reader.close()
            self._writer.close()

    def _wait_for_coordinator(self, deadline: float) -> bool:
        """A moment for the group's coordinator to settle on its new broker, the members
        served meanwhile; False once ``deadline`` has passed."""
        if time.monotonic() >= deadline:
            return False
        self._keep_members_alive()
        time.sleep(COORDINATOR_RETRY_S)  # bounded by the request's deadline
        return True

    # For kafka_member and kafka_groups.

    def _keep_members_alive(self) -> None:
        """Serve every member's group while a write waits on the cluster: the process is
        not stuck, the log is, and a standby would wait on the same log. What the members
        learn meanwhile (a partition lost) is what they would have learnt at their next
        poll; the fence check after the write sees it."""
        for member in list(self._members):
            if member.is_open:
                member.keep_alive()

    def forget_member(self, member: KafkaGroupMember | KafkaShare) -> None:
        with self._lock:
            if member in self._members:
                self._members.remove(member)

    @contextmanager
    def _joining(
        self, group: str, topics: Sequence[str], session_s: float, protocol: GroupProtocol
    ) -> Iterator[None]:
        checks.session_ms(session_s)  # refused like elsewhere, not clamped to 1 s
        with self._lock:
            self._ensure_open()
            for topic in topics:
                self._reader.require_topic(topic)
            self.control.ensure()
            # Best effort: not while no broker answers (it would wait out its timeout).
            if protocol == "consumer" and self.reach.reachable:
                self._admin.set_group_session_timeout(group, session_s)
            yield

    # Internals; callers hold self._lock.

    def _ensure_open(self) -> None:
        if self._closed:
            raise LogError("the Kafka log handle is closed")

    @contextmanager
    def _topic_locked(self, topic: str) -> Iterator[None]:
        """Hold the lock on an open handle, for a topic that exists."""
        with self._lock:
            self._ensure_open()
            self._reader.require_topic(topic)
            yield

    def _group_client(self, group: str) -> Any:
        # A group with live members takes commits only from a member: use ours if any.
        for member in self._members:
            if member.group == group and member.is_open:
                return member.consumer
        client = self._group_clients.get(group)
        if client is None:
            try:
                client = self._ck.Consumer(self.consumer_settings("offsets", {"group.id": group}))
            except self._ck.KafkaException as exc:
                raise translate_exception(exc, f"creating a client for group {group}") from exc
            self._group_clients[group] = client
        return client


# A group's coordinator moving to another broker (the one it was on stopped, killed or
# with its disk failed) or loading the group there: asked again, within the deadline.
_COORDINATOR_MOVING = frozenset(
    {"NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"}
)


def _coordinator_moving(exc: BaseException) -> bool:
    err = exc.args[0] if exc.args and hasattr(exc.args[0], "name") else None
    return err is not None and error_name(err) in _COORDINATOR_MOVING


if TYPE_CHECKING:
    # mypy checks the classes against the interface they implement.
    _log: type[OrderedLog] = KafkaLog
    _member: type[GroupMember] = KafkaGroupMember
