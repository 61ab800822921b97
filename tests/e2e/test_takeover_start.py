"""A job started the moment a standby takes over runs on the whole fleet: the new leader
has heard no node yet, the agents are alive and move to it within a few intervals, and the
job waits for them instead of finding them ``unavailable`` (it used to end
``quorum_failed``, or be refused outright for a glob).

Two real servers on one SQLite log, three real agents listing the leader first, as before
a failover; the leader is killed with SIGKILL.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs.api.client import ApiClient
from pushjobs.testbed.sandbox import Sandbox
from tests.e2e.conftest import WHITELIST, Fleet
from tests.e2e.standby import api_of, start_second_server
from tests.support import wait_until

pytestmark = pytest.mark.e2e


class Failover(Fleet):
    """A fleet of two servers; after ``kill_leader`` its client asks the new leader."""

    def __init__(self, sandbox: Sandbox, standby_api: str) -> None:
        super().__init__(sandbox)
        self.standby_api = standby_api

    def kill_leader(self) -> None:
        """SIGKILL the leader; return once the standby says it leads, not a moment later."""
        self.sandbox.kill("server", signal.SIGKILL)
        self.reconnect()
        self._client = ApiClient.from_files(
            self.standby_api,
            self.root / "keys" / "server.pub",
            self.root / "keys" / f"{self.sandbox.user}.key",
            timeout_s=10.0,
        )
        wait_until(lambda: self.call("server.info")["leader"], timeout_s=30.0, step_s=0.02)

    def stamps(self, name: str) -> list[str]:
        path = self.root / f"stamps-{name}"
        return path.read_text().split() if path.exists() else []


@contextlib.contextmanager
def failover_fleet(tmp_path: Path, nodes: list[str] | None = None) -> Iterator[Failover]:
    extra = {} if nodes is None else {"nodes": nodes}
    sandbox = Sandbox(tmp_path / "fleet", whitelist=WHITELIST, **extra).prepare()
    try:
        sandbox.start_server()
        standby = start_second_server(sandbox)
        assert "leader=no" in standby.ready_line, standby.ready_line
        for name in sandbox.nodes:
            sandbox.write_agent_config(name, servers=[sandbox.api, api_of(standby)])
        sandbox.start_agents()
        fleet = Failover(sandbox, api_of(standby))
        try:
            fleet.wait_online()
            yield fleet
        finally:
            fleet.reconnect()
    finally:
        sandbox.stop()


def run_right_after_takeover(fleet: Failover, selectors: list[str]) -> None:
    fleet.kill_leader()
    online_at_start = fleet.call("server.info")["nodes_online"]
    job = fleet.start("stamp", selectors)
    done = fleet.wait_job(job["job_id"], timeout_s=60)
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 3}, (
        done,
        f"{online_at_start} nodes online on the new leader when the job started",
    )
    for name in fleet.sandbox.nodes:
        assert fleet.stamps(name).count(job["job_id"]) == 1, (name, fleet.stamps(name))


def test_a_job_started_as_the_standby_takes_over_runs_once_on_every_node(
    tmp_path: Path,
) -> None:
    with failover_fleet(tmp_path) as fleet:
        run_right_after_takeover(fleet, fleet.sandbox.nodes)


def test_a_glob_started_as_the_standby_takes_over_means_the_fleet_known_before(
    tmp_path: Path,
) -> None:
    with failover_fleet(tmp_path) as fleet:
        before = fleet.start("true")  # the fleet at work: its nodes are in the log
        assert fleet.wait_job(before["job_id"])["summary"] == {"succeeded": 3}
        run_right_after_takeover(fleet, ["node-*"])
