"""Latest-value folds: what a reader of a compacted topic sees, from its records in order.

Pure: no I/O, no clock. ``fold`` is the plain fold every compacted topic means (the
latest record per key, tombstoned keys removed): the embedded backends keep its result
as they append, so only readers of a full scan call it. ``fold_fenced`` is the fold of
the Kafka backend, whose broker cannot refuse a deposed leader's late write: the fold
drops such writes instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pushjobs.log.base import Record


def fold(records: Iterable[Record]) -> dict[str, Record]:
    """The latest record per key, tombstoned keys removed."""
    latest: dict[str, Record] = {}
    for rec in records:
        if rec.value is None:
            latest.pop(rec.key, None)
        else:
            latest[rec.key] = rec
    return latest


def fold_fenced(records: Iterable[Record]) -> dict[str, Record]:
    """``fold``, late writes of deposed leaders dropped.

    A fenced record (epoch > 0) whose epoch is lower than one already seen in the topic was
    written by a leader after its successor had written: it is ignored.
    """
    return fold(_without_deposed(records))


def _without_deposed(records: Iterable[Record]) -> Iterator[Record]:
    highest_epoch = 0
    for rec in records:
        if rec.epoch:
            if rec.epoch < highest_epoch:
                continue
            highest_epoch = rec.epoch
        yield rec
