"""The audit check on hand-made logs: a clean one passes, and each way of tampering with
one is named at its spot (topic, offset, what)."""

import orjson
import pytest

from pushjobs.audit.chain import fresh
from pushjobs.audit.verifier import (
    ALTERED,
    BAD_SIGNATURE,
    MISSING,
    REORDERED,
    UNCHAINED,
    ChainStart,
    TopicRecords,
    verify,
)
from pushjobs.log.base import Record
from tests.audit.trail import AUDIT, Trail, keypair

SIGNER, VERIFIER = keypair()


def trail(n: int = 6) -> Trail:
    t = Trail(SIGNER, compacted={"commands"})
    for i in range(n):
        t.event("events", i, key=f"job:{i % 2}")
        t.append("commands", [(f"job:{i}", orjson.dumps({"type": "start", "by": "alice"}))])
    t.append("commands", [("job:0", None)])  # a passenger: folded into the stream
    t.checkpoint()
    return t


def first(t: Trail) -> tuple[str, int, str]:
    report = t.check(VERIFIER)
    assert report.first is not None, "tampering went unnoticed"
    return report.first.topic, report.first.offset, report.first.what


def test_a_clean_log_verifies_and_every_record_is_sealed():
    report = trail().check(VERIFIER)
    assert report.ok, report.problems
    assert report.checkpoints == 1
    assert report.topics["events"].sealed == 6 and report.topics["events"].unsealed == 0
    assert report.topics["commands"].sealed == 7


def test_records_after_the_last_checkpoint_are_unsealed_not_wrong():
    t = trail()
    t.event("events", 99)
    report = t.check(VERIFIER)
    assert report.ok and report.topics["events"].unsealed == 1


def test_a_byte_changed_is_named():
    t = trail()
    t.change_byte("events", 2, b'"n":2', b'"n":7')
    assert first(t) == ("events", 2, ALTERED)


def test_a_byte_changed_in_the_link_itself_is_named():
    t = trail()
    t.change_byte("events", 3, b'"seq":3', b'"seq":4')
    assert first(t)[:2] == ("events", 3)


def test_the_last_record_changed_is_caught_by_the_checkpoint():
    t = trail()
    t.change_byte("events", 5, b'"n":5', b'"n":8')
    assert first(t) == ("events", 5, ALTERED)


def test_a_record_removed_is_named():
    t = trail()
    t.remove("events", 3)
    topic, offset, what = first(t)
    assert (topic, what) == ("events", MISSING) and offset == 4


def test_the_tail_cut_off_is_missing():
    t = trail()
    t.remove("events", 5)
    assert first(t)[::2] == ("events", MISSING)


def test_two_records_swapped_are_reordered():
    t = trail()
    t.swap("events", 2)
    assert first(t) == ("events", 2, REORDERED)


def test_a_checkpoint_forged_with_another_key_is_a_bad_signature():
    t = trail()
    # The forger rewrites a record, chains everything after it again and signs with
    # a key of their own: the chain holds, the signature does not.
    forged = Trail(keypair()[0], compacted={"commands"})
    for i in range(6):
        forged.event("events", 100 if i == 2 else i, key=f"job:{i % 2}")
    forged.checkpoint()
    t.topics["events"] = forged.topics["events"]
    t.topics[AUDIT] = forged.topics[AUDIT]
    assert first(t)[::2] == ("events", ALTERED) or first(t)[2] == BAD_SIGNATURE
    assert BAD_SIGNATURE in {p.what for p in t.check(VERIFIER).problems}


def test_a_checkpoint_altered_is_a_bad_signature():
    t = trail()
    t.change_byte(AUDIT, 0, b'"ts":1', b'"ts":2')
    report = t.check(VERIFIER)
    assert BAD_SIGNATURE in {p.what for p in report.problems}


def test_compaction_keeps_the_log_verifiable():
    t = Trail(SIGNER, compacted={"assignments"})
    for i, key in enumerate("abbaa"):
        t.append("assignments", [(f"job:{key}", orjson.dumps({"v": i}))])
        t.checkpoint()
    t.compact("assignments")
    report = t.check(VERIFIER)
    assert report.ok, report.problems
    assert report.topics["assignments"].compacted_gaps >= 1


def test_a_kept_record_altered_after_compaction_is_named():
    t = Trail(SIGNER, compacted={"assignments"})
    for i in range(5):
        t.append("assignments", [(f"job:{i % 2}", orjson.dumps({"v": i}))])
    t.checkpoint()
    t.compact("assignments")
    t.change_byte("assignments", 3, b'"v":3', b'"v":9')
    assert first(t) == ("assignments", 3, ALTERED)


