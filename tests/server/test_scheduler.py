"""The leader's scheduler on a memory log with real job effects: durable before answered,
fires started once under derived ids, a fire written but not started completed by the
next leader, nothing fired twice across a takeover."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from pushjobs.api import methods
from pushjobs.clock import FakeClock
from pushjobs.errors import ApiError
from pushjobs.log.memory import MemoryLog, MemoryStore
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.liveness import LivenessTracker
from server.core.nodetable import NodeTable
from server.core.schedule import CatchUp, Overlap, Trigger, fire_job_id
from server.front.schedmethods import SchedAdmin
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership
from server.shell.schedlog import key_of
from server.shell.scheduler import Scheduler
from server.shell.serverconfig import JobSettings

SESSION_S = 5.0


class NoSender:
    secrets = None

    def send(self, *args: Any) -> None:
        pass

    def flush(self, now_ms: int) -> None:
        pass

    def take_undeliverable(self) -> dict[tuple[str, str], str]:
        return {}


class Server:
    """One server's leadership, job effects and scheduler over a shared memory store."""

    def __init__(self, store: MemoryStore, clock: FakeClock, name: str) -> None:
        log = MemoryLog(store, clock=clock)
        self.topics = create_standard_topics(log)
        self.leadership = Leadership.join(log, self.topics, "pushjobs.", name, SESSION_S)
        liveness = LivenessTracker(1.0, 3, 1)
        self.jobs = Jobs(
            JobSettings(),
            self.leadership,
            topics=self.topics,
            sender=NoSender(),  # type: ignore[arg-type]
            nodes=NodeTable(liveness),
            liveness=liveness,
            server_name=name,
            registered=lambda node: True,
        )
        self.scheduler = Scheduler(self.jobs, self.topics.schedules, clock=clock, settle_ms=0)
        self.leadership.on_stand_by = self.scheduler.stand_by
        self.admin = SchedAdmin(self).table()
        self.clock = clock

    def lead(self) -> None:
        self.leadership.renew(self.clock.monotonic())
        assert self.leadership.leader
        self.jobs.take_over(__import__("collections").deque(), self.clock.wall_ms(), 0)
        self.scheduler.take_over(self.clock.wall_ms())

    def call(self, method: str, **params: Any) -> Any:
        return self.admin[method](params, "alice")

    def tick(self) -> None:
        self.scheduler.tick(self.clock.wall_ms())
        self.jobs.flush(self.clock.wall_ms())


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(wall_ms=1_800_000_000_000)


def every2s(server: Server, **extra: Any) -> dict[str, Any]:
    added: dict[str, Any] = server.call(
        "schedule.add",
        command="stamp",
        nodes=["n1", "n2"],
        cron="*/2 * * * * *",
        catch_up="all",
        overlap="allow",
        **extra,
    )["schedule"]
    return added


def test_add_is_durable_before_it_returns(clock: FakeClock) -> None:
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    added = every2s(a, env={"X": "1"})
    partition = added["partition"]
    assert partition.startswith(a.topics.schedules + ".")
    record = MemoryLog(store, clock=clock).latest(partition)[key_of(added["schedule_id"])]
    assert record.value is not None
    kept = orjson.loads(record.value)
    assert kept["schedule"]["trigger"] == {"cron": "*/2 * * * * *", "tz": "UTC"}
    assert kept["schedule"]["job"]["options"]["env"] == {"X": "1"}
    assert record.epoch == a.leadership.epoch  # written fenced
    assert added["next_due_ms"] == clock.wall_ms() + 2000


def test_bad_params_are_refused_and_nothing_is_kept(clock: FakeClock) -> None:
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    for params in (
        {"command": "x", "nodes": ["n1"]},  # no trigger
        {"command": "x", "nodes": ["n1"], "cron": "nope"},
        {"command": "x", "nodes": ["n1"], "cron": "* * * * *", "tz": "Nowhere/Land"},
        {"command": "x", "nodes": ["n1"], "in_s": 5, "catch_up": "sometimes"},
        {"command": "x", "nodes": ["n1"], "at": "2000-01-01T00:00Z"},  # passed
        {"command": "x", "nodes": [], "in_s": 5},
    ):
        with pytest.raises(ApiError) as info:
            a.call("schedule.add", **params)
        assert info.value.code == methods.BAD_REQUEST
    assert a.call("schedule.list") == {"schedules": []}


