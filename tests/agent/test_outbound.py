"""The agent's outbound side: a bounded reply queue, shrinking, outcomes that survive."""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq

from agent.executor import Outcome
from agent.journal import Journal
from agent.outbound import Outbound, outcome_reply, shrink
from pushjobs.clock import FakeClock
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import Limits, open_frames
from pushjobs.protocol.signing import HmacSigner, HmacVerifier

KEY = bytes(range(32))


class Push:
    """A PUSH socket's stand-in: takes ``room`` messages, then would block."""

    def __init__(self, room: int = 1000) -> None:
        self.room = room
        self.sent: list[list[bytes]] = []

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        assert flags == zmq.NOBLOCK
        if len(self.sent) >= self.room:
            raise zmq.Again()
        self.sent.append(frames)


def opened(frames: list[bytes]) -> m.Message:
    return open_frames(frames, lambda method, kid: HmacVerifier(KEY, owner="node-1"))


@pytest.fixture
def journal(tmp_path: Path):
    j = Journal(tmp_path / "journal.db")
    yield j
    j.close()


def outbound(journal: Journal, max_body_bytes: int = 65536, **kw: object) -> Outbound:
    out = Outbound("node-1", "inc-1", "tcp://127.0.0.1:9", journal, next_beat=0.0, **kw)
    out.rekey(HmacSigner("sess-1", KEY), Limits(max_body_bytes=max_body_bytes), 1.0)
    return out


def test_a_full_queue_drops_the_oldest_reply(journal: Journal) -> None:
    out = outbound(journal, max_queued=3)
    for i in range(5):
        out.queue(m.AckCommit, {"job_id": f"j{i}"})
    assert [fields["job_id"] for _, fields in out.queued] == ["j2", "j3", "j4"]


def test_flush_sends_what_the_socket_takes_and_keeps_the_rest(journal: Journal) -> None:
    out = outbound(journal)
    for i in range(3):
        out.queue(m.AckCommit, {"job_id": f"j{i}"})
    out.flush(None, 1)  # the server is offline: nothing leaves
    assert len(out.queued) == 3
    push = Push(room=2)
    out.flush(push, 1)
    assert [opened(f).job_id for f in push.sent] == ["j0", "j1"]
    assert [fields["job_id"] for _, fields in out.queued] == ["j2"]


def test_an_oversized_outcome_is_shrunk_until_it_fits(journal: Journal) -> None:
    out = outbound(journal, max_body_bytes=2048)
    big = m.JobOutput(stdout="o" * 4000, stderr="e" * 100)
    fields = {"job_id": "j1", "exit_status": 1, "reason": "x", "output": big, "duration_ms": 1}
    out.queue(m.Failed, fields)
    push = Push()
    out.flush(push, 1)
    sent = opened(push.sent[0])
    assert isinstance(sent, m.Failed) and sent.output is not None
    assert len(sent.output.stdout) < 2048 and sent.output.stdout_truncated
    assert sent.output.stdout == "o" * len(sent.output.stdout)  # the tail is what is kept
    assert not out.queued


def test_an_oversized_reply_without_output_is_dropped(journal: Journal) -> None:
    out = outbound(journal, max_body_bytes=512)
    out.queue(m.NackCommit, {"job_id": "j1", "reason": "x" * 1000})
    out.queue(m.AckCommit, {"job_id": "j2"})
    push = Push()
    out.flush(push, 1)
    assert [opened(f).job_id for f in push.sent] == ["j2"]


def test_shrink_halves_each_tail_and_marks_what_it_cut() -> None:
    half = shrink(m.JobOutput(stdout="abcd", stderr=""))
    assert (half.stdout, half.stdout_truncated, half.stderr_truncated) == ("cd", True, False)


def test_a_heartbeat_that_cannot_leave_is_dropped_not_queued(journal: Journal) -> None:
    clock = FakeClock()
    out = outbound(journal)
    full = Push(room=0)
    out.heartbeat(full, clock.monotonic(), clock.wall_ms(), job_id=None, job_state=None)
    assert not out.queued and not full.sent
    assert out.next_beat == clock.monotonic() + 1.0
    push = Push()
    clock.advance(1.0)
    assert out.beat_due(clock.monotonic())
    out.heartbeat(push, clock.monotonic(), clock.wall_ms(), job_id="j1", job_state="running")
    beat = opened(push.sent[0])
    assert isinstance(beat, m.NodeHeartbeat) and beat.job_state == "running"


def test_an_outcome_survives_a_restart_and_is_sent_again(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    out = outbound(journal)
    output = m.JobOutput(stdout="hi\n")
    out.outcome("j1", "succeeded", {"exit_status": 0, "output": output, "duration_ms": 5}, 100)
    journal.close()  # killed before the reply left: only the journal remains
    journal = Journal(tmp_path / "journal.db")
    again = outbound(journal)
    again.resend_last(since_ms=50)
    push = Push()
    again.flush(push, 200)
    sent = opened(push.sent[0])
    assert isinstance(sent, m.Succeeded)
    assert (sent.job_id, sent.exit_status, sent.output) == ("j1", 0, output)
    journal.close()


def test_outcome_reply_keeps_output_only_when_asked_except_on_failure() -> None:
    def outcome(status: str) -> Outcome:
        return Outcome("j1", status, 3, 7, "out", "err", False, False, "why")

    kind, fields = outcome_reply(outcome("succeeded"), capture=False)
    assert (kind, fields["exit_status"], fields["output"]) == ("succeeded", 3, None)
    kind, fields = outcome_reply(outcome("timed_out"), capture=False)
    assert kind == "failed" and fields["output"] == m.JobOutput("out", "err", False, False)
    kind, fields = outcome_reply(outcome("aborted"), capture=True)
    assert (kind, fields["reason"]) == ("aborted", "why") and fields["output"] is not None
