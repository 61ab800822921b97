"""Fires that reach a busy node wait their turn instead of failing (issue 27, item 2).

After an outage, the delayed fires of several schedules reach a node together. The agent
runs one job at a time and refuses the others ``busy``, which ended them
``quorum_failed``, never retried. The leader now starts a fire only once its targets are
free of other jobs (in due order), waiting at most ``BUSY_WAIT_MS``; ``schedule history``
says what it waited for. A fire not started yet is not committed in the catalog, so a new
leader reads it again and starts it at most once.
"""

from __future__ import annotations

from itertools import count
from typing import Any

from pushjobs.clock import FakeClock
from pushjobs.log.memory import MemoryStore
from pushjobs.protocol.messages import AckCommit, AckRun, Succeeded
from server.shell.scheduler import BUSY_WAIT_MS
from tests.server.test_scheduler import SESSION_S, Server

SEQ = count(1)


def online(server: Server, clock: FakeClock, *nodes: str) -> None:
    for _ in range(2):  # online at the threshold
        for node in nodes:
            server.jobs.liveness.heartbeat(node, clock.monotonic())


def reply(server: Server, clock: FakeClock, kind: type[Any], node: str, job_id: str) -> None:
    extra: dict[str, Any] = {"exit_status": 0, "duration_ms": 5} if kind is Succeeded else {}
    message = kind(
        sender=node,
        incarnation="i1",
        sequence=next(SEQ),
        timestamp=clock.wall_ms(),
        job_id=job_id,
        **extra,
    )
    server.jobs.reply(message, clock.wall_ms())


def run_to_the_end(server: Server, clock: FakeClock, node: str, job_id: str) -> None:
    reply(server, clock, AckCommit, node, job_id)
    reply(server, clock, AckRun, node, job_id)
    reply(server, clock, Succeeded, node, job_id)
    server.jobs.flush(clock.wall_ms())


def add(server: Server, at_ms: int) -> str:
    added = server.call("schedule.add", command="stamp", nodes=["n1"], in_s=at_ms / 1000)
    return str(added["schedule"]["schedule_id"])


def test_fires_colliding_on_one_node_each_run_in_due_order() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    online(a, clock, "n1")
    sids = [add(a, 1000) for _ in range(3)]  # three one-shots due together on n1
    clock.advance(1.5)
    a.tick()
    coordinator = a.jobs.coordinator
    started = list(coordinator.jobs)
    assert len(started) == 1  # one starts; the others wait for n1
    waiting = {sid: a.call("schedule.history", schedule_id=sid)["fires"] for sid in sids}
    outcomes = sorted(f[0]["outcome"].split(":")[0] for f in waiting.values())
    assert outcomes == ["fired", "waiting", "waiting"]
    seen = set(started)
    for _ in range(2):
        run_to_the_end(a, clock, "n1", started[-1])
        clock.advance(0.1)
        a.tick()  # n1 is free: the next fire starts
        started = [j for j in coordinator.jobs if j not in seen] or started
        assert len(coordinator.jobs) == len(seen) + 1
        seen |= set(started)
    run_to_the_end(a, clock, "n1", started[-1])
    jobs = coordinator.jobs.values()
    assert len(jobs) == 3 and all(j.state.value == "complete" for j in jobs)
    for sid in sids:
        [fire] = a.call("schedule.history", schedule_id=sid)["fires"]
        assert fire["job_state"] == "complete"
    waited = [a.call("schedule.history", schedule_id=sid)["fires"][0]["outcome"] for sid in sids]
    assert sorted(w.startswith("fired after waiting") for w in waited) == [False, True, True]
    assert all("n1 busy with job" in w for w in waited if w != "fired")


def test_the_wait_is_bounded_and_says_why_it_gave_up() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    online(a, clock, "n1")
    first, second = add(a, 1000), add(a, 1000)
    clock.advance(1.5)
    a.tick()
    [holder] = a.jobs.coordinator.jobs
    reply(a, clock, AckCommit, "n1", holder)
    reply(a, clock, AckRun, "n1", holder)  # a long run: n1 stays busy
    deadline = a.scheduler.next_deadline_ms()
    assert deadline is not None and deadline <= clock.wall_ms() + BUSY_WAIT_MS
    clock.advance(BUSY_WAIT_MS / 1000 - 1)
    online(a, clock, "n1")
    a.tick()
    assert len(a.jobs.coordinator.jobs) == 1  # still waiting
    clock.advance(1)
    online(a, clock, "n1")
    a.tick()
    assert len(a.jobs.coordinator.jobs) == 2  # started: n1 will refuse it busy, and says so
    fires = {
        sid: a.call("schedule.history", schedule_id=sid)["fires"][0] for sid in (first, second)
    }
    late = next(f for f in fires.values() if f["job_id"] != holder)
    assert late["outcome"].startswith("fired after waiting 300 s: n1 still busy with job")


