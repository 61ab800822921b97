"""A job that may wait its turn on a busy node (``job start --busy-wait``, issue 27 item 2).

The coordinator and its jobs are pure: time is the ``now_ms`` each input brings (a fake
clock). A job started with a busy wait that finds a target held by another job asks no
node to commit (it is *gated*) until its targets are free, in line with other waiting
jobs, or until its bound, when a node still busy votes no and says why.
"""

from __future__ import annotations

from itertools import count
from typing import Any

from pushjobs.clock import FakeClock
from pushjobs.protocol.messages import AckCommit, AckRun, NackCommit, Succeeded
from pushjobs.quorum import Quorum
from server.core.busywait import Blocked, Claims
from server.core.coordinator import Change, Coordinator, NodeAmended
from server.core.effects import NodeChanged, Send
from server.core.job import Job

SEQ = count(1)


def submit(
    coord: Coordinator,
    clock: FakeClock,
    job_id: str,
    targets: tuple[str, ...] = ("n1",),
    *,
    busy_wait_s: float = 0,
    quorum: str = "100%",
) -> list[Change]:
    return coord.submit(
        job_id,
        "true",
        targets,
        ("n1", "n2", "n3"),
        clock.wall_ms(),
        quorum=Quorum.parse(quorum),
        vote_timeout_ms=10_000,
        run_timeout_ms=3_600_000,
        options={},
        requested_by="alice",
        busy_wait_ms=round(busy_wait_s * 1000),
    )


def say(
    coord: Coordinator,
    clock: FakeClock,
    kind: type[Any],
    node: str,
    job_id: str,
    reason: str = "busy with job x",
) -> list[Change]:
    extra: dict[str, Any] = {"exit_status": 0, "duration_ms": 5} if kind is Succeeded else {}
    if kind is NackCommit:
        extra["reason"] = reason
    message = kind(
        sender=node,
        incarnation="i1",
        sequence=next(SEQ),
        timestamp=clock.wall_ms(),
        job_id=job_id,
        **extra,
    )
    # The reply, then the tick of the same turn (the daemon ticks every turn): waiting
    # jobs are looked at there.
    return coord.reply(message, clock.wall_ms()) + coord.tick(clock.wall_ms())


def running(coord: Coordinator, clock: FakeClock, job_id: str, *nodes: str) -> None:
    """``job_id`` started (no wait) and running on ``nodes``: they are busy with it."""
    submit(coord, clock, job_id, nodes)
    for node in nodes:
        say(coord, clock, AckCommit, node, job_id)
    for node in nodes:
        say(coord, clock, AckRun, node, job_id)
    assert coord.jobs[job_id].state.value == "running"


def commits(changes: list[Change], job_id: str) -> list[str]:
    return [
        c.node for c in changes if isinstance(c, Send) and c.kind == "commit" and c.job_id == job_id
    ]


def row(coord: Coordinator, job_id: str, node: str) -> tuple[str, str]:
    record = coord.jobs[job_id].nodes[node]
    return record.state.value, record.reason


def test_without_a_busy_wait_a_busy_node_is_asked_and_refuses_as_today() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    coord = Coordinator()
    running(coord, clock, "long", "n1")
    assert commits(submit(coord, clock, "next"), "next") == ["n1"]
    say(coord, clock, NackCommit, "n1", "next", "busy with job long")
    assert coord.jobs["next"].state.value == "quorum_failed"
    assert row(coord, "next", "n1") == ("nacked", "busy with job long")


def test_a_waiting_job_asks_nothing_until_the_node_is_free_then_votes() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    coord = Coordinator()
    running(coord, clock, "long", "n1")
    out = submit(coord, clock, "next", busy_wait_s=60)
    assert commits(out, "next") == []
    job = coord.jobs["next"]
    assert job.gated and job.state.value == "voting"
    assert row(coord, "next", "n1") == ("new", "waiting: busy with job long")
    assert job.snapshot()["nodes"]["n1"]["reason"] == "waiting: busy with job long"
    # A heartbeat (n1 runs "long") asks no commit of a gated job.
    assert coord.unreported("n1", "long", "running") == []
    assert coord.node_online("n1") == []
    clock.advance(30)
    assert commits(coord.tick(clock.wall_ms()), "next") == []  # within the bound: waits
    out = say(coord, clock, Succeeded, "n1", "long")  # n1 is free: the vote begins
    assert commits(out, "next") == ["n1"]
    assert not job.gated and row(coord, "next", "n1") == ("new", "")
    assert job.vote_deadline_ms == clock.wall_ms() + 10_000  # the whole vote, from now
    say(coord, clock, AckCommit, "n1", "next")
    assert job.state.value == "running"


