"""docs/schedules-and-batches.md, run as written: its code blocks, in order, top to bottom.

The page builds on docs/fleet.md, so the test starts from its fleet (``set_up_fleet``),
and adds the simulated nodes the page adds for its rolling batches; the blocks run as
``tests/e2e/doc_recipes.py`` says. Waits stand for a reader looking before going on: the
batch jobs start once every node is online (``FLEET_WAITS``), and ``schedule history``
once the every-5-seconds schedule has fired. Beyond the page's lines the test reads each
job back (``job status --json``) to check what the page says of it.
"""

from __future__ import annotations

import json
import tomllib
from itertools import pairwise
from typing import Any

from pushjobs.testbed.sandbox import ready_fields
from tests.e2e.doc_recipes import DOCS, Walkthrough, blocks, commands, set_up_fleet

PAGE = DOCS / "schedules-and-batches.md"
SIMULATED = 12


def fired(walk: Walkthrough) -> bool:
    """Whether the schedule ``$ID`` has started a job that completed."""
    history = walk.json("pushjobs schedule history $ID")
    return isinstance(history, dict) and any(
        fire.get("job_state") == "complete" for fire in history["fires"]
    )


def status(walk: Walkthrough, job_id: str) -> dict[str, Any]:
    result = walk.bash(f"pushjobs job status {job_id} --json")
    assert result.returncode in (0, 1), result.stderr  # 1: a node failed
    job: dict[str, Any] = json.loads(result.stdout)
    return job


def in_flight_at_most(job: dict[str, Any], window: int) -> None:
    """No more than ``window`` nodes ran at once, by the server's own turn and end stamps."""
    rows = [n for n in job["nodes"].values() if n.get("turn_ms") is not None]
    for row in rows:
        start = row["turn_ms"]
        running = [n for n in rows if n["turn_ms"] <= start and (n["finished_ms"] or 2**63) > start]
        assert len(running) <= window, (start, running)


def failed(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [n for n in job["nodes"].values() if n["state"] in ("failed", "crashed", "timed_out")]


def test_rolling_batches_and_schedules_run_as_written(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    walk.waits["pushjobs schedule history"] = fired
    found = blocks(PAGE)
    assert [kind for kind, _ in found] == ["sh", "sh", "sh", "toml"], "the page's blocks changed"

    # Rolling batches: a dozen simulated nodes, then three batch jobs on them.
    walk.block(*found[0])
    simulator = walk.daemon("pushjobs-simulate")
    assert f"nodes={SIMULATED}" in simulator.ready_line
    starts = commands(found[1][1])
    assert len(starts) == 3 and all(s.startswith("pushjobs job start") for s in starts), starts
    codes = []
    for line in starts:
        # --fail-rate 0.2: a node may fail, and then the job exits 1.
        codes.append(walk.run(line, codes=(0, 1)).returncode)
    listed = walk.json("pushjobs job list")
    assert isinstance(listed, dict), listed
    ids = [job["job_id"] for job in listed["jobs"] if job["command"] == "deploy"][::-1]
    jobs = [status(walk, job_id) for job_id in ids]
    assert len(jobs) == 3, listed
    for job, code in zip(jobs, codes, strict=True):
        assert sorted(job["nodes"]) == [f"sim-{i:05}" for i in range(SIMULATED)]
        assert code == (1 if failed(job) or job["state"] == "halted" else 0), job
    sliding, quarter, budget = jobs
    # --batch 3
    assert sliding["state"] == "complete" and sliding["batch"]["window"] == 3, sliding
    in_flight_at_most(sliding, 3)
    # --batch 25% --batch-wait 0.5: a quarter of 12, each start 0.5 s after the previous one
    assert quarter["state"] == "complete" and quarter["batch"]["window"] == 3, quarter
    assert quarter["batch"]["wait_s"] == 0.5, quarter["batch"]
    in_flight_at_most(quarter, 3)
    turns = sorted(n["turn_ms"] for n in quarter["nodes"].values())
    # (the first window's three start at once; each start after them waits its second)
    assert all(later - earlier >= 500 for earlier, later in pairwise(turns[2:])), turns
    # --batch 2 --max-failures 1: no node starts after the first failure.
    assert budget["batch"]["window"] == 2 and budget["batch"]["max_failures"] == 1, budget
    in_flight_at_most(budget, 2)
    skipped = [n for n in budget["nodes"].values() if n["state"] == "skipped"]
    if failed(budget):
        first = min(n["finished_ms"] for n in failed(budget))
        started = [n["turn_ms"] for n in budget["nodes"].values() if n.get("turn_ms")]
        assert all(turn <= first for turn in started), (first, started)
    if budget["state"] == "halted":
        assert failed(budget) and skipped, json.dumps(budget, indent=1)
    else:
        assert budget["state"] == "complete" and not skipped, json.dumps(budget, indent=1)

    # Schedules, on web-01.
    walk.block(*found[2])
    schedule_id = walk.env["ID"]
    assert schedule_id and " " not in schedule_id, schedule_id
    assert "4 schedules" in walk.output("pushjobs schedule list")
    assert "uptime" in walk.output("pushjobs schedule show")
    assert "complete" in walk.output("pushjobs schedule history")
    assert f"schedule {schedule_id} paused" in walk.output("pushjobs schedule pause")
    assert f"schedule {schedule_id} deleted" in walk.output("pushjobs schedule delete")
    left = walk.json("pushjobs schedule list")
    assert isinstance(left, list | dict), left
    rows = left if isinstance(left, list) else left["schedules"]
    assert sorted(s["command"] for s in rows) == ["backup", "backup", "deploy"], rows
    deploy = next(s for s in rows if s["command"] == "deploy")
    assert deploy["job"]["options"]["env"] == {"MODE": "green"}, deploy

    # The partitions' setting, written into server.toml: the server still starts on it.
    (path,) = walk.write(found[3][1])
    assert tomllib.loads(path.read_text())["server"]["schedule_partitions"] == 8
    server = walk.restart(walk.daemon("pushjobs-server"))
    assert ready_fields(server.ready_line)["leader"] == "yes"
