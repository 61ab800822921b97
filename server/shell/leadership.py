"""Leadership: the lease on the ``commands`` topic's group, and the fence every write carries.

Theory of operation. Every server of an installation is a member of one group on the
ordered log; the log grants the lease to one member at a time and gives it an epoch that
grows with each new holder. ``renew`` polls the lease a third of a
session apart and says what changed: ``TOOK_OVER`` when this server became leader (or the
epoch moved under it), ``DEPOSED`` when it lost the lease. ``append`` writes with the fence
of the current epoch, so a deposed leader's late write is refused by the log itself; a
refused write stands this server by at once, and the caller hears ``NOT_LEADER``.

A leader acts only while its lease is certainly its own: ``acting(now)`` is false once a
lease session may have passed, on this server's own monotonic clock, since the last poll
that confirmed it (a process stopped for longer than its session must not answer, send or
write as leader on waking before the log has said it still is: ``confirm``). The epoch
fence on every write is the second line.

The member id names this process (``NAME:INCARNATION@HOST/PID``): a server restarted on
the same host finds its predecessor's process gone and takes the lease at once instead
of waiting out the dead one's session (``pushjobs.log.leases``).

What standing by means for the jobs is not this module's business: whoever owns them is
told through ``on_stand_by``.

Killed at any line: nothing here is durable but what the log holds. The lease lapses after
its session; a restarted server joins as a new member and waits for it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from enum import Enum

from pushjobs.api import methods
from pushjobs.errors import ApiError, FencedError
from pushjobs.log.base import Fence, GroupMember, OrderedLog
from pushjobs.log.topics import TopicNames

log = logging.getLogger("pushjobs.server")

SAFE_FRACTION = 0.8  # of a session after a confirmed poll: margin for the log's clock


class Lease(Enum):
    HELD = "held"
    TOOK_OVER = "took_over"
    DEPOSED = "deposed"
    STANDING_BY = "standing_by"


class Leadership:
    def __init__(
        self,
        log_: OrderedLog,
        member: GroupMember,
        group: str,
        *,
        session_s: float,
        unfenced_topic: str,
        control_topic: str | None = None,
    ) -> None:
        self.log = log_
        self.member = member
        self.group = group
        self.session_s = session_s
        # Node events may be written while standing by: they are facts, not decisions. So
        # is a server's membership record on the control topic (``membership.py``): every
        # server says who it is, leader or not. Nothing else: commands and assignments are
        # decisions, and only the leader's fenced writes may make them.
        self.unfenced_topic = unfenced_topic
        self.unfenced = frozenset(t for t in (unfenced_topic, control_topic) if t is not None)
        self.control_topic = control_topic
        self.on_stand_by: Callable[[], None] = lambda: None  # set by the jobs' owner
        self.fence: Fence | None = None
        self.next_renewal = 0.0
        self.valid_until = 0.0  # monotonic: the lease is surely ours until then

    @classmethod
    def join(
        cls, log_: OrderedLog, topics: TopicNames, prefix: str, member_id: str, session_s: float
    ) -> Leadership:
        """Become a member of the installation's leader group; the lease comes with ``renew``."""
        group = prefix + "leader"
        member_id = f"{member_id}@{socket.gethostname()}/{os.getpid()}"
        member = log_.member(group, topics.commands, member_id, session_timeout_s=session_s)
        return cls(
            log_,
            member,
            group,
            session_s=session_s,
            unfenced_topic=topics.events,
            control_topic=topics.control,
        )

    @property
    def leader(self) -> bool:
        return self.fence is not None

    @property
    def epoch(self) -> int | None:
        return self.fence.epoch if self.fence is not None else None

    def acting(self, now: float) -> bool:
        """Leader, and surely still: within a session of the last confirmed poll."""
        return self.fence is not None and now < self.valid_until

    def confirm(self, now: float) -> Lease:
        """Before acting after a gap: renew if the lease may have lapsed (``renew``)."""
        if self.fence is None or now < self.valid_until:
            return Lease.HELD if self.fence is not None else Lease.STANDING_BY
        log.warning("the leader lease may have lapsed (this server was not running): checking")
        lease = self.renew(now)
        if lease is Lease.HELD:
            log.info("the leader lease is still held (epoch %s): acting as leader", self.epoch)
        return lease

    def renew(self, now: float) -> Lease:
        epoch = self.member.poll()
        self.next_renewal = now + self.session_s / 3
        # ``now`` was read before the poll: the lease, renewed by it, lasts at least this.
        self.valid_until = now + self.session_s * SAFE_FRACTION
        if epoch is None:
            if self.fence is None:
                return Lease.STANDING_BY
            log.error("lost the leader lease; standing by")
            self.stand_by()
            return Lease.DEPOSED
        if self.fence is not None and self.fence.epoch == epoch:
            return Lease.HELD
        self.fence = Fence(self.group, epoch)
        return Lease.TOOK_OVER

    def stand_by(self) -> None:
        self.fence = None
        self.on_stand_by()

    def append(self, topic: str, batch: Sequence[tuple[str, bytes | None]]) -> None:
        """Write ``batch`` fenced by this leader's epoch; ``NOT_LEADER`` if it is not one."""
        if not batch:
            return
        if self.fence is None and topic not in self.unfenced:
            raise ApiError("this server is not the leader", code=methods.NOT_LEADER)
        try:
            self.log.append_batch(topic, batch, fence=self.fence)
        except FencedError:
            log.error("a newer leader exists (write to %s fenced); standing by", topic)
            self.stand_by()
            raise ApiError("this server is no longer the leader", code=methods.NOT_LEADER) from None

    def close(self) -> None:
        self.member.close()
