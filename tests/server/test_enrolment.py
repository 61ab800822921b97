"""Discovery and enrolment decisions: who gets a config, who is told to wait, who is cut off."""

from __future__ import annotations

from pathlib import Path

import pytest

from keys.identity import PrivateIdentity, b64, generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.protocol.codec import decode
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import ConfigReply, ConfigRequest
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import HmacSigner
from server.core.nodetable import NodeTable
from server.front.enrolment import Enrolment, node_key_accepted
from server.front.sessions import SessionKeys
from server.shell.serverconfig import ServerConfig, ServerSection

T0 = 1_700_000_000_000


class CommandSockets:
    """Stands in for the command socket pool: records which sockets were dropped."""

    def __init__(self) -> None:
        self.forgotten: list[tuple[str, str]] = []

    def forget(self, endpoint: str, curve: str) -> None:
        self.forgotten.append((endpoint, curve))


class Setup:
    def __init__(self, tmp_path: Path, *, auto_accept: bool) -> None:
        self.registry = KeyRegistry(tmp_path / "registry.json")
        self.sessions = SessionKeys()
        self.nodes = NodeTable(LivenessTracker(1.0, 3, 1))
        self.sockets = CommandSockets()
        config = ServerConfig(server=ServerSection(auto_accept=auto_accept))
        self.enrolment = Enrolment(
            config,
            generate("server", "server"),
            registry=self.registry,
            sessions=self.sessions,
            nodes=self.nodes,
            channels=self.sockets,  # type: ignore[arg-type]
            outbox=Outbox("server", "inc", HmacSigner("k", b"s" * 32)),
            server_incarnation="inc",
            heartbeat_endpoint="tcp://127.0.0.1:1",
            reply_endpoint="tcp://127.0.0.1:2",
        )
        self.replies: list[ConfigReply] = []

    def ask(
        self,
        node: PrivateIdentity,
        endpoint: str = "tcp://127.0.0.1:9",
        incarnation: str = "i",
        now: float = 0.0,
    ) -> ConfigReply:
        request = ConfigRequest(
            sender=node.name,
            incarnation=incarnation,
            sequence=1,
            timestamp=T0,
            command_endpoint=endpoint,
            ed25519_public=b64(node.public.ed25519_public),
            curve_public=node.public.curve_public,
        )
        self.enrolment.config_request(b"id", request, now, T0, self._reply)
        # The daemon writes new keys at the end of its turn (batched, see admission.py).
        self.enrolment.admission.flush(now, force=True)
        return self.replies[-1]

    def _reply(self, identity: bytes, frames: list[bytes]) -> None:
        reply = decode(frames[1])
        assert isinstance(reply, ConfigReply)
        self.replies.append(reply)


def test_a_new_node_key_waits_for_an_admin_and_gets_no_session(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=False)
    reply = setup.ask(generate("n1", "node"))
    assert (reply.node, reply.status, reply.config) == ("n1", "pending", None)
    assert "pushjobs key accept n1" in reply.message
    assert setup.sessions.nodes() == [] and setup.nodes.get("n1") is None


