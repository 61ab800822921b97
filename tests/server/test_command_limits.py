"""A command that cannot be sealed (too large for the channel, not encodable) is counted and
kept for the job to end, never raised: the send runs inside the server's loop."""

from __future__ import annotations

import logging

import pytest

from pushjobs.protocol.framing import Limits, open_frames
from pushjobs.protocol.messages import Commit
from pushjobs.protocol.signing import HmacSigner, HmacVerifier
from pushjobs.states import NodeState
from server.core.effects import Send
from server.core.job import Job
from server.shell.commands import TOO_LARGE
from tests.server.test_commands import SECRET, T0, SentCommands, known_nodes, sender_for


def big_job(job_id: str, limits: Limits) -> Job:
    env = {"X": "a" * (limits.max_body_bytes + 1)}
    return Job.new(job_id, "true", ["a"], T0, options={"env": env})


def test_a_commit_too_large_for_the_channel_is_counted_logged_once_and_kept_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    channels = SentCommands()
    sender = sender_for(known_nodes(), channels, signer=HmacSigner("s", SECRET))
    job = big_job("j1", sender.limits)
    with caplog.at_level(logging.ERROR, logger="pushjobs.server"):
        sender.send(Send("commit", "j1", "a"), job, T0)
        sender.send(Send("commit", "j1", "a"), job, T0 + 2000)  # a heartbeat's repeat
    assert channels.sent == []
    assert sender.counters["oversized"] == 2
    [line] = [r.getMessage() for r in caplog.records]
    assert "j1" in line and TOO_LARGE in line
    assert sender.take_undeliverable() == {("j1", "a"): TOO_LARGE}
    assert sender.take_undeliverable() == {}  # taken once
    # The sender goes on: the next job's commit leaves.
    sender.send(Send("commit", "j2", "a"), Job.new("j2", "true", ["a"], T0), T0)
    [(_, _, frames)] = channels.sent
    message = open_frames(frames, lambda method, kid: HmacVerifier(SECRET, owner="server"))
    assert isinstance(message, Commit) and message.job_id == "j2"


def test_a_commit_that_cannot_be_encoded_is_counted_unencodable() -> None:
    channels = SentCommands()
    sender = sender_for(known_nodes(), channels, signer=HmacSigner("s", SECRET))
    job = Job.new("j1", "true", ["a"], T0, options={"env": {"X": 2**70}})
    sender.send(Send("commit", "j1", "a"), job, T0)
    assert channels.sent == [] and sender.counters["unencodable"] == 1
    [(key, why)] = sender.take_undeliverable().items()
    assert key == ("j1", "a") and why.startswith("commit cannot be sent")


def test_an_undeliverable_commit_ends_the_node_as_a_no_vote_with_the_reason() -> None:
    """What the job's owner does with ``take_undeliverable``: the node votes no, with the
    reason, and a job that needs it ends at once instead of at its vote deadline."""
    channels = SentCommands()
    sender = sender_for(known_nodes(), channels, signer=HmacSigner("s", SECRET))
    job = big_job("j1", sender.limits)
    [send] = [e for e in job.start(["a"], T0) if isinstance(e, Send)]
    sender.send(send, job, T0)
    for (_, node), why in sender.take_undeliverable().items():
        job.nack_commit(node, T0 + 1, why)
    assert job.nodes["a"].state is NodeState.NACKED and job.nodes["a"].reason == TOO_LARGE
    assert job.finished
