"""docs/halting.md, run as written: its code blocks, in order, top to bottom.

The page builds on docs/fleet.md, so the test starts from its fleet (``set_up_fleet``).
Its ``[halt]`` table goes into server.toml and the server is restarted, as the page says
in words. The page's Prometheus (``127.0.0.1:9090``) is a real one on a free port
(``prometheus.py``), evaluating a ``HighErrorRate`` rule that does not fire. Beyond the
page's lines the test reads the jobs back (``--json``) to check what the page says.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tests.e2e import prometheus
from tests.e2e.doc_recipes import DOCS, Walkthrough, blocks, commands, set_up_fleet

PAGE = DOCS / "halting.md"
SIMULATED = [f"sim-{i:05}" for i in range(8)]


@pytest.mark.skipif(not prometheus.available(), reason="no prometheus (.ci/run installs it)")
def test_halting_runs_as_written(walk: Walkthrough, tmp_path: Path) -> None:
    with prometheus.Prometheus(tmp_path / "prometheus", "HighErrorRate", "app_errors > 0") as prom:
        walk.replace.insert(0, ("127.0.0.1:9090", f"127.0.0.1:{prom.port}"))
        run_the_page(walk)


def first_batch_started(walk: Walkthrough) -> bool:
    """Two nodes had their turn (the wait holds for the page's later status lines too)."""
    result = walk.bash("pushjobs job status $JOB --json")  # exit 1 once halted
    if result.returncode not in (0, 1):
        return False
    job = json.loads(result.stdout)
    # Had their turn: a node ``ready`` while the job still votes has only said yes.
    if sum(1 for n in job["nodes"].values() if n.get("turn_ms") is not None) >= 2:
        return True
    assert job["state"] in ("voting", "running"), json.dumps(job, indent=1)  # no use waiting
    return False


def run_the_page(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    found = blocks(PAGE)
    assert [kind for kind, _ in found] == ["toml", "sh", "sh", "sh"], "the page's blocks changed"

    (path,) = walk.write(found[0][1])
    halt = tomllib.loads(path.read_text())["halt"]
    assert halt["checks"] == [f"test ! -e {walk.root / 'var' / 'stop-rollouts'}"], halt
    walk.restart(walk.daemon("pushjobs-server"))
    walk.block(*found[1])  # the simulated nodes
    assert "nodes=8" in walk.daemon("pushjobs-simulate").ready_line

    rollout = commands(found[2][1])
    assert len(rollout) == 5, rollout
    # The reader looks at job status until the first two nodes started, then pulls.
    walk.waits["pushjobs job status $JOB"] = first_batch_started
    for line in rollout:
        walk.run(line, codes=(1,) if "--watch" in line else (0,))
    watched = walk.output("pushjobs job status $JOB --watch")
    assert "halted: halt-if check 'test ! -e " in watched and "failed (exit 1)" in watched
    job = json.loads(walk.bash("pushjobs job status $JOB --json").stdout)
    assert job["state"] == "halted", job
    # The kill switch was pulled while the first batch ran: it alone ran, the rest skipped.
    assert job["summary"] == {"skipped": 6, "succeeded": 2}, job["summary"]
    skipped = [n for n in job["nodes"].values() if n["state"] == "skipped"]
    assert all(n["reason"] == f"not started: {job['halt_reason']}" for n in skipped)
    assert not (walk.root / "var" / "stop-rollouts").exists()

    (line,) = commands(found[3][1])
    walk.run(line)  # exit 0: every node succeeded, the alert never fired
    listed = walk.json("pushjobs job list")
    assert isinstance(listed, dict), listed
    latest = max(listed["jobs"], key=lambda j: j["created_ms"])
    done = json.loads(walk.bash(f"pushjobs job status {latest['job_id']} --json").stdout)
    assert done["state"] == "complete" and done["summary"] == {"succeeded": 8}, done
    assert done["options"]["halt_if"]["alert"] == "HighErrorRate", done["options"]
    assert sorted(done["nodes"]) == SIMULATED
