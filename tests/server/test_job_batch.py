"""A batch job's state machine (server/core/job.py, its batches): pure, fake clock."""

from __future__ import annotations

import json
from collections import Counter, deque

import pytest

from pushjobs.errors import StateError
from pushjobs.log.memory import MemoryLog
from pushjobs.log.topics import create_standard_topics
from pushjobs.pipeline import events
from pushjobs.quorum import Quorum, Share
from pushjobs.states import JobState, NodeState
from server.core import records
from server.core.batch import HOLD_REFRESH_MS, BatchSpec
from server.core.coordinator import Coordinator
from server.core.effects import NodeChanged, Send
from server.core.job import Job
from server.shell.recovery import recover
from server.shell.takeover import take_over

T0 = 1_700_000_000_000
RUN_MS = 5000
NAMES = [f"n{i}" for i in range(6)]


def batch_job(size="2", wait_ms=0, max_failures=None, names=NAMES, run_ms=RUN_MS, **kwargs):
    failures = None if max_failures is None else Share.parse(max_failures, "max_failures")
    options = {"batch": BatchSpec(Share.parse(size, "batch"), wait_ms, failures).to_options()}
    return Job.new(
        "j1",
        "deploy",
        names,
        T0,
        vote_timeout_ms=1000,
        run_timeout_ms=run_ms,
        options=options,
        **kwargs,
    )


def runs(effects):
    return [e.node for e in effects if isinstance(e, Send) and e.kind == "run"]


def commits(effects):
    return [e.node for e in effects if isinstance(e, Send) and e.kind == "commit"]


def aborts(effects):
    return [e.node for e in effects if isinstance(e, Send) and e.kind == "abort"]


def voted(job, now=T0 + 1):
    """Start the job and have every node ack: the effects of the last ack (quorum met)."""
    job.start(job.nodes, T0)
    out = []
    for name in job.nodes:
        out = job.ack_commit(name, now)
    return out


def states(job, state):
    return [name for name, r in job.nodes.items() if r.state is state]


def test_quorum_met_runs_the_first_window_and_the_rest_wait_their_turn():
    job = batch_job("2")
    out = voted(job)
    assert job.state is JobState.RUNNING
    assert runs(out) == ["n0", "n1"]
    assert states(job, NodeState.WAITING) == ["n2", "n3", "n4", "n5"]
    assert job.summary() == {"ready": 2, "waiting": 4}
    assert job.nodes["n0"].turn_ms == T0 + 1 and job.nodes["n2"].turn_ms is None
    # Every change precedes the run it causes: the turn is durable before the command.
    first_run = next(i for i, e in enumerate(out) if isinstance(e, Send))
    assert NodeChanged("j1", "n0", NodeState.WAITING, NodeState.READY, T0 + 1) in out[:first_run]


def test_a_finished_node_frees_its_slot_for_the_next_in_target_order():
    job = batch_job("2")
    voted(job)
    job.ack_run("n0", T0 + 2)
    assert runs(job.succeeded("n1", T0 + 3)) == ["n2"]  # n1 never acked its run: still counts
    assert runs(job.failed("n0", T0 + 4, 1, "exit status 1")) == ["n3"]
    assert job.summary() == {"failed": 1, "ready": 2, "succeeded": 1, "waiting": 2}


def test_every_node_runs_exactly_once_and_the_job_completes():
    job = batch_job("2")
    sent = Counter(runs(voted(job)))
    now = T0 + 10
    for _ in range(len(NAMES)):  # bounded: a window that stalls fails, never hangs
        for name in states(job, NodeState.READY):
            now += 1
            sent.update(runs(job.succeeded(name, now)))
    assert sent == Counter(NAMES)
    assert job.state is JobState.COMPLETE and job.all_succeeded()


