"""Overload (issue 25): a fleet offering about three times what the server reads.

The server is made slow rather than the fleet large (``pushjobs.testbed.throttle``: it runs
5% of each tenth of a second) against 6,000 simulated nodes at 1 s heartbeats:
6,000 a second offered, about a third of that read. Through a job of ``true`` on 100 of
them, throttled all along: no node goes offline (each kept sending), the job ends
``complete`` with every node ``succeeded`` (before heartbeats were shed, every reply waited
in a queue until it was too old for the replay window: made 5 s here, so that a few seconds
of overload before the job show it), and the server says it was behind.
The same through an edge (``EdgeIntake`` sheds alike: ``tests/server/test_edges_pure.py``)
and a job on all 6,000 nodes, against the unthrottled run, are ``bench/overload.py``'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pushjobs.api.client import ApiClient
from pushjobs.cli.server_commands import render
from pushjobs.states import TERMINAL_JOB_STATES
from pushjobs.testbed.sandbox import Proc, Sandbox
from pushjobs.testbed.simkeys import node_name
from pushjobs.testbed.throttle import Throttle
from tests.support import wait_until

NODES = 6000
TARGETS = [node_name("sim-", i) for i in range(0, NODES, NODES // 100)]
TERMINAL = {state.value for state in TERMINAL_JOB_STATES}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Sandbox, ApiClient]]:
    sandbox = Sandbox(
        tmp_path,
        nodes=[],
        interval_s=1.0,
        offline_threshold=3,
        online_threshold=2,
        server_extra={
            "server": {"leader_session_s": 5.0},
            "jobs": {"vote_timeout_s": 120.0, "run_timeout_s": 120.0},
            # A short replay window: a queue read oldest first outgrows it in seconds.
            "protocol": {"max_skew_s": 5.0},
        },
    )
    with sandbox:
        sandbox.prepare()
        sandbox.start_server(timeout_s=60)
        sim: Proc = sandbox.start_simulator("sim", NODES, timeout_s=60)
        sim.read_line(60)  # configured
        client = ApiClient.from_files(
            sandbox.api,
            tmp_path / "keys" / "server.pub",
            tmp_path / "keys" / "admin.key",
            timeout_s=60,
        )
        with client:
            wait_until(lambda: info(client)["nodes_online"] == NODES, 60, 0.2)
            yield sandbox, client


def info(client: ApiClient) -> dict[str, Any]:
    found: dict[str, Any] = client.call("server.info", {})
    return found


def behind_figures(now: dict[str, Any]) -> int:
    """Heartbeats shed and offline checks put off, by the server or its edges."""
    total = now.get("expiry_deferred", 0)
    for edge in now.get("edges") or []:
        counters = edge.get("counters") or {}
        total += counters.get("heartbeats_shed", 0) + counters.get("expiry_deferred", 0)
    return int(total)


def test_a_server_offered_three_times_what_it_reads_judges_nobody_and_ends_its_job(
    fleet: tuple[Sandbox, ApiClient],
) -> None:
    sandbox, client = fleet
    before = info(client)
    serving = [sandbox.procs["server"].pid, *(e["pid"] for e in before["edges"] or [])]
    with Throttle(serving, 0.05):
        time.sleep(5)  # the overload itself, before the job (noqa: not a wait)
        job = client.call("job.start", {"command": "true", "nodes": TARGETS})["job"]
        while job["state"] not in TERMINAL:
            watch = {"job_id": job["job_id"], "version": job["version"], "wait_s": 5.0}
            job = client.call("job.watch", {**watch, "nodes": False})["job"]
        during = info(client)
    assert (job["state"], job["summary"]) == ("complete", {"succeeded": len(TARGETS)}), job
    offline = during["transitions"]["offline"] - before["transitions"]["offline"]
    assert offline == 0, f"{offline} nodes judged offline on heartbeats never read"
    assert behind_figures(during) > behind_figures(before), "the server never fell behind"
    text = render(during)
    assert "BEHIND" in text or "offline checks put off" in text, text
