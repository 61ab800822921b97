"""The server's sockets and its pool of per-endpoint command sockets.

    API        ROUTER, bound, CurveZMQ server (any client key: the registry decides; a
               stranger's key only while its source holds fewer open connections than
               its cap: ``cap_api``, ``server.shell.conncap``)
    heartbeat  XPUB, bound, signed, CurveZMQ server admitting accepted node keys only (ZAP);
               only the empty subscription is applied
    replies    PULL, bound, CurveZMQ server admitting accepted node keys only (ZAP)
    commands   PUSH per distinct (endpoint, node curve key), connect, CurveZMQ client

A command socket is created on first use and kept; sends never block (NOBLOCK): a full
queue means the node is not reading, and the job's deadlines deal with it.

The heartbeat socket carries nothing secret, but a socket anyone may connect to is one
anyone may flood: a plain PUB keeps every subscription a stranger sends for as long as the
server runs, and even subscriptions that are read and dropped cost the loop its time (a
flood of 200,000 a second from one host kept it busy for tens of seconds, and every node
looked silent). So only accepted node keys get through its CurveZMQ handshake, as on the
reply socket; and the XPUB in manual mode hands subscriptions to the loop
(``subscriptions``): the empty one, all an agent sends, is applied; anything else is
counted and dropped, and a frame longer than a subscription gets its sender disconnected
by libzmq. libzmq queues what it read from subscribers ahead of the loop without a bound,
so an insider (an accepted node key) sending small subscriptions faster than the loop
reads them grew server memory while it kept on; ``subscription_backlog`` counts the turns
that could not empty the queue. A key that floods is cut off (``server.shell.subflood``): ZAP
refuses it for a while, and the socket is unbound and bound again, which is the one way
libzmq drops a connection of a bound socket (every agent reconnects within its reconnect
interval and subscribes again); what was queued is read and dropped, and the C heap is
trimmed so the memory goes back to the system.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Final

import zmq

from keys.keystates import KeyState
from pushjobs.errors import TransportError
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint
from server.shell.conncap import ADMIT, ConnectionCaps
from server.shell.subflood import FloodGuard

if TYPE_CHECKING:
    from keys.registry import KeyRegistry
    from server.shell.serverconfig import ServerSection

log = logging.getLogger("pushjobs.server")

COMMAND_HWM = 100_000  # one endpoint may serve many nodes (a simulator, a multi-agent host)
REPLY_HWM = 100_000
# libzmq queues what each API connection sent ahead of the loop, up to the receive HWM,
# at ~10 KB a CurveZMQ request: at 10,000 a stranger's enrolment spam grew the server by
# 150-210 MB from one connection, 140 MB more over 50. At 64 it is 0.6 MB a connection
# (bench/hostile.py, enrolment-conns), and the loop still reads a full batch per turn.
# Replies wait per connection up to the send HWM. It must hold what one turn answers to
# one client (the CurveZMQ encryption of queued replies lags the loop; at 512 the hostile
# suite's 1,200 pipelined config requests lost 220 answers), and costs a client that
# never reads at most ~2 MB.
API_RCVHWM = 64
API_SNDHWM = 2_048
# A handshake ZAP refused for now (too many connections: ``server.shell.conncap``) is not closed
# by libzmq until the handshake times out (the client is hung up on without a word, the
# CurveZMQ RFC says); nor is a connection that never completes its handshake. Both hold
# an fd and libzmq's buffers: 10 s instead of libzmq's 30 (a handshake takes milliseconds).
API_HANDSHAKE_MS = 10_000
# An agent sends a one-byte subscription; the CurveZMQ handshake's commands (HELLO 200
# bytes, INITIATE with its metadata a few hundred) pass through the same limit.
SUBSCRIPTION_MAX_BYTES = 1024
SUBSCRIPTIONS_PER_TURN = 10_000
DRAIN_TURNS_AFTER_CUT = 20
REBIND_TIMEOUT_S = 2.0  # unbinding is asynchronous: the port is free again within ms
_MORE: Final = zmq.SNDMORE | zmq.NOBLOCK
_LAST: Final = zmq.NOBLOCK
_send: Final = zmq.backend.Socket.send  # zmq.Socket's base (see ``send_command``)


def advertised(endpoint: str, host: str) -> str:
    """``endpoint`` with its host replaced by ``host`` (when set) for nodes to connect to."""
    if not host:
        if re.match(r"tcp://(0\.0\.0\.0|\*|\[::\])", endpoint):
            raise TransportError(
                f"{endpoint} binds every interface: set server.advertise_host to the "
                "address nodes should connect to"
            )
        return endpoint
    return re.sub(r"^tcp://[^:]+:", f"tcp://{host}:", endpoint)


class Channels:
    def __init__(
        self,
        transport: Transport,
        curve: CurveKeys,
        *,
        api_bind: str | None,
        heartbeat_bind: str,
        reply_bind: str,
        node_allowed: Callable[[str], bool],
        drops: Counter[str] | None = None,
    ) -> None:
        self.transport = transport
        self.curve = curve
        self.drops: Counter[str] = drops if drops is not None else Counter()
        self.api_caps: ConnectionCaps | None = None  # read by the ZAP thread
        # An edge (``server.edge``) serves nodes only: no API socket.
        self._api: zmq.Socket[bytes] | None = None
        if api_bind is not None:
            self._api = transport.socket(
                "router",
                bind=api_bind,
                hwm=API_SNDHWM,
                rcvhwm=API_RCVHWM,
                curve_server=curve,
                allowed_peers=self._api_allowed,
                handshake_ms=API_HANDSHAKE_MS,
            )
            self._api.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self._node_allowed = node_allowed
        self.flood = FloodGuard()
        self._unbound: str | None = None  # the heartbeat endpoint, while a rebind fails
        self._rebind_failed = False
        self.heartbeat = self._heartbeat_socket(heartbeat_bind)
        self.replies = transport.socket(
            "pull",
            bind=reply_bind,
            hwm=REPLY_HWM,
            curve_server=curve,
            allowed_clients=node_allowed,
        )
        self._commands: dict[tuple[str, str], zmq.Socket[bytes]] = {}
        self.command_drops = 0

    @property
    def api(self) -> zmq.Socket[bytes]:
        if self._api is None:
            raise TransportError("this process has no API socket (an edge serves nodes only)")
        return self._api

    def _heartbeat_socket(self, bind: str) -> zmq.Socket[bytes]:
        sock = self.transport.socket(
            "xpub",
            bind=bind,
            hwm=16,
            max_message_bytes=SUBSCRIPTION_MAX_BYTES,
            curve_server=self.curve,
            allowed_clients=self._heartbeat_allowed,
        )
        sock.setsockopt(zmq.XPUB_MANUAL, 1)
        return sock

    def cap_api(self, section: ServerSection, registry: KeyRegistry) -> ConnectionCaps:
        """Cap strangers' open API connections as ``section`` says (keys ``registry``
        holds as accepted are never refused); the caps, for the API socket's monitor."""
        self.api_caps = ConnectionCaps(
            per_source=section.max_api_connections_per_source,
            total=section.max_api_connections,
            known=partial(key_accepted, registry),
            drops=self.drops,
        )
        return self.api_caps

    def _api_allowed(self, key: str, address: str) -> int:  # on the ZAP thread
        caps = self.api_caps
        return ADMIT if caps is None else caps.admit(key, address)

    def _heartbeat_allowed(self, key: str) -> bool:  # on the ZAP thread
        return not self.flood.refused(key, time.monotonic()) and self._node_allowed(key)

    def endpoints(self) -> dict[str, str]:
        ends = {
            "heartbeat": bound_endpoint(self.heartbeat),
            "reply": bound_endpoint(self.replies),
        }
        if self._api is not None:
            ends["api"] = bound_endpoint(self._api)
        return ends

    def send_command(self, endpoint: str, node_curve: str, frames: list[bytes]) -> bool:
        """Queue a command for the node at ``endpoint``; False (counted) if it cannot be."""
        key = (endpoint, node_curve)
        sock = self._commands.get(key)
        if sock is None:
            sock = self.transport.socket(
                "push",
                connect=endpoint,
                hwm=COMMAND_HWM,
                curve_client=self.curve,
                server_public=node_curve,
            )
            self._commands[key] = sock
        # The backend's send, part by part: ``send_multipart`` type-checks every part in
        # Python first, a third of a command's sending cost at a 100,000-node fan-out.
        # libzmq counts its high-water mark in whole messages: once the first part is
        # taken, the rest always is.
        last = len(frames) - 1
        try:
            for i, frame in enumerate(frames):
                _send(sock, frame, _LAST if i == last else _MORE)
        except zmq.ZMQError:
            self.command_drops += 1
            return False
        return True

    def forget(self, endpoint: str, node_curve: str) -> None:
        sock = self._commands.pop((endpoint, node_curve), None)
        if sock is not None:
            self.transport.close_socket(sock)

    def publish(self, frames: list[bytes]) -> None:
        # No subscriber keeping up is no reason to wait: the next beat replaces this one.
        with contextlib.suppress(zmq.Again):
            self.heartbeat.send_multipart(frames, zmq.NOBLOCK)

    def subscriptions(self) -> None:
        """Apply the empty subscription for whoever sent it; count and drop the rest.

        In manual mode a subscription takes effect only when the loop sets it, and it
        applies to the subscriber whose message was read last: so each is handled at once.
        A key that sent a flood of other subscriptions this turn is cut off.
        """
        if self._unbound is not None:
            self._rebind(0.0)
        try:
            self._read_subscriptions()
        finally:
            flooding = self.flood.end_turn(time.monotonic())
            if flooding:
                self._cut_off(flooding)

    def _read_subscriptions(self) -> bool:
        """Handle up to a turn's worth; True if the queue was emptied."""
        sock = self.heartbeat
        for _ in range(SUBSCRIPTIONS_PER_TURN):
            try:
                frame = sock.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return True
            except zmq.ZMQError:
                self.drops["subscription"] += 1
                return True
            message = frame.bytes
            if message == b"\x01":
                sock.setsockopt(zmq.SUBSCRIBE, b"")
            elif message == b"\x00":
                sock.setsockopt(zmq.UNSUBSCRIBE, b"")
            else:
                self.drops["subscription"] += 1
                with contextlib.suppress(zmq.ZMQError):
                    self.flood.off_protocol(str(frame.get("User-Id")))
        self.drops["subscription_backlog"] += 1  # more than a turn's worth waits
        return False

    def _cut_off(self, keys: set[str]) -> None:
        """Drop every connection of the heartbeat socket (ZAP now refuses ``keys``), read
        and drop what they queued, and give the freed memory back to the system."""
        self.drops["subscription_cut_off"] += len(keys)
        log.warning(
            "heartbeat socket: cut off %s for %g s: a flood of subscriptions (an agent sends "
            "only the empty one); every subscriber reconnects",
            ", ".join(sorted(keys)),
            self.flood.cut_off_s,
        )
        if self._unbound is None:  # else it is unbound already, its rebind pending
            self._unbound = bound_endpoint(self.heartbeat)
            with contextlib.suppress(zmq.ZMQError):
                self.heartbeat.unbind(self._unbound)
        self._rebind(time.monotonic() + REBIND_TIMEOUT_S)
        # What the flood queued is freed only once read; the agents' new subscriptions are
        # among it. A bounded stall: the rest waits for the next turns.
        for _ in range(DRAIN_TURNS_AFTER_CUT):
            if self._read_subscriptions():
                break
        _trim_heap()

    def _rebind(self, deadline: float) -> None:
        """Bind the heartbeat socket's endpoint again, trying until ``deadline`` (the port
        is free again within milliseconds of the unbind). Should another process have
        taken it meanwhile, the server keeps serving and tries again every turn: its
        nodes hear no heartbeat until then, which they survive by rediscovering."""
        endpoint = self._unbound
        while endpoint is not None:
            try:
                self.heartbeat.bind(endpoint)
            except zmq.ZMQError as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                if not self._rebind_failed:
                    log.error("heartbeat socket: cannot bind %s again: %s; retrying", endpoint, exc)
                self._rebind_failed = True
                self.drops["heartbeat_unbound"] += 1
                return
            if self._rebind_failed:
                log.warning("heartbeat socket: bound %s again", endpoint)
            self._unbound, self._rebind_failed = None, False
            return

    def reply(self, identity: bytes, frames: list[bytes]) -> None:
        # A client that is gone times out on its side.
        with contextlib.suppress(zmq.ZMQError):
            self.api.send_multipart([identity, *frames], zmq.NOBLOCK)

    @property
    def command_sockets(self) -> int:
        return len(self._commands)


def key_accepted(registry: KeyRegistry, curve_public: str) -> bool:
    """Whether an accepted key of any kind (node, user, server) holds this CurveZMQ key."""
    entry = registry.by_curve_key(curve_public)
    return entry is not None and entry.state is KeyState.ACCEPTED


def _trim_heap() -> None:
    """glibc keeps freed memory for reuse; ``malloc_trim`` returns it (elsewhere: no-op)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)


def raise_open_files(wanted: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE towards ``wanted`` (capped by the hard limit)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard
