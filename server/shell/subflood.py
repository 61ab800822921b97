"""Insiders flooding the heartbeat socket with subscriptions: who, and until when. Pure.

Theory of operation. An agent sends one subscription per connection, the empty one (and
its cancel when it goes). libzmq's XPUB moves every subscription it reads into one queue
of its own, ahead of the loop and without a bound, so a holder of an accepted node key
sending small subscriptions faster than the loop reads them grew server memory for as
long as it kept on (+879 MB in 8 s at 74,000 a second). The HWM does not help: the queue
is the socket's, not a connection's.

So the loop counts, per client key (the CurveZMQ key ZAP admitted: a message's
``User-Id``), the subscriptions that are not the empty one (``off_protocol``). A key with
``threshold`` of them in one turn is cut off for ``cut_off_s`` (``end_turn``): ZAP refuses
its handshakes (``refused``) and the socket drops its connections (``server.shell.channels``).
An agent never sends one, so only a flooder (or a stolen key: its node goes offline with
it, which is what an operator should see) is cut off.

Killed at any line: everything here is in memory. A restarted server admits the key
again and cuts it off at its first flooding turn.
"""

from __future__ import annotations

from collections import Counter

THRESHOLD = 100  # off-protocol subscriptions from one key in one turn
CUT_OFF_S = 60.0


class FloodGuard:
    def __init__(self, threshold: int = THRESHOLD, cut_off_s: float = CUT_OFF_S) -> None:
        self.threshold = threshold
        self.cut_off_s = cut_off_s
        self.turn: Counter[str] = Counter()
        # Read by the ZAP thread: replaced whole, never mutated in place.
        self.until: dict[str, float] = {}
        self.total = 0  # keys cut off since start

    def off_protocol(self, key: str) -> None:
        """``key`` sent a subscription that is not the empty one this turn."""
        self.turn[key] += 1

    def end_turn(self, now: float) -> set[str]:
        """The keys to cut off now (``threshold`` this turn); the turn's counts restart."""
        live = {key: t for key, t in self.until.items() if t > now}
        # A key cut off already may still have some of its flood queued: no second cut.
        flooding = {k for k, n in self.turn.items() if n >= self.threshold and k not in live}
        self.turn = Counter()
        if flooding:
            live.update(dict.fromkeys(flooding, now + self.cut_off_s))
            self.total += len(flooding)
        if flooding or len(live) != len(self.until):
            self.until = live
        return flooding

    def refused(self, key: str, now: float) -> bool:
        """Whether ZAP refuses ``key`` at ``now`` (it was cut off less than ``cut_off_s`` ago)."""
        return self.until.get(key, 0.0) > now
