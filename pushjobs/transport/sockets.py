"""The one socket factory: every socket with linger 0, explicit high-water marks, CurveZMQ
where the channel needs it, and zmq errors translated to ``TransportError`` here.

A ``Transport`` owns one zmq context and, when any socket is a CurveZMQ server with an
allow-list, one ZAP authenticator thread. ``close()`` closes every socket it made and
terminates the context; with linger 0 that cannot hang.

Every socket also sets ``ZMQ_MAXMSGSIZE``: a peer that sends a frame larger than the
limit is disconnected by libzmq before the frame is allocated whole, so no frame limit of
the protocol can be outrun by sending one huge frame (the protocol's own size checks run
only after the frame has been received).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from pushjobs.errors import TransportError
from pushjobs.transport.zap import PeerCheck, ZapHandler, by_key

KINDS = {
    "pub": zmq.PUB,
    "sub": zmq.SUB,
    "push": zmq.PUSH,
    "pull": zmq.PULL,
    "router": zmq.ROUTER,
    "dealer": zmq.DEALER,
    "xpub": zmq.XPUB,
}

# The default frame limit: the protocol's default body limit (64 KiB) and a little more.
# Daemons pass their configured limit; only the API client, whose replies may be large
# lists, goes higher.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 + 4096


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """A CurveZMQ key pair, Z85 text (40 characters each)."""

    public: str
    secret: str


class Transport:
    def __init__(self, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        if max_message_bytes <= 0:
            raise TransportError("max_message_bytes must be positive")
        self.max_message_bytes = max_message_bytes
        self.context = zmq.Context()
        self._sockets: list[zmq.Socket[bytes]] = []
        self._auth: ZapHandler | None = None
        self._domains = 0

    def socket(
        self,
        kind: str,
        *,
        bind: str | None = None,
        connect: str | tuple[str, ...] = (),
        hwm: int = 1000,
        rcvhwm: int | None = None,
        curve_server: CurveKeys | None = None,
        allowed_clients: Callable[[str], bool] | None = None,
        allowed_peers: PeerCheck | None = None,
        curve_client: CurveKeys | None = None,
        server_public: str | None = None,
        subscribe: bytes | None = b"",
        identity: bytes | None = None,
        max_message_bytes: int | None = None,
        handshake_ms: int | None = None,
    ) -> zmq.Socket[bytes]:
        """A configured socket, bound and/or connected.

        ``curve_server`` makes it a CurveZMQ server; with ``allowed_clients`` only clients
        whose public key passes the check get through (ZAP); ``allowed_peers`` instead
        also sees each client's network address and answers a ZAP status (200 admits,
        300 refuses for now, anything else refuses). ``curve_client`` with
        ``server_public`` makes it a CurveZMQ client of that server. ``max_message_bytes``
        overrides the transport's frame limit for this socket. ``rcvhwm`` (default ``hwm``)
        bounds what libzmq queues per peer before the application reads it.
        ``handshake_ms`` (default libzmq's 30 s) is how long a connection may take to
        finish its handshake before libzmq closes it.
        """
        try:
            sock: zmq.Socket[bytes] = self.context.socket(KINDS[kind])
        except zmq.ZMQError as exc:
            raise TransportError(f"cannot create a {kind} socket: {exc}") from exc
        self._sockets.append(sock)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, hwm)
            sock.setsockopt(zmq.RCVHWM, hwm if rcvhwm is None else rcvhwm)
            limit = self.max_message_bytes if max_message_bytes is None else max_message_bytes
            sock.setsockopt(zmq.MAXMSGSIZE, limit)
            if identity is not None:
                sock.setsockopt(zmq.IDENTITY, identity)
            if handshake_ms is not None:  # before bind: a listener copies the options
                sock.setsockopt(zmq.HANDSHAKE_IVL, handshake_ms)
            if curve_server is not None:
                if allowed_clients is not None:
                    allowed_peers = by_key(allowed_clients)
                if allowed_peers is not None:
                    domain = self._allow(allowed_peers)
                    sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())
                sock.curve_secretkey = curve_server.secret.encode("ascii")
                sock.curve_publickey = curve_server.public.encode("ascii")
                sock.curve_server = True
            if curve_client is not None:
                if server_public is None:
                    raise TransportError("a CurveZMQ client needs the server's public key")
                sock.curve_secretkey = curve_client.secret.encode("ascii")
                sock.curve_publickey = curve_client.public.encode("ascii")
                sock.curve_serverkey = server_public.encode("ascii")
            if kind == "sub" and subscribe is not None:
                sock.setsockopt(zmq.SUBSCRIBE, subscribe)
            if bind is not None:
                sock.bind(bind)
            for endpoint in (connect,) if isinstance(connect, str) else connect:
                sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self._discard(sock)
            where = f" on {bind}" if bind else ""
            raise TransportError(f"cannot set up the {kind} socket{where}: {exc}") from exc
        return sock

    def _allow(self, allowed: PeerCheck) -> str:
        if self._auth is None:
            try:
                self._auth = ZapHandler(self.context)
            except zmq.ZMQError as exc:
                raise TransportError(f"cannot start the ZAP handler: {exc}") from exc
        self._domains += 1
        domain = f"pushjobs-{self._domains}"
        self._auth.allow_peers(domain, allowed)
        return domain

    def _discard(self, sock: zmq.Socket[Any]) -> None:
        sock.close(linger=0)
        if sock in self._sockets:
            self._sockets.remove(sock)

    def close_socket(self, sock: zmq.Socket[Any]) -> None:
        self._discard(sock)

    def close(self) -> None:
        for sock in self._sockets:
            sock.close(linger=0)
        self._sockets.clear()
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        self.context.term()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bound_endpoint(sock: zmq.Socket[Any]) -> str:
    """The endpoint a socket actually bound (resolves ``tcp://127.0.0.1:*``)."""
    value = sock.getsockopt(zmq.LAST_ENDPOINT)
    return value.decode() if isinstance(value, bytes) else str(value)


def drain_from(sock: zmq.Socket[bytes], limit: int) -> list[tuple[list[bytes], str]]:
    """Like ``drain``, each message with its sender's network address ("" if unknown).

    The address is what a per-source cap counts: a ROUTER's routing id changes with every
    reconnection, the peer's address does not.
    """
    batch: list[tuple[list[bytes], str]] = []
    recv = sock.recv
    try:
        while len(batch) < limit:
            frame = recv(zmq.NOBLOCK, copy=False)
            parts = [frame.bytes]
            try:
                peer = str(frame.get("Peer-Address"))
            except zmq.ZMQError:
                peer = ""
            while frame.more:
                frame = recv(zmq.NOBLOCK, copy=False)
                parts.append(frame.bytes)
            batch.append((parts, peer))
    except zmq.Again:
        pass
    except zmq.ZMQError as exc:
        raise TransportError(f"receive failed: {exc}") from exc
    return batch


def drain(sock: zmq.Socket[bytes], limit: int) -> list[list[bytes]]:
    """Up to ``limit`` queued multipart messages without blocking: one wakeup, many messages."""
    # recv_multipart asks the socket for RCVMORE through an option lookup per part; the
    # frame already knows. On the heartbeat path this is a fifth of the receive cost.
    # Every protocol message is three frames: reading up to three without a loop or
    # appends costs a tenth less than the general loop (bench/edge.py); a longer message
    # is still read whole (its receiver drops it).
    batch: list[list[bytes]] = []
    recv = sock.recv
    nonblocking = zmq.NOBLOCK
    try:
        while len(batch) < limit:
            first = recv(nonblocking, copy=False)
            if not first.more:
                batch.append([first.bytes])
                continue
            second = recv(nonblocking, copy=False)
            if not second.more:
                batch.append([first.bytes, second.bytes])
                continue
            last = recv(nonblocking, copy=False)
            parts = [first.bytes, second.bytes, last.bytes]
            while last.more:
                last = recv(nonblocking, copy=False)
                parts.append(last.bytes)
            batch.append(parts)
    except zmq.Again:
        pass
    except zmq.ZMQError as exc:
        raise TransportError(f"receive failed: {exc}") from exc
    return batch
