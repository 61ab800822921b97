"""Config discovery: ask a server for this node's config, one bounded attempt at a time.

The request is signed with the node's Ed25519 identity key and carries its public keys (so
an unknown node can enrol as ``pending``); it travels over a DEALER that is a CurveZMQ
client of the server, pinned to the server key from the agent's config. The answer must
be signed by that same server key. Each attempt gets a fresh socket, closed afterwards:
a DEALER whose peer is dead would otherwise keep the request queued forever.

The socket's monitor (``pushjobs.transport.handshake``) tells a server that refuses the
CurveZMQ handshake (``agent.server_key`` is not its key) from one that does not answer:
the attempt ends at the second failed handshake with the ``Refusal``, not at its timeout.

A server that stands by answers ``not_leader`` and names the leader's API endpoint
(``ConfigReply.leader``); ``agent.rediscovery`` has it asked next.

Between attempts the daemon waits as tenacity's random exponential backoff says
(``backoff_s``), trying every configured server in turn; ``agent.rediscovery`` decides
when. Killed mid-attempt, nothing is lost: the socket dies with the process, and the
restarted agent asks again as a new incarnation.
"""

from __future__ import annotations

import base64
import time

import zmq

from agent.trust import trust_server
from keys.identity import PrivateIdentity, PublicIdentity, b64
from pushjobs.errors import TransportError
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.messages import ConfigReply, ConfigRequest
from pushjobs.protocol.outbox import Outbox
from pushjobs.transport.handshake import HandshakeMonitor, Refusal, connect_monitored
from pushjobs.transport.sockets import CurveKeys, Transport

REPLY_LIMITS = Limits(max_header_bytes=2048, max_body_bytes=1024 * 1024)


def backoff_s(attempt: int, minimum_s: float, maximum_s: float) -> float:
    """tenacity's full-jitter exponential wait before attempt number ``attempt + 1``."""
    # Imported on the first failed attempt: an agent that finds its server at once never
    # pays tenacity's ~3.5 MiB.
    import tenacity

    wait = tenacity.wait_random_exponential(multiplier=minimum_s, max=maximum_s)
    state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
    state.attempt_number = max(1, attempt)
    return max(minimum_s / 2, float(wait(state)))


class Discovery:
    def __init__(
        self,
        transport: Transport,
        identity: PrivateIdentity,
        server: PublicIdentity,
        outbox: Outbox,
        max_skew_s: float = 300.0,
    ) -> None:
        self.transport = transport
        self.identity = identity
        self.server = server
        self.outbox = outbox
        self.resolve = trust_server(server, "config reply signed by an unknown key {!r}")
        self.max_skew_s = max_skew_s

    def attempt(
        self,
        endpoint: str,
        command_endpoint: str,
        facts: dict[str, str],
        tags: tuple[str, ...],
        timeout_s: float,
    ) -> ConfigReply | Refusal | None:
        """The server's answer; the refused handshake; or None if no answer came in time
        (or it did not verify)."""
        public = self.identity.public
        # A replay window per attempt: the servers of one installation share a name, each
        # process its own incarnation, and an agent may ask one, then another, then the
        # first again; one window would take the third answer for a retired incarnation's.
        # A fresh DEALER per attempt already keeps an old answer from passing for a new one.
        inbox = Inbox(self.resolve, self.max_skew_s, REPLY_LIMITS)
        sock = self.transport.socket(
            "dealer",
            hwm=4,
            curve_client=CurveKeys(public.curve_public, self.identity.curve_secret),
            server_public=self.server.curve_public,
        )
        monitor: HandshakeMonitor | None = None
        try:
            monitor = connect_monitored(sock, endpoint)
            poller = zmq.Poller()
            poller.register(sock, zmq.POLLIN)
            poller.register(monitor.socket, zmq.POLLIN)
            frames = self.outbox.frames(
                ConfigRequest,
                time.time_ns() // 1_000_000,
                command_endpoint=command_endpoint,
                ed25519_public=b64(public.ed25519_public),
                curve_public=public.curve_public,
                facts=facts,
                tags=tags,
            )
            sock.send_multipart(frames, zmq.NOBLOCK)
            deadline = time.monotonic() + timeout_s
            while (remaining := deadline - time.monotonic()) > 0:
                ready = dict(poller.poll(round(remaining * 1000)))
                refusal = monitor.refused if monitor.socket in ready else None
                if refusal is not None:
                    return refusal
                if sock not in ready:
                    continue
                received = inbox.accept(sock.recv_multipart(), time.time_ns() // 1_000_000)
                reply = None if received is None else received.message
                if isinstance(reply, ConfigReply) and reply.node == public.name:
                    return reply
            return None
        except (zmq.ZMQError, TransportError):
            return None
        finally:
            if monitor is not None:
                monitor.close()
            self.transport.close_socket(sock)


def session_key(b64_text: str) -> bytes:
    return base64.b64decode(b64_text, validate=True)