def test_a_kept_record_removed_after_compaction_is_missing():
    t = Trail(SIGNER, compacted={"assignments"})
    for i in range(5):
        t.append("assignments", [(f"job:{i}", orjson.dumps({"v": i}))])
    t.checkpoint()
    t.remove("assignments", 2)
    assert first(t)[::2] == ("assignments", MISSING)


def test_an_unchained_record_slipped_in_is_named():
    t = trail()
    t.topics["events"].append(Record("events", 6, "job:9", b'{"kind":"job_created"}', 0))
    assert first(t) == ("events", 6, UNCHAINED)


def test_records_from_before_the_trail_are_legacy():
    t = Trail(SIGNER)
    t.topics["events"] = [Record("events", 0, "job:0", b'{"old":true}', 0)]
    t.event("events", 1)
    t.topics["events"][1] = Record("events", 1, "job:1", t.topics["events"][1].value, 0)
    t.checkpoint()
    report = t.check(VERIFIER)
    assert report.ok and report.topics["events"].legacy == 1


@pytest.mark.parametrize("by", ["leader", "owner"])
def test_two_streams_in_one_topic_are_checked_apart(by):
    t = Trail(SIGNER)
    for i in range(4):
        t.event("schedules", i, key=f"schedule:{i}", by="leader")
        t.event("schedules", i, key=f"fire:{i}", by="owner")
    t.checkpoint()
    assert t.check(VERIFIER).ok
    offset = next(
        r.offset for r in t.topics["schedules"] if f'"by":"{by}","seq":1'.encode() in r.value
    )
    t.change_byte("schedules", offset, b'"n":1', b'"n":5')
    assert first(t) == ("schedules", offset, ALTERED)


def test_a_topic_with_writers_outside_the_servers_counts_their_records():
    t = trail()
    t.topics["commands"].append(Record("commands", 99, "job:9", b'{"by":"admin"}', 0))
    t.event("commands", 7, key="job:7")  # the chain goes on past it
    t.checkpoint()
    topics = [
        TopicRecords(name, name in t.compacted, recs, outside_writers=name == "commands")
        for name, recs in t.topics.items()
        if name != AUDIT
    ]
    report = verify(topics, TopicRecords(AUDIT, False, t.topics[AUDIT]), VERIFIER)
    assert report.ok, report.problems
    assert report.topics["commands"].outside == 1


def test_two_streams_interleaving_their_tombstones_each_fold_their_own():
    t = Trail(SIGNER, compacted={"schedules"})
    t.event("schedules", 0, key="schedule:a", by="leader")
    t.event("schedules", 0, key="fire:a", by="owner")
    t.append("schedules", [("schedule:a", None)], by="leader")  # deleted...
    t.append("schedules", [("fire:a", None)], by="owner")  # ...and its owner follows
    t.checkpoint()  # both heads are tombstones
    t.event("schedules", 1, key="fire:b", by="owner")
    t.event("schedules", 1, key="schedule:b", by="leader")
    t.checkpoint()
    report = t.check(VERIFIER)
    assert report.ok, report.problems
    assert report.topics["schedules"].sealed == 6


# --- chains that start over (a writer's bounded read back found no head) --------------


def test_a_chain_started_over_after_records_from_before_the_trail_is_said_not_wrong():
    t = Trail(SIGNER, compacted={"commands"})
    t.legacy("commands", 10)
    t.start_over("commands")  # the writer read back part of the ten and found no chain
    t.append("commands", [("job:old3", None)])  # a passenger first: it starts the chain
    t.append("commands", [("job:1", orjson.dumps({"type": "start"}))])
    t.event("commands", 2, key="job:2")
    t.checkpoint()
    report = t.check(VERIFIER)
    assert report.ok, report.problems
    assert report.starts == [ChainStart("commands", 10, "leader", 10)]
    assert report.topics["commands"].legacy == 10 and report.topics["commands"].sealed == 3


