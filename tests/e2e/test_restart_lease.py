"""A server restarted on its host after kill -9 leads at once (real processes, SQLite).

Its predecessor's lease would last a whole session (5 s by default), during which every
API call was refused "not the leader"; the restarted server sees that the process holding
the lease is gone and takes it before it says it is ready.
"""

from __future__ import annotations

import signal

import pytest

from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e


def test_a_restarted_server_takes_its_dead_predecessors_lease_at_once(fleet: Fleet) -> None:
    fleet.sandbox.kill("server", signal.SIGKILL)
    proc = fleet.sandbox.start_server()
    assert "leader=yes" in proc.ready_line, proc.ready_line
    fleet.reconnect()
    assert fleet.call("server.info")["leader"]
    fleet.wait_online()  # the agents find the new incarnation and register again
    job = fleet.start("true")
    assert fleet.wait_job(job["job_id"])["state"] == "complete"