def test_a_standby_refuses_schedule_calls(clock: FakeClock) -> None:
    b = Server(MemoryStore(), clock, "b")
    with pytest.raises(ApiError) as info:
        b.call("schedule.list")
    assert info.value.code == methods.NOT_LEADER


def test_a_due_fire_starts_one_job_under_its_derived_id(clock: FakeClock) -> None:
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    sid = every2s(a)["schedule_id"]
    clock.advance(2)
    a.tick()
    job_id = fire_job_id(sid, clock.wall_ms())
    assert list(a.jobs.coordinator.jobs) == [job_id]
    request = orjson.loads(a.leadership.log.latest(a.topics.commands)[f"job:{job_id}"].value)
    assert request["schedule_id"] == sid and request["requested_by"] == f"schedule:{sid}"
    a.tick()  # nothing new is due
    assert len(a.jobs.coordinator.jobs) == 1
    [fire] = a.call("schedule.history", schedule_id=sid)["fires"]
    assert fire["job_id"] == job_id and fire["outcome"] == "fired" and fire["job_state"]


def test_job_start_is_idempotent_on_a_given_job_id(clock: FakeClock) -> None:
    from server.core.jobparams import job_params, job_request

    a = Server(MemoryStore(), clock, "a")
    a.lead()
    request = job_request(job_params({"command": "x", "nodes": ["n1"]}, None))
    first = a.jobs.start(request, "s", clock.wall_ms(), job_id="abc123")
    again = a.jobs.start(request, "s", clock.wall_ms() + 5, job_id="abc123")
    assert first == again == "abc123" and len(a.jobs.coordinator.jobs) == 1


def test_a_fire_written_but_not_started_is_started_once_by_the_next_leader(
    clock: FakeClock,
) -> None:
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    sid = every2s(a)["schedule_id"]
    clock.advance(2)
    due = clock.wall_ms()
    a.scheduler._start = lambda fire, now_ms: None  # type: ignore[method-assign]
    a.tick()  # the fire record is written, then the leader "dies"
    assert a.jobs.coordinator.jobs == {}
    clock.advance(SESSION_S + 1)
    b = Server(store, clock, "b")
    b.lead()
    assert list(b.scheduler.unstarted) == [fire_job_id(sid, due)]
    b.tick()
    started = [j for j in b.jobs.coordinator.jobs if j == fire_job_id(sid, due)]
    assert len(started) == 1
    # Every due time since then fires once (catch-up all, within the grace), none twice.
    b.tick()
    dues = sorted(int(j[:-8], 16) for j in b.jobs.coordinator.jobs)
    assert dues == list(range(due, clock.wall_ms() + 1, 2000))


def test_a_start_request_of_a_fire_is_not_ended_at_takeover(clock: FakeClock) -> None:
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    sid = every2s(a)["schedule_id"]
    clock.advance(2)
    a.scheduler.tick(clock.wall_ms())  # the request is in commands; no snapshot flushed
    job_id = fire_job_id(sid, clock.wall_ms())
    clock.advance(SESSION_S + 1)
    b = Server(store, clock, "b")
    b.lead()
    b.tick()
    job = b.jobs.coordinator.jobs[job_id]
    assert job.state.value != "aborted"  # started, not "server restarted before it started"


def test_after_a_takeover_nothing_fires_twice(clock: FakeClock) -> None:
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    every2s(a)
    fired: list[str] = []
    for _ in range(3):
        clock.advance(2)
        a.tick()
    fired += list(a.jobs.coordinator.jobs)
    clock.advance(SESSION_S + 1)  # a is gone: b takes over 6 s later
    b = Server(store, clock, "b")
    b.lead()
    b.tick()
    assert set(fired) <= set(b.jobs.coordinator.jobs)
    dues = sorted(int(j[:-8], 16) for j in b.jobs.coordinator.jobs)
    assert len(dues) == len(set(dues)) and dues == list(range(dues[0], dues[-1] + 1, 2000))
    assert dues[-1] == clock.wall_ms() - clock.wall_ms() % 2000


