"""Approvals (``server/core/policy.py``): the pure policy, the held job's moves, the
coordinator, and the leader's job effects over a memory log, through a takeover."""

from __future__ import annotations

from collections import deque
from typing import Any

import orjson
import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import ApiError, ConfigError, StateError
from pushjobs.log.memory import MemoryLog, MemoryStore
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.quorum import Quorum
from pushjobs.states import TERMINAL_JOB_STATES, JobState, NodeState
from server.core import records
from server.core.coordinator import Coordinator
from server.core.effects import Send
from server.core.job import Job
from server.core.jobparams import JobRequest
from server.core.nodetable import NodeTable
from server.core.policy import Hold, Policy, Verdict, refusal
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership
from server.shell.serverconfig import JobSettings

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000


# --- the policy -------------------------------------------------------------------------------


def judge(policy: Policy, *, selectors: tuple[str, ...] = ("web-1",), targets: int = 1, **kw: Any):
    return policy.judge(
        list(selectors),
        targets,
        kw.get("globs", {}),
        kw.get("command", "uptime"),
        kw.get("role", "writer"),
    )


def test_no_policy_holds_nothing_and_forbids_nothing() -> None:
    assert judge(Policy(), selectors=("*",), targets=10_000, command="reboot") == Verdict()


@pytest.mark.parametrize(
    ("policy", "kw", "rule"),
    [
        (Policy(max_targets=50), {"targets": 51}, "51 targets, more than 50 (policy.max_targets)"),
        (
            Policy(max_glob_matches=5),
            {"globs": {"web-*": 6}},
            "'web-*' matches 6 nodes, more than 5 (policy.max_glob_matches)",
        ),
        (
            Policy(commands=("^reboot$",)),
            {"command": "reboot"},
            "command 'reboot' matches '^reboot$' (policy.commands)",
        ),
        (Policy(roles=("writer",)), {"role": "writer"}, "every job by a writer key (policy.roles)"),
    ],
)
def test_each_rule_holds_a_job_past_it_and_says_which(
    policy: Policy, kw: dict[str, Any], rule: str
) -> None:
    assert judge(policy, **kw) == Verdict(rule=rule)


@pytest.mark.parametrize(
    ("policy", "kw"),
    [
        (Policy(max_targets=50), {"targets": 50}),
        (Policy(max_glob_matches=5), {"globs": {"web-*": 5}}),
        (Policy(commands=("^reboot$",)), {"command": "reboot-check"}),
        (Policy(roles=("writer",)), {"role": "admin"}),
    ],
)
def test_a_job_within_every_rule_starts_at_once(policy: Policy, kw: dict[str, Any]) -> None:
    assert judge(policy, **kw) == Verdict()


def test_a_bare_star_is_forbidden_only_when_the_policy_says_so() -> None:
    forbidding = Policy(forbid_bare_star=True)
    verdict = judge(forbidding, selectors=("web-1", " * "))
    assert verdict.forbidden is not None and "policy.forbid_bare_star" in verdict.forbidden
    assert judge(forbidding, selectors=("web-*",)) == Verdict()  # a narrower glob is fine


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"max_targets": -1}, "max_targets"),
        ({"commands": ("(",)}, "commands"),
        ({"roles": ("root",)}, "roles"),
        ({"approval_expiry_s": 0.0}, "approval_expiry_s"),
        ({"approval_expiry_s": float("nan")}, "approval_expiry_s"),
    ],
)
def test_a_bad_policy_is_named_by_its_key(fields: dict[str, Any], key: str) -> None:
    assert [k for k, _ in Policy(**fields).check()] == [key]


def test_server_toml_policy_is_read_and_checked(tmp_path: Any) -> None:
    from pushjobs.config import load_config
    from server.shell.serverconfig import ServerConfig

    path = tmp_path / "server.toml"
    path.write_text('[policy]\nmax_targets = 3\ncommands = ["^reboot"]\n')
    assert load_config(ServerConfig, path).policy == Policy(max_targets=3, commands=("^reboot",))
    path.write_text('[policy]\nroles = ["root"]\n')
    with pytest.raises(ConfigError, match=r"policy\.roles"):
        load_config(ServerConfig, path)


def test_only_someone_else_may_approve_anyone_may_reject() -> None:
    why = refusal("alice", "alice", approve=True)
    assert why is not None and "another admin" in why
    assert refusal("alice", "bob", approve=True) is None
    assert refusal("alice", "alice", approve=False) is None


# --- the held job -----------------------------------------------------------------------------


def held(targets: tuple[str, ...] = ("a", "b")) -> Job:
    job = Job.new("j1", "reboot", targets, T0, requested_by="alice")
    out = job.hold(Hold("a rule", T0 + HOUR_MS, "alice"), T0)
    assert [type(e).__name__ for e in out] == ["JobChanged"]
    return job


def test_a_held_job_asks_no_node_and_waits_until_its_expiry() -> None:
    job = held()
    assert job.state is JobState.AWAITING_APPROVAL
    assert JobState.AWAITING_APPROVAL not in TERMINAL_JOB_STATES
    assert job.next_deadline_ms() == T0 + HOUR_MS
    assert job.tick(T0 + HOUR_MS - 1) == []
    assert job.snapshot()["approval"] == {
        "rule": "a rule",
        "expires_ms": T0 + HOUR_MS,
        "requester": "alice",
    }


