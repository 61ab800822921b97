"""What the Kafka log does while a request waits on a partition leader that does not
answer (a broker stopped, killed and not yet fenced, or with its disk failed), without a
broker: stand-ins for confluent-kafka's producer and consumer.

A write or a watermark read waits in slices and serves the process's group members in
between (``keep_alive``): a single wait of the whole timeout let the lease's
``max.poll.interval.ms`` run out on three real brokers (tests/e2e/test_kafka_broker_faults.py).
Answers that mean the partition's leadership is moving are asked again within the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from pushjobs.clock import SystemClock
from pushjobs.errors import BackendUnavailable, UnknownTopic
from pushjobs.log.kafka.kafka_client import KafkaTimeouts
from pushjobs.log.kafka.kafka_groups import KafkaShare
from pushjobs.log.kafka.kafka_io import Reader, Writer
from pushjobs.log.kafka.kafka_log import KafkaLog
from pushjobs.log.kafka.kafka_member import KafkaGroupMember, confirmed_by_coordinator
from pushjobs.log.kafka.kafka_reach import Reachability

TIMEOUTS = KafkaTimeouts(request_s=5.0, delivery_s=5.0, admin_s=5.0)


class Err:
    def __init__(self, name: str) -> None:
        self._name = name

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return f"stand-in {self._name}"

    def fatal(self) -> bool:
        return False


class KafkaException(Exception):  # confluent-kafka's name
    pass


class Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class Producer:
    """Delivers everything produced once ``flush`` has been called ``slow`` times."""

    slow = 0

    def __init__(self, settings: dict[str, Any]) -> None:
        self.pending: list[Callable[[Any, Any], None]] = []
        self.flushes: list[float] = []
        self.next_offset = 0

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.pending.append(kwargs["on_delivery"])

    def flush(self, timeout: float) -> int:
        self.flushes.append(timeout)
        if len(self.flushes) <= self.slow:
            return len(self.pending)  # still waiting on the partition's leader
        for report in self.pending:
            report(None, Msg(self.next_offset))
            self.next_offset += 1
        self.pending = []
        return 0


class Consumer:
    """Answers a watermark request with each of ``answers`` in turn: an error name to raise,
    or the watermarks."""

    answers: list[str | tuple[int, int]] = []

    def __init__(self, settings: dict[str, Any]) -> None:
        self.timeouts: list[float] = []

    listed: list[bool] = []  # whether each metadata answer lists the topic; then it does

    def list_topics(self, topic: str, timeout: float) -> Any:
        """The topic, its partition 0 led by broker 1; or no such topic (``listed``)."""
        if self.listed and not self.listed.pop(0):
            return SimpleNamespace(topics={})
        partition = SimpleNamespace(leader=1)
        found = SimpleNamespace(error=None, partitions={0: partition})
        return SimpleNamespace(topics={topic: found})

    def get_watermark_offsets(self, part: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.timeouts.append(timeout)
        answer = self.answers.pop(0)
        if isinstance(answer, str):
            if answer.startswith("_TIMED_OUT"):
                # The stand-in's own wait for a leader that does not answer, as long as
                # it was asked to wait: the fault, not a test waiting.
                time.sleep(timeout)  # the fault's time (noqa: not a wait)
            raise KafkaException(Err(answer))
        return answer


def ck() -> Any:
    return SimpleNamespace(
        KafkaException=KafkaException,
        Producer=Producer,
        Consumer=Consumer,
        TopicPartition=lambda topic, partition, offset=0: (topic, partition, offset),
    )


def never_probed(timeout_s: float) -> None:
    raise AssertionError("the cluster answers: no probe")


def writer(keep_alive: Callable[[], None]) -> Writer:
    reach = Reachability(SystemClock(), never_probed)
    return Writer(ck(), dict, TIMEOUTS, SystemClock(), reach, keep_alive=keep_alive)


def test_a_write_waiting_on_its_partition_serves_the_members_until_it_is_durable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Producer, "slow", 4)
    served: list[int] = []
    w = writer(lambda: served.append(1))
    assert w.produce("commands", [("job:1", b"a"), ("job:2", b"b")], 3) == [0, 1]
    assert len(served) == 4  # once between each slice of the wait
    flushes = w._producer.flushes
    assert len(flushes) == 5 and max(flushes) <= 0.2  # never one wait of the whole timeout


def test_a_write_that_goes_through_at_once_serves_nobody() -> None:
    served: list[int] = []
    assert writer(lambda: served.append(1)).produce("commands", [("k", b"v")], 0) == [0]
    assert served == []


def reader(keep_alive: Callable[[], None], answers: list[str | tuple[int, int]]) -> Reader:
    Consumer.answers = list(answers)
    Consumer.listed = []
    return Reader(ck(), {}, TIMEOUTS, SystemClock(), keep_alive=keep_alive)


@pytest.mark.parametrize("waiting", ["_TIMED_OUT", "_TIMED_OUT_QUEUE"])
def test_a_watermark_read_waiting_on_its_leader_serves_the_members_in_between(
    waiting: str,
) -> None:
    served: list[int] = []
    r = reader(lambda: served.append(1), [waiting, waiting, waiting, (2, 9)])
    assert r.watermarks("commands") == (2, 9)
    assert len(served) == 3
    assert max(r._consumer.timeouts) <= 0.2


@pytest.mark.parametrize("moving", ["_DESTROY_BROKER", "KAFKA_STORAGE_ERROR"])
def test_a_leader_going_away_is_asked_again_not_an_outage(moving: str) -> None:
    # A stopped broker's connection torn down once it was fenced; a leader whose disk
    # failed: the partition's next leader answers.
    r = reader(lambda: None, [moving, (0, 4)])
    assert r.watermarks("commands") == (0, 4)


def test_a_leader_that_never_answers_is_an_outage_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("pushjobs.log.kafka.kafka_io.KEEP_ALIVE_S", 0.05)
    served: list[int] = []
    Consumer.answers = ["_TIMED_OUT"] * 100
    r = Reader(
        ck(), {}, KafkaTimeouts(request_s=0.3), SystemClock(), keep_alive=lambda: served.append(1)
    )
    with pytest.raises(BackendUnavailable):
        r.watermarks("commands")
    assert 3 <= len(served) <= 6  # about one per slice of 0.05 s, until the deadline


def test_a_partition_whose_leader_is_not_known_yet_is_asked_again_not_an_outage() -> None:
    # The topic exists (its metadata says so): a server starting beside another that has
    # just created it, or a leader killed and not yet replaced.
    served: list[int] = []
    r = reader(lambda: served.append(1), ["_UNKNOWN_PARTITION", "_UNKNOWN_PARTITION", (1, 3)])
    assert r.watermarks("commands") == (1, 3)
    assert len(served) == 2


def test_a_topic_a_lagging_broker_calls_unknown_a_moment_after_it_was_seen_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Just created on three brokers: the one asked next had not heard of it yet, and the
    # server starting first exited ("topic __pushjobs-topics does not exist").
    r = reader(lambda: None, ["_UNKNOWN_PARTITION", "_UNKNOWN_PARTITION", (0, 2)])
    monkeypatch.setattr(Consumer, "listed", [False, False])
    assert r.watermarks("__pushjobs-topics") == (0, 2)


def test_a_topic_still_unknown_at_the_deadline_is_unknown() -> None:
    r = Reader(ck(), {}, KafkaTimeouts(request_s=0.2), SystemClock())
    Consumer.answers = ["_UNKNOWN_PARTITION"] * 100
    Consumer.listed = [False] * 100
    with pytest.raises(UnknownTopic):
        r.watermarks("gone")


class GroupConsumer:
    """A group member's consumer whose commits meet ``refusals`` first."""

    def __init__(self, refusals: list[str]) -> None:
        self.refusals = refusals
        self.polls: list[float] = []
        self.commits = 0

    def commit(self, offsets: Any, asynchronous: bool) -> list[Any]:
        self.commits += 1
        if self.refusals:
            raise KafkaException(Err(self.refusals.pop(0)))
        return []

    def committed(self, parts: list[Any], timeout: float) -> list[Any]:
        self.commits += 1
        if self.refusals:
            raise KafkaException(Err(self.refusals.pop(0)))
        return [SimpleNamespace(error=None, offset=7)]

    def poll(self, timeout: float) -> None:
        self.polls.append(timeout)
        # The stand-in waits for events as long as asked, as librdkafka does: the
        # fault's time passing, not a test waiting.
        time.sleep(timeout)  # the fault's time (noqa: not a wait)