def test_pause_resume_delete_are_written(clock: FakeClock) -> None:
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    added = every2s(a)
    sid = added["schedule_id"]
    assert a.call("schedule.pause", schedule_id=sid)["schedule"]["paused"] is True
    clock.advance(10)
    a.tick()
    assert a.jobs.coordinator.jobs == {}
    b = Server(store, clock, "b")
    shown = a.call("schedule.show", schedule_id=sid)["schedule"]
    assert shown["paused"] and shown["next_due_ms"] is None
    resumed = a.call("schedule.resume", schedule_id=sid)["schedule"]
    assert resumed["next_due_ms"] == clock.wall_ms() + 2000  # the paused ones are not fired
    a.call("schedule.delete", schedule_id=sid)
    with pytest.raises(ApiError) as info:
        a.call("schedule.show", schedule_id=sid)
    assert info.value.code == methods.NOT_FOUND
    assert key_of(sid) not in b.leadership.log.latest(added["partition"])


def test_secret_env_is_sealed_in_the_record_and_never_shown(clock: FakeClock) -> None:
    from server.core.sealing import REDACTED, SecretBox

    a = Server(MemoryStore(), clock, "a")
    a.jobs.sender.secrets = SecretBox.from_seed(b"k" * 32)  # type: ignore[misc]
    a.lead()
    added = every2s(a, secret_env={"TOKEN": "hunter2"})
    raw = a.leadership.log.latest(added["partition"])[key_of(added["schedule_id"])].value
    assert raw is not None and b"hunter2" not in raw
    assert "hunter2" not in str(a.call("schedule.list"))
    assert added["job"]["options"]["secret_env"] == {"TOKEN": REDACTED}
    sealed = orjson.loads(raw)["schedule"]["job"]["options"]["secret_env"]["TOKEN"]
    assert a.jobs.sender.secrets.open("TOKEN", sealed) == "hunter2"  # opened into commits


def test_policies_round_trip_through_the_api(clock: FakeClock) -> None:
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    added = every2s(a)
    assert (added["catch_up"], added["overlap"]) == (CatchUp.ALL.value, Overlap.ALLOW.value)
    at = a.call("schedule.add", command="x", nodes=["n1"], in_s=30)["schedule"]
    assert at["trigger"] == Trigger(at_ms=clock.wall_ms() + 30_000).to_json()


def test_a_fire_the_log_refused_is_read_back_and_fired_once(clock: FakeClock) -> None:
    from pushjobs.errors import BackendUnavailable

    a = Server(MemoryStore(), clock, "a")
    a.lead()
    sid = every2s(a)["schedule_id"]
    real = a.leadership.log.append_batch
    refused: list[str] = []

    def outage(topic: str, batch: Any, **kw: Any) -> list[int]:
        if topic.startswith(a.topics.schedules) and not refused:
            refused.append(topic)
            raise BackendUnavailable("disk full")
        return real(topic, batch, **kw)

    a.leadership.log.append_batch = outage  # type: ignore[method-assign]
    clock.advance(2)
    a.tick()  # refused: nothing started, nothing kept
    assert refused and a.jobs.coordinator.jobs == {} and a.scheduler.owner.broken
    clock.advance(1)
    a.tick()  # read back from the log, then the due time is still due: fired once
    assert list(a.jobs.coordinator.jobs) == [fire_job_id(sid, clock.wall_ms() - 1000)]
    with pytest.raises(BackendUnavailable):  # an add the log refuses is not kept either
        refused.clear()
        every2s(a)
    assert [s["schedule_id"] for s in a.call("schedule.list")["schedules"]] == [sid]


