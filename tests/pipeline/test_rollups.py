"""Rollups: each closed day aggregated once, and a report from them equal to one from the
raw events, table for table, whatever the window (whole days, partial days at either
end, no bounds), on a hand-made history (``rolled_history.py``) and through the archiver
from a real SQLite log, a job's late event and a killed rollup included."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from pushjobs.log.factory import LogSettings, open_log
from pushjobs.log.topics import create_standard_topics
from pushjobs.pipeline import demo, jobspans, metrics, rollup
from pushjobs.pipeline.archive import Archiver
from pushjobs.pipeline.jobspans import JobSpans
from tests.pipeline import rolled_history as h

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

DAYS = [rollup.events.day(h.T0 + i * h.DAY) for i in range(5)]


def write(out: Path, rows: list[dict[str, Any]]) -> Path:
    demo.write_parquet(iter(rows), out)
    return out


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = write(tmp_path_factory.mktemp("rolled"), h.ROWS)
    updated = rollup.update(out)
    assert updated.built == [DAYS[0], DAYS[1], DAYS[2]] and updated.open_days == [DAYS[4]]
    return out


def table(out: Path, day: str, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(
        rollup.folder(out, day) / f"{name}.parquet"
    ).to_pylist()
    return rows


# --- the job span index -----------------------------------------------------------------------


def test_a_span_only_widens_and_names_the_day_a_job_leaves(tmp_path: Path) -> None:
    with JobSpans(tmp_path / "jobs.db") as spans:
        spans.widen({"j": (h.T0 + 10, h.T0 + 20), "k": (h.T0 + 5, h.T0 + h.DAY + 5)})
        assert spans.regular(h.T0) == {"j"}
        # Inside the same day: no day left; widened to the next: day 0 is named.
        assert spans.leaving({"j": (h.T0 + 1, h.T0 + 30)}) == set()
        assert spans.leaving({"j": (h.T0 + 30, h.T0 + h.DAY)}) == {h.T0}
        assert spans.leaving({"k": (h.T0 + 3 * h.DAY, h.T0 + 3 * h.DAY)}) == set()  # spans already
        spans.widen({"j": (h.T0 + 30, h.T0 + h.DAY)})
        assert spans.regular(h.T0) == set() and spans.count() == 2
        spans.widen({"j": (h.T0 + 15, h.T0 + 16)})  # narrower: no change
        assert spans.regular(h.T0 + h.DAY) == set()


def test_the_spans_of_archived_rows_count_job_and_node_events_only() -> None:
    rows = [
        {"kind": "node_state", "job_id": "j", "ts": 5},
        {"kind": "job_state", "job_id": "j", "ts": 9},
        {"kind": "output", "job_id": "j", "ts": 100},
        {"kind": "node_state", "job_id": "", "ts": 7},
        {"kind": "node_online", "node": "a", "ts": 1},
    ]
    assert jobspans.spans_of(rows) == {"j": (5, 9)}


# --- what a day's rollup holds ------------------------------------------------------------------


def test_a_regular_job_is_counted_and_one_over_midnight_kept_raw(archive: Path) -> None:
    day1, day2 = DAYS[1], DAYS[2]
    outcomes = {(r["command"], r["node"]): r for r in table(archive, day1, "outcomes")}
    assert (outcomes[("patch", "a")]["nacked"], outcomes[("patch", "b")]["timed_out"]) == (1, 1)
    assert outcomes[("deploy", "b")]["skipped"] == 1 and outcomes[("deploy", "a")]["jobs"] == 1
    assert all(r["day"] == rollup.day_ms(day1) for r in outcomes.values())
    assert ("backup", "a") not in outcomes  # j2 runs over midnight: raw in both days
    # j8 (patch) is regular: c was late; j9 (patch) waited past midnight: raw in both days
    assert (outcomes[("patch", "c")]["late"], outcomes[("patch", "c")]["succeeded"]) == (1, 1)
    assert ("patch", "d") not in outcomes and ("patch", "e") not in outcomes
    for day in (day1, day2):
        kept = [r for r in table(archive, day, "kept") if r["kind"] == "node_state"]
        assert {r["job_id"] for r in kept} == {"j2", "j9"}, day
    assert {r["command"]: r["jobs"] for r in table(archive, day1, "commands")} == {
        "uptime": 1,
        "patch": 2,
        "deploy": 1,
    }
    samples = {(r["metric"], r["command"], r["node"]): r for r in table(archive, day1, "samples")}
    # j3: a's vote 29 ms after voting, b's run its duration (j8: 19 and 33), sorted
    assert samples[(rollup.VOTE, "patch", "a")] | {} == {
        "metric": 0,
        "command": "patch",
        "node": "a",
        "ms": [19, 29],
    }
    assert samples[(rollup.RUN, "patch", "b")]["ms"] == [33, 5 * h.MIN - 205]
    counted = {
        (r["metric"], r["command"], r["ms"]): r["cnt"]
        for r in table(archive, day1, "command_samples")
    }
    assert counted[(rollup.VOTE, "patch", 29)] == 1
    # A late node's vote is timed from when it was asked: c 25 ms (not an hour from j8's
    # voting); j10's a 27 ms (not 30 min), and j10's c unavailable, on day 2
    assert samples[(rollup.VOTE, "patch", "c")]["ms"] == [25]
    samples2 = {(r["metric"], r["command"], r["node"]): r for r in table(archive, day2, "samples")}
    assert samples2[(rollup.VOTE, "patch", "a")]["ms"] == [27]
    outcomes2 = {(r["command"], r["node"]): r for r in table(archive, day2, "outcomes")}
    assert (outcomes2[("patch", "a")]["late"], outcomes2[("patch", "a")]["failed"]) == (1, 1)
    assert outcomes2[("patch", "c")]["unavailable"] == 1


def test_a_nodes_samples_are_one_sorted_list_and_counted_over_nodes(tmp_path: Path) -> None:
    # Runs of one command in an order their durations do not follow, on two nodes: a's
    # list is sorted, and equal values across nodes are counted together.
    rows: list[dict[str, Any]] = []
    for i, (took_a, took_b) in enumerate([(300, 50), (100, 300), (200, 300), (100, 70)]):
        t = h.T0 + i * h.HOUR
        rows.append(
            {
                "offset": len(rows),
                "ts": t,
                "kind": "job_state",
                "job_id": f"j{i}",
                "state": "running",
                "prev_state": "voting",
                "command": "ls",
            }
        )
        for node, took in (("a", took_a), ("b", took_b)):
            rows.append(
                {
                    "offset": len(rows),
                    "ts": t + took,
                    "kind": "node_state",
                    "job_id": f"j{i}",
                    "node": node,
                    "state": "succeeded",
                    "prev_state": "running",
                    "command": "ls",
                    "duration_ms": took,
                }
            )
    rows.append({"offset": len(rows), "ts": h.T0 + h.DAY, "kind": "node_online", "node": "a"})
    out = write(tmp_path, rows)
    assert rollup.update(out).built == [DAYS[0]]
    lists = {r["node"]: r["ms"] for r in table(out, DAYS[0], "samples")}
    assert lists == {"a": [100, 100, 200, 300], "b": [50, 70, 300, 300]}
    counted = {r["ms"]: r["cnt"] for r in table(out, DAYS[0], "command_samples")}
    assert counted == {50: 1, 70: 1, 100: 2, 200: 1, 300: 3}


def test_the_manifest_counts_rows_and_names_its_files_and_silences(archive: Path) -> None:
    m = rollup.read_manifest(archive, DAYS[0])
    assert m is not None and m.sources == rollup.raw_files(archive, DAYS[0])
    day0 = [r for r in h.ROWS if r["ts"] < h.T0 + h.DAY]
    assert (m.rows, m.good, m.bad_job_state, m.bad_liveness) == (len(day0), len(day0) - 3, 1, 1)
    m1 = rollup.read_manifest(archive, DAYS[1])
    assert m1 is not None
    assert (h.D1 + 8 * h.HOUR, h.D1 + 9 * h.HOUR) in m1.silences
    assert all(b - a > rollup.SILENCE_MS for a, b in m1.silences)
    assert rollup.read_manifest(archive, DAYS[4]) is None  # the open day


def test_a_day_holding_another_days_events_is_not_rolled_up(tmp_path: Path) -> None:
    out = write(tmp_path, h.ROWS)
    stray = {**h.ROWS[0], "offset": 10_000, "ts": h.T0 + h.DAY + 5}
    folder = out / f"date={DAYS[0]}"
    demo.write_parquet(iter([stray]), tmp_path / "elsewhere")
    (tmp_path / "elsewhere" / f"date={DAYS[1]}").rename(tmp_path / "x")
    for path in (tmp_path / "x").iterdir():
        path.rename(folder / path.name)
    updated = rollup.update(out)
    assert updated.not_rolled == [DAYS[0]] and DAYS[0] not in rollup.valid(out)


def test_run_again_it_builds_nothing_and_a_late_event_rebuilds_its_day(tmp_path: Path) -> None:
    out = write(tmp_path, h.ROWS)
    first = rollup.update(out)
    again = rollup.update(out)
    assert again.built == [] and again.kept == len(first.built)
    late = {**h.ROWS[0], "offset": 50_000, "ts": h.D1 + 20 * h.HOUR, "node": "d"}
    demo.write_parquet(iter([late]), out)
    assert DAYS[1] not in rollup.valid(out)  # its files changed: not used
    assert rollup.update(out).built == [DAYS[1]]
    assert set(rollup.valid(out)) == {DAYS[0], DAYS[1], DAYS[2]}


def test_leftovers_of_a_killed_build_are_removed(tmp_path: Path) -> None:
    out = write(tmp_path, h.ROWS)
    rollup.update(out)
    half = out / rollup.ROLLUPS / f".tmp-date={DAYS[1]}-999"
    half.mkdir()
    (half / "kept.parquet").write_bytes(b"half")
    rollup.remove_day(out, DAYS[2])
    updated = rollup.update(out)
    assert updated.built == [DAYS[2]] and not half.exists()


def test_rebuild_starts_from_the_raw_files(tmp_path: Path) -> None:
    out = write(tmp_path, h.ROWS)
    rollup.update(out)
    (rollup.folder(out, DAYS[0]) / "manifest.json").write_bytes(b"{broken")
    assert DAYS[0] not in rollup.valid(out)
    rebuilt = rollup.update(out, rebuild=True)
    assert rebuilt.index_rebuilt and rebuilt.built == [DAYS[0], DAYS[1], DAYS[2]]


# --- through the archiver -------------------------------------------------------------------------


def _log(path: Path, rows: list[dict[str, Any]]) -> None:
    log = open_log(LogSettings(backend="sqlite", path=path))
    try:
        topic = create_standard_topics(log).events
        batch = [
            ("k", orjson.dumps({k: v for k, v in r.items() if k != "offset" and v is not None}))
            for r in rows
        ]
        log.append_batch(topic, batch)
    finally:
        log.close()


def _archive(db: Path, out: Path) -> Any:
    log = open_log(LogSettings(backend="sqlite", path=db))
    try:
        return Archiver(log, create_standard_topics(log).events, out, batch=7).run()
    finally:
        log.close()


def usable_rows() -> list[dict[str, Any]]:
    return [r for r in h.ROWS if metrics.usable(r)]


def test_the_archiver_keeps_rollups_and_a_job_leaving_its_day_rebuilds_it(tmp_path: Path) -> None:
    db, out = tmp_path / "log.db", tmp_path / "archive"
    rows = usable_rows()
    # Everything of days 0 and 1 but j2 (it starts at 23:59), then one event of day 2.
    j2 = [r for r in rows if r["job_id"] == "j2" and r["kind"] == "node_state"]
    first = [r for r in rows if r["ts"] < h.D2 and r["job_id"] != "j2"]
    # j7: a job of day 1 alone, as far as this run can tell
    first.append({**j2[0], "ts": h.D1 + 30 * h.MIN, "job_id": "j7"})
    first.append(next(r for r in rows if r["ts"] >= h.D4))
    _log(db, first)
    result = _archive(db, out)
    assert result.rollups is not None and result.rollups.built == [DAYS[0], DAYS[1]]
    outcomes = {(r["command"], r["node"]): r["jobs"] for r in table(out, DAYS[1], "outcomes")}
    assert outcomes[("backup", "a")] == 1  # j7, counted as day 1's alone
    assert {r["command"]: r["jobs"] for r in table(out, DAYS[1], "commands")}["backup"] == 1
    # j7 turns out to run into day 2: day 1's rollup is rebuilt with it kept raw (and
    # day 2, closed by day 4's event of the first run, is rolled up).
    _log(db, [{**j2[-1], "ts": h.D2 + 1, "job_id": "j7"}])
    result = _archive(db, out)
    assert result.rollups is not None and result.rollups.built == [DAYS[1], DAYS[2]]
    assert "backup" not in {r["command"] for r in table(out, DAYS[1], "commands")}
    kept = {r["job_id"] for r in table(out, DAYS[1], "kept") if r["kind"] == "node_state"}
    assert kept == {"j7"}


def test_without_rollups_the_archiver_writes_none_and_drops_old_ones(tmp_path: Path) -> None:
    db, out = tmp_path / "log.db", tmp_path / "archive"
    rows = usable_rows()
    _log(db, [r for r in rows if r["ts"] < h.D2])
    _archive(db, out)
    assert rollup.valid(out)
    # Archived on without rollups, a job's span could change unseen: they go.
    _log(db, [r for r in rows if r["ts"] >= h.D2])
    log = open_log(LogSettings(backend="sqlite", path=db))
    try:
        result = Archiver(log, create_standard_topics(log).events, out, rollups=False).run()
    finally:
        log.close()
    assert result.rollups is None and not (out / rollup.ROLLUPS).exists()
    # Kept again: rebuilt from the raw files, the index too.
    again = _archive(db, out)
    assert again.rollups.index_rebuilt and again.rollups.built == [DAYS[0], DAYS[1], DAYS[2]]


@pytest.mark.parametrize("at", [1, 2, 3, 5])
def test_killed_while_rolling_up_the_next_run_finishes_the_job(tmp_path: Path, at: int) -> None:
    # Killed at the at-th directory fsync: 1, a day's files written but not in place;
    # 2, in place; 3 and 5, the next days'.
    db, out = tmp_path / "log.db", tmp_path / "archive"
    _log(db, usable_rows())
    script = f"""
