"""Caps on the API's open connections that strangers meet, per network source and in all.

Theory of operation. Anyone may open a CurveZMQ connection to the API (the server's key
is public), and libzmq holds up to ``API_RCVHWM`` requests per connection ahead of the loop
(~0.7 MB): enrolment spam over 500 connections from one host grew the server by 190 MB in
30 s. So the handshake of a stranger's key (not an accepted node or user key) is refused
while its network source already holds ``per_source`` open API connections, or the API
``total`` in all: ZAP status 300, a temporary failure, which libzmq answers by hanging up
without a word once the handshake times out (``API_HANDSHAKE_MS``, often sooner); the
client's libzmq tries again. Accepted keys are never refused, and they count: a source's
room for strangers is what its known clients leave (an agent holds an API connection
only while it asks for its config, the CLI while a command runs). The loop cannot tell
which open connection holds which key (the monitor names fds, ZAP names keys), hence
the choice.

Two threads share this. The loop reads the API socket's monitor (``server.shell.handshakes``)
and sees each connection from ``EVENT_ACCEPTED`` (its fd, whose peer address is read
then) to ``EVENT_DISCONNECTED`` (the same fd): ``opened``/``closed``, then ``publish``
the counts as one immutable ``Counts``, replaced whole. The ZAP thread decides
(``admit``) from the last counts plus its own admissions since: the counts lag by up to
a turn, and a burst of handshakes inside one turn must not all pass. Each admission gets
a sequence number; the loop reads the last one (``admitted``) before it drains the
monitor, and every connection admitted up to then was accepted before (ZAP runs inside
the handshake), so it is in the counts that follow (``Counts.covers``); later admissions
are added on top. Until the next counts cover it, a connection may count twice: the error
refuses, never admits. The one asking is in the counts unless the loop has not read its
``EVENT_ACCEPTED`` yet: a source may then get one connection more than its cap.

Connections still in their handshake count too (they hold libzmq's buffers): a burst of
strangers from one source larger than its cap is refused whole, and they come back one by
one as their libzmq reconnects.

Refusals are counted (``drops.api.connections_per_source``, ``..._total``) and logged at
most once per ``LOG_EVERY_S`` per source (``lines``). Pure: no clock, no socket. Writers:
the ZAP thread owns the admission ledger, the refusal counters and appends to
``refusals``; the loop owns everything else.

Killed at any line: nothing is stored; a restarted server starts with no connections.
"""

from __future__ import annotations

import ipaddress
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

ADMIT = 200
BUSY = 300  # ZAP's temporary failure: the client may come back later
LOG_EVERY_S = 10.0
REFUSALS_KEPT = 4096  # refusals waiting for the loop's log; beyond, only counted
PER_SOURCE = "connections_per_source"
TOTAL = "connections_total"


def source_of(address: str) -> str:
    """A peer address as one spelling per host (an IPv4-mapped IPv6 address is IPv4)."""
    text = address.strip("[]")
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return text
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


@dataclass(frozen=True, slots=True)
class Counts:
    """Open API connections as the loop last saw them; admissions up to ``covers`` in."""

    by_source: Mapping[str, int] = field(default_factory=dict)
    total: int = 0
    covers: int = 0


class ConnectionCaps:
    def __init__(
        self,
        *,
        per_source: int,
        total: int,
        known: Callable[[str], bool],
        drops: Counter[str] | None = None,
    ) -> None:
        self.per_source = per_source
        self.total = total
        self.known = known
        self.drops: Counter[str] = drops if drops is not None else Counter()
        self.counts = Counts()  # read by the ZAP thread: replaced whole
        # The ZAP thread's: admissions the counts may not cover yet, and refusals.
        self.admitted = 0
        self._recent: deque[tuple[int, str]] = deque()
        self.refused_source = 0
        self.refused_total = 0
        self.refusals: deque[tuple[str, str]] = deque(maxlen=REFUSALS_KEPT)
        # The loop's.
        self._open: dict[int, str] = {}
        self._by_source: Counter[str] = Counter()
        self._held: Counter[tuple[str, str]] = Counter()
        self._next_line: dict[str, float] = {}

    # --- the ZAP thread ------------------------------------------------------------------

    def admit(self, key: str, address: str) -> int:
        """The ZAP status for a handshake of ``key`` from ``address``: 200 or 300."""
        source = source_of(address)
        counts = self.counts
        recent = self._recent
        while recent and recent[0][0] <= counts.covers:
            recent.popleft()
        if not self.known(key):
            mine = counts.by_source.get(source, 0) + sum(1 for _, s in recent if s == source)
            if mine > self.per_source:
                return self._refuse(source, PER_SOURCE)
            if counts.total + len(recent) > self.total:
                return self._refuse(source, TOTAL)
        self.admitted += 1
        recent.append((self.admitted, source))
        return ADMIT

    def _refuse(self, source: str, cap: str) -> int:
        if cap == PER_SOURCE:
            self.refused_source += 1
        else:
            self.refused_total += 1
        self.refusals.append((source, cap))
        return BUSY

    # --- the loop ------------------------------------------------------------------------

    def opened(self, fd: int, address: str) -> None:
        """A connection accepted on ``fd`` (its peer's address; "" if it was gone)."""
        self.closed(fd)  # an fd is reused only once closed: a missed close is this one
        source = source_of(address)
        self._open[fd] = source
        self._by_source[source] += 1

    def closed(self, fd: int) -> None:
        source = self._open.pop(fd, None)
        if source is None:
            return
        self._by_source[source] -= 1
        if self._by_source[source] <= 0:
            del self._by_source[source]

    def publish(self, covers: int) -> None:
        """Hand the counts to the ZAP thread: every admission up to ``covers`` is in them."""
        self.counts = Counts(dict(self._by_source), len(self._open), covers)
        if self.refused_source:
            self.drops[PER_SOURCE] = self.refused_source
        if self.refused_total:
            self.drops[TOTAL] = self.refused_total

    @property
    def open(self) -> int:
        return len(self._open)

    def lines(self, now: float) -> list[str]:
        """Log lines for the refusals so far: at most one per source per ``LOG_EVERY_S``."""
        while self.refusals:
            self._held[self.refusals.popleft()] += 1
        self._next_line = {s: t for s, t in self._next_line.items() if t > now}
        said: list[str] = []
        for (source, cap), count in list(self._held.items()):
            if source in self._next_line:
                continue
            self._next_line[source] = now + LOG_EVERY_S
            del self._held[(source, cap)]
            said.append(self._line(source, cap, count))
        return said

    def due(self) -> float | None:
        """When held refusals may be logged (None: none are held)."""
        times = [self._next_line.get(source, 0.0) for source, _ in self._held]
        return min(times) if times else None

    def _line(self, source: str, cap: str, count: int) -> str:
        what = "a connection" if count == 1 else f"{count} connections"
        if cap == PER_SOURCE:
            why = (
                f"{source or 'the source'} holds {self.per_source} or more open API "
                "connections (server.max_api_connections_per_source)"
            )
        else:
            why = (
                f"the API holds {self.total} or more open connections (server.max_api_connections)"
            )
        return (
            f"api socket: refused {what} from {source or 'an unknown address'} by keys it "
            f"does not know: {why}; accepted keys are still admitted "
            f"({self.refused_source + self.refused_total} since start; at most one line per "
            f"{LOG_EVERY_S:g} s per source)"
        )
