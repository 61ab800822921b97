"""The API socket's front: every request verified, checked for its role, and routed.

Theory of operation. A request on the ROUTER socket is opened against the registry
(``auth.py``: the sender's key, its signature, the size limits) and checked against the
replay window of its client process before it is decoded further; a bad one is a counted
drop, and a well-formed request from an unknown key is told so rather than left to time
out. A config request goes to enrolment; an API request must come from an accepted user
whose role allows the method (``pushjobs.api.methods``), and ``job.*`` and ``node.*``
methods need the leader: a standby refuses them ``not_leader`` with the leader's API
endpoint in ``error.leader`` when the control topic knows it (``membership.py``), so the
client goes there. The handler's result, or its ``ApiError``, is answered with the request's id;
``job.watch`` may park instead (``watches.py``).

Replies are queued and leave the socket at the end of the turn, after whatever the
request changed is durable (``Server.flush``).

Killed at any line: a request not yet answered is lost, and its client times out and may
retry; replay windows start empty, and the timestamp skew still refuses old frames.
"""

from __future__ import annotations

from collections import Counter, deque

from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.api import methods
from pushjobs.errors import ApiError, ProtocolError, UnknownKey
from pushjobs.protocol.codec import decode
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.inbox import reason_for
from pushjobs.protocol.messages import ApiRequest, ConfigRequest, Message
from pushjobs.protocol.replay import ReplayWindow
from server.front.auth import RegistryKeys, open_api_frames
from server.front.enrolment import Enrolment
from server.front.handlers import WATCH, ApiHandlers
from server.front.responder import Responder
from server.front.watches import Watches
from server.shell.leadership import Leadership
from server.shell.membership import Membership

API_WINDOWS = 100_000  # client processes whose replay windows are remembered
# Config requests come from anyone with a fresh key and a fresh incarnation each: their
# windows are kept apart and fewer, so a stranger's flood cannot fill the API's (each
# window costs about a kilobyte: 100,000 of them were 200 MB).
CONFIG_WINDOWS = 10_000
# Jobs are the leader's; so are the nodes (a standby serves none: its table is empty) and
# the schedules (the leader fires them).
LEADER_ONLY = ("job.", "node.", "schedule.")


class ApiFront:
    def __init__(
        self,
        registry: KeyRegistry,
        limits: Limits,
        *,
        max_skew_s: float,
        responder: Responder,
        handlers: ApiHandlers,
        enrolment: Enrolment,
        leadership: Leadership,
        watches: Watches,
        drops: Counter[str],
        membership: Membership | None = None,
    ) -> None:
        self.registry = registry
        self.keys = RegistryKeys(registry)
        self.limits = limits
        self.replay = ReplayWindow(max_skew_s)
        self.clients: deque[str] = deque()
        self.config_replay = ReplayWindow(max_skew_s)
        self.config_clients: deque[str] = deque()
        self.drops = drops  # shared with server.info
        self.responder = responder
        self.handlers = handlers
        self.enrolment = enrolment
        self.leadership = leadership
        self.watches = watches
        self.membership = membership

    def receive(self, frames: list[bytes], now: float, now_ms: int, *, source: str = "") -> None:
        """One API message; ``source`` is the sender's network address."""
        if len(frames) < 2:
            self.drops["frame"] += 1
            return
        identity, body = frames[0], frames[1:]
        try:
            message = open_api_frames(body, self.keys, self.limits)
            self._check_replay(message, now_ms)
        except UnknownKey as exc:
            self.drops[reason_for(exc)] += 1
            self._refuse_unknown(identity, body, now_ms)
            return
        except ProtocolError as exc:
            self.drops[reason_for(exc)] += 1
            return
        if isinstance(message, ConfigRequest):
            self.enrolment.config_request(
                identity, message, now, now_ms, self.responder.queue, source=source
            )
        elif isinstance(message, ApiRequest):
            self._request(identity, message, now, now_ms)
        else:
            self.drops["unexpected"] += 1

    def _check_replay(self, message: Message, now_ms: int) -> None:
        """Replay check per client process, not per user.

        One user runs many CLI processes at once (a ``--watch`` here, a ``job list``
        there), each its own incarnation; a window per sender would retire all but the
        newest. Each (sender, incarnation) gets its own window, the oldest forgotten past
        ``API_WINDOWS``; a replay older than that is still refused by the timestamp skew.
        """
        key = f"{message.sender}/{message.incarnation}"
        if isinstance(message, ConfigRequest):
            window, clients, cap = self.config_replay, self.config_clients, CONFIG_WINDOWS
        else:
            window, clients, cap = self.replay, self.clients, API_WINDOWS
        first = window.current(key) is None
        window.check(key, message.incarnation, message.sequence, message.timestamp, now_ms)
        if first:
            clients.append(key)
            if len(clients) > cap:
                window.forget(clients.popleft())

    def _refuse_unknown(self, identity: bytes, body: list[bytes], now_ms: int) -> None:
        """Tell a user whose key the server does not know, instead of letting them time out.

        Only a well-formed API request gets this answer; it says nothing but that the key
        is unknown, and garbage still gets no answer at all.
        """
        try:
            request = decode(body[1]) if len(body) == 3 else None
        except ProtocolError:
            return
        if not isinstance(request, ApiRequest):
            return
        self.responder.error(
            identity,
            request.request_id,
            methods.UNAUTHORIZED,
            f"the key of {request.sender[:64]!r} is not registered on this server; an admin "
            "can add it with: pushjobs key add USER.pub --role reader --accept",
            now_ms,
        )

    def _request(self, identity: bytes, req: ApiRequest, now: float, now_ms: int) -> None:
        refusal = self._refusal(req)
        if refusal is not None:
            self.responder.error(identity, req.request_id, *refusal, now_ms)
            return
        if req.method.startswith(LEADER_ONLY) and not self.leadership.leader:
            self._not_leader(identity, req.request_id, now_ms)
            return
        try:
            result = self.handlers.handle(req.method, req.params, req.sender)
        except ApiError as exc:
            if exc.code == methods.NOT_LEADER:
                # A handler found it is not the leader's to do (a key change on a standby):
                # the client is told where the leader is, as for a leader-only method.
                self._not_leader(identity, req.request_id, now_ms)
                return
            self.responder.error(identity, req.request_id, exc.code, str(exc), now_ms)
            return
        if result is WATCH:
            try:
                self.watches.park(identity, req, now)
            except ApiError as exc:  # over a cap: refused now, not parked
                self.responder.error(identity, req.request_id, exc.code, str(exc), now_ms)
            return
        self.responder.ok(identity, req.request_id, result, now_ms)

    def _refusal(self, req: ApiRequest) -> tuple[str, str] | None:
        """Why this caller may not call this method now, as (code, message); None if it may."""
        entry = self.registry.find(req.sender)
        if entry is None or entry.kind != "user" or entry.state is not KeyState.ACCEPTED:
            return methods.UNAUTHORIZED, f"{req.sender} is not an accepted user"
        if not methods.allowed(entry.role, req.method):
            if req.method not in methods.METHODS:
                return methods.BAD_REQUEST, f"unknown method {req.method!r}"
            needed = methods.METHODS[req.method]
            return (
                methods.UNAUTHORIZED,
                f"{req.method} needs the {needed} role; {req.sender} is {entry.role}",
            )
        return None

    def _not_leader(self, identity: bytes, request_id: str, now_ms: int) -> None:
        leader = self.membership.leader_api() if self.membership is not None else None
        self.responder.not_leader(identity, request_id, leader, now_ms)