def test_batch_wait_spaces_starts_and_sets_the_next_deadline():
    job = batch_job("2", wait_ms=1000)
    voted(job)  # n0, n1 started at T0 + 1
    assert runs(job.succeeded("n0", T0 + 100)) == []  # a slot is free, the wait is not over
    assert job.next_deadline_ms() == T0 + 1001
    assert job.tick(T0 + 1000) == []
    assert runs(job.tick(T0 + 1001)) == ["n2"]
    assert runs(job.succeeded("n1", T0 + 1002)) == []
    assert job.next_deadline_ms() == T0 + 2001


def test_run_timeout_is_per_node_so_a_late_batch_keeps_its_whole_timeout():
    job = batch_job("1", names=["a", "b"])
    voted(job)
    assert job.next_deadline_ms() == T0 + 1 + RUN_MS
    job.succeeded("a", T0 + 4000)  # b's turn comes at T0 + 4000
    assert job.next_deadline_ms() == T0 + 4000 + RUN_MS
    assert job.tick(T0 + 1 + RUN_MS) == []  # a whole-job deadline would have killed b here
    out = job.tick(T0 + 4000 + RUN_MS)
    assert job.nodes["b"].state is NodeState.TIMED_OUT and aborts(out) == ["b"]
    assert job.state is JobState.COMPLETE


def test_spent_failure_budget_skips_the_waiting_lets_the_running_finish_and_halts():
    job = batch_job("2", max_failures="1")
    voted(job)
    out = job.failed("n0", T0 + 2, 1, "exit status 1")
    assert runs(out) == []
    assert aborts(out) == ["n2", "n3", "n4", "n5"]  # their commits let go
    assert states(job, NodeState.SKIPPED) == ["n2", "n3", "n4", "n5"]
    assert job.nodes["n2"].reason == "not started: the failure budget is spent"
    assert job.state is JobState.RUNNING  # n1 still runs
    job.succeeded("n1", T0 + 3)
    assert job.state is JobState.HALTED
    assert job.summary() == {"failed": 1, "skipped": 4, "succeeded": 1}
    assert job.snapshot(nodes=False)["batch"] == {
        "window": 2,
        "wait_s": 0.0,
        "max_failures": 1,
        "failures": 1,
        "held": [],
    }


def test_budget_spent_on_the_last_batch_completes_rather_than_halts():
    job = batch_job("2", max_failures="1", names=["a", "b"])
    voted(job)
    job.failed("a", T0 + 2, 1, "")
    job.succeeded("b", T0 + 3)
    assert job.state is JobState.COMPLETE  # nothing was skipped: every node ran


@pytest.mark.parametrize("how", ["crashed", "timed_out"])
def test_crashes_and_timeouts_spend_the_budget_too(how):
    job = batch_job("1", max_failures="1", names=["a", "b"])
    voted(job)
    if how == "crashed":
        job.node_lost("a", T0 + 2, "offline")
    else:
        job.tick(T0 + 1 + RUN_MS)
    assert job.nodes["b"].state is NodeState.SKIPPED and job.state is JobState.HALTED


def test_a_waiting_node_lost_is_crashed_and_never_gets_a_turn():
    job = batch_job("1", names=["a", "b", "c"])
    voted(job)
    job.node_lost("b", T0 + 2, "offline")
    assert runs(job.succeeded("a", T0 + 3)) == ["c"]
    assert job.nodes["b"].state is NodeState.CRASHED


def test_a_waiting_node_whose_agent_let_its_commit_go_is_aborted_and_skipped_over():
    job = batch_job("1", names=["a", "b", "c"])
    voted(job)
    job.aborted("b", T0 + 2, "no run before the commit timeout")
    assert runs(job.succeeded("a", T0 + 3)) == ["c"]
    assert job.nodes["b"].state is NodeState.ABORTED


def test_abort_request_aborts_waiting_nodes_and_releases_them():
    job = batch_job("2")
    voted(job)
    out = job.abort(T0 + 2)
    assert sorted(aborts(out)) == NAMES and job.state is JobState.ABORTED