def test_at_its_bound_a_node_still_busy_refuses_saying_why() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    coord = Coordinator()
    running(coord, clock, "long", "n1")
    submit(coord, clock, "next", busy_wait_s=60)
    job = coord.jobs["next"]
    assert coord.next_deadline_ms() == clock.wall_ms() + 60_000  # the bound, not later
    clock.advance(59.999)
    coord.tick(clock.wall_ms())
    assert job.gated
    clock.advance(0.001)
    out = coord.tick(clock.wall_ms())
    assert commits(out, "next") == []  # never asked: it would refuse busy
    assert job.state.value == "quorum_failed"
    assert row(coord, "next", "n1") == (
        "nacked",
        "still busy with job long after waiting 60 s (busy wait)",
    )
    assert any(isinstance(c, NodeChanged) and c.node == "n1" for c in out)


def test_a_waiting_node_counts_as_not_voted_for_the_quorum() -> None:
    """With --quorum 50%, the free node does not start the job while the busy one waits:
    the vote begins when both may vote; at the bound the busy one votes no."""
    clock = FakeClock(wall_ms=1_800_000_000_000)
    coord = Coordinator()
    running(coord, clock, "long", "n1")
    assert (
        commits(submit(coord, clock, "next", ("n1", "n2"), busy_wait_s=60, quorum="50%"), "next")
        == []
    )
    assert row(coord, "next", "n2") == ("new", "")
    clock.advance(60)
    out = coord.tick(clock.wall_ms())
    assert commits(out, "next") == ["n2"]
    say(coord, clock, AckCommit, "n2", "next")
    assert coord.jobs["next"].state.value == "running"
    assert row(coord, "next", "n1")[0] == "nacked"


def test_waiting_jobs_take_their_turns_in_the_order_they_began_to_wait() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    coord = Coordinator()
    running(coord, clock, "long", "n1")
    submit(coord, clock, "first", busy_wait_s=600)
    clock.advance(1)
    submit(coord, clock, "second", busy_wait_s=600)
    assert row(coord, "second", "n1") == (
        "new",
        "waiting: job first, waiting before this one, needs it first",
    )
    out = say(coord, clock, Succeeded, "n1", "long")
    assert commits(out, "first") == ["n1"] and commits(out, "second") == []
    assert row(coord, "second", "n1") == ("new", "waiting: busy with job first")
    assert any(isinstance(c, NodeAmended) and c.job_id == "second" for c in out)
    say(coord, clock, AckCommit, "n1", "first")
    say(coord, clock, AckRun, "n1", "first")
    out = say(coord, clock, Succeeded, "n1", "first")
    assert commits(out, "second") == ["n1"]


def test_waiting_jobs_on_crossing_nodes_hold_nothing_so_none_deadlocks() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    coord = Coordinator()
    running(coord, clock, "a", "n1")
    running(coord, clock, "b", "n2")
    submit(coord, clock, "x", ("n1", "n2"), busy_wait_s=600)
    submit(coord, clock, "y", ("n2", "n1"), busy_wait_s=600)
    out = say(coord, clock, Succeeded, "n1", "a")
    assert commits(out, "x") == commits(out, "y") == []  # x still waits for n2; y behind x
    out = say(coord, clock, Succeeded, "n2", "b")
    assert commits(out, "x") == ["n1", "n2"] and commits(out, "y") == []


def test_a_node_lost_while_waiting_was_never_asked_so_is_unavailable() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    coord = Coordinator()
    running(coord, clock, "long", "n1")
    submit(coord, clock, "next", ("n1", "n2"), busy_wait_s=60)
    coord.node_lost("n2", clock.wall_ms(), "offline")
    assert row(coord, "next", "n2") == ("unavailable", "offline")
    assert coord.jobs["next"].gated


def test_a_restored_waiting_job_keeps_waiting_to_its_bound() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    coord = Coordinator()
    running(coord, clock, "long", "n1")
    submit(coord, clock, "next", busy_wait_s=60)
    # A new leader: both jobs read back from their snapshots.
    after = Coordinator()
    for job_id in ("long", "next"):
        after.restore(Job.restore(coord.jobs[job_id].snapshot()), 1)
    restored = after.jobs["next"]
    assert restored.gated and restored.gate_until_ms == clock.wall_ms() + 60_000
    assert after.node_online("n1") == []  # running "long"; "next" waits: nothing to ask
    assert commits(after.tick(clock.wall_ms() + 1), "next") == []
    out = say(after, clock, Succeeded, "n1", "long")
    assert commits(out, "next") == ["n1"]


def test_an_old_snapshot_without_the_fields_never_waits() -> None:
    job = Job.new("j", "true", ["n1"], 0)
    snap = job.snapshot()
    del snap["busy_wait_ms"], snap["gate_until_ms"]
    restored = Job.restore(snap)
    assert restored.busy_wait_ms == 0 and not restored.gated


def test_claims_keep_the_line_and_name_the_holder() -> None:
    holders = {"n1": "long"}
    claims = Claims(holders.get)
    assert claims.blocked(["n1", "n2"]) == {"n1": Blocked("n1", "long")}
    claims.claim("w1", ["n1", "n2"])
    claims.claim("w2", ["n2"])  # w1 keeps its claim
    assert claims.blocked(["n2"]) == {"n2": Blocked("n2", "w1", queued=True)}
    assert Blocked("n2", "w1", queued=True).why() == "n2 busy with job w1 (due before)"
