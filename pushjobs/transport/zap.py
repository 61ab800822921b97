"""The ZAP handler (ZeroMQ RFC 27) behind every CurveZMQ allow-list, on a thread of its own.

libzmq asks ``inproc://zeromq.zap.01`` whether each CurveZMQ client may connect. pyzmq's
``ThreadAuthenticator`` answers by running an asyncio loop, and importing asyncio (ssl
with it) cost every agent ~9 MiB of its ~40 MiB. This handler does only what pushjobs
asks of ZAP: CURVE, one check per domain of the client's public key (``allow``) or of
the key and the peer's network address (``allow_peers``: a cap on connections per
source). Anything else (a NULL or PLAIN client, an unknown domain, a malformed request)
is refused.

``decide`` is the whole policy and is pure; the thread only moves frames.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import zmq
import zmq.utils.z85

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_VERSION = b"1.0"
CURVE_KEY_BYTES = 32
OK, BUSY, DENIED = 200, 300, 400  # ZAP status codes; 300 is a temporary failure

PeerCheck = Callable[[str, str], int]
"""The ZAP status for a client key (Z85) connecting from a peer address."""


def by_key(check: Callable[[str], bool]) -> PeerCheck:
    """A check of the key alone, as a ``PeerCheck``."""
    return lambda key, address: OK if check(key) else DENIED


def decide(request: list[bytes], checks: Mapping[bytes, PeerCheck]) -> list[bytes]:
    """The ZAP reply to one request: 200 if its domain's check admits the client's key
    from its address; 300 if it refuses it for now; 400 otherwise."""
    request_id = request[1] if len(request) > 1 else b""

    def reply(status: bytes, text: bytes, user: bytes = b"") -> list[bytes]:
        return [ZAP_VERSION, request_id, status, text, user, b""]

    if len(request) < 6 or request[0] != ZAP_VERSION:
        return reply(b"500", b"malformed ZAP request")
    domain, address, mechanism, credentials = request[2], request[3], request[5], request[6:]
    if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != CURVE_KEY_BYTES:
        return reply(b"400", b"CURVE only")
    check = checks.get(domain)
    if check is None:
        return reply(b"400", b"unknown domain")
    key = zmq.utils.z85.encode(credentials[0])
    try:
        status = check(key.decode("ascii"), address.decode("ascii", errors="replace"))
    except Exception:  # a failing check refuses; it must never stop the handler
        status = DENIED
    if status == OK:
        return reply(b"200", b"OK", key)
    if status == BUSY:
        return reply(b"300", b"too many connections")
    return reply(b"400", b"key not allowed")


class ZapHandler:
    """Answers ZAP for one context until ``stop()``; ``allow`` and ``allow_peers`` add a
    domain at any time."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.context = context
        self._checks: dict[bytes, PeerCheck] = {}
        self._stop_endpoint = f"inproc://pushjobs-zap-stop-{id(self)}"
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="pushjobs-zap", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            raise self._failed

    def allow(self, domain: str, check: Callable[[str], bool]) -> None:
        self.allow_peers(domain, by_key(check))

    def allow_peers(self, domain: str, check: PeerCheck) -> None:
        # Replaced whole, never mutated: the thread reads either the old mapping or the new.
        self._checks = {**self._checks, domain.encode(): check}

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        wake = self.context.socket(zmq.PAIR)
        try:
            wake.setsockopt(zmq.LINGER, 0)
            wake.connect(self._stop_endpoint)
            wake.send(b"stop")
            self._thread.join()
        finally:
            wake.close(linger=0)

    def _serve(self) -> None:
        try:
            zap = self.context.socket(zmq.REP)
            zap.setsockopt(zmq.LINGER, 0)
            zap.bind(ZAP_ENDPOINT)
            stop = self.context.socket(zmq.PAIR)
            stop.setsockopt(zmq.LINGER, 0)
            stop.bind(self._stop_endpoint)
        except zmq.ZMQError as exc:
            self._failed = exc
            self._ready.set()
            return
        self._ready.set()
        poller = zmq.Poller()
        poller.register(zap, zmq.POLLIN)
        poller.register(stop, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if stop in ready:
                    return
                if zap in ready:
                    request = zap.recv_multipart()
                    try:
                        reply = decide(request, self._checks)
                    except Exception:  # a dead handler would hang every handshake
                        # The request id echoed: libzmq takes a reply without it for a
                        # protocol error rather than a refusal.
                        request_id = request[1] if len(request) > 1 else b""
                        reply = [ZAP_VERSION, request_id, b"500", b"internal error", b"", b""]
                    zap.send_multipart(reply)
        except zmq.ContextTerminated:
            return
        finally:
            zap.close(linger=0)
            stop.close(linger=0)
