from __future__ import annotations

import pytest

from pushjobs.errors import StateError
from pushjobs.quorum import Quorum
from pushjobs.states import JobState, NodeState
from server.core.effects import JobChanged, NodeChanged, Send
from server.core.job import Job, NodeRecord
from server.core.transitions import JOB_TRANSITIONS, NODE_TRANSITIONS, JobEvent, NodeEvent

T0 = 1_700_000_000_000
NODES = ["a", "b", "c"]


def new_job(nodes=NODES, **kwargs):
    return Job.new("j1", "uptime", nodes, T0, vote_timeout_ms=1000, run_timeout_ms=5000, **kwargs)


def sends(effects, kind=None):
    return [(e.kind, e.node) for e in effects if isinstance(e, Send) and kind in (None, e.kind)]


def node_states(job):
    return {name: r.state.value for name, r in job.nodes.items()}


# --- one test per table row, as h11 does -------------------------------------------------


@pytest.mark.parametrize(("start", "event"), sorted(NODE_TRANSITIONS), ids=str)
def test_node_table_row(start, event):
    job = new_job(["a"])
    job.nodes["a"] = NodeRecord(state=start)
    out = []
    job._node("a", event, T0 + 1, out)
    assert job.nodes["a"].state is NODE_TRANSITIONS[(start, event)]
    assert out == [NodeChanged("j1", "a", start, NODE_TRANSITIONS[(start, event)], T0 + 1)]


ILLEGAL_NODE = [(s, e) for s in NodeState for e in NodeEvent if (s, e) not in NODE_TRANSITIONS]


@pytest.mark.parametrize(("start", "event"), ILLEGAL_NODE, ids=str)
def test_illegal_node_move_raises_and_changes_nothing(start, event):
    job = new_job(["a"])
    job.nodes["a"] = NodeRecord(state=start, changed_ms=5)
    out = []
    with pytest.raises(StateError):
        job._node("a", event, T0 + 1, out)
    assert job.nodes["a"] == NodeRecord(state=start, changed_ms=5)
    assert out == []


@pytest.mark.parametrize(("start", "event"), sorted(JOB_TRANSITIONS), ids=str)
def test_job_table_row(start, event):
    job = new_job()
    job.state = start
    out = []
    job._job(event, T0 + 1, out)
    assert job.state is JOB_TRANSITIONS[(start, event)]
    assert out == [JobChanged("j1", start, job.state, T0 + 1)]


ILLEGAL_JOB = [(s, e) for s in JobState for e in JobEvent if (s, e) not in JOB_TRANSITIONS]


@pytest.mark.parametrize(("start", "event"), ILLEGAL_JOB, ids=str)
def test_illegal_job_move_raises_and_changes_nothing(start, event):
    job = new_job()
    job.state = start
    out = []
    with pytest.raises(StateError):
        job._job(event, T0 + 1, out)
    assert job.state is start and out == []


# --- scenarios --------------------------------------------------------------------------


def test_all_nodes_succeed():
    job = new_job()
    out = job.start(NODES, T0)
    assert job.state is JobState.VOTING
    assert sends(out) == [("commit", n) for n in NODES]
    assert job.ack_commit("a", T0 + 1) == [
        NodeChanged("j1", "a", NodeState.NEW, NodeState.READY, T0 + 1)
    ]
    job.ack_commit("b", T0 + 2)
    out = job.ack_commit("c", T0 + 3)
    assert job.state is JobState.RUNNING
    assert sends(out) == [("run", n) for n in NODES]
    # persistence comes before the sends that follow from it
    assert isinstance(out[-1], Send) and isinstance(out[1], JobChanged)
    for n in NODES:
        job.ack_run(n, T0 + 4)
    job.succeeded("a", T0 + 5)
    job.succeeded("b", T0 + 5)
    out = job.succeeded("c", T0 + 6)
    assert out[-1] == JobChanged("j1", JobState.RUNNING, JobState.COMPLETE, T0 + 6)
    assert job.summary() == {"succeeded": 3}
    assert job.all_succeeded() and job.finished and job.finished_ms == T0 + 6


def test_one_node_fails_job_still_completes_but_not_all_succeeded():
    job = new_job()
    job.start(NODES, T0)
    for n in NODES:
        job.ack_commit(n, T0)
    job.succeeded("a", T0 + 1)
    job.failed("b", T0 + 1, 3, "exit status 3")
    job.succeeded("c", T0 + 1)
    assert job.state is JobState.COMPLETE
    assert job.nodes["b"].exit_status == 3 and job.nodes["b"].reason == "exit status 3"
    assert job.summary() == {"failed": 1, "succeeded": 2}
    assert not job.all_succeeded()


def test_offline_nodes_are_unavailable_and_get_no_commit():
    job = new_job(quorum=Quorum(count=2))
    out = job.start(["a", "b"], T0)
    assert node_states(job)["c"] == "unavailable"
    assert sends(out) == [("commit", "a"), ("commit", "b")]
    job.ack_commit("a", T0)
    out = job.ack_commit("b", T0)
    assert job.state is JobState.RUNNING and sends(out, "run") == [("run", "a"), ("run", "b")]


def test_nacked_node_and_quorum_failed_aborts_ready_nodes():
    job = new_job()  # default quorum: all targets
    job.start(NODES, T0)
    job.ack_commit("a", T0)
    job.nack_commit("b", T0, "command not whitelisted")
    out = job.ack_commit("c", T0)
    assert job.state is JobState.QUORUM_FAILED
    assert node_states(job) == {"a": "was_ready", "b": "nacked", "c": "was_ready"}
    assert sends(out) == [("abort", "a"), ("abort", "c")]
    assert job.nodes["b"].reason == "command not whitelisted"


