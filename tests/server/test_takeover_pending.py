"""A job started right after a takeover waits for the fleet to move to the new leader
(``server/core/awaiting.py``): the pure job and coordinator on a fake clock, then the leader's
job effects over a memory log, as the daemon drives them."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import NotFound
from pushjobs.log.memory import MemoryLog, MemoryStore
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import AckCommit, Succeeded
from pushjobs.quorum import Quorum
from pushjobs.states import JobState, NodeState
from server.core import records
from server.core.awaiting import UNHEARD
from server.core.coordinator import Coordinator
from server.core.effects import Send
from server.core.job import Job
from server.core.jobparams import JobRequest
from server.core.nodetable import NodeTable
from server.core.targeting import NodeFacts, select
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership
from server.shell.serverconfig import JobSettings

T0 = 1_700_000_000_000
GRACE_MS = 4_000


def sends(effects: list[Any], kind: str = "commit") -> list[str]:
    return [e.node for e in effects if isinstance(e, Send) and e.kind == kind]


def state_of(job: Job) -> JobState:
    return job.state  # read anew each time (mypy would keep a narrowed attribute)


def states(job: Job) -> dict[str, str]:
    return {name: record.state.value for name, record in job.nodes.items()}


# --- the job ---------------------------------------------------------------------------


def started(unheard: list[str], **kw: Any) -> tuple[Job, list[Any]]:
    kw.setdefault("vote_timeout_ms", 1_000)
    job = Job.new("j1", "true", ["a", "b", "c"], T0, **kw)
    out = job.start(["a"], T0, unheard=unheard, unheard_until_ms=T0 + GRACE_MS)
    return job, out


def test_unheard_targets_are_waited_for_not_unavailable_and_get_no_commit_yet() -> None:
    job, out = started(["b"])
    assert states(job) == {"a": "new", "b": "new", "c": "unavailable"}  # c: no grace asked
    assert sends(out) == ["a"]  # b has no endpoint here yet: its commit waits for it
    assert state_of(job) is JobState.VOTING
    # The vote lasts at least the grace; the grace's end is the next thing due.
    assert job.vote_deadline_ms == T0 + GRACE_MS
    assert job.next_deadline_ms() == T0 + GRACE_MS


def test_a_vote_timeout_longer_than_the_grace_is_kept() -> None:
    job = Job.new("j1", "true", ["a", "b"], T0, vote_timeout_ms=60_000)
    job.start([], T0, unheard=["a", "b"], unheard_until_ms=T0 + GRACE_MS)
    assert job.vote_deadline_ms == T0 + 60_000
    assert job.next_deadline_ms() == T0 + GRACE_MS


def test_a_target_heard_in_time_votes_and_runs_like_any_other() -> None:
    job, _ = started(["b", "c"])
    job.ack_commit("a", T0 + 10)
    job.heard("b")
    job.heard("c")
    job.ack_commit("b", T0 + 2_000)
    assert state_of(job) is JobState.VOTING  # c is still to vote
    out = job.ack_commit("c", T0 + 2_100)
    assert state_of(job) is JobState.RUNNING
    assert sorted(sends(out, "run")) == ["a", "b", "c"]
    assert job.next_deadline_ms() == job.run_deadline_ms


def test_at_the_graces_end_the_targets_still_unheard_are_unavailable() -> None:
    job, _ = started(["b", "c"], quorum=Quorum.parse("1"), vote_timeout_ms=10_000)
    job.ack_commit("a", T0 + 10)
    job.heard("b")  # online, its vote on the way
    assert job.tick(T0 + GRACE_MS - 1) == []
    out = job.tick(T0 + GRACE_MS)
    assert states(job) == {"a": "ready", "b": "new", "c": "unavailable"}
    assert job.nodes["c"].reason == UNHEARD
    assert state_of(job) is JobState.VOTING  # b heard: it votes until the vote deadline
    assert sends(out, "abort") == []
    job.ack_commit("b", T0 + GRACE_MS + 5)
    assert state_of(job) is JobState.RUNNING


def test_when_nobody_shows_up_the_vote_ends_at_the_grace_with_what_it_has() -> None:
    job, _ = started(["b", "c"])  # quorum: every target
    job.ack_commit("a", T0 + 10)
    out = job.tick(T0 + GRACE_MS)
    assert state_of(job) is JobState.QUORUM_FAILED
    assert states(job) == {"a": "was_ready", "b": "unavailable", "c": "unavailable"}
    assert sends(out, "abort") == ["a"]


def test_a_target_lost_before_it_was_heard_is_unavailable_not_crashed() -> None:
    job, _ = started(["b"])
    job.node_lost("b", T0 + 100, "key revoked")
    assert job.nodes["b"].state is NodeState.UNAVAILABLE
    assert job.nodes["b"].reason == "key revoked"
    assert not job.awaits("b")
    job.node_lost("a", T0 + 200, "node went offline")  # a heard one: crashed as ever
    assert job.nodes["a"].state is NodeState.CRASHED


def test_without_a_grace_offline_targets_are_unavailable_at_once() -> None:
    job = Job.new("j1", "true", ["a", "b"], T0)
    job.start(["a"], T0, unheard=["b"], unheard_until_ms=None)
    assert states(job) == {"a": "new", "b": "unavailable"}


# --- the coordinator -----------------------------------------------------------------------


def submit(coordinator: Coordinator, unheard: list[str]) -> list[Any]:
    return coordinator.submit(
        "j1",
        "true",
        ["a", "b"],
        [],
        T0,
        quorum=Quorum(),
        vote_timeout_ms=1_000,
        run_timeout_ms=10_000,
        options={},
        requested_by="alice",
        unheard=unheard,
        unheard_until_ms=T0 + GRACE_MS,
    )


def test_the_coordinator_sends_the_commit_when_an_unheard_target_comes_online() -> None:
    coordinator = Coordinator()
    out = submit(coordinator, ["a", "b"])
    assert sends(out) == []
    assert coordinator.next_deadline_ms() == T0 + GRACE_MS
    assert coordinator.node_online("a") == [Send("commit", "j1", "a")]
    coordinator.reply(
        AckCommit(sender="a", incarnation="i", sequence=1, timestamp=0, job_id="j1"), T0 + 1
    )
    changes = coordinator.tick(T0 + GRACE_MS)
    job = coordinator.jobs["j1"]
    assert states(job) == {"a": "was_ready", "b": "unavailable"}
    assert state_of(job) is JobState.QUORUM_FAILED
    assert changes


# --- targeting -------------------------------------------------------------------------------


def test_globs_and_names_match_unheard_nodes_other_queries_do_not() -> None:
    heard = [NodeFacts("web-1", {"os": "linux"}, ("eu",))]
    unheard = ["web-2", "db-1"]

    def pick(*selectors: str) -> list[str]:
        return select(selectors, heard, exists=lambda name: False, unheard=unheard)

    assert pick("web-*") == ["web-1", "web-2"]
    assert pick("name=db-*") == ["db-1"]
    assert pick("db-1") == ["db-1"]
    assert pick("os=linux") == ["web-1"]  # facts of unheard nodes are not known yet
    with pytest.raises(NotFound):
        select(["db-*"], heard, exists=lambda name: False)


# --- the leader's job effects --------------------------------------------------------------


class Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def send(self, send: Send, job: Any, now_ms: int) -> None:
        self.sent.append((send.kind, send.node))

    def due_again(self, send: Send, beat_ms: int) -> bool:
        return True

    def flush(self, now_ms: int) -> None:
        pass

    def take_undeliverable(self) -> dict[tuple[str, str], str]:
        return {}


class Leader:
    """A leader's job effects as the daemon wires them, on a fake clock: the previous
    leader's log holds a job over ``old-1`` and ``old-2``."""

    def __init__(self, *, registered: set[str]) -> None:
        self.clock = FakeClock(wall_ms=T0)
        log = MemoryLog(MemoryStore(), clock=self.clock)
        self.topics = create_standard_topics(log)
        before = Job.new("old", "true", ["old-1", "old-2"], T0 - 60_000)
        before.start(["old-1", "old-2"], T0 - 60_000)
        before.abort(T0 - 59_000)
        log.append_batch(self.topics.assignments, records.snapshot_records(before, 1))
        leadership = Leadership.join(log, self.topics, "pushjobs.", "b", 5.0)
        leadership.renew(self.clock.monotonic())
        assert leadership.leader
        self.liveness = LivenessTracker(1.0, 3, 1)
        self.nodes = NodeTable(self.liveness)
        self.sender = Sender()
        self.jobs = Jobs(
            JobSettings(),
            leadership,
            topics=self.topics,
            sender=self.sender,  # type: ignore[arg-type]
            nodes=self.nodes,
            liveness=self.liveness,
            server_name="b",
            registered=lambda name: name in registered,
        )
        assert self.jobs.take_over(deque(), self.clock.wall_ms(), GRACE_MS) is not None

    def start(self, *selectors: str) -> Job:
        request = JobRequest("true", list(selectors), Quorum(), None, None, {})
        job_id = self.jobs.start(request, "alice", self.clock.wall_ms())
        self.flush()
        return self.jobs.coordinator.jobs[job_id]

    def hear(self, name: str) -> None:
        """``name`` came online here (one heartbeat: the threshold is 1)."""
        self.nodes.heartbeat(name, "inc", "tcp://x", None, None, restarted=False, now=self.now)
        self.jobs.node_online(name, self.clock.wall_ms())

    def reply(self, message: Any) -> None:
        self.jobs.reply(message, self.clock.wall_ms())

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.jobs.tick(self.clock.wall_ms())
        self.flush()

    def flush(self) -> None:
        self.jobs.flush(self.clock.wall_ms())

    @property
    def now(self) -> float:
        return self.clock.monotonic()


