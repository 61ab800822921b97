"""The writer side of the audit trail on the in-memory log: fenced appends chained per
fence group, a new leader continuing its predecessor's chains, checkpoints signed and
tried again, and what the check makes of it all."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from pushjobs.audit.chain import EMPTY, GENESIS, Head, Link, link_batch, read_link
from pushjobs.audit.verifier import ALTERED, ChainStart, Report, TopicRecords, verify
from pushjobs.clock import FakeClock
from pushjobs.errors import BackendUnavailable, FencedError
from pushjobs.log.base import Batch, Fence, OrderedLog, Record, TopicPolicy, record_bytes
from pushjobs.log.memory import MemoryLog
from pushjobs.log.passthrough import PassThroughLog
from pushjobs.log.topics import create_standard_topics, names
from server.core.schedshards import partition_topics
from server.shell.audittrail import SCAN_BACK_RECORDS, ChainedLog, Checkpoints, audited, read_head
from tests.audit.trail import keypair

TOPICS = names()
SIGNER, VERIFIER = keypair()


def event(n: int) -> tuple[str, bytes]:
    return f"job:{n}", orjson.dumps({"kind": "job_state", "n": n})


def checkpoints(log: ChainedLog, incarnation: str) -> Checkpoints:
    """A server incarnation's checkpoints of what ``log`` chained, written when asked."""
    return Checkpoints(
        log,
        TOPICS.audit,
        log.ledger,
        SIGNER,
        server="server",
        incarnation=incarnation,
        every_s=60,
        clock=FakeClock(),
    )


class Server:
    """What a server holds of the trail: its chained log and its checkpoints."""

    def __init__(self, store: MemoryLog, name: str, log: OrderedLog | None = None) -> None:
        inner = log if log is not None else MemoryLog(store=store.store)
        self.log = ChainedLog(inner, audited(TOPICS))
        self.member = self.log.member("pushjobs.leader", TOPICS.commands, name, session_timeout_s=5)
        self.checkpoints = checkpoints(self.log, name)

    def fence(self) -> Fence:
        epoch = self.member.poll()
        assert epoch is not None
        return Fence("pushjobs.leader", epoch)


def check(log: MemoryLog) -> Report:
    policy = audited(TOPICS)
    topics = [
        TopicRecords(t, (how := policy(t)) is not None and how.compacted, log.read(t, 0, 10_000))
        for t in (TOPICS.commands, TOPICS.assignments, TOPICS.events, TOPICS.keys)
    ]
    return verify(
        topics, TopicRecords(TOPICS.audit, False, log.read(TOPICS.audit, 0, 10_000)), VERIFIER
    )


@pytest.fixture
def store() -> MemoryLog:
    log = MemoryLog()
    create_standard_topics(log)
    return log


def test_fenced_appends_are_chained_and_a_checkpoint_seals_them(store):
    a = Server(store, "a")
    fence = a.fence()
    a.log.append_batch(TOPICS.events, [event(1), event(2)], fence=fence)
    a.log.append_batch(
        TOPICS.commands, [("job:1", b'{"type":"start"}'), ("job:2", None)], fence=fence
    )
    a.checkpoints.write()
    links = [read_link(r.value) for r in store.read(TOPICS.events)]
    assert [(link.by, link.seq) for link in links if link] == [
        ("pushjobs.leader", 0),
        ("pushjobs.leader", 1),
    ]
    report = check(store)
    assert report.ok, report.problems
    assert report.checkpoints == 1
    assert report.topics[TOPICS.events].sealed == 2
    assert report.topics[TOPICS.commands].sealed == 2  # the tombstone too


def test_unfenced_and_unaudited_appends_pass_unchanged(store):
    a = Server(store, "a")
    a.log.append_batch(TOPICS.events, [event(1)])  # a standby's node event: unfenced
    a.log.append_batch(TOPICS.control, [("server:a", b'{"pong":1}')], fence=a.fence())
    assert store.read(TOPICS.events)[0].value == event(1)[1]
    assert store.read(TOPICS.control)[0].value == b'{"pong":1}'
    assert not a.log.ledger


def test_a_new_leader_continues_the_chain_from_the_log(store):
    a = Server(store, "a")
    a.log.append_batch(TOPICS.events, [event(1), event(2)], fence=a.fence())
    a.checkpoints.write()
    a.member.close()
    b = Server(store, "b")
    b.log.append_batch(TOPICS.events, [event(3)], fence=b.fence())
    b.checkpoints.write()
    last = read_link(store.read(TOPICS.events)[-1].value)
    assert last is not None and last.seq == 2
    report = check(store)
    assert report.ok, report.problems
    assert report.topics[TOPICS.events].streams == 1 and report.topics[TOPICS.events].sealed == 3


def test_a_deposed_leaders_refused_write_leaves_the_chain_whole(store):
    a = Server(store, "a")
    old = a.fence()
    a.log.append_batch(TOPICS.events, [event(1)], fence=old)
    a.member.close()
    b = Server(store, "b")
    b.log.append_batch(TOPICS.events, [event(2)], fence=b.fence())
    with pytest.raises(FencedError):
        a.log.append_batch(TOPICS.events, [event(9)], fence=old)
    b.log.append_batch(TOPICS.events, [event(3)], fence=b.fence())
    b.checkpoints.write()
    assert check(store).ok


