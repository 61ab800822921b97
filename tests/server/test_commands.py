"""Commands to nodes: what is sent, what is counted unsendable, when a heartbeat means "lost"."""

from __future__ import annotations

from typing import Any

from pushjobs.protocol.framing import Limits, open_frames
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import Abort, Commit, Run
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import HmacSigner, HmacVerifier, Signer
from server.core.effects import Send
from server.core.job import Job
from server.core.nodetable import NodeTable
from server.shell.commands import RESEND_AFTER_MS, CommandSender

T0 = 1_700_000_000_000
SECRET = b"k" * 32


class SentCommands:
    """Stands in for the command sockets: records what would leave, by endpoint and key."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, list[bytes]]] = []

    def send_command(self, endpoint: str, curve: str, frames: list[bytes]) -> None:
        self.sent.append((endpoint, curve, frames))


def sender_for(nodes: NodeTable, channels: Any, *, signer: Signer | None) -> CommandSender:
    return CommandSender(
        Outbox("server", "inc", HmacSigner("server-key", SECRET)),
        Limits(),
        channels,
        nodes,
        curve_of=lambda node: "curve-" + node if node == "a" else None,
        signer_of=lambda node: signer,
    )


def known_nodes() -> NodeTable:
    nodes = NodeTable(LivenessTracker(1.0, 3, 1))
    nodes.register("a", "tcp://127.0.0.1:9", {}, ())
    return nodes


def test_a_commit_is_signed_with_the_nodes_session_key_and_carries_the_jobs_options() -> None:
    channels = SentCommands()
    job = Job.new("j1", "deploy", ["a"], T0, run_timeout_ms=7000, options={"env": {"X": "1"}})
    sender = sender_for(known_nodes(), channels, signer=HmacSigner("session-a", SECRET))
    sender.send(Send("commit", "j1", "a"), job, T0)
    [(endpoint, curve, frames)] = channels.sent
    assert (endpoint, curve) == ("tcp://127.0.0.1:9", "curve-a")
    message = open_frames(frames, lambda method, kid: HmacVerifier(SECRET, owner="server"))
    assert isinstance(message, Commit)
    assert (message.node, message.job_id, message.command) == ("a", "j1", "deploy")
    assert message.options.timeout_s == 7.0 and message.options.env == {"X": "1"}
    assert sender.asked == {("j1", "a"): T0}


def test_a_node_without_a_session_or_key_is_counted_unsendable_not_sent() -> None:
    channels = SentCommands()
    job = Job.new("j1", "true", ["a", "b"], T0)
    no_session = sender_for(known_nodes(), channels, signer=None)
    no_session.send(Send("run", "j1", "a"), job, T0)
    with_session = sender_for(known_nodes(), channels, signer=HmacSigner("s", SECRET))
    with_session.send(Send("run", "j1", "b"), job, T0)  # b: no curve key, no endpoint
    with_session.send(Send("run", "gone", "a"), None, T0)  # the job is no longer known
    assert channels.sent == []
    assert no_session.counters["unsendable"] == 1
    assert with_session.counters["unsendable"] == 2


def test_only_a_heartbeat_built_well_after_the_last_command_says_it_was_lost() -> None:
    channels = SentCommands()
    sender = sender_for(known_nodes(), channels, signer=HmacSigner("s", SECRET))
    job = Job.new("j1", "true", ["a"], T0)
    run = Send("run", "j1", "a")
    assert sender.due_again(run, T0)  # never sent: due
    sender.send(run, job, T0)
    assert isinstance(
        open_frames(channels.sent[0][2], lambda m, k: HmacVerifier(SECRET, owner="server")), Run
    )
    assert not sender.due_again(run, T0 + RESEND_AFTER_MS - 1)  # built before it could arrive
    assert sender.due_again(run, T0 + RESEND_AFTER_MS)


def test_an_abort_needs_no_job_is_stamped_and_stamps_are_forgotten_oldest_first() -> None:
    channels = SentCommands()
    sender = sender_for(known_nodes(), channels, signer=HmacSigner("s", SECRET))
    sender.send(Send("abort", "forgotten", "a"), None, T0)  # a job retired long ago
    message = open_frames(channels.sent[0][2], lambda m, k: HmacVerifier(SECRET, owner="server"))
    assert isinstance(message, Abort) and message.job_id == "forgotten"
    assert sender.aborted == {("forgotten", "a"): T0} and sender.asked == {}
    assert not sender.due_again(Send("abort", "forgotten", "a"), T0 + 1)
    assert sender.due_again(Send("run", "forgotten", "a"), T0 + 1)  # a stamp per kind
    sender.aborted = {("j0", "b"): T0 - 5000, ("forgotten", "a"): T0}  # oldest first
    sender.asked.update({("j0", "a"): T0 - 5000, ("j1", "a"): T0})
    sender.forget(T0 - 1)
    assert list(sender.asked) == [("j1", "a")]
    assert list(sender.aborted) == [("forgotten", "a")]
