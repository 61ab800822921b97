"""What one writer key can make the server hold and write: a real server with small bounds
(``[jobs]`` in server.toml), real agents, writers' keys added by an admin, requests over
CurveZMQ on 127.0.0.1 from the API client and the real CLI.

- a writer with ``max_active_jobs_per_caller`` jobs not finished is refused one more, with
  a one-line error naming the setting and a non-zero exit; another writer is not;
- a burst of starts past ``job_start_burst_per_caller`` is refused with the seconds to
  wait, and accepted again once they have passed (observed by polling, not sleeping);
- a writer's schedules may not together fire more than
  ``schedule_fires_per_minute_per_caller``: their fires start jobs without asking.

(The options bytes finished jobs keep in memory are bounded in ``tests/server/test_quotas.py``.)
"""

from __future__ import annotations

import contextlib
import re
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs.api.client import ApiClient
from pushjobs.errors import ApiError
from pushjobs.testbed.sandbox import Sandbox
from pushjobs.testbed.tomlwrite import toml_text
from tests.e2e.attacks.support import ATTACK_WHITELIST, log_tail, server_alive, writer
from tests.e2e.conftest import TERMINAL, WHITELIST, Fleet
from tests.e2e.conftest import run_cli as cli
from tests.support import wait_until

pytestmark = pytest.mark.e2e

RUNNING = ["node-1", "node-2", "node-3"]
ABSENT = "node-off"  # registered, never started: a job on it ends at once
MAX_ACTIVE = 2
PER_MINUTE = 6  # a token every 10 s: more than a CLI process takes to start
BURST = 3
FIRES_PER_MINUTE = 90  # an every-second schedule and an every-other-second one


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    sandbox = Sandbox(
        tmp_path_factory.mktemp("bounds") / "fleet",
        nodes=[*RUNNING, ABSENT],
        whitelist={**WHITELIST, **ATTACK_WHITELIST},
        server_extra={
            "jobs": {
                "vote_timeout_s": 5.0,
                "max_active_jobs_per_caller": MAX_ACTIVE,
                "job_starts_per_minute_per_caller": PER_MINUTE,
                "job_start_burst_per_caller": BURST,
                "schedule_fires_per_minute_per_caller": FIRES_PER_MINUTE,
            }
        },
    ).prepare()
    fleet = Fleet(sandbox)
    try:
        sandbox.start_server()
        sandbox.start_agents(RUNNING)
        fleet.wait_online(RUNNING)
        # Past the start's grace, in which a job waits for the nodes not heard yet.
        fleet.wait_job(fleet.start("true", [ABSENT])["job_id"], timeout_s=30.0)
        yield fleet
    finally:
        fleet.close()


def cli_config(fleet: Fleet, name: str) -> Path:
    """The fleet's client config, as the user ``name``."""
    config = tomllib.loads(fleet.sandbox.client_config_path.read_text())
    config["client"]["user_key"] = str(fleet.root / "keys" / f"{name}.key")
    path = fleet.root / f"client-{name}.toml"
    path.write_text(toml_text(config))
    return path


def start(client: ApiClient, command: str, node: str) -> str:
    reply = client.call("job.start", {"command": command, "nodes": [node]})
    return str(reply["job"]["job_id"])


def refusal(client: ApiClient, command: str, node: str) -> ApiError:
    with pytest.raises(ApiError) as refused:
        start(client, command, node)
    assert refused.value.code == "busy", refused.value
    return refused.value