def msg(kind: type, node: str, **fields: Any) -> Any:
    return kind(
        sender=node, incarnation="inc", sequence=1, timestamp=0, job_id=fields.pop("job"), **fields
    )


def test_a_job_started_in_the_grace_waits_for_the_fleet_and_every_node_runs() -> None:
    leader = Leader(registered={"old-1", "old-2", "new-1"})
    job = leader.start("old-1", "new-1")  # a registered node never seen: pending too
    assert states(job) == {"old-1": "new", "new-1": "new"}
    assert leader.sender.sent == []
    leader.advance(1.0)
    leader.hear("old-1")
    leader.hear("new-1")
    leader.flush()
    assert sorted(leader.sender.sent) == [("commit", "new-1"), ("commit", "old-1")]
    for name in ("old-1", "new-1"):
        leader.reply(msg(AckCommit, name, job=job.job_id))
    assert state_of(job) is JobState.RUNNING
    for name in ("old-1", "new-1"):
        leader.reply(msg(Succeeded, name, job=job.job_id, exit_status=0, duration_ms=5))
    assert state_of(job) is JobState.COMPLETE and job.all_succeeded()


def test_in_the_grace_a_glob_means_the_fleet_known_before_the_takeover() -> None:
    leader = Leader(registered={"old-1", "old-2"})  # old-2 unregistered since: not targeted
    leader.jobs.registered = lambda name: name == "old-1"
    job = leader.start("old-*")
    assert list(job.nodes) == ["old-1"]
    assert states(job) == {"old-1": "new"}
    leader.advance(GRACE_MS / 1000)  # nobody came: unavailable at the grace's end
    assert states(job) == {"old-1": "unavailable"}
    assert job.nodes["old-1"].reason == UNHEARD
    assert state_of(job) is JobState.QUORUM_FAILED


