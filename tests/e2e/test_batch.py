"""Rolling batches end to end: ten real agents, a real server, the window seen from the nodes.

Each run of ``step`` appends a start and an end line (nanosecond wall clock) to a file per
job, so the test sees what the nodes did, not what the server says: how many ran at once,
and that each ran once, even when the server is killed with SIGKILL mid-way.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pushjobs.cli.app import app
from pushjobs.cli.exitcodes import Exit
from tests.e2e.conftest import WHITELIST, Fleet, make_fleet
from tests.support import wait_until

NODES = [f"node-{i:02d}" for i in range(1, 11)]
LOG = '"$PUSHJOBS_HOME/runs-$PUSHJOBS_JOB_ID"'
STEP = (
    f'echo "$PUSHJOBS_NODE start $(date +%s%N)" >> {LOG}; sleep $S; '
    f'echo "$PUSHJOBS_NODE end $(date +%s%N)" >> {LOG}'
)
BATCH_WHITELIST = {
    **WHITELIST,
    "step": f"sh -c 'S=0.3; {STEP}'",
    "slow-step": f"sh -c 'S=1; {STEP}'",
    # the first two nodes fail: with a budget of 1, the job halts after the first
    "step-fail-early": "sh -c 'case $PUSHJOBS_NODE in node-01|node-02) exit 3;; esac; "
    f"S=0.3; {STEP}'",
}


@pytest.fixture(scope="module")
def ten(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path_factory.mktemp("batch"), nodes=NODES, whitelist=BATCH_WHITELIST)
    try:
        fleet.wait_online(timeout_s=40)
        yield fleet
    finally:
        fleet.close()


def cli(fleet: Fleet, *args: str) -> tuple[int, str]:
    env = {"PUSHJOBS_CONFIG": str(fleet.sandbox.client_config_path)}
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout


def runs(fleet: Fleet, job_id: str) -> list[tuple[str, str, int]]:
    path: Path = fleet.root / f"runs-{job_id}"
    if not path.exists():
        return []
    return [
        (n, what, int(ns))
        for n, what, ns in (line.split() for line in path.read_text().splitlines())
    ]


def peak_in_flight(lines: list[tuple[str, str, int]]) -> int:
    """The most commands running at once, from their start and end stamps."""
    events = sorted((ns, 1 if what == "start" else -1) for _, what, ns in lines)
    now = peak = 0
    for _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak


def test_batch_of_3_runs_each_of_10_nodes_once_never_more_than_3_at_once(ten: Fleet) -> None:
    job = ten.start("slow-step", NODES, batch="3")  # 1 s each: time to look at it waiting
    assert job["batch"] == {
        "window": 3,
        "wait_s": 0.0,
        "max_failures": None,
        "failures": 0,
        "held": [],
    }
    # While it runs, the status shows the nodes waiting their turn.
    wait_until(lambda: ten.status(job["job_id"])["summary"].get("waiting", 0) >= 3, 20, 0.02)
    code, out = cli(ten, "job", "status", job["job_id"])
    assert code == Exit.OK and "waiting its turn: 1 of" in out
    done = ten.wait_job(job["job_id"], timeout_s=40)
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 10}
    lines = runs(ten, job["job_id"])
    assert Counter(n for n, what, _ in lines if what == "start") == Counter(NODES)
    assert 2 <= peak_in_flight(lines) <= 3


def test_cli_batch_with_a_failure_budget_halts_and_skips_the_rest(ten: Fleet) -> None:
    code, out = cli(
        ten,
        "job",
        "start",
        "step-fail-early",
        *NODES[:6],
        "--batch",
        "2",
        "--max-failures",
        "1",
        "--json",
    )
    job = json.loads(out)
    assert code == Exit.FAILED and job["state"] == "halted"
    states = {n: r["state"] for n, r in job["nodes"].items()}
    assert states["node-01"] == "failed"
    assert states["node-02"] == "failed"  # already running when node-01 failed: it finished
    skipped = [n for n in NODES[:6] if states[n] == "skipped"]
    assert skipped == NODES[2:6]
    assert runs(ten, job["job_id"]) == []  # only the two that failed at once ran at all
    # Their commits were let go: the skipped nodes take the next job at once.
    again = ten.start("true", skipped)
    assert ten.wait_job(again["job_id"])["state"] == "complete"


def test_bad_batch_option_is_a_usage_error(ten: Fleet) -> None:
    code, _ = cli(ten, "job", "start", "step", "node-01", "--batch", "0")
    assert code == Exit.USAGE


def test_server_killed_mid_batch_continues_without_running_a_node_twice(ten: Fleet) -> None:
    job = ten.start("slow-step", NODES, batch="3")
    job_id = job["job_id"]

    def some_done_some_waiting() -> bool:
        summary = ten.status(job_id)["summary"]
        return summary.get("succeeded", 0) >= 2 and summary.get("waiting", 0) >= 3

    wait_until(some_done_some_waiting, 30, 0.02)
    ten.sandbox.kill("server", signal.SIGKILL)
    ten.reconnect()
    ten.sandbox.start_server()
    done = ten.wait_job(job_id, timeout_s=50)
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 10}
    lines = runs(ten, job_id)
    assert Counter(n for n, what, _ in lines if what == "start") == Counter(NODES)
    assert Counter(n for n, what, _ in lines if what == "end") == Counter(NODES)
    assert peak_in_flight(lines) <= 3
