"""The Spark job against the same hand-computed history, in a real local session."""

from __future__ import annotations

import random

import pytest

from pushjobs.pipeline import spark_job
from tests.pipeline import history as h
from tests.pipeline.test_metrics import same_latency

pytestmark = pytest.mark.spark

COLUMNS = [name for name, _ in spark_job.events.COLUMNS]


def frame(spark, rows):
    shuffled = [tuple(r.get(c) for c in COLUMNS) for r in rows]
    random.Random(11).shuffle(shuffled)  # events out of order
    return spark.createDataFrame(shuffled, spark_job.schema())


@pytest.fixture(scope="module")
def report(spark):
    df = frame(spark, h.EVENTS + h.MALFORMED)
    return spark_job.compute(df, since=h.SINCE, until=h.UNTIL)


def test_counts_and_skipped(report):
    assert (report.events, report.skipped) == (len(h.EVENTS) + 3, 3)


def test_availability(report):
    assert report.availability == h.AVAILABILITY


def test_outcomes(report):
    assert report.outcomes == h.OUTCOMES
    assert report.by_command == h.BY_COMMAND


def test_latency(report):
    same_latency(report.latency, h.LATENCY)


def test_stragglers(report):
    assert report.stragglers == h.STRAGGLERS


def test_empty_input(spark):
    report = spark_job.compute(spark.createDataFrame([], spark_job.schema()))
    assert (report.events, report.skipped, report.availability, report.latency) == (0, 0, [], [])


def test_default_window_is_the_span_of_the_events(spark):
    report = spark_job.compute(frame(spark, h.EVENTS))
    assert (report.since, report.until) == (0, 96_200)