def test_quorum_is_judged_on_the_whole_job_before_anything_runs():
    job = batch_job("2", quorum=Quorum(count=6))
    job.start(NAMES, T0)
    out = []
    for name in NAMES[:5]:
        out += job.ack_commit(name, T0 + 1)
    out += job.nack_commit("n5", T0 + 1, "busy")
    assert job.state is JobState.QUORUM_FAILED and runs(out) == []


def test_a_result_for_a_waiting_node_is_refused_without_change():
    job = batch_job("1", names=["a", "b"])
    voted(job)
    with pytest.raises(StateError):
        job.succeeded("b", T0 + 2)
    assert job.nodes["b"].state is NodeState.WAITING


def test_restored_job_continues_the_window_without_running_any_node_twice():
    job = batch_job("2", wait_ms=1000)
    sent = Counter(runs(voted(job)))
    job.succeeded("n0", T0 + 10)
    sent.update(runs(job.tick(T0 + 1001)))  # n2
    restored = Job.restore(job.snapshot())
    assert restored.snapshot() == job.snapshot()
    # Restored, it repeats the waiting nodes' commits at once (no knowing when the last
    # leader did), and gives no turn early.
    assert restored.next_deadline_ms() == 0
    out = restored.tick(T0 + 1002)
    assert runs(out) == [] and commits(out) == ["n3", "n4", "n5"]
    now = T0 + 1002
    for _ in range(len(NAMES)):  # bounded: a window that stalls fails, never hangs
        now += 1000
        for name in states(restored, NodeState.READY):
            sent.update(runs(restored.succeeded(name, now)))
        sent.update(runs(restored.tick(now)))
    assert sent == Counter(NAMES) and restored.all_succeeded()


def test_takeover_from_the_log_keeps_waiting_nodes_and_the_grace_floor():
    job = batch_job("2")
    voted(job)
    job.succeeded("n0", T0 + 10)  # n2 got its turn
    log = MemoryLog()
    topics = create_standard_topics(log)
    log.append_batch(topics.assignments, records.snapshot_records(job, 7))
    coordinator = Coordinator()
    done = take_over(coordinator, recover(log, topics), deque(), T0 + RUN_MS, 8000)
    back = coordinator.jobs["j1"]
    assert states(back, NodeState.WAITING) == ["n3", "n4", "n5"]
    assert done.unfinished_nodes == {"n1", "n2", "n3", "n4", "n5"}
    # n1's run deadline (T0 + 1 + RUN_MS) passed while no server led: moved to the grace.
    assert back.next_deadline_ms() == T0 + RUN_MS + 8000
    # The new leader re-sends run only to the nodes whose turn came, never to waiting ones.
    assert coordinator.node_online("n1") == [Send("run", "j1", "n1")]
    assert coordinator.node_online("n3") == []
    assert coordinator.unreported("n3", "j1", "committed") == []
    assert coordinator.stale_hold("n3", "j1", "committed") is None  # its hold is wanted
    assert runs(back.succeeded("n1", T0 + RUN_MS + 1)) == ["n3"]


def test_waiting_nodes_commits_are_repeated_to_keep_the_hold_and_their_acks_change_nothing():
    long_ms = 10 * HOLD_REFRESH_MS  # the holds must outlive many refreshes
    job = batch_job("1", names=["a", "b", "c"], run_ms=long_ms)
    voted(job)  # T0 + 1: a runs, b and c wait
    assert job.next_deadline_ms() == T0 + 1 + HOLD_REFRESH_MS
    out = job.tick(T0 + 1 + HOLD_REFRESH_MS)
    assert commits(out) == ["b", "c"] and runs(out) == []
    assert job.ack_commit("b", T0 + 2 + HOLD_REFRESH_MS) == []
    assert job.nodes["b"].state is NodeState.WAITING
    assert job.next_deadline_ms() == T0 + 1 + 2 * HOLD_REFRESH_MS
    job.succeeded("a", T0 + 3 + HOLD_REFRESH_MS)  # b's turn
    job.succeeded("b", T0 + 4 + HOLD_REFRESH_MS)  # c's turn: nothing waits any more
    assert job.next_deadline_ms() == T0 + 4 + HOLD_REFRESH_MS + long_ms


