"""``job start --offline-wait`` with real processes (issue 30, item 1): a job keeps itself
open for its targets offline at start.

Three agents; two are stopped before the job starts. The job, started with the CLI,
runs at once on the online node and shows the other two waiting in ``job status``. One
comes back before the deadline: it gets its commit then and runs, once, even when its
agent restarts afterwards. The other never comes back: at the deadline it ends
``unavailable``, saying why, and the job ends.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs.cli.exitcodes import Exit
from server.core.offlinewait import GAVE_UP
from tests.e2e.conftest import Fleet, make_fleet, run_cli
from tests.support import wait_until

WAIT_S = 6  # long enough to bring an agent back (about 1 s here), short for the suite


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path)
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def stamps(fleet: Fleet, node: str) -> list[str]:
    path = fleet.root / f"stamps-{node}"
    return path.read_text().split() if path.exists() else []


def test_an_offline_node_runs_once_when_back_and_one_never_back_is_unavailable(
    fleet: Fleet,
) -> None:
    for node in ("node-2", "node-3"):
        fleet.sandbox.kill(node, signal.SIGTERM)
    for node in ("node-2", "node-3"):
        fleet.wait_offline(node)
    config = fleet.sandbox.client_config_path
    start = ("job", "start", "stamp", "node-1", "node-2", "node-3")
    code, out, err = run_cli(config, *start, "--offline-wait", f"{WAIT_S}s", "--nowait")
    assert code == Exit.OK, err
    job_id = out.strip()

    # node-1 runs at once (the quorum counts the online nodes); the others wait, visibly.
    wait_until(lambda: stamps(fleet, "node-1") == [job_id], 10, 0.05)
    job = fleet.status(job_id)
    assert job["state"] == "running"
    assert {n: job["nodes"][n]["state"] for n in ("node-2", "node-3")} == {
        "node-2": "offline",
        "node-3": "offline",
    }
    code, out, _ = run_cli(config, "job", "status", job_id)
    assert "2 offline, waited for until" in out, out

    # node-2 comes back before the deadline: it gets the job and runs it.
    fleet.sandbox.start_agent("node-2")
    fleet.wait_node_state(job_id, "node-2", "succeeded", timeout_s=10)
    assert stamps(fleet, "node-2") == [job_id]

    # Its agent restarts (same key, same journal): it is not asked again.
    fleet.sandbox.kill("node-2", signal.SIGTERM)
    fleet.sandbox.start_agent("node-2")
    fleet.wait_online(["node-2"])

    # At the deadline node-3, never back, is unavailable and the job ends.
    done = fleet.wait_job(job_id, timeout_s=WAIT_S + 10)
    assert done["state"] == "complete"
    assert done["nodes"]["node-3"]["state"] == "unavailable"
    assert done["nodes"]["node-3"]["reason"] == GAVE_UP
    assert done["summary"] == {"succeeded": 2, "unavailable": 1}
    assert stamps(fleet, "node-2") == [job_id]  # once, across the restart
    assert stamps(fleet, "node-3") == []
