"""Per-caller rate bounds: a token bucket for each user key that starts work. Pure.

Theory of operation. Each caller (a user's key id) has a bucket holding at most ``burst``
tokens, refilled at ``per_minute`` tokens a minute. A request takes one token; a request
that finds less than one is refused, takes nothing, and is told how long until one is
there, so a client that retries at that pace gets through. A caller not seen before starts
with a full bucket. Time comes in as monotonic milliseconds: nothing here reads a clock. A
``now_ms`` earlier than the last one seen for a caller refills nothing.

Memory: one bucket per caller seen lately. A full bucket says no more than no bucket, so
the full ones are forgotten whenever the table outgrows ``max_callers`` (callers are
accepted keys, whose number is an admin's choice: this only keeps the table from growing
with every key that ever asked).

Killed at any line: the buckets are not kept; after a restart every caller starts full, so
a restart gives a caller at most one more burst.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MS_PER_MINUTE = 60_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_ms: int


class RateQuota:
    def __init__(self, per_minute: float, burst: int, *, max_callers: int = 10_000) -> None:
        if not (0 < per_minute < math.inf) or burst < 1:  # NaN and inf too
            raise ValueError("a rate quota needs a finite per_minute > 0 and burst >= 1")
        self.per_minute = per_minute
        self.burst = burst
        self.ms_per_token = MS_PER_MINUTE / per_minute
        self.max_callers = max_callers
        self._buckets: dict[str, _Bucket] = {}
        # Forgetting full buckets costs a pass over the table: at most once per doubling.
        self._prune_at = max_callers

    def take(self, caller: str, now_ms: int) -> int:
        """Take a token for ``caller``: 0 if there was one, else the milliseconds until
        there will be (and nothing is taken)."""
        bucket = self._bucket(caller, now_ms)
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0
        return max(1, math.ceil((1 - bucket.tokens) * self.ms_per_token))

    def tokens(self, caller: str, now_ms: int) -> float:
        """What ``caller`` has now (``burst`` for a caller with no bucket)."""
        bucket = self._buckets.get(caller)
        if bucket is None:
            return float(self.burst)
        return self._refill(bucket, now_ms).tokens

    def __len__(self) -> int:
        return len(self._buckets)

    def _bucket(self, caller: str, now_ms: int) -> _Bucket:
        bucket = self._buckets.get(caller)
        if bucket is not None:
            return self._refill(bucket, now_ms)
        if len(self._buckets) >= self._prune_at:
            self._forget_full(now_ms)
        bucket = self._buckets[caller] = _Bucket(float(self.burst), now_ms)
        return bucket

    def _refill(self, bucket: _Bucket, now_ms: int) -> _Bucket:
        elapsed = now_ms - bucket.at_ms
        if elapsed > 0:
            bucket.tokens = min(float(self.burst), bucket.tokens + elapsed / self.ms_per_token)
            bucket.at_ms = now_ms
        return bucket

    def _forget_full(self, now_ms: int) -> None:
        full = [
            caller
            for caller, bucket in self._buckets.items()
            if self._refill(bucket, now_ms).tokens >= self.burst
        ]
        for caller in full:
            del self._buckets[caller]
        self._prune_at = max(self.max_callers, 2 * len(self._buckets))