def test_in_the_grace_a_glob_also_means_the_registered_nodes_no_job_named() -> None:
    leader = Leader(registered={"old-1", "old-2", "web-1", "web-2"})
    leader.jobs.known_nodes = lambda: ["web-1", "web-2"]  # the registry's accepted nodes
    job = leader.start("web-*")
    assert states(job) == {"web-1": "new", "web-2": "new"}
    leader.hear("web-1")
    leader.advance(GRACE_MS / 1000)
    assert states(job) == {"web-1": "new", "web-2": "unavailable"}


def test_after_the_grace_an_unseen_node_is_unavailable_at_once_and_globs_match_heard_ones() -> None:
    leader = Leader(registered={"old-1", "old-2"})
    leader.hear("old-1")
    leader.advance(GRACE_MS / 1000)
    job = leader.start("old-1", "old-2")
    assert states(job) == {"old-1": "new", "old-2": "unavailable"}
    assert list(leader.start("old-*").nodes) == ["old-1"]


def test_a_node_heard_then_gone_in_the_grace_is_not_waited_for() -> None:
    leader = Leader(registered={"old-1", "old-2"})
    leader.hear("old-1")
    leader.liveness.mark_offline("old-1", leader.now)
    job = leader.start("old-1", "old-2")
    assert states(job) == {"old-1": "unavailable", "old-2": "new"}


def test_standing_by_ends_the_grace() -> None:
    leader = Leader(registered={"old-1"})
    leader.jobs.stand_by()
    assert leader.jobs.grace_until_ms is None and leader.jobs.known_before == set()
