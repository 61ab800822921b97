"""The ``schedules`` topic read back: each key's latest value, a page at a time.

A new leader reads every schedule at once; with 100,000 of them the topic must not be in
memory whole (``OrderedLog.latest`` would hold every record): two passes over pages, the
first finding where each key's latest record is, the second yielding just those.
"""

from __future__ import annotations

from collections.abc import Iterator

from pushjobs.log.base import OrderedLog, Record

PAGE = 2000  # records read at once


def key_of(schedule_id: str) -> str:
    return f"schedule:{schedule_id}"


def latest_values(log: OrderedLog, topic: str) -> Iterator[tuple[str, bytes]]:
    """(key, value) of each key's latest record, tombstoned keys left out."""
    end = log.end_offset(topic)
    latest: dict[str, int] = {}
    for record in _pages(log, topic, end):
        latest[record.key] = record.offset
    for record in _pages(log, topic, end):
        if latest.get(record.key) == record.offset and record.value is not None:
            yield record.key, record.value


def _pages(log: OrderedLog, topic: str, end: int) -> Iterator[Record]:
    offset = 0
    while offset < end:
        page = log.read(topic, offset, PAGE)
        if not page:
            return
        yield from (r for r in page if r.offset < end)
        offset = page[-1].offset + 1