def test_an_accepted_node_gets_a_config_with_a_fresh_session_key(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    node = generate("n1", "node")
    reply = setup.ask(node)
    assert reply.status == "accepted" and reply.config is not None
    assert reply.config.reply_endpoint == "tcp://127.0.0.1:2"
    assert setup.sessions.resolve("hmac-sha256", reply.config.session_key_id).owner == "n1"
    info = setup.nodes.get("n1")
    assert info is not None and info.command_endpoint == "tcp://127.0.0.1:9"
    assert setup.enrolment.curve_of("n1") == node.public.curve_public


def test_a_node_that_comes_back_with_a_new_key_drops_the_old_command_socket(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    first = generate("n1", "node")
    setup.ask(first)
    # The admin re-keyed the node: the same name, a new accepted key.
    setup.registry.delete(["n1"])
    second = generate("n1", "node")
    assert setup.ask(second).status == "accepted"
    assert setup.sockets.forgotten == [("tcp://127.0.0.1:9", first.public.curve_public)]


def test_another_key_under_a_registered_name_is_denied(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    setup.ask(generate("n1", "node"))
    reply = setup.ask(generate("n1", "node"))
    assert (reply.status, reply.config) == ("denied", None)


def test_a_name_registered_as_a_user_is_refused_as_a_node(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    setup.registry.add(generate("alice", "user").public, state=KeyState.ACCEPTED, role="reader")
    reply = setup.ask(generate("alice", "node"))
    assert reply.status == "rejected" and "registered as a user" in reply.message


def test_a_rejected_key_loses_its_session_once_and_can_still_be_told(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    node = generate("n1", "node")
    setup.ask(node)
    assert setup.enrolment.revoked() == []
    setup.registry.reject(["n1"])
    assert setup.enrolment.revoked() == ["n1"]
    assert setup.sessions.nodes() == []
    assert setup.enrolment.curve_of("n1") is None  # no command goes out in its session
    contact = setup.enrolment.contacts["n1"]  # but it can be told to abort, and rediscover
    assert (contact.endpoint, contact.curve) == ("tcp://127.0.0.1:9", node.public.curve_public)
    assert setup.sockets.forgotten == []
    assert setup.enrolment.revoked() == []  # nothing changed since: no second pass


@pytest.mark.parametrize(
    ("kind", "state", "admitted"),
    [
        ("node", KeyState.ACCEPTED, True),
        ("node", KeyState.PENDING, False),
        ("node", KeyState.REJECTED, False),
        ("user", KeyState.ACCEPTED, False),
    ],
)
def test_the_reply_channel_admits_only_accepted_node_keys(
    tmp_path: Path, kind: str, state: KeyState, admitted: bool
) -> None:
    registry = KeyRegistry(tmp_path / "registry.json")
    identity = generate("k1", kind)
    role = "reader" if kind == "user" else None
    registry.add(identity.public, state=state, role=role)
    assert node_key_accepted(registry, identity.public.curve_public) is admitted
    assert not node_key_accepted(registry, generate("k2", "node").public.curve_public)


def test_config_lifetime_and_thresholds_come_from_the_servers_settings(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    reply = setup.ask(generate("n1", "node"))
    assert reply.config is not None
    defaults = ServerConfig()
    assert reply.config.lifetime_s == defaults.server.config_lifetime_s
    assert (
        reply.config.interval_s,
        reply.config.offline_threshold,
        reply.config.online_threshold,
    ) == (
        defaults.liveness.interval_s,
        defaults.liveness.offline_threshold,
        defaults.liveness.online_threshold,
    )


def online(setup: Setup, node: str, incarnation: str, endpoint: str) -> None:
    for now in (0.0, 0.5):  # online_threshold heartbeats
        setup.nodes.heartbeat(node, incarnation, endpoint, None, None, restarted=False, now=now)


def test_a_second_agent_is_refused_while_the_first_is_online_and_named(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    node = generate("n1", "node")
    assert setup.ask(node, "tcp://127.0.0.1:9", "first").status == "accepted"
    online(setup, "n1", "first", "tcp://127.0.0.1:9")
    sessions_before = setup.sessions.signer("n1")
    reply = setup.ask(node, "tcp://127.0.0.1:10", "second")
    assert reply.status == "denied" and "online at tcp://127.0.0.1:9" in reply.message
    assert setup.sessions.signer("n1") is sessions_before  # the first keeps its session
    second = setup.enrolment.duplicate("n1", 1.0)
    assert second is not None and (second.endpoint, second.incarnation) == (
        "tcp://127.0.0.1:10",
        "second",
    )
    assert setup.enrolment.duplicate("n1", 1000.0) is None  # shown for a while, not forever


def test_the_same_agent_or_a_restart_on_its_own_port_is_admitted(tmp_path: Path) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    node = generate("n1", "node")
    setup.ask(node, "tcp://127.0.0.1:9", "first")
    online(setup, "n1", "first", "tcp://127.0.0.1:9")
    assert setup.ask(node, "tcp://127.0.0.1:9", "first").status == "accepted"  # asks again
    assert setup.ask(node, "tcp://127.0.0.1:9", "restarted").status == "accepted"


def test_nodes_under_a_retired_key_are_told_at_their_last_contact_at_most_every_2_s(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    node = generate("n1", "node")
    setup.ask(node, "tcp://127.0.0.1:9")
    told = setup.enrolment.stale_contacts({"n1", "never-admitted"}, now=10.0)
    assert [(n, c.endpoint, c.curve) for n, c in told] == [
        ("n1", "tcp://127.0.0.1:9", node.public.curve_public)
    ]
    assert setup.enrolment.stale_contacts({"n1"}, now=11.0) == []
    assert len(setup.enrolment.stale_contacts({"n1"}, now=12.0)) == 1


def test_a_new_agent_is_admitted_once_the_online_one_has_missed_a_heartbeat(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path, auto_accept=True)
    node = generate("n1", "node")
    setup.ask(node, "tcp://127.0.0.1:9", "first")
    online(setup, "n1", "first", "tcp://127.0.0.1:9")  # last heard at 0.5, interval 1 s
    assert setup.ask(node, "tcp://127.0.0.1:10", "second", now=1.9).status == "denied"
    # Still online (3 intervals), but silent for more than 1.5: it died; this is its restart.
    assert setup.ask(node, "tcp://127.0.0.1:10", "second", now=2.1).status == "accepted"
