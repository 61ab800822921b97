"""Which partition a schedule lives in, and which server owns each partition. Pure.

Theory of operation (DESIGN section 10). The ``schedules`` topic is split into P partition
topics, ``<schedules>.0`` .. ``<schedules>.<P-1>``; a schedule's id hashes to one of them
(SHA-256, so every server and every version agrees). The topic named ``<schedules>``
itself, where the single-owner version kept every schedule, stays one more partition
(``legacy``): its schedules keep living and firing there, nothing new is written to it, so
an upgrade moves nothing.

Each partition has one owner among the live servers, by rendezvous hashing: the server
with the highest hash of (partition, server id) gets it. Every server computes the same
answer from the same member set, with no coordination; a server joining takes about 1/n
of the partitions, each from whoever had it, and a server leaving gives up only its own,
spread over the others (the minimal movement a consistent hash promises).

Killed at any line: nothing is held here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

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


def _score(partition: str, server: str) -> bytes:
    return hashlib.sha256(f"{partition}\x00{server}".encode()).digest()


def owner_of(partition: str, servers: Iterable[str]) -> str | None:
    """The server that owns ``partition`` among ``servers`` (None if there are none)."""
    return max(servers, key=lambda s: (_score(partition, s), s), default=None)


def assign(partitions: Iterable[str], servers: Iterable[str]) -> dict[str, str]:
    """Partition -> owning server; empty when no server is live."""
    live = sorted(set(servers))
    if not live:
        return {}
    return {p: owner_of(p, live) or live[0] for p in partitions}


def mine(assignment: Mapping[str, str], server: str) -> set[str]:
    return {p for p, owner in assignment.items() if owner == server}
