"""A job that cannot be recorded cannot be started, so nothing later has to handle one.

Every value a job carries is checked where its request is (``server.core.jobparams``, at
``job.start`` and ``schedule.add``), or reached the server as JSON that orjson decoded (so
it encodes again), or is the leader's default timeout, checked when its config is read
(``test_settings.py``). What used to make a job's records unencodable (a timeout whose
milliseconds outgrow 64 bits, a value of no JSON type, a lone surrogate) is refused
before anything is written; what is let through can be recorded, at the bounds too.

The one case no request brings: a schedule kept by a version from before timeouts were
bounded, read back from the log. Its fire is refused by the same check, marked not
started, nothing written, and the server goes on (here); a recurring one is paused
(``test_schedule_autopause.py``, ``tests/e2e/test_schedule_unrecordable.py``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import orjson
import pytest

from pushjobs.api import methods
from pushjobs.clock import FakeClock
from pushjobs.errors import ApiError, MalformedMessage
from pushjobs.log.memory import MemoryStore
from pushjobs.protocol import codec
from pushjobs.protocol.messages import AckCommit, ApiRequest
from pushjobs.quorum import MAX_COUNT
from server.core.jobparams import MAX_SECONDS, job_params, job_request
from server.core.records import CHUNK_KEY
from server.core.schedule import fire_job_id
from server.core.sealing import SecretBox
from server.shell.schedcatalog import Entry
from tests.server.test_handlers_env import Backend, start
from tests.server.test_scheduler import Server

NOW_MS = 1_800_000_000_000
LAST_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

# Each made a job's records unencodable before it was refused at the start (64-bit
# milliseconds, or its deadline; no JSON number; no JSON type).
UNRECORDABLE: list[dict[str, Any]] = [
    {"timeout_s": 1e17},
    {"timeout_s": 9.2233719e15},
    {"vote_timeout_s": math.inf},
    {"timeout_s": math.nan},
    {"env": {"X": 2**70}},
    {"cwd": object()},
]


@pytest.mark.parametrize("params", UNRECORDABLE)
def test_what_would_make_a_job_unrecordable_is_refused_by_job_start(
    params: dict[str, Any],
) -> None:
    backend = Backend(None)
    with pytest.raises(ApiError) as info:
        start(backend, **params)
    assert info.value.code == methods.BAD_REQUEST
    assert backend.requests == []  # nothing reached the job's owner


@pytest.mark.parametrize("params", UNRECORDABLE)
def test_what_would_make_a_job_unrecordable_is_refused_by_schedule_add(
    params: dict[str, Any],
) -> None:
    a = Server(MemoryStore(), FakeClock(wall_ms=NOW_MS), "a")
    a.lead()
    with pytest.raises(ApiError) as info:
        a.call("schedule.add", command="stamp", nodes=["n1"], cron="* * * * *", **params)
    assert info.value.code == methods.BAD_REQUEST
    assert a.scheduler.catalog.entries == {}  # nothing kept


def test_a_string_that_cannot_be_encoded_never_reaches_the_server() -> None:
    # Requests, and nodes' replies, arrive as JSON: a lone surrogate cannot be decoded.
    request = ApiRequest(
        sender="alice",
        incarnation="i",
        sequence=1,
        timestamp=0,
        request_id="r1",
        method="job.start",
        params={"command": "echo @@", "nodes": ["n1"]},
    )
    body = codec.encode(request)
    assert codec.decode(body) == request
    with pytest.raises(MalformedMessage, match="not valid JSON"):
        codec.decode(body.replace(b"@@", b"\\ud800"))


def test_a_job_at_every_bound_the_api_accepts_is_recorded() -> None:
    clock = FakeClock(wall_ms=LAST_MS - MAX_SECONDS * 1000)  # its deadlines fall in 9999
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    box = SecretBox.from_seed(b"s" * 32)
    params = {
        "command": "echo \u00e9\u2028\U0001f600",
        "nodes": ["n1", "n2"],
        "quorum": "1",
        "timeout_s": MAX_SECONDS,
        "vote_timeout_s": MAX_SECONDS,
        "batch": str(MAX_COUNT),
        "batch_wait_s": MAX_SECONDS,
        "max_failures": "100%",
        "env": {"A": "\U0001f600" * 100},
        "secret_env": {"B": "s3cr3t"},
        "cwd": "/tmp/\u00e9",
        "capture": True,
    }
    now = clock.wall_ms()
    job_id = a.jobs.start(job_request(job_params(params, box)), "alice", now)
    a.jobs.flush(now)
    a.jobs.reply(
        AckCommit(sender="n1", incarnation="i", sequence=1, timestamp=0, job_id=job_id), now
    )
    a.jobs.flush(now)  # written: nothing raised

    log = a.leadership.log
    written = log.latest(a.topics.assignments)
    header = orjson.loads(written[f"job:{job_id}"].value or b"")
    assert header["run_timeout_ms"] == header["vote_timeout_ms"] == MAX_SECONDS * 1000
    assert header["vote_deadline_ms"] == LAST_MS
    assert header["command"] == params["command"]
    assert orjson.loads(written[f"job:{job_id}{CHUNK_KEY}0"].value or b"")["nodes"]["n1"]
    events = [r for r in log.read(a.topics.events, 0, 100) if r.key == f"job:{job_id}"]
    assert events and all(orjson.loads(r.value or b"") for r in events)


@pytest.mark.parametrize("kept_s", [1e17, MAX_SECONDS + 1])
def test_a_schedule_kept_by_an_older_version_fires_as_not_started_and_the_server_goes_on(
    kept_s: float,
) -> None:
    clock = FakeClock(wall_ms=NOW_MS)
    a = Server(MemoryStore(), clock, "a")
    a.lead()
    added = a.call("schedule.add", command="stamp", nodes=["n1"], in_s=1)["schedule"]
    sid = added["schedule_id"]
    # As a version before timeouts were bounded kept it (1e17: its milliseconds overflow).
    entry = a.scheduler.catalog.entries[sid]
    job = {**entry.schedule.job, "timeout_s": kept_s}
    bad = dataclasses.replace(entry.schedule, job_json=orjson.dumps(job))
    a.scheduler._write(sid, Entry(bad, entry.from_ms, entry.topic), entry.topic)
    a.tick()
    assert a.scheduler.catalog.entries[sid].schedule.job["timeout_s"] == kept_s
    clock.advance(1)
    a.tick()  # fired and refused: nothing raised
    a.tick()  # not tried again
    job_id = fire_job_id(sid, added["next_due_ms"])
    assert job_id not in a.jobs.coordinator.jobs
    assert f"job:{job_id}" not in a.leadership.log.latest(a.topics.commands)  # nothing written
    [fire] = a.call("schedule.history", schedule_id=sid)["fires"]
    assert fire["job_id"] == job_id
    # Refused as ``job.start`` refuses it, in the same words.
    assert fire["outcome"] == (
        "not started: 'timeout_s' must be a number of seconds, more than 0 and at most a year"
    )
    # The server goes on: another schedule fires and starts its job.
    other = a.call("schedule.add", command="stamp", nodes=["n1"], in_s=1)["schedule"]
    clock.advance(1)
    a.tick()
    assert fire_job_id(other["schedule_id"], other["next_due_ms"]) in a.jobs.coordinator.jobs
