"""A server that hangs up on a call: seen at once, not after the call's silence.

Theory of operation. A DEALER socket does not tell its owner that its peer went away: it
reconnects quietly, and a request parked on a server that died (a ``job.watch`` long poll
waits up to its ``wait_s``) would be silence until the call's budget ends. The socket
monitor does tell: libzmq reports ``EVENT_DISCONNECTED`` when a connection ends, at once
when the peer's process dies (its kernel closes the connection). A SIGSTOPped server
keeps its connections: that stays silence, bounded as before.

A refused handshake ends in a disconnect as well (libzmq reports both), so only a
disconnect after a handshake that succeeded is a hang-up: the server this socket talked
to went away. A connection that could not be made at all (``EVENT_CONNECT_RETRIED``
before any ``EVENT_CONNECTED``: the port refused it, nothing listens there) is known as
soon as the connect fails: a client with other servers to ask moves on at once instead of
giving a dead one its share of the timeout.

``PeerLink`` (pure) folds the monitor's events into those verdicts, per request: ``arm``
as a request leaves, ``hung_up`` and ``nobody_listens`` while it waits. ``LinkMonitor`` is the
thin I/O half: the socket's one monitor (libzmq allows one per socket), asked for the
handshake events ``pushjobs.transport.handshake`` judges and for disconnects, drained
without blocking into both.

Nothing here is stored: killed at any line, the monitor dies with the process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

from pushjobs.transport.handshake import (
    EVENTS,
    SUCCEEDED,
    Event,
    HandshakeMonitor,
    Refusal,
    connect_with,
)

DISCONNECTED = int(zmq.EVENT_DISCONNECTED)
CONNECTED = int(zmq.EVENT_CONNECTED)
RETRIED = int(zmq.EVENT_CONNECT_RETRIED)


class PeerLink:
    """Whether the peer hung up during a request (pure): a disconnect after a handshake
    that succeeded, seen since ``arm``."""

    def __init__(self) -> None:
        self.up = False  # a handshake succeeded and no disconnect followed
        self.lost = False
        self.connected = False  # a connection was made, at least once
        self.refused = False  # a connect failed before any was made: nothing listens

    def arm(self) -> None:
        """A request leaves now: only a hang-up from here on concerns it."""
        self.lost = False

    def see(self, event: Event) -> None:
        if event.event == CONNECTED:
            self.connected = True
        elif event.event == RETRIED and not self.connected:
            self.refused = True
        elif event.event == SUCCEEDED:
            self.up = True
        elif event.event == DISCONNECTED and self.up:
            self.up = False
            self.lost = True


class LinkMonitor(HandshakeMonitor):
    """The handshakes and the hang-ups of ``sock``, read from its monitor without blocking."""

    def __init__(self, sock: zmq.Socket[Any]) -> None:
        super().__init__(sock, events=EVENTS | DISCONNECTED | CONNECTED | RETRIED)
        self.link = PeerLink()

    def read(self, each: Callable[[Event], None] | None = None) -> list[Refusal]:
        """Hand every event reported since the last read to the tally and the link."""

        def see(event: Event) -> None:
            self.link.see(event)
            if each is not None:
                each(event)

        return super().read(see)

    def arm(self) -> None:
        """A request leaves now (what happened before it is read first)."""
        self.read()
        self.link.arm()

    @property
    def hung_up(self) -> bool:
        self.read()
        return self.link.lost

    @property
    def nobody_listens(self) -> bool:
        """The connect failed before any connection was made (read now)."""
        self.read()
        return self.link.refused


def connect_watched(sock: zmq.Socket[Any], endpoint: str) -> LinkMonitor:
    """Monitor ``sock``, then connect it to ``endpoint``: every event is seen."""
    return connect_with(LinkMonitor(sock), sock, endpoint)
