"""docs/fleet.md, run as written: its own code blocks, in order, top to bottom.

How a page is run, and the only things replaced on a test machine (hosts, ports,
directories), is in ``tests/e2e/doc_recipes.py``. Two waits stand for a person reading
the output before going on (``FLEET_WAITS``): a node's key is accepted once it is
pending, and jobs start once the nodes are online. If the page changes, this test runs
the new text; if a command in it cannot work, this test fails.

Also here: every job and schedule the pages start names a command of the page's example
whitelist, so that none of them ends ``quorum_failed`` for want of it.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.doc_recipes import (
    DOCS,
    FLEET,
    FLEET_PAGE,
    Walkthrough,
    blocks,
    commands,
    files,
)
from tests.support import wait_until

SIMULATED = "## A simulated fleet"
EDGES = "## A large fleet: edges"
OWN_EDGE = "### An edge of its own: `pushjobs-edge`"


def test_the_fleet_page_runs_as_written(walk: Walkthrough) -> None:
    found = blocks(FLEET_PAGE, FLEET)
    assert [kind for kind, _ in found].count("sh") >= 2, "the section lost its commands"
    assert found[0][0] == "sh", "the directories come before the files written into them"
    for kind, body in found:
        walk.block(kind, body)
    assert [p.name for p in walk.procs] == ["pushjobs-server", "pushjobs-agent"]
    assert all(p.alive() for p in walk.procs)
    assert "web-01" in walk.output("pushjobs node list")
    watched = next(out for line, out in walk.outputs.items() if "--watch" in line)
    assert "complete: 1 succeeded" in watched
    assert "load average" in walk.output("pushjobs job output")
    assert "aborted" in walk.output("pushjobs job abort")
    # The page's last section, on the same fleet.
    a_simulated_fleet_runs_a_job(walk)


def test_the_fleet_page_runs_with_edges_as_its_last_section_says(walk: Walkthrough) -> None:
    # The sections' server.toml lines go in before the server starts, as they say.
    extra = blocks(FLEET_PAGE, EDGES)
    assert [kind for kind, _ in extra] == ["toml", "sh"]
    own = blocks(FLEET_PAGE, OWN_EDGE)
    assert [kind for kind, _ in own] == ["toml", "toml", "sh", "sh", "sh", "sh"]
    assert "server.toml" in own[0][1] and "edge.toml" in own[1][1]
    found = blocks(FLEET_PAGE, FLEET)
    first_server_toml = next(
        i for i, (kind, body) in enumerate(found) if kind == "toml" and "server.toml" in body
    )
    found[first_server_toml + 1 : first_server_toml + 1] = [extra[0], own[0]]
    for kind, body in found:
        walk.block(kind, body)
    assert "complete: 1 succeeded" in next(
        out for line, out in walk.outputs.items() if "--watch" in line
    )
    walk.block(*extra[1])
    status = walk.output("pushjobs server status")
    edges = [line for line in status.splitlines() if line.startswith("edge ")]
    assert len(edges) == 2 and all(" serving, pid " in line for line in edges), status
    # An edge of its own joins the leader it finds on the control topic.
    walk.block(*own[1])
    walk.block(*own[2])
    edge = walk.daemon("pushjobs-edge")
    assert edge.ready_line.startswith("pushjobs-edge edge-b ready"), edge.ready_line
    assert "edges" in json.loads(walk.output("pushjobs server status --json"))
    # Its hello may reach the leader just after that status: looked for until it has.
    wait_until(lambda: "edge-b" in edge_rows(walk), 10, 0.1)
    row = edge_rows(walk)["edge-b"]
    assert row["live"] and row["remote"] and row["pid"] == edge.pid, row
    # The simulated fleet on the same server: its nodes spread over the three edges.
    a_simulated_fleet_runs_a_job(walk)
    # Its share of them: nodes placed on it (its load, reported every interval).
    wait_until(lambda: edge_rows(walk)["edge-b"]["online"] > 0, 10, 0.2)
    # Every edge's share on the control topic: edge-b's own record, the server's for its
    # two; together every node online, web-01 and the 200 simulated (as of their last
    # records: looked for until so).
    walk.block(*own[3])
    wait_until(lambda: sum(r["online"] for r in listed_edges(walk).values()) == 201, 10, 0.2)
    shares = listed_edges(walk)
    assert sorted(shares) == ["edge-b", "server-e0", "server-e1"], shares
    assert [shares[e]["own"] for e in sorted(shares)] == [False, True, True], shares
    assert all(row["serves"].startswith("server:") for row in shares.values()), shares
    records = [json.loads(line) for line in walk.output("pushjobs log tail control").splitlines()]
    assert {r["key"].partition(":")[0] for r in records} >= {"edge", "server"}, records
    # Its own metrics, scraped as the section says: whom it serves, and those nodes.
    walk.block(*own[4])
    scraped = edge_metrics(walk.output("curl"))
    assert scraped["pushjobs_edge_serving"] == [({}, 1.0)], scraped
    ((serves, _),) = scraped["pushjobs_edge_leader_info"]
    assert serves["leader"] == "server" and serves["incarnation"], serves
    ((_, online),) = scraped["pushjobs_edge_nodes_online"]
    ((_, nodes),) = scraped["pushjobs_edge_nodes"]
    assert 0 < online <= nodes <= 200, scraped
    # Drained, as the section says: its simulated nodes move to the server's own edges.
    walk.block(*own[5])
    assert "edge-b: drained" in walk.output("pushjobs server drain edge-b --wait")
    drained = edge_rows(walk)["edge-b"]
    assert drained["draining"] and drained["online"] == 0, drained


def edge_rows(walk: Walkthrough) -> dict[str, dict[str, object]]:
    status = walk.json("pushjobs server status")
    assert isinstance(status, dict), status
    return {str(row["edge"]): row for row in status["edges"]}


def listed_edges(walk: Walkthrough) -> dict[str, dict[str, Any]]:
    """``server list --json``'s edges, by name, as the control topic says now."""
    rows = walk.json("pushjobs server list")
    assert isinstance(rows, list), rows
    return {str(row["name"]): row for row in rows if row["role"] == "edge"}


