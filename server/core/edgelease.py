"""An edge's lease on sending commands: granted by its leader, kept on the edge's clock. Pure.

Theory of operation. An edge cut off from its leader (or from the log the leader needs)
may still hear its nodes: nothing else stops it from sending them the commands it holds
while the leader, which hears nothing from it, declares it lost and has its nodes served
elsewhere. So an edge sends job commands only under a lease, the way the leader acts
only under its own:

- every report the edge sends carries a stamp, the edge's own monotonic clock in ms
  (``stamp``), read before sending;
- the leader answers the reports it reads from a live edge with a grant: the latest
  stamp it read and how long the grant lasts (``grant_ms``), never past the leader's own
  lease, and nothing at all from a server that does not lead;
- the edge's lease then runs to that stamp plus that time (``CommandLease.grant``): from
  before the report was sent, on the clock that stamped it, so no two clocks are ever
  compared and any delay on the way only shortens it.

The leader declares an edge lost after ``LOST_AFTER_INTERVALS`` without a report; the
last report it read was sent at or before that silence began, so a lease of at most
``LEASE_INTERVALS`` (shorter) has lapsed on the edge before the leader acts on the loss.
A leader deposed or stopped grants nothing more, and its edges' leases lapse no later
than its own.
"""

from __future__ import annotations

import math

LEASE_INTERVALS = 2.5  # heartbeat intervals a grant lasts at most
LOST_AFTER_INTERVALS = 3.0  # an edge silent this long is lost (``server.shell.edges``)


def stamp(now: float) -> int:
    """``now`` (monotonic seconds) in whole ms, rounded down: a lease counted from it
    never starts later than the moment it names."""
    return math.floor(now * 1000)


def grant_ms(interval_s: float, leading_for_s: float) -> int:
    """How long a grant lasts: ``LEASE_INTERVALS`` heartbeat intervals, never past the
    leader's own lease (``leading_for_s`` left of it; 0 or less: grant nothing)."""
    return max(0, math.floor(min(LEASE_INTERVALS * interval_s, leading_for_s) * 1000))


class CommandLease:
    """The edge's side: whether it may send job commands now."""

    def __init__(self, interval_s: float) -> None:
        # The edge's own cap: a grant longer than its leader may give is cut to it.
        self.max_ms = math.floor(LEASE_INTERVALS * interval_s * 1000)
        self.until_ms = -math.inf  # never granted yet: no commands

    def grant(self, stamp_ms: int, for_ms: int) -> None:
        """A grant for the report stamped ``stamp_ms``: held until then plus ``for_ms``.
        Grants arrive out of date or out of order; the latest end counts."""
        if for_ms > 0:
            self.until_ms = max(self.until_ms, stamp_ms + min(for_ms, self.max_ms))

    def valid(self, now: float) -> bool:
        return now * 1000 < self.until_ms

    def lapsed_for(self, now: float) -> float:
        """Seconds since the lease ran out (0 while it holds; inf if never granted)."""
        return max(0.0, now - self.until_ms / 1000)