def owner(request_s: float = 5.0) -> Any:
    return SimpleNamespace(
        timeouts=KafkaTimeouts(request_s=request_s),
        reach=Reachability(SystemClock(), never_probed),
        control=SimpleNamespace(fence_topic="__pushjobs-fence"),
    )


def test_a_stale_member_epoch_is_not_a_fence_the_commit_is_asked_again() -> None:
    # The leader group's coordinator moved (its broker stopped): the new one knows an
    # epoch of the member the member has not heard yet. Taken for a fence, the leader
    # lost its lease to a standby that met the same.
    consumer = GroupConsumer(["STALE_MEMBER_EPOCH", "STALE_MEMBER_EPOCH"])
    assert confirmed_by_coordinator(ck(), consumer, owner(), "leader") is True
    assert consumer.commits == 3 and len(consumer.polls) == 2


def test_a_member_epoch_stale_past_the_deadline_cannot_tell() -> None:
    consumer = GroupConsumer(["STALE_MEMBER_EPOCH"] * 1000)
    assert confirmed_by_coordinator(ck(), consumer, owner(request_s=0.3), "leader") is None


def test_a_fenced_member_is_still_fenced() -> None:
    consumer = GroupConsumer(["FENCED_MEMBER_EPOCH"])
    assert confirmed_by_coordinator(ck(), consumer, owner(), "leader") is False


