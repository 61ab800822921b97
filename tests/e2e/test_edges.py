"""The leader and its edges, end to end: a real server with edge processes, real agents.

Each test starts a server with ``[server] edges = 2`` and real agents; the edges are the
server's own child processes. What is checked is what an operator is promised: jobs run
on every node once, nodes spread over the edges by their names, and losing an edge in
the middle of a job crashes nobody.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Fleet, make_fleet
from tests.support import wait_until

NODES = [f"node-{i}" for i in range(1, 7)]


@pytest.fixture
def edged(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path, nodes=NODES, server_extra={"server": {"edges": 2}})
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def _edges(fleet: Fleet) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = fleet.call("server.info")["edges"]
    return rows


def _stamps(fleet: Fleet, node: str) -> list[str]:
    path = fleet.root / f"stamps-{node}"
    return path.read_text().split() if path.exists() else []


def test_a_job_runs_once_on_every_node_through_the_edges(edged: Fleet) -> None:
    edges = _edges(edged)
    assert [e["live"] for e in edges] == [True, True]
    # Every node is online through an edge: the edges' own counts add up to the fleet.
    wait_until(lambda: sum(e["online"] for e in _edges(edged)) == len(NODES), 10, 0.05)
    job = edged.start("stamp")
    done = edged.wait_job(job["job_id"])
    assert done["state"] == "complete"
    assert done["summary"] == {"succeeded": len(NODES)}
    for node in NODES:
        assert _stamps(edged, node) == [job["job_id"]]


def test_an_edge_killed_mid_job_crashes_nobody(edged: Fleet) -> None:
    edges = _edges(edged)
    victim = max(edges, key=lambda e: e["online"])
    assert victim["online"] > 0
    job = edged.start("count-slowly")
    edged.wait_node_state(job["job_id"], NODES[0], "running")
    os.kill(victim["pid"], signal.SIGKILL)
    done = edged.wait_job(job["job_id"], timeout_s=60)
    assert done["state"] == "complete", done
    assert done["summary"] == {"succeeded": len(NODES)}
    for node in NODES:
        assert (edged.root / f"count-{node}").read_text().split() == ["x"]
    # The edge was started again; every node is online (some through the other edge).
    wait_until(lambda: all(e["live"] for e in _edges(edged)), 20, 0.05)
    edged.wait_online()
    again = edged.start("stamp")
    assert edged.wait_job(again["job_id"])["summary"] == {"succeeded": len(NODES)}