import os
from pathlib import Path
from pushjobs.pipeline import rollup
from tests.pipeline.test_rollups import _archive
real, calls = rollup.fsync_dir, [0]
def dying(path):
    calls[0] += 1
    if calls[0] == {at}:
        os.kill(os.getpid(), 9)
    real(path)
rollup.fsync_dir = dying
_archive(Path({str(db)!r}), Path({str(out)!r}))
"""
    done = subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL
    result = _archive(db, out)
    assert result.rollups is not None
    assert set(rollup.valid(out)) == {DAYS[0], DAYS[1], DAYS[2]}
    assert not [p for p in (out / rollup.ROLLUPS).iterdir() if p.name.startswith(".")]


def test_the_manifest_reads_back_and_another_format_is_refused() -> None:
    m = rollup.Manifest(day="2026-11-23", sources=("a",), silences=((1, 9000),), lo=1, hi=9)
    assert rollup.decode(m.encode()) == m
    other = orjson.loads(m.encode()) | {"format": "pushjobs-rollup/0"}
    assert rollup.decode(orjson.dumps(other)) is None
    assert rollup.decode(b"[]") is None
    assert dataclasses.replace(m, day="2026-11-24").midnight - m.midnight == h.DAY


# --- a report from rollups, on Spark --------------------------------------------------------------


def both(spark: Any, out: Path, since: int | None, until: int | None, **kw: Any) -> tuple[Any, Any]:
    """The report from raw events only, and the one from rollups (with how it read)."""
    from pushjobs.pipeline import spark_job, spark_rollups

    kw.setdefault("server_gap_ms", h.GAP_MS)
    raw = spark_job.compute(
        spark_job.load(spark, str(out), since, until), since=since, until=until, min_samples=1, **kw
    )
    df, rolled, lo, hi, said = spark_rollups.prepare(
        spark, str(out), since, until, kw["server_gap_ms"]
    )
    assert rolled is not None, said
    return raw, spark_job.compute(df, since=lo, until=hi, rolled=rolled, min_samples=1, **kw)


def from_rollups(spark: Any, out: Path, since: int | None, until: int | None, **kw: Any) -> Any:
    from pushjobs.pipeline import spark_job, spark_rollups

    kw.setdefault("server_gap_ms", h.GAP_MS)
    df, rolled, lo, hi, said = spark_rollups.prepare(
        spark, str(out), since, until, kw["server_gap_ms"]
    )
    assert rolled is not None, said
    return spark_job.compute(df, since=lo, until=hi, rolled=rolled, min_samples=1, **kw)


def reference(since: int | None, until: int | None) -> Any:
    return metrics.compute(h.ROWS, since=since, until=until, min_samples=1, server_gap_ms=h.GAP_MS)


# In the suite: the report from rollups against the single-process reference (which the
# Spark report from raw events is held to elsewhere), both ends of the window partial
# (with no bounds, on a Spark cluster: tests/e2e/test_docs_reports.py). In the drills
# (python bench/drills.py; each window is two Spark reports, ~10 s on two cores): against
# the Spark report from raw events, every window, and --approx.
IN_SUITE = ("partial at both ends",)


@pytest.fixture(scope="module")
def suite_reports(spark: Any, archive: Path) -> dict[str, Any]:
    return {name: from_rollups(spark, archive, *h.WINDOWS[name]) for name in IN_SUITE}


@pytest.mark.spark
@pytest.mark.parametrize("name", IN_SUITE)
def test_a_report_from_rollups_is_the_reference_report(
    suite_reports: dict[str, Any], name: str
) -> None:
    rolled, expected = suite_reports[name], reference(*h.WINDOWS[name])
    assert (rolled.since, rolled.until, rolled.events) == (
        expected.since,
        expected.until,
        expected.events,
    )
    assert rolled.tables() == expected.tables()
    # Unusable rows among those read: the reference reads all three; a report whose window
    # starts on day 1 reads of day 0 only its liveness and job_state rows (two of them).
    assert rolled.skipped == 2


@pytest.mark.spark
def test_the_history_has_what_the_rollups_must_get_right(suite_reports: dict[str, Any]) -> None:
    # Guards the test above: a gap, a job over midnight, a halted job, unusable rows,
    # late and unavailable nodes (j8 and j10 regular, j9 over midnight).
    rolled = suite_reports["partial at both ends"]
    assert rolled.server_gaps and {r["command"] for r in rolled.by_command} >= {"backup", "deploy"}
    assert next(r for r in rolled.by_command if r["command"] == "deploy")["halted"] == 1
    patch = next(r for r in rolled.by_command if r["command"] == "patch")
    assert (patch["late"], patch["unavailable"]) == (3, 2)


@pytest.mark.spark
@pytest.mark.drill
@pytest.mark.parametrize(
    ("name", "approx"), [*((n, False) for n in sorted(h.WINDOWS)), ("since day 2", True)]
)
def test_a_report_from_rollups_is_the_report_from_raw_events(
    spark: Any, archive: Path, name: str, approx: bool
) -> None:
    raw, rolled = both(spark, archive, *h.WINDOWS[name], approx=approx)
    assert (rolled.since, rolled.until, rolled.events, rolled.skipped) == (
        raw.since,
        raw.until,
        raw.events,
        raw.skipped,
    )
    assert rolled.tables() == raw.tables()


@pytest.mark.spark
def test_a_gap_under_the_silences_kept_reads_raw_events(spark: Any, archive: Path) -> None:
    from pushjobs.pipeline import spark_rollups

    _, rolled, _, _, said = spark_rollups.prepare(spark, str(archive), None, None, 1000)
    assert rolled is None and "server_gap_s under 5 s" in said
