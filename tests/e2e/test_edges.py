"""The leader and its edges, end to end: a real server with edge processes, real agents.

Each test starts a server with ``[server] edges = 2`` and real agents; the edges are the
server's own child processes. What is checked is what an operator is promised: jobs run
on every node once, nodes spread over the edges by their names, and losing an edge in
the middle of a job crashes nobody.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pushjobs.testbed.sandbox import free_port
from tests.e2e.conftest import Fleet, make_fleet, run_cli
from tests.e2e.test_server_stall import _pause as pause_server
from tests.e2e.test_server_status import sample, scrape
from tests.support import wait_until

NODES = [f"node-{i}" for i in range(1, 7)]


@pytest.fixture
def edged(tmp_path: Path) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path, nodes=NODES, server_extra={"server": {"edges": 2}})
    try:
        fleet.wait_online()
        # The edges report their counts every half interval: the tests pick a victim by
        # them (CI once found every edge still at 0, right after the leader's count).
        wait_until(lambda: sum(e["online"] for e in _edges(fleet)) == len(NODES), 10, 0.05)
        yield fleet
    finally:
        fleet.close()


def _edges(fleet: Fleet) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = fleet.call("server.info")["edges"]
    return rows


def _replaced(fleet: Fleet, victim: dict[str, Any]) -> None:
    """Wait until the leader has started another process for ``victim``'s edge, live."""
    wait_until(
        lambda: any(
            e["live"] and e["pid"] != victim["pid"]
            for e in _edges(fleet)
            if e["edge"] == victim["edge"]
        ),
        20,
        0.05,
    )


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


def _offline_transitions(fleet: Fleet) -> int:
    count: int = fleet.call("server.info")["transitions"]["offline"]
    return count


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_an_edge_stopped_past_its_window_is_replaced_and_crashes_nobody(edged: Fleet) -> None:
    victim = max(_edges(edged), key=lambda e: e["online"])
    before = _offline_transitions(edged)
    job = edged.start("count-slowly")
    edged.wait_node_state(job["job_id"], NODES[0], "running")
    os.kill(victim["pid"], signal.SIGSTOP)
    try:
        # The leader finds it silent, kills it and starts another: a new pid, live.
        _replaced(edged, victim)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim["pid"], signal.SIGCONT)
    done = edged.wait_job(job["job_id"], timeout_s=60)
    assert done["summary"] == {"succeeded": len(NODES)}, done
    for node in NODES:
        assert (edged.root / f"count-{node}").read_text().split() == ["x"]
    edged.wait_online()
    # Held while they moved: no node was ever offline.
    assert _offline_transitions(edged) == before


def test_an_edge_paused_briefly_judges_nobody(edged: Fleet) -> None:
    victim = max(_edges(edged), key=lambda e: e["online"])
    before = _offline_transitions(edged)
    os.kill(victim["pid"], signal.SIGSTOP)
    # Past the nodes' offline window (3 x 0.2 s), short of the edge's loss (3 intervals
    # of silence): the edge resumes, and its own stall is no node's silence.
    time.sleep(0.5)  # held fault, not a wait (noqa: not a wait)
    os.kill(victim["pid"], signal.SIGCONT)
    job = edged.start("stamp")
    assert edged.wait_job(job["job_id"])["summary"] == {"succeeded": len(NODES)}
    assert _offline_transitions(edged) == before
    assert [e["pid"] for e in _edges(edged) if e["edge"] == victim["edge"]] == [victim["pid"]]


@pytest.mark.parametrize("phase", ["voting", "running"])
def test_the_leader_killed_mid_job_finishes_it_after_restart_with_new_edges(
    edged: Fleet, phase: str
) -> None:
    old_edges = [e["pid"] for e in _edges(edged)]
    job = edged.start("count-slowly")
    if phase == "running":
        for node in NODES:
            edged.wait_node_state(job["job_id"], node, "running")
    edged.sandbox.kill("server", signal.SIGKILL)
    # The edges see their leader gone and stop.
    wait_until(lambda: all(_gone(pid) for pid in old_edges), 10, 0.05)
    edged.reconnect()
    edged.sandbox.start_server()
    done = edged.wait_job(job["job_id"], timeout_s=60)
    assert done["state"] == "complete", done
    for node in NODES:
        assert (edged.root / f"count-{node}").read_text().split() == ["x"]
    assert all(e["live"] and e["pid"] not in old_edges for e in _edges(edged))


def test_status_and_metrics_show_each_edge(edged: Fleet) -> None:
    wait_until(lambda: sum(e["online"] for e in _edges(edged)) == len(NODES), 10, 0.05)
    code, out, err = run_cli(edged.sandbox.client_config_path, "server", "status")
    assert code == 0, err
    edge_lines = [line for line in out.splitlines() if line.startswith("edge ")]
    assert len(edge_lines) == 2
    assert all(" serving, pid " in line for line in edge_lines)
    shown = sum(int(line.split(" of ")[0].rsplit(" ", 1)[1]) for line in edge_lines)
    assert shown == len(NODES)
    # Metrics are published every few seconds: the scrape catches up with the API.
    edges = _edges(edged)

    def scraped_online() -> bool:
        families = scrape(edged)
        return all(
            sample(families, "pushjobs_edge_live", edge=e["edge"]) == 1.0
            and sample(families, "pushjobs_edge_nodes_online", edge=e["edge"]) == e["online"]
            for e in edges
        )

    wait_until(scraped_online, 20, 0.2)


