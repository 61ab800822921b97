"""A group over several topics on Kafka: Kafka's own group protocol assigns them.

Theory of operation. The member is one confluent-kafka consumer with ``group.id=group``
subscribed to every topic of the group (each a single-partition topic), with the
``classic`` group protocol and the cooperative-sticky assignor, the member's session
timeout, and ``max.poll.interval.ms`` = that timeout (``kafka_member.group_overrides``).
The group's members hand partition 0 of each topic to one member, spread them evenly
over the members (each gets floor or ceil of P/N), and move as few as they can when
members join, leave or miss their session, without taking a partition from one member
before it gave it up (cooperative rebalancing); the rebalance callbacks, which librdkafka
runs only inside ``poll()``, track which topics this member holds. Assigned partitions
are paused: the member exists to hold them, and reading is done by the log's own reader.

Why ``classic`` here when ``member()`` uses KIP-848's ``consumer`` protocol: the
assignment of a KIP-848 group is the broker's, and the only one librdkafka's mock cluster
(2.16) computes is a range assignment per topic, which hands every single-partition
topic to the same member: measured, one of three members got all seven topics and kept
them. The cooperative-sticky assignor spread them 3/2/2 within 4 s on the same mock, and
it is the same on every broker version. The price is the classic protocol's slower
takeover after a member dies (about 2.5 session timeouts, ``kafka_member``).

Epochs, per topic, as ``kafka_member`` does for one: when ``poll()`` finds a topic held
without an epoch, or held under an epoch another claim has superseded, or comes more
than half a session after the previous poll, it confirms with the coordinator that this
consumer is still a member of the current generation (a synchronous commit the broker
refuses from an expired member), serves the callbacks again, and only then claims, in
the fence topic under the key ``share_fence_group(group, topic)``, each held topic that
needs it (``kafka_control``): the claim's offset + 1 is the topic's new epoch. Each topic
has its own claims, so a fenced append is checked against its own topic's latest claim.

Killed at any line: the consumer's membership ends with the broker's session timeout,
and the coordinator gives its topics to the others, who claim them with new epochs; a
claim written just before the kill is superseded by the next one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pushjobs.log.base import Fence, share_fence_group
from pushjobs.log.kafka.kafka_client import load, translate_exception
from pushjobs.log.kafka.kafka_member import (
    PARTITION,
    GroupProtocol,
    RebalanceEvents,
    confirmed_by_coordinator,
    generation_of,
    group_overrides,
    keep_alive,
    leave_group,
    serve_group,
)

if TYPE_CHECKING:
    from pushjobs.log.base import GroupShare
    from pushjobs.log.kafka.kafka_log import KafkaLog

log = logging.getLogger(__name__)

SHARE_PROTOCOL: GroupProtocol = "classic"  # see the module docstring


class KafkaShare(RebalanceEvents):
    """A ``GroupShare`` backed by one confluent-kafka consumer subscribed to every topic."""

    def __init__(
        self,
        owner: KafkaLog,
        group: str,
        topics: Sequence[str],
        member_id: str,
        session_timeout_s: float,
    ) -> None:
        self._ck, _ = load()
        self.group = group
        self.topics = tuple(dict.fromkeys(topics))
        self._member_id = member_id
        self._log = owner
        self.is_open = True
        self._held: set[str] = set()
        self.epochs: dict[str, int] = {}  # held topic -> the epoch this member claimed
        self._session_s = session_timeout_s
        self._last_poll: float | None = None  # monotonic, on the log's clock
        settings = group_overrides(group, SHARE_PROTOCOL, session_timeout_s)
        try:
            self.consumer: Any = self._ck.Consumer(
                owner.consumer_settings(f"member.{member_id}", settings)
            )
            self.consumer.subscribe(
                list(self.topics),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
        except self._ck.KafkaException as exc:
            raise translate_exception(exc, f"joining group {group!r}") from exc

    def __repr__(self) -> str:
        return f"KafkaShare({self.group!r}, {len(self.topics)} topics, {self._member_id!r})"

    @property
    def member_id(self) -> str:
        return self._member_id

    def poll(self) -> dict[str, Fence]:
        """Serve the group's callbacks; the topics this member owns, with their fences.

        Reads the latest claims (one round trip), so it raises ``BackendUnavailable`` when
        the cluster does not answer within the request timeout.
        """
        if not self.is_open:
            return {}
        now = self._log.clock.monotonic()
        paused = self._last_poll is not None and now - self._last_poll > self._session_s / 2
        self._last_poll = now
        self._serve()
        # The callbacks may run again below, inside the log's reads and writes (a wait on
        # the cluster serves the members: ``KafkaLog._keep_members_alive``): what is held
        # is read from a copy here and checked again before it is answered.
        held = sorted(self._held)
        if not held:
            return {}
        current = {t: self._log.control.current_epoch(self._fence_group(t)) for t in held}
        stale = [t for t in held if paused or self.epochs.get(t) != current[t]]
        if stale:
            confirmed = confirmed_by_coordinator(self._ck, self.consumer, self._log, self.group)
            if confirmed is False:
                self.epochs.clear()
                return {}
            if confirmed is None:  # a rebalance in progress: claim once it is over
                return self._fences(t for t in self.epochs if t not in stale)
            self._serve()
            self._claim([t for t in stale if t in self._held], current)
        return self._fences(self.epochs)

    def _fences(self, topics: Iterable[str]) -> dict[str, Fence]:
        # An epoch claimed for a topic lost meanwhile (the claim's own write served the
        # callbacks) is no fence to answer with.
        for topic in [t for t in self.epochs if t not in self._held]:
            del self.epochs[topic]
        return {
            t: Fence(self._fence_group(t), self.epochs[t])
            for t in sorted(topics)
            if t in self.epochs
        }

    def _claim(self, topics: list[str], current: dict[str, int]) -> None:
        generation = generation_of(self._ck, self.consumer)
        for topic in topics:
            if self.epochs.get(topic) == current[topic]:
                continue  # still the owner after a pause: no new claim
            previous = self.epochs.get(topic)
            epoch = self._log.control.claim(self._fence_group(topic), self._member_id, generation)
            self.epochs[topic] = epoch
            log.info(
                "group %s: member %s owns %s with epoch %d (previous claim epoch %d%s)",
                self.group,
                self._member_id,
                topic,
                epoch,
                current[topic],
                ", claimed again after a stale claim" if previous is not None else "",
            )

    def holding(self, fence: Fence) -> bool | None:
        """None if this member never claimed ``fence``; else whether it still holds it."""
        for topic, epoch in self.epochs.items():
            if self._fence_group(topic) == fence.group and epoch == fence.epoch:
                return self.is_open and topic in self._held
        return None

    def close(self) -> None:
        if not self.is_open:
            return
        self.is_open = False
        box, self.consumer = [self.consumer], None
        leave_group(self._ck, box, f"group {self.group} member {self._member_id}")
        self.epochs.clear()
        self._held.clear()
        self._log.forget_member(self)

    def _fence_group(self, topic: str) -> str:
        return share_fence_group(self.group, topic)

    def _serve(self) -> None:
        serve_group(self._ck, self.consumer, self.group, self._member_id, self._session_s)

    def keep_alive(self) -> None:
        """See ``KafkaGroupMember.keep_alive``."""
        keep_alive(self._ck, self.consumer, self.group, self._member_id)

    def _take(self, partitions: list[Any]) -> None:
        self._held.update(self._topics_of(partitions))

    def _drop(self, partitions: list[Any]) -> None:
        for topic in self._topics_of(partitions):
            self._held.discard(topic)
            self.epochs.pop(topic, None)

    def _topics_of(self, partitions: list[Any]) -> set[str]:
        return {p.topic for p in partitions if p.partition == PARTITION and p.topic in self.topics}


if TYPE_CHECKING:
    _share: type[GroupShare] = KafkaShare
