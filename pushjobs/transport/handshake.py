"""What a socket's CurveZMQ handshakes say: refused, or nothing worth saying.

Theory of operation. A CurveZMQ client holding the wrong server key cannot be told so by
the server: the server cannot open the client's HELLO, so it closes the connection, and
libzmq reconnects every 100 ms and fails the same way, for ever. From the client's
requests nothing shows but silence, which looks exactly like a server that is down. The
socket monitor does show it: each attempt ends in ``ZMQ_EVENT_HANDSHAKE_FAILED_*``
(``NO_DETAIL`` on the client, whose peer hung up mid-handshake; ``PROTOCOL`` with
``ZMTP_CRYPTOGRAPHIC`` on the server; ``AUTH`` where ZAP refused the client's key), where a
server that is down shows no handshake at all.

``parse`` reads one monitor message (pure); ``HandshakeTally`` (pure) decides. A protocol
or ZAP failure is a refusal at once (libzmq does not even retry after some of them); a
peer hanging up mid-handshake counts only after ``needed`` of them in a row with no
success between, so a server killed halfway through one handshake is not taken for one.
``HandshakeMonitor`` is the thin I/O half: the monitor socket of one socket, drained
without blocking into a tally. Its PAIR socket belongs to the monitored socket's context
and must be closed (``close``) before that context terminates, or ``term`` waits for it.

Nothing here is stored: killed at any line, the monitor dies with the process.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import zmq

from pushjobs.errors import TransportError

EVENTS = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)
"""The monitor events asked for: handshakes only, so an idle socket's monitor is silent."""

FAILED = {
    int(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL): "closed",
    int(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL): "protocol",
    int(zmq.EVENT_HANDSHAKE_FAILED_AUTH): "auth",
}
SUCCEEDED = int(zmq.EVENT_HANDSHAKE_SUCCEEDED)
MISMATCH = int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
CRYPTOGRAPHIC = int(zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
REFUSALS_NEEDED = 2


@dataclass(frozen=True, slots=True)
class Event:
    """One monitor event: its number, its value (errno, protocol error or ZAP status)."""

    event: int
    value: int
    endpoint: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """A handshake that failed: ``kind`` is ``closed``, ``protocol`` or ``auth``."""

    kind: str
    value: int
    endpoint: str

    def cause(self) -> str:
        """What it most likely means to the client that met it, as a sentence."""
        if self.kind == "auth":
            return f"The server refused this side's key (ZAP status {self.value})."
        if self.kind == "protocol" and self.value == MISMATCH:
            return "The peer does not speak CurveZMQ (a mechanism mismatch)."
        if self.kind == "protocol" and self.value != CRYPTOGRAPHIC:
            return f"A handshake protocol error (0x{self.value:08x})."
        return "It closes every connection at the handshake, as it does for a wrong key."

    def peer_cause(self) -> str:
        """What it most likely says about the client, to the server that refused it."""
        if self.kind == "auth":
            return f"ZAP refused the client's key (status {self.value})."
        if self.kind == "closed":
            return "The client hung up during the handshake."
        if self.value == MISMATCH:
            return "The client does not speak CurveZMQ (a mechanism mismatch)."
        if self.value == CRYPTOGRAPHIC:
            return "The client's HELLO did not decrypt: it holds a wrong server key."
        return f"A handshake protocol error (0x{self.value:08x})."


def parse(frames: list[bytes]) -> Event | None:
    """A monitor message as an ``Event``; None if it is not one (two frames, 6 bytes)."""
    if len(frames) != 2 or len(frames[0]) != 6:
        return None
    event, value = struct.unpack("=Hi", frames[0])
    return Event(event, value & 0xFFFFFFFF, frames[1].decode(errors="replace"))


class HandshakeTally:
    """Failed handshakes in a row (pure): ``refused`` after a protocol or ZAP failure, or
    once ``needed`` hang-ups came unbroken by a success."""

    def __init__(self, needed: int = REFUSALS_NEEDED) -> None:
        self.needed = needed
        self.failures = 0
        self.last: Refusal | None = None

    def see(self, event: Event) -> Refusal | None:
        """Count ``event``; the failure it was, or None (a success, or not a handshake)."""
        if event.event == SUCCEEDED:
            self.failures, self.last = 0, None
            return None
        kind = FAILED.get(event.event)
        if kind is None:
            return None
        self.failures += 1 if kind == "closed" else self.needed
        self.last = Refusal(kind, event.value, event.endpoint)
        return self.last

    @property
    def refused(self) -> Refusal | None:
        return self.last if self.failures >= self.needed else None


class HandshakeMonitor:
    """The handshakes of ``sock``, read from its monitor socket without blocking.

    ``events`` may ask for more than the handshakes (libzmq allows one monitor per
    socket); ``read`` hands every event to ``each`` when given."""

    def __init__(
        self, sock: zmq.Socket[Any], tally: HandshakeTally | None = None, events: int = EVENTS
    ) -> None:
        self.tally = tally if tally is not None else HandshakeTally()
        self._watched = sock
        try:
            self.socket: zmq.Socket[bytes] = sock.get_monitor_socket(events)
        except zmq.ZMQError as exc:
            raise TransportError(f"cannot monitor the socket: {exc}") from exc
        self.socket.setsockopt(zmq.LINGER, 0)

    def read(self, each: Callable[[Event], None] | None = None) -> list[Refusal]:
        """The failed handshakes reported since the last read (the tally sees each)."""
        seen: list[Refusal] = []
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return seen
            except zmq.ZMQError:
                return seen  # the monitored socket is gone: nothing more to learn
            event = parse(frames)
            if event is not None and each is not None:
                each(event)
            failure = None if event is None else self.tally.see(event)
            if failure is not None:
                seen.append(failure)

    @property
    def refused(self) -> Refusal | None:
        self.read()
        return self.tally.refused

    def close(self) -> None:
        if self.socket.closed:
            return
        try:
            if not self._watched.closed:
                self._watched.disable_monitor()
        except zmq.ZMQError:
            pass  # the watched socket is closing: its monitor stops with it
        self.socket.close(linger=0)


def connect_monitored(sock: zmq.Socket[Any], endpoint: str) -> HandshakeMonitor:
    """Monitor ``sock``, then connect it to ``endpoint``: every handshake is seen."""
    return connect_with(HandshakeMonitor(sock), sock, endpoint)


Monitor = TypeVar("Monitor", bound=HandshakeMonitor)


def connect_with(monitor: Monitor, sock: zmq.Socket[Any], endpoint: str) -> Monitor:
    """Connect ``sock``, already watched by ``monitor``, to ``endpoint``."""
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as exc:
        monitor.close()
        raise TransportError(f"cannot connect to {endpoint}: {exc}") from exc
    return monitor