def kafka_log_with(client: GroupConsumer, request_s: float = 5.0) -> KafkaLog:
    """A ``KafkaLog`` around stand-ins: a reader that knows every topic, one group client."""
    log = KafkaLog.__new__(KafkaLog)
    log._ck = ck()
    log.timeouts = KafkaTimeouts(request_s=request_s)
    log._lock = threading.RLock()
    log._closed = False
    log._members = []
    log._group_clients = {"starts": client}
    log._reader = SimpleNamespace(require_topic=lambda topic: None, watermarks=lambda t: (0, 9))
    log.reach = Reachability(SystemClock(), never_probed)
    return log


@pytest.mark.parametrize(
    "moving", ["NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"]
)
def test_a_coordinator_moving_is_asked_again_for_offsets_not_an_outage(moving: str) -> None:
    # A new leader reading a schedule partition's offsets as the coordinator moved stood
    # by at once, "the ordered log cannot be written: ... Not coordinator".
    client = GroupConsumer([moving, moving])
    assert kafka_log_with(client).committed("starts", "schedules.1") == 7
    client = GroupConsumer([moving])
    kafka_log_with(client).commit("starts", "schedules.1", 3)
    assert client.commits == 2


def test_a_coordinator_that_never_settles_is_an_outage_at_the_deadline() -> None:
    client = GroupConsumer(["NOT_COORDINATOR"] * 1000)
    with pytest.raises(BackendUnavailable):
        kafka_log_with(client, request_s=0.3).committed("starts", "schedules.1")


class ShareConsumer:
    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        pass

    def poll(self, timeout: float) -> None:
        return None

    def commit(self, offsets: Any, asynchronous: bool) -> list[Any]:
        return []

    def consumer_group_metadata(self) -> bytes:
        return b""


def part(topic: str) -> Any:
    return SimpleNamespace(topic=topic, partition=0)


def share_losing(
    monkeypatch: pytest.MonkeyPatch, *, on_read: str | None = None, on_claim: str | None = None
) -> KafkaShare:
    """A share holding schedules.0 and .1 that loses ``on_read`` while it reads the claims,
    or ``on_claim`` while it writes its claim: the callbacks a wait on the cluster serves
    (``KafkaLog._keep_members_alive``), inside the share's own poll."""
    fake_ck = SimpleNamespace(
        KafkaException=KafkaException,
        Consumer=lambda settings: ShareConsumer(),
        TopicPartition=lambda topic, partition, offset=0: (topic, partition, offset),
    )
    monkeypatch.setattr("pushjobs.log.kafka.kafka_groups.load", lambda: (fake_ck, None))
    epochs = iter(range(10, 100))

    def current_epoch(group: str) -> int:
        if on_read is not None and on_read in share._held:
            share._drop([part(on_read)])
        return 0

    def claim(group: str, member_id: str, generation: int) -> int:
        if on_claim is not None and group.endswith(on_claim):
            share._drop([part(on_claim)])
        return next(epochs)

    owner = SimpleNamespace(
        consumer_settings=lambda role, settings: {},
        clock=SystemClock(),
        timeouts=KafkaTimeouts(request_s=1.0),
        reach=Reachability(SystemClock(), never_probed),
        control=SimpleNamespace(
            fence_topic="__pushjobs-fence", current_epoch=current_epoch, claim=claim
        ),
    )
    topics = ["schedules.0", "schedules.1"]
    share = KafkaShare(owner, "schedulers", topics, "server-a", session_timeout_s=2.0)  # type: ignore[arg-type]
    share._take([part(t) for t in topics])
    return share


def test_a_partition_lost_while_the_share_reads_its_claims_is_not_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It raised "Set changed size during iteration" out of the server's loop, and the
    # server exited.
    share = share_losing(monkeypatch, on_read="schedules.1")
    fences = share.poll()
    assert list(fences) == ["schedules.0"]


def test_a_partition_lost_while_its_claim_is_written_is_not_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    share = share_losing(monkeypatch, on_claim="schedules.0")
    fences = share.poll()
    assert list(fences) == ["schedules.1"]
    assert "schedules.0" not in share.epochs


def test_a_lease_lost_while_its_claim_is_written_is_no_epoch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_ck = SimpleNamespace(
        KafkaException=KafkaException,
        Consumer=lambda settings: ShareConsumer(),
        TopicPartition=lambda topic, partition, offset=0: (topic, partition, offset),
    )
    monkeypatch.setattr("pushjobs.log.kafka.kafka_member.load", lambda: (fake_ck, None))

    def claim(group: str, member_id: str, generation: int) -> int:
        member._drop([part("commands")])  # the coordinator gave the partition away
        return 7

    owner = SimpleNamespace(
        consumer_settings=lambda role, settings: {},
        group_protocol="consumer",
        clock=SystemClock(),
        timeouts=KafkaTimeouts(request_s=1.0),
        reach=Reachability(SystemClock(), never_probed),
        control=SimpleNamespace(
            fence_topic="__pushjobs-fence", current_epoch=lambda group: 0, claim=claim
        ),
    )
    member = KafkaGroupMember(owner, "leader", "commands", "server-a", 2.0)  # type: ignore[arg-type]
    member._take([part("commands")])
    assert member.poll() is None
    assert member.epoch is None
