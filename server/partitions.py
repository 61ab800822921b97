"""This server's share of the schedule partitions: a lease on each one assigned to it.

Theory of operation (DESIGN section 10). Each partition topic has its own consumer group
(``<topic>.owner``) and so its own lease and fencing epoch (``pushjobs/log/base.py``: a
single-partition topic has at most one owner). ``renew(live)`` computes the assignment of
every partition over the live servers (``shards.assign``, rendezvous hashing: every server
computes the same one), joins the group of each partition assigned here, closes its
membership of each partition no longer assigned here (which hands the lease over at
once), and polls every membership it holds: it answers which partitions this server
gained (a new epoch: load it, then fire it, fenced by that epoch) and which it lost.

A partition whose assignee died is taken by its new assignee once the dead one's lease
runs out (or at once when the log can tell the dead process is gone, ``leases.py``). While
views of who is live differ (a server just joined or just went stale), two servers may
both want a partition: both are members, the log lets one own it, the fence keeps the
other's writes out, and the next renewal settles it.

A write refused by the fence (``lose``) drops the partition until a poll grants it again.

Killed at any line: nothing is durable here; the leases run out and the partitions go to
their next assignees, who read them back from the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from pushjobs.errors import LogError
from pushjobs.log.base import Fence, GroupMember, OrderedLog
from server.shards import assign, mine

log = logging.getLogger("pushjobs.server")


def group_of(topic: str) -> str:
    return f"{topic}.owner"


@dataclass(slots=True)
class Changes:
    gained: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    error: LogError | None = None  # the log failed: what was done before is above


class Partitions:
    def __init__(
        self,
        log_: OrderedLog,
        topics: Iterable[str],
        *,
        server_id: str,
        member_id: str,
        session_s: float,
    ) -> None:
        self.log = log_
        self.topics = list(topics)
        self.server_id = server_id  # as the assignment knows it (``name:incarnation``)
        self.member_id = member_id  # as the log's leases know it (``...@HOST/PID``)
        self.session_s = session_s
        self.members: dict[str, GroupMember] = {}
        self.fences: dict[str, Fence] = {}

    def owned(self) -> set[str]:
        return set(self.fences)

    def fence(self, topic: str) -> Fence | None:
        return self.fences.get(topic)

    def renew(self, live: Iterable[str]) -> Changes:
        """Follow the assignment over ``live`` (this server counts as live) and poll."""
        out = Changes()
        wanted = mine(assign(self.topics, {*live, self.server_id}), self.server_id)
        for topic in sorted(set(self.members) - wanted):
            self.release(topic, out)
        try:
            for topic in sorted(wanted - set(self.members)):
                self.members[topic] = self.log.member(
                    group_of(topic), topic, self.member_id, session_timeout_s=self.session_s
                )
            for topic, member in sorted(self.members.items()):
                self._poll(topic, member, out)
        except LogError as exc:
            # Keep what is held: the fence refuses any write the log no longer allows.
            out.error = exc
        return out

    def _poll(self, topic: str, member: GroupMember, out: Changes) -> None:
        epoch = member.poll()
        held = self.fences.get(topic)
        if epoch is None:
            if held is not None:
                del self.fences[topic]
                out.lost.append(topic)
            return
        if held is not None and held.epoch == epoch:
            return
        if held is not None:
            out.lost.append(topic)  # the epoch moved under us: read it back
        self.fences[topic] = Fence(group_of(topic), epoch)
        out.gained.append(topic)

    def release(self, topic: str, out: Changes) -> None:
        """Leave ``topic``'s group: its lease goes to its assignee at once."""
        member = self.members.pop(topic)
        if self.fences.pop(topic, None) is not None:
            out.lost.append(topic)
        try:
            member.close()
        except LogError as exc:
            log.warning("schedule partition %s: could not leave its group: %s", topic, exc)

    def lose(self, topic: str) -> None:
        """A write on ``topic`` was fenced: not ours until a poll says so again."""
        self.fences.pop(topic, None)

    def close(self) -> None:
        changes = Changes()
        for topic in list(self.members):
            self.release(topic, changes)
