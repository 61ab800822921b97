"""The single-process reference against the hand-computed history."""

from __future__ import annotations

import random

import pytest

from pushjobs.pipeline import output
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
    assert (report.events, report.skipped) == (h.IN_WINDOW, 3)


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


def test_stragglers_need_enough_runs(report):
    assert report.stragglers == []  # c's one slow run is below the default minimum
    one = compute(h.EVENTS, since=h.SINCE, until=h.UNTIL, min_samples=1)
    assert one.stragglers == h.STRAGGLERS
    assert compute(h.EVENTS, since=h.SINCE, until=h.UNTIL, min_samples=2).stragglers == []
    # 10000 is exactly 5 x 2000: "more than" the factor, so not a straggler at 5
    higher = compute(h.EVENTS, since=h.SINCE, until=h.UNTIL, straggler_factor=5.0, min_samples=1)
    assert higher.stragglers == []


def test_by_day(report):
    assert report.downtime_by_day == h.DOWNTIME_BY_DAY
    assert report.outcomes_by_day == h.OUTCOMES_BY_DAY


@pytest.fixture(scope="module")
def server_down():
    return compute(shuffled(h.SERVER_DOWN), server_gap_ms=h.GAP_MS)


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


def test_a_quick_restart_or_a_quiet_fleet_is_no_server_gap():
    # at a 40k threshold the 39k silence is too short to be told from a quiet fleet
    report = compute(h.SERVER_DOWN, server_gap_ms=40_000)
    assert report.server_gaps == []
    assert report.availability[0]["online_ms"] == 90_000


def test_empty_input():
    report = compute([])
    assert report.availability == report.latency == report.stragglers == []
    assert (report.events, report.skipped) == (0, 0)


def test_percentile_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([7.0], 0.99) == 7.0


def test_a_slow_tail_is_not_a_straggler_a_slow_node_is():
    assert compute(h.healthy_tail()).stragglers == h.HEALTHY_TAIL_STRAGGLERS


def same_rows(got, want):
    """Rows equal, their percentiles (``p..``) to floating-point rounding."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert {k: v for k, v in g.items() if not k.startswith("p")} == {
            k: v for k, v in w.items() if not k.startswith("p")
        }
        assert {k: v for k, v in g.items() if k.startswith("p")} == pytest.approx(
            {k: v for k, v in w.items() if k.startswith("p")}
        )


def is_the_batch_report(report):
    """The hand-computed answers for ``h.BATCH``, whichever engine computed ``report``."""
    assert report.outcomes == h.BATCH_OUTCOMES
    assert report.by_command == h.BATCH_BY_COMMAND
    assert report.outcomes_by_day == h.BATCH_OUTCOMES_BY_DAY
    same_latency(report.latency, h.BATCH_LATENCY)
    same_rows(report.latency_by_command, h.BATCH_LATENCY_BY_COMMAND)
    assert report.stragglers == []


def test_a_batch_node_runs_from_its_turn_and_skipped_nodes_are_an_outcome():
    is_the_batch_report(compute(shuffled(h.BATCH), since=0, until=h.BATCH_UNTIL, min_samples=1))


def is_the_offline_wait_report(report):
    """The hand-computed answers for ``h.OFFLINE_WAIT``, whichever engine computed it."""
    assert report.events == h.OFFLINE_WAIT_IN_WINDOW
    assert report.outcomes == h.OFFLINE_WAIT_OUTCOMES
    assert report.by_command == h.OFFLINE_WAIT_BY_COMMAND
    assert report.outcomes_by_day == h.OFFLINE_WAIT_OUTCOMES_BY_DAY
    same_latency(report.latency, h.OFFLINE_WAIT_LATENCY)
    same_rows(report.latency_by_command, h.OFFLINE_WAIT_LATENCY_BY_COMMAND)
    assert report.stragglers == []


def test_a_late_node_acks_from_its_own_commit_and_unavailable_is_no_answer():
    report = compute(
        shuffled(h.OFFLINE_WAIT), since=h.LATE_SINCE, until=h.LATE_UNTIL, min_samples=1
    )
    is_the_offline_wait_report(report)
    # y waited 3 h offline, then acked in 30 ms: its commit_to_ack is seconds, not hours
    y = next(r for r in report.latency if r["scope"] == "y" and r["metric"] == "commit_to_ack")
    assert y["p99"] < 1_000
    # failed 1 of the 4 that answered: the 2 unavailable are no more in the rate than skipped
    (backup,) = output.presented(report)["outcomes_by_command"]
    assert backup["failure_pct"] == 25.0
