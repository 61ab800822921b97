"""What only a real Kafka broker shows of the Kafka log: the conformance suite covers the
contract (``kafka-broker`` param); these cover what librdkafka's mock never did.

- topics get their policy and room for the largest record the log accepts, and groups
  the session they ask for (the mock ignored both);
- the broker's log cleaner compacts a topic behind the log's back: offsets and ``latest``
  do not change, superseded records and tombstones go;
- time retention drops records by their timestamps, on the broker's clock;
- everything the log promised survives a broker killed with SIGKILL;
- a group session the brokers refuse is an error that says what to change.

The cleaner and retention act in the broker's own time, and the cleaner never touches the
active segment: these tests set small segment and cleaner settings on their topics
(``speed_up``), keep appending so segments roll, and wait for the broker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from pushjobs.clock import FakeClock, SystemClock
from pushjobs.errors import LogError
from pushjobs.log.base import DEFAULT_MAX_VALUE_BYTES, Fence, TopicPolicy
from pushjobs.log.kafka.kafka_log import FRAMING_BYTES
from pushjobs.testbed.kafkabroker import KafkaCluster
from tests.kafka_broker import broker_or_skip, broker_unavailable, skip_or_fail
from tests.log.broker_support import BrokerLogs, Namespaced
from tests.support import wait_until

pytestmark = pytest.mark.kafka

SESSION_S = 2.0
CLEANER_WAIT_S = 30.0


@pytest.fixture
def logs() -> BrokerLogs:
    return BrokerLogs(broker_or_skip())


@pytest.fixture
def handles(logs: BrokerLogs) -> Iterator[list[Namespaced]]:
    opened: list[Namespaced] = []
    yield opened
    for handle in opened:
        handle.close()


def _open(logs: BrokerLogs, handles: list[Namespaced], **kwargs) -> Namespaced:
    handle = logs.open_log(**kwargs)
    handles.append(handle)
    return handle


def _admin(bootstrap: str):
    import confluent_kafka.admin

    return confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})


def describe(bootstrap: str, kind: str, name: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(getattr(ResourceType, kind), name)
    admin = _admin(bootstrap)  # held until the answer: a dropped client cancels its requests
    (future,) = admin.describe_configs([resource]).values()
    return {k: v.value for k, v in future.result(timeout=10).items()}


def speed_up(bootstrap: str, topic: str, **settings: str) -> None:
    """Topic settings that let the broker clean or expire within a test (names with ``_``
    for ``.``): a segment rolls at the first append 100 ms after it began, the cleaner
    takes any dirt, and tombstones may go 100 ms after they were first cleaned."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    wanted = {
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100",
        **{k.replace("_", "."): v for k, v in settings.items()},
    }
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in wanted.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = _admin(bootstrap)
    (future,) = admin.incremental_alter_configs([resource]).values()
    future.result(timeout=10)


