"""The ordered log's contract (``pushjobs.log.base``), on every backend.

Each test takes the ``log_backend`` harness (see conftest) and opens as many handles on
one log as it needs. What a backend cannot show is skipped with the reason, never
silently: compaction and retention on Kafka (the broker does them, the mock cluster does
not), child processes on the memory backend.
"""

from __future__ import annotations

import pytest

from pushjobs.errors import (
    FencedError,
    LogError,
    OffsetOutOfRange,
    RecordTooLarge,
    UnknownTopic,
)
from pushjobs.log.base import Fence, TopicPolicy
from tests.log.children import spec_arg
from tests.support import wait_until

GROUP = "leaders"


def _rows(records):
    return [(r.offset, r.key, r.value) for r in records]


def _owner_epochs(*members):
    return [m.poll() for m in members]


# Offsets, keys, reading.


def test_offsets_are_gap_free_in_append_order(log_backend):
    log = log_backend.open()
    log.create_topic("jobs", TopicPolicy())
    assert log.end_offset("jobs") == 0
    assert log.append("jobs", "a", b"1") == 0
    assert log.append_batch("jobs", [("b", b"2"), ("c", b"3")]) == [1, 2]
    assert log.append_batch("jobs", []) == []
    with pytest.raises(UnknownTopic):
        log.append_batch("nope", [])
    assert log.append("jobs", "a", b"4") == 3
    assert log.end_offset("jobs") == 4

    records = log.read("jobs")
    assert _rows(records) == [(0, "a", b"1"), (1, "b", b"2"), (2, "c", b"3"), (3, "a", b"4")]
    assert {r.topic for r in records} == {"jobs"}
    assert {r.epoch for r in records} == {0}
    assert {r.timestamp_ms for r in records} == {log_backend.clock.wall_ms()}


def test_handles_share_one_sequence_of_offsets(log_factory):
    first, second = log_factory(), log_factory()
    first.create_topic("jobs", TopicPolicy())
    offsets = []
    for i in range(6):
        writer = first if i % 2 == 0 else second
        offsets.append(writer.append("jobs", f"k{i}", str(i).encode()))
    assert offsets == list(range(6))
    assert _rows(first.read("jobs")) == _rows(second.read("jobs"))
    assert second.end_offset("jobs") == 6


def test_topics_have_their_own_offsets(log_backend):
    log = log_backend.open()
    log.create_topic("a", TopicPolicy())
    log.create_topic("b", TopicPolicy())
    assert log.append_batch("a", [("k", b"1"), ("k", b"2")]) == [0, 1]
    assert log.append("b", "k", b"3") == 0
    assert _rows(log.read("b")) == [(0, "k", b"3")]


def test_read_from_an_offset_with_a_limit(log_backend):
    log = log_backend.open()
    log.create_topic("jobs", TopicPolicy())
    log.append_batch("jobs", [(f"k{i}", bytes([i])) for i in range(10)])
    assert [r.offset for r in log.read("jobs", 3, limit=4)] == [3, 4, 5, 6]
    assert [r.offset for r in log.read("jobs", 8, limit=100)] == [8, 9]
    assert log.read("jobs", 10) == []  # the end: nothing yet, not an error
    assert log.read("jobs", 0, limit=0) == []


def test_keys_tombstones_and_latest(log_backend):
    log = log_backend.open()
    log.create_topic("jobs", TopicPolicy(compacted=True))
    assert log.latest("jobs") == {}
    log.append_batch(
        "jobs",
        [("job:1", b"new"), ("job:2", b"new"), ("job:1", b"running"), ("job:3", b"new")],
    )
    log.append("jobs", "job:2", None)
    records = log.read("jobs")
    assert records[-1].value is None  # a tombstone is a record like any other

    latest = log.latest("jobs")
    assert sorted(latest) == ["job:1", "job:3"]
    assert (latest["job:1"].offset, latest["job:1"].value) == (2, b"running")
    assert latest["job:3"].key == "job:3"

    log.append("jobs", "job:2", b"again")  # a key can come back after its tombstone
    assert log.latest("jobs")["job:2"].offset == 5


