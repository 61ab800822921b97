"""Schedules end to end: a real server killed -9 around fire times, real agents, and every
due time producing exactly one job that each node ran once.

``PUSHJOBS_SCHEDULE_SEED=N`` replays one round's kill moments.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pushjobs.cli.app import app
from pushjobs.cli.audit_commands import check_log, server_key
from pushjobs.cli.exitcodes import Exit
from pushjobs.log.base import Record
from pushjobs.log.factory import LogSettings, open_log
from pushjobs.log.topics import DEFAULT_PREFIX, names
from pushjobs.testbed.childproc import stop_all
from server.core.schedule import fire_job_id
from tests.e2e.conftest import TERMINAL, Fleet, online_fleet
from tests.kafka_broker import broker_or_skip, server_log
from tests.support import wait_until

pytestmark = pytest.mark.e2e

PERIOD_S = 1
RUN_S = 12.0
KILLS = 3


def _restart_at(fleet: Fleet, moment: float) -> None:
    wait_until(lambda: time.time() >= moment, 30.0, 0.01)
    fleet.sandbox.kill("server", signal.SIGKILL)
    fleet.reconnect()
    fleet.sandbox.start_server()


def _stamps(root: Path, node: str) -> list[str]:
    path = root / f"stamps-{node}"
    return path.read_text().split() if path.exists() else []


# 12 s: bench/drills.py. The suite kills a server at a fire in test_chaos_kinds.py
# ([scheduled]) and moves partitions between servers in test_schedule_shards.py.
@pytest.mark.drill
def test_each_due_time_runs_once_on_each_node_across_server_kills(fleet: Fleet) -> None:
    seed = int(os.environ.get("PUSHJOBS_SCHEDULE_SEED", random.randrange(10**6)))
    rng = random.Random(seed)
    added = fleet.call(
        "schedule.add",
        {
            "command": "stamp",
            "nodes": fleet.sandbox.nodes,
            "cron": f"*/{PERIOD_S} * * * * *",
            "catch_up": "all",
            "overlap": "queue",
        },
    )["schedule"]
    sid = added["schedule_id"]
    first_due = added["next_due_ms"]
    # Kill -9 at seeded moments within 300 ms of a due time, a few fires apart.
    fire_s = first_due / 1000
    for _ in range(KILLS):
        fire_s += PERIOD_S * rng.randint(2, 4)
        _restart_at(fleet, fire_s + rng.uniform(-0.3, 0.3))
    end_s = max(fire_s + PERIOD_S, first_due / 1000 + RUN_S)
    wait_until(lambda: time.time() >= end_s, 60.0, 0.05)
    wait_until(lambda: fleet.call_served("schedule.pause", {"schedule_id": sid}), 30.0, 0.05)
    paused = fleet.call("schedule.show", {"schedule_id": sid})["schedule"]
    last_due = paused["consumed_ms"]

    dues = list(range(first_due, last_due + 1, PERIOD_S * 1000))
    expected = [fire_job_id(sid, due) for due in dues]

    def all_ended() -> bool:
        for job_id in expected:
            job = fleet.call_served("job.status", {"job_id": job_id, "nodes": False})
            if job is None or job["job"]["state"] not in TERMINAL:  # type: ignore[index]
                return False
        return True

    wait_until(all_ended, 60.0, 0.1)
    listed = fleet.call("job.list", {"limit": 1000})["jobs"]
    fired = sorted(j["job_id"] for j in listed if j["command"] == "stamp")
    context = f"seed {seed}"
    assert len(dues) >= RUN_S / PERIOD_S - 1, context
    assert sorted(expected) == fired, context  # each due time: one job, none other
    for job_id in expected:
        job = fleet.call("job.status", {"job_id": job_id})["job"]
        assert job["summary"] == {"succeeded": 3}, (context, job_id, job["summary"])
    for node in fleet.sandbox.nodes:
        ran = _stamps(fleet.root, node)
        assert sorted(ran) == sorted(expected), (context, node)  # each job once per node


def cli(fleet: Fleet, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        app, list(args), env={"PUSHJOBS_CONFIG": str(fleet.sandbox.client_config_path)}
    )
    return result.exit_code, result.stdout, result.stderr


def test_the_schedule_commands(shared_fleet: Fleet) -> None:
    code, out, err = cli(shared_fleet, "schedule", "add", "stamp", "node-1", "--in", "1s", "--json")
    assert code == 0, err
    added = json.loads(out)
    sid = added["schedule_id"]
    assert added["trigger"]["at_ms"] == added["next_due_ms"]

    def fired() -> list[dict[str, object]]:
        code, out, _ = cli(shared_fleet, "schedule", "history", sid, "--json")
        fires: list[dict[str, object]] = json.loads(out)["fires"] if code == 0 else []
        return [f for f in fires if f["job_state"] in TERMINAL]

    [fire] = wait_until(fired, 20.0, 0.1)
    assert fire["job_id"] == fire_job_id(sid, added["next_due_ms"])
    assert fire["job_state"] == "complete"
    cron_args = ["--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--catch-up", "skip"]
    code, out, _ = cli(
        shared_fleet, "schedule", "add", "stamp", "node-*", *cron_args, "--overlap", "queue"
    )
    assert code == 0 and "cron '0 3 * * *' Europe/Berlin" in out
    cron_id = out.split()[1].rstrip(":")
    code, out, _ = cli(shared_fleet, "schedule", "list")
    assert code == 0 and sid in out and cron_id in out
    code, out, _ = cli(shared_fleet, "schedule", "pause", cron_id)
    assert code == 0 and "paused" in out
    code, out, _ = cli(shared_fleet, "schedule", "show", cron_id)
    assert code == 0 and "next      paused" in out and "overlap   queue" in out
    code, out, _ = cli(shared_fleet, "schedule", "resume", cron_id, "--json")
    assert code == 0 and json.loads(out)["schedule"]["paused"] is False
    for gone in (cron_id, sid):
        assert cli(shared_fleet, "schedule", "delete", gone)[0] == 0
    code, _, err = cli(shared_fleet, "schedule", "show", cron_id)
    assert code == Exit.NOT_FOUND and "no schedule" in err
    code, _, err = cli(shared_fleet, "schedule", "add", "stamp", "node-1", "--cron", "61 * * * *")
    assert code == Exit.USAGE and "cron" in err


def _log_of(fleet: Fleet) -> tuple[LogSettings, str]:
    """The server's log as its config names it (SQLite, or the real Kafka broker), and its
    topic prefix."""
    table = tomllib.loads(fleet.sandbox.server_config_path.read_text())["log"]
    prefix = str(table.get("topic_prefix", DEFAULT_PREFIX))
    if table["backend"] == "kafka":
        return LogSettings(
            "kafka", bootstrap_servers=table["bootstrap_servers"], topic_prefix=prefix
        ), prefix
    return LogSettings(path=Path(table["path"]), create=False), prefix


def _partition_records(fleet: Fleet) -> list[Record]:
    settings, prefix = _log_of(fleet)
    handle = open_log(settings)
    try:
        partitions = names(prefix).schedules + "."
        topics = [t.name for t in handle.topics() if t.name.startswith(partitions)]
        return [r for t in topics for r in handle.read(t, 0, 10_000)]
    finally:
        handle.close()


def _wait_for_fire_record(fleet: Fleet, sid: str, *, written: bool) -> None:
    """Until the log holds a fire record of ``sid`` (``written``) or its tombstone."""
    wait_until(
        lambda: any(
            r.key == f"fire:{sid}" and (r.value is not None) == written
            for r in _partition_records(fleet)
        ),
        20.0,
        0.1,
    )


def _verify_trail(fleet: Fleet) -> list[str]:
    """The server stopped (SIGTERM: a clean stop signs a last checkpoint), its log checked
    as ``pushjobs audit verify`` does; the problems found."""
    stop_all([fleet.sandbox.procs["server"]], 10.0)
    settings, prefix = _log_of(fleet)
    handle = open_log(settings)
    try:
        key = server_key(fleet.sandbox.keys_dir / "server.pub")
        late = settings.backend == "kafka"
        return [str(p) for p in check_log(handle, prefix, key, late_writes=late).problems]
    finally:
        handle.close()


@pytest.fixture(params=["sqlite", pytest.param("kafka", marks=pytest.mark.kafka)])
def one_partition(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    """A fleet whose schedules all go to one partition, so each write lands beside the
    last: on SQLite, and on the session's real Kafka broker."""
    extra: dict[str, dict[str, object]] = {"server": {"schedule_partitions": 1}}
    if request.param == "kafka":
        extra["log"] = server_log(broker_or_skip())
    with online_fleet(tmp_path, server_extra=extra) as fleet:
        yield fleet


