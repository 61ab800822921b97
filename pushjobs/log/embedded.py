"""What a handle of an embedded backend (memory, sqlite) keeps besides the data: its
settings, the clock, and the group members it opened.

The two backends differ only in where the data lives (a ``MemoryStore``, a file); both
build on ``EmbeddedLog`` so they read settings, count appends and close members alike.

Killed at any line. Nothing here is durable: a killed handle's members stop polling and
their leases lapse after their session timeout (see ``leases``), and the compaction
count of the restarted handle starts from zero (see ``compaction``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

from pushjobs.clock import Clock, SystemClock
from pushjobs.log.base import AppendByBatch
from pushjobs.log.compaction import Compaction


class _Closes(Protocol):
    def close(self) -> None: ...


M = TypeVar("M", bound=_Closes)


class EmbeddedLog(AppendByBatch, Generic[M]):
    """The settings and members of one embedded handle; the backend owns the locking."""

    def __init__(self, clock: Clock | None, max_value_bytes: int, compaction: Compaction) -> None:
        self.max_value_bytes = max_value_bytes
        self.compaction = compaction
        self._clock: Clock = clock or SystemClock()
        self._members: list[M] = []
        self._shares: list[_Closes] = []  # group() members, closed first

    @property
    def delete_retention_ms(self) -> int:
        return self.compaction.delete_retention_ms

    @property
    def compact_every_appends(self) -> int:
        return self.compaction.every_appends

    # For the members, which take their lease times from their handle's clock.

    def now_ms(self) -> int:
        return self._clock.wall_ms()

    def forget(self, member: M) -> None:
        if member in self._members:
            self._members.remove(member)

    @contextlib.contextmanager
    def batch(self, what: str, *, synced: bool = True) -> Iterator[None]:
        """Several membership writes as one (``EmulatedShare.poll``); nothing to gather in
        memory. The sqlite backend makes them one transaction: one fsync, not one each."""
        yield

    def forget_share(self, share: _Closes) -> None:
        if share in self._shares:
            self._shares.remove(share)

    def _close_members(self) -> None:
        for share in list(self._shares):
            share.close()
        for member in list(self._members):
            member.close()