def test_latest_agrees_with_folding_the_topic(log_backend):
    log = log_backend.open()
    log.create_topic("snapshots", TopicPolicy(compacted=True))
    batch = []
    for i in range(300):
        key = f"job:{(i * 7) % 23}"
        batch.append((key, None if i % 11 == 0 else f"v{i}".encode()))
    log.append_batch("snapshots", batch)
    folded = {}
    for offset, (key, value) in enumerate(batch):
        if value is None:
            folded.pop(key, None)
        else:
            folded[key] = (offset, value)
    latest = log.latest("snapshots")
    assert {k: (r.offset, r.value) for k, r in latest.items()} == folded


def test_topics_report_policy_offsets_and_size(log_backend):
    log = log_backend.open()
    policy = TopicPolicy(compacted=True, retention_ms=60_000)
    log.create_topic("control", policy)
    log.create_topic("control", TopicPolicy())  # exists: keeps its policy
    log.append_batch("control", [("server:a", b"up"), ("server:b", None)])
    (info,) = [t for t in log_backend.open().topics() if t.name == "control"]
    assert info.policy == policy
    assert (info.start_offset, info.end_offset, info.records) == (0, 2, 2)
    assert info.bytes == len("server:a") + len("up") + len("server:b")


# Errors.


def test_unknown_topic_is_an_error_everywhere(log_backend):
    log = log_backend.open()
    calls = [
        lambda: log.append("nope", "k", b"v"),
        lambda: log.append_batch("nope", [("k", b"v")]),
        lambda: log.read("nope"),
        lambda: log.latest("nope"),
        lambda: log.end_offset("nope"),
        lambda: log.committed(GROUP, "nope"),
        lambda: log.commit(GROUP, "nope", 0),
        lambda: log.member(GROUP, "nope", "a", session_timeout_s=log_backend.session_s),
        lambda: log.compact(["nope"]),
    ]
    for call in calls:
        with pytest.raises(UnknownTopic):
            call()
    assert "nope" not in {t.name for t in log.topics()}


def test_a_missing_topic_is_named_before_a_bad_offset(log_backend):
    """Every backend says what is wrong first: the topic, then the offset."""
    log = log_backend.open()
    for call in (
        lambda: log.read("nope", -1),
        lambda: log.commit(GROUP, "nope", -1),
    ):
        with pytest.raises(UnknownTopic):
            call()


def test_offsets_out_of_range(log_backend):
    log = log_backend.open()
    log.create_topic("jobs", TopicPolicy())
    log.append_batch("jobs", [("k", b"1"), ("k", b"2")])
    for call in (
        lambda: log.read("jobs", -1),
        lambda: log.read("jobs", 3),
        lambda: log.commit(GROUP, "jobs", -1),
        lambda: log.commit(GROUP, "jobs", 3),
    ):
        with pytest.raises(OffsetOutOfRange):
            call()


def test_oversized_values_are_refused_and_nothing_is_written(log_backend):
    log = log_backend.open(max_value_bytes=16)
    log.create_topic("jobs", TopicPolicy())
    with pytest.raises(RecordTooLarge):
        log.append("jobs", "k", b"x" * 17)
    with pytest.raises(RecordTooLarge):
        log.append_batch("jobs", [("k", b"ok"), ("k", b"x" * 17)])
    assert log.end_offset("jobs") == 0
    assert log.append_batch("jobs", [("k", b"x" * 16), ("k", None)]) == [0, 1]


def test_records_of_the_wrong_type_are_refused_and_nothing_is_written(log_backend):
    log = log_backend.open()
    log.create_topic("jobs", TopicPolicy())
    for batch in ([("k", b"ok"), (5, b"v")], [("k", b"ok"), ("k", "text")]):
        with pytest.raises(LogError, match="must be"):
            log.append_batch("jobs", batch)
    assert log.end_offset("jobs") == 0


