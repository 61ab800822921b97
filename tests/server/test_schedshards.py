"""Schedules sharded over servers, on one memory log with the fake clock: every server owns
and fires a share of the partitions, the leader starts every fire once, and a server that
dies or joins moves partitions with nothing fired twice and nothing skipped."""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import orjson
import pytest

from pushjobs.clock import FakeClock
from pushjobs.log.memory import MemoryLog, MemoryStore
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.liveness import LivenessTracker
from server.core.nodetable import NodeTable
from server.front.schedmethods import SchedAdmin
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership
from server.shell.schedjobwatch import due_of
from server.shell.scheduler import FOLLOW_EVERY_MS, FOLLOW_IDLE_MS, Scheduler
from server.shell.serverconfig import JobSettings

SESSION_S = 3.0


class NoSender:
    secrets = None

    def send(self, *args: Any) -> None:
        pass

    def flush(self, now_ms: int) -> None:
        pass

    def take_undeliverable(self) -> dict[tuple[str, str], str]:
        return {}


class Server:
    def __init__(
        self, store: MemoryStore, clock: FakeClock, name: str, partitions: int = 8
    ) -> None:
        log = MemoryLog(store, clock=clock)
        self.name, self.clock, self.dead = name, clock, False
        self.topics = create_standard_topics(log)
        self.leadership = Leadership.join(log, self.topics, "pushjobs.", f"{name}:1", SESSION_S)
        self.liveness = LivenessTracker(1.0, 3, 1)
        self.jobs = Jobs(
            JobSettings(),
            self.leadership,
            topics=self.topics,
            sender=NoSender(),  # type: ignore[arg-type]
            nodes=NodeTable(self.liveness),
            liveness=self.liveness,
            server_name=name,
            registered=lambda node: True,
        )
        self.scheduler = Scheduler(
            self.jobs,
            self.topics.schedules,
            clock=clock,
            settle_ms=0,
            partitions=partitions,
        )
        self.leadership.on_stand_by = self.stand_by
        self.admin = SchedAdmin(self).table()
        self.started: Counter[str] = Counter()  # job ids this server started
        self.owned: set[str] = set()  # every partition it ever owned

    def stand_by(self) -> None:
        self.jobs.stand_by()
        self.scheduler.stand_by()

    def tick(self) -> None:
        assert not self.dead
        now = self.clock.monotonic()
        if now >= self.leadership.next_renewal:
            before = self.leadership.leader
            self.leadership.renew(now)
            if self.leadership.leader and not before:
                self.jobs.take_over(deque(), self.clock.wall_ms(), 0)
                self.scheduler.take_over(self.clock.wall_ms())
        known = set(self.jobs.coordinator.jobs)
        self.scheduler.tick(self.clock.wall_ms())
        self.jobs.flush(self.clock.wall_ms())
        if self.leadership.leader:
            self.started.update(set(self.jobs.coordinator.jobs) - known)
        self.owned |= self.scheduler.partitions.owned()

    def call(self, method: str, **params: Any) -> Any:
        return self.admin[method](params, "alice")

    def die(self) -> None:
        """Stops at once, without a word: its group membership and leases run out."""
        self.dead = True


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(wall_ms=1_800_000_000_000)


def run(clock: FakeClock, servers: list[Server], seconds: float) -> None:
    for _ in range(round(seconds / 0.25)):
        clock.advance(0.25)
        for server in servers:
            server.tick()


def add_every2s(leader: Server, count: int, **extra: Any) -> list[str]:
    params = {"catch_up": "all", "overlap": "allow", **extra}
    return [
        leader.call("schedule.add", command="stamp", nodes=["n1"], cron="*/2 * * * * *", **params)[
            "schedule"
        ]["schedule_id"]
        for _ in range(count)
    ]


def started_fires(server: Server) -> Counter[tuple[str, int]]:
    """(schedule id, due time) of every job the server started for a schedule."""
    out: Counter[tuple[str, int]] = Counter()
    for job_id in server.started:
        job = server.jobs.coordinator.jobs[job_id]
        sid = job.requested_by.removeprefix("schedule:")
        out[(sid, due_of(job_id) or 0)] += 1
    return out