def test_a_writers_unfinished_jobs_are_bounded_and_another_writers_are_not(
    bounded: Fleet,
) -> None:
    amy, bob = writer(bounded, "amy"), writer(bounded, "bob")
    jobs: list[str] = []
    try:
        jobs += [start(amy, "sleeper", "node-1"), start(amy, "sleeper", "node-2")]
        # One more, from the real CLI: one line, the setting named, a non-zero exit.
        code, out, err = cli(cli_config(bounded, "amy"), "job", "start", "true", "node-3")
        assert code != 0 and out == "", (code, out, err)
        assert err.count("\n") == 1 and err.startswith("error: "), err
        assert "amy has 2 jobs not finished" in err, err
        assert "jobs.max_active_jobs_per_caller" in err, err
        # Counted where an operator looks: server status and pushjobs_drops_total.
        assert bounded.call("server.info")["drops"]["api"]["writer_bounds"] >= 1
        jobs.append(start(bob, "sleeper", "node-3"))  # bob's jobs are his own
        # One of amy's ends: she may start one again.
        amy.call("job.abort", {"job_id": jobs[0]})
        bounded.wait_job(jobs[0], timeout_s=20.0)
        jobs.append(start(amy, "true", ABSENT))
    finally:
        for job_id in jobs:
            with contextlib.suppress(ApiError):  # ended already
                bounded.call("job.abort", {"job_id": job_id})
        amy.close()
        bob.close()
    assert server_alive(bounded), log_tail(bounded, "server")


def test_a_burst_beyond_the_rate_is_refused_with_when_to_retry_then_accepted(
    bounded: Fleet,
) -> None:
    cat = writer(bounded, "cat")
    try:
        # Jobs on a node that is not running end at once: the unfinished bound stays out
        # of the way, and the burst is taken as fast as the server answers.
        first = [start(cat, "true", ABSENT) for _ in range(BURST)]
        assert all(bounded.status(j)["state"] in TERMINAL for j in first)
        refused_at = time.monotonic()
        refused = refusal(cat, "true", ABSENT)
        assert "jobs.job_starts_per_minute_per_caller" in str(refused), refused
        retry_s = float(re.findall(r"retry in ([0-9.]+) s", str(refused))[0])
        assert 0 < retry_s <= 60 / PER_MINUTE, refused
        # The real CLI gets the same answer, in one line, with a non-zero exit.
        code, _, err = cli(cli_config(bounded, "cat"), "job", "start", "true", ABSENT)
        assert code != 0 and err.count("\n") == 1 and "retry in" in err, (code, err)

        def accepted() -> str | None:
            try:
                return start(cat, "true", ABSENT)
            except ApiError as exc:
                assert exc.code == "busy", exc
                return None

        # Refused requests take nothing: polling gets through once a token has refilled,
        # and not before the time the refusal named (give or take the clocks' rounding).
        wait_until(accepted, 40.0, 0.2)
        assert time.monotonic() - refused_at >= retry_s - 0.5
        refusal(cat, "true", ABSENT)  # and that token was the only one
    finally:
        cat.close()
    assert server_alive(bounded), log_tail(bounded, "server")


def test_admins_are_not_bounded(bounded: Fleet) -> None:
    for _ in range(BURST + 2):
        bounded.start("true", [ABSENT])


def test_a_writers_schedules_may_not_fire_past_its_budget(bounded: Fleet) -> None:
    dan = writer(bounded, "dan")
    added: list[str] = []

    def add(cron: str) -> None:
        params = {"command": "true", "nodes": [ABSENT], "cron": cron}
        added.append(dan.call("schedule.add", params)["schedule"]["schedule_id"])

    try:
        add("* * * * * *")  # 60 a minute
        add("*/2 * * * * *")  # 30 more: the budget, exactly
        # One more fire a minute, from the real CLI: refused in one line, the setting named.
        code, out, err = cli(
            cli_config(bounded, "dan"), "schedule", "add", "true", ABSENT, "--cron", "0 * * * *"
        )
        assert code != 0 and out == "" and err.count("\n") == 1, (code, out, err)
        assert "dan's schedules could fire 90.0167 times a minute" in err, err
        assert "jobs.schedule_fires_per_minute_per_caller" in err, err
        listed = bounded.call("schedule.list", {})["schedules"]
        assert sorted(s["schedule_id"] for s in listed if s["created_by"] == "dan") == sorted(added)
    finally:
        for sid in added:
            dan.call("schedule.delete", {"schedule_id": sid})
        dan.close()
    assert server_alive(bounded), log_tail(bounded, "server")
