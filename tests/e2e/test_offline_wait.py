"""``job start --offline-wait`` with real processes (issue 30, item 1): a job keeps itself
open for its targets offline at start, across a leader's death.

Two servers on one SQLite log and three agents listing the leader first; two agents are
stopped before the job starts (by the CLI). It runs at once on the online node and
shows the other two waiting in ``job status``. The leader is killed with SIGKILL while
they wait: the standby, leading now, waits for the same nodes until the same deadline.
One comes back: it gets its commit then and runs, once, even when its agent restarts
afterwards. The other never comes back: at the deadline it ends ``unavailable``, saying
why, and the job ends. One fleet for all of it: the suite's time is counted.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pushjobs.cli.exitcodes import Exit
from server.core.offlinewait import GAVE_UP
from tests.e2e.conftest import run_cli
from tests.e2e.test_takeover_start import failover_fleet
from tests.support import wait_until

pytestmark = pytest.mark.e2e

# Long enough for a failover and an agent's return (about 3 s here), short for the suite.
WAIT_S = 8


# 11 s: bench/drills.py (the suite: docs/cli.md's --offline-wait recipe on a real fleet,
# test_docs_cli.py, and tests/server/test_offline_wait.py's takeover through the log).
@pytest.mark.drill
def test_offline_nodes_run_once_when_back_across_a_failover_or_end_unavailable(
    tmp_path: Path,
) -> None:
    with failover_fleet(tmp_path) as fleet:
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
        wait_until(lambda: fleet.stamps("node-1") == [job_id], 10, 0.05)
        waiting = fleet.status(job_id)
        assert waiting["state"] == "running"
        assert {n: waiting["nodes"][n]["state"] for n in ("node-2", "node-3")} == {
            "node-2": "offline",
            "node-3": "offline",
        }
        code, out, _ = run_cli(config, "job", "status", job_id)
        assert "offline nodes waited for until" in out, out

        # The leader dies while they wait: the new one waits for them until the same time.
        fleet.kill_leader()
        taken = fleet.status(job_id)
        assert taken["nodes"]["node-2"]["state"] == "offline"
        assert taken["offline_until_ms"] == waiting["offline_until_ms"]

        # node-2 comes back before the deadline: it gets the job and runs it.
        fleet.sandbox.start_agent("node-2")
        fleet.wait_node_state(job_id, "node-2", "succeeded", timeout_s=10)
        assert fleet.stamps("node-2") == [job_id]

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
        for node in ("node-1", "node-2"):
            assert fleet.stamps(node) == [job_id]  # once each, across failover and restart
        assert fleet.stamps("node-3") == []