def test_approved_it_votes_as_a_started_job_would() -> None:
    job = held()
    out = job.approve("bob", ["a", "b"], T0 + 5, reason="CHG-1")
    assert job.state is JobState.VOTING
    assert [e.node for e in out if isinstance(e, Send) and e.kind == "commit"] == ["a", "b"]
    assert job.approval is not None
    assert job.approval["decision"] == "approved" and job.approval["decided_by"] == "bob"
    with pytest.raises(StateError):
        job.approve("carol", ["a", "b"], T0 + 6)  # once only
    assert job.state is JobState.VOTING


def test_rejected_it_ends_with_every_node_skipped_and_nothing_sent() -> None:
    job = held()
    out = job.reject("bob", "not now", T0 + 5)
    assert job.state is JobState.REJECTED and job.finished
    assert not [e for e in out if isinstance(e, Send)]
    assert {r.state for r in job.nodes.values()} == {NodeState.SKIPPED}
    assert job.nodes["a"].reason == "rejected by bob: not now"


def test_expired_it_ends_rejected_saying_so() -> None:
    job = held()
    out = job.tick(T0 + HOUR_MS)
    assert job.state is JobState.REJECTED
    assert not [e for e in out if isinstance(e, Send)]
    assert job.nodes["b"].reason == "approval expired"
    assert job.approval is not None and job.approval["decision"] == "expired"


def test_a_held_job_may_be_aborted_without_a_command_sent() -> None:
    job = held()
    out = job.abort(T0 + 1, "aborted by alice")
    assert job.state is JobState.ABORTED
    assert not [e for e in out if isinstance(e, Send)]


def test_a_job_not_held_cannot_be_approved_or_rejected() -> None:
    job = Job.new("j1", "true", ["a"], T0)
    with pytest.raises(StateError):
        job.approve("bob", ["a"], T0)
    with pytest.raises(StateError):
        job.reject("bob", "no", T0)
    assert job.state is JobState.NEW


def test_the_hold_and_its_decision_survive_the_snapshot() -> None:
    job = held()
    again = Job.restore(job.snapshot())
    assert again.state is JobState.AWAITING_APPROVAL
    assert again.next_deadline_ms() == T0 + HOUR_MS
    again.rearm(T0 + 2 * HOUR_MS)  # a takeover's grace does not move an approval's expiry
    assert again.next_deadline_ms() == T0 + HOUR_MS


# --- the coordinator --------------------------------------------------------------------------


def submit(coord: Coordinator, job_id: str, *, hold: Hold | None, **kw: Any) -> list:
    return coord.submit(
        job_id,
        "true",
        ["a"],
        ["a"],
        T0,
        quorum=Quorum(),
        vote_timeout_ms=1000,
        run_timeout_ms=5000,
        options={},
        requested_by="alice",
        hold=hold,
        **kw,
    )


def test_a_held_job_holds_no_node_until_approved() -> None:
    coord = Coordinator()
    submit(coord, "held", hold=Hold("rule", T0 + HOUR_MS, "alice"))
    assert coord.holding("a") == [] and coord.node_online("a") == []
    # A job that waits for busy nodes does not wait for a job that is only held.
    out = submit(coord, "next", hold=None, busy_wait_ms=60_000)
    assert [e.node for e in out if isinstance(e, Send)] == ["a"]
    assert coord.next_deadline_ms() == T0 + 1000  # the vote's, before the expiry
    coord.approve("held", "bob", ["a"], T0 + 10)
    assert sorted(coord.holding("a")) == ["held", "next"]


def test_the_approval_is_in_the_job_state_event() -> None:
    coord = Coordinator()
    # Each turn's changes written as the daemon does: at the end of that turn.
    turns = [submit(coord, "j1", hold=Hold("rule", T0 + HOUR_MS, "alice"))]
    events = [orjson.loads(v) for _, v in records.job_events(turns[0], coord.jobs, "s")]
    turns.append(coord.reject("j1", "bob", "no", T0 + 5))
    events += [orjson.loads(v) for _, v in records.job_events(turns[1], coord.jobs, "s")]
    states = [
        (e["prev_state"], e["state"], e.get("approval")) for e in events if e["kind"] == "job_state"
    ]
    held = {"rule": "rule", "expires_ms": T0 + HOUR_MS, "requester": "alice"}
    assert states[0] == ("new", "awaiting_approval", held)
    prev, state, approval = states[1]
    assert (prev, state) == ("awaiting_approval", "rejected")
    assert approval["decided_by"] == "bob" and approval["reason"] == "no"
    assert approval["decided_ms"] == T0 + 5


# --- the leader's job effects over a log, through a takeover ----------------------------------


class Sender:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    def send(self, send: Send, job: Any, now_ms: int) -> None:
        self.sent.append((send.kind, send.job_id, send.node))

    def due_again(self, send: Send, beat_ms: int) -> bool:
        return True

    def flush(self, now_ms: int) -> None:
        pass

    def take_undeliverable(self) -> dict[tuple[str, str], str]:
        return {}


