"""Which partition a schedule lives in. Pure.

Theory of operation. The ``schedules`` topic is split into P partition
topics, ``<schedules>.0`` .. ``<schedules>.<P-1>``; a schedule's id hashes to one of them
(SHA-256, so every server and every version agrees). The topic named ``<schedules>``
itself, where the single-owner version kept every schedule, stays one more partition
(``legacy``): its schedules keep living and firing there, nothing new is written to it, so
an upgrade moves nothing.

Which server owns each partition is not decided here: the ordered log's group does it
(``shell/schedpartitions.py``).

Killed at any line: nothing is held here.
"""

from __future__ import annotations

import hashlib

DEFAULT_PARTITIONS = 8
MAX_PARTITIONS = 256


def partition_of(schedule_id: str, partitions: int) -> int:
    """The partition of ``schedule_id`` among ``partitions`` (stable across processes)."""
    digest = hashlib.sha256(schedule_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % partitions


def partition_topics(base: str, partitions: int) -> list[str]:
    """Every partition's topic: the legacy ``base`` first, then ``base.0`` .. ``base.<P-1>``."""
    return [base] + [f"{base}.{i}" for i in range(partitions)]


def count_topic(base: str) -> str:
    """Where the installation's partition count is kept (``schedlog.agreed_count``)."""
    return f"{base}.partitions"


def topic_of(base: str, schedule_id: str, partitions: int) -> str:
    """Where a new schedule is written."""
    return f"{base}.{partition_of(schedule_id, partitions)}"