# Consumer groups.


def test_a_session_timeout_that_is_not_positive_is_refused(log_backend):
    log = log_backend.open()
    log.create_topic("commands", TopicPolicy(compacted=True))
    for session_s in (0.0, -1.0):
        with pytest.raises(LogError, match="session timeout must be greater than 0"):
            log.member(GROUP, "commands", "a", session_timeout_s=session_s)


def test_committed_offsets_survive_closing_and_reopening(log_backend):
    log = log_backend.open()
    log.create_topic("jobs", TopicPolicy())
    log.append_batch("jobs", [(f"k{i}", b"v") for i in range(5)])
    assert log.committed(GROUP, "jobs") is None
    log.commit(GROUP, "jobs", 3)
    assert log_backend.open().committed(GROUP, "jobs") == 3
    assert log.committed("others", "jobs") is None
    log.close()

    again = log_backend.open()
    assert again.committed(GROUP, "jobs") == 3
    again.commit(GROUP, "jobs", 5)  # the end: everything consumed
    assert again.committed(GROUP, "jobs") == 5
    assert [r.offset for r in again.read("jobs", again.committed(GROUP, "jobs"))] == []


def test_one_owner_among_two_members(log_backend):
    log = log_backend.open()
    log.create_topic("commands", TopicPolicy(compacted=True))
    s = log_backend.session_s
    a = log.member(GROUP, "commands", "a", session_timeout_s=s)
    b = log_backend.open().member(GROUP, "commands", "b", session_timeout_s=s)
    assert a.member_id == "a"

    epochs = wait_until(
        lambda: any(_owner_epochs(a, b)) and _owner_epochs(a, b), log_backend.takeover_s
    )
    owners = [i for i, e in enumerate(epochs) if e is not None]
    assert len(owners) == 1
    for _ in range(5):  # and it stays that way while both keep polling
        again = _owner_epochs(a, b)
        assert [i for i, e in enumerate(again) if e is not None] == owners
        assert again[owners[0]] == epochs[owners[0]]


def test_closing_the_owner_hands_over_with_a_higher_epoch(log_backend):
    log = log_backend.open()
    log.create_topic("commands", TopicPolicy(compacted=True))
    s = log_backend.session_s
    a = log.member(GROUP, "commands", "a", session_timeout_s=s)
    first = wait_until(a.poll, log_backend.takeover_s)
    b = log_backend.open().member(GROUP, "commands", "b", session_timeout_s=s)
    assert b.poll() is None
    a.close()
    assert a.poll() is None
    second = wait_until(b.poll, log_backend.takeover_s)
    assert second > first


def test_a_member_id_reused_by_another_handle_is_a_new_owner(log_backend):
    # A restarted process that reuses its member id must not inherit the old epoch.
    log = log_backend.open()
    log.create_topic("commands", TopicPolicy(compacted=True))
    s = log_backend.session_s
    old = log.member(GROUP, "commands", "a", session_timeout_s=s)
    first = wait_until(old.poll, log_backend.takeover_s)
    new = log_backend.open().member(GROUP, "commands", "a", session_timeout_s=s)
    assert new.poll() is None
    old.close()
    assert wait_until(new.poll, log_backend.takeover_s) > first


def test_closed_handles_refuse_work_and_their_members_stop(log_backend):
    log = log_backend.open()
    log.create_topic("commands", TopicPolicy(compacted=True))
    member = log.member(GROUP, "commands", "a", session_timeout_s=log_backend.session_s)
    wait_until(member.poll, log_backend.takeover_s)
    log.close()
    log.close()
    assert member.poll() is None
    with pytest.raises(LogError):
        log.end_offset("commands")


