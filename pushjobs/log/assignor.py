"""Which member of a group owns each of the group's topics, on the embedded backends. Pure.

Theory of operation. Kafka's group protocol assigns a group's partitions to its members;
the embedded backends (memory, sqlite) emulate it (``shares``) with this assignment,
which every member computes alike from the same set of live members, with no
coordinator and no state of its own.

Balanced rendezvous hashing. Every (topic, member) pair has a score (SHA-256 of both,
so every process and version agrees). Pairs are taken best score first; a pair is kept
if its topic is still unassigned and its member has room: with P topics and N members,
each member takes ``P // N`` topics and ``P % N`` of them one more. So every member owns
floor or ceil of P/N. As with plain rendezvous hashing, a topic's owner depends only on
the scores of the members present: a member that joins takes mostly topics it scores
best on, and one that leaves gives its topics to those that score next best; the room
limits move a few more so that the counts stay even.

Killed at any line: nothing is held here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def _score(topic: str, member: str) -> bytes:
    return hashlib.sha256(f"{topic}\x00{member}".encode()).digest()


def assign(topics: Iterable[str], members: Iterable[str]) -> dict[str, str]:
    """Topic -> owning member, each member owning floor or ceil of P/N; empty if no member."""
    live = sorted(set(members))
    names = sorted(set(topics))
    if not live or not names:
        return {}
    base, extra = divmod(len(names), len(live))
    pairs = sorted(((_score(t, m), t, m) for t in names for m in live), reverse=True)
    counts = dict.fromkeys(live, 0)
    out: dict[str, str] = {}
    for _, topic, member in pairs:
        held = counts[member]
        if topic in out or held > base or (held == base and extra == 0):
            continue
        if held == base:
            extra -= 1
        counts[member] = held + 1
        out[topic] = member
        if len(out) == len(names):
            break
    return out


def owned_by(assignment: dict[str, str], member: str) -> set[str]:
    return {topic for topic, owner in assignment.items() if owner == member}
