"""Everything a simulated fleet sends, through its one PUSH socket: heartbeats and replies.

Heartbeats are spread evenly over the interval by a cursor over the node list: node i
beats at phase i/K of each interval, with no per-node timer. A simulator that stalled for
over an interval sends one beat per node, not a burst; while the server is offline the
cursor moves on and nothing is sent. A heartbeat the socket does not take at once is
dropped and counted: a late heartbeat is worthless.

Replies wait in one queue, each tagged with the incarnation of the node that made it: a
reply from before its node restarted is lost (as an agent's would be); a silent node's
replies are held, not lost; one too big for the server's limit is counted and dropped.
Each turn sends the replies before the heartbeats (``Simulator.turn``): one socket carries
every node, and a server reading less than the fleet sends would otherwise see the
heartbeats fill the queue at every turn and no reply ever taken.

Each message leaves as three ``send`` calls of the socket's backend class, not one
``send_multipart``: pyzmq's ``send_multipart`` type-checks every part in Python and then
calls the ``zmq.Socket.send`` override, which only adds draft sockets' routing ids and
groups before calling the backend's; the direct calls cost a third as much, and sending
was the largest share of a heartbeat once its frames became cheap (bench/simulator.py).
Only the first part can meet a full queue: libzmq counts its high-water mark in whole
messages, so once a message's first part is taken the rest of it always is, and a message
is never left half sent.

Killed at any line: the queue is in memory and is lost with the process, as a killed
agent's would be; a restarted simulator plays new incarnations that owe nothing.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from typing import Any, Final

import zmq

from agent.simulator.simnode import SimNode, Stamp
from pushjobs.errors import OversizedFrame
from pushjobs.protocol import messages as m

Queued = tuple[SimNode, str, type[m.Message], dict[str, Any]]

FIRST: Final = zmq.SNDMORE | zmq.NOBLOCK
LAST: Final = zmq.NOBLOCK
_send: Final = zmq.backend.Socket.send  # zmq.Socket's base: see the docstring


class FanOut:
    def __init__(
        self, nodes: Sequence[SimNode], endpoint: str, origin: float, counters: Counter[str]
    ) -> None:
        self.nodes = nodes
        self.endpoint = endpoint
        self.counters = counters
        self.replies: deque[Queued] = deque()
        self.beat_origin = origin
        self.beat_cursor = 0

    def reply(
        self, node: SimNode, incarnation: str, cls: type[m.Message], fields: dict[str, Any]
    ) -> None:
        self.replies.append((node, incarnation, cls, fields))

    def next_beat(self, interval_s: float) -> float:
        """When the next heartbeat falls due (monotonic seconds)."""
        step = interval_s / len(self.nodes)
        return self.beat_origin + (self.beat_cursor + 1) * step

    def heartbeats(
        self,
        push: zmq.Socket[bytes],
        now: float,
        now_ms: int,
        interval_s: float,
        *,
        server_online: bool,
    ) -> None:
        """Send the heartbeats that fell due since the last call."""
        nodes = self.nodes
        count = len(nodes)
        if not count:
            return
        due = int((now - self.beat_origin) / interval_s * count)
        cursor = self.beat_cursor
        if due - cursor > count:  # stalled for over an interval: one beat each, not a burst
            cursor = due - count
        if due <= cursor:
            return
        self.beat_cursor = due
        if not server_online:
            return
        stamp = Stamp(self.endpoint, now_ms)
        send = _send
        sent = dropped = 0
        for i in range(cursor, due):
            node = nodes[i % count]
            if node.silent or node.outbox is None:
                continue
            header, body, signature = node.beat(stamp)
            sock = push if node.link is None else node.link
            try:
                send(sock, header, FIRST)
            except zmq.Again:  # a queued heartbeat is worthless: drop it, count it
                dropped += 1
                continue
            send(sock, body, FIRST)
            send(sock, signature, LAST)
            sent += 1
        self.counters["heartbeats_sent"] += sent
        if dropped:
            self.counters["heartbeats_dropped"] += dropped

    def flush(self, push: zmq.Socket[bytes], now_ms: int) -> None:
        """Send the queued replies the socket takes now; the rest waits for the next turn."""
        for _ in range(len(self.replies)):
            node, incarnation, cls, fields = self.replies.popleft()
            if incarnation != node.incarnation:
                self.counters["replies_lost_in_restart"] += 1
                continue
            if node.silent or node.outbox is None:
                self.replies.append((node, incarnation, cls, fields))  # held, not lost
                continue
            try:
                header, body, signature = node.reply_frames(cls, now_ms, fields)
            except OversizedFrame:
                self.counters["replies_oversized"] += 1
                continue
            sock = push if node.link is None else node.link
            try:
                _send(sock, header, FIRST)
            except zmq.Again:
                self.replies.appendleft((node, incarnation, cls, fields))
                return
            _send(sock, body, FIRST)
            _send(sock, signature, LAST)
            self.counters["replies_sent"] += 1
