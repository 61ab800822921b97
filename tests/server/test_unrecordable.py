"""A job whose records could not be written is refused before anything is written: at its
start, and when a schedule kept before today's checks fires it (the fire is recorded as
not started, the server goes on)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from pushjobs.api import methods
from pushjobs.clock import FakeClock
from pushjobs.errors import ApiError
from pushjobs.log.memory import MemoryStore
from server.core.records import refuse_unrecordable
from server.core.schedule import fire_job_id
from server.shell.schedcatalog import Entry
from tests.server.test_scheduler import Server

NOW_MS = 1_800_000_000_000


@pytest.mark.parametrize(
    ("vote_s", "run_s", "options"),
    [
        (30.0, 1e17, {}),  # milliseconds beyond 64 bits
        (30.0, 9.2233719e15, {}),  # fits, but its deadline does not
        (float("inf"), 60.0, {}),
        (30.0, float("nan"), {}),
        (30.0, 60.0, {"env": {"X": 2**70}}),
        (30.0, 60.0, {"cwd": object()}),
    ],
)
def test_a_job_that_cannot_be_recorded_is_refused_as_a_bad_request(
    vote_s: float, run_s: float, options: dict[str, Any]
) -> None:
    with pytest.raises(ApiError) as info:
        refuse_unrecordable(NOW_MS, vote_s, run_s, options)
    assert info.value.code == methods.BAD_REQUEST
    assert str(info.value).startswith("the job cannot be recorded: ")


def test_a_job_that_can_be_recorded_passes() -> None:
    refuse_unrecordable(NOW_MS, 30.0, 365 * 86_400.0, {"env": {"X": "1"}, "capture": True})


def test_a_schedule_whose_job_cannot_be_recorded_fires_as_not_started_and_the_server_goes_on() -> (
    None
):
    clock = FakeClock(wall_ms=NOW_MS)
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    added = a.call("schedule.add", command="stamp", nodes=["n1"], in_s=1)["schedule"]
    sid = added["schedule_id"]
    # As a server without today's checks kept it: a timeout whose milliseconds overflow.
    entry = a.scheduler.catalog.entries[sid]
    job = {**entry.schedule.job, "timeout_s": 1e17}
    bad = dataclasses.replace(entry.schedule, job_json=orjson.dumps(job))
    a.scheduler._write(sid, Entry(bad, entry.from_ms, entry.topic), entry.topic)
    a.tick()
    assert a.scheduler.catalog.entries[sid].schedule.job["timeout_s"] == 1e17
    clock.advance(1)
    a.tick()  # fired and refused: nothing raised
    a.tick()  # not tried again
    job_id = fire_job_id(sid, added["next_due_ms"])
    assert job_id not in a.jobs.coordinator.jobs
    assert f"job:{job_id}" not in a.leadership.log.latest(a.topics.commands)  # nothing written
    [fire] = a.call("schedule.history", schedule_id=sid)["fires"]
    assert fire["job_id"] == job_id
    assert fire["outcome"].startswith("not started: the job cannot be recorded")
    # The server goes on: another schedule fires and starts its job.
    other = a.call("schedule.add", command="stamp", nodes=["n1"], in_s=1)["schedule"]
    clock.advance(1)
    a.tick()
    assert fire_job_id(other["schedule_id"], other["next_due_ms"]) in a.jobs.coordinator.jobs