def test_silent_owner_is_replaced_and_its_late_write_fenced(log_backend):
    log = log_backend.open()
    log.create_topic("commands", TopicPolicy(compacted=True))
    log.create_topic("assignments", TopicPolicy(compacted=True))
    s = log_backend.session_s
    stalled = log.member(GROUP, "commands", "a", session_timeout_s=s)
    first = wait_until(stalled.poll, log_backend.takeover_s)
    log.append("assignments", "job:1", b"by a", fence=Fence(GROUP, first))

    other = log_backend.open()
    successor = other.member(GROUP, "commands", "b", session_timeout_s=s)
    assert successor.poll() is None
    log_backend.expire(s + 0.1)  # "a" stops polling for longer than its session
    second = wait_until(successor.poll, log_backend.takeover_s)
    assert second > first
    other.append("assignments", "job:1", b"by b", fence=Fence(GROUP, second))

    with pytest.raises(FencedError):  # "a" wakes up late and tries to write
        log.append("assignments", "job:1", b"late a", fence=Fence(GROUP, first))
    assert stalled.poll() is None
    assert [(r.value, r.epoch) for r in log.read("assignments")] == [
        (b"by a", first),
        (b"by b", second),
    ]
    assert log.latest("assignments")["job:1"].value == b"by b"


def test_fenced_appends_need_the_current_epoch(log_backend):
    log = log_backend.open()
    log.create_topic("commands", TopicPolicy(compacted=True))
    log.create_topic("assignments", TopicPolicy(compacted=True))
    with pytest.raises(FencedError):  # nobody ever owned the group
        log.append("assignments", "job:1", b"x", fence=Fence(GROUP, 1))

    member = log.member(GROUP, "commands", "a", session_timeout_s=log_backend.session_s)
    epoch = wait_until(member.poll, log_backend.takeover_s)
    assert log.append("assignments", "job:1", b"a", fence=Fence(GROUP, epoch)) == 0
    assert log.append_batch(
        "assignments", [("job:2", b"b"), ("job:3", None)], fence=Fence(GROUP, epoch)
    ) == [1, 2]
    assert log.append("assignments", "job:4", b"unfenced") == 3
    with pytest.raises(FencedError):
        log.append("assignments", "job:1", b"future", fence=Fence(GROUP, epoch + 1))
    with pytest.raises(FencedError):
        log.append_batch("assignments", [("job:1", b"other")], fence=Fence("others", epoch))
    assert [r.epoch for r in log.read("assignments")] == [epoch, epoch, epoch, 0]
    assert log.end_offset("assignments") == 4


def test_sigkilled_owner_is_replaced_from_the_committed_offset(log_backend, children):
    log_backend.require("processes")
    log = log_backend.open()
    log.create_topic("work", TopicPolicy())
    log.append_batch("work", [(f"job:{i}", f"task {i}".encode()) for i in range(10)])
    spec = spec_arg(log_backend.spec())
    session = str(log_backend.session_s)

    a = children("-m", "tests.log.member_proc", spec, "workers", "work", "a", session, "4")
    a.expect("ready")
    first = int(a.expect("owner").split()[1])
    by_a = [int(a.expect("consumed").split()[1]) for _ in range(4)]
    b = children("-m", "tests.log.member_proc", spec, "workers", "work", "b", session)
    b.expect("ready")
    a.kill()

    second = int(b.expect("owner", timeout_s=log_backend.takeover_s).split()[1])
    by_b = [int(b.expect("consumed").split()[1]) for _ in range(6)]
    assert second > first
    assert by_a == [0, 1, 2, 3]
    assert by_b == [4, 5, 6, 7, 8, 9]  # from a's committed offset: nothing skipped

    with pytest.raises(FencedError):  # a deposed owner's epoch writes nothing
        log.append("work", "job:late", b"late", fence=Fence("workers", first))
    assert log.end_offset("work") == 10


# Compaction and retention: the embedded backends do them; Kafka brokers do them alone.


