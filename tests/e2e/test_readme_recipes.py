"""The README's other recipes, run as written: "Several servers", "Keys and the registry",
"The ordered log", "A simulated fleet", "Health and metrics" and "Fleet reports".

Each section's own code blocks run in order (``tests/e2e/readme_blocks.py``: how, and
the hosts, ports and directories replaced on a test machine). The sections that need a
server start from "Running a real fleet" (``set_up_fleet``), as a reader would; three that
only look at the fleet or add to it share one. What a test does beyond the README's
lines, it says: the faults a recipe is about (the leader killed), a smaller fleet, and the
lines skipped, each with its reason.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import stat
import urllib.request
from functools import partial
from pathlib import Path

from pushjobs.testbed.childproc import Proc, spawn, stop_all
from pushjobs.testbed.sandbox import ready_fields
from tests.e2e.readme_blocks import (
    FLEET,
    README,
    Walkthrough,
    blocks,
    commands,
    section,
    set_up_fleet,
)
from tests.support import wait_until

SEVERAL = "## Several servers"
KEYS = "## Keys and the registry"
SIMULATED = "## A simulated fleet"
HEALTH = "## Health and metrics"
REPORTS = "## Fleet reports"
LOG = "## The ordered log"


def fleet_line(prefix: str) -> str:
    """The first command of "Running a real fleet" that starts with ``prefix``."""
    found = (c for _, body in blocks(README.read_text(), FLEET) for c in commands(body))
    return next(c for c in found if c.startswith(prefix))


def leads(walk: Walkthrough, server: Proc) -> bool:
    """Whether ``server`` is the one leader the installation lists."""
    listed = walk.json("pushjobs server list")
    if not isinstance(listed, list):
        return False
    api = ready_fields(server.ready_line)["api"]
    return [s["api"] for s in listed if s["role"] == "leader"] == [api]


def both_listed(walk: Walkthrough) -> bool:
    listed = walk.json("pushjobs server list")
    return isinstance(listed, list) and len(listed) == 2


def test_several_servers_the_standby_leads_when_the_leader_dies(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    # The leader reads the others' records at its lease renewals: a standby just ready
    # shows up in its list within one (a third of leader_session_s), as the README says.
    walk.waits["pushjobs server list"] = both_listed
    leader, agent = walk.daemon("pushjobs-server"), walk.daemon("pushjobs-agent")
    found = blocks(README.read_text(), SEVERAL)
    assert [kind for kind, _ in found].count("sh") >= 2, "the section lost its commands"
    for kind, body in found:
        written = walk.write(body) if kind == "toml" else []
        if kind == "sh":
            walk.block(kind, body)
        if any(path.name == "agent.toml" for path in written):
            # An agent reads its servers when it starts: restarted, as the corrected
            # README says (``systemctl restart pushjobs-agent``).
            agent = walk.restart(agent)
    standby = walk.daemon("pushjobs-server", 1)
    assert ready_fields(standby.ready_line)["leader"] == "no"
    before = walk.output("pushjobs server list --json")
    roles = sorted(s["role"] for s in json.loads(before))
    assert roles == ["leader", "standby"]
    assert "standby" in walk.output("pushjobs server list")

    leader.kill()  # kill -9: the fault this section is about
    wait_until(partial(leads, walk, standby), 30.0, 0.2)
    # The operator's CLI and the node follow: the fleet's own job, on the new leader, once
    # the node is back online (FLEET_WAITS).
    ran = walk.run(fleet_line("pushjobs job start uptime 'web-*'"))
    assert "complete: 1 succeeded" in ran.stdout
    assert agent.alive() and standby.alive()
    listed = walk.json("pushjobs server list")
    assert isinstance(listed, list), listed
    dead = [s["role"] for s in listed if s["api"] == ready_fields(leader.ready_line)["api"]]
    assert dead in (["deposed"], ["gone"]), listed
    # Prometheus still sees the installation: the new leader serves its metrics (fails
    # while server-b.toml shares server.toml's default metrics port, 9464).
    fields = ready_fields(standby.ready_line)
    assert "metrics" in fields, f"the standby serves no metrics: {standby.log_text()[-800:]}"
    with urllib.request.urlopen(fields["metrics"], timeout=10) as answer:
        assert "pushjobs_leader 1" in answer.read().decode()


def test_keys_and_the_registry_work_on_the_home_registry(walk: Walkthrough) -> None:
    del walk.env["PUSHJOBS_HOME"]  # the section's default: ~/.local/share/pushjobs
    home = Path(walk.env["HOME"]) / ".local" / "share" / "pushjobs"
    found = blocks(README.read_text(), KEYS)
    assert [kind for kind, _ in found] == ["sh"], "the section's one block changed"
    walk.block(*found[0])
    assert stat.S_IMODE((home / "keys" / "web-01.key").stat().st_mode) == 0o600
    assert re.search(r"web-01\s+node\s+pending", walk.output("pushjobs key list --state"))
    assert "pending -> accepted" in walk.output("pushjobs key accept web-01")
    keys = walk.json("pushjobs key list")
    assert isinstance(keys, list), keys
    assert [(k["name"], k["state"]) for k in keys] == [("web-01", "accepted")]
    # An empty listing says which registry it read: the file under the home.
    empty = walk.bash("pushjobs key list --state pending")
    assert f"(registry file {home / 'registry.json'})" in empty.stdout


def test_a_fleet_shows_its_health_and_its_log_and_takes_a_simulated_fleet(
    walk: Walkthrough,
) -> None:
    """Three sections that build on "Running a real fleet", run one after the other on one
    fleet: health and metrics, the ordered log, a simulated fleet (which adds 200 nodes,
    so it comes last)."""
    # The README's own way to keep off a port another server holds: port 0, any free one.
    walk.env["PUSHJOBS_SERVER__METRICS_BIND"] = "127.0.0.1:0"
    set_up_fleet(walk)
    health_and_metrics_show_the_server(walk)
    the_ordered_log_shows_the_fleets_log(walk)
    a_simulated_fleet_runs_a_job(walk)


def the_ordered_log_shows_the_fleets_log(walk: Walkthrough) -> None:
    found = blocks(README.read_text(), LOG)
    assert [kind for kind, _ in found] == ["sh"], "the section's one block changed"
    lines = commands(found[0][1])
    following = [line for line in lines if "--follow" in line]
    assert len(following) == 1, lines
    for line in lines:
        if line not in following:
            walk.run(line)
    assert re.search(r"^pushjobs\.events\s", walk.output("pushjobs log topics"), re.MULTILINE)
    stats = json.loads(walk.output("pushjobs log stats --json"))
    events = next(t for t in stats["topics"] if t["topic"] == "pushjobs.events")
    assert events["records"] >= 1, events
    # --follow runs until stopped: its first record read, then stopped by PID.
    argv = shlex.split(walk.apply(following[0]))
    tail = spawn("log-tail", argv, walk.root / "logs" / "tail.log", env=walk.env, cwd=walk.root)
    try:
        assert "node_online" in tail.read_line(20.0)
    finally:
        stop_all([tail], 5.0)


def a_simulated_fleet_runs_a_job(walk: Walkthrough) -> None:
    # 10,000 nodes, scaled down to 200 for a shared 2-core test machine.
    walk.replace.insert(0, ("--nodes 10000", "--nodes 200"))
    found = blocks(README.read_text(), SIMULATED)
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


def health_and_metrics_show_the_server(walk: Walkthrough) -> None:
    found = blocks(README.read_text(), HEALTH)
    assert [kind for kind, _ in found] == ["sh"], "the section's one block changed"
    walk.block(*found[0])
    shown = walk.output("pushjobs server status").splitlines()
    assert [line.split()[0] for line in shown] == [
        "server",
        "nodes",
        "jobs",
        "drops",
        "heartbeats",
        "log",
        "gc",
    ]
    assert ", leader, epoch 1, up " in shown[0]
    assert shown[1].startswith("nodes       1 online, 0 offline, 0 pending")
    figures = json.loads(walk.output("pushjobs server status --json"))
    assert figures["leader"] is True
    url = ready_fields(walk.daemon("pushjobs-server").ready_line)["metrics"]
    with urllib.request.urlopen(url, timeout=10) as answer:
        served = answer.read().decode()
    named = set(re.findall(r"`(pushjobs_[a-z_]+|process_)", section(README.read_text(), HEALTH)))
    assert len(named) >= 15, named
    missing = sorted(name for name in named if name not in served)
    assert not missing, f"named in the README, not served: {missing}"


def skips(line: str, skipped: dict[str, str]) -> bool:
    return line.removeprefix(".venv/bin/").startswith(tuple(skipped))


def test_fleet_reports_archive_and_report_a_real_history(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    walk.run(fleet_line("pushjobs job start uptime 'web-*'"))
    # The fleet stopped (SIGTERM, by PID): its history is in the log, and Spark gets the
    # machine's two cores.
    stop_all(walk.procs, 10.0)
    skipped = {
        "pip install": "installed in this virtualenv already",
        "pushjobs report --demo": "a generated week of 40 nodes: 25 s of Spark",
    }
    found = blocks(README.read_text(), REPORTS)
    lines = [line for kind, body in found if kind == "sh" for line in commands(body)]
    assert [line for line in lines if skips(line, skipped)], "no lines to skip"
    for line in lines:
        if not skips(line, skipped):
            walk.run(line)
    archived = re.search(r"(\d+) events archived", walk.output("pushjobs archive"))
    assert archived and int(archived.group(1)) > 5
    archive = walk.root / "var" / "archive"
    assert list(archive.glob("date=*/events-*.parquet"))
    report = walk.root / "report"
    assert (report / "report.html").stat().st_size > 10_000
    with (report / "outcomes_by_command.csv").open() as rows:
        uptime = [row for row in csv.DictReader(rows) if row["command"] == "uptime"]
    assert len(uptime) == 1 and int(uptime[0]["succeeded"]) == 1, uptime
    assert "command uptime: 1 jobs on 1 nodes" in walk.output("pushjobs report --input")
