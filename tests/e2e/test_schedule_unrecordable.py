"""A recurring schedule whose jobs cannot be recorded, on a real server through the real
CLI: paused at its first fire with the reason shown, still paused after a restart, and
firing again once the operator fixes the cause and resumes it.

Today's checks refuse such a schedule when it is added (timeouts at most a year, in
``schedule add`` and in the server's ``[jobs]`` defaults alike), so the test plants what an
earlier version accepted: the schedule's definition in the log, rewritten with a timeout
whose milliseconds outgrow the log's 64-bit integers, while the server is stopped. That
is the one such job the API cannot refuse; each fire checks it again as ``job.start``
would (``jobparams.job_request``), in the same words.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import orjson
import pytest

from pushjobs.log.factory import LogSettings, open_log
from pushjobs.log.topics import names
from server.core.schedshards import DEFAULT_PARTITIONS, topic_of
from server.shell.schedlog import key_of
from tests.e2e.conftest import Fleet, run_cli
from tests.support import wait_until

pytestmark = pytest.mark.e2e

HUGE_TIMEOUT_S = 1e17  # accepted before timeouts were bounded
REFUSED = "'timeout_s' must be a number of seconds, more than 0 and at most a year"


def plant_timeout(fleet: Fleet, sid: str, timeout_s: float, *, paused: bool) -> None:
    """Rewrite ``sid``'s definition in the stopped server's log with this timeout, paused
    or not (a compacted topic: the newest record of a key is the definition)."""
    log = open_log(LogSettings(backend="sqlite", path=fleet.root / "log.db"))
    try:
        topic = topic_of(names().schedules, sid, DEFAULT_PARTITIONS)
        value = orjson.loads(log.latest(topic)[key_of(sid)].value)
        value["schedule"]["job"]["timeout_s"] = timeout_s
        value["schedule"]["paused"] = paused
        log.append_batch(topic, [(key_of(sid), orjson.dumps(value))])
    finally:
        log.close()


def restart(fleet: Fleet) -> None:
    fleet.sandbox.kill("server", signal.SIGTERM)
    fleet.sandbox.start_server()
    fleet.reconnect()


def cli(fleet: Fleet, *args: str) -> str:
    code, out, err = run_cli(fleet.sandbox.client_config_path, "schedule", *args)
    assert code == 0, err
    return out


def shown(fleet: Fleet, sid: str) -> dict[str, Any] | None:
    """The schedule as the leader shows it; None while no server leads."""
    found = fleet.call_served("schedule.show", {"schedule_id": sid})
    return None if found is None else dict(found["schedule"])


def fires(fleet: Fleet, sid: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = fleet.call("schedule.history", {"schedule_id": sid})["fires"]
    return found


def test_a_schedule_that_cannot_be_recorded_is_paused_until_fixed_and_resumed(
    fleet: Fleet,
) -> None:
    added = json.loads(cli(fleet, "add", "stamp", "node-1", "--cron", "* * * * * *", "--json"))
    sid = added["schedule_id"]
    cli(fleet, "pause", sid)
    fleet.sandbox.kill("server", signal.SIGTERM)
    plant_timeout(fleet, sid, HUGE_TIMEOUT_S, paused=False)
    fleet.sandbox.start_server()
    fleet.reconnect()
    paused = wait_until(lambda: (s := shown(fleet, sid)) and s["paused"] and s, 30.0, 0.1)
    assert paused["paused_reason"] == REFUSED
    # Paused at its first such fire (it may have fired before it was paused, planted or
    # not): not refused again every second.
    before = fires(fleet, sid)
    refused = [f for f in before if f["outcome"] == f"not started: {REFUSED}"]
    assert len(refused) == 1, before
    listed = cli(fleet, "list")
    assert f"paused: {paused['paused_reason']}" in listed
    assert f"next      paused: {REFUSED}" in cli(fleet, "show", sid)
    as_json = json.loads(cli(fleet, "show", sid, "--json"))
    assert as_json["paused"] and as_json["paused_reason"] == paused["paused_reason"]

    # A restart: the pause held, and nothing fired while it was paused.
    restart(fleet)
    again = wait_until(lambda: shown(fleet, sid), 30.0, 0.1)
    assert again["paused"] and again["paused_reason"] == paused["paused_reason"]
    assert len(fires(fleet, sid)) == len(before)

    # The cause fixed (here in the log, still paused), the operator resumes it.
    fleet.sandbox.kill("server", signal.SIGTERM)
    plant_timeout(fleet, sid, 60.0, paused=True)
    fleet.sandbox.start_server()
    fleet.reconnect()
    wait_until(lambda: shown(fleet, sid), 30.0, 0.1)
    # Resumed: it fires again, and its jobs start.
    assert f"schedule {sid} next " in cli(fleet, "resume", sid)

    def started() -> str | None:
        ran = [f for f in fires(fleet, sid) if f.get("job_state")]
        return ran[0]["job_id"] if ran else None

    job_id = wait_until(started, 30.0, 0.1)
    assert fleet.wait_job(job_id)["state"] == "complete"
    resumed = shown(fleet, sid)
    assert resumed is not None and not resumed["paused"] and resumed["paused_reason"] == ""
    cli(fleet, "delete", sid)