def test_a_revoked_node_is_cut_off_by_its_edge_and_comes_back_when_accepted(edged: Fleet) -> None:
    node = NODES[0]
    job = edged.start("sleeper", [node, NODES[1]])
    edged.wait_node_state(job["job_id"], node, "running")
    edged.call("key.reject", {"names": [node]})
    edged.wait_node_state(job["job_id"], node, "crashed", timeout_s=10)
    assert edged.status(job["job_id"])["nodes"][node]["reason"] == "key revoked"
    edged.wait_offline(node)
    # Its edge aborted its job: the command's process is gone.
    pid = int((edged.root / f"pid-{node}").read_text())
    wait_until(lambda: _gone(pid), 10, 0.05)
    edged.call("job.abort", {"job_id": job["job_id"]})
    edged.wait_job(job["job_id"])
    # Accepted again: its edge tells it to rediscover, and it serves again.
    edged.call("key.accept", {"names": [node]})
    edged.wait_online([node])
    again = edged.start("stamp", [node])
    assert edged.wait_job(again["job_id"])["summary"] == {"succeeded": 1}


def _free_run(count: int) -> int:
    """A port p such that p .. p + count - 1 are free on 127.0.0.1 now."""
    for _ in range(50):
        base = free_port()
        if base + count >= 65536:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise AssertionError("no run of free ports")


def test_edges_bind_the_ports_the_config_gives_them(tmp_path: Path) -> None:
    base = _free_run(4)
    extra = {"server": {"edges": 2, "edge_port_base": base}}
    fleet = make_fleet(tmp_path, nodes=NODES[:2], server_extra=extra)
    try:
        fleet.wait_online()
        ends = {e["edge"]: e["endpoints"] for e in _edges(fleet)}
        assert ends == {
            "server-e0": {
                "heartbeat": f"tcp://127.0.0.1:{base}",
                "reply": f"tcp://127.0.0.1:{base + 1}",
            },
            "server-e1": {
                "heartbeat": f"tcp://127.0.0.1:{base + 2}",
                "reply": f"tcp://127.0.0.1:{base + 3}",
            },
        }
    finally:
        fleet.close()


# "idle" (7 s) is a drill, bench/drills.py: the suite pauses the leader mid-job.
@pytest.mark.parametrize("point", ["running", pytest.param("idle", marks=pytest.mark.drill)])
def test_a_paused_leader_crashes_nobody_through_its_edges(edged: Fleet, point: str) -> None:
    # The edges go on reading while the leader is stopped; its nodes, hearing no server
    # heartbeat, fall silent: the edges judge nobody on that, nor does the leader.
    offline_before = _offline_transitions(edged)
    window_s = 0.2 * 3
    if point == "running":
        job = edged.start("count-slowly")
        for node in NODES:
            edged.wait_node_state(job["job_id"], node, "running")
        for _ in range(2):
            pause_server(edged, 6 * window_s)
        done = edged.wait_job(job["job_id"])
        assert done["summary"] == {"succeeded": len(NODES)}, done
        for node in NODES:
            assert (edged.root / f"count-{node}").read_text().split() == ["x"]
    else:
        for _ in range(2):
            pause_server(edged, 6 * window_s)
            wait_until(lambda: edged.call("server.info")["leader"], 10)
    assert _offline_transitions(edged) == offline_before, "a node went offline"
    later = edged.start("true")
    assert edged.wait_job(later["job_id"])["summary"] == {"succeeded": len(NODES)}


def test_commands_an_edge_took_down_with_it_are_sent_again_through_the_next(
    edged: Fleet,
) -> None:
    victim = max(_edges(edged), key=lambda e: e["online"])
    os.kill(victim["pid"], signal.SIGSTOP)  # the job's commits go to it, and die with it
    try:
        job = edged.start("stamp")
        _replaced(edged, victim)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim["pid"], signal.SIGCONT)
    done = edged.wait_job(job["job_id"], timeout_s=60)
    assert done["summary"] == {"succeeded": len(NODES)}, done
    for node in NODES:
        assert _stamps(edged, node) == [job["job_id"]]


def test_a_second_agent_with_a_nodes_key_is_refused_through_edges_too(edged: Fleet) -> None:
    node = NODES[0]
    first = edged.node(node)
    time.sleep(0.5)  # the node online for a while: its edge reports nothing more (noqa: not a wait)
    edged.sandbox.start_agent(node, process=f"{node}-again")
    log = edged.root / "logs" / f"{node}-again.log"
    wait_until(lambda: "is refused until that one goes silent" in log.read_text(), 15, 0.05)
    row = edged.node(node)
    assert row["online"] and row["incarnation"] == first["incarnation"]
    edged.sandbox.kill(f"{node}-again", signal.SIGTERM)
