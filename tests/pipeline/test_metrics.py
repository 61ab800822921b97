"""The single-process reference against the hand-computed history."""

from __future__ import annotations

import random

import pytest

from pushjobs.pipeline.metrics import compute, percentile
from tests.pipeline import history as h


def shuffled(rows):
    rows = [dict(r) for r in rows]
    random.Random(5).shuffle(rows)  # events arrive out of order
    return rows


@pytest.fixture(scope="module")
def report():
    return compute(shuffled(h.EVENTS + h.MALFORMED), since=h.SINCE, until=h.UNTIL)


def test_counts(report):
    assert (report.events, report.skipped) == (len(h.EVENTS) + 3, 3)


def test_availability(report):
    assert report.availability == h.AVAILABILITY


def test_outcomes(report):
    assert report.outcomes == h.OUTCOMES
    assert report.by_command == h.BY_COMMAND


def same_latency(got, want):
    assert [(r["metric"], r["scope"], r["count"]) for r in got] == [
        (r["metric"], r["scope"], r["count"]) for r in want
    ]
    for g, w in zip(got, want, strict=True):
        assert [g["p50"], g["p95"], g["p99"]] == pytest.approx([w["p50"], w["p95"], w["p99"]])


def test_latency(report):
    same_latency(report.latency, h.LATENCY)


def test_stragglers(report):
    assert report.stragglers == h.STRAGGLERS
    # 10000 is exactly 5 x 2000: "more than" the factor, so not a straggler at 5
    higher = compute(h.EVENTS, since=h.SINCE, until=h.UNTIL, straggler_factor=5.0)
    assert higher.stragglers == []


def test_empty_input():
    report = compute([])
    assert report.availability == report.latency == report.stragglers == []
    assert (report.events, report.skipped) == (0, 0)


def test_percentile_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([7.0], 0.99) == 7.0
