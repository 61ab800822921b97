"""Kafka-specific behaviour of KafkaLog, on librdkafka's mock cluster.

The backend-neutral semantics are the conformance suite's; these tests cover what only
Kafka has: client configuration, error translation from delivery reports and broker
faults, the lazy import, the fence topic, and group takeover between real processes.
Compaction is not tested here: the mock cluster does not compact (see compact()).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import (
    BackendUnavailable,
    FencedError,
    LogError,
    MissingExtra,
    OffsetOutOfRange,
    RecordTooLarge,
    UnknownTopic,
)
from pushjobs.log.base import Fence, TopicPolicy
from pushjobs.log.kafka.kafka_log import KafkaLog, KafkaTimeouts, topic_config
from tests.log import kafka_support
from tests.log.conftest import KAFKA_SESSION_MS as SESSION_MS
from tests.support import wait_until

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(
        kafka_support.available() is not None, reason=str(kafka_support.available())
    ),
]

ROOT = Path(__file__).resolve().parents[2]
TAKEOVER_BOUND_S = 3 * SESSION_MS / 1000 + 5

# Kafka protocol error codes, injected into produce responses.
MESSAGE_TOO_LARGE = 10
TOPIC_AUTHORIZATION_FAILED = 29
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture
def klog(cluster):
    log = cluster.open_log(clock=FakeClock())
    yield log
    log.close()


def test_append_read_and_offsets(klog):
    klog.create_topic("jobs", TopicPolicy(compacted=True))
    assert klog.end_offset("jobs") == 0
    assert klog.append("jobs", "job:1", b"a") == 0
    assert klog.append_batch("jobs", [("job:2", b"b"), ("job:1", None), ("job:3", b"c")]) == [
        1,
        2,
        3,
    ]
    assert klog.append_batch("jobs", []) == []
    assert klog.end_offset("jobs") == 4

    records = klog.read("jobs")
    assert [(r.offset, r.key, r.value, r.epoch) for r in records] == [
        (0, "job:1", b"a", 0),
        (1, "job:2", b"b", 0),
        (2, "job:1", None, 0),
        (3, "job:3", b"c", 0),
    ]
    # The injected clock stamps records.
    assert {r.timestamp_ms for r in records} == {FakeClock().wall_ms()}
    assert [r.offset for r in klog.read("jobs", 1, limit=2)] == [1, 2]
    assert klog.read("jobs", 4) == []
    assert sorted(klog.latest("jobs")) == ["job:2", "job:3"]

    with pytest.raises(OffsetOutOfRange):
        klog.read("jobs", -1)
    with pytest.raises(OffsetOutOfRange):
        klog.read("jobs", 5)
    with pytest.raises(UnknownTopic):
        klog.read("nope")
    with pytest.raises(UnknownTopic):
        klog.append("nope", "k", b"v")


def test_created_topics_are_single_partition_and_registered(cluster, klog, caplog):
    caplog.set_level(logging.WARNING, logger="pushjobs.log.kafka.kafka_log")
    klog.create_topic("control", TopicPolicy(compacted=True, retention_ms=60_000))
    assert "cannot be set there" in caplog.text  # the mock refuses CreateTopics
    assert klog._reader.partitions("control") == [0]

    # An existing topic keeps its policy, in this handle and in another one.
    klog.create_topic("control", TopicPolicy())
    other = cluster.open_log()
    try:
        other.create_topic("control", TopicPolicy())
        klog.append("control", "server:a", b"x")
        (info,) = other.topics()
    finally:
        other.close()
    assert info.name == "control"
    assert info.policy == TopicPolicy(compacted=True, retention_ms=60_000)
    assert (info.start_offset, info.end_offset, info.records) == (0, 1, 1)
    assert info.bytes == len("server:a") + 1


def test_topic_config_maps_policies():
    assert topic_config(TopicPolicy(compacted=True))["cleanup.policy"] == "compact"
    assert topic_config(TopicPolicy(compacted=True, retention_ms=5))["cleanup.policy"] == (
        "compact,delete"
    )
    plain = topic_config(TopicPolicy(retention_bytes=100))
    assert plain == {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "100"}


def test_producer_is_idempotent_and_durable_whatever_the_extra_config(cluster):
    log = cluster.open_log(
        config={"client.rack": "r1"},
        producer_config={"enable.idempotence": False, "acks": "1", "linger.ms": 7},
    )
    try:
        settings = log.producer_settings()
        assert settings["enable.idempotence"] is True
        assert settings["acks"] == "all"
        assert settings["allow.auto.create.topics"] is False
        assert settings["message.timeout.ms"] == round(log.timeouts.delivery_s * 1000)
        assert settings["linger.ms"] == 7  # tuning is the operator's
        assert log.consumer_settings("c", {})["enable.auto.commit"] is False
    finally:
        log.close()


def test_transient_produce_error_is_retried_without_duplicates(cluster, klog):
    klog.create_topic("events", TopicPolicy())
    cluster.fail_produce(NOT_LEADER_OR_FOLLOWER, count=2)
    assert klog.append("events", "job:1", b"once") == 0
    assert [r.value for r in klog.read("events")] == [b"once"]


@pytest.mark.parametrize(
    ("code", "error", "recovers"),
    [
        (MESSAGE_TOO_LARGE, RecordTooLarge, True),
        # librdkafka remembers an authorization failure for the topic until its next
        # metadata refresh, so the next append fails at once as well.
        (TOPIC_AUTHORIZATION_FAILED, BackendUnavailable, False),
    ],
)
def test_delivery_errors_are_translated(cluster, klog, code, error, recovers):
    klog.create_topic("events", TopicPolicy())
    cluster.fail_produce(code)
    with pytest.raises(error) as caught:
        klog.append("events", "job:1", b"x")
    assert "events" in str(caught.value)
    if recovers:
        assert klog.append("events", "job:1", b"y") == 0


def test_oversized_value_is_refused_before_producing(cluster):
    log = cluster.open_log(max_value_bytes=10)
    try:
        log.create_topic("events", TopicPolicy())
        with pytest.raises(RecordTooLarge):
            log.append("events", "k", b"x" * 11)
        assert log.end_offset("events") == 0
    finally:
        log.close()


def test_broker_down_is_backend_unavailable_within_the_timeouts(cluster):
    log = cluster.open_log(timeouts=KafkaTimeouts(request_s=1.0, delivery_s=1.0, admin_s=1.0))
    try:
        log.create_topic("events", TopicPolicy())
        log.append("events", "k", b"before")
        cluster.set_down()
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):
            log.append("events", "k", b"during")
        with pytest.raises(BackendUnavailable):
            log.end_offset("events")
        assert time.monotonic() - started < 10
        cluster.set_up()
        assert wait_until(lambda: _appends(log, "events"), timeout_s=15)
    finally:
        log.close()


def test_with_the_brokers_down_only_the_first_request_waits_its_timeout(cluster):
    """Then every request fails at once, naming the cluster, until a probe answers: a
    server's turn makes several requests, and each used to wait its whole timeout."""
    log = cluster.open_log(timeouts=KafkaTimeouts(request_s=1.0, delivery_s=1.0, admin_s=1.0))
    try:
        log.create_topic("events", TopicPolicy())
        log.append("events", "k", b"before")
        cluster.set_down()
        with pytest.raises(BackendUnavailable) as first:
            log.append("events", "k", b"during")
        assert "does not answer" not in str(first.value)  # it met the timeout itself
        for call in (
            lambda: log.append("events", "k", b"during"),
            lambda: log.end_offset("events"),
            lambda: log.read("events"),
        ):
            with pytest.raises(BackendUnavailable, match="the Kafka cluster does not answer"):
                call()
        assert not log.reach.reachable
        cluster.set_up()
        assert wait_until(lambda: _appends(log, "events"), timeout_s=15)
        assert log.reach.reachable
    finally:
        log.close()


