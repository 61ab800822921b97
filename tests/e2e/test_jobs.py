"""The job lifecycle end to end: a real server, three real agents, real commands."""

from __future__ import annotations

import os

import pytest

from keys.identity import generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.errors import ApiError, NotFound
from tests.e2e.conftest import Fleet
from tests.support import wait_until


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_all_nodes_succeed_with_output(shared_fleet: Fleet) -> None:
    job = shared_fleet.start("hello", capture=True)
    assert job["state"] == "voting"
    done = shared_fleet.wait_job(job["job_id"])
    assert done["state"] == "complete"
    assert done["summary"] == {"succeeded": 3}
    for name in shared_fleet.sandbox.nodes:
        assert done["nodes"][name]["exit_status"] == 0
        out = shared_fleet.call("job.output", {"job_id": job["job_id"], "node": name})
        assert out["stdout"].strip() == f"hello from {name}, job {job['job_id']}"


def test_one_node_fails_with_exit_status_and_output(shared_fleet: Fleet) -> None:
    job = shared_fleet.start("fail-on-2")
    done = shared_fleet.wait_job(job["job_id"])
    assert done["state"] == "complete"
    assert done["summary"] == {"failed": 1, "succeeded": 2}
    failed = done["nodes"]["node-2"]
    assert failed["state"] == "failed"
    assert failed["exit_status"] == 3
    # A failure's output comes back even without --capture.
    out = shared_fleet.call("job.output", {"job_id": job["job_id"], "node": "node-2"})
    assert out["stderr"].strip() == "boom"


def test_command_not_whitelisted_is_nacked(shared_fleet: Fleet) -> None:
    job = shared_fleet.start("rm-everything")
    done = shared_fleet.wait_job(job["job_id"])
    assert done["state"] == "quorum_failed"
    for node in done["nodes"].values():
        assert node["state"] == "nacked"
        assert "not whitelisted" in node["reason"]


def test_quorum_as_percent_runs_on_the_ready_nodes(shared_fleet: Fleet) -> None:
    # A registered node whose agent never came: a valid target, unavailable. Taken out
    # again: the fleet is shared.
    registry = KeyRegistry(shared_fleet.sandbox.registry_path)
    registry.add(generate("absent", "node").public, state=KeyState.ACCEPTED)
    try:
        job = shared_fleet.start("true", [*shared_fleet.sandbox.nodes, "absent"], quorum="75%")
        done = shared_fleet.wait_job(job["job_id"])
    finally:
        registry.delete(["absent"])
    assert done["state"] == "complete"
    assert done["summary"] == {"succeeded": 3, "unavailable": 1}


def test_run_timeout_kills_the_command_on_the_node(shared_fleet: Fleet) -> None:
    root = shared_fleet.root
    job = shared_fleet.start("sleeper", ["node-1"], timeout_s=1.0)
    pidfile = root / "pid-node-1"
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10)
    pid = int(pidfile.read_text())
    done = shared_fleet.wait_job(job["job_id"])
    assert done["state"] == "timed_out"
    assert done["nodes"]["node-1"]["state"] == "timed_out"
    wait_until(lambda: _pid_gone(pid), 10)
    pidfile.unlink()


def test_abort_mid_run_kills_the_command(shared_fleet: Fleet) -> None:
    root = shared_fleet.root
    job = shared_fleet.start("sleeper", ["node-3"])
    pidfile = root / "pid-node-3"
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 10)
    pid = int(pidfile.read_text())
    shared_fleet.call("job.abort", {"job_id": job["job_id"]})
    done = shared_fleet.wait_job(job["job_id"])
    assert done["state"] == "aborted"
    assert done["nodes"]["node-3"]["state"] == "aborted"
    wait_until(lambda: _pid_gone(pid), 10)
    pidfile.unlink()


def test_watch_returns_when_the_job_changes(shared_fleet: Fleet) -> None:
    job = shared_fleet.start("true", ["node-1"])
    seen = job["version"]
    states = [job["state"]]
    while states[-1] not in ("complete", "quorum_failed"):
        result = shared_fleet.call(
            "job.watch", {"job_id": job["job_id"], "version": seen, "wait_s": 5.0}
        )
        assert result["job"]["version"] > seen  # it answered because something changed
        seen = result["job"]["version"]
        states.append(result["job"]["state"])
    assert states[-1] == "complete"


def test_job_list_filters_and_pages(shared_fleet: Fleet) -> None:
    ids = []
    for _ in range(3):  # one after the other: a node runs one job at a time
        ids.append(shared_fleet.start("true", ["node-1"])["job_id"])
        shared_fleet.wait_job(ids[-1])
    listing = shared_fleet.call("job.list", {"state": "complete", "limit": 2})
    assert len(listing["jobs"]) == 2
    assert listing["total"] >= 3
    assert all(job["state"] == "complete" for job in listing["jobs"])
    newest = [job["job_id"] for job in listing["jobs"]]
    assert newest == [ids[2], ids[1]]


def test_bad_requests_get_clear_errors(shared_fleet: Fleet) -> None:
    with pytest.raises(NotFound):
        shared_fleet.call("job.status", {"job_id": "nope"})
    with pytest.raises(ApiError, match="quorum"):
        shared_fleet.start("true", quorum="lots")
    with pytest.raises(ApiError, match="no node matches"):
        shared_fleet.start("true", ["web-*"])
    with pytest.raises(NotFound):
        shared_fleet.call("node.status", {"nodes": ["ghost"]})


def test_stopped_agent_is_unavailable(fleet: Fleet) -> None:
    fleet.sandbox.kill("node-2", 15)
    fleet.wait_offline("node-2")
    job = fleet.start("true", quorum="2")
    done = fleet.wait_job(job["job_id"])
    assert done["state"] == "complete"
    assert done["nodes"]["node-2"]["state"] == "unavailable"
    assert done["summary"] == {"succeeded": 2, "unavailable": 1}


def test_quorum_failed_aborts_the_ready_nodes(fleet: Fleet) -> None:
    fleet.sandbox.kill("node-3", 15)
    fleet.wait_offline("node-3")
    job = fleet.start("hello")  # quorum 100%: 2 of 3 cannot do
    done = fleet.wait_job(job["job_id"])
    assert done["state"] == "quorum_failed"
    assert done["summary"] == {"unavailable": 1, "was_ready": 2}
    # The agents were told to abort: they take the next job at once.
    job = fleet.start("true", ["node-1", "node-2"])
    assert fleet.wait_job(job["job_id"])["state"] == "complete"


def test_output_of_a_node_that_was_not_captured_is_not_found(shared_fleet: Fleet) -> None:
    job = shared_fleet.start("true", ["node-1"])
    shared_fleet.wait_job(job["job_id"])
    with pytest.raises(NotFound):
        shared_fleet.call("job.output", {"job_id": job["job_id"], "node": "node-1"})


def test_node_list_shows_every_node_online(shared_fleet: Fleet) -> None:
    rows = shared_fleet.call("node.list")["nodes"]
    by_name = {row["name"]: row for row in rows}
    assert set(by_name) == set(shared_fleet.sandbox.nodes)
    assert all(row["online"] and row["key_state"] == "accepted" for row in rows)
    assert all(row["command_endpoint"].startswith("tcp://127.0.0.1:") for row in rows)
    assert by_name["node-1"]["tags"] == ["sandbox"]
