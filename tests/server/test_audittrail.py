"""The writer side of the audit trail on the in-memory log: fenced appends chained per
fence group, a new leader continuing its predecessor's chains, checkpoints signed and
tried again, and what the check makes of it all."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from pushjobs.audit.chain import read_link
from pushjobs.audit.verifier import ALTERED, Report, TopicRecords, verify
from pushjobs.clock import FakeClock
from pushjobs.errors import BackendUnavailable, FencedError
from pushjobs.log.base import Batch, Fence, OrderedLog
from pushjobs.log.memory import MemoryLog
from pushjobs.log.passthrough import PassThroughLog
from pushjobs.log.topics import create_standard_topics, names
from server.shell.audittrail import ChainedLog, Checkpoints, audited
from tests.audit.trail import keypair

TOPICS = names()
SIGNER, VERIFIER = keypair()


def event(n: int) -> tuple[str, bytes]:
    return f"job:{n}", orjson.dumps({"kind": "job_state", "n": n})


class Server:
    """What a server holds of the trail: its chained log and its checkpoints."""

    def __init__(self, store: MemoryLog, name: str, log: OrderedLog | None = None) -> None:
        inner = log if log is not None else MemoryLog(store=store.store)
        self.log = ChainedLog(inner, audited(TOPICS))
        self.member = self.log.member("pushjobs.leader", TOPICS.commands, name, session_timeout_s=5)
        self.checkpoints = Checkpoints(
            self.log,
            TOPICS.audit,
            self.log.ledger,
            SIGNER,
            server="server",
            incarnation=name,
            every_s=60,
            clock=FakeClock(),
        )

    def fence(self) -> Fence:
        epoch = self.member.poll()
        assert epoch is not None
        return Fence("pushjobs.leader", epoch)


def check(log: MemoryLog) -> Report:
    policy = audited(TOPICS)
    topics = [
        TopicRecords(t, bool(policy(t)), log.read(t, 0, 10_000))
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
