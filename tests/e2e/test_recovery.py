"""Crashes end to end: agents killed or restarted mid-run, the server killed and restarted."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from tests.e2e.conftest import Fleet, online_fleet
from tests.support import wait_until


def _kill_leftover(pidfile: Path) -> None:
    """Belt and braces: whatever a failed test left of a job is killed (the agent's reaper
    kills it too, see test_lifecycle_faults)."""
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def test_agent_killed_mid_run_is_crashed(fleet: Fleet) -> None:
    job = fleet.start("sleeper", ["node-1", "node-2"])
    fleet.wait_node_state(job["job_id"], "node-1", "running")
    fleet.sandbox.kill("node-1", signal.SIGKILL)
    try:
        fleet.wait_node_state(job["job_id"], "node-1", "crashed")
        status = fleet.status(job["job_id"])
        assert status["nodes"]["node-1"]["reason"] == "node went offline"
        assert status["nodes"]["node-2"]["state"] == "running"
        fleet.call("job.abort", {"job_id": job["job_id"]})
        assert fleet.wait_job(job["job_id"])["state"] == "aborted"
    finally:
        _kill_leftover(fleet.root / "pid-node-1")


def test_agent_restarted_mid_run_on_a_new_port_is_crashed(fleet: Fleet) -> None:
    job = fleet.start("sleeper", ["node-1"])
    fleet.wait_node_state(job["job_id"], "node-1", "running")
    fleet.sandbox.kill("node-1", signal.SIGKILL)
    try:
        # Its command port is chosen at start: a new endpoint, admitted once the old agent
        # has missed a heartbeat (one agent per node); whether the node was declared
        # offline first depends on how fast the new agent starts.
        fleet.sandbox.start_agent("node-1")
        done = fleet.wait_job(job["job_id"])
        assert done["state"] == "complete"
        assert done["nodes"]["node-1"]["state"] == "crashed"
        assert done["nodes"]["node-1"]["reason"] in (
            "node went offline",
            "node restarted (new incarnation)",
        )
        fleet.wait_online(["node-1"])
    finally:
        _kill_leftover(fleet.root / "pid-node-1")


def test_server_killed_mid_job_finishes_it_after_restart_without_running_twice(
    fleet: Fleet,
) -> None:
    job = fleet.start("count-slowly")
    for name in fleet.sandbox.nodes:
        fleet.wait_node_state(job["job_id"], name, "running")
    fleet.sandbox.kill("server", signal.SIGKILL)
    fleet.reconnect()
    fleet.sandbox.start_server()
    done = fleet.wait_job(job["job_id"], timeout_s=40)
    assert done["state"] == "complete"
    assert done["summary"] == {"succeeded": 3}
    for name in fleet.sandbox.nodes:
        assert (fleet.root / f"count-{name}").read_text() == "x\n"
    # The new leader serves new jobs too.
    again = fleet.start("true")
    assert fleet.wait_job(again["job_id"])["state"] == "complete"


def test_server_killed_while_voting_resends_the_commit(fleet: Fleet) -> None:
    # Killed right after the start: the votes may or may not be in the log.
    job = fleet.start("count-slowly", ["node-1", "node-2"])
    fleet.sandbox.kill("server", signal.SIGKILL)
    fleet.reconnect()
    fleet.sandbox.start_server()
    done = fleet.wait_job(job["job_id"], timeout_s=40)
    # Votes lost with the server are asked for again: the job completes, each node once.
    assert done["state"] == "complete", done
    for name in ("node-1", "node-2"):
        assert (fleet.root / f"count-{name}").read_text() == "x\n"


def test_agent_restarted_mid_run_on_its_own_port_is_crashed_as_restarted(tmp_path: Path) -> None:
    # Back before the server counts it offline: an offline window of 5 s (25 missed
    # heartbeats of 0.2 s) rather than the sandbox's 0.6 s, which an agent's own start
    # misses on a loaded machine (then it is crashed as offline, not as restarted).
    with online_fleet(tmp_path, offline_threshold=25) as fleet:
        _restarted_on_its_own_port(fleet)


def _restarted_on_its_own_port(fleet: Fleet) -> None:
    endpoint = fleet.sandbox.pin_agent_port("node-1")
    before = fleet.node("node-1")["incarnation"]
    fleet.sandbox.kill("node-1", signal.SIGTERM)
    fleet.sandbox.start_agent("node-1")  # on the pinned port from now on
    # The same endpoint as before: only a new incarnation says the new agent is the one heard.
    wait_until(
        lambda: (
            (row := fleet.node("node-1"))["online"]
            and row["incarnation"] != before
            and row["command_endpoint"] == endpoint
        ),
        timeout_s=20,
    )
    job = fleet.start("sleeper", ["node-1"])
    fleet.wait_node_state(job["job_id"], "node-1", "running")
    fleet.sandbox.kill("node-1", signal.SIGKILL)
    try:
        fleet.sandbox.start_agent("node-1")  # back before the offline threshold passes
        done = fleet.wait_job(job["job_id"])
        assert done["state"] == "complete"
        assert done["nodes"]["node-1"]["state"] == "crashed"
        assert "restarted" in done["nodes"]["node-1"]["reason"]
    finally:
        _kill_leftover(fleet.root / "pid-node-1")