def written_fires(server: Server) -> Counter[tuple[str, int]]:
    """(schedule id, due time) of every fire in every fire record of every partition."""
    out: Counter[tuple[str, int]] = Counter()
    log = server.leadership.log
    for topic in server.scheduler.partitions.topics:
        for record in log.read(topic, 0, 1_000_000):
            if record.key.startswith("fire:") and record.value is not None:
                for fire in orjson.loads(record.value)["pending"]:
                    out[(record.key[len("fire:") :], fire["due_ms"])] += 1
    return out


def due_times(sids: list[str], after_ms: int, until_ms: int) -> set[tuple[str, int]]:
    first = after_ms - after_ms % 2000 + 2000
    return {(sid, due) for sid in sids for due in range(first, until_ms + 1, 2000)}


def test_every_server_fires_its_share_and_the_leader_starts_them_all(clock: FakeClock) -> None:
    store = MemoryStore()
    a, b = Server(store, clock, "a"), Server(store, clock, "b")
    run(clock, [a], 0.5)  # a leads, and owns every partition until b joins the group
    assert a.leadership.leader
    run(clock, [a, b], 2)
    a.owned.clear()  # from here on, the group has its two members
    sids = add_every2s(a, 30)
    start = clock.wall_ms()
    run(clock, [a, b], 10)
    assert a.owned and b.owned and not a.owned & b.owned
    assert a.owned | b.owned == set(a.scheduler.partitions.topics)
    by_b = [s for s in sids if a.scheduler.catalog.entries[s].topic in b.owned]
    assert by_b  # the standby fired the schedules of its own partitions...
    assert not b.started  # ...and only the leader started their jobs
    fires = started_fires(a)
    assert max(fires.values()) == 1
    assert written_fires(a) == fires  # each fire written once, and started
    assert set(fires) == due_times(sids, start, clock.wall_ms() - 1000) | {
        f for f in fires if f[1] > clock.wall_ms() - 1000
    }


def test_a_death_and_a_join_move_partitions_and_every_due_time_fires_once(
    clock: FakeClock,
) -> None:
    store = MemoryStore()
    a, b = Server(store, clock, "a"), Server(store, clock, "b")
    run(clock, [a], 0.5)
    run(clock, [a, b], 2)
    sids = add_every2s(a, 40)
    start = clock.wall_ms()
    run(clock, [a, b], 6)
    b_had = b.scheduler.partitions.owned()
    assert b_had
    b.die()  # b stops: its leases run out, a takes its partitions
    run(clock, [a], 2 * SESSION_S + 2)
    assert a.scheduler.partitions.owned() == set(a.scheduler.partitions.topics)
    c = Server(store, clock, "c")  # c joins: a hands c its share
    run(clock, [a, c], 8)
    assert (
        c.owned and a.scheduler.partitions.owned() == set(a.scheduler.partitions.topics) - c.owned
    )
    fires = started_fires(a)
    assert max(fires.values()) == 1
    assert max(written_fires(a).values()) == 1  # nothing fired twice by any owner...
    until = clock.wall_ms() - 1000
    assert due_times(sids, start, until) <= set(fires)  # ...and nothing skipped
    for sid in sids:  # each owner carried its predecessor's outcomes on
        history = a.call("schedule.history", schedule_id=sid)["fires"]
        assert sorted(h["due_ms"] for h in history) == sorted(d for s, d in fires if s == sid)


def test_the_leader_dying_hands_its_partitions_and_its_starts_over(clock: FakeClock) -> None:
    store = MemoryStore()
    a, b = Server(store, clock, "a"), Server(store, clock, "b")
    run(clock, [a], 0.5)
    run(clock, [a, b], 2)
    sids = add_every2s(a, 20)
    start = clock.wall_ms()
    run(clock, [a, b], 5)
    a.die()
    run(clock, [b], 2 * SESSION_S + 6)
    assert b.leadership.leader
    assert b.scheduler.partitions.owned() == set(b.scheduler.partitions.topics)
    fires = started_fires(a) + started_fires(b)
    assert max(fires.values()) == 1
    assert max(written_fires(b).values()) == 1
    assert set(written_fires(b)) == set(fires)  # each fire written was started
    assert due_times(sids, start, clock.wall_ms() - 1000) <= set(fires)