def test_topics_get_their_policy_and_room_for_the_largest_record(logs, handles):
    log = _open(logs, handles)
    log.create_topic("control", TopicPolicy(compacted=True, retention_ms=60_000))
    log.create_topic("events", TopicPolicy(retention_bytes=1_000_000))
    control = describe(logs.bootstrap, "TOPIC", logs.namespace + "control")
    assert control["cleanup.policy"] == "compact,delete"
    assert control["retention.ms"] == "60000"
    assert control["max.message.bytes"] == str(DEFAULT_MAX_VALUE_BYTES + FRAMING_BYTES)
    events = describe(logs.bootstrap, "TOPIC", logs.namespace + "events")
    assert (events["cleanup.policy"], events["retention.bytes"]) == ("delete", "1000000")

    # A stock broker refused this one (1 MiB and 12 bytes a batch at most).
    largest = bytes(range(256)) * (DEFAULT_MAX_VALUE_BYTES // 256)
    assert log.append("control", "server:a", largest) == 0
    assert log.read("control")[0].value == largest


def test_a_group_gets_the_session_it_asks_for_and_a_heartbeat_to_match(logs, handles):
    log = _open(logs, handles)
    log.create_topic("commands", TopicPolicy(compacted=True))
    member = log.member("leaders", "commands", "a", session_timeout_s=SESSION_S)
    assert wait_until(member.poll, 10)
    group = describe(logs.bootstrap, "GROUP", logs.namespace + "leaders")
    # The broker refuses a session not longer than the heartbeat interval (5 s by default):
    # the session alone was never set.
    assert group["consumer.session.timeout.ms"] == "2000"
    assert group["consumer.heartbeat.interval.ms"] == "400"


def test_the_cleaner_keeps_the_latest_record_per_key_and_drops_tombstones(logs, handles):
    log = _open(logs, handles, clock=SystemClock())
    log.create_topic("jobs", TopicPolicy(compacted=True))
    speed_up(logs.bootstrap, logs.namespace + "jobs")
    log.append_batch(
        "jobs", [("a", b"1"), ("b", b"1"), ("a", b"2"), ("c", b"1"), ("b", None), ("a", b"3")]
    )

    def latest() -> dict[str, tuple[int, bytes | None]]:
        return {k: (r.offset, r.value) for k, r in log.latest("jobs").items() if k != "roll"}

    before = latest()
    assert before == {"a": (5, b"3"), "c": (3, b"1")}

    def cleaned(wanted: list[tuple[int, str]]) -> bool:
        # Appending rolls the segment the cleaner may then take (never the active one).
        log.append("jobs", "roll", b"")
        rows = [(r.offset, r.key) for r in log.read("jobs") if r.key != "roll"]
        return rows == wanted

    # Superseded records go first; the tombstone stays a while, for readers to see it.
    wait_until(lambda: cleaned([(3, "c"), (4, "b"), (5, "a")]), CLEANER_WAIT_S, step_s=0.2)
    assert latest() == before
    # Then the tombstone itself, after delete.retention.ms.
    wait_until(lambda: cleaned([(3, "c"), (5, "a")]), CLEANER_WAIT_S, step_s=0.2)
    assert latest() == before
    end = log.end_offset("jobs")
    assert log.append("jobs", "d", b"1") == end  # never an offset handed out twice


def test_time_retention_drops_records_older_than_it_on_the_brokers_clock(logs, handles):
    now_ms = time.time_ns() // 1_000_000
    old = _open(logs, handles, clock=FakeClock(wall_ms=now_ms - 120_000))  # 2 min ago
    young = _open(logs, handles, clock=SystemClock())
    old.create_topic("events", TopicPolicy(retention_ms=60_000))
    speed_up(logs.bootstrap, logs.namespace + "events")
    old.append_batch("events", [("job:1", b"old")] * 3)

    def expired() -> bool:
        young.append("events", "job:1", b"young")  # rolls the old records' segment
        return young.read("events")[0].offset >= 3

    wait_until(expired, CLEANER_WAIT_S, step_s=0.2)
    kept = young.read("events")
    assert kept and {r.value for r in kept} == {b"young"}
    assert young.latest("events")["job:1"].value == b"young"
    (info,) = [t for t in young.topics() if t.name == "events"]
    assert info.start_offset == kept[0].offset and info.end_offset == kept[-1].offset + 1


# The group session bounds a broker has out of the box (the test broker lowers them).
STOCK_GROUP_BOUNDS = {
    "group.min.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "45000",
    "group.consumer.min.heartbeat.interval.ms": "5000",
}


@pytest.fixture(scope="module")
def stock_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """A broker of this module's own, with stock group bounds, to kill: the session's one
    serves the other tests."""
    reason = broker_unavailable()
    if reason is not None:
        skip_or_fail(reason)
    root = tmp_path_factory.mktemp("stock-kafka")
    with KafkaCluster(root, nodes=1, settings=STOCK_GROUP_BOUNDS) as cluster:
        yield cluster


def test_a_session_the_brokers_refuse_is_an_error_that_says_what_to_change(stock_broker, handles):
    """The schedule partitions' group (classic protocol) with the server's default lease
    of 5 s, on a stock broker: refused at every join, for ever, which was only logged."""
    logs = BrokerLogs(stock_broker)
    log = _open(logs, handles)
    log.create_topic("part.0", TopicPolicy(compacted=True))
    share = log.group("schedulers", ["part.0"], "a", session_timeout_s=5.0)

    def refused() -> LogError | None:
        try:
            share.poll()
        except LogError as exc:
            return exc
        return None

    error = wait_until(refused, 20)
    assert "group.min.session.timeout.ms" in str(error) and "leader_session_s" in str(error)
    # The leader group (consumer protocol) still works there, on the broker's own session.
    log.create_topic("commands", TopicPolicy(compacted=True))
    member = log.member("leaders", "commands", "a", session_timeout_s=5.0)
    assert wait_until(member.poll, 20)


def test_what_the_log_acknowledged_survives_the_broker_killed_and_restarted(stock_broker, handles):
    logs = BrokerLogs(stock_broker)
    log = _open(logs, handles)
    log.create_topic("commands", TopicPolicy(compacted=True))
    log.create_topic("assignments", TopicPolicy(compacted=True))
    member = log.member("leaders", "commands", "a", session_timeout_s=SESSION_S)
    epoch = wait_until(member.poll, 20)
    offsets = log.append_batch(
        "assignments",
        [(f"job:{i}", f"v{i}".encode()) for i in range(50)],
        fence=Fence("leaders", epoch),
    )
    log.commit("readers", "assignments", 20)
    member.close()
    log.close()

    stock_broker.kill(1)  # SIGKILL: no clean shutdown, no flush
    stock_broker.restart(1)

    again = _open(logs, handles)
    rows = again.read("assignments")
    assert [r.offset for r in rows] == offsets
    assert [(r.key, r.value, r.epoch) for r in rows][-1] == ("job:49", b"v49", epoch)
    assert again.committed("readers", "assignments") == 20
    assert sorted(again.topics(), key=lambda t: t.name)[0].name == "assignments"
    # The fence survives too: the next owner gets a higher epoch, the old one is refused.
    member = again.member("leaders", "commands", "b", session_timeout_s=SESSION_S)
    assert wait_until(member.poll, 20) > epoch
