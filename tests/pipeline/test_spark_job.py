"""The Spark job against the same hand-computed histories, in a real local session."""

from __future__ import annotations

import random

import pytest

from pushjobs.pipeline import spark_job
from tests.pipeline import history as h
from tests.pipeline.test_metrics import (
    is_the_batch_report,
    is_the_offline_wait_report,
    same_latency,
)

pytestmark = pytest.mark.spark

COLUMNS = [name for name, _ in spark_job.events.COLUMNS]


def frame(spark, rows):
    shuffled = [tuple(r.get(c) for c in COLUMNS) for r in rows]
    random.Random(11).shuffle(shuffled)  # events out of order
    return spark.createDataFrame(shuffled, spark_job.schema())


@pytest.fixture(scope="module")
def report(spark):
    df = frame(spark, h.EVENTS + h.MALFORMED)
    return spark_job.compute(df, since=h.SINCE, until=h.UNTIL, min_samples=1)


def test_counts_and_skipped(report):
    assert (report.events, report.skipped) == (h.IN_WINDOW, 3)


def test_availability(report):
    assert report.availability == h.AVAILABILITY
    assert report.downtime_by_day == h.DOWNTIME_BY_DAY


def test_outcomes(report):
    assert report.outcomes == h.OUTCOMES
    assert report.by_command == h.BY_COMMAND
    assert report.outcomes_by_day == h.OUTCOMES_BY_DAY


def test_latency(report):
    same_latency(report.latency, h.LATENCY)


def test_stragglers(report, spark):
    assert report.stragglers == h.STRAGGLERS
    df = frame(spark, h.EVENTS)
    assert spark_job.compute(df, since=h.SINCE, until=h.UNTIL).stragglers == []  # 1 run < 20


def test_empty_input(spark):
    report = spark_job.compute(spark.createDataFrame([], spark_job.schema()))
    assert (report.events, report.skipped, report.availability, report.latency) == (0, 0, [], [])


@pytest.fixture(scope="module")
def server_down(spark):
    return spark_job.compute(frame(spark, h.SERVER_DOWN), server_gap_ms=h.GAP_MS)


def test_default_window_includes_the_last_event(server_down):
    assert (server_down.since, server_down.until) == (0, 100_001)
    assert server_down.events == len(h.SERVER_DOWN)
    assert server_down.outcomes == h.SERVER_DOWN_OUTCOMES


def test_empty_command_is_unknown(server_down):
    assert server_down.by_command == h.SERVER_DOWN_BY_COMMAND
    assert server_down.latency_by_command == h.SERVER_DOWN_LATENCY_BY_COMMAND


def test_server_downtime_is_unknown_and_an_outage_is_one_stretch(server_down):
    assert server_down.server_gaps == h.SERVER_GAPS
    assert server_down.availability == h.SERVER_DOWN_AVAILABILITY


def test_approx_percentiles_stay_within_half_a_percent(spark):
    def job(ran_ms):
        return [
            {"kind": "job_state", "ts": 0, "job_id": "J", "state": "running", "offset": 0},
            {"kind": "node_state", "ts": ran_ms, "job_id": "J", "node": "a", "offset": 1}
            | {"prev_state": "running", "state": "succeeded", "command": "c"},
        ]

    # 12_345 ms rounds to 12_300 (three significant digits): 0.36 % off
    approx = spark_job.compute(frame(spark, job(12_345)), approx=True, min_samples=1)
    assert [r["p50"] for r in approx.latency] == [12_300.0, 12_300.0]
    # the hand-made history has no value beyond three digits: approx is exact there
    same = spark_job.compute(frame(spark, h.EVENTS), since=h.SINCE, until=h.UNTIL, approx=True)
    same_latency(same.latency, h.LATENCY)


def test_a_slow_tail_is_not_a_straggler_a_slow_node_is(spark):
    report = spark_job.compute(frame(spark, h.healthy_tail()))
    assert report.stragglers == h.HEALTHY_TAIL_STRAGGLERS


def test_a_batch_node_runs_from_its_turn_and_skipped_nodes_are_an_outcome(spark):
    report = spark_job.compute(frame(spark, h.BATCH), since=0, until=h.BATCH_UNTIL, min_samples=1)
    is_the_batch_report(report)


@pytest.fixture(scope="module")
def offline_wait(spark):
    """The offline-wait history's report, and the stages it told (one report for both)."""
    heard: list[str] = []
    df = frame(spark, h.OFFLINE_WAIT)
    report = spark_job.compute(
        df, since=h.LATE_SINCE, until=h.LATE_UNTIL, min_samples=1, progress=heard.append
    )
    return report, heard


def test_a_late_node_acks_from_its_own_commit_and_unavailable_is_no_answer(offline_wait):
    is_the_offline_wait_report(offline_wait[0])


def test_each_stage_is_told_as_it_starts(offline_wait):
    """``pushjobs report`` said nothing for half a minute after "reading ...": the stages
    are told as they start, the first with what was read."""
    report, heard = offline_wait
    assert len(heard) == 3, heard
    assert heard[0].startswith(f"{len(h.OFFLINE_WAIT):,} events read, ")
    assert f"{report.events:,} in the window" in heard[0]
    assert heard[1:] == ["outcomes by command, node and day", "latency percentiles and stragglers"]