def test_a_standby_owner_skips_a_due_time_while_the_previous_run_is_active(
    clock: FakeClock,
) -> None:
    store = MemoryStore()
    a, b = Server(store, clock, "a"), Server(store, clock, "b")
    for _ in range(2):  # n1 online at the leader: its jobs wait for its vote (30 s)
        a.liveness.heartbeat("n1", clock.monotonic())
    run(clock, [a], 0.5)
    run(clock, [a, b], 2)
    sids = add_every2s(a, 16, overlap="skip")
    run(clock, [a, b], 9)
    by_b = [s for s in sids if a.scheduler.catalog.entries[s].topic in b.owned]
    assert by_b
    fires = started_fires(a)
    assert len(fires) == 1  # one job holds n1; the other fires wait for it (not refused)
    for sid in by_b:
        # The first run is still voting, or its fire waits for n1: either way it is
        # outstanding, and every later due time is skipped, by b.
        assert sum(1 for (s, _) in fires if s == sid) <= 1
        history = a.call("schedule.history", schedule_id=sid)["fires"]
        assert any(h["outcome"] == "skipped: overlap" for h in history)


def test_every_server_splits_schedules_as_the_first_one_did(clock: FakeClock) -> None:
    store = MemoryStore()
    a = Server(store, clock, "a", partitions=4)
    b = Server(store, clock, "b", partitions=16)  # set otherwise: the log decides
    assert a.scheduler.count == b.scheduler.count == 4
    assert a.scheduler.partitions.topics == b.scheduler.partitions.topics
    run(clock, [a], 0.5)
    run(clock, [a, b], 2)
    assert a.owned | b.owned == set(a.scheduler.partitions.topics)


def follow_gaps(server: Server, clock: FakeClock, seconds: float) -> list[int]:
    """The scheduler's follow intervals (ms) seen while ticking ``seconds`` every 50 ms."""
    gaps: list[int] = []
    for _ in range(round(seconds / 0.05)):
        clock.advance(0.05)
        server.tick()
        gaps.append(server.scheduler.follow_every_ms)
    return gaps


def test_alone_and_idle_the_follows_back_off_and_a_write_brings_them_back(clock) -> None:
    a = Server(MemoryStore(), clock, "a")
    run(clock, [a], 0.5)
    assert a.leadership.leader and a.scheduler.partitions.owned()
    gaps = follow_gaps(a, clock, 5)
    assert gaps[-1] == FOLLOW_IDLE_MS  # nothing new: once a second
    added = a.call("schedule.add", command="stamp", nodes=["n1"], cron="0 0 1 1 *")
    sid = added["schedule"]["schedule_id"]
    a.tick()  # a write: read in the next tick, armed
    assert a.scheduler.owner.firing.schedule(sid) is not None
    follow_gaps(a, clock, 1.1)
    assert a.scheduler.follow_every_ms == FOLLOW_EVERY_MS  # the next read saw it moved
    assert a.scheduler.next_deadline_ms() is not None  # its loop wakes for the next read


def test_with_another_server_the_follows_keep_their_pace(clock) -> None:
    store = MemoryStore()
    a, b = Server(store, clock, "a"), Server(store, clock, "b")
    run(clock, [a], 0.5)
    run(clock, [a, b], 2)
    assert a.scheduler.partitions.owned() != set(a.scheduler.partitions.topics)
    for _ in range(round(3 / 0.05)):
        clock.advance(0.05)
        a.tick()
        b.tick()
        assert a.scheduler.follow_every_ms == b.scheduler.follow_every_ms == FOLLOW_EVERY_MS
