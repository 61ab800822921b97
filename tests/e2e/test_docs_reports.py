"""docs/reports.md, run as written: "Running a report", its one recipe.

The page builds on docs/fleet.md, so the test starts from its fleet (``set_up_fleet``)
and runs the fleet's own job to have a history to report; the blocks run as
``tests/e2e/doc_recipes.py`` says. Two lines are skipped, each with its reason.
"""

from __future__ import annotations

import csv
import re

from pushjobs.testbed.childproc import stop_all
from tests.e2e.doc_recipes import (
    DOCS,
    FLEET,
    FLEET_PAGE,
    Walkthrough,
    blocks,
    commands,
    set_up_fleet,
)

PAGE = DOCS / "reports.md"
REPORTS = "## Running a report"


def fleet_line(prefix: str) -> str:
    """The first command of docs/fleet.md's "Running a real fleet" that starts with
    ``prefix``."""
    found = (c for _, body in blocks(FLEET_PAGE, FLEET) for c in commands(body))
    return next(c for c in found if c.startswith(prefix))


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
    found = blocks(PAGE, REPORTS)
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
