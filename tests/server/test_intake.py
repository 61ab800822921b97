"""Node intake and liveness: verified heartbeats and replies routed, silence judged fairly."""

from __future__ import annotations

from typing import Any

from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import AckCommit, Message, NodeHeartbeat
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import HmacSigner
from server.core.nodetable import NodeTable
from server.front.sessions import SessionKeys
from server.shell.nodeintake import BATCH, NodeIntake

T0 = 1_700_000_000_000


class RecordedJobs:
    """Stands in for job effects: records what intake hands it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def reply(self, message: Message, now_ms: int) -> None:
        self.calls.append(("reply", message.sender))

    def node_lost(self, node: str, now_ms: int, reason: str, *, restarted: bool = False) -> None:
        self.calls.append(("lost", node, reason))

    def node_online(self, node: str, now_ms: int) -> None:
        self.calls.append(("online", node))

    def gone(self, node: str, now_ms: int, reason: str) -> None:
        self.calls.append(("gone", node, reason))

    def node_event(self, node: str, state: str, now_ms: int, reason: str | None = None) -> None:
        self.calls.append(("event", node, state))

    def heartbeat(self, node: str, job_id: Any, job_state: Any, beat_ms: int, now_ms: int) -> None:
        self.calls.append(("heartbeat", node))


class Lead:
    leader = True


def setup(*, leader: bool = True) -> tuple[NodeIntake, RecordedJobs, SessionKeys]:
    sessions = SessionKeys()
    liveness = LivenessTracker(1.0, 3, 2)
    jobs = RecordedJobs()
    lead = Lead()
    lead.leader = leader
    intake = NodeIntake(
        Inbox(sessions.resolve, 30.0),
        NodeTable(liveness),
        liveness=liveness,
        jobs=jobs,  # type: ignore[arg-type]
        leadership=lead,  # type: ignore[arg-type]
    )
    return intake, jobs, sessions


def node_outbox(sessions: SessionKeys, node: str) -> Outbox:
    key = sessions.issue(node, now=0.0)
    return Outbox(node, "inc-" + node, HmacSigner(key.key_id, key.secret))


def beat(outbox: Outbox, ms: int) -> list[bytes]:
    return outbox.frames(NodeHeartbeat, ms, command_endpoint="tcp://127.0.0.1:9")


def test_heartbeats_bring_a_node_online_at_the_threshold_and_feed_resends() -> None:
    intake, jobs, sessions = setup()
    n1 = node_outbox(sessions, "n1")
    intake.receive([beat(n1, T0)], 0.0, T0 + 3)
    assert not intake.nodes.is_online("n1")
    intake.receive([beat(n1, T0 + 1000)], 1.0, T0 + 1000)
    assert intake.nodes.is_online("n1")
    assert ("online", "n1") in jobs.calls and ("event", "n1", "online") in jobs.calls
    assert jobs.calls.count(("heartbeat", "n1")) == 2
    assert intake.counters["node_online"] == 1
    assert intake.heartbeat_lag_ms[3] == 1 and intake.heartbeat_lag_ms[0] == 1


def test_a_forged_or_replayed_message_is_a_counted_drop_and_nothing_else() -> None:
    intake, jobs, sessions = setup()
    n1 = node_outbox(sessions, "n1")
    forged = Outbox("n1", "inc-n1", HmacSigner(n1.signer.key_id, b"x" * 32))
    frames = beat(n1, T0)
    intake.receive([beat(forged, T0), frames, frames], 0.0, T0)
    assert sum(intake.inbox.drops.values()) == 2
    assert jobs.calls == [("heartbeat", "n1")]


def test_job_replies_go_to_the_leader_or_are_kept_for_the_next_one() -> None:
    intake, jobs, sessions = setup(leader=False)
    n1 = node_outbox(sessions, "n1")
    ack = n1.frames(AckCommit, T0, job_id="j1")
    intake.receive([ack], 0.0, T0)
    assert jobs.calls == [] and [m.sender for m in intake.standby_replies] == ["n1"]
    intake.leadership.leader = True  # type: ignore[misc]
    intake.receive([n1.frames(AckCommit, T0, job_id="j2")], 0.0, T0)
    assert jobs.calls == [("reply", "n1")]


def test_silence_during_a_backlog_is_not_an_outage_but_after_it_is() -> None:
    intake, jobs, sessions = setup()
    n1 = node_outbox(sessions, "n1")
    intake.receive([beat(n1, T0), beat(n1, T0 + 1)], 0.0, T0)
    full = [beat(n1, T0 + 2)] + [[b"junk"]] * (BATCH - 1)
    intake.receive(full, 0.5, T0)
    assert intake.backlog
    intake.expire(60.0, T0 + 60_000)
    assert intake.nodes.is_online("n1") and intake.counters["expiry_deferred"] == 1
    intake.idle()
    intake.expire(60.0, T0 + 60_000)
    assert not intake.nodes.is_online("n1")
    assert ("lost", "n1", "node went offline") in jobs.calls


def test_after_a_takeover_only_the_awaited_nodes_still_unseen_at_the_deadline_are_lost() -> None:
    intake, jobs, sessions = setup()
    seen = node_outbox(sessions, "seen")
    intake.await_nodes({"seen", "unseen"}, until=5.0)
    assert intake.next_deadline() == 5.0
    intake.receive([beat(seen, T0), beat(seen, T0 + 1)], 4.0, T0)
    intake.expire(4.9, T0)
    assert not [c for c in jobs.calls if c[0] == "lost"]
    intake.expire(5.0, T0)
    assert [c for c in jobs.calls if c[0] == "lost"] == [
        ("lost", "unseen", "not seen since the server restarted")
    ]
    assert intake.awaited_until is None


def test_a_cut_off_node_goes_offline_or_at_least_is_lost_to_its_jobs() -> None:
    intake, jobs, sessions = setup()
    n1 = node_outbox(sessions, "n1")
    intake.receive([beat(n1, T0), beat(n1, T0 + 1)], 0.0, T0)
    intake.cut_off("n1", 0.1, T0, "key revoked")
    assert not intake.nodes.is_online("n1")
    assert ("lost", "n1", "key revoked") in jobs.calls
    jobs.calls.clear()
    intake.cut_off("never-seen", 0.1, T0, "key revoked")
    assert jobs.calls == [
        ("lost", "never-seen", "key revoked"),
        ("gone", "never-seen", "key revoked"),  # not waited for offline any more
    ]


def test_behind_it_sheds_stale_heartbeats_unread_reads_replies_and_judges_nobody_on_them() -> None:
    """Under overload a queue read oldest first made every reply too old for the replay
    window (bench/overload.py): behind, stale heartbeats are dropped before the signature,
    replies are read whatever their age, and nobody is judged until a whole offline
    window has passed since the last shed."""
    intake, jobs, sessions = setup()
    n1, n2 = node_outbox(sessions, "n1"), node_outbox(sessions, "n2")
    for node in (n1, n2):
        intake.receive([beat(node, T0), beat(node, T0 + 1000)], 1.0, T0 + 1000)
    assert intake.nodes.is_online("n1") and intake.nodes.is_online("n2")
    jobs.calls.clear()
    now_ms = T0 + 20_000  # 18 s behind: past the offline window, within the replay window's
    stale = [beat(n1, T0 + 2000 + i) for i in range(BATCH - 2)]
    ack = n2.frames(AckCommit, T0 + 2000, job_id="j1")
    fresh = beat(n2, now_ms - 200)
    intake.receive([*stale, ack, fresh], 20.0, now_ms)
    assert intake.backlog and intake.counters["heartbeats_shed"] == BATCH - 2
    assert jobs.calls == [("reply", "n2"), ("heartbeat", "n2")]  # the ack, then the fresh beat
    assert sum(intake.inbox.drops.values()) == 0  # shed, not verified and refused
    intake.idle()  # caught up: not behind any more, but n1's beats were shed 0 s ago
    intake.expire(22.9, now_ms + 2900)
    assert intake.nodes.is_online("n1")
    intake.receive([beat(n2, now_ms + 2500)], 22.5, now_ms + 2500)  # n2 alive, not behind
    intake.expire(23.0, now_ms + 3000)  # a whole window since the last shed: n1 was silent
    assert not intake.nodes.is_online("n1") and intake.nodes.is_online("n2")


def test_a_reader_not_behind_sheds_nothing() -> None:
    intake, jobs, sessions = setup()
    n1 = node_outbox(sessions, "n1")
    intake.receive([beat(n1, T0), beat(n1, T0 + 1)], 20.0, T0 + 20_000)
    assert intake.counters["heartbeats_shed"] == 0
    assert jobs.calls.count(("heartbeat", "n1")) == 2
