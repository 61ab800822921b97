"""``job start --offline-wait``: targets offline at start wait for their return
(``server/core/offlinewait.py``), in the job and in the coordinator, on a fake clock."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
import pytest

from pushjobs.errors import ApiError
from pushjobs.log.memory import MemoryLog
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.messages import AckCommit, NackCommit, Succeeded
from pushjobs.quorum import Quorum
from pushjobs.states import JobState, NodeState
from server.core import records
from server.core.coordinator import Coordinator
from server.core.effects import NodeChanged, Send
from server.core.job import Job
from server.core.jobparams import JobRequest, job_params, job_request
from server.core.offlinewait import GAVE_UP, NO_QUORUM, WAITING
from server.core.policy import Hold
from server.shell.recovery import recover
from server.shell.takeover import take_over
from tests.server.test_takeover_pending import Leader

T0 = 1_700_000_000_000
WAIT_MS = 60_000  # the offline wait
VOTE_MS, RUN_MS = 1_000, 5_000


def new_job(nodes=("a", "b", "c"), **kwargs) -> Job:
    kwargs.setdefault("offline_wait_ms", WAIT_MS)
    return Job.new(
        "j1", "uptime", nodes, T0, vote_timeout_ms=VOTE_MS, run_timeout_ms=RUN_MS, **kwargs
    )


def sends(effects, kind=None):
    return [(e.kind, e.node) for e in effects if isinstance(e, Send) and kind in (None, e.kind)]


def states(job: Job) -> dict[str, str]:
    return {name: r.state.value for name, r in job.nodes.items()}


def running_with_c_offline() -> Job:
    """a and b online at start and run; c waits ``offline``."""
    job = new_job()
    out = job.start(["a", "b"], T0)
    assert sends(out) == [("commit", "a"), ("commit", "b")]  # c is not asked
    job.ack_commit("a", T0 + 1)
    job.ack_commit("b", T0 + 2)
    assert job.state is JobState.RUNNING
    return job


def test_an_offline_target_waits_and_the_quorum_is_judged_over_the_online_ones() -> None:
    job = running_with_c_offline()  # quorum 100%: a and b were enough
    assert states(job)["c"] == "offline"
    assert job.nodes["c"].reason == WAITING
    assert job.offline_until_ms == T0 + WAIT_MS
    assert job.snapshot(nodes=False)["summary"] == {"offline": 1, "ready": 2}


def test_a_late_node_is_asked_durably_first_then_votes_alone_and_runs() -> None:
    job = running_with_c_offline()
    out = job.admit("c", T0 + 10_000)
    # The move is before the commit: the daemon persists it before the commit leaves.
    assert isinstance(out[0], NodeChanged) and out[0].state is NodeState.NEW
    assert out[1:] == [Send("commit", "j1", "c")]
    assert job.nodes["c"].reason == ""
    assert sends(job.ack_commit("c", T0 + 10_001)) == [("run", "c")]
    for name in "abc":
        job.succeeded(name, T0 + 10_002)
    assert job.state is JobState.COMPLETE  # before the deadline: nobody waits any more


def test_the_job_does_not_end_before_the_deadline_and_then_the_rest_are_unavailable() -> None:
    job = running_with_c_offline()
    job.succeeded("a", T0 + 3)
    job.succeeded("b", T0 + 4)
    assert job.state is JobState.RUNNING  # c may still come
    assert job.next_deadline_ms() == T0 + WAIT_MS
    assert job.tick(T0 + WAIT_MS - 1) == []
    job.tick(T0 + WAIT_MS)
    assert job.state is JobState.COMPLETE
    assert job.nodes["c"].state is NodeState.UNAVAILABLE
    assert job.nodes["c"].reason == GAVE_UP
    assert job.admit("c", T0 + WAIT_MS + 1) == []  # too late: never asked


def test_a_node_back_after_the_deadline_is_not_asked() -> None:
    job = running_with_c_offline()
    assert job.admit("c", T0 + WAIT_MS) == []
    assert job.nodes["c"].state is NodeState.OFFLINE  # the tick gives it up


def test_a_restart_while_waiting_changes_nothing_and_one_after_the_commit_is_a_crash() -> None:
    job = running_with_c_offline()
    assert job.node_lost("c", T0 + 5, "node restarted", restarted=True) == []
    assert job.nodes["c"].state is NodeState.OFFLINE
    job.admit("c", T0 + 6)
    job.node_lost("c", T0 + 7, "node restarted", restarted=True)
    assert job.nodes["c"].state is NodeState.CRASHED
    assert job.admit("c", T0 + 8) == []  # never asked again: exactly once


def test_every_target_offline_runs_each_as_it_comes() -> None:
    job = new_job(("a", "b"))
    out = job.start([], T0)
    assert job.state is JobState.RUNNING  # nobody to judge: the quorum is met vacuously
    assert sends(out) == []
    assert job.run_deadline_ms == T0 + WAIT_MS + VOTE_MS + RUN_MS  # a late node's run fits
    job.admit("a", T0 + 100)
    assert sends(job.ack_commit("a", T0 + 101)) == [("run", "a")]
    job.succeeded("a", T0 + 102)
    job.tick(T0 + WAIT_MS)
    assert states(job) == {"a": "succeeded", "b": "unavailable"}
    assert job.state is JobState.COMPLETE


def test_a_failed_quorum_waits_for_nobody() -> None:
    job = new_job(("a", "b", "c"), quorum=Quorum.parse("2"))
    job.start(["a", "b"], T0)
    job.ack_commit("a", T0 + 1)
    job.nack_commit("b", T0 + 2, "no")
    assert job.state is JobState.QUORUM_FAILED
    assert job.nodes["c"].state is NodeState.UNAVAILABLE
    assert job.nodes["c"].reason == NO_QUORUM


def test_a_node_back_while_the_job_votes_votes_with_the_others() -> None:
    job = new_job(("a", "b"))
    job.start(["a"], T0)
    assert sends(job.admit("b", T0 + 1)) == [("commit", "b")]
    job.ack_commit("a", T0 + 2)
    assert job.state is JobState.VOTING  # b is a voter now
    assert sends(job.ack_commit("b", T0 + 3)) == [("run", "a"), ("run", "b")]


def test_a_late_voter_silent_for_the_vote_timeout_is_unavailable() -> None:
    job = running_with_c_offline()
    job.admit("c", T0 + 10)
    assert job.next_deadline_ms() == T0 + 10 + VOTE_MS
    out = job.tick(T0 + 10 + VOTE_MS)
    assert job.nodes["c"].state is NodeState.UNAVAILABLE
    assert sends(out) == [("abort", "c")]  # in case its commit arrives late


def test_a_new_leader_waits_until_the_same_instant_and_knows_its_late_voters() -> None:
    job = running_with_c_offline()
    job.admit("c", T0 + 10)
    restored = Job.restore(job.snapshot())
    restored.rearm(T0 + 20_000)  # a takeover's grace
    assert restored.offline_until_ms == T0 + WAIT_MS
    assert restored.next_deadline_ms() == T0 + 20_000  # c's vote deadline, floored
    assert sends(restored.ack_commit("c", T0 + 11)) == [("run", "c")]

    waiting = Job.restore(running_with_c_offline().snapshot())
    assert waiting.nodes["c"].state is NodeState.OFFLINE
    assert waiting.next_deadline_ms() == T0 + WAIT_MS


def test_a_late_node_of_a_batch_job_joins_the_back_of_the_queue() -> None:
    job = new_job(("a", "b", "c"), options={"batch": {"size": "1"}})
    job.start(["a", "b"], T0)
    job.ack_commit("a", T0 + 1)
    job.ack_commit("b", T0 + 2)
    assert states(job) == {"a": "ready", "b": "waiting", "c": "offline"}
    job.admit("c", T0 + 3)
    job.ack_commit("c", T0 + 4)
    assert states(job)["c"] == "waiting"
    assert sends(job.succeeded("a", T0 + 5), "run") == [("run", "b")]
    assert sends(job.succeeded("b", T0 + 6), "run") == [("run", "c")]


def test_an_aborted_job_sends_no_abort_to_a_node_never_asked() -> None:
    job = running_with_c_offline()
    out = job.abort(T0 + 5)
    assert sends(out) == [("abort", "a"), ("abort", "b")]
    assert job.nodes["c"].state is NodeState.ABORTED


def test_without_the_option_an_offline_target_is_unavailable_at_once() -> None:
    job = new_job(offline_wait_ms=0)
    job.start(["a", "b"], T0)
    assert job.nodes["c"].state is NodeState.UNAVAILABLE
    assert job.offline_until_ms is None


# --- the coordinator -----------------------------------------------------------------------


def env(seq: int, sender: str = "a") -> dict[str, Any]:
    return {"sender": sender, "incarnation": "i", "sequence": seq, "timestamp": T0}


def coordinator() -> Coordinator:
    coord = Coordinator()
    coord.submit(
        "j1",
        "true",
        ["a", "b"],
        ["a"],
        T0,
        quorum=Quorum(),
        vote_timeout_ms=VOTE_MS,
        run_timeout_ms=RUN_MS,
        options={},
        requested_by="alice",
        offline_wait_ms=WAIT_MS,
    )
    coord.reply(AckCommit(**env(1), job_id="j1"), T0)
    return coord


def test_the_coordinator_asks_a_returning_node_once_and_repeats_while_it_is_silent() -> None:
    coord = coordinator()
    assert coord.holding("b") == []  # never asked: it holds nothing
    assert coord.node_online("b") == []  # nothing to repeat yet
    out = coord.admit("b", T0 + 10)
    assert [s for s in out if isinstance(s, Send)] == [Send("commit", "j1", "b")]
    assert coord.admit("b", T0 + 11) == []  # asked already
    assert coord.unreported("b", None) == [Send("commit", "j1", "b")]  # a lost commit
    assert coord.holding("b") == ["j1"]


def test_a_late_node_still_holding_a_job_over_for_it_is_told_to_let_go_not_nacked() -> None:
    # Back from a long absence, b still holds a job this server no longer knows (ended and
    # retired while b was away): its "busy" is stale. As in a vote, the old job is
    # aborted on b and b's commit goes again at its next heartbeat, STALE_BUSY_TRIES
    # times, before a "busy" counts as its no.
    coord = coordinator()
    coord.admit("b", T0 + 10)
    nack = NackCommit(**env(1, "b"), job_id="j1", reason="busy with job gone-job")
    assert coord.reply(nack, T0 + 11) == [Send("abort", "gone-job", "b")]
    assert coord.jobs["j1"].nodes["b"].state is NodeState.NEW  # not counted: asked again
    assert coord.unreported("b", None) == [Send("commit", "j1", "b")]
    coord.reply(AckCommit(**env(2, "b"), job_id="j1"), T0 + 12)
    assert coord.jobs["j1"].nodes["b"].state is NodeState.READY


def test_the_coordinator_ends_the_job_at_the_deadline() -> None:
    coord = coordinator()
    coord.reply(Succeeded(**env(2), job_id="j1", exit_status=0, duration_ms=1), T0 + 1)
    assert coord.next_deadline_ms() == T0 + WAIT_MS
    coord.tick(T0 + WAIT_MS)
    assert coord.jobs["j1"].state is JobState.COMPLETE
    assert coord.jobs["j1"].nodes["b"].state is NodeState.UNAVAILABLE


# --- the request ---------------------------------------------------------------------------


def test_the_request_keeps_the_wait_and_bounds_it() -> None:
    params = job_params({"command": "true", "nodes": ["a"], "offline_wait_s": 1800}, None)
    assert job_request(params).offline_wait_s == 1800.0
    for bad in (0, -1, 366 * 86_400, "30m", True):
        with pytest.raises(ApiError):
            job_params({"command": "true", "nodes": ["a"], "offline_wait_s": bad}, None)


# --- a takeover: what a new leader reads back from the log ---------------------------------

GRACE_MS = 8_000


def taken_over(
    job: Job, now_ms: int, kept: list[Any] | None = None
) -> tuple[Coordinator, set[str]]:
    log = MemoryLog()
    topics = create_standard_topics(log)
    log.append_batch(topics.assignments, records.snapshot_records(job, 3))
    coordinator = Coordinator()
    done = take_over(coordinator, recover(log, topics), deque(kept or ()), now_ms, GRACE_MS)
    return coordinator, done.unfinished_nodes


def test_a_new_leader_waits_for_the_same_node_until_the_same_deadline() -> None:
    coordinator, owing = taken_over(running_with_c_offline(), T0 + 5)
    assert owing == {"a", "b"}  # c, never asked, owes the new leader nothing
    job = coordinator.jobs["j1"]
    assert job.nodes["c"].state is NodeState.OFFLINE
    assert job.offline_until_ms == T0 + WAIT_MS  # not moved by the takeover
    assert [s for s in coordinator.admit("c", T0 + 10) if isinstance(s, Send)] == [
        Send("commit", "j1", "c")
    ]
    out = coordinator.reply(AckCommit(**env(3, "c"), job_id="j1"), T0 + 11)
    assert [s for s in out if isinstance(s, Send)] == [Send("run", "j1", "c")]


def test_a_late_voters_ack_kept_while_no_server_led_runs_it_once() -> None:
    job = running_with_c_offline()
    job.admit("c", T0 + 10)  # asked by the old leader, which died before its ack
    kept = [AckCommit(**env(3, "c"), job_id="j1")]
    coordinator, _ = taken_over(job, T0 + 20, kept)
    restored = coordinator.jobs["j1"]
    assert restored.nodes["c"].state is NodeState.READY
    assert coordinator.admit("c", T0 + 30) == []  # asked already: never again
    # Its run went out with the takeover's changes; a node heard again gets it repeated,
    # which the agent answers without running twice.
    assert coordinator.node_online("c") == [Send("run", "j1", "c")]


def test_a_late_nodes_run_is_timed_from_its_own_run_not_the_jobs() -> None:
    job = running_with_c_offline()  # the job ran at T0 + 2
    job.admit("c", T0 + 30_000)
    job.ack_commit("c", T0 + 30_001)
    out = job.succeeded("c", T0 + 30_051)
    (record,) = (orjson.loads(v) for _, v in records.job_events(out, {"j1": job}, "s"))
    (entry,) = (e for e in record["nodes"] if e[0] == "c")
    assert dict(zip(records.NODE_STATE_FIELDS, entry, strict=True))["duration_ms"] == 50


def test_jobs_waiting_for_the_same_node_get_it_in_turn_first_started_first() -> None:
    coord = coordinator()  # j1: a runs, b waits offline
    for job_id, at in (("j3", T0 + 2), ("j2", T0 + 1)):
        coord.submit(
            job_id,
            "true",
            ["b"],
            [],
            at,
            quorum=Quorum(),
            vote_timeout_ms=VOTE_MS,
            run_timeout_ms=RUN_MS,
            options={},
            requested_by="alice",
            offline_wait_ms=WAIT_MS,
        )
    out = coord.admit("b", T0 + 10)
    assert [s for s in out if isinstance(s, Send)] == [Send("commit", "j1", "b")]
    assert coord.admit("b", T0 + 11) == []  # held by j1: the others wait their turn
    assert coord.take_freed() == set()
    coord.reply(AckCommit(**env(3, "b"), job_id="j1"), T0 + 12)
    coord.reply(Succeeded(**env(4, "b"), job_id="j1", exit_status=0, duration_ms=1), T0 + 13)
    assert coord.take_freed() == {"b"}
    out = coord.admit("b", T0 + 14)
    assert [s for s in out if isinstance(s, Send)] == [Send("commit", "j2", "b")]
    coord.reply(NackCommit(**env(5, "b"), job_id="j2", reason="no"), T0 + 15)
    assert coord.take_freed() == {"b"}
    out = coord.admit("b", T0 + 16)
    assert [s for s in out if isinstance(s, Send)] == [Send("commit", "j3", "b")]


def test_a_batch_job_whose_budget_is_spent_skips_its_offline_nodes_and_halts() -> None:
    job = new_job(("a", "b", "c"), options={"batch": {"size": "1", "max_failures": "1"}})
    job.start(["a", "b"], T0)
    job.ack_commit("a", T0 + 1)
    job.ack_commit("b", T0 + 2)
    job.failed("a", T0 + 3, 1, "boom")  # the budget is spent: b and c will not start
    assert states(job) == {"a": "failed", "b": "skipped", "c": "skipped"}
    assert job.state is JobState.HALTED  # not held open until the deadline


# --- the leader's job effects: a node registered but never heard, then heard -------------


def test_a_registered_node_never_heard_waits_and_is_asked_once_when_heard() -> None:
    leader = Leader(registered={"old-1", "old-2", "laptop-1", "laptop-2"})
    leader.advance(4.0)  # past the takeover's grace: an unseen node is offline now
    request = JobRequest("true", ["laptop-1"], Quorum(), None, None, {}, offline_wait_s=60)
    first = leader.jobs.start(request, "alice", leader.clock.wall_ms())
    second = leader.jobs.start(request, "alice", leader.clock.wall_ms() + 1)
    leader.flush()
    jobs = leader.jobs.coordinator.jobs
    assert jobs[first].nodes["laptop-1"].state is NodeState.OFFLINE
    assert leader.sender.sent == []
    leader.hear("laptop-1")
    leader.flush()
    assert leader.sender.sent == [("commit", "laptop-1")]  # once, and for the first job
    assert jobs[second].nodes["laptop-1"].state is NodeState.OFFLINE
    for kind in (AckCommit, Succeeded):
        extra = {"exit_status": 0, "duration_ms": 1} if kind is Succeeded else {}
        leader.reply(kind(**env(7, "laptop-1"), job_id=first, **extra))
    leader.advance(0.1)  # the turn's tick: the node the first job let go goes to the next
    assert jobs[first].state is JobState.COMPLETE
    assert jobs[second].nodes["laptop-1"].state is NodeState.NEW
    assert leader.sender.sent[-2:] == [("run", "laptop-1"), ("commit", "laptop-1")]


def test_a_node_revoked_while_it_waits_is_given_up_at_once_and_the_job_ends() -> None:
    coord = coordinator()
    coord.reply(Succeeded(**env(2), job_id="j1", exit_status=0, duration_ms=1), T0 + 1)
    coord.gone("b", T0 + 2, "key revoked")
    job = coord.jobs["j1"]
    assert job.nodes["b"].state is NodeState.UNAVAILABLE
    assert job.nodes["b"].reason == "key revoked"
    assert job.state is JobState.COMPLETE  # not held open until the deadline
    assert coord.gone("a", T0 + 3, "key revoked") == []  # not waited for: nothing to do


def test_a_job_held_for_approval_waits_from_its_approval() -> None:
    job = new_job(("a", "b"))
    job.hold(Hold("policy.commands", T0 + 3_600_000, "alice"), T0)
    assert job.offline_until_ms is None  # nobody asked, nobody waited for yet
    job.approve("bob", ["a"], T0 + 1_000)
    assert job.offline_until_ms == T0 + 1_000 + WAIT_MS
    assert states(job) == {"a": "new", "b": "offline"}
