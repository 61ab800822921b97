"""Refused CurveZMQ handshakes on the server's sockets, logged at a bounded rate.

Theory of operation. A client or agent that holds the wrong server key never gets a
request through: the server cannot open its HELLO and drops the connection, and libzmq
reports it only on the socket's monitor (``ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL``, a
cryptographic error; ``..._AUTH`` where ZAP refused a key). Such a peer retries every
100 ms for as long as it runs, so each refusal cannot be a log line: ``RefusalLog`` (pure)
logs the first at once, then at most one line per ``every_s`` with the count since the
last (``due``/``flush`` at the window's end says the rest). ``Handshakes`` is the I/O
half: the monitor of one socket, drained into the log when the loop sees it readable.

The monitor reports the bound endpoint, not the peer's address: the line names the
socket, and what a refused peer most likely has wrong.

Given ``ConnectionCaps`` (``server.shell.conncap``), the same monitor (libzmq allows one per
socket) also counts the socket's open connections per peer address, from
``EVENT_ACCEPTED`` to ``EVENT_DISCONNECTED`` (both carry the connection's fd; the address
is read from a duplicate of the fd, which may be closed, or even reused, by then: the
count stays right, its address may not), and hands the counts to the ZAP thread; its
refusals (ZAP status 300) are logged by the caps, not as wrong keys.

Killed at any line: only counts are lost; nothing is stored.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

import zmq

from pushjobs.transport.handshake import (
    EVENTS,
    Event,
    HandshakeMonitor,
    HandshakeTally,
    Refusal,
)
from server.shell.conncap import BUSY, ConnectionCaps

log = logging.getLogger("pushjobs.server")

EVERY_S = 10.0
ACCEPTED = int(zmq.EVENT_ACCEPTED)
DISCONNECTED = int(zmq.EVENT_DISCONNECTED)


class RefusalLog:
    """Refused handshakes on one socket, turned into at most one line per ``every_s``."""

    def __init__(self, name: str, every_s: float = EVERY_S) -> None:
        self.name = name
        self.every_s = every_s
        self.pending = 0
        self.total = 0
        self.last: Refusal | None = None
        self.next_line_at: float | None = None  # None: the next refusal is logged at once

    def refused(self, refusal: Refusal, now: float) -> str | None:
        """Count one refusal; the line to log now, if one is due."""
        self.pending += 1
        self.total += 1
        self.last = refusal
        return self.flush(now)

    def due(self) -> float | None:
        """When the counted refusals must be logged (None: nothing waits)."""
        return self.next_line_at if self.pending else None

    def flush(self, now: float) -> str | None:
        """The line for the refusals counted so far, if the window allows one now."""
        if not self.pending or (self.next_line_at is not None and now < self.next_line_at):
            return None
        assert self.last is not None  # counted with it
        count, self.pending = self.pending, 0
        self.next_line_at = now + self.every_s
        what = "a CurveZMQ handshake" if count == 1 else f"{count} CurveZMQ handshakes"
        return (
            f"{self.name} socket {self.last.endpoint}: refused {what} "
            f"({self.total} since start): {self.last.peer_cause()} Is the client's "
            f"server_key this server's public key? (at most one line per {self.every_s:g} s)"
        )


class Handshakes:
    """The refused handshakes of ``sock`` (the server's API socket, say), logged; and its
    open connections counted for ``caps``."""

    def __init__(
        self,
        sock: zmq.Socket[Any],
        name: str,
        caps: ConnectionCaps | None = None,
        every_s: float = EVERY_S,
    ) -> None:
        events = EVENTS if caps is None else EVENTS | zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
        # Every failure counts here: the server sees each refused attempt exactly once.
        self.monitor = HandshakeMonitor(sock, HandshakeTally(needed=1), events)
        self.log = RefusalLog(name, every_s)
        self.caps = caps

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """Register this in the loop's poller; ``receive`` when it is readable."""
        return self.monitor.socket

    def receive(self, now: float) -> None:
        caps = self.caps
        # Read before the drain: every connection admitted until now was accepted before.
        covers = 0 if caps is None else caps.admitted
        for refusal in self.monitor.read(None if caps is None else self._count):
            if refusal.kind == "auth" and refusal.value == BUSY:
                continue  # the caps' refusal, logged by them
            self._say(self.log.refused(refusal, now))
        if caps is not None:
            caps.publish(covers)
            for line in caps.lines(now):
                self._say(line)

    def _count(self, event: Event) -> None:
        assert self.caps is not None  # asked for these events only with caps
        if event.event == ACCEPTED:
            self.caps.opened(event.value, peer_address(event.value))
        elif event.event == DISCONNECTED:
            self.caps.closed(event.value)

    def next_deadline(self) -> float | None:
        due = [self.log.due(), None if self.caps is None else self.caps.due()]
        return min((t for t in due if t is not None), default=None)

    def tick(self, now: float) -> None:
        self._say(self.log.flush(now))
        if self.caps is not None:
            for line in self.caps.lines(now):
                self._say(line)

    def close(self) -> None:
        """Before the transport closes: its context cannot end while the monitor is open."""
        self.monitor.close()

    @staticmethod
    def _say(line: str | None) -> None:
        if line is not None:
            log.warning("%s", line)


def peer_address(fd: int) -> str:
    """The peer's address of the connected socket ``fd``; "" if it is not one any more.

    Through a duplicate: a socket object made on ``fd`` itself would close it, under libzmq.
    """
    try:
        dup = os.dup(fd)
    except OSError:
        return ""
    try:
        sock = socket.socket(fileno=dup)
    except OSError:
        os.close(dup)
        return ""
    with sock:
        try:
            peer = sock.getpeername()
        except OSError:
            return ""
    return str(peer[0]) if isinstance(peer, tuple) else ""
