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

Killed at any line: only counts are lost; nothing is stored.
"""

from __future__ import annotations

import logging
from typing import Any

import zmq

from pushjobs.transport.handshake import HandshakeMonitor, HandshakeTally, Refusal

log = logging.getLogger("pushjobs.server")

EVERY_S = 10.0


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
    """The refused handshakes of ``sock`` (the server's API socket, say), logged."""

    def __init__(self, sock: zmq.Socket[Any], name: str, every_s: float = EVERY_S) -> None:
        # Every failure counts here: the server sees each refused attempt exactly once.
        self.monitor = HandshakeMonitor(sock, HandshakeTally(needed=1))
        self.log = RefusalLog(name, every_s)

    @property
    def socket(self) -> zmq.Socket[bytes]:
        """Register this in the loop's poller; ``receive`` when it is readable."""
        return self.monitor.socket

    def receive(self, now: float) -> None:
        for refusal in self.monitor.read():
            self._say(self.log.refused(refusal, now))

    def next_deadline(self) -> float | None:
        return self.log.due()

    def tick(self, now: float) -> None:
        self._say(self.log.flush(now))

    def close(self) -> None:
        """Before the transport closes: its context cannot end while the monitor is open."""
        self.monitor.close()

    @staticmethod
    def _say(line: str | None) -> None:
        if line is not None:
            log.warning("%s", line)