def test_a_chain_started_over_behind_another_streams_records_continues_past_the_old_one():
    # A schedule partition: the leader's last definition far behind its owner's fires.
    t = Trail(SIGNER)
    t.event("schedules", 0, key="schedule:a")
    t.event("schedules", 1, key="schedule:b")
    t.checkpoint()
    for i in range(5):
        t.event("schedules", i, key=f"fire:{i}", by="owner")
    t.start_over("schedules")
    t.event("schedules", 2, key="schedule:c")
    t.event("schedules", 3, key="schedule:d")
    t.checkpoint()
    report = t.check(VERIFIER)
    assert report.ok, report.problems
    assert report.starts == [ChainStart("schedules", 7, "leader", 7)]
    assert report.topics["schedules"].sealed == 9 and report.topics["schedules"].streams == 2
    t.change_byte("schedules", 8, b'"n":3', b'"n":4')  # the new chain is checked as any
    assert first(t) == ("schedules", 8, ALTERED)


def test_a_start_slipped_into_a_chain_is_named():
    t = trail()
    offset = 3  # a record of the chain, rewritten as the start of a new one, numbered after
    value = t.topics["events"][offset].value
    assert value is not None
    forged = value.replace(b'"seq":3,', b'"seq":3,"start":3,', 1)
    t.topics["events"][offset] = Record("events", offset, "job:1", forged, 0)
    topic, at, what = first(t)
    assert (topic, at) == ("events", offset) and what in (REORDERED, ALTERED)


def test_a_start_numbered_past_its_own_offset_is_altered():
    t = Trail(SIGNER)
    t.legacy("events", 2)
    t.heads["events", "leader"] = fresh(50)  # no writer saw an end offset of 50 here
    t.event("events", 1)
    assert first(t) == ("events", 2, ALTERED)


def test_a_sealed_head_cut_before_a_chain_started_over_is_missing():
    t = Trail(SIGNER)
    for n in range(3):
        t.event("events", n)
    t.checkpoint()  # seals seq 2, at offset 2
    t.start_over("events")
    t.event("events", 3)
    t.checkpoint()
    assert t.check(VERIFIER).ok
    t.remove("events", 2)
    assert first(t) == ("events", 3, MISSING)


# --- late writes of a deposed leader (Kafka: the brokers keep them) --------------------


def deposed_trail(late_first: bool) -> Trail:
    """Leader epoch 3 writes seqs 0-2; its successor (epoch 5) continues from seq 2; a
    write epoch 3 had on its way lands before or after the successor's first."""
    t = Trail(SIGNER)
    for n in range(3):
        t.event("events", n, epoch=3)
    t.checkpoint()
    head = t.heads["events", "leader"]
    if late_first:
        t.event("events", 90, epoch=3)  # lands, but the successor had read its head already
        t.heads["events", "leader"] = head
        t.event("events", 3, epoch=5)
    else:
        t.event("events", 3, epoch=5)
        after = t.heads["events", "leader"]
        t.heads["events", "leader"] = head
        t.event("events", 90, epoch=3)
        t.heads["events", "leader"] = after
    t.event("events", 4, epoch=5)
    t.checkpoint()
    return t


def kafka_check(t: Trail, late_writes: bool):
    topics = [
        TopicRecords(n, False, r, late_writes=late_writes)
        for n, r in t.topics.items()
        if n != AUDIT
    ]
    return verify(topics, TopicRecords(AUDIT, False, t.topics[AUDIT]), VERIFIER)


@pytest.mark.parametrize("late_first", [True, False])
def test_a_deposed_leaders_late_write_on_kafka_is_counted_not_tampering(late_first):
    t = deposed_trail(late_first)
    late = next(r.offset for r in t.topics["events"] if b'"n":90' in (r.value or b""))
    report = kafka_check(t, late_writes=True)
    assert report.ok, report.problems
    assert report.topics["events"].deposed == 1 and report.topics["events"].sealed == 5
    # Where the log refuses such writes (SQLite), the same record is tampering.
    assert not kafka_check(t, late_writes=False).ok
    # A record of the successor altered is still named, late write or not.
    successor = next(r.offset for r in t.topics["events"] if b'"n":3' in (r.value or b""))
    t.change_byte("events", successor, b'"n":3', b'"n":7')
    problems = kafka_check(t, late_writes=True).problems
    assert problems and problems[0].offset == successor and late not in {p.offset for p in problems}


def test_the_successors_chain_built_on_a_late_write_keeps_it():
    # The late write landed before the successor read its head: it is in the chain.
    t = Trail(SIGNER)
    for n in range(3):
        t.event("events", n, epoch=3)
    t.event("events", 3, epoch=3)
    t.event("events", 4, epoch=5)
    t.checkpoint()
    report = kafka_check(t, late_writes=True)
    assert report.ok and report.topics["events"].deposed == 0
    assert report.topics["events"].sealed == 5
