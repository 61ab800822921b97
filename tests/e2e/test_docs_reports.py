"""docs/reports.md, run as written: "Running a report", its one recipe.

The page builds on docs/fleet.md, so the test starts from its fleet (``set_up_fleet``)
and runs the fleet's own job to have a history to report; the blocks run as
``tests/e2e/doc_recipes.py`` says. Two lines are skipped, each with its reason.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

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


CLUSTER = "## On a Spark cluster"


def test_the_report_on_a_spark_cluster_runs_as_the_page_says(tmp_path: Path) -> None:
    """A standalone master and two workers on loopback (processes of their own, stopped by
    PID); the page's config and command, run from its text against them, on an archive
    with rollups: every table as the single-process reference computes it."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from pushjobs.pipeline import demo, metrics, output, rollup
    from pushjobs.pipeline.session import TEST_JAVA_OPTIONS
    from tests.pipeline import rolled_history as h
    from tests.pipeline.sparkcluster import SparkCluster

    cluster = SparkCluster(tmp_path / "spark").start(workers=2)
    try:
        # The page's master is this cluster's; and, as every Spark test here, the JVMs
        # compile with C1 only (tests.pipeline.conftest): the two cores run a master, two
        # workers, their executors and the driver at once.
        quick = "\n".join(
            f'"spark.{jvm}.extraJavaOptions" = "{TEST_JAVA_OPTIONS}"'
            for jvm in ("executor", "driver")
        )
        walk = Walkthrough(
            tmp_path / "walk",
            extra=[
                ("spark://10.0.0.21:7077", cluster.url),
                ('"spark.cores.max" = "2"', f'"spark.cores.max" = "2"\n{quick}'),
            ],
        )
        try:
            (walk.root / "etc").mkdir()
            archive = walk.root / "var" / "archive"
            demo.write_parquet(iter(h.ROWS), archive)
            assert rollup.update(archive).built, "the recipe must read rollups too"
            found = blocks(PAGE, CLUSTER)
            assert [kind for kind, _ in found] == ["toml", "sh"]
            for kind, body in found:
                walk.block(kind, body)
        finally:
            walk.close()
        # Its executors ran on the workers, and the page's settings reached them.
        assert cluster.executors_ran() >= 1, "no executor was started by a worker"
    finally:
        cluster.stop()
    expected = tmp_path / "expected"
    reference = metrics.compute(h.ROWS, min_samples=20)
    output.write_tables(reference, expected)
    got = walk.root / "cluster-report"
    for table in sorted(expected.glob("*.csv")):
        assert (got / table.name).read_text() == table.read_text(), table.name
    said = walk.output("SPARK_LOCAL_IP=")
    assert "read: 2 whole days from their rollups, the rest from raw events" in said, said
    assert f"({h.UNUSABLE} skipped as malformed)" in said, said