def test_after_a_takeover_a_fire_waits_for_its_nodes_without_spinning(clock: FakeClock) -> None:
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    sid = every2s(a)["schedule_id"]
    clock.advance(SESSION_S + 1)
    b = Server(store, clock, "b")
    b.scheduler.settle_ms = 10_000
    b.lead()
    b.tick()  # n1 and n2 are not back yet: nothing fires
    assert b.jobs.coordinator.jobs == {}
    deadline = b.scheduler.next_deadline_ms()
    assert deadline is not None and deadline > clock.wall_ms()  # the loop sleeps meanwhile
    liveness = b.jobs.liveness
    for _ in range(2):  # online at the threshold (1 heartbeat here)
        liveness.heartbeat("n1", clock.monotonic())
        liveness.heartbeat("n2", clock.monotonic())
    clock.advance(0.2)
    b.tick()
    dues = sorted(int(j[:-8], 16) for j in b.jobs.coordinator.jobs)
    assert dues and all(fire_job_id(sid, d) in b.jobs.coordinator.jobs for d in dues)
    job = b.jobs.coordinator.jobs[fire_job_id(sid, dues[0])]
    assert set(job.nodes) == {"n1", "n2"}
    assert all(n.state.value != "unavailable" for n in job.nodes.values())


def test_a_log_that_fails_is_asked_once_per_backoff_and_nothing_is_lost(
    clock: FakeClock,
) -> None:
    from pushjobs.errors import BackendUnavailable

    a = Server(MemoryStore(), clock, "a")
    a.lead()
    sid = every2s(a)["schedule_id"]
    a.tick()
    log = a.leadership.log
    calls: list[str] = []
    down = [True]
    for name in ("end_offset", "read", "append_batch", "commit", "committed"):
        real = getattr(log, name)

        def failing(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            if down[0]:
                calls.append(_name)
                raise BackendUnavailable("no answer")
            return _real(*args, **kw)

        setattr(log, name, failing)
    for _ in range(40):  # 10 s of the log not answering, ticked every 250 ms
        clock.advance(0.25)
        a.scheduler.tick(clock.wall_ms())
    # Each try stops at the first failure; tries back off (0.5, 1, 2, 4 s...).
    assert 3 <= len(calls) <= 6, calls
    assert a.jobs.coordinator.jobs == {}
    down[0] = False
    clock.advance(10)  # past any backoff
    a.tick()
    a.tick()
    dues = sorted(int(j[:-8], 16) for j in a.jobs.coordinator.jobs)
    assert dues == list(range(dues[0], clock.wall_ms() + 1, 2000))  # every due time, once
    assert fire_job_id(sid, dues[0]) in a.jobs.coordinator.jobs


def test_a_schedule_of_the_single_owner_version_keeps_firing_from_its_old_topic(
    clock: FakeClock,
) -> None:
    from server.core.schedule import Schedule

    store = MemoryStore()
    a = Server(store, clock, "a")
    now = clock.wall_ms()
    schedule = Schedule.of(
        "0123456789ab",
        {"command": "stamp", "nodes": ["n1"], "quorum": "0", "options": {}},
        Trigger(cron="*/2 * * * * *"),
        overlap=Overlap.ALLOW,
    )
    written = fire_job_id(schedule.schedule_id, now - 2000)  # its last fire, never started
    old = {
        "schedule": schedule.to_json(),
        "consumed_ms": now - 2000,
        "last_job": written,
        "fires": [{"due_ms": now - 2000, "job_id": written}],
        "pending": [{"due_ms": now - 2000, "job_id": written}],
    }
    a.leadership.log.append(a.topics.schedules, key_of(schedule.schedule_id), orjson.dumps(old))
    a.lead()
    shown = a.call("schedule.show", schedule_id=schedule.schedule_id)["schedule"]
    assert shown["partition"] == a.topics.schedules and shown["next_due_ms"] == now
    a.tick()
    assert list(a.jobs.coordinator.jobs) == [written, fire_job_id(schedule.schedule_id, now)]
    clock.advance(2)
    a.tick()
    assert fire_job_id(schedule.schedule_id, clock.wall_ms()) in a.jobs.coordinator.jobs
    assert len(a.jobs.coordinator.jobs) == 3
