"""The agent's command socket against an impostor server and replayed frames.

An in-process agent with its real command socket (CurveZMQ server), configured exactly as
discovery would configure it; the test plays the server: it holds the server's keys and a
session key, and forges what an attacker on the network could send.
"""

from __future__ import annotations

import base64
import io
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from agent.agentconfig import AgentConfig
from agent.agentd import Agent, now_ms
from keys.fingerprint import key_id
from keys.identity import PrivateIdentity, generate
from pushjobs.config import load_config
from pushjobs.protocol import messages as m
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer, HmacSigner
from pushjobs.testbed.sandbox import Sandbox, free_port
from pushjobs.transport.sockets import CurveKeys, Transport, drain

SESSION_KID = "sess-0001"
SESSION_KEY = secrets.token_bytes(32)


class Channel:
    """The test's end of an agent's command socket: it plays the server."""

    def __init__(self, agent: Agent, server: PrivateIdentity, transport: Transport) -> None:
        self.agent = agent
        self.server = server
        self.push = self.connect(transport, server)

    def connect(self, transport: Transport, curve_of: PrivateIdentity) -> zmq.Socket[bytes]:
        return transport.socket(
            "push",
            connect=self.agent.command_endpoint,
            curve_client=CurveKeys(curve_of.public.curve_public, curve_of.curve_secret),
            server_public=self.agent.identity.public.curve_public,
        )

    def deliver(self, frames: list[bytes], push: zmq.Socket[bytes] | None = None) -> int:
        """Send one message and feed what the agent's socket receives to the agent."""
        (push or self.push).send_multipart(frames)
        if not self.agent.command.poll(5000):
            raise AssertionError("the agent's command socket received nothing")
        batch = drain(self.agent.command, 16)
        for received in batch:
            self.agent._on_command(received)
        return len(batch)


def session_outbox(server: PrivateIdentity, incarnation: str = "srv-inc-1") -> Outbox:
    return Outbox(server.name, incarnation, HmacSigner(SESSION_KID, SESSION_KEY))


def ed25519_outbox(signer_of: PrivateIdentity, name: str, incarnation: str) -> Outbox:
    signer = Ed25519Signer(key_id(signer_of.public.ed25519_public), signer_of.signing_key())
    return Outbox(name, incarnation, signer)


def commit(outbox: Outbox, job_id: str, node: str = "node-1") -> list[bytes]:
    return outbox.frames(m.Commit, now_ms(), node=node, job_id=job_id, command="true")


@pytest.fixture
def channel(tmp_path: Path) -> Iterator[Channel]:
    sandbox = Sandbox(tmp_path, nodes=["node-1"]).prepare()
    server = sandbox.identities["server"]
    agent = Agent(load_config(AgentConfig, tmp_path / "agents" / "node-1.toml"), out=io.StringIO())
    unbound = f"tcp://127.0.0.1:{free_port()}"  # replies queue; nothing needs to read them
    agent.apply_config(
        m.NodeConfig(
            server_id=server.name,
            server_incarnation="srv-inc-1",
            heartbeat_endpoint=unbound,
            reply_endpoint=unbound,
            server_ed25519_public=base64.b64encode(server.public.ed25519_public).decode(),
            server_curve_public=server.public.curve_public,
            interval_s=1.0,
            offline_threshold=3,
            online_threshold=2,
            max_skew_s=30.0,
            max_body_bytes=65536,
            session_key_id=SESSION_KID,
            session_key_b64=base64.b64encode(SESSION_KEY).decode(),
            lifetime_s=3600.0,
        ),
        sandbox.api,
    )
    agent.outbound.queued.clear()  # whatever discovery queued is not under test
    with Transport() as transport:
        try:
            yield Channel(agent, server, transport)
        finally:
            agent.shutdown()


def replies(agent: Agent) -> list[tuple[str, str]]:
    return [(cls.TYPE, fields["job_id"]) for cls, fields in agent.outbound.queued]


def test_a_command_signed_with_the_session_key_is_obeyed(channel: Channel) -> None:
    channel.deliver(commit(session_outbox(channel.server), "job-1"))
    assert replies(channel.agent) == [("ack_commit", "job-1")]
    assert channel.agent.intake.inbox.dropped == 0


def test_a_command_signed_with_the_server_identity_key_is_obeyed(channel: Channel) -> None:
    outbox = ed25519_outbox(channel.server, channel.server.name, "srv-inc-1")
    channel.deliver(commit(outbox, "job-1"))
    assert replies(channel.agent) == [("ack_commit", "job-1")]


