"""docs/cli.md, run as written: its code blocks ("Environment and secrets", "Waiting for
offline nodes"), in order, on one fleet.

The page builds on docs/fleet.md, so the test starts from its fleet (``set_up_fleet``).
How the blocks run (an ``export`` line's value kept for the lines after it, the env file
written where its comment line says) is in ``tests/e2e/doc_recipes.py``. Beyond the
page's lines the test reads each job back (``job status``, ``job list``, ``job output``)
to check what the page says of them.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

from tests.e2e.doc_recipes import DOCS, Walkthrough, blocks, commands, set_up_fleet

PAGE = DOCS / "cli.md"


def test_environment_and_secrets_reach_the_command_and_stay_secret(walk: Walkthrough) -> None:
    set_up_fleet(walk)
    found = blocks(PAGE, "## Environment and secrets")
    assert [kind for kind, _ in found] == ["sh", "dotenv", "sh"], "the page's blocks changed"
    for kind, body in found:
        walk.block(kind, body)
    secret = walk.env["DB_PASSWORD"]
    assert secret, "the export line set no value"
    env_file = Path(walk.env["HOME"]) / ".config" / "pushjobs" / "deploy.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert f"DB_PASSWORD={secret}\n" in env_file.read_text()
    starts = [line for line in commands(found[2][1]) if line.startswith("pushjobs job start")]
    assert len(starts) == 3, starts
    for line in starts:
        assert "complete: 1 succeeded" in walk.outputs[line], walk.outputs[line]

    listed = walk.json("pushjobs job list")
    assert isinstance(listed, dict), listed
    jobs = [job for job in listed["jobs"] if job["command"] == "deploy"][::-1]  # oldest first
    assert len(jobs) == 3, listed
    shown = []
    for job in jobs:
        status = walk.bash(f"pushjobs job status {job['job_id']} --json")
        assert status.returncode == 0, status.stderr
        shown.append(json.loads(status.stdout)["options"])
        assert secret not in status.stdout
    # --env MODE=blue: plain, shown by job status --json.
    assert shown[0]["env"] == {"MODE": "blue"}, shown[0]
    # --secret-env and --env-file: named, never shown, by job status --json and job list --json.
    for options in shown[1:]:
        assert options["secret_env"] == {"DB_PASSWORD": "<secret>"}, options
    for job in jobs[1:]:
        assert job["options"]["secret_env"] == {"DB_PASSWORD": "<secret>"}, job
    assert secret not in json.dumps(listed)

    outputs = []
    for job in jobs:
        out = walk.bash(f"pushjobs job output {job['job_id']} web-01")
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout)
    assert outputs[0].startswith("deploying: mode blue\n"), outputs[0]
    assert "database password given" not in outputs[0]
    for out in outputs[1:]:
        assert "database password given" in out, out
        assert secret not in out

    offline_wait(walk)


def laptop_offline(walk: Walkthrough) -> bool:
    shown = walk.bash("pushjobs job status $JOB --json")
    if shown.returncode != 0:
        return False
    return bool(json.loads(shown.stdout)["nodes"]["laptop-01"]["state"] == "offline")


def offline_wait(walk: Walkthrough) -> None:
    """ "Waiting for offline nodes": a node whose key is accepted but never heard waits,
    visibly, until the job is aborted (on the same fleet: a fleet of its own would cost
    the suite seconds for a few CLI lines)."""
    (found,) = blocks(PAGE, "## Waiting for offline nodes")
    assert found[0] == "sh", "the section's blocks changed"
    # The reader looks until the laptop shows offline: within a restarted server's first
    # offline window (its takeover grace) a node not heard yet is still ``new``.
    walk.waits["pushjobs job status $JOB"] = laptop_offline
    walk.block(*found)
    status = walk.outputs["pushjobs job status $JOB"]
    assert "1 offline" in status and "; offline nodes waited for until" in status, status
    assert re.search(r"laptop-01\s+offline\s", status), status
    shown = walk.bash(f"pushjobs job status {walk.env['JOB']} --json")  # exits 5: aborted
    job = json.loads(shown.stdout)
    assert job["state"] == "aborted", job
    assert job["nodes"]["laptop-01"]["state"] == "aborted", job["nodes"]
