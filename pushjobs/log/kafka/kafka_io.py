"""The Kafka log's data plane: a reader for metadata and bounded scans, a durable writer.

Both work on partition 0 only; that is what makes every topic a single-partition log. The
reader is one consumer that never joins a group: each scan assigns (topic, 0, offset),
consumes up to a high watermark read just before, and unassigns. The writer is one
idempotent producer; a write returns the offsets from the delivery reports. Neither is
safe for concurrent use: the KafkaLog serialises calls under its lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from pushjobs.clock import Clock
from pushjobs.errors import BackendUnavailable, UnknownTopic
from pushjobs.log.base import Record
from pushjobs.log.kafka.kafka_client import (
    KafkaTimeouts,
    error_name,
    translate,
    translate_exception,
)
from pushjobs.log.kafka.kafka_reach import Reachability

log = logging.getLogger(__name__)

PARTITION = 0
EPOCH_HEADER = "pushjobs.epoch"
READ_CHUNK = 1000
# While a write waits, the process's group members are served this often: well within the
# shortest session a group may have (1 s).
KEEP_ALIVE_S = 0.2


class Reader:
    """Topic existence, watermarks and scans of partition 0, through one unassigned consumer."""

    def __init__(
        self,
        ck: ModuleType,
        settings: dict[str, Any],
        timeouts: KafkaTimeouts,
        clock: Clock,
        *,
        keep_alive: Callable[[], None] = lambda: None,
    ) -> None:
        """``keep_alive``: as the writer's, while a request waits on a partition's leader."""
        self._ck = ck
        self._timeouts = timeouts
        self._keep_alive = keep_alive
        self._known: set[str] = set()
        try:
            self._consumer = ck.Consumer(settings)
        except ck.KafkaException as exc:
            raise translate_exception(exc, "creating the Kafka reader") from exc
        # Shared with the writer and the group members: one cluster, one verdict.
        self.reach = Reachability(clock, self.probe)

    def probe(self, timeout_s: float) -> None:
        """Return if the cluster answers a metadata request within ``timeout_s``."""
        try:
            self._consumer.list_topics(timeout=timeout_s)
        except self._ck.KafkaException as exc:
            raise translate_exception(exc, "asking the cluster for its metadata") from exc

    def require_topic(self, topic: str) -> None:
        """Return if the topic exists (has a partition 0), else raise ``UnknownTopic``."""
        if topic in self._known:
            return
        with self.reach.attempt(f"looking up topic {topic}"):
            self._require_topic(topic)

    def _require_topic(self, topic: str) -> None:
        deadline = time.monotonic() + self._timeouts.request_s
        while True:
            found = self._metadata(topic)
            if found is not None and found.error is None and PARTITION in found.partitions:
                self._known.add(topic)
                return
            err = None if found is None else found.error
            if err is None or error_name(err) == "UNKNOWN_TOPIC_OR_PART":
                raise UnknownTopic(f"topic {topic} does not exist")
            if time.monotonic() >= deadline:
                raise translate(err, f"looking up topic {topic}")
            # A topic just created may have no leader yet; metadata catches up shortly.
            time.sleep(0.05)

    def await_created(self, topic: str, timeout_s: float) -> None:
        """Wait until the metadata shows a topic the cluster just said it created, with a
        leader for partition 0; raise ``BackendUnavailable`` if it does not in time.

        A real cluster acknowledges CreateTopics once its controller has the topic; the
        brokers learn of it a moment later, and until then they answer "unknown topic".
        """
        deadline = time.monotonic() + timeout_s
        while True:
            found = self._metadata(topic)
            if found is not None and found.error is None:
                part = found.partitions.get(PARTITION)
                if part is not None and part.leader >= 0:
                    self._known.add(topic)
                    return
            if time.monotonic() >= deadline:
                raise BackendUnavailable(
                    f"topic {topic} was created but no broker serves it after {timeout_s:g} s"
                )
            time.sleep(0.02)  # metadata propagates from the controller within milliseconds

    def exists(self, topic: str) -> bool:
        try:
            self.require_topic(topic)
        except UnknownTopic:
            return False
        return True

    def partitions(self, topic: str) -> list[int]:
        found = self._metadata(topic)
        return sorted(found.partitions) if found is not None and found.error is None else []

    def watermarks(self, topic: str) -> tuple[int, int]:
        """(first offset still kept, offset of the next record) of partition 0."""
        what = f"reading the offsets of {topic}"
        with self.reach.attempt(what):
            return self._watermarks(topic, what)

    def _watermarks(self, topic: str, what: str) -> tuple[int, int]:
        deadline = time.monotonic() + self._timeouts.request_s
        while True:
            try:
                # In slices, the members kept alive in between (``Writer._flush`` says
                # why): a stopped broker leading the partition answers nothing until the
                # controller fences it and the request times out.
                marks = self._consumer.get_watermark_offsets(
                    self._ck.TopicPartition(topic, PARTITION),
                    timeout=max(0.001, min(KEEP_ALIVE_S, deadline - time.monotonic())),
                    cached=False,
                )
            except self._ck.KafkaException as exc:
                if _timed_out(exc) and time.monotonic() < deadline:
                    self._keep_alive()
                    continue
                if _moving_leader(exc) and time.monotonic() < deadline:
                    # librdkafka does not retry a ListOffsets that met a partition whose
                    # leadership is moving (a topic just created, a broker gone): the
                    # next metadata names the leader, so ask again shortly.
                    time.sleep(0.05)
                    continue
                err = translate_exception(exc, what)
                if isinstance(err, UnknownTopic):
                    # librdkafka says "unknown partition" when it merely knows no leader
                    # for it, e.g. with the brokers down: ask the cluster whether the topic
                    # still exists, which raises the right error.
                    self._known.discard(topic)
                    try:
                        self.require_topic(topic)
                    except UnknownTopic:
                        if time.monotonic() >= deadline:
                            raise
                        # It was there a moment ago (the caller found it, or created
                        # it): a broker whose metadata lags the controller's says
                        # otherwise for a moment. A server starting first on three
                        # brokers exited on it ("topic ... does not exist").
                        self._keep_alive()
                        time.sleep(0.05)
                        continue
                    if time.monotonic() < deadline:
                        # It exists, and its partition has no leader this client knows
                        # yet (a topic another server just created, a leader killed and
                        # not yet replaced): asked again, as for a moving leader. It was
                        # an outage at once, the first thing a server starting beside
                        # another said on three brokers.
                        self._keep_alive()
                        time.sleep(0.05)
                        continue
                    err = BackendUnavailable(f"{what}: no partition leader known ({exc})")
                raise err from exc
            if marks is None:
                raise BackendUnavailable(f"{what}: no answer within {self._timeouts.request_s} s")
            return int(marks[0]), int(marks[1])

    def fetch(self, topic: str, start: int, high: int, limit: int) -> list[Record]:
        """Up to ``limit`` records from offset ``start`` (kept) to ``high`` (exclusive)."""
        what = f"reading {topic} from offset {start}"
        with self.reach.attempt(what):
            return self._fetch(topic, start, high, limit, what)

    def _fetch(self, topic: str, start: int, high: int, limit: int, what: str) -> list[Record]:
        part = self._ck.TopicPartition(topic, PARTITION, start)
        out: list[Record] = []
        try:
            self._consumer.assign([part])
            stall_deadline = time.monotonic() + self._timeouts.request_s
            after = start  # offset after the last record seen
            while len(out) < limit:
                # consume() waits its whole timeout for num_messages: never ask for more
                # than the range can hold, or every scan of a short range costs 0.1 s.
                wanted = min(limit - len(out), READ_CHUNK, high - after)
                batch = self._consumer.consume(num_messages=max(1, wanted), timeout=0.1)
                for msg in batch:
                    if msg.error() is not None:
                        raise translate(msg.error(), what)
                    if msg.offset() >= high:
                        return out
                    out.append(to_record(msg))
                    after = msg.offset() + 1
                    if msg.offset() >= high - 1 or len(out) >= limit:
                        return out
                if batch:
                    stall_deadline = time.monotonic() + self._timeouts.request_s
                    continue
                self._keep_alive()  # a stall: the partition's leader may not answer
                # Offsets may end in a gap (compacted away, transaction markers): the
                # position, not the last record, says the scan is complete.
                if self._consumer.position([part])[0].offset >= high:
                    return out
                if time.monotonic() >= stall_deadline:
                    raise BackendUnavailable(
                        f"{what}: no records for {self._timeouts.request_s} s "
                        f"(got {len(out)}, expected up to offset {high})"
                    )
            return out
        except self._ck.KafkaException as exc:
            raise translate_exception(exc, what) from exc
        finally:
            try:
                self._consumer.unassign()
            except self._ck.KafkaException as exc:
                log.debug("unassigning the reader: %s", exc)

    def close(self) -> None:
        try:
            self._consumer.close()
        except (self._ck.KafkaException, RuntimeError) as exc:
            log.debug("closing the Kafka reader: %s", exc)

    def _metadata(self, topic: str) -> Any:
        try:
            meta = self._consumer.list_topics(topic, timeout=self._timeouts.request_s)
        except self._ck.KafkaException as exc:
            raise translate_exception(exc, f"looking up topic {topic}") from exc
        return meta.topics.get(topic)


class Writer:
    """The idempotent producer: produce, flush, and offsets from the delivery reports."""

    def __init__(
        self,
        ck: ModuleType,
        settings: Callable[[], dict[str, Any]],
        timeouts: KafkaTimeouts,
        clock: Clock,
        reach: Reachability,
        *,
        keep_alive: Callable[[], None] = lambda: None,
    ) -> None:
        """``keep_alive`` is called every ``KEEP_ALIVE_S`` while a write waits for the
        cluster (see ``_flush``)."""
        self._ck = ck
        self._reach = reach
        self._keep_alive = keep_alive
        self._settings = settings
        self._timeouts = timeouts
        self._clock = clock
        self._producer = self._new_producer()

    def _new_producer(self) -> Any:
        try:
            return self._ck.Producer(self._settings())
        except self._ck.KafkaException as exc:
            raise translate_exception(exc, "creating the Kafka producer") from exc

    def produce(
        self, topic: str, records: Sequence[tuple[str, bytes | None]], epoch: int
    ) -> list[int]:
        """Append to partition 0 and return the offsets once every record is durable."""
        what = f"appending {len(records)} record(s) to {topic}"
        with self._reach.attempt(what):
            return self._produce(topic, records, epoch, what)

    def _produce(
        self, topic: str, records: Sequence[tuple[str, bytes | None]], epoch: int, what: str
    ) -> list[int]:
        results: list[Any] = [None] * len(records)

        def report(index: int) -> Callable[[Any, Any], None]:
            def on_delivery(err: Any, msg: Any) -> None:
                results[index] = err if err is not None else int(msg.offset())

            return on_delivery

        headers = [(EPOCH_HEADER, str(epoch).encode())] if epoch else None
        timestamp_ms = self._clock.wall_ms()
        deadline = time.monotonic() + self._timeouts.delivery_s + self._timeouts.request_s
        for index, (key, value) in enumerate(records):
            while True:
                try:
                    self._producer.produce(
                        topic,
                        value=value,
                        key=key.encode(),
                        partition=PARTITION,
                        timestamp=timestamp_ms,
                        headers=headers,
                        on_delivery=report(index),
                    )
                    break
                except BufferError:
                    # The local queue is full: serve delivery reports to make room.
                    if time.monotonic() >= deadline:
                        raise BackendUnavailable(f"{what}: producer queue full") from None
                    self._producer.poll(0.05)
                except self._ck.KafkaException as exc:
                    raise translate_exception(exc, what) from exc
        left = self._flush(deadline)
        if left:
            # message.timeout.ms should have failed them by now; never let them linger
            # and land after we reported a failure.
            self._producer.purge(in_queue=True, in_flight=False)
            self._producer.flush(0)
            raise BackendUnavailable(f"{what}: {left} record(s) not confirmed in time")
        offsets: list[int] = []
        for result in results:
            if not isinstance(result, int):
                if result is not None and result.fatal():
                    # An idempotent producer that hit a fatal error refuses all further
                    # work; the next append gets a fresh one (a new producer id).
                    self._producer = self._new_producer()
                raise translate(result, what)
            offsets.append(result)
        return offsets

    def _flush(self, deadline: float) -> int:
        """Wait for the delivery reports until ``deadline``; the records still unreported.

        In slices, calling ``keep_alive`` between them: a write waits as long as a
        partition has no leader that answers (a broker stopped, or killed and not yet
        fenced by the controller: ``broker.session.timeout.ms``, 9 s by default), and the
        process's group members would otherwise miss their ``max.poll.interval.ms`` (the
        lease's session) and hand the lease to a standby that waits on the same log.
        """
        while True:
            left = int(
                self._producer.flush(min(KEEP_ALIVE_S, max(0.0, deadline - time.monotonic())))
            )
            if not left or time.monotonic() >= deadline:
                return left
            self._keep_alive()

    def close(self) -> None:
        left = self._producer.flush(self._timeouts.delivery_s)
        if left:
            log.warning("closing the Kafka producer with %d undelivered records", left)


# Answers of a partition whose leadership is moving: retried, not the cluster's absence.
_MOVING_LEADER = frozenset(
    {
        "NOT_LEADER_FOR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "_LEADER_NOT_AVAILABLE",
        "UNKNOWN_LEADER_EPOCH",
        "FENCED_LEADER_EPOCH",
        "OFFSET_NOT_AVAILABLE",
        "REPLICA_NOT_AVAILABLE",
        # A request left on a broker connection librdkafka tore down (a stopped broker
        # the controller fenced, its partitions led elsewhere): asked again, it goes to
        # the partition's new leader.
        "_DESTROY_BROKER",
        # The leader's log directory failed (its disk full): the controller moves the
        # partition to a replica in sync, as Kafka's own clients expect.
        "KAFKA_STORAGE_ERROR",
    }
)


def _timed_out(exc: BaseException) -> bool:
    err = exc.args[0] if exc.args and hasattr(exc.args[0], "name") else None
    # _TIMED_OUT_QUEUE: the slice ended before the request left librdkafka's queue for a
    # broker that does not answer (killed, not yet fenced): the slice's own timeout.
    timed_out = {"_TIMED_OUT", "_TIMED_OUT_QUEUE", "REQUEST_TIMED_OUT"}
    return err is not None and error_name(err) in timed_out


def _moving_leader(exc: BaseException) -> bool:
    err = exc.args[0] if exc.args and hasattr(exc.args[0], "name") else None
    return err is not None and error_name(err) in _MOVING_LEADER


def to_record(msg: Any) -> Record:
    epoch = 0
    for name, raw in msg.headers() or ():
        if name == EPOCH_HEADER and raw is not None:
            epoch = int(raw)
    key = msg.key()
    return Record(
        topic=str(msg.topic()),
        offset=int(msg.offset()),
        key=key.decode() if key is not None else "",
        value=msg.value(),
        timestamp_ms=int(msg.timestamp()[1]),
        epoch=epoch,
    )