def test_a_deleted_schedules_two_tombstones_stay_in_their_writers_chains(
    one_partition: Fleet,
) -> None:
    # Found by the long chaos run. A schedule deleted: the leader's tombstone of its
    # definition, then the partition owner's of its fire state, neither with room for a
    # ``_chain`` field. A server restarted after them reads both writers' chain heads back
    # from the log; each must find its own tombstone, or its chain goes on from a head the
    # last checkpoint did not seal and ``audit verify`` reports the log altered.
    fleet = one_partition
    code, out, err = cli(fleet, "schedule", "add", "stamp", "node-1", "--in", "1s", "--json")
    assert code == 0, err
    sid = json.loads(out)["schedule_id"]
    _wait_for_fire_record(fleet, sid, written=True)
    assert cli(fleet, "schedule", "delete", sid)[0] == 0
    _wait_for_fire_record(fleet, sid, written=False)  # the owner's tombstone
    stop_all([fleet.sandbox.procs["server"]], 10.0)
    fleet.reconnect()
    fleet.sandbox.start_server()
    code, out, err = cli(fleet, "schedule", "add", "stamp", "node-1", "--in", "1s", "--json")
    assert code == 0, err
    _wait_for_fire_record(fleet, json.loads(out)["schedule_id"], written=True)
    assert _verify_trail(fleet) == []