def test_compaction_keeps_the_latest_record_per_key(log_backend):
    log_backend.require("compaction")
    log = log_backend.open()
    log.create_topic("jobs", TopicPolicy(compacted=True))
    log.append_batch(
        "jobs",
        [("a", b"1"), ("b", b"1"), ("a", b"2"), ("c", b"1"), ("b", None), ("a", b"3")],
    )
    (stats,) = log.compact(["jobs"])
    assert (stats.topic, stats.records_before, stats.records_after) == ("jobs", 6, 3)
    assert stats.seconds >= 0
    # Survivors keep their offsets; the tombstone stays until its delete retention ends.
    assert _rows(log.read("jobs")) == [(3, "c", b"1"), (4, "b", None), (5, "a", b"3")]
    assert _rows(log.read("jobs", 1, limit=1)) == [(3, "c", b"1")]
    assert {k: r.offset for k, r in log.latest("jobs").items()} == {"a": 5, "c": 3}
    assert log.end_offset("jobs") == 6
    assert log.append("jobs", "d", b"1") == 6  # never an offset handed out twice
    (info,) = log.topics()
    assert (info.start_offset, info.end_offset, info.records) == (3, 7, 4)
    assert info.bytes == 4 * 1 + 3 * 1  # keys + values of c, b (tombstone), a, d


def test_tombstones_go_after_the_delete_retention(log_backend):
    log_backend.require("compaction")
    log = log_backend.open(delete_retention_ms=60_000)
    log.create_topic("jobs", TopicPolicy(compacted=True))
    log.append_batch("jobs", [("a", b"1"), ("a", None), ("b", b"1")])
    log.compact()
    assert _rows(log.read("jobs")) == [(1, "a", None), (2, "b", b"1")]
    log_backend.clock.advance(61)
    log.compact()
    assert _rows(log.read("jobs")) == [(2, "b", b"1")]
    assert log.append("jobs", "a", b"2") == 3


def test_time_retention_drops_the_oldest_records(log_backend):
    log_backend.require("retention")
    log = log_backend.open()
    log.create_topic("events", TopicPolicy(retention_ms=10_000))
    log.append_batch("events", [("job:1", b"old")] * 3)
    log_backend.clock.advance(6)
    log.append_batch("events", [("job:1", b"young")] * 2)
    log_backend.clock.advance(5)
    (stats,) = log.compact()
    assert (stats.records_before, stats.records_after) == (5, 2)
    assert [r.offset for r in log.read("events")] == [3, 4]
    assert log.latest("events")["job:1"].offset == 4
    assert log.end_offset("events") == 5
    log_backend.clock.advance(60)
    log.compact()
    assert log.read("events") == []
    assert log.latest("events") == {}
    (info,) = log.topics()
    assert (info.start_offset, info.end_offset, info.records, info.bytes) == (5, 5, 0, 0)
    assert log.append("events", "job:2", b"x") == 5


def test_size_retention_keeps_the_newest_records_that_fit(log_backend):
    log_backend.require("retention")
    log = log_backend.open()
    log.create_topic("events", TopicPolicy(retention_bytes=10))
    log.append_batch("events", [(f"k{i}", b"abc") for i in range(5)])  # 5 bytes each
    log.compact()
    assert [r.offset for r in log.read("events")] == [3, 4]
    assert log.topics()[0].bytes == 10


def test_compacted_topic_with_retention_forgets_old_keys(log_backend):
    log_backend.require("retention")
    log = log_backend.open()
    log.create_topic("control", TopicPolicy(compacted=True, retention_ms=10_000))
    log.append_batch("control", [("server:a", b"1"), ("server:b", b"1")])
    log_backend.clock.advance(20)
    log.append("control", "server:a", b"2")
    log.compact(["control"])
    assert _rows(log.read("control")) == [(2, "server:a", b"2")]
    assert sorted(log.latest("control")) == ["server:a"]


def test_compact_every_n_appends(log_backend):
    log_backend.require("compaction")
    log = log_backend.open(compact_every_appends=4)
    log.create_topic("jobs", TopicPolicy(compacted=True))
    log.append_batch("jobs", [("a", b"1"), ("a", b"2"), ("a", b"3")])
    assert len(log.read("jobs")) == 3
    log.append("jobs", "a", b"4")
    assert _rows(log.read("jobs")) == [(3, "a", b"4")]