def test_a_waiting_fire_is_started_once_by_the_next_leader() -> None:
    clock = FakeClock(wall_ms=1_800_000_000_000)
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    online(a, clock, "n1")
    sids = [add(a, 1000) for _ in range(2)]
    clock.advance(1.5)
    a.tick()
    [holder] = a.jobs.coordinator.jobs
    clock.advance(SESSION_S + 1)  # a dies with one fire started and one waiting
    b = Server(store, clock, "b")
    b.lead()
    online(b, clock, "n1")
    b.tick()
    assert list(b.jobs.coordinator.jobs) == [holder]  # restored; the other still waits
    run_to_the_end(b, clock, "n1", holder)
    clock.advance(0.1)
    b.tick()
    assert len(b.jobs.coordinator.jobs) == 2
    b.tick()
    assert len(b.jobs.coordinator.jobs) == 2 and {
        f["job_id"] for sid in sids for f in b.call("schedule.history", schedule_id=sid)["fires"]
    } == set(b.jobs.coordinator.jobs)


def test_a_fire_waiting_for_its_node_is_outstanding_for_the_overlap_policy() -> None:
    """What docs/schedules-and-batches.md says of ``--overlap`` (issue 27, item 3): with
    ``skip`` a schedule has one run outstanding at most, a fire not started yet included,
    so a due time less than a minute late may be dropped; ``queue`` runs each in turn."""
    from server.core.jobparams import job_params, job_request

    clock = FakeClock(wall_ms=1_800_000_000_000)
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    online(a, clock, "n1")
    request = job_request(job_params({"command": "long", "nodes": ["n1"]}, None))
    holder = a.jobs.start(request, "bob", clock.wall_ms(), job_id="abc123")
    sids = {}
    for overlap in ("skip", "queue"):
        added = a.call(
            "schedule.add", command="stamp", nodes=["n1"], cron="*/2 * * * * *", overlap=overlap
        )
        sids[overlap] = added["schedule"]["schedule_id"]
    for _ in range(3):  # three due times while n1 runs bob's job
        clock.advance(2)
        online(a, clock, "n1")
        a.tick()
    assert list(a.jobs.coordinator.jobs) == [holder]
    skip = [f["outcome"] for f in a.call("schedule.history", schedule_id=sids["skip"])["fires"]]
    assert skip[0].startswith("waiting: n1 busy with job ")  # bob's, or the queue's due before
    assert skip[1:] == ["skipped: overlap", "skipped: overlap"]
    queue = a.call("schedule.history", schedule_id=sids["queue"])["fires"]
    assert len(queue) == 1 and queue[0]["outcome"].startswith("waiting")  # the rest held
    run_to_the_end(a, clock, "n1", holder)
    for _ in range(8):  # each queued due time runs in turn, then the skip one's next
        clock.advance(0.1)
        online(a, clock, "n1")
        a.tick()
        for job in list(a.jobs.coordinator.jobs.values()):
            if not job.finished and job.job_id != holder:
                run_to_the_end(a, clock, "n1", job.job_id)
    queue = a.call("schedule.history", schedule_id=sids["queue"])["fires"]
    assert len(queue) == 3 and all(f["job_state"] == "complete" for f in queue)


def test_a_schedule_may_bound_its_own_wait() -> None:
    """``schedule add --busy-wait 10s``: its fires wait 10 s for a busy node, not 300."""
    clock = FakeClock(wall_ms=1_800_000_000_000)
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    online(a, clock, "n1")
    first = add(a, 1000)
    added = a.call("schedule.add", command="stamp", nodes=["n1"], in_s=1.2, busy_wait_s=10)
    second = str(added["schedule"]["schedule_id"])
    clock.advance(1.5)
    a.tick()
    [holder] = a.jobs.coordinator.jobs
    assert (
        a.call("schedule.history", schedule_id=first)["fires"][0]["job_id"] == holder
    )  # due first
    reply(a, clock, AckCommit, "n1", holder)
    reply(a, clock, AckRun, "n1", holder)  # a long run: n1 stays busy
    clock.advance(9)
    online(a, clock, "n1")
    a.tick()
    assert len(a.jobs.coordinator.jobs) == 1  # still waiting
    clock.advance(1)
    online(a, clock, "n1")
    a.tick()
    assert len(a.jobs.coordinator.jobs) == 2
    [fire] = a.call("schedule.history", schedule_id=second)["fires"]
    assert fire["outcome"].startswith("fired after waiting 10 s: n1 still busy with job")
    started = a.jobs.coordinator.jobs[fire["job_id"]]
    assert started.busy_wait_ms == 0 and not started.gated  # waited once, not again
