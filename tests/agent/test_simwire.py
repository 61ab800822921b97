"""The simulator's cheap frames through the server's own verification of the reply channel.

Heartbeats and replies are built from precomputed parts and sent by ``FanOut`` over a real
PUSH socket; what arrives must open with the server's session keys (signature, key owner)
and pass its replay window (incarnation + sequence, timestamp), byte for byte what the
codec and ``seal`` write, across beats, a job, replies and a restart.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest
import zmq

from agent.simulator.simfanout import FanOut
from agent.simulator.simnode import Behaviour, Effect, Later, SimNode
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import parse_header, seal
from pushjobs.protocol.inbox import Inbox, Received
from pushjobs.protocol.signing import HmacSigner
from pushjobs.transport.sockets import drain
from server.front.sessions import SessionKeys

ENDPOINT = 'tcp://127.0.0.1:5555/"odd"'  # a quote in the endpoint must be escaped as JSON
INTERVAL_S = 1.0
T0_MS = 1_700_000_000_000


@pytest.fixture
def pipe() -> Iterator[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]:
    # inproc delivers within send: what was sent is there to drain, no waiting needed.
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind("inproc://simwire")
    push = ctx.socket(zmq.PUSH)
    push.connect("inproc://simwire")
    try:
        yield push, pull
    finally:
        ctx.destroy(linger=0)


class Server:
    """The server's half: session keys issued per node, one reply-channel inbox."""

    def __init__(self) -> None:
        self.sessions = SessionKeys()
        self.inbox = Inbox(self.sessions.resolve, 30.0)
        self.secrets: dict[str, bytes] = {}

    def configure(self, node: SimNode, *, restarted: bool = False) -> None:
        key = self.sessions.issue(node.name, now=0.0, restarted=restarted)
        self.secrets[key.key_id] = key.secret
        node.configure(key.key_id, key.secret, 1e9)

    def accept(self, frames: list[bytes], now_ms: int) -> Received:
        received = self.inbox.accept(frames, now_ms)
        assert received is not None, (self.inbox.drops, self.inbox.last_error)
        # Byte for byte what the codec and seal write for the message it opened to.
        _, key_id = parse_header(frames[0])
        assert frames == seal(received.message, HmacSigner(key_id, self.secrets[key_id]))
        return received


def beats(fan: FanOut, push: zmq.Socket[bytes], interval: int) -> None:
    """One interval of heartbeats, sent as the simulator's loop sends them (2 ms turns)."""
    for turn in range(1, 501):
        now = interval * INTERVAL_S + turn * 0.002
        now_ms = T0_MS + round(now * 1000)
        fan.heartbeats(push, now, now_ms, INTERVAL_S, server_online=True)


def test_heartbeats_and_replies_pass_the_servers_verification_and_replay_window(pipe) -> None:
    push, pull = pipe
    server = Server()
    nodes = [SimNode(i, f"sim-{i:05d}") for i in range(3)]
    for node in nodes:
        server.configure(node)
    counters: Counter[str] = Counter()
    fan = FanOut(nodes, ENDPOINT, 0.0, counters)
    rng, how = random.Random(1), Behaviour()

    sent: list[list[bytes]] = []

    def received() -> list[Received]:
        batch = drain(pull, 10_000)
        sent.extend(batch)
        return [server.accept(frames, T0_MS + 10_000) for frames in batch]

    # A sequence of beats: every node once per interval, sequences 1, 2, 3.
    for interval in range(3):
        beats(fan, push, interval)
    got = received()
    assert [(r.message.sender, r.message.sequence) for r in got] == [
        (node.name, seq) for seq in (1, 2, 3) for node in nodes
    ]
    assert all(isinstance(r.message, m.NodeHeartbeat) for r in got)
    assert [r.message.command_endpoint for r in got] == [ENDPOINT] * 9  # type: ignore[attr-defined]
    assert not any(r.restarted for r in got)

    # A job: replies interleave with heartbeats that carry its id and state.
    busy = nodes[1]

    def reply(effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Later):  # not the commit timeout or the process's end
                fan.reply(busy, busy.incarnation, effect.cls, effect.fields)

    job_id = 'job-"1"\\é'  # escaped as the codec escapes it
    commit = m.Commit(
        sender="srv",
        incarnation="si",
        sequence=1,
        timestamp=T0_MS,
        node=busy.name,
        job_id=job_id,
        command="true",
    )
    reply(busy.on_commit(commit, rng, how, 0.0))
    fan.flush(push, T0_MS + 3_001)
    beats(fan, push, 3)
    run = m.Run(
        sender="srv", incarnation="si", sequence=2, timestamp=T0_MS, node=busy.name, job_id=job_id
    )
    reply(busy.on_run(run, how, 0.0))
    fan.flush(push, T0_MS + 4_001)
    beats(fan, push, 4)
    reply(busy.finish(job_id, rng, how, 0.5))
    fan.flush(push, T0_MS + 5_001)
    beats(fan, push, 5)
    from_busy = [
        (r.message.TYPE, r.message.sequence, getattr(r.message, "job_state", None))
        for r in received()
        if r.message.sender == busy.name
    ]
    assert from_busy == [
        ("ack_commit", 4, None),
        ("node_heartbeat", 5, "committed"),
        ("ack_run", 6, None),
        ("node_heartbeat", 7, "running"),
        ("succeeded", 8, None),
        ("node_heartbeat", 9, None),
    ]

    # A restart: a new incarnation starts again at sequence 1, and the server takes it as
    # a restart; the old incarnation's frames are replays from then on.
    old_frames = nodes[0].heartbeat_frames(ENDPOINT, T0_MS + 6_000)
    nodes[0].restart()
    server.configure(nodes[0], restarted=True)
    beats(fan, push, 6)
    fan.reply(nodes[0], nodes[0].incarnation, m.AckCommit, {"job_id": "j2"})
    fan.flush(push, T0_MS + 7_001)
    got = [r for r in received() if r.message.sender == nodes[0].name]
    assert [(r.message.TYPE, r.message.sequence, r.restarted) for r in got] == [
        ("node_heartbeat", 1, True),
        ("ack_commit", 2, False),
    ]
    assert server.inbox.accept(old_frames, T0_MS + 10_000) is None
    assert server.inbox.accept(sent[-1], T0_MS + 10_000) is None  # accepted once already
    assert server.inbox.drops == {"replay": 2}
    assert counters["heartbeats_sent"] == 3 * 7 and not counters["heartbeats_dropped"]
    assert counters["replies_sent"] == 4