def test_vote_timeout_marks_silent_nodes_unavailable_then_runs_with_quorum():
    job = new_job(quorum=Quorum(percent=50))
    job.start(NODES, T0)
    job.ack_commit("a", T0 + 10)
    job.ack_commit("b", T0 + 10)
    assert job.tick(T0 + 999) == []
    assert job.next_deadline_ms() == T0 + 1000
    out = job.tick(T0 + 1000)
    assert node_states(job) == {"a": "ready", "b": "ready", "c": "unavailable"}
    assert ("abort", "c") in sends(out)
    assert sends(out, "run") == [("run", "a"), ("run", "b")]
    assert job.state is JobState.RUNNING and job.run_deadline_ms == T0 + 6000


def test_run_timeout_times_out_unfinished_nodes_and_aborts_them():
    job = new_job()
    job.start(NODES, T0)
    for n in NODES:
        job.ack_commit(n, T0)
    job.succeeded("a", T0 + 100)
    out = job.tick(T0 + 5000)
    assert job.state is JobState.TIMED_OUT
    assert node_states(job) == {"a": "succeeded", "b": "timed_out", "c": "timed_out"}
    assert sends(out) == [("abort", "b"), ("abort", "c")]


def test_abort_mid_run():
    job = new_job()
    job.start(NODES, T0)
    for n in NODES:
        job.ack_commit(n, T0)
    job.succeeded("a", T0 + 1)
    out = job.abort(T0 + 2)
    assert job.state is JobState.ABORTED
    assert node_states(job) == {"a": "succeeded", "b": "aborted", "c": "aborted"}
    assert sends(out) == [("abort", "b"), ("abort", "c")]
    with pytest.raises(StateError):
        job.abort(T0 + 3)


def test_abort_before_start_sends_nothing():
    job = new_job()
    out = job.abort(T0)
    assert job.state is JobState.ABORTED and sends(out) == []


def test_node_lost_mid_run_is_crashed_and_completes_the_job():
    job = new_job()
    job.start(NODES, T0)
    for n in NODES:
        job.ack_commit(n, T0)
    job.succeeded("a", T0 + 1)
    job.succeeded("b", T0 + 1)
    out = job.node_lost("c", T0 + 2, "restarted")
    assert node_states(job)["c"] == "crashed"
    assert job.state is JobState.COMPLETE and isinstance(out[-1], JobChanged)
    assert job.node_lost("c", T0 + 3, "again") == []  # terminal already: nothing


def test_node_lost_while_voting_counts_as_voted():
    job = new_job(quorum=Quorum(count=2))
    job.start(NODES, T0)
    job.ack_commit("a", T0)
    job.ack_commit("b", T0)
    job.node_lost("c", T0 + 1, "offline")
    assert job.state is JobState.RUNNING and node_states(job)["c"] == "crashed"


def test_late_result_after_timeout_is_refused_without_change():
    job = new_job()
    job.start(NODES, T0)
    for n in NODES:
        job.ack_commit(n, T0)
    job.tick(T0 + 5000)
    before = job.snapshot()
    with pytest.raises(StateError):
        job.succeeded("a", T0 + 6000)
    assert job.snapshot() == before


def test_vote_for_unknown_node_and_after_voting_raise():
    job = new_job()
    job.start(NODES, T0)
    with pytest.raises(StateError, match="not a target"):
        job.ack_commit("zz", T0)
    for n in NODES:
        job.ack_commit(n, T0)
    with pytest.raises(StateError, match="vote from a while running"):
        job.ack_commit("a", T0)


def test_all_nodes_offline_fails_quorum_at_once():
    job = new_job()
    out = job.start([], T0)
    assert job.state is JobState.QUORUM_FAILED
    assert sends(out) == []
    assert job.summary() == {"unavailable": 3}


def test_start_twice_and_empty_job_raise():
    job = new_job()
    job.start(NODES, T0)
    with pytest.raises(StateError):
        job.start(NODES, T0)
    with pytest.raises(StateError):
        Job.new("j2", "x", [], T0)


def test_duplicate_targets_are_one_node():
    assert list(new_job(["a", "a", "b"]).nodes) == ["a", "b"]


def test_snapshot_round_trip_mid_run():
    job = new_job(quorum=Quorum(percent=60), options={"env": {"A": "1"}})
    job.start(NODES, T0)
    for n in NODES:
        job.ack_commit(n, T0 + 1)
    job.failed("b", T0 + 2, 1, "exit status 1")
    restored = Job.restore(job.snapshot())
    assert restored.snapshot() == job.snapshot()
    restored.succeeded("a", T0 + 3)
    restored.succeeded("c", T0 + 3)
    assert restored.state is JobState.COMPLETE


@pytest.mark.parametrize(
    ("text", "targets", "required"),
    [("3", 10, 3), ("30", 10, 10), ("0", 5, 0), ("50%", 3, 2), ("100%", 7, 7), ("33.3%", 3, 1)],
)
def test_quorum(text, targets, required):
    assert Quorum.parse(text).required(targets) == required


@pytest.mark.parametrize("text", ["", "-1", "101%", "abc", "5.5"])
def test_bad_quorum(text):
    with pytest.raises(ValueError, match="quorum must be"):
        Quorum.parse(text)


def test_default_quorum_is_every_target():
    assert Quorum().required(4) == 4 and str(Quorum()) == "100%"