class Flaky(PassThroughLog):
    """A log whose next appends to ``audit`` fail."""

    failures = 0

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        if topic == TOPICS.audit and self.failures:
            self.failures -= 1
            raise BackendUnavailable("the log is down")
        return self.inner.append_batch(topic, records, fence=fence)


def test_a_checkpoint_not_written_is_written_at_the_next_try(store):
    flaky = Flaky(MemoryLog(store=store.store))
    a = Server(store, "a", log=flaky)
    a.log.append_batch(TOPICS.commands, [("job:1", b'{"type":"start"}')], fence=a.fence())
    flaky.failures = 1
    a.checkpoints.write()
    assert store.end_offset(TOPICS.audit) == 0
    a.checkpoints.write()
    report = check(store)
    assert report.ok and report.checkpoints == 1
    assert report.topics[TOPICS.commands].sealed == 1


def test_a_record_altered_in_the_store_is_named(store):
    a = Server(store, "a")
    fence = a.fence()
    for n in range(4):
        a.log.append_batch(TOPICS.events, [event(n)], fence=fence)
    a.checkpoints.write()
    records = store.store.topics[TOPICS.events].records
    records[1] = replace(records[1], value=records[1].value.replace(b'"n":1', b'"n":5'))
    first = check(store).first
    assert first is not None and (first.offset, first.what) == (1, ALTERED)


class Counting(PassThroughLog):
    """A log that counts the records read from it, and their bytes."""

    records = 0
    bytes = 0

    def read(self, topic: str, from_offset: int = 0, limit: int = 1000) -> list[Record]:
        got = self.inner.read(topic, from_offset, limit)
        self.records += len(got)
        self.bytes += sum(record_bytes(r.key, r.value) for r in got)
        return got


def legacy_events(store: MemoryLog, n: int, size: int = 20) -> None:
    """``n`` events written before the trail: objects with no chain field."""
    pad = "x" * size
    store.append_batch(
        TOPICS.events, [(f"job:old{i}", orjson.dumps({"old": i, "pad": pad})) for i in range(n)]
    )


def test_the_first_chained_write_after_an_upgrade_reads_back_at_most_the_bound(store):
    legacy_events(store, 3 * SCAN_BACK_RECORDS)
    counting = Counting(MemoryLog(store=store.store))
    a = Server(store, "a", log=counting)
    a.log.append_batch(TOPICS.events, [event(1), event(2)], fence=a.fence())
    assert 0 < counting.records <= SCAN_BACK_RECORDS
    first = read_link(store.read(TOPICS.events, 3 * SCAN_BACK_RECORDS, 1)[0].value)
    assert first == Link("pushjobs.leader", 3 * SCAN_BACK_RECORDS, GENESIS, 3 * SCAN_BACK_RECORDS)
    # The chain goes on from its new start, and the check says where it starts.
    read_before = counting.records
    a.log.append_batch(TOPICS.events, [event(3)], fence=a.fence())
    assert counting.records == read_before  # the head is known for the epoch
    a.checkpoints.write()
    report = check(store)
    assert report.ok, report.problems
    assert report.starts == [
        ChainStart(TOPICS.events, 3 * SCAN_BACK_RECORDS, "pushjobs.leader", 3 * SCAN_BACK_RECORDS)
    ]
    assert report.topics[TOPICS.events].legacy == 3 * SCAN_BACK_RECORDS
    assert report.topics[TOPICS.events].sealed == 3


def test_a_new_leader_within_the_bound_continues_the_started_chain(store):
    legacy_events(store, SCAN_BACK_RECORDS + 10)
    a = Server(store, "a")
    a.log.append_batch(TOPICS.events, [event(1)], fence=a.fence())
    a.checkpoints.write()
    a.member.close()
    b = Server(store, "b")
    b.log.append_batch(TOPICS.events, [event(2)], fence=b.fence())
    b.checkpoints.write()
    report = check(store)
    assert report.ok, report.problems
    assert len(report.starts) == 1 and report.topics[TOPICS.events].sealed == 2


def test_the_read_back_stops_at_its_bytes_bound_too(store):
    legacy_events(store, 40, size=10_000)
    counting = Counting(MemoryLog(store=store.store))
    head = read_head(counting, TOPICS.events, "pushjobs.leader", max_bytes=50_000)
    assert head == Head(39, GENESIS, 40)
    # Pages of 4, 16, then 20 more records: it stops once past 50 kB, not at the start.
    assert 50_000 <= counting.bytes < 50_000 + 64 * 10_100 and counting.records < 40


def test_a_small_topic_from_before_the_trail_is_read_whole_and_its_chain_starts_at_0(store):
    legacy_events(store, 30)
    a = Server(store, "a")
    a.log.append_batch(TOPICS.events, [event(1)], fence=a.fence())
    link = read_link(store.read(TOPICS.events, 30, 1)[0].value)
    assert link == Link("pushjobs.leader", 0, GENESIS)
    a.checkpoints.write()
    report = check(store)
    assert report.ok and report.starts == [] and report.topics[TOPICS.events].legacy == 30


