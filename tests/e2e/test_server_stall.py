"""The server's own stall is not its nodes' silence (real processes, SIGSTOP).

A server stopped for many offline windows must not, on waking, mark its nodes offline
and crash their jobs: it could not have heard them. Asserted from the server's own
counters (no offline transition) and from the job (every node succeeded, once).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Fleet
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def _pause(fleet: Fleet, seconds: float) -> None:
    pid = fleet.sandbox.procs["server"].popen.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)  # the stall under test (noqa: not a wait)
    finally:
        os.kill(pid, signal.SIGCONT)


# "idle" (11 s) is a drill, bench/drills.py: the suite pauses the server mid-job, where a
# wrong judgement also costs a job; test_edges.py's pauses of a leader with edges too.
@pytest.mark.parametrize("point", ["running", pytest.param("idle", marks=pytest.mark.drill)])
def test_a_paused_server_crashes_nobody(fleet: Fleet, point: str) -> None:
    offline_before = fleet.call("server.info")["transitions"]["offline"]
    window_s = 0.2 * 3  # the sandbox's interval times its offline threshold
    if point == "running":
        job = fleet.start("count-slowly")
        for node in fleet.sandbox.nodes:
            fleet.wait_node_state(job["job_id"], node, "running")
        for _ in range(2):  # while it runs, then (most likely) as it finishes
            _pause(fleet, 6 * window_s)
        done = fleet.wait_job(job["job_id"])
        assert done["state"] == "complete", done
        assert {n["state"] for n in done["nodes"].values()} == {"succeeded"}, done
        for node in fleet.sandbox.nodes:
            runs = Path(fleet.root / f"count-{node}").read_text().splitlines()
            assert len(runs) == 1, node
    else:
        for _ in range(3):  # each at another point of the heartbeat cycle
            _pause(fleet, 6 * window_s)
            wait_until(lambda: fleet.call("server.info")["leader"], 10)
    info = fleet.call("server.info")
    assert info["transitions"]["offline"] == offline_before, "a node went offline"
    later = fleet.start("true")
    assert fleet.wait_job(later["job_id"])["state"] == "complete"
