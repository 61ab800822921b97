"""A job whose snapshot cannot be encoded (a value a bug put in its state) does not stop the
server's flush: that job is ended crashed, written with the value as its repr, its nodes
told to abort and nothing else of it sent; the other jobs are written and sent as ever,
and a successor restores both."""

from __future__ import annotations

import collections
import logging
from typing import Any

import orjson
import pytest

from pushjobs.clock import FakeClock
from pushjobs.log.memory import MemoryLog, MemoryStore
from pushjobs.protocol.messages import AckCommit
from pushjobs.quorum import Quorum
from pushjobs.states import JobState
from server.core.effects import JobChanged, Send
from server.core.job import Job
from server.core.jobparams import JobRequest
from server.core.records import job_events, recordable
from tests.server.test_scheduler import SESSION_S, Server


class Recorder:
    """The command sender, as the sends it was asked for."""

    secrets = None

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def send(self, send: Send, job: Any, now_ms: int) -> None:
        self.sent.append((send.kind, send.job_id, send.node))

    def take_undeliverable(self) -> dict[tuple[str, str], str]:
        return {}


def request(command: str) -> JobRequest:
    return JobRequest(command, ["n1", "n2"], Quorum.parse("100%"), 60.0, 30.0, {})


def ack(job_id: str, node: str) -> AckCommit:
    return AckCommit(sender=node, incarnation="i", sequence=1, timestamp=0, job_id=job_id)


def snapshot(store: MemoryStore, clock: FakeClock, server: Server, job_id: str) -> Any:
    log = MemoryLog(store, clock=clock)
    record = log.latest(server.topics.assignments)[f"job:{job_id}"]
    assert record.value is not None
    return orjson.loads(record.value)


def test_an_unencodable_job_is_ended_crashed_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    store = MemoryStore()
    a = Server(store, clock, "a")
    sender = a.jobs.sender = Recorder()  # type: ignore[assignment]
    for node in ("n1", "n2"):
        a.jobs.liveness.heartbeat(node, clock.monotonic())
    a.lead()
    now = clock.wall_ms()
    bad, good = (
        a.jobs.start(request("bad"), "alice", now),
        a.jobs.start(request("ok"), "alice", now),
    )
    a.jobs.flush(now)
    assert sorted(sender.sent) == sorted(
        ("commit", job, node) for job in (bad, good) for node in ("n1", "n2")
    )
    sender.sent.clear()

    # A bug puts a value orjson cannot encode in one job's state; both jobs then change.
    a.jobs.coordinator.jobs[bad].run_timeout_ms = 2**64  # beyond the log's 64-bit integers
    for job_id in (bad, good):
        for node in ("n1", "n2"):
            a.jobs.reply(ack(job_id, node), now + 1)
    with caplog.at_level(logging.ERROR, logger="pushjobs.server"):
        a.jobs.flush(now + 1)  # raises nothing

    # The other job is written and its nodes told to run.
    assert snapshot(store, clock, a, good)["state"] == "running"
    assert sorted(sender.sent) == sorted(
        [("run", good, "n1"), ("run", good, "n2"), ("abort", bad, "n1"), ("abort", bad, "n2")]
    )
    # The bad one ended crashed, written with the value as its repr, once logged and counted.
    job = a.jobs.coordinator.jobs[bad]
    assert job.state.value == "crashed"
    assert all(n.state.value == "crashed" for n in job.nodes.values())
    written = snapshot(store, clock, a, bad)
    assert written["state"] == "crashed" and written["run_timeout_ms"] == repr(2**64)
    assert written["version"] == a.jobs.coordinator.versions[bad]
    assert bad not in {j.job_id for j in a.jobs.coordinator.active()}
    assert a.jobs.unrecordable == 1
    [line] = [r.getMessage() for r in caplog.records if bad in r.getMessage()]
    assert "cannot be recorded" in line

    # A successor restores both: the crashed one finished, the other still running.
    clock.advance(SESSION_S + 1)
    b = Server(store, clock, "b")
    b.leadership.renew(clock.monotonic())
    assert b.jobs.take_over(collections.deque(), clock.wall_ms(), 0) is not None
    restored = b.jobs.coordinator.jobs
    assert restored[bad].state.value == "crashed" and restored[good].state.value == "running"


def test_an_event_with_a_value_that_cannot_be_encoded_is_written_with_its_repr() -> None:
    job = Job.new("j1", "echo \ud800", ["n1"], 1000)  # a lone surrogate: not UTF-8
    [(key, value)] = job_events(
        [JobChanged("j1", JobState.NEW, JobState.VOTING, 1000)], {"j1": job}, "a"
    )
    assert key == "job:j1" and orjson.loads(value)["command"] == repr("echo \ud800")
    assert recordable({1: [2**64, "ok", None], "\ud800": 1}) == {
        "1": [repr(2**64), "ok", None],
        repr("\ud800"): 1,
    }