def test_a_tombstone_after_a_compacted_record_starts_a_new_chain_not_a_false_alarm(store):
    a = Server(store, "a")
    fence = a.fence()
    a.log.append_batch(TOPICS.commands, [("job:a", b'{"v":1}'), ("job:b", b'{"v":2}')], fence=fence)
    a.log.append_batch(TOPICS.commands, [("job:b", None)], fence=fence)  # job b deleted
    a.checkpoints.write()  # seals the tombstone, seq 2, as the head
    store.compact([TOPICS.commands])  # job b's record goes: its tombstone superseded it
    assert [r.offset for r in store.read(TOPICS.commands)] == [0, 2]
    a.member.close()
    # The head cannot be recomputed without job b's record: linking to a guess would make
    # the sealed head look altered. The new leader starts a chain of its own.
    b = Server(store, "b")
    b.log.append_batch(TOPICS.commands, [("job:c", b'{"v":3}')], fence=b.fence())
    b.checkpoints.write()
    assert read_link(store.read(TOPICS.commands, 3)[0].value) == Link(
        "pushjobs.leader", 3, GENESIS, 3
    )
    report = check(store)
    assert report.ok, report.problems
    assert report.starts == [ChainStart(TOPICS.commands, 3, "pushjobs.leader", 3)]


def test_a_read_back_over_gaps_reads_no_record_twice(store):
    # Offsets 0-9 compacted away: a page starting among them would run past its end, and
    # its records read twice would look like a gap-free tail that is not.
    topic = TOPICS.commands
    for round_ in range(2):
        store.append_batch(topic, [(f"job:k{i}", b'{"r":%d}' % round_) for i in range(10)])
    store.compact([topic])
    mine = link_batch("pushjobs.leader", EMPTY, [("job:x", b'{"v":1}')])
    store.append_batch(topic, mine.batch)
    theirs = link_batch("owner", EMPTY, [(f"fire:{i}", b'{"v":1}') for i in range(8)])
    store.append_batch(topic, theirs.batch)
    assert read_head(store, topic, "pushjobs.leader") == mine.head


class Writer:
    """One fence group writing a schedules partition through its own chained log: the
    leader (definitions) or the partition's owner (fires)."""

    def __init__(self, store: MemoryLog, group: str, name: str) -> None:
        incarnation = f"{name}-{group.partition('/')[0]}"  # one per process in a real server
        self.log = ChainedLog(MemoryLog(store=store.store), audited(TOPICS))
        self.group = group
        self.member = self.log.member(group, PARTITION, name, session_timeout_s=5)
        self.checkpoints = checkpoints(self.log, incarnation)

    def write(self, *records: tuple[str, bytes | None]) -> None:
        epoch = self.member.poll()
        assert epoch is not None
        self.log.append_batch(PARTITION, list(records), fence=Fence(self.group, epoch))


PARTITION = partition_topics(TOPICS.schedules, 2)[1]
LEADER, OWNER = "pushjobs.leader", f"pushjobs.schedulers/{PARTITION}"


def test_two_writers_tombstones_interleaved_on_a_schedules_partition_stay_each_their_own(store):
    # Found by the long chaos run: a schedule deleted by the leader, then its fire state
    # by the partition's owner, each a tombstone (no room for a ``_chain`` field). The
    # successors of both read their heads back from the log: each must find its own
    # tombstone, or its chain diverges from what its predecessor's checkpoint sealed.
    store.create_topic(PARTITION, TopicPolicy(compacted=True))
    leader, owner = Writer(store, LEADER, "a"), Writer(store, OWNER, "a")
    leader.write(("schedule:x", b'{"schedule":{"every":"1m"},"from_ms":0}'))
    owner.write(("fire:x", b'{"consumed_ms":60000,"last_job":"j1"}'))
    leader.write(("schedule:x", None))
    owner.write(("fire:x", None))
    leader.checkpoints.write()
    owner.checkpoints.write()
    leader.member.close()
    owner.member.close()
    leader, owner = Writer(store, LEADER, "b"), Writer(store, OWNER, "b")
    leader.write(("schedule:y", b'{"schedule":{"every":"1m"},"from_ms":0}'))
    owner.write(("fire:y", b'{"consumed_ms":60000,"last_job":"j2"}'))
    leader.checkpoints.write()
    owner.checkpoints.write()
    heads = {
        link.by: link.seq
        for r in store.read(PARTITION)
        if r.key.endswith(":y") and (link := read_link(r.value)) is not None
    }
    # Each after its own record, tombstone and the trailer that closed the tombstone's batch.
    assert heads == {LEADER: 3, OWNER: 3}
    report = verify(
        [TopicRecords(PARTITION, True, store.read(PARTITION))],
        TopicRecords(TOPICS.audit, False, store.read(TOPICS.audit)),
        VERIFIER,
    )
    assert report.ok, report.problems
    assert report.topics[PARTITION].sealed == report.topics[PARTITION].records
