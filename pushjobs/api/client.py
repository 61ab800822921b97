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
it), instead of ``Unreachable`` after the whole timeout. The same monitor shows a server
that hangs up while a call waits on it (``pushjobs.api.disconnects``: its process died):
the call gives up at once, as it would after silence, instead of waiting out its budget.

Several servers. A client may be given several API endpoints: one
leads, the others stand by and refuse ``job.*`` and ``node.*`` requests with
``not_leader``, naming the leader's endpoint when they know it. ``call`` follows: after a
refusal it asks the named leader (signed by the server key, so trusted even when it is
not in the list), else the next endpoint in turn; after silence, the next endpoint
(from a leader it followed that is not in the list, the configured ones again: a client
given one server is not stuck on a dead leader that server once named). It
keeps trying until its timeout (a takeover takes a lease session), telling the user once
(``on_wait``: "waiting for a leader...") and pausing briefly between refusals; a lone
server that answers ``not_leader`` is waited for the same way.

Never twice what must not run twice. A request that met silence may have reached the
server and been carried out, its answer lost: only requests that are safe to repeat
(``resend_safe``: the reader methods, key listings, ``job.abort``) are sent again after
silence. A ``job.start`` (or a key change) is sent again only after a ``not_leader``
answer, which says it was refused; before sending one to a server, the client checks that
the server answers at all (``server.list``, ``PROBE``), so a dead server costs the probe's
silence, not the job. With several endpoints each silent attempt is bounded
(``attempt_s``) so the others get their turn, and a ``job.watch`` long poll waits at most
that long.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from keys import files
from keys.fingerprint import key_id
from keys.identity import PrivateIdentity, PublicIdentity
from pushjobs.api import methods
from pushjobs.api.disconnects import LinkMonitor, connect_watched
from pushjobs.errors import (
    ApiError,
    ConfigError,
    HandshakeRefused,
    NobodyListens,
    OversizedFrame,
    TransportError,
    UnknownKey,
    Unreachable,
)
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.messages import ApiReply, ApiRequest
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer, Verifier, ed25519_verifier
from pushjobs.transport.handshake import Refusal
from pushjobs.transport.sockets import CurveKeys, Transport

REPLY_LIMITS = Limits(max_header_bytes=2048, max_body_bytes=32 * 1024 * 1024)
MAX_SKEW_S = 300.0
PROBE = "server.list"  # a cheap question any user may ask: does this server answer?
MIN_ATTEMPT_S = 1.0  # the least a silent server is given before the next one is asked
REFUSED_PAUSE_S = 0.25  # between "not the leader" answers while a takeover is under way
WAITING = "waiting for a leader\N{HORIZONTAL ELLIPSIS}"

Endpoints = str | Sequence[str]


RESEND_SAFE = frozenset({"job.abort", "key.list", "key.show"})  # beyond the reader methods


def resend_safe(method: str) -> bool:
    """Whether ``method`` may be sent again after silence: nothing it does happens twice
    (it only reads, or, like an abort, asks for what a second time leaves as it was)."""
    return methods.METHODS.get(method) == "reader" or method in RESEND_SAFE


class Failover:
    """Which server to ask next (pure): the leader a refusal named, else the next in turn."""

    def __init__(self, endpoints: Sequence[str]) -> None:
        if not endpoints:
            raise ConfigError("no server API endpoint to ask", key="client.server")
        self.endpoints = list(endpoints)
        self.current = self.endpoints[0]

    def refused(self, leader: str | None) -> str:
        """``current`` answered ``not_leader`` naming ``leader`` (or None): who is next."""
        if leader and leader != self.current:
            self.current = leader
        else:
            self.current = self._after(self.current)
        return self.current

    def silent(self) -> str:
        """``current`` did not answer: the next endpoint in turn."""
        self.current = self._after(self.current)
        return self.current

    @property
    def candidates(self) -> list[str]:
        """Who may be asked: the configured endpoints, and a leader followed from them
        (which, gone silent, sends the client back to the configured ones)."""
        if self.current in self.endpoints:
            return self.endpoints
        return [*self.endpoints, self.current]

    def _after(self, endpoint: str) -> str:
        i = self.endpoints.index(endpoint) if endpoint in self.endpoints else -1
        return self.endpoints[(i + 1) % len(self.endpoints)]


