"""A recurring schedule whose kept job fails today's checks at a fire (kept by a version
before timeouts were bounded, read back from the log: the one job the API cannot refuse,
``jobparams.py``) is paused by the server at its first refused fire, durably and with the
reason, for every later leader, until resumed; other refusals (the fleet's state, the
leader away) leave it firing."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import orjson
import pytest

from pushjobs.clock import FakeClock
from pushjobs.log.memory import MemoryLog, MemoryStore
from server.core.schedule import fire_job_id
from server.shell.schedcatalog import Entry
from server.shell.schedlog import key_of
from server.shell.serverconfig import JobSettings
from tests.server.test_scheduler import SESSION_S, Server

HUGE_S = 1e17  # milliseconds beyond 64 bits: accepted before timeouts were bounded
REFUSED = "'timeout_s' must be a number of seconds, more than 0 and at most a year"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(wall_ms=1_800_000_000_000)


def each_second(server: Server, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"command": "stamp", "nodes": ["n1", "n2"], "cron": "* * * * * *"}
    added: dict[str, Any] = server.call("schedule.add", **{**params, **extra})["schedule"]
    return added


def keep_timeout(server: Server, sid: str, timeout_s: float) -> None:
    """Rewrite ``sid``'s kept job with this timeout, as an older version could keep it."""
    entry = server.scheduler.catalog.entries[sid]
    job = {**entry.schedule.job, "timeout_s": timeout_s}
    changed = dataclasses.replace(entry.schedule, job_json=orjson.dumps(job))
    server.scheduler._write(sid, Entry(changed, entry.from_ms, entry.topic), entry.topic)


def kept(store: MemoryStore, clock: FakeClock, added: dict[str, Any]) -> dict[str, Any]:
    """The schedule's definition as written in its partition."""
    record = MemoryLog(store, clock=clock).latest(added["partition"])[key_of(added["schedule_id"])]
    assert record.value is not None
    schedule: dict[str, Any] = orjson.loads(record.value)["schedule"]
    return schedule


def test_it_is_paused_at_the_first_fire_and_stays_paused_for_the_next_leader(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    a = Server(store, clock, "a")
    a.lead()
    added = each_second(a)
    sid = added["schedule_id"]
    keep_timeout(a, sid, HUGE_S)
    clock.advance(1)
    with caplog.at_level(logging.ERROR, logger="pushjobs.server"):
        a.tick()
    shown = a.call("schedule.show", schedule_id=sid)["schedule"]
    assert shown["paused"] and shown["next_due_ms"] is None
    assert shown["paused_reason"] == REFUSED
    assert [r for r in caplog.records if f"schedule {sid} paused" in r.getMessage()]
    assert kept(store, clock, added)["paused_reason"] == shown["paused_reason"]  # durable
    for _ in range(5):  # no more fires: its owner followed the pause
        clock.advance(1)
        a.tick()
    [fire] = a.call("schedule.history", schedule_id=sid)["fires"]
    assert fire["outcome"] == f"not started: {REFUSED}"

    # A new leader (a is gone) reads it paused, with its reason, and fires nothing.
    clock.advance(SESSION_S + 1)
    b = Server(store, clock, "b")
    b.lead()
    for _ in range(3):
        clock.advance(1)
        b.tick()
    assert (
        b.call("schedule.show", schedule_id=sid)["schedule"]["paused_reason"]
        == (shown["paused_reason"])
    )
    assert b.jobs.coordinator.jobs == {}
    # Fixed (its timeout within a year) and resumed: it fires and starts again.
    keep_timeout(b, sid, 60.0)
    resumed = b.call("schedule.resume", schedule_id=sid)["schedule"]
    assert not resumed["paused"] and resumed["paused_reason"] == ""
    assert kept(store, clock, added)["paused_reason"] == ""
    clock.advance(1)
    b.tick()
    b.tick()
    assert fire_job_id(sid, resumed["next_due_ms"]) in b.jobs.coordinator.jobs


def test_resumed_unfixed_it_is_paused_again_at_its_next_fire(clock: FakeClock) -> None:
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    sid = each_second(a)["schedule_id"]
    keep_timeout(a, sid, HUGE_S)
    clock.advance(1)
    a.tick()
    assert a.call("schedule.show", schedule_id=sid)["schedule"]["paused"]
    a.call("schedule.resume", schedule_id=sid)
    clock.advance(1)
    a.tick()
    shown = a.call("schedule.show", schedule_id=sid)["schedule"]
    assert shown["paused"] and shown["paused_reason"]
    assert len(a.call("schedule.history", schedule_id=sid)["fires"]) == 2


@pytest.mark.parametrize(
    ("settings", "extra", "refusal"),
    [
        (JobSettings(max_nodes=1), {}, "2 nodes selected; the limit is 1"),  # the fleet's
        (JobSettings(), {"nodes": ["n1", "gone"]}, "no node named"),  # the fleet's
    ],
)
def test_refusals_that_depend_on_the_fleet_leave_it_firing(
    clock: FakeClock, settings: JobSettings, extra: dict[str, Any], refusal: str
) -> None:
    a = Server(MemoryStore(), clock, "a")
    a.jobs.settings = settings
    a.jobs.registered = lambda node: node != "gone"
    a.lead()
    sid = each_second(a, **extra)["schedule_id"]
    for _ in range(3):
        clock.advance(1)
        a.tick()
    shown = a.call("schedule.show", schedule_id=sid)["schedule"]
    assert not shown["paused"] and shown["paused_reason"] == ""
    fires = a.call("schedule.history", schedule_id=sid)["fires"]
    assert len(fires) == 3
    assert all(refusal in f["outcome"] for f in fires)


def test_a_one_shot_is_not_paused(clock: FakeClock) -> None:
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    sid = a.call("schedule.add", command="stamp", nodes=["n1"], in_s=1)["schedule"]["schedule_id"]
    keep_timeout(a, sid, HUGE_S)
    clock.advance(1)
    a.tick()
    shown = a.call("schedule.show", schedule_id=sid)["schedule"]
    assert not shown["paused"]
    [fire] = a.call("schedule.history", schedule_id=sid)["fires"]
    assert fire["outcome"] == f"not started: {REFUSED}"
