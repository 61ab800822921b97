"""An edge of its own (``pushjobs-edge``), end to end: it finds the leader on the control
topic, serves the share of the fleet rendezvous hashing gives it, and its death or the
leader's costs no job step. Real processes on 127.0.0.1, the SQLite log (the edge on the
leader's host, as SQLite requires; Kafka and other hosts are the next step)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pushjobs.testbed.sandbox import Sandbox
from server.core import rendezvous
from tests.e2e.conftest import WHITELIST, Fleet, run_cli
from tests.support import wait_until

NODES = [f"node-{i}" for i in range(1, 7)]
FAR = "far-1"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    extra = {"server": {"edges": 1, "edge_bind": "tcp://127.0.0.1:0"}}
    sandbox = Sandbox(tmp_path / "fleet", nodes=NODES, whitelist=WHITELIST, server_extra=extra)
    fleet = Fleet(sandbox.prepare())
    try:
        sandbox.start_server()
        # The edge joins before the nodes discover, so they are placed over both edges.
        sandbox.start_edge(FAR)
        sandbox.start_agents()
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def edges(fleet: Fleet) -> dict[str, dict[str, Any]]:
    return {row["edge"]: row for row in fleet.call("server.info")["edges"]}


def on_far() -> list[str]:
    return [n for n in NODES if rendezvous.pick(n, ["server-e0", FAR]) == FAR]


def counts(fleet: Fleet) -> dict[str, list[str]]:
    out = {}
    for node in NODES:
        path = fleet.root / f"count-{node}"
        out[node] = path.read_text().split() if path.exists() else []
    return out


def test_it_joins_the_leader_and_serves_its_share(fleet: Fleet) -> None:
    assert on_far(), "the names must put a node on the edge of its own"
    far = edges(fleet)[FAR]
    assert far["live"] and far["remote"] and far["pid"] == fleet.sandbox.procs[FAR].pid
    wait_until(lambda: edges(fleet)[FAR]["online"] == len(on_far()), 10, 0.05)
    job = fleet.start("stamp")
    done = fleet.wait_job(job["job_id"])
    assert done["summary"] == {"succeeded": len(NODES)}, done
    # Its own record on the control topic: whom it serves, its share.
    leader = next(s for s in fleet.call("server.list")["servers"] if s["role"] == "leader")
    serving = f"{leader['name']}:{leader['incarnation']}"

    def listed() -> dict[str, dict[str, Any]]:
        rows = {s["name"]: s for s in fleet.call("server.list")["servers"] if s["role"] == "edge"}
        return rows if sum(row["nodes"] for row in rows.values()) == len(NODES) else {}

    # Every node's share is on the control topic: the edge's own record, and the leader's
    # record for the edge it started.
    wait_until(lambda: listed().get(FAR, {}).get("nodes") == len(on_far()), 10, 0.1)
    rows = listed()
    far_row, own = rows[FAR], rows["server-e0"]
    assert far_row["serves"] == own["serves"] == serving and not far_row["own"] and own["own"]
    assert own["nodes"] == len(NODES) - len(on_far()) and own["rate"] > 0, own
    # Stopped cleanly, it says goodbye: no longer listed; the server's own edge stays.
    fleet.sandbox.kill(FAR, signal.SIGTERM)
    assert fleet.sandbox.procs[FAR].popen.returncode == 0
    wait_until(
        lambda: (
            [s["name"] for s in fleet.call("server.list")["servers"] if s["role"] == "edge"]
            == ["server-e0"]
        ),
        10,
        0.1,
    )


def test_killed_mid_job_it_costs_no_job_step(fleet: Fleet) -> None:
    before = fleet.call("server.info")["transitions"]["offline"]
    job = fleet.start("count-slowly")
    for node in NODES:
        fleet.wait_node_state(job["job_id"], node, "running")
    fleet.sandbox.kill(FAR)
    done = fleet.wait_job(job["job_id"], timeout_s=60)
    assert done["state"] == "complete", done
    assert counts(fleet) == {node: ["x"] for node in NODES}
    # Not started again by the leader (not its process): listed as lost; its nodes moved,
    # held online while they did.
    wait_until(lambda: not edges(fleet)[FAR]["live"], 10, 0.05)
    fleet.wait_online()
    assert fleet.call("server.info")["transitions"]["offline"] == before
    again = fleet.start("stamp")
    assert fleet.wait_job(again["job_id"])["summary"] == {"succeeded": len(NODES)}
    # Started again by its operator, it joins again under its name.
    fleet.sandbox.start_edge(FAR)
    wait_until(lambda: edges(fleet)[FAR]["live"], 10, 0.05)


def test_it_follows_the_leader_through_a_restart(fleet: Fleet) -> None:
    pid = fleet.sandbox.procs[FAR].pid
    fleet.sandbox.kill("server", signal.SIGKILL)
    fleet.reconnect()
    fleet.sandbox.start_server()
    # The same process: it heard the old leader fall silent, read the control topic and
    # joined the new one.
    wait_until(lambda: FAR in edges(fleet) and edges(fleet)[FAR]["live"], 30, 0.1)
    assert edges(fleet)[FAR]["pid"] == pid
    joined = fleet.sandbox.procs[FAR].log_text().count("joining leader server")
    assert joined >= 2
    fleet.wait_online()
    job = fleet.start("stamp")
    assert fleet.wait_job(job["job_id"])["summary"] == {"succeeded": len(NODES)}


def run_edge(config: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "server.edge.standalone", "--config", str(config)]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)


def test_on_sqlite_without_the_leaders_log_file_it_says_where_edges_run(tmp_path: Path) -> None:
    config = tmp_path / "edge.toml"
    config.write_text(
        f'[edge]\nname = "far-2"\n[log]\nbackend = "sqlite"\npath = "{tmp_path / "none.db"}"\n'
    )
    done = run_edge(config)
    assert done.returncode == 9, done
    assert "on SQLite an edge runs on its leader's host" in done.stderr
    assert not (tmp_path / "none.db").exists()  # an edge never creates a log


def test_a_nameless_edge_is_refused_with_exit_9(tmp_path: Path) -> None:
    config = tmp_path / "edge.toml"
    config.write_text("[edge]\n")
    done = run_edge(config)
    assert done.returncode == 9 and "edge.name" in done.stderr, done


def test_drained_mid_job_its_nodes_move_and_every_node_runs_once(fleet: Fleet) -> None:
    before = fleet.call("server.info")["transitions"]["offline"]
    wait_until(lambda: edges(fleet)[FAR]["online"] == len(on_far()), 10, 0.05)
    job = fleet.start("count-slowly")
    for node in NODES:
        fleet.wait_node_state(job["job_id"], node, "running")
    code, out, err = run_cli(
        fleet.sandbox.client_config_path, "server", "drain", FAR, "--wait", "--timeout", "30"
    )
    assert code == 0 and f"edge {FAR}: drained" in out, (out, err)
    done = fleet.wait_job(job["job_id"], timeout_s=60)
    assert done["state"] == "complete", done
    assert counts(fleet) == {node: ["x"] for node in NODES}
    row = edges(fleet)[FAR]
    assert row["live"] and row["draining"] and row["online"] == 0, row
    assert row["counters"]["moved_away"] >= len(on_far()), row  # each was asked to move
    assert fleet.call("server.info")["transitions"]["offline"] == before
    again = fleet.start("stamp")
    assert fleet.wait_job(again["job_id"])["summary"] == {"succeeded": len(NODES)}
    # Undone: nodes may be placed on it again (when they next discover).
    code, out, _ = run_cli(fleet.sandbox.client_config_path, "server", "drain", FAR, "--undo")
    assert code == 0 and not edges(fleet)[FAR]["draining"], out


def test_draining_an_edge_unknown_is_exit_8(fleet: Fleet) -> None:
    code, _, err = run_cli(fleet.sandbox.client_config_path, "server", "drain", "nowhere")
    assert code == 8 and "no edge 'nowhere' here" in err, err