class Leader:
    def __init__(self, policy: Policy) -> None:
        self.clock = FakeClock(wall_ms=T0)
        self.log = MemoryLog(MemoryStore(), clock=self.clock)
        self.topics = create_standard_topics(self.log)
        leadership = Leadership.join(self.log, self.topics, "pushjobs.", "s", 5.0)
        leadership.renew(self.clock.monotonic())
        liveness = LivenessTracker(1.0, 3, 1)
        self.nodes = NodeTable(liveness)
        self.sender = Sender()
        self.jobs = Jobs(
            JobSettings(),
            leadership,
            topics=self.topics,
            sender=self.sender,  # type: ignore[arg-type]
            nodes=self.nodes,
            liveness=liveness,
            server_name="s",
            registered=lambda name: name in ("a", "b"),
            policy=policy,
            role_of=lambda caller: "admin",
        )
        for name in ("a", "b"):
            self.nodes.heartbeat(name, "i", "tcp://x", None, None, restarted=False, now=0.0)

    def start(self, *selectors: str, command: str = "reboot") -> str:
        request = JobRequest(command, list(selectors), Quorum(), None, None, {})
        job_id = self.jobs.start(request, "alice", self.clock.wall_ms())
        self.jobs.flush(self.clock.wall_ms())
        return job_id

    def restart(self) -> None:
        """The coordinator rebuilt from the log, as a next leader does."""
        self.jobs.stand_by()
        assert self.jobs.take_over(deque(), self.clock.wall_ms(), 1_000) is not None
        self.jobs.flush(self.clock.wall_ms())

    def job(self, job_id: str) -> Job:
        return self.jobs.coordinator.jobs[job_id]


def test_a_forbidden_target_is_refused_before_anything_is_written() -> None:
    leader = Leader(Policy(forbid_bare_star=True))
    with pytest.raises(ApiError) as caught:
        leader.start("*")
    assert caught.value.code == "unauthorized"
    assert leader.log.latest(leader.topics.commands) == {}


def test_held_then_approved_by_another_admin_after_a_restart_runs_once() -> None:
    leader = Leader(Policy(commands=("^reboot$",)))
    job_id = leader.start("a", "b")
    assert leader.job(job_id).state is JobState.AWAITING_APPROVAL and leader.sender.sent == []
    leader.clock.advance(60)
    leader.restart()
    job = leader.job(job_id)
    assert job.state is JobState.AWAITING_APPROVAL
    assert job.next_deadline_ms() == T0 + HOUR_MS  # the same expiry
    with pytest.raises(ApiError) as caught:
        leader.jobs.decide(job_id, "alice", leader.clock.wall_ms(), approve=True, reason="")
    assert caught.value.code == "unauthorized" and leader.job(job_id).awaiting_approval
    leader.jobs.decide(job_id, "bob", leader.clock.wall_ms(), approve=True, reason="ok")
    leader.jobs.flush(leader.clock.wall_ms())
    assert leader.job(job_id).state is JobState.VOTING
    assert sorted(n for kind, _, n in leader.sender.sent if kind == "commit") == ["a", "b"]
    with pytest.raises(ApiError) as caught:
        leader.jobs.decide(job_id, "carol", leader.clock.wall_ms(), approve=True, reason="")
    assert caught.value.code == "conflict"
    leader.restart()  # the approval in the log is not acted on twice
    assert leader.job(job_id).state is JobState.VOTING


def test_an_approval_written_before_a_crash_is_acted_on_by_the_next_leader() -> None:
    leader = Leader(Policy(max_targets=1))
    job_id = leader.start("a", "b", command="true")
    # The previous leader wrote the approval, then died before its snapshot followed.
    decision = {"type": "approve", "job_id": job_id, "by": "bob", "reason": "", "ts": T0}
    leader.log.append_batch(leader.topics.commands, [records.decision_record(job_id, decision)])
    leader.restart()
    job = leader.job(job_id)
    assert job.state is JobState.VOTING
    assert job.approval is not None and job.approval["decided_by"] == "bob"


def test_a_schedules_fire_is_its_creators_job_who_may_not_approve_it() -> None:
    leader = Leader(Policy(commands=("^reboot$",)))
    request = JobRequest("reboot", ["a"], Quorum(), None, None, {})
    now = leader.clock.wall_ms()
    job_id = leader.jobs.start(
        request, "schedule:s1", now, job_id="fire-1", schedule_id="s1", on_behalf_of="alice"
    )
    assert leader.job(job_id).approval == {
        "rule": "command 'reboot' matches '^reboot$' (policy.commands)",
        "expires_ms": now + HOUR_MS,
        "requester": "alice",
    }
    with pytest.raises(ApiError) as caught:
        leader.jobs.decide(job_id, "alice", now, approve=True, reason="")
    assert caught.value.code == "unauthorized"
    leader.jobs.decide(job_id, "bob", now, approve=True, reason="")
    assert leader.job(job_id).state is JobState.VOTING
