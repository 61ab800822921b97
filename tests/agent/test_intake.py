"""Command intake: which commands reach the runner, and what the others are counted as."""

from __future__ import annotations

import base64
import secrets
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from agent.envpolicy import EnvPolicy
from agent.intake import BeatNow, CommandIntake, Hold, Rediscover, Resend
from agent.journal import Journal
from agent.runner import JobRunner, Remember, Reply, StartProcess
from agent.trust import trust_server
from agent.whitelist import Rule, Whitelist
from agent.whitelist_file import refusal
from keys.fingerprint import key_id
from keys.identity import generate
from pushjobs.clock import FakeClock
from pushjobs.protocol import messages as m
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer, HmacSigner
from tests.protocol.samples import CONFIG

SERVER = generate("server", "server")


def node_config(kid: str, key: bytes) -> m.NodeConfig:
    key_b64 = base64.b64encode(key).decode()
    return replace(CONFIG, server_id="server", session_key_id=kid, session_key_b64=key_b64)


class Desk:
    """An intake over a real runner and journal, keyed with one session key."""

    def __init__(self, tmp_path: Path, whitelist: tuple[str, ...] = ("true",)) -> None:
        self.clock = FakeClock()
        self.runner = JobRunner(60.0)
        self.journal = Journal(tmp_path / "journal.db")
        self.intake = CommandIntake(
            "node-1",
            trust_server(SERVER.public),
            self.runner,
            self.journal,
            partial(refusal, Whitelist(tuple(Rule(n, n, None) for n in whitelist)), EnvPolicy()),
        )
        self.keys: dict[str, bytes] = {}
        self.rekey("sess-1", None)
        self.sequence = 0

    def rekey(self, kid: str, previous: str | None) -> None:
        self.keys[kid] = secrets.token_bytes(32)
        self.intake.rekey(node_config(kid, self.keys[kid]), self.keys[kid], previous)

    def frames(self, cls: type[m.Message], kid: str = "sess-1", **fields: object) -> list[bytes]:
        outbox = Outbox("server", "srv-1", HmacSigner(kid, self.keys[kid]))
        outbox.sequence = self.sequence  # one server incarnation: its sequence goes on
        self.sequence += 1
        if cls is not m.ServerHeartbeat:
            fields.setdefault("node", "node-1")
        return outbox.frames(cls, self.clock.wall_ms(), **fields)

    def send(self, frames: list[bytes], *, online: bool = True) -> list[object]:
        return list(
            self.intake.on_command(
                frames, self.clock.monotonic(), self.clock.wall_ms(), server_online=online
            )
        )


@pytest.fixture
def desk(tmp_path: Path):
    d = Desk(tmp_path)
    yield d
    d.journal.close()


def test_a_commit_is_held_remembered_and_acked(desk: Desk) -> None:
    effects = desk.send(desk.frames(m.Commit, job_id="j1", command="true"))
    assert isinstance(effects[0], Hold) and effects[0].commit.job_id == "j1"
    assert effects[1:] == [Remember("j1"), Reply("ack_commit", "j1")]
    assert desk.runner.job_id == "j1"


def test_a_command_for_another_node_is_dropped(desk: Desk) -> None:
    assert desk.send(desk.frames(m.Commit, node="node-2", job_id="j1", command="true")) == []
    assert desk.intake.inbox.drops["other_node"] == 1
    assert desk.runner.job_id is None


def test_commands_are_discarded_while_the_server_is_offline(desk: Desk) -> None:
    assert desk.send(desk.frames(m.Commit, job_id="j1", command="true"), online=False) == []
    assert desk.intake.dropped_offline == 1
    assert desk.runner.job_id is None
    assert not desk.journal.seen("j1")


def test_a_replayed_command_is_dropped(desk: Desk) -> None:
    frames = desk.frames(m.Commit, job_id="j1", command="true")
    desk.send(frames)
    assert desk.send(frames) == []
    assert desk.intake.inbox.drops["replay"] == 1


def test_the_previous_session_key_is_kept_and_the_one_before_is_not(desk: Desk) -> None:
    desk.rekey("sess-2", previous="sess-1")
    assert desk.send(desk.frames(m.Ping, kid="sess-1")) == [BeatNow()]
    desk.rekey("sess-3", previous="sess-2")
    assert desk.send(desk.frames(m.Ping, kid="sess-1")) == []
    assert desk.intake.inbox.drops["unknown_key"] == 1
    assert desk.send(desk.frames(m.Ping, kid="sess-2")) == [BeatNow()]
    assert desk.send(desk.frames(m.Ping, kid="sess-3")) == [BeatNow()]


def test_a_command_not_on_the_whitelist_is_nacked_and_not_held(desk: Desk) -> None:
    effects = desk.send(desk.frames(m.Commit, job_id="j1", command="rm"))
    assert effects == [Reply("nack_commit", "j1", "command 'rm' is not whitelisted")]


def test_a_refused_variable_is_named_in_the_nack_and_not_held(desk: Desk) -> None:
    options = m.RunOptions(env={"LD_PRELOAD": "/tmp/x.so"})
    effects = desk.send(desk.frames(m.Commit, job_id="j1", command="true", options=options))
    reason = "env LD_PRELOAD is refused by this node's env policy (matches 'LD_*')"
    assert effects == [Reply("nack_commit", "j1", reason)]


def test_a_run_of_a_finished_job_resends_its_stored_outcome(desk: Desk) -> None:
    desk.journal.store_outcome("j1", "succeeded", b'{"job_id":"j1"}', 1)
    effects = desk.send(desk.frames(m.Run, job_id="j1"))
    assert effects == [Resend("j1", "succeeded", b'{"job_id":"j1"}')]


def test_a_run_after_a_commit_starts_the_process(desk: Desk) -> None:
    desk.send(desk.frames(m.Commit, job_id="j1", command="true"))
    effects = desk.send(desk.frames(m.Run, job_id="j1"))
    assert effects == [Reply("ack_run", "j1"), StartProcess("j1")]


def test_server_messages_that_are_no_commands_are_counted(desk: Desk) -> None:
    beat = desk.frames(m.ServerHeartbeat, leader=True)
    assert desk.send(beat) == []
    assert desk.intake.inbox.drops["other_node"] == 1  # it names no node, so not this one
    reply = desk.frames(m.ConfigReply, status="pending", message="")
    assert desk.send(reply) == []
    assert desk.intake.inbox.drops["unexpected"] == 1
    assert desk.runner.job_id is None


def test_a_ping_to_rediscover_signed_with_the_servers_own_key_is_obeyed(desk: Desk) -> None:
    # The node's session is over on the server, so only the server's identity can sign it.
    signer = Ed25519Signer(key_id(SERVER.public.ed25519_public), SERVER.signing_key())
    outbox = Outbox("server", "srv-1", signer)
    outbox.sequence = desk.sequence
    ping = outbox.frames(m.Ping, desk.clock.wall_ms(), node="node-1", rediscover=True)
    assert desk.send(ping) == [Rediscover()]
    impostor = generate("x", "server").signing_key()
    forged = Outbox("server", "srv-1", Ed25519Signer(signer.key_id, impostor))
    forged.sequence = desk.sequence + 5
    frames = forged.frames(m.Ping, desk.clock.wall_ms(), node="node-1", rediscover=True)
    assert desk.send(frames) == []
    assert desk.intake.inbox.drops["signature"] == 1
