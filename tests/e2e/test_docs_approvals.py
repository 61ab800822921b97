"""docs/approvals.md, run as written: its code blocks, in order, top to bottom.

The page builds on docs/fleet.md, so the test starts from its fleet (``set_up_fleet``).
The policy goes into server.toml and the server is restarted, as the page says in words;
then bob's key and config, and alice's and bob's commands, each line with the exit code
the page gives it. Beyond the page's lines the test reads the jobs back (``--json``) to
check what the page says of them, and what ``pushjobs audit show`` of the approved job
says: alice asked, bob approved, the node ran it.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

from tests.e2e.doc_recipes import DOCS, Walkthrough, blocks, commands, set_up_fleet

PAGE = DOCS / "approvals.md"

# Each line of the page's last block, with its exit code as the page tells it.
CODES = {
    "pushjobs job start uptime '*'": 7,  # refused outright
    "JOB=$(pushjobs job start deploy web-01 --nowait)": 11,  # held
    "pushjobs job approve $JOB": 7,  # alice's own
    "LATE=$(pushjobs job start deploy web-01 --nowait)": 11,
}


def job(walk: Walkthrough, name: str) -> dict[str, Any]:
    result = walk.bash(f"pushjobs job status ${name} --json")
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_approvals_run_as_written(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    found = blocks(PAGE)
    assert [kind for kind, _ in found] == ["toml", "sh", "toml", "sh"], "the page's blocks changed"

    (path,) = walk.write(found[0][1])
    policy = tomllib.loads(path.read_text())["policy"]
    assert policy["commands"] == ["^deploy$", "^restart-"] and policy["forbid_bare_star"]
    walk.restart(walk.daemon("pushjobs-server"))
    walk.block(*found[1])  # bob's key
    walk.write(found[2][1])  # bob's config

    for line in commands(found[3][1]):
        result = walk.run(line, codes=(CODES.get(line, 0),))
        if line.startswith("pushjobs job start uptime"):
            assert "policy.forbid_bare_star" in result.stderr, result.stderr
        if line.startswith("pushjobs job status $JOB") and "--watch" not in line:
            assert "awaiting_approval" in result.stdout and "policy.commands" in result.stdout
        if line == "pushjobs job approve $JOB":
            assert "another admin must" in result.stderr, result.stderr

    approved, rejected = job(walk, "JOB"), job(walk, "LATE")
    assert approved["state"] == "complete" and approved["summary"] == {"succeeded": 1}, approved
    assert approved["approval"]["decided_by"] == "bob", approved["approval"]
    assert approved["approval"]["reason"] == "change CHG-42"
    assert rejected["state"] == "rejected", rejected
    assert rejected["nodes"]["web-01"]["reason"] == "rejected by bob: not during the freeze"
    assert rejected["job_id"] in walk.output("pushjobs job list --state rejected")
    audit = walk.output("pushjobs log tail events")
    assert '"decided_by":"bob"' in audit.replace(" ", ""), audit
    # The approved job's story, as an auditor reads it from the log: alice asked, bob
    # approved (with his reason), and the node ran it.
    story = walk.output("pushjobs audit show").splitlines()
    assert story[0] == f"job {approved['job_id']}: deploy", story
    assert story[1].startswith("  asked by alice at "), story
    assert [line.split("  ")[-1] for line in story if " by bob" in line] == [
        "approved by bob (change CHG-42)"
    ], story
    assert story[-1].startswith("  node web-01: ") and story[-1].endswith(" succeeded exit 0")
