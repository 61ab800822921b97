"""The fleet simulator against a real server, beside a real agent.

A simulated node must be indistinguishable from an agent to the server: the same job runs
on both, the same liveness rules apply to both (silence, return, restart).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest

from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.api.client import ApiClient
from pushjobs.testbed.childproc import await_ready, spawn
from pushjobs.testbed.simkeys import SimKeys
from tests.e2e.conftest import make_fleet
from tests.e2e.standby import api_of, start_second_server
from tests.support import wait_until

pytestmark = pytest.mark.e2e

SIMS = ["sim-00000", "sim-00001", "sim-00002"]


@pytest.fixture
def mixed(tmp_path: Path):
    fleet = make_fleet(tmp_path, nodes=["node-1"])
    try:
        sim = fleet.sandbox.start_simulator("sim", 3, args=["--run-delay", "0.05"])
        configured = sim.read_line(20)
        assert configured.startswith("pushjobs-simulate configured nodes=3"), configured
        fleet.wait_online(["node-1", *SIMS])
        yield fleet, sim
    finally:
        fleet.close()


def test_a_simulator_sent_to_a_standby_follows_it_to_the_leader(tmp_path: Path) -> None:
    # The standby answers every config request "not the leader" and names the leader: the
    # fleet moves there at once, as an agent does.
    fleet = make_fleet(tmp_path, nodes=[])
    try:
        standby = api_of(start_second_server(fleet.sandbox))
        sim = fleet.sandbox.start_simulator("sim", 3, apis=[standby])
        configured = sim.read_line(30)
        assert configured.startswith("pushjobs-simulate configured nodes=3"), configured
        fleet.wait_online(SIMS)
        stats = control(sim, "stats")
        assert stats["server"] == fleet.sandbox.api
        assert stats["counters"]["config_not_leader"] >= 1
        assert stats["counters"]["server_moves"] == 1
        job = fleet.start("true", SIMS)
        assert fleet.wait_job(job["job_id"])["state"] == "complete"
    finally:
        fleet.close()


def test_a_simulator_moves_to_the_new_leader_when_its_leader_dies(tmp_path: Path) -> None:
    # Both servers listed (``--api`` given twice): the leader killed, its heartbeats stop,
    # and after a few silent offline windows the fleet asks the next server, which has
    # taken the lease by then.
    fleet = make_fleet(tmp_path, nodes=[])
    sandbox = fleet.sandbox
    try:
        standby = api_of(start_second_server(sandbox))
        KeyRegistry(sandbox.registry_path).add_many(
            SimKeys().publics(0, 3), state=KeyState.ACCEPTED
        )
        argv = [sys.executable, "-m", "pushjobs.cli.app", "simulate", "run"]
        argv += ["--api", sandbox.api, "--api", standby, "--nodes", "3"]
        argv += ["--server-key", str(sandbox.keys_dir / "server.pub")]
        sim = sandbox.procs["sim"] = spawn(
            "sim",
            argv,
            sandbox.root / "logs" / "sim.log",
            env=sandbox.env(),
            cwd=sandbox.root,
            stdin=True,
        )
        await_ready(sim, "pushjobs-simulate", 30)
        assert sim.read_line(30).startswith("pushjobs-simulate configured nodes=3")
        fleet.wait_online(SIMS)
        sandbox.kill("server", signal.SIGKILL)

        def moved() -> dict | None:
            stats = control(sim, "stats")
            return stats if stats["server"] == standby else None

        stats = wait_until(moved, 60, 0.5)
        assert stats["counters"]["server_moves"] >= 1
        # The standby took the lease before it answered the fleet: it leads now.
        client = ApiClient.from_files(
            [standby], sandbox.keys_dir / "server.pub", sandbox.keys_dir / "admin.key"
        )
        try:

            def online() -> bool:
                rows = client.call("node.status", {"nodes": SIMS})["nodes"]
                return all(row["online"] for row in rows)

            wait_until(online, 30, 0.2)
        finally:
            client.close()
    finally:
        fleet.close()


def control(sim, line: str) -> dict:
    sim.send_line(line)
    return json.loads(sim.read_line(10))


def test_a_job_runs_on_simulated_and_real_nodes_alike(mixed) -> None:
    fleet, sim = mixed
    job = fleet.start("true", ["node-1", "sim-*"])
    done = fleet.wait_job(job["job_id"])
    assert done["state"] == "complete"
    assert {n: r["state"] for n, r in done["nodes"].items()} == {
        name: "succeeded" for name in ["node-1", *SIMS]
    }
    row = fleet.node("sim-00001")
    assert row["facts"]["simulated"] == "true" and row["key_state"] == "accepted"
    assert row["command_endpoint"] == sim.ready_line.split("command=")[1].split()[0]
    stats = control(sim, "stats")
    assert stats["configured"] == 3 and stats["counters"]["jobs_succeeded"] == 3
    assert stats["drops"] == {}


def test_silent_nodes_go_offline_and_come_back(mixed) -> None:
    fleet, sim = mixed
    assert control(sim, "silence 0 2") == {"ok": True, "silence": 2}
    fleet.wait_offline("sim-00000")
    fleet.wait_offline("sim-00001")
    assert fleet.node("sim-00002")["online"] and fleet.node("node-1")["online"]
    job = fleet.start("true", SIMS, quorum="1")
    done = fleet.wait_job(job["job_id"])
    assert done["nodes"]["sim-00000"]["state"] == "unavailable"
    assert done["nodes"]["sim-00002"]["state"] == "succeeded"
    assert control(sim, "resume 0 2") == {"ok": True, "resume": 2}
    fleet.wait_online(["sim-00000", "sim-00001"])
    info = fleet.call("server.info")
    assert info["transitions"]["offline"] == 2
    assert len(info["gc"]["collections"]) == 3  # the server process runs the gc policy


def test_a_simulated_node_restarted_mid_run_is_crashed(mixed) -> None:
    fleet, _ = mixed
    slow = fleet.sandbox.start_simulator("slow", 1, first=3, args=["--run-delay", "60"])
    slow.read_line(20)
    fleet.wait_online(["sim-00003"])
    before = fleet.node("sim-00003")["incarnation"]
    job = fleet.start("true", ["sim-00003"])
    fleet.wait_node_state(job["job_id"], "sim-00003", "running")
    assert control(slow, "restart 0 1") == {"ok": True, "restart": 1}
    done = fleet.wait_job(job["job_id"])
    assert done["nodes"]["sim-00003"]["state"] == "crashed"
    assert "restarted" in done["nodes"]["sim-00003"]["reason"]
    assert fleet.node("sim-00003")["incarnation"] != before


def test_control_errors_are_answered_not_fatal(mixed) -> None:
    _, sim = mixed
    assert control(sim, "silence 2 9")["error"].startswith("range must lie within")
    assert control(sim, "dance")["ok"] is False
    assert control(sim, "stats")["ok"] is True


def test_enroll_command_is_idempotent(tmp_path: Path) -> None:
    import subprocess
    import sys

    registry = tmp_path / "registry.json"

    def enroll(*extra: str) -> dict:
        out = subprocess.run(
            [
                *(sys.executable, "-m", "pushjobs.cli.app", "simulate", "enroll"),
                *("--nodes", "4", "--registry", str(registry), "--json", *extra),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(out.stdout)

    assert enroll()["added"] == 4
    assert enroll()["already"] == 4  # same keys again: nothing written
    later = enroll("--first", "4", "--pending")
    assert (later["added"], later["state"]) == (4, "pending")
    from keys.registry import KeyRegistry

    states = {e.name: e.state.value for e in KeyRegistry(registry).list()}
    assert states == {f"sim-{i:05d}": "accepted" if i < 4 else "pending" for i in range(8)}