def test_a_read_asks_the_consumer_for_no_more_records_than_the_range_holds(klog):
    """``consume`` waits its whole timeout for ``num_messages``: asking for a chunk of 1000
    made every read of a short range cost 0.1 s."""
    klog.create_topic("jobs", TopicPolicy())
    klog.append_batch("jobs", [(f"k{i}", b"v") for i in range(5)])
    asked = []
    consumer = klog._reader._consumer

    class Recording:
        def consume(self, num_messages, timeout):
            asked.append(num_messages)
            return consumer.consume(num_messages=num_messages, timeout=timeout)

        def __getattr__(self, name):
            return getattr(consumer, name)

    klog._reader._consumer = Recording()
    try:
        assert [r.offset for r in klog.read("jobs", 2)] == [2, 3, 4]
        assert [r.offset for r in klog.read("jobs")] == [0, 1, 2, 3, 4]
    finally:
        klog._reader._consumer = consumer
    assert asked and max(asked) <= 5, asked


def test_readers_do_not_wait_at_the_broker_for_data_beyond_the_watermark(cluster):
    """A fetch parked at the end of a partition holds up the next request on its broker
    connection (a watermark lookup waited ~0.5 s, librdkafka's default fetch.wait.max.ms,
    on every read); extra consumer config may still choose otherwise."""
    log = KafkaLog(cluster.bootstrap)
    other = KafkaLog(cluster.bootstrap, consumer_config={"fetch.wait.max.ms": 100})
    try:
        assert log.consumer_settings("reader", {})["fetch.wait.max.ms"] <= 10
        assert other.consumer_settings("reader", {})["fetch.wait.max.ms"] == 100
    finally:
        log.close()
        other.close()


