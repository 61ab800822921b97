"""The audit check on hand-made logs: a clean one passes, and each way of tampering with
one is named at its spot (topic, offset, what)."""

import orjson
import pytest

from pushjobs.audit.verifier import (
    ALTERED,
    BAD_SIGNATURE,
    MISSING,
    REORDERED,
    UNCHAINED,
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