def test_replayed_command_frames_are_dropped(channel: Channel) -> None:
    outbox = session_outbox(channel.server)
    outbox.sequence = 10
    frames = commit(outbox, "job-1")
    channel.deliver(frames)
    channel.deliver(frames)  # captured on the wire, sent again verbatim
    assert channel.agent.intake.inbox.drops["replay"] == 1
    # An older sequence re-signed is no better than the same frames.
    outbox.sequence = 5
    channel.deliver(outbox.frames(m.Abort, now_ms(), node="node-1", job_id="job-1"))
    assert channel.agent.intake.inbox.drops["replay"] == 2
    assert replies(channel.agent) == [("ack_commit", "job-1")]
    assert channel.agent.runner.job_id == "job-1"  # the abort did not land


def test_a_retired_server_incarnation_cannot_come_back(channel: Channel) -> None:
    channel.deliver(commit(session_outbox(channel.server, "srv-inc-1"), "job-1"))
    newer = session_outbox(channel.server, "srv-inc-2")
    channel.deliver(newer.frames(m.Abort, now_ms(), node="node-1", job_id="job-1"))
    stale = session_outbox(channel.server, "srv-inc-1")
    stale.sequence = 1000
    channel.deliver(commit(stale, "job-2"))
    assert channel.agent.intake.inbox.drops["replay"] == 1
    assert ("ack_commit", "job-2") not in replies(channel.agent)


def test_commands_from_a_wrong_server_key_are_dropped(channel: Channel) -> None:
    impostor = generate("server", "server")
    # Its own key id: a key this agent never trusted.
    channel.deliver(commit(ed25519_outbox(impostor, channel.server.name, "x"), "job-1"))
    assert channel.agent.intake.inbox.drops["unknown_key"] == 1
    # The real server's key id in the header, the impostor's signature under it.
    forged = commit(ed25519_outbox(impostor, channel.server.name, "x"), "job-2")
    forged[0] = f"PJ1 ed25519 {key_id(channel.server.public.ed25519_public)}".encode()
    channel.deliver(forged)
    assert channel.agent.intake.inbox.drops["signature"] == 1
    # A session key this node was never given.
    other_session = Outbox(
        channel.server.name, "x", HmacSigner("sess-9999", secrets.token_bytes(32))
    )
    channel.deliver(commit(other_session, "job-3"))
    assert channel.agent.intake.inbox.drops["unknown_key"] == 2
    # The right key id with the wrong secret.
    wrong_secret = Outbox(
        channel.server.name, "x", HmacSigner(SESSION_KID, secrets.token_bytes(32))
    )
    channel.deliver(commit(wrong_secret, "job-4"))
    assert channel.agent.intake.inbox.drops["signature"] == 2
    assert replies(channel.agent) == []
    assert channel.agent.runner.job_id is None
    # Still serving: the real server's next command is obeyed.
    channel.deliver(commit(session_outbox(channel.server), "job-5"))
    assert replies(channel.agent) == [("ack_commit", "job-5")]


def test_a_valid_command_for_another_node_is_dropped(channel: Channel) -> None:
    channel.deliver(commit(session_outbox(channel.server), "job-1", node="node-2"))
    assert channel.agent.intake.inbox.drops["other_node"] == 1
    assert replies(channel.agent) == []


def test_only_the_servers_transport_key_gets_through(channel: Channel) -> None:
    """CurveZMQ refuses the handshake of any other client key: nothing reaches the agent."""
    with Transport() as transport:
        stranger = channel.connect(transport, generate("mallory", "node"))
        stranger.send_multipart(commit(session_outbox(channel.server), "job-1"))
        assert channel.agent.command.poll(500) == 0  # bounded: absence is what is asserted
    channel.deliver(commit(session_outbox(channel.server), "job-2"))
    assert replies(channel.agent) == [("ack_commit", "job-2")]


def test_a_run_is_acknowledged_and_no_started_reply_follows(channel: Channel) -> None:
    """The server acts on no ``started`` reply: the agent sends none (one message a job
    less for every node of a fleet)."""
    outbox = session_outbox(channel.server)
    channel.deliver(commit(outbox, "job-1"))
    channel.deliver(outbox.frames(m.Run, now_ms(), node="node-1", job_id="job-1"))
    assert channel.agent.runner.job_id == "job-1"
    assert replies(channel.agent) == [("ack_commit", "job-1"), ("ack_run", "job-1")]
