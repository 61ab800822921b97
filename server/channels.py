"""The server's sockets (DESIGN section 3) and its pool of per-endpoint command sockets.

    API        ROUTER, bound, CurveZMQ server (any client key: the registry decides)
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
by libzmq. Known limit: libzmq queues what it read from subscribers ahead of the loop
without a bound, so an insider (an accepted node key) sending small subscriptions faster
than the loop reads them grows server memory while it keeps on (``bench/hostile.py``,
``subscriptions-node``); ``subscription_backlog`` counts the turns that could not empty it.
"""

from __future__ import annotations

import contextlib
import re
from collections import Counter
from collections.abc import Callable

import zmq

from pushjobs.errors import TransportError
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint

COMMAND_HWM = 100_000  # one endpoint may serve many nodes (a simulator, a multi-agent host)
REPLY_HWM = 100_000
API_HWM = 10_000
# An agent sends a one-byte subscription; the CurveZMQ handshake's commands (HELLO 200
# bytes, INITIATE with its metadata a few hundred) pass through the same limit.
SUBSCRIPTION_MAX_BYTES = 1024
SUBSCRIPTIONS_PER_TURN = 10_000


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
        api_bind: str,
        heartbeat_bind: str,
        reply_bind: str,
        node_allowed: Callable[[str], bool],
        drops: Counter[str] | None = None,
    ) -> None:
        self.transport = transport
        self.curve = curve
        self.drops: Counter[str] = drops if drops is not None else Counter()
        self.api = transport.socket(
            "router", bind=api_bind, hwm=API_HWM, curve_server=curve, allowed_clients=_any
        )
        self.api.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self._node_allowed = node_allowed
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

    def _heartbeat_socket(self, bind: str) -> zmq.Socket[bytes]:
        sock = self.transport.socket(
            "xpub",
            bind=bind,
            hwm=16,
            max_message_bytes=SUBSCRIPTION_MAX_BYTES,
            curve_server=self.curve,
            allowed_clients=self._node_allowed,
        )
        sock.setsockopt(zmq.XPUB_MANUAL, 1)
        return sock

    def endpoints(self) -> dict[str, str]:
        return {
            "api": bound_endpoint(self.api),
            "heartbeat": bound_endpoint(self.heartbeat),
            "reply": bound_endpoint(self.replies),
        }

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
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
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
        """
        for _ in range(SUBSCRIPTIONS_PER_TURN):
            try:
                message = self.heartbeat.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError:
                self.drops["subscription"] += 1
                return
            if message == b"\x01":
                self.heartbeat.setsockopt(zmq.SUBSCRIBE, b"")
            elif message == b"\x00":
                self.heartbeat.setsockopt(zmq.UNSUBSCRIBE, b"")
            else:
                self.drops["subscription"] += 1
        self.drops["subscription_backlog"] += 1  # more than a turn's worth waits

    def reply(self, identity: bytes, frames: list[bytes]) -> None:
        # A client that is gone times out on its side.
        with contextlib.suppress(zmq.ZMQError):
            self.api.send_multipart([identity, *frames], zmq.NOBLOCK)

    @property
    def command_sockets(self) -> int:
        return len(self._commands)


def _any(client_key: str) -> bool:
    return True


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
