"""Log compaction on a schedule: compacted topics keep their latest value per key, and
retention drops what is old, every ``compact_every_s`` (0: only ``pushjobs log compact``).

A failure is logged and tried again at the next due time: compaction only saves space.
Killed at any line: each backend compacts in its own transactions (``pushjobs.log``).
"""

from __future__ import annotations

import logging

from pushjobs.clock import Clock
from pushjobs.errors import LogError
from pushjobs.log.base import OrderedLog

log = logging.getLogger("pushjobs.server")


class Compaction:
    def __init__(self, log_: OrderedLog, every_s: float, clock: Clock) -> None:
        self.log = log_
        self.every_s = every_s
        self.clock = clock
        self.next_due = clock.monotonic() + every_s if every_s else None

    def tick(self, now: float) -> None:
        if self.next_due is None or now < self.next_due:
            return
        self.next_due = now + self.every_s
        try:
            stats = self.log.compact()
        except LogError as exc:
            log.error("log compaction failed: %s", exc)
            return
        dropped = sum(s.records_before - s.records_after for s in stats)
        took = self.clock.monotonic() - now
        log.info("log compacted: %d records dropped in %.2f s", dropped, took)
