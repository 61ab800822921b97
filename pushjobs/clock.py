"""Clocks: the only place pushjobs reads time.

Inside, durations and deadlines use monotonic seconds (``monotonic()``); wall time
(``wall_ms()``) is only for the wire and for records. Pure code takes ``now`` as an
argument; daemons read it from a ``Clock`` so tests can inject ``FakeClock``.
"""

from __future__ import annotations

import time
from typing import Protocol

from pushjobs.errors import PushJobsError


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the Unix epoch, for the wire and for records."""
        ...


class SystemClock:
    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told, and only forward."""

    __slots__ = ("_mono", "_wall_ms")

    def __init__(self, monotonic: float = 1000.0, wall_ms: int = 1_700_000_000_000) -> None:
        self._mono = monotonic
        self._wall_ms = wall_ms

    def monotonic(self) -> float:
        return self._mono

    def wall_ms(self) -> int:
        return self._wall_ms

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise PushJobsError(f"a FakeClock cannot go backwards (advance by {seconds})")
        self._mono += seconds
        self._wall_ms += round(seconds * 1000)
