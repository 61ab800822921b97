"""What a new leader rebuilds from the log (a memory log, no daemon)."""

from __future__ import annotations

from collections import deque

from pushjobs.log.memory import MemoryLog
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.messages import AckCommit, Message
from pushjobs.states import JobState, NodeState
from server.core import records
from server.core.coordinator import Coordinator
from server.core.job import Job
from server.shell.recovery import recover
from server.shell.takeover import take_over

T0 = 1_700_000_000_000
GRACE = 8_000


def voting_job(job_id: str, names: list[str]) -> Job:
    job = Job.new(job_id, "true", names, T0)
    job.start(names, T0)
    return job


def written_log(*jobs: Job, unstarted: dict[str, object] | None = None) -> MemoryLog:
    log = MemoryLog()
    topics = create_standard_topics(log)
    for job in jobs:
        log.append_batch(topics.assignments, records.snapshot_records(job, 3))
    if unstarted is not None:
        record = records.command_record(str(unstarted["job_id"]), unstarted)
        log.append_batch(topics.commands, [record])
    return log


def test_active_jobs_come_back_with_their_versions_and_their_unfinished_nodes() -> None:
    job = voting_job("j1", ["a", "b"])
    job.ack_commit("a", T0 + 1)
    log = written_log(job)
    coordinator = Coordinator()
    done = take_over(coordinator, recover(log, create_standard_topics(log)), deque(), T0 + 5, GRACE)
    assert coordinator.jobs["j1"].state is JobState.VOTING
    assert coordinator.versions["j1"] == 3
    assert done.unfinished_nodes == {"a", "b"}  # ready and new alike still owe a result
    assert done.active == 1
    # The whole job is rewritten: its header and every chunk.
    assert [key for key, _ in done.rewrite] == ["job:j1", "job:j1/nodes/0"]


def test_a_start_request_never_started_is_ended_aborted_not_started_late() -> None:
    log = written_log(
        unstarted={
            "type": "start",
            "job_id": "j2",
            "command": "true",
            "targets": ["a"],
            "created_ms": T0,
            "requested_by": "alice",
        }
    )
    coordinator = Coordinator()
    done = take_over(coordinator, recover(log, create_standard_topics(log)), deque(), T0 + 5, GRACE)
    job = coordinator.jobs["j2"]
    assert job.state is JobState.ABORTED
    assert job.nodes["a"].reason == "server restarted before the job started"
    assert done.changes  # persisted by the caller's next flush
    assert done.unfinished_nodes == set()


def test_a_damaged_start_request_is_reported_and_skipped() -> None:
    log = written_log(unstarted={"type": "start", "job_id": "j3"})
    coordinator = Coordinator()
    take_over(coordinator, recover(log, create_standard_topics(log)), deque(), T0, GRACE)
    assert "j3" not in coordinator.jobs


def test_replies_kept_while_no_server_led_are_applied_in_order() -> None:
    log = written_log(voting_job("j1", ["a", "b"]))
    kept: deque[Message] = deque(
        AckCommit(sender=n, incarnation="i", sequence=1, timestamp=T0, job_id="j1")
        for n in ("a", "b")
    )
    coordinator = Coordinator()
    done = take_over(coordinator, recover(log, create_standard_topics(log)), kept, T0 + 5, GRACE)
    assert not kept
    assert done.replayed == 2
    job = coordinator.jobs["j1"]
    assert job.state is JobState.RUNNING  # both votes counted: quorum met
    assert {r.state for r in job.nodes.values()} == {NodeState.READY}


def test_a_deadline_that_passed_while_no_server_led_is_moved_not_applied() -> None:
    voting = voting_job("j1", ["a", "b"])  # vote deadline T0 + 30 s
    running = voting_job("j2", ["a"])
    running.ack_commit("a", T0 + 1)  # quorum met: run deadline T0 + 1 + 1 h
    log = written_log(voting, running)
    coordinator = Coordinator()
    later = T0 + 60_000  # the servers were down for a minute
    take_over(coordinator, recover(log, create_standard_topics(log)), deque(), later, GRACE)
    assert coordinator.jobs["j1"].vote_deadline_ms == later + GRACE
    assert coordinator.jobs["j1"].vote_timeout_ms == 30_000  # the job's own setting stays
    assert coordinator.jobs["j2"].run_deadline_ms == T0 + 1 + 3_600_000  # far off: kept
    assert coordinator.tick(later) == []  # nothing fails at the takeover itself
    assert coordinator.jobs["j1"].state is JobState.VOTING
