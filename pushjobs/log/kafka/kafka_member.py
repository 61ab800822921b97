"""One member of a consumer group on a single-partition topic, on Kafka (see ``kafka``).

Theory of operation. The member is a confluent-kafka consumer with ``group.id=group``
subscribed to the topic. It owns the topic while the coordinator assigns it partition 0;
the assignment is tracked from the rebalance callbacks, which librdkafka runs only inside
``poll()``. Assigned partitions are paused at once: the member exists to hold the
partition, and reading is done by the log's own reader.

Ownership raises the fencing epoch. On the first ``poll()`` that finds partition 0
assigned, the member (1) confirms with the coordinator that it is still a member of the
group's current generation, by a synchronous offset commit into the fence topic, which the
broker refuses from an expired member; then (2) appends a claim to the fence topic; the
claim's offset + 1 is its epoch. Each later ``poll()`` compares its epoch with the group's
latest claim: if another member claimed while this one still holds the partition, either
this member is stale (the coordinator refuses its confirmation and ``poll()`` answers
None) or the other claim came from a stale member, and this member claims again.

Group protocol, measured on librdkafka 2.16's mock cluster with a 6 s session timeout:
after a SIGKILL of the owner, the KIP-848 ``consumer`` protocol hands the partition (and
a new epoch) to the standby in 6.0-7.0 s; the ``classic`` protocol takes 10.9 s for a bare
client and 15 s as configured here (the mock waits another session timeout minus 1 s for
members to rejoin), and an eager classic rebalance leaves the group without an owner for
~4.5 s whenever a member joins. Hence ``consumer`` by default, and cooperative-sticky
assignment for ``classic``. With ``consumer`` the broker owns the session timeout
(``group.consumer.session.timeout.ms``, or a per-group override on Kafka 4, which
``member()`` tries to set); with ``classic`` the member's ``session_timeout_s`` is sent.

Either way ``max.poll.interval.ms`` is the session timeout, so a member whose process is
alive but no longer calls ``poll()`` leaves the group after that long, as the interface
requires, instead of being kept alive by librdkafka's background heartbeats.

A poll that comes more than half a session after the previous one (the process was
stopped, or busy) does not trust what the member last knew: the coordinator may have
expired it and given the partition away, and the claim it would compare with may not be
written yet. It confirms its membership with the coordinator first, then serves the
callbacks again (a loss the confirmation's round trip let arrive), before it answers with
its epoch. Without this, a server stopped just past the broker's session resumed as
leader for up to a lease, beside its successor.

Leaving (``close``) never goes through librdkafka's consumer close, which froze the whole
process when it served an assignment that had arrived since the last poll; ``kafka_close``
says why and how the member leaves instead.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any, Literal

from pushjobs.errors import BackendUnavailable, FencedError, LogError
from pushjobs.log.base import Fence, NamedMember
from pushjobs.log.kafka.kafka_client import error_name, load, translate, translate_exception
from pushjobs.log.kafka.kafka_close import destroy_detached, drain_and_unsubscribe

if TYPE_CHECKING:
    from pushjobs.log.kafka.kafka_log import KafkaLog

log = logging.getLogger(__name__)

GroupProtocol = Literal["consumer", "classic"]
PARTITION = 0
STALE_RETRY_S = 0.1  # between commits that met a stale member epoch
_GROUP_METADATA_MAGIC = b"CGMDv2:"


def group_overrides(
    group: str, protocol: GroupProtocol, session_timeout_s: float
) -> dict[str, str | int]:
    """The consumer settings of a group member (see the module docstring)."""
    session_ms = max(1000, round(session_timeout_s * 1000))
    overrides: dict[str, str | int] = {
        "group.id": group,
        "group.protocol": protocol,
        "max.poll.interval.ms": session_ms,
    }
    if protocol == "classic":
        overrides.update(
            {
                "session.timeout.ms": session_ms,
                "heartbeat.interval.ms": max(100, session_ms // 10),
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
    return overrides


def confirmed_by_coordinator(ck: Any, consumer: Any, owner: KafkaLog, group: str) -> bool | None:
    """Is ``consumer`` still a member of ``group``'s current generation? None: cannot tell
    while a rebalance is in progress (the classic protocol refuses commits meanwhile), or
    while the coordinator says the member's epoch is stale past the request timeout.

    A synchronous offset commit into the fence topic, which the broker refuses from an
    expired member.

    ``STALE_MEMBER_EPOCH`` is not an expiry (KIP-848): the coordinator knows a newer epoch
    of this member than the member has heard, as after the group's coordinator moved to
    another broker (its first broker stopped, or killed). The member's next heartbeat
    brings the epoch, so the commit is asked again meanwhile, the group served between
    tries. Taken for a fence, it cost the leader its lease on three brokers, the standby
    hearing the same.
    """
    what = f"confirming membership of group {group!r}"
    deadline = time.monotonic() + owner.timeouts.request_s
    with owner.reach.attempt(what):
        fence = ck.TopicPartition(owner.control.fence_topic, PARTITION, 0)
        while True:
            try:
                parts = consumer.commit(offsets=[fence], asynchronous=False)
            except ck.KafkaException as exc:
                name = error_name(exc.args[0]) if exc.args else "UNKNOWN"
                if name == "REBALANCE_IN_PROGRESS":
                    return None
                if name == "STALE_MEMBER_EPOCH":
                    if time.monotonic() >= deadline:
                        return None
                    consumer.poll(STALE_RETRY_S)  # its heartbeats' answers, its callbacks
                    continue
                err = translate_exception(exc, what)
                if isinstance(err, FencedError):
                    log.info("group %s: %s", group, err)
                    return False
                raise err from exc
            for part in parts or []:
                if part.error is not None:
                    err = translate(part.error, what)
                    if isinstance(err, FencedError):
                        return False
                    raise err
            return True


def generation_of(ck: Any, consumer: Any) -> int:
    """The group generation (member epoch on KIP-848), recorded in claims for audits."""
    try:
        raw = consumer.consumer_group_metadata()
    except (ck.KafkaException, RuntimeError):
        return -1
    if not isinstance(raw, bytes) or not raw.startswith(_GROUP_METADATA_MAGIC):
        return -1
    start = len(_GROUP_METADATA_MAGIC)
    # librdkafka copies the int32 in host byte order.
    return int.from_bytes(raw[start : start + 4], sys.byteorder, signed=True)


def serve_group(
    ck: Any, consumer: Any, group: str, member_id: str, session_s: float | None = None
) -> None:
    """Run the rebalance callbacks and take the group's error events, if any.

    A broker that refuses the member's session timeout (the classic protocol sends it,
    and the broker's ``group.min.session.timeout.ms``, 6 s by default, bounds it) would
    be refused again at every rejoin, for ever: that is raised as a ``LogError`` that
    says what to change, not logged as one more event.
    """
    try:
        event = consumer.poll(0)
    except ck.KafkaException as exc:
        raise translate_exception(exc, f"polling group {group!r}") from exc
    if event is None or event.error() is None:
        return
    if error_name(event.error()) == "INVALID_SESSION_TIMEOUT":
        asked = f" of {session_s:g} s" if session_s is not None else ""
        raise LogError(
            f"group {group!r}: the brokers refuse a session timeout{asked} "
            f"({event.error().str()}): lower their group.min.session.timeout.ms "
            "(classic group protocol, 6 s by default) or raise [server] leader_session_s"
        )
    # e.g. the member left after max.poll.interval.ms; librdkafka rejoins by itself.
    log.info("group %s member %s: %s", group, member_id, event.error().str())


def keep_alive(ck: Any, consumer: Any, group: str, member_id: str) -> None:
    """``serve_group`` for a member served in the middle of a write: what goes wrong is
    left for the member's next poll to raise, not the write's to report."""
    try:
        serve_group(ck, consumer, group, member_id)
    except LogError as exc:
        log.debug("group %s member %s, served during a write: %s", group, member_id, exc)


def leave_group(ck: Any, box: list[Any], name: str) -> None:
    """Leave the group without librdkafka's close, which can freeze the whole process
    (``kafka_close``): unsubscribe and serve what follows while the group is alive, then
    destroy the consumer ``box`` holds (its only reference) on a thread of its own."""
    drain_and_unsubscribe(ck, box[0], name)
    destroy_detached(box, name)


class RebalanceEvents:
    """librdkafka's rebalance callbacks, run inside ``consumer.poll()`` on the polling
    thread: what is assigned is taken paused (``_take``), what is revoked or lost is
    dropped (``_drop``)."""

    group: str
    _member_id: str

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        consumer.incremental_assign(partitions)
        consumer.pause(partitions)
        self._take(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self._drop(partitions)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        log.info("group %s member %s lost its assignment", self.group, self._member_id)
        self._drop(partitions)

    def _take(self, partitions: list[Any]) -> None:
        raise NotImplementedError

    def _drop(self, partitions: list[Any]) -> None:
        raise NotImplementedError


class KafkaGroupMember(RebalanceEvents, NamedMember):
    """A ``GroupMember`` backed by a subscribed confluent-kafka consumer."""

    def __init__(
        self, owner: KafkaLog, group: str, topic: str, member_id: str, session_timeout_s: float
    ) -> None:
        self._ck, _ = load()
        super().__init__(group, topic, member_id)
        self._log = owner
        self.epoch: int | None = None
        self.is_open = True
        self._held: set[int] = set()
        self._session_s = session_timeout_s
        self._last_poll: float | None = None  # monotonic, on the log's clock
        try:
            self.consumer: Any = self._ck.Consumer(
                owner.consumer_settings(
                    f"member.{member_id}",
                    group_overrides(group, owner.group_protocol, session_timeout_s),
                )
            )
            self.consumer.subscribe(
                [topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
        except self._ck.KafkaException as exc:
            raise translate_exception(exc, f"joining group {group!r} on {topic}") from exc

    def poll(self) -> int | None:
        """Serve the group's callbacks; the epoch if this member owns the topic, else None.

        Each call reads the group's latest claim (one round trip), so it raises
        ``BackendUnavailable`` when the cluster does not answer within the request timeout.
        """
        if not self.is_open:
            return None
        now = self._log.clock.monotonic()
        paused = self._last_poll is not None and now - self._last_poll > self._session_s / 2
        self._last_poll = now
        self._serve()
        if not self.holds_partition():
            self.epoch = None
            return None
        current = self._log.control.current_epoch(self.group)
        if self.epoch is not None and current == self.epoch and not paused:
            return self.epoch
        if not self._confirmed_by_coordinator():
            self.epoch = None
            return None
        self._serve()
        if not self.holds_partition():
            self.epoch = None
            return None
        if self.epoch is not None and current == self.epoch:
            return self.epoch  # still the owner after a pause: no new claim
        previous = self.epoch
        self.epoch = self._log.control.claim(self.group, self._member_id, self._generation())
        if not self.holds_partition():
            # Lost while the claim was written (its wait serves the callbacks): a claim
            # of a partition no longer held is no epoch to lead with.
            self.epoch = None
            return None
        log.info(
            "group %s: member %s owns %s with epoch %d (previous claim epoch %d%s)",
            self.group,
            self._member_id,
            self.topic,
            self.epoch,
            current,
            ", claimed again after a stale claim" if previous is not None else "",
        )
        return self.epoch

    def _serve(self) -> None:
        serve_group(self._ck, self.consumer, self.group, self._member_id)

    def keep_alive(self) -> None:
        """Serve the group's callbacks, as ``poll`` does, while the process waits on the
        log: ``max.poll.interval.ms`` counts from here too. Not a poll: the next ``poll``
        after a long wait still confirms with the coordinator (``_last_poll``)."""
        keep_alive(self._ck, self.consumer, self.group, self._member_id)

    def holds_partition(self) -> bool:
        return self.is_open and PARTITION in self._held

    def close(self) -> None:
        if not self.is_open:
            return
        self.is_open = False
        self.epoch = None
        box, self.consumer = [self.consumer], None
        leave_group(self._ck, box, f"group {self.group} member {self._member_id}")
        self._held.clear()
        self._log.forget_member(self)

    def holding(self, fence: Fence) -> bool | None:
        """None if this member never held ``fence``; else whether it still holds the topic."""
        if fence.group != self.group or fence.epoch != self.epoch:
            return None
        return self.holds_partition()

    def _confirmed_by_coordinator(self) -> bool:
        confirmed = confirmed_by_coordinator(self._ck, self.consumer, self._log, self.group)
        if confirmed is None:
            raise BackendUnavailable(
                f"confirming membership of group {self.group!r}: a rebalance is in progress"
            )
        return confirmed

    def _generation(self) -> int:
        return generation_of(self._ck, self.consumer)

    def _take(self, partitions: list[Any]) -> None:
        self._held.update(p.partition for p in partitions if p.topic == self.topic)

    def _drop(self, partitions: list[Any]) -> None:
        self._held.difference_update(p.partition for p in partitions if p.topic == self.topic)
        if PARTITION not in self._held:
            self.epoch = None