def _appends(log, topic):
    try:
        return log.append(topic, "k", b"after") >= 0
    except BackendUnavailable:
        return False


def test_missing_confluent_kafka_raises_missing_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)
    monkeypatch.setitem(sys.modules, "confluent_kafka.admin", None)
    with pytest.raises(MissingExtra) as caught:
        KafkaLog("127.0.0.1:9")
    assert "pushjobs[kafka]" in str(caught.value)


def test_kafka_module_imports_without_confluent_kafka():
    script = (
        "import sys\n"
        "sys.modules['confluent_kafka'] = None\n"
        "import pushjobs.log.kafka.kafka_log, pushjobs.log.kafka.kafka_member\n"
        "assert 'confluent_kafka' not in sys.modules or sys.modules['confluent_kafka'] is None\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_commits_go_through_the_member_when_the_group_is_live(cluster, klog):
    klog.create_topic("commands", TopicPolicy(compacted=True))
    klog.append_batch("commands", [("job:1", b"a"), ("job:2", b"b")])
    assert klog.committed("leaders", "commands") is None
    klog.commit("leaders", "commands", 1)
    assert klog.committed("leaders", "commands") == 1
    with pytest.raises(OffsetOutOfRange):
        klog.commit("leaders", "commands", 3)

    member = klog.member("leaders", "commands", "a", session_timeout_s=SESSION_MS / 1000)
    try:
        assert wait_until(member.poll, timeout_s=TAKEOVER_BOUND_S)
        klog.commit("leaders", "commands", 2)
        assert klog.committed("leaders", "commands") == 2
        # Another handle is no member: Kafka refuses its commit into a live group.
        other = cluster.open_log()
        try:
            with pytest.raises(FencedError):
                other.commit("leaders", "commands", 0)
            assert other.committed("leaders", "commands") == 2
        finally:
            other.close()
    finally:
        member.close()


def test_epochs_rise_with_each_owner_and_old_epochs_are_fenced(cluster, klog):
    klog.create_topic("commands", TopicPolicy(compacted=True))
    klog.create_topic("assignments", TopicPolicy(compacted=True))
    assert klog.control.current_epoch("leaders") == 0
    first = klog.member("leaders", "commands", "a", session_timeout_s=SESSION_MS / 1000)
    epoch_a = wait_until(first.poll, timeout_s=TAKEOVER_BOUND_S)
    assert first.poll() == epoch_a  # stable while owned
    klog.append("assignments", "job:1", b"by a", fence=Fence("leaders", epoch_a))

    other = cluster.open_log()
    second = other.member("leaders", "commands", "b", session_timeout_s=SESSION_MS / 1000)
    try:
        assert second.poll() is None
        first.close()  # leaves the group: the partition moves without a session timeout
        epoch_b = wait_until(second.poll, timeout_s=TAKEOVER_BOUND_S)
        assert epoch_b > epoch_a
        other.append("assignments", "job:1", b"by b", fence=Fence("leaders", epoch_b))
        with pytest.raises(FencedError):
            klog.append("assignments", "job:1", b"late a", fence=Fence("leaders", epoch_a))
        records = klog.read("assignments")
        assert [(r.value, r.epoch) for r in records] == [(b"by a", epoch_a), (b"by b", epoch_b)]
    finally:
        second.close()
        other.close()


def test_write_that_lands_after_a_successor_claim_is_reported_fenced(cluster, klog, monkeypatch):
    klog.create_topic("assignments", TopicPolicy(compacted=True))
    klog.create_topic("commands", TopicPolicy(compacted=True))
    member = klog.member("leaders", "commands", "a", session_timeout_s=SESSION_MS / 1000)
    try:
        epoch = wait_until(member.poll, timeout_s=TAKEOVER_BOUND_S)
        produce = klog._writer.produce

        def successor_claims_mid_write(topic, records, epoch):
            offsets = produce(topic, records, epoch)
            monkeypatch.setattr(klog._writer, "produce", produce)
            klog.control.claim("leaders", "successor", generation=-1)
            return offsets

        monkeypatch.setattr(klog._writer, "produce", successor_claims_mid_write)
        with pytest.raises(FencedError, match="were written"):
            klog.append("assignments", "job:1", b"late", fence=Fence("leaders", epoch))
        # The member sees the newer claim, confirms it still holds the partition with
        # the coordinator, and claims again (the "successor" here was never a member).
        assert member.poll() > epoch
    finally:
        member.close()


def test_compact_reports_without_changing_anything(klog):
    klog.create_topic("events", TopicPolicy(retention_ms=1))
    klog.append_batch("events", [("k", b"1"), ("k", b"2")])
    (stats,) = klog.compact()
    assert (stats.topic, stats.records_before, stats.records_after) == ("events", 2, 2)
    assert klog.end_offset("events") == 2


def test_closed_handle_refuses_work(cluster):
    log = cluster.open_log()
    log.close()
    log.close()
    with pytest.raises(LogError):
        log.end_offset("anything")


CHILD = """
import json, sys, threading
from pushjobs.errors import FencedError
from pushjobs.log.base import Fence
from tests.log.kafka_support import open_log_from_spec

spec, group, topic, name, session_s = json.loads(sys.argv[1]), *sys.argv[2:5], float(sys.argv[5])
log = open_log_from_spec(spec)
member = log.member(group, topic, name, session_timeout_s=session_s)
lock, done = threading.Lock(), threading.Event()

def commands():
    for line in sys.stdin:
        cmd, key, epoch = line.split()
        with lock:
            try:
                offset = log.append(topic, key, name.encode(), fence=Fence(group, int(epoch)))
                print("appended", offset, flush=True)
            except FencedError:
                print("fenced", flush=True)
    done.set()

threading.Thread(target=commands, daemon=True).start()
last = "start"
while not done.is_set():
    with lock:
        epoch = member.poll()
    if epoch != last:
        print("epoch", epoch, flush=True)
        last = epoch
    done.wait(0.02)
member.close()
log.close()
"""


class Child:
    """A group member in its own process, reporting its epoch and running fenced appends."""

    def __init__(self, cluster, group, topic, name):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                json.dumps(cluster.spec()),
                group,
                topic,
                name,
                str(SESSION_MS / 1000),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def said(self, line, since=0):
        return line in self.lines[since:]

    def epoch(self):
        """The epoch the child last reported if it owns the group, else None."""
        epochs = [line for line in self.lines if line.startswith("epoch ")]
        last = epochs[-1].split()[1] if epochs else "None"
        return None if last == "None" else int(last)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def children():
    started = []
    yield lambda *args: started.append(Child(*args)) or started[-1]
    for child in started:
        child.kill()


def test_takeover_after_sigkill_of_the_owner(cluster, klog, children):
    klog.create_topic("commands", TopicPolicy(compacted=True))
    owner = children(cluster, "leaders", "commands", "a")
    epoch_a = wait_until(owner.epoch, timeout_s=TAKEOVER_BOUND_S)
    standby = klog.member("leaders", "commands", "b", session_timeout_s=SESSION_MS / 1000)
    try:
        assert standby.poll() is None
        os.kill(owner.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        epoch_b = wait_until(standby.poll, timeout_s=TAKEOVER_BOUND_S)
        took = time.monotonic() - killed
        assert epoch_b > epoch_a
        assert took >= SESSION_MS / 1000 * 0.5  # the session timeout, not an instant leave
        with pytest.raises(FencedError):
            klog.append("commands", "job:1", b"zombie", fence=Fence("leaders", epoch_a))
    finally:
        standby.close()


def test_stalled_owner_is_fenced_when_it_wakes(cluster, klog, children):
    klog.create_topic("commands", TopicPolicy(compacted=True))
    owner = children(cluster, "leaders", "commands", "a")
    epoch_a = wait_until(owner.epoch, timeout_s=TAKEOVER_BOUND_S)
    standby = klog.member("leaders", "commands", "b", session_timeout_s=SESSION_MS / 1000)
    try:
        os.kill(owner.proc.pid, signal.SIGSTOP)
        epoch_b = wait_until(standby.poll, timeout_s=TAKEOVER_BOUND_S)
        os.kill(owner.proc.pid, signal.SIGCONT)
        since = len(owner.lines)
        owner.send(f"append job:1 {epoch_a}")
        # The standby keeps polling meanwhile, as a leader does, or it would leave the
        # group after max.poll.interval.ms.
        wait_until(lambda: standby.poll() and owner.said("fenced", since), timeout_s=10)
        # The woken owner learns it lost the group; the successor keeps its epoch.
        wait_until(lambda: standby.poll() and owner.epoch() is None, TAKEOVER_BOUND_S)
        assert standby.poll() == epoch_b
        assert klog.read("commands") == []
    finally:
        standby.close()


def test_classic_protocol_hands_over_on_close(cluster):
    log = cluster.open_log(group_protocol="classic")
    try:
        log.create_topic("commands", TopicPolicy(compacted=True))
        a = log.member("leaders", "commands", "a", session_timeout_s=SESSION_MS / 1000)
        epoch_a = wait_until(a.poll, timeout_s=TAKEOVER_BOUND_S)
        b = log.member("leaders", "commands", "b", session_timeout_s=SESSION_MS / 1000)
        # Cooperative rebalancing: the owner keeps the partition while b joins.
        wait_until(lambda: a.poll() == epoch_a and b.poll() is None and _joined(b))
        a.close()
        assert wait_until(b.poll, timeout_s=TAKEOVER_BOUND_S) > epoch_a
        b.close()
    finally:
        log.close()


def _joined(member):
    return member.consumer.memberid() not in (None, "")
