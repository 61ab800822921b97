"""Latest-value folds (pure): the plain fold and the one that drops deposed leaders."""

from __future__ import annotations

from pushjobs.log.base import Record
from pushjobs.log.fold import fold, fold_fenced


def rec(offset, key, value, epoch=0):
    return Record("t", offset, key, value, 0, epoch)


def test_fold_keeps_the_latest_value_per_key():
    recs = [
        rec(i, k, v)
        for i, (k, v) in enumerate([("a", b"1"), ("a", None), ("b", b"2"), ("b", b"3")])
    ]
    assert {k: r.offset for k, r in fold(recs).items()} == {"b": 3}


def test_fold_fenced_ignores_late_writes_of_deposed_leaders():
    folded = fold_fenced(
        [
            rec(0, "job:1", b"v1", 3),
            rec(1, "job:2", b"v1", 0),
            rec(2, "job:1", b"v2", 5),
            rec(3, "job:1", b"late", 3),  # written by epoch 3 after epoch 5 wrote
            rec(4, "job:3", b"late", 4),
            rec(5, "job:2", None, 0),  # unfenced writers are never dropped
        ]
    )
    assert {k: (r.value, r.epoch) for k, r in folded.items()} == {"job:1": (b"v2", 5)}


def test_fold_fenced_is_the_plain_fold_without_epochs():
    recs = [rec(0, "a", b"1"), rec(1, "b", b"2"), rec(2, "a", None), rec(3, "b", b"3")]
    assert fold_fenced(recs) == fold(recs)


def test_a_dropped_late_tombstone_deletes_nothing():
    folded = fold_fenced([rec(0, "a", b"1", 2), rec(1, "a", None, 1)])
    assert {k: r.value for k, r in folded.items()} == {"a": b"1"}
