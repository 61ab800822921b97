"""``job start --offline-wait`` across a leader's death (issue 30, item 1): a node offline
when the job started, back only once the standby leads, runs the job once.

Two real servers on one SQLite log and two agents listing the leader first; one agent is
stopped before the job starts, the leader is killed with SIGKILL while the node waits,
and the agent is started again: the new leader, which read the job (and its deadline)
from the log, asks it then.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.test_takeover_start import failover_fleet
from tests.support import wait_until

pytestmark = pytest.mark.e2e


def test_a_node_back_after_a_failover_runs_the_job_once(tmp_path: Path) -> None:
    with failover_fleet(tmp_path, nodes=["node-1", "node-2"]) as fleet:
        fleet.sandbox.kill("node-2", signal.SIGTERM)
        fleet.wait_offline("node-2")
        job = fleet.start("stamp", ["node-1", "node-2"], offline_wait_s=60)
        job_id = job["job_id"]
        wait_until(lambda: fleet.stamps("node-1") == [job_id], 10, 0.05)
        until = fleet.status(job_id)["offline_until_ms"]

        fleet.kill_leader()
        waiting = fleet.status(job_id)
        assert waiting["nodes"]["node-2"]["state"] == "offline"
        assert waiting["offline_until_ms"] == until  # the same deadline

        fleet.sandbox.start_agent("node-2")
        done = fleet.wait_job(job_id, timeout_s=30)
        assert done["state"] == "complete" and done["summary"] == {"succeeded": 2}, done
        assert fleet.stamps("node-1") == [job_id]  # once each, across the failover
        assert fleet.stamps("node-2") == [job_id]
