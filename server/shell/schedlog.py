"""The schedule partition topics' records, and reading them back a page at a time.

Two keys per schedule, each with one writer, so no two servers race on a compacted key:

- ``schedule:<id>``: the definition, written by the leader (the API goes to it), fenced
  by its leadership: ``{schedule, from_ms}``, ``from_ms`` being when it was added or
  last resumed (nothing due before that fires); a tombstone deletes it;
- ``fire:<id>``: its fire state, written by the partition's owner, fenced by its
  partition epoch: ``{consumed_ms, last_job, fires, pending}`` (due times settled up to
  ``consumed_ms``; the latest outcomes; the fires of this write, for the leader to start).

A ``schedule:<id>`` record of the single-owner version held both (``consumed_ms`` and the
rest beside the definition): it is read as both.

Reading folds the latest value per key. A fenced record with a lower epoch than one already
read for the same kind of key was written late by a deposed writer (the Kafka backend
cannot refuse it, ``pushjobs/log/fold.py``): it is skipped.

Killed at any line: only reads, and ``agreed_count``'s one write, which a restart finds
(or writes) again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from pushjobs.log.base import OrderedLog, Record, TopicPolicy
from server.core.schedshards import count_topic

log = logging.getLogger("pushjobs.server")

PAGE = 2000  # records read at once
SCHEDULE, FIRE = "schedule:", "fire:"


def key_of(schedule_id: str) -> str:
    return SCHEDULE + schedule_id


def fire_key(schedule_id: str) -> str:
    return FIRE + schedule_id


def split_key(key: str) -> tuple[str, str] | None:
    """(kind, schedule id) of a record key; None for a key of no schedule."""
    for kind in (SCHEDULE, FIRE):
        if key.startswith(kind) and len(key) > len(kind):
            return kind, key[len(kind) :]
    return None


def fire_value(
    consumed_ms: int, last_job: str | None, fires: list[dict[str, Any]], pending: list[Any]
) -> bytes:
    return orjson.dumps(
        {"consumed_ms": consumed_ms, "last_job": last_job, "fires": fires, "pending": pending}
    )


class Fold:
    """The latest value per key of records read in order, late fenced writes skipped."""

    def __init__(self, *, keep: bool = True) -> None:
        self.keep = keep  # the values too (a whole read), or only the epochs (following)
        self.values: dict[str, bytes | None] = {}
        self.highest: dict[str, int] = {}  # kind -> highest epoch read

    def late(self, record: Record) -> bool:
        parsed = split_key(record.key)
        if parsed is None or not record.epoch:
            return False
        kind = parsed[0]
        if record.epoch < self.highest.get(kind, 0):
            return True
        self.highest[kind] = record.epoch
        return False

    def apply(self, records: Iterable[Record]) -> list[Record]:
        """Fold ``records``; the ones that count (not late), in order."""
        kept = [r for r in records if not self.late(r)]
        if self.keep:
            for record in kept:
                self.values[record.key] = record.value
        return kept


def read_all(log: OrderedLog, topic: str) -> tuple[dict[str, bytes], int, Fold]:
    """Every key's latest value (tombstoned keys left out), the offset read up to, and a
    fold to follow the topic with from there (it knows the epochs read)."""
    fold = Fold()
    end = log.end_offset(topic)
    fold.apply(pages(log, topic, 0, end))
    values = {k: v for k, v in fold.values.items() if v is not None}
    fold.keep, fold.values = False, {}
    return values, end, fold


def pages(log: OrderedLog, topic: str, offset: int, end: int) -> Iterator[Record]:
    """The records from ``offset`` up to ``end``, read a page at a time."""
    while offset < end:
        page = log.read(topic, offset, min(PAGE, end - offset))
        if not page:
            return
        yield from (r for r in page if r.offset < end)
        offset = page[-1].offset + 1


def agreed_count(log_: OrderedLog, base: str, wanted: int, server: str) -> int:
    """The installation's partition count: the first one written to ``<base>.partitions``
    (``wanted`` is written if none is). Every server uses that one, whatever its own
    setting says: servers that split schedules differently would leave some unfired.
    Each server writes under its own key, so compaction keeps the first."""
    topic = count_topic(base)
    log_.create_topic(topic, TopicPolicy(compacted=True))
    found = log_.read(topic, 0, 1)
    if not found:
        log_.append(topic, f"partitions:{server}", str(wanted).encode())
        found = log_.read(topic, 0, 1)
    try:
        agreed = int(found[0].value or b"")
    except (IndexError, ValueError):
        return wanted  # unreadable: this server's own setting
    if agreed != wanted:
        log.warning(
            "%d schedule partitions, as the log says (this server's setting: %d)", agreed, wanted
        )
    return agreed
