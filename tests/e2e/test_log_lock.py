"""Another process holds the SQLite log's write lock for longer than the busy timeout:
both servers of an installation wait it out (no exit), say so once, and the job that was
running when it began completes afterwards, each node having run it once.

Real servers, agents and a real lock: a second process runs ``BEGIN EXCLUSIVE`` on the
log file, as a backup tool or a stray ``sqlite3`` shell would.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.standby import SECOND
from tests.e2e.test_standby import two_servers

pytestmark = pytest.mark.e2e

# The servers' busy timeout (the log's busy_timeout_s): shorter than the default 10 s, as
# what is under test is a lock held past it, whatever its length.
BUSY_TIMEOUT_S = 3.0
HOLD_S = BUSY_TIMEOUT_S + 5  # past the busy timeout: a write fails, not just waits

HOLDER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))  # noqa: the lock held, in the child
db.execute("ROLLBACK")
"""


def test_a_write_lock_held_past_the_busy_timeout_is_waited_out_by_both_servers(
    tmp_path: Path,
) -> None:
    log = {"busy_timeout_s": BUSY_TIMEOUT_S}
    with two_servers(tmp_path, standby_first=False, log=log) as pair:
        sandbox = pair.sandbox
        job = pair.start("count-slowly")
        pair.wait_node_state(job["job_id"], sandbox.nodes[0], "running")
        argv = [sys.executable, "-c", HOLDER, str(sandbox.root / "log.db"), str(HOLD_S)]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as holder:
            try:
                assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
                assert holder.wait(timeout=HOLD_S + 30) == 0
            finally:
                if holder.poll() is None:
                    holder.kill()
        for name in ("server", SECOND):
            assert sandbox.procs[name].popen.poll() is None, f"{name} exited"
        done = pair.wait_job(job["job_id"], timeout_s=60)
        assert done["state"] == "complete" and done["summary"] == {"succeeded": 3}, done
        for name in sandbox.nodes:
            assert (sandbox.root / f"count-{name}").read_text() == "x\n"
        logs = [sandbox.procs[name].log_text() for name in ("server", SECOND)]
        assert any("the ordered log cannot be written" in text for text in logs)
        assert all("Traceback" not in text for text in logs)
        # Still an installation that works: a new job on every node.
        pair.wait_online(timeout_s=30)
        again = pair.start("true")
        assert pair.wait_job(again["job_id"])["summary"] == {"succeeded": 3}