def edge_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Each sample name's (labels, value) in a scrape's lines, read by Prometheus's parser."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def a_simulated_fleet_runs_a_job(walk: Walkthrough) -> None:
    # 10,000 nodes, scaled down to 200 for a shared 2-core test machine.
    walk.replace.insert(0, ("--nodes 10000", "--nodes 200"))
    found = blocks(FLEET_PAGE, SIMULATED)
    lines = [line for kind, body in found if kind == "sh" for line in commands(body)]
    assert [line.split()[:3] for line in lines] == [
        ["pushjobs", "simulate", "enroll"],
        ["pushjobs", "simulate", "run"],
        ["pushjobs", "job", "start"],
    ]
    walk.run(lines[0])
    assert "200 simulated node keys added" in walk.output("pushjobs simulate enroll")
    walk.run(lines[1])
    simulator = walk.daemon("pushjobs-simulate")
    assert "nodes=200" in simulator.ready_line
    # --fail-rate 0.01: a node may fail, and then the job exits 1 (Exit codes).
    ran = walk.run(lines[2], codes=(0, 1))
    summary = re.search(r"complete: (?:(\d+) failed, )?(\d+) succeeded", ran.stdout)
    assert summary, ran.stdout
    failed, succeeded = int(summary.group(1) or 0), int(summary.group(2))
    assert failed + succeeded == 200 and failed < 20
    assert ran.returncode == (1 if failed else 0)
    simulator.send_line("stats")
    answer = simulator.read_line(10.0)
    while not answer.startswith("{"):  # the "configured" line came first
        answer = simulator.read_line(10.0)
    stats = json.loads(answer)
    # The simulator's own count agrees with the server's: each node ran once.
    counters = stats["counters"]
    assert (counters["jobs_succeeded"], counters.get("jobs_failed", 0)) == (succeeded, failed)
    # As the page says, stats name the server in use.
    assert str(stats["server"]).startswith("tcp://127.0.0.1:"), stats


def example_whitelist() -> dict[str, object]:
    """The ``[commands]`` of the page's whitelist.toml block."""
    for kind, body in blocks(FLEET_PAGE, FLEET):
        for name, text in files(body) if kind == "toml" else []:
            if name.endswith("/whitelist.toml"):
                commands_table: dict[str, object] = tomllib.loads(text)["commands"]
                return commands_table
    raise AssertionError("docs/fleet.md shows no whitelist.toml")


def whitelisted(command: str, entries: dict[str, object]) -> bool:
    """As the agent looks a command up: an exact name, else a pattern matching it whole."""
    return command in entries or any(re.fullmatch(key, command) for key in entries)


def test_every_command_the_pages_run_is_in_the_example_whitelist() -> None:
    entries = example_whitelist()
    started = []
    for page in sorted(DOCS.glob("*.md")):
        for kind, body in blocks(page):
            for line in commands(body) if kind == "sh" else []:
                words = line.split("$(", 1)[-1].split()
                if words[:3] in (["pushjobs", "job", "start"], ["pushjobs", "schedule", "add"]):
                    command, selector = words[3], words[4]
                    # Simulated nodes have no whitelist: they answer any command.
                    if not selector.strip("'").startswith("sim-"):
                        started.append((page.name, command))
    assert len(started) >= 10, started
    missing = [(page, command) for page, command in started if not whitelisted(command, entries)]
    assert not missing, f"run by the pages, not in docs/fleet.md's whitelist: {missing}"
