"""When an embedded handle compacts on its own (pure)."""

from __future__ import annotations

from pushjobs.log.compaction import Compaction


def test_a_topic_is_due_once_every_n_appended_records():
    compaction = Compaction(4, 0)
    assert [compaction.due("jobs", 1) for _ in range(8)] == [False, False, False, True] * 2


def test_a_batch_counts_each_of_its_records_and_the_count_restarts_when_due():
    compaction = Compaction(4, 0)
    assert not compaction.due("jobs", 3)
    assert compaction.due("jobs", 5)  # over the mark: due, and nothing carried over
    assert not compaction.due("jobs", 3)
    assert compaction.due("jobs", 1)


def test_topics_are_counted_apart():
    compaction = Compaction(2, 0)
    assert not compaction.due("a", 1)
    assert not compaction.due("b", 1)
    assert compaction.due("a", 1)
    assert compaction.due("b", 1)


def test_zero_never_compacts():
    compaction = Compaction(0, 0)
    assert not any(compaction.due("jobs", 1000) for _ in range(3))


def test_a_new_compaction_starts_from_zero_as_after_a_restart():
    before = Compaction(3, 0)
    assert not before.due("jobs", 2)
    after = Compaction(3, 0)  # the count of a killed process is gone: late, never early
    assert not after.due("jobs", 2)
    assert after.due("jobs", 1)