def test_node_event_duration_runs_from_the_nodes_turn_not_the_jobs_first_runs():
    job = batch_job("1", names=["a", "b"])
    voted(job)  # T0 + 1: a's turn
    changes = job.succeeded("a", T0 + 4000)  # and b's turn
    changes += job.succeeded("b", T0 + 4500)
    written = records.job_events(changes, {"j1": job}, "s1")
    rows = [row for i, (_, v) in enumerate(written) for row in events.rows(i, v)]
    ends = {r["node"]: r["duration_ms"] for r in rows if r["state"] == "succeeded"}
    assert ends == {"a": 3999, "b": 500}


def test_a_budget_spent_while_voting_halts_before_anything_runs():
    job = batch_job("2", max_failures="1", names=["a", "b", "c"], quorum=Quorum(count=2))
    job.start(["a", "b", "c"], T0)
    job.node_lost("a", T0 + 1, "offline")  # crashed: a failure of the job
    job.ack_commit("b", T0 + 2)
    out = job.ack_commit("c", T0 + 2)
    assert runs(out) == [] and sorted(aborts(out)) == ["b", "c"]
    assert job.state is JobState.HALTED
    assert job.summary() == {"crashed": 1, "skipped": 2}


# A node lost while in flight (offline, not restarted) may still run its command, or
# start it late from a run already on its way: its slot stays taken until it is heard
# not running the job, or its run deadline passes.


def test_a_node_lost_in_flight_keeps_its_slot_until_heard_idle():
    coord = Coordinator()
    job = batch_job("1", names=["a", "b", "c"])
    coord.restore(job, 0)
    voted(job)
    assert coord.node_lost("a", T0 + 2, "node went offline") != []
    assert job.nodes["a"].state is NodeState.CRASHED
    assert states(job, NodeState.WAITING) == ["b", "c"]  # no second node in flight
    assert coord.view("j1")["batch"]["held"] == ["a"]  # said to whoever looks
    # Heard again, still running the job: the slot stays taken.
    assert runs(coord.heard("a", "j1", "running", T0 + 3)) == []
    # Heard idle: its command has stopped; the next node gets the slot.
    assert runs(coord.heard("a", None, None, T0 + 4)) == ["b"]
    assert runs(coord.heard("a", None, None, T0 + 5)) == []  # once


def test_a_node_restarted_in_flight_frees_its_slot_at_once():
    """A restarted agent killed what its predecessor ran (``agent/leftovers.py``)."""
    job = batch_job("1", names=["a", "b"])
    voted(job)
    out = job.node_lost("a", T0 + 2, "node restarted (new incarnation)", restarted=True)
    assert runs(out) == ["b"]


def test_a_lost_slot_frees_at_the_nodes_run_deadline_if_it_is_never_heard():
    job = batch_job("1", names=["a", "b"])
    voted(job)  # a's turn at T0 + 1
    assert runs(job.node_lost("a", T0 + 2, "node went offline")) == []
    assert job.next_deadline_ms() == T0 + 1 + RUN_MS
    assert runs(job.tick(T0 + RUN_MS)) == []
    assert runs(job.tick(T0 + 1 + RUN_MS)) == ["b"]


def test_a_restored_job_holds_the_slot_of_a_crashed_node_until_it_is_heard():
    """A new leader cannot know whether the node's command stopped: it asks the node."""
    job = batch_job("1", names=["a", "b"])
    voted(job)
    job.node_lost("a", T0 + 2, "node went offline")
    restored = Job.restore(json.loads(json.dumps(job.snapshot())))
    coord = Coordinator()
    coord.restore(restored, 1)
    assert runs(restored.tick(T0 + 3)) == []
    assert runs(coord.heard("a", None, None, T0 + 4)) == ["b"]
