"""This server's share of the schedule partitions, as the ordered log's group assigns it.

Theory of operation. Every server, leader or standby, is a member of
the ``schedulers`` group over every partition topic (``OrderedLog.group``): the log
assigns the partitions to the group's live members, evenly, and moves them when servers
join or leave (Kafka's group protocol on Kafka; the same assignment emulated on the
embedded backends, ``pushjobs/log/shares.py``). Each partition has its own fencing epoch.
``renew()`` polls the membership: it answers which partitions this server gained (a new
epoch: load it, then fire it, fenced by that epoch) and which it lost.

A partition moves only once its previous owner gave it up (it polled and was told to, or
closed) or its session ran out, so two servers never own one at once; the fence keeps a
deposed owner's late writes out.

A write refused by the fence (``lose``) drops the partition until a poll grants it again.

Killed at any line: nothing is durable here; the membership runs out with its session
and the partitions go to the other members, who read them back from the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from pushjobs.errors import LogError
from pushjobs.log.base import Fence, GroupShare, OrderedLog

log = logging.getLogger("pushjobs.server")


def group_of(base: str) -> str:
    """The group of the servers firing ``base``'s partitions: ``pushjobs.schedulers``."""
    return f"{base.removesuffix('schedules')}schedulers"


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
        group: str,
        member_id: str,
        session_s: float,
    ) -> None:
        self.log = log_
        self.topics = list(topics)
        self.group = group
        self.member_id = member_id  # as the log knows it (``name:incarnation@HOST/PID``)
        self.session_s = session_s
        self.share: GroupShare | None = None  # joined at the first renewal
        self.fences: dict[str, Fence] = {}

    def owned(self) -> set[str]:
        return set(self.fences)

    def fence(self, topic: str) -> Fence | None:
        return self.fences.get(topic)

    def renew(self) -> Changes:
        """Heartbeat the membership; what was gained and lost since the last renewal."""
        out = Changes()
        try:
            if self.share is None:
                self.share = self.log.group(
                    self.group, self.topics, self.member_id, session_timeout_s=self.session_s
                )
            owned = self.share.poll()
        except LogError as exc:
            # Keep what is held: the fence refuses any write the log no longer allows.
            out.error = exc
            return out
        for topic in sorted(set(self.fences) - set(owned)):
            del self.fences[topic]
            out.lost.append(topic)
        for topic, fence in sorted(owned.items()):
            held = self.fences.get(topic)
            if held == fence:
                continue
            if held is not None:
                out.lost.append(topic)  # the epoch moved under us: read it back
            self.fences[topic] = fence
            out.gained.append(topic)
        return out

    def lose(self, topic: str) -> None:
        """A write on ``topic`` was fenced: not ours until a poll says so again."""
        self.fences.pop(topic, None)

    def close(self) -> None:
        """Leave the group: every partition goes to the other members at once."""
        self.fences.clear()
        share, self.share = self.share, None
        if share is None:
            return
        try:
            share.close()
        except LogError as exc:
            log.warning("schedule partitions: could not leave group %s: %s", self.group, exc)
