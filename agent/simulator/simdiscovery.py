"""Config discovery for a simulated fleet: every node's request pipelined over one DEALER.

Theory of operation. Nodes that need a config wait in line (``ask``); at most ``window``
requests are in flight at once (``pump``), each with a deadline after which it counts as
a timeout and the node goes back in line (``review``, once a second, which also lines up
every idle node whose config lifetime has ended). Each node signs its request with its
own Ed25519 identity, derived from the seed, through one outbox per incarnation; the
replies all arrive on the one DEALER and name their node (``accept``), and must be signed
by the server's key.

The DEALER talks to one server at a time; ``move`` replaces it with one to another server
(``agent.simulator.simleader`` decides which) and puts every request in flight back in line. Each
server gets its own replay window: the servers of one installation share a name, and one
window would take a second server's answers for a retired incarnation's.

Killed at any line: all of it is in memory and none of it matters after a restart, which
plays every node as a new incarnation and asks again for all of them.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping

import zmq

from agent.discovery import REPLY_LIMITS
from agent.simulator.simnode import SimNode
from agent.trust import trust_server
from keys import fingerprint
from keys.identity import PublicIdentity, b64
from pushjobs.protocol import messages as m
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer
from pushjobs.testbed.simkeys import SimKeys
from pushjobs.transport.sockets import CurveKeys, Transport

DEALER_HWM = 100_000


class DiscoveryPipeline:
    def __init__(
        self,
        transport: Transport,
        curve: CurveKeys,
        endpoint: str,
        keys: SimKeys,
        *,
        first: int,
        server: PublicIdentity,
        window: int,
        attempt_timeout_s: float,
        counters: Counter[str],
    ) -> None:
        self.transport = transport
        self.curve = curve
        self.server = server
        self.keys = keys
        self.first = first
        self.window = window
        self.attempt_timeout_s = attempt_timeout_s
        self.counters = counters
        self.drops: Counter[str] = Counter()  # of the servers asked before this one
        self.waiting: deque[SimNode] = deque()
        self.inflight: dict[str, float] = {}  # node name: deadline
        self.outboxes: dict[str, Outbox] = {}
        self.last_answer = 0.0  # monotonic time of the last verified reply on this DEALER
        self.endpoint = endpoint
        self.dealer = self._open(endpoint)
        self.inbox = Inbox(trust_server(server), 300.0, REPLY_LIMITS)

    def _open(self, endpoint: str) -> zmq.Socket[bytes]:
        return self.transport.socket(
            "dealer",
            connect=endpoint,
            hwm=DEALER_HWM,
            curve_client=self.curve,
            server_public=self.server.curve_public,
        )

    def move(
        self,
        endpoint: str,
        now: float,
        by_name: Mapping[str, SimNode],
        everyone: Iterable[SimNode] = (),
    ) -> None:
        """Ask ``endpoint`` from now on: a new DEALER and replay window; requests in flight
        go back to the front of the line (their answers would come to the old DEALER), and
        ``everyone`` (whose sessions are with the old server) lines up behind them."""
        self.transport.close_socket(self.dealer)
        self.dealer = self._open(endpoint)
        self.endpoint = endpoint
        self.drops.update(self.inbox.drops)
        self.inbox = Inbox(trust_server(self.server), 300.0, REPLY_LIMITS)
        self.waiting.extendleft(by_name[name] for name in reversed(list(self.inflight)))
        self.inflight.clear()
        self.last_answer = now
        self.counters["server_moves"] += 1
        for node in everyone:
            self.ask(node)

    def silent(self, now: float) -> bool:
        """Requests are in flight and nothing verified came back for an attempt timeout."""
        return bool(self.inflight) and now - self.last_answer > self.attempt_timeout_s

    def ask(self, node: SimNode) -> None:
        """Line ``node`` up for a config request, unless one is in flight already."""
        if node.name not in self.inflight:
            self.waiting.append(node)

    def forget(self, node: SimNode) -> None:
        """``node`` restarted: its request in flight (if any) no longer counts."""
        self.inflight.pop(node.name, None)

    def pump(
        self,
        now: float,
        now_ms: int,
        endpoint: str,
        facts: Mapping[str, str],
        tags: tuple[str, ...],
    ) -> None:
        """Send requests from the line while the window and the socket allow."""
        while self.waiting and len(self.inflight) < self.window:
            node = self.waiting.popleft()
            if node.name in self.inflight:
                continue
            frames = self._request(node, now_ms, endpoint, facts, tags)
            try:
                self.dealer.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                self.waiting.appendleft(node)
                return
            self.inflight[node.name] = now + self.attempt_timeout_s
            self.counters["config_requests"] += 1

    def review(self, now: float, nodes: Iterable[SimNode], by_name: Mapping[str, SimNode]) -> None:
        """Requests that timed out, and configs that expired, go back in line."""
        if not self.inflight:
            self.last_answer = now  # silence is counted from the first request in flight
        for name, deadline in list(self.inflight.items()):
            if deadline <= now:
                del self.inflight[name]
                self.counters["config_timeouts"] += 1
                self.waiting.append(by_name[name])
        # Once a second over every node: the cheapest test first (a fifth of the scan).
        for node in nodes:
            if (
                node.config_until <= now
                and node.configured
                and not node.runner.busy
                and node.name not in self.inflight
            ):
                node.config_until = now + self.attempt_timeout_s  # asked once per expiry
                self.waiting.append(node)

    def accept(
        self, frames: list[bytes], now: float, now_ms: int, by_name: Mapping[str, SimNode]
    ) -> tuple[SimNode, m.ConfigReply] | None:
        """The node a verified config reply is for, and the reply; its flight ends."""
        received = self.inbox.accept(frames, now_ms)
        reply = None if received is None else received.message
        node = by_name.get(reply.node) if isinstance(reply, m.ConfigReply) else None
        if node is None or not isinstance(reply, m.ConfigReply):
            self.counters["config_replies_dropped"] += 1
            return None
        self.inflight.pop(node.name, None)
        self.last_answer = now
        self.counters[f"config_{reply.status}"] += 1
        return node, reply

    def _request(
        self,
        node: SimNode,
        now_ms: int,
        endpoint: str,
        facts: Mapping[str, str],
        tags: tuple[str, ...],
    ) -> list[bytes]:
        identity = self.keys.private(self.first + node.index)
        outbox = self.outboxes.get(node.name)
        if outbox is None or outbox.incarnation != node.incarnation:
            signer = Ed25519Signer(
                fingerprint.self_key_id(identity.public.ed25519_public), identity.signing_key()
            )
            outbox = self.outboxes[node.name] = Outbox(node.name, node.incarnation, signer)
        return outbox.frames(
            m.ConfigRequest,
            now_ms,
            command_endpoint=endpoint,
            ed25519_public=b64(identity.public.ed25519_public),
            curve_public=identity.public.curve_public,
            facts={"simulated": "true", **facts},
            tags=tags,
        )
