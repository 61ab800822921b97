"""Reports from real archives: a real log, the archiver, files on disk, Spark, the CLI."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
from pyspark.sql import functions as F
from typer.testing import CliRunner

from pushjobs.cli.app import app
from pushjobs.log.factory import LogSettings, open_log
from pushjobs.log.topics import create_standard_topics
from pushjobs.pipeline import demo, metrics, spark_job, uptime
from pushjobs.pipeline.archive import Archiver
from tests.pipeline import history as h
from tests.pipeline.test_metrics import same_latency

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """The server-down history through a real log, with one record that is not JSON; then
    what a reader meets in the wild: a running archiver's half-written file, and the
    rejected-records folder of an older archiver."""
    root = tmp_path_factory.mktemp("real")
    db, out = root / "log.db", root / "archive"
    log = open_log(LogSettings(backend="sqlite", path=db))
    try:
        topic = create_standard_topics(log).events
        records = [(f"job:{r['job_id']}", orjson.dumps(r)) for r in h.SERVER_DOWN]
        records.insert(5, ("job:x", b"{not json"))
        log.append_batch(topic, records)
        result = Archiver(log, topic, out).run()
    finally:
        log.close()
    assert (result.archived, result.rejected) == (len(h.SERVER_DOWN), 1)
    (out / "date=1970-01-01" / "events-0-1.parquet.tmp").write_bytes(b"PAR1 half written")
    (out / "rejected").mkdir()
    (out / "rejected" / "rejected-1-1.jsonl").write_bytes(b'{"offset": 1}\n')
    return out


def test_spark_reads_only_complete_event_files(spark, archive):
    report = spark_job.compute(spark_job.load(spark, str(archive)), server_gap_ms=h.GAP_MS)
    assert (report.events, report.skipped) == (len(h.SERVER_DOWN), 0)
    assert report.availability == h.SERVER_DOWN_AVAILABILITY
    assert report.outcomes == h.SERVER_DOWN_OUTCOMES
    assert report.server_gaps == h.SERVER_GAPS


def test_report_command_on_the_archive(spark, archive, tmp_path):
    config = tmp_path / "report.toml"
    config.write_text("[report]\nserver_gap_s = 10\n")
    out = tmp_path / "report"
    argv = ["report", "--input", str(archive), "--out", str(out), "--json"]
    result = CliRunner().invoke(app, [*argv, "--config", str(config)])
    assert result.exit_code == 0, result.output
    summary = orjson.loads(result.stdout)
    assert (summary["events"], summary["skipped"]) == (17, 0)
    assert summary["jobs_by_command"] == {"(unknown)": 2}
    assert summary["server_down_ms"] == 39_000  # [report] server_gap_s = 10 was used
    assert (out / "report.html").exists() and (out / "server_gaps.csv").exists()
    assert spark.range(3).count() == 3  # the session it found running still runs


def test_demo_leaves_no_temporary_folder(spark, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    result = CliRunner().invoke(app, ["report", "--demo", "--out", str(tmp_path / "r"), "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["nodes"] == 40
    assert list(scratch.iterdir()) == []


def test_a_window_reads_its_days_and_agrees_with_the_reference(spark, tmp_path):
    rows = list(demo.history(nodes=6, days=5, jobs_per_day=12, seed=4))
    day3 = demo.DAY_MS * (rows[0]["ts"] // demo.DAY_MS + 3)
    since, until = day3 + 3_600_000, day3 + demo.DAY_MS  # 01:00 to midnight of day 3
    # A job of day 2 waits for a laptop: asked as it appears 10 ms before midnight, it
    # votes once the window is open. Its commit_to_ack runs from its own mark, which only
    # the day before holds: 1 h 30 ms (not the 4 h since the job's voting).
    job = {"job_id": "late", "command": "uptime"}
    laptop = {**job, "kind": "node_state", "node": "laptop"}
    rows += [
        {**job, "kind": "job_state", "ts": day3 - 4 * 3_600_000, "state": "voting"},
        {**laptop, "ts": day3 - 4 * 3_600_000, "prev_state": "new", "state": "offline"},
        {**laptop, "ts": day3 - 10, "prev_state": "offline", "state": "new"},
        {**laptop, "ts": since + 20, "prev_state": "new", "state": "ready"},
    ]
    for i, row in enumerate(rows):
        row["offset"] = i
    demo.write_parquet(iter(rows), tmp_path)
    df = spark_job.load(spark, str(tmp_path), since, until)
    late = F.coalesce((F.col("prev_state") == "offline") & (F.col("state") == "new"), F.lit(False))
    read = df.select("kind", late.alias("late"), F.input_file_name().alias("f")).distinct()
    files = [(r["kind"], r["late"], Path(r["f"]).parent.name) for r in read.collect()]
    days = sorted({day for _, _, day in files})
    name = uptime.day_name
    assert days == [f"date={name(day3 + d * demo.DAY_MS)}" for d in range(-3, 1)]

    def days_of(kind, *late):
        return sorted({day for k, is_late, day in files if k == kind and is_late in late})

    # node events of the window, and of the day before only those asking a late node;
    # job marks from the day before too; liveness from all
    assert days_of("node_state", False) == days[-1:]
    assert days_of("node_state", True)[0] == days[-2]
    assert days_of("node_state", True, False) == days_of("job_state", False) == days[-2:]
    assert days_of("node_online", False) == days
    got = spark_job.compute(df, since=since, until=until, min_samples=1)
    want = metrics.compute(rows, since=since, until=until, min_samples=1)
    assert got.events == want.events > 0
    assert got.availability == want.availability
    assert got.outcomes == want.outcomes and got.by_command == want.by_command
    same_latency(got.latency, want.latency)
    (acked,) = [r for r in got.latency if r["scope"] == "laptop"]
    assert (acked["metric"], acked["count"], acked["p50"]) == ("commit_to_ack", 1, 3_600_030)


def test_an_archive_with_no_events_yet_is_an_empty_report(spark, tmp_path):
    (tmp_path / "_rejected").mkdir()  # everything so far was rejected
    report = spark_job.compute(spark_job.load(spark, str(tmp_path)))
    assert (report.events, report.availability, report.outcomes) == (0, [], [])