class ApiClient:
    def __init__(
        self,
        endpoint: Endpoints,
        server: PublicIdentity,
        user: PrivateIdentity,
        *,
        timeout_s: float = 10.0,
        server_key_source: str = "",
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.failover = Failover([endpoint] if isinstance(endpoint, str) else endpoint)
        self.timeout_s = timeout_s
        self.on_wait = on_wait
        self.waited = False  # told the user once that it waits for a leader
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

        self._resolve = resolve
        self._inbox = Inbox(resolve, MAX_SKEW_S, REPLY_LIMITS)
        self._transport = Transport(max_message_bytes=REPLY_LIMITS.max_body_bytes + 4096)
        self._socket: zmq.Socket[bytes] | None = None
        self._monitor: LinkMonitor | None = None

    @classmethod
    def from_files(
        cls,
        endpoint: Endpoints,
        server_pub: Path,
        user_key: Path,
        *,
        timeout_s: float = 10.0,
        on_wait: Callable[[str], None] | None = None,
    ) -> ApiClient:
        return cls(
            endpoint,
            files.load_public(server_pub),
            files.load_private(user_key),
            timeout_s=timeout_s,
            server_key_source=str(server_pub),
            on_wait=on_wait,
        )

    @property
    def endpoint(self) -> str:
        """The server asked now (the leader, once one has answered)."""
        return self.failover.current

    @property
    def attempt_s(self) -> float:
        """How long one server may stay silent before the next is asked."""
        n = len(self.failover.candidates)
        return self.timeout_s if n == 1 else max(MIN_ATTEMPT_S, self.timeout_s / (2 * n))

    def _connect(self) -> zmq.Socket[bytes]:
        if self._socket is None:
            # A replay window per connection: the servers of one installation share a
            # name, each process its own incarnation, and a client that asks one, then
            # another, then the first again would take the first's answers for a retired
            # incarnation's. Replies are matched by a fresh request id on a fresh socket.
            self._inbox = Inbox(self._resolve, MAX_SKEW_S, REPLY_LIMITS)
            self._socket = self._transport.socket(
                "dealer",
                curve_client=CurveKeys(self._user.public.curve_public, self._user.curve_secret),
                server_public=self._server.curve_public,
            )
            try:
                self._monitor = connect_watched(self._socket, self.endpoint)
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
        """The method's result, from the leader for the methods that need one; ApiError
        subclasses on refusal, Unreachable on silence (see the module's docstring)."""
        params = params or {}
        # A leader followed from a lone configured server counts: silent, it is left.
        several = len(self.failover.candidates) > 1
        extra_s = 0.0
        if method == "job.watch":
            extra_s = min(float(params.get("wait_s", 0) or 0), methods.MAX_WATCH_S)
            if several and extra_s > self.attempt_s:
                # A parked watch on a server that died is silence as long as it is parked:
                # shorter polls (the caller repeats them) find the next server sooner.
                extra_s = self.attempt_s
                params = {**params, "wait_s": extra_s}
        deadline = time.monotonic() + self.timeout_s + extra_s
        refusals = closed = 0
        while True:
            several = len(self.failover.candidates) > 1  # grows once a leader is followed
            try:
                if several and not resend_safe(method):
                    self._exchange(PROBE, {}, min(self.attempt_s, self._left(deadline)))
            except NobodyListens as exc:
                closed += 1
                self._closed(deadline, exc, closed)
                continue
            except Unreachable as exc:
                self._wait(deadline, exc)
                self.failover.silent()
                continue
            try:
                budget = min(self.attempt_s + extra_s, self._left(deadline))
                reply = self._exchange(method, params, budget)
            except NobodyListens as exc:
                # No connection was made: the request reached nobody, and may go elsewhere.
                closed += 1
                self._closed(deadline, exc, closed)
                continue
            except Unreachable as exc:
                if not several or not resend_safe(method):
                    raise Unreachable(self._silence_text(exc, method)) from None
                self._wait(deadline, exc)
                self.failover.silent()
                continue
            closed = 0
            if reply.ok:
                return reply.result
            error = reply.error
            code, text = (error.code, error.message) if error else ("error", "refused")
            if code != methods.NOT_LEADER:
                raise methods.error_for(code, text)
            refusals += 1
            leader = error.leader if error else None
            refused = ApiError(text, code=code)
            # A standby naming the leader is a detour, not a wait: nothing to tell.
            self._wait(deadline, refused, tell=refusals > 1 or not leader)
            self.failover.refused(leader)
            if refusals > 1:
                time.sleep(min(REFUSED_PAUSE_S, self._left(deadline)))  # a takeover: its pace
                self._wait(deadline, refused, tell=False)  # no time left: no empty attempt

    def _left(self, deadline: float) -> float:
        return max(0.0, deadline - time.monotonic())

    def _wait(self, deadline: float, error: Exception, *, tell: bool = True) -> None:
        """Another try is due: say so once (if ``tell``); past the deadline, give up with
        ``error``."""
        if self._left(deadline) <= 0:
            if isinstance(error, ApiError):
                raise ApiError(
                    f"no server leads: {error} (waited {self.timeout_s:g} s)", code=error.code
                )
            if len(self.failover.endpoints) > 1:
                raise Unreachable(
                    f"no answer from {' or '.join(self.failover.endpoints)} within "
                    f"{self.timeout_s:g} s: is pushjobs-server running?"
                )
            raise error
        self._reset()
        if tell and not self.waited:
            self.waited = True
            if self.on_wait is not None:
                self.on_wait(WAITING)

    def _closed(self, deadline: float, exc: NobodyListens, in_row: int) -> None:
        """Nothing listens at the endpoint asked: the next at once, told and paced only
        once every endpoint has refused in a row (all down, or a restart under way)."""
        round_done = in_row % len(self.failover.endpoints) == 0
        self._wait(deadline, exc, tell=round_done)
        self.failover.silent()
        if round_done:
            time.sleep(min(REFUSED_PAUSE_S, self._left(deadline)))  # all down: a restart's pace

    def _silence_text(self, exc: Unreachable, method: str) -> str:
        if resend_safe(method) or len(self.failover.endpoints) == 1:
            return str(exc)
        return f"{exc}; {method} may have reached it: check before trying again"

    def _exchange(self, method: str, params: dict[str, Any], timeout_s: float) -> ApiReply:
        """One request to the current endpoint and its reply; Unreachable on silence."""
        sock = self._connect()
        request_id = secrets.token_hex(8)
        now_ms = time.time_ns() // 1_000_000
        try:
            frames = self._outbox.frames(
                ApiRequest, now_ms, request_id=request_id, method=method, params=params
            )
        except OversizedFrame as exc:
            # Refused here, as the server would refuse it (exit 2), naming the sizes.
            raise methods.error_for(
                methods.BAD_REQUEST,
                f"{method} not sent: its {exc} bytes, the most a request may hold; put large "
                "values (--env, --secret-env) in a file on the nodes",
            ) from None
        deadline = time.monotonic() + timeout_s
        monitor = self._monitor
        assert monitor is not None  # made with the socket
        several = len(self.failover.endpoints) > 1
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor.socket, zmq.POLLIN)
        try:
            monitor.arm()
            sock.send_multipart(frames, zmq.NOBLOCK)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                # Known hung up: only a reply already here is still worth reading.
                wait_ms = 0 if monitor.link.lost else round(remaining * 1000)
                ready = dict(poller.poll(wait_ms))
                refusal = monitor.refused if monitor.socket in ready else None
                if refusal is not None:
                    self._reset()
                    raise HandshakeRefused(self.refused_text(refusal))
                if sock not in ready:
                    if monitor.hung_up:  # its process died: no answer is coming
                        self._reset()
                        raise Unreachable(f"{self.endpoint} closed the connection mid-call")
                    if several and monitor.nobody_listens:  # alone, it may be starting
                        self._reset()
                        raise NobodyListens(f"nothing listens at {self.endpoint}")
                    continue
                received = self._inbox.accept(sock.recv_multipart(), time.time_ns() // 1_000_000)
                if received is None or not isinstance(received.message, ApiReply):
                    continue
                reply = received.message
                if reply.request_id == request_id:
                    return reply
        except zmq.ZMQError as exc:
            self._reset()
            raise TransportError(f"{self.endpoint}: {exc}") from exc
        self._reset()
        raise Unreachable(
            f"no answer from {self.endpoint} within {timeout_s:g} s: is pushjobs-server running?",
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
