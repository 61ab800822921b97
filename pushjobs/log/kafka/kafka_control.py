"""The Kafka log's control topics: epoch claims (``-fence``) and the topic registry (``-topics``).

Both are compacted topics named ``<internal_prefix>-fence`` and ``<internal_prefix>-topics``,
created on first use and folded incrementally by key: each handle reads only the records
appended since its last look.

Fencing (see ``kafka_member``). Kafka offers no conditional append without transactions,
so the epoch lives in the fence topic. When a group member gains partition 0 of its topic,
it confirms with the coordinator that it is still a member (a synchronous offset commit,
which the broker refuses from an expired member) and appends a claim record keyed by the
group (by ``share_fence_group(group, topic)`` for a group over several topics,
``kafka_groups``, so each of its topics has its own epoch); the claim's offset + 1 is the
new epoch, so epochs strictly increase and no two claims share one. The current epoch of
a group is the one of its latest claim. A fenced append checks, before producing, that
its epoch is still the latest claim and that a member of this handle holding that epoch
still holds the partition, and checks the claim again once the records are durable.
Folding readers (``fold.fold_fenced``) drop a fenced record whose epoch is lower than one
already seen in the topic.

What that guarantees, and the race that remains. A deposed leader whose append starts
after its successor's claim is durable gets ``FencedError`` and writes nothing. An append
that passed the first check but whose records became durable after a successor's claim
raises ``FencedError`` too, after the fact: the records are in the log, but the caller is
told, so it never acts on them (the leader sends commands only after its writes return).
Such a late record is hidden from ``latest`` once the successor has written to that topic;
if it lands between the successor's claim and the successor's first write to the topic,
it stays visible to readers until the successor overwrites its key. The window is the
time between the check and the record reaching the broker, bounded by the delivery
timeout unless the whole process stalls mid-produce. Closing it needs the broker to refuse
the write, i.e. transactions (a transactional producer per leader with the epoch in its
``transactional.id``), which librdkafka's mock cluster does not support for fencing, so
this backend does not use them.

Killed at any line. All state is in the cluster, written by the idempotent producer; the
folds here are caches a new process rebuilds from the topics. A process killed between
confirming its membership and its claim leaves no claim: its successor claims as usual.
Killed after its claim is durable, it leaves an epoch nobody holds, which the next claim
supersedes. Killed between creating a topic and registering it, the topic is unlisted
until ``create_topic`` is called again, which finds it existing and registers it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol

import orjson

from pushjobs.clock import Clock
from pushjobs.errors import FencedError
from pushjobs.log.base import Fence, Record, TopicPolicy
from pushjobs.log.kafka.kafka_admin import TopicAdmin, decode_policy, encode_policy
from pushjobs.log.kafka.kafka_io import Reader, Writer


class Holder(Protocol):
    """A member of this handle, as fenced appends ask it about their fence."""

    def holding(self, fence: Fence) -> bool | None:
        """None if it never claimed ``fence``; else whether it still holds the partition."""
        ...


class ControlTopics:
    """Claims and the registry of one ``KafkaLog``, under the log's lock (which it shares)."""

    def __init__(
        self,
        internal_prefix: str,
        *,
        reader: Reader,
        writer: Writer,
        admin: TopicAdmin,
        clock: Clock,
        lock: threading.RLock,
    ) -> None:
        self.fence_topic = f"{internal_prefix}-fence"
        self.registry_topic = f"{internal_prefix}-topics"
        self._reader = reader
        self._writer = writer
        self._admin = admin
        self._clock = clock
        self._lock = lock
        self._ready = False
        self._fences = _Folded(self.fence_topic)
        self._registry = _Folded(self.registry_topic)

    def ensure(self) -> None:
        """Create the control topics that do not exist yet (once per handle)."""
        with self._lock:
            if not self._ready:
                for name in (self.fence_topic, self.registry_topic):
                    if not self._reader.exists(name):
                        self._admin.create(name, TopicPolicy(compacted=True))
                self._ready = True

    # The registry.

    def registered(self) -> dict[str, TopicPolicy]:
        """Topic name -> the policy ``create_topic`` was given."""
        with self._lock:
            return {
                name: decode_policy(rec.value)
                for name, rec in self._fold(self._registry).items()
                if rec.value is not None
            }

    def register(self, topic: str, policy: TopicPolicy) -> None:
        with self._lock:
            self._append(self.registry_topic, topic, encode_policy(policy))

    # Epoch claims.

    def current_epoch(self, group: str) -> int:
        """The epoch of the group's latest claim (0 if nobody ever claimed it)."""
        with self._lock:
            claim = self._fold(self._fences).get(group)
            return 0 if claim is None else claim.offset + 1

    def claim(self, group: str, member_id: str, generation: int) -> int:
        """Record that ``member_id`` now owns the group's topic; return the new epoch."""
        with self._lock:
            value = orjson.dumps(
                {"member": member_id, "generation": generation, "ts": self._clock.wall_ms()}
            )
            return self._append(self.fence_topic, group, value) + 1

    def check_fence(
        self,
        fence: Fence,
        topic: str,
        members: Iterable[Holder],
        written: list[int] | None = None,
    ) -> None:
        """Raise ``FencedError`` unless ``fence`` is its group's latest claim and the one of
        ``members`` (this handle's) holding that epoch, if any, still holds the partition.

        ``written``: the offsets of records already durable, for the after-the-fact check.
        """
        current = self.current_epoch(fence.group)
        held = [h for h in (m.holding(fence) for m in members) if h is not None]
        problem = None
        if current != fence.epoch:
            problem = f"the current epoch of group {fence.group!r} is {current}"
        elif held and not held[0]:
            problem = "the member that claimed it no longer holds the partition"
        if problem is None:
            return
        if written:
            raise FencedError(
                f"{topic}: records at offsets {written[0]}..{written[-1]} were written with "
                f"epoch {fence.epoch} but {problem}; a successor owns the group"
            )
        raise FencedError(f"{topic}: epoch {fence.epoch} is stale: {problem}")

    # Internals; callers hold the lock.

    def _fold(self, folded: _Folded) -> dict[str, Record]:
        self.ensure()
        low, high = self._reader.watermarks(folded.topic)
        start = max(folded.next_offset, low)
        if high > start:
            for rec in self._reader.fetch(folded.topic, start, high, high - start):
                folded.latest[rec.key] = rec
        folded.next_offset = max(folded.next_offset, high)
        return folded.latest

    def _append(self, topic: str, key: str, value: bytes) -> int:
        self.ensure()
        return self._writer.produce(topic, [(key, value)], 0)[0]


class _Folded:
    """A compacted control topic folded incrementally: the latest record per key."""

    __slots__ = ("latest", "next_offset", "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.next_offset = 0
        self.latest: dict[str, Record] = {}
