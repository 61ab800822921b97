"""The CLI's half of the API: one signed request out, the matching signed reply back.

A DEALER socket (CurveZMQ client of the server's API socket) carries ``ApiRequest``s
signed with the user's Ed25519 key; replies are accepted only if the server's key signed
them, and matched by ``request_id`` (a stray reply for an earlier, timed-out call is
skipped). No answer within the timeout is ``Unreachable``; an error reply raises the
``ApiError`` its code names (``methods.error_for``).

Silence has two causes a user must tell apart: a server that is down, and one that
refuses the CurveZMQ handshake because ``client.server_key`` is not its key (then no
request can even reach it). The socket's monitor tells them apart
(``pushjobs.transport.handshake``): handshakes failing in a row end the call at once with
``HandshakeRefused``, a configuration error (exit code 9: waiting or retrying cannot cure
it), instead of ``Unreachable`` after the whole timeout.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import zmq

from keys import files
from keys.fingerprint import key_id
from keys.identity import PrivateIdentity, PublicIdentity
from pushjobs.api import methods
from pushjobs.errors import HandshakeRefused, TransportError, UnknownKey, Unreachable
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.messages import ApiReply, ApiRequest
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer, Verifier, ed25519_verifier
from pushjobs.transport.handshake import HandshakeMonitor, Refusal, connect_monitored
from pushjobs.transport.sockets import CurveKeys, Transport

REPLY_LIMITS = Limits(max_header_bytes=2048, max_body_bytes=32 * 1024 * 1024)
MAX_SKEW_S = 300.0


class ApiClient:
    def __init__(
        self,
        endpoint: str,
        server: PublicIdentity,
        user: PrivateIdentity,
        *,
        timeout_s: float = 10.0,
        server_key_source: str = "",
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        # Where the server key came from, for the message when the server refuses it.
        self.server_key_source = server_key_source or f"the key of {server.name!r}"
        self._server = server
        self._user = user
        signer = Ed25519Signer(key_id(user.public.ed25519_public), user.signing_key())
        self._outbox = Outbox(user.name, secrets.token_hex(8), signer)
        server_key_id = key_id(server.ed25519_public)
        verifier = ed25519_verifier(server.ed25519_public, owner=server.name)

        def resolve(method: str, key_id: str) -> Verifier:
            if key_id != server_key_id:
                raise UnknownKey(f"reply signed by an unknown key {key_id[:32]!r}")
            return verifier

        self._inbox = Inbox(resolve, MAX_SKEW_S, REPLY_LIMITS)
        self._transport = Transport(max_message_bytes=REPLY_LIMITS.max_body_bytes + 4096)
        self._socket: zmq.Socket[bytes] | None = None
        self._monitor: HandshakeMonitor | None = None

    @classmethod
    def from_files(
        cls, endpoint: str, server_pub: Path, user_key: Path, *, timeout_s: float = 10.0
    ) -> ApiClient:
        return cls(
            endpoint,
            files.load_public(server_pub),
            files.load_private(user_key),
            timeout_s=timeout_s,
            server_key_source=str(server_pub),
        )

    def _connect(self) -> zmq.Socket[bytes]:
        if self._socket is None:
            self._socket = self._transport.socket(
                "dealer",
                curve_client=CurveKeys(self._user.public.curve_public, self._user.curve_secret),
                server_public=self._server.curve_public,
            )
            try:
                self._monitor = connect_monitored(self._socket, self.endpoint)
            except TransportError:
                self._reset()
                raise
        return self._socket

    def _reset(self) -> None:
        # A DEALER whose peer vanished would keep queued requests forever: start afresh.
        if self._monitor is not None:
            self._monitor.close()
            self._monitor = None
        if self._socket is not None:
            self._transport.close_socket(self._socket)
            self._socket = None

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The method's result; ApiError subclasses on refusal, Unreachable on silence."""
        sock = self._connect()
        request_id = secrets.token_hex(8)
        now_ms = time.time_ns() // 1_000_000
        frames = self._outbox.frames(
            ApiRequest, now_ms, request_id=request_id, method=method, params=params or {}
        )
        timeout_s = self.timeout_s
        if method == "job.watch" and params is not None:
            timeout_s += min(float(params.get("wait_s", 0) or 0), methods.MAX_WATCH_S)
        deadline = time.monotonic() + timeout_s
        monitor = self._monitor
        assert monitor is not None  # made with the socket
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor.socket, zmq.POLLIN)
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                ready = dict(poller.poll(round(remaining * 1000)))
                refusal = monitor.refused if monitor.socket in ready else None
                if refusal is not None:
                    self._reset()
                    raise HandshakeRefused(self.refused_text(refusal))
                if sock not in ready:
                    continue
                received = self._inbox.accept(sock.recv_multipart(), time.time_ns() // 1_000_000)
                if received is None or not isinstance(received.message, ApiReply):
                    continue
                reply = received.message
                if reply.request_id != request_id:
                    continue
                if reply.ok:
                    return reply.result
                error = reply.error
                code, text = (error.code, error.message) if error else ("error", "refused")
                raise methods.error_for(code, text)
        except zmq.ZMQError as exc:
            self._reset()
            raise TransportError(f"{self.endpoint}: {exc}") from exc
        self._reset()
        raise Unreachable(
            f"no answer from {self.endpoint} within {timeout_s:g} s: is pushjobs-server running?"
        )

    def refused_text(self, refusal: Refusal) -> str:
        return (
            f"{self.endpoint}: the server refused the CurveZMQ handshake: is "
            f"client.server_key the server's key ({self.server_key_source})? {refusal.cause()}"
        )

    def close(self) -> None:
        self._reset()
        self._transport.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
