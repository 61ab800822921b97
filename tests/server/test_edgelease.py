"""The edge's lease on sending commands (``server.core.edgelease``): pure, on given clocks."""

from __future__ import annotations

import math

from server.core import edgelease
from server.core.edgelease import CommandLease


def test_an_edge_never_granted_sends_nothing() -> None:
    lease = CommandLease(interval_s=1.0)
    assert not lease.valid(0.0)
    assert not lease.valid(1e9)
    assert lease.lapsed_for(5.0) == math.inf


def test_a_grant_runs_from_the_stamp_of_the_report_it_answers_not_from_its_arrival() -> None:
    lease = CommandLease(interval_s=1.0)
    sent = edgelease.stamp(100.0)
    # The grant arrives 2 s after the report left: only 0.5 s of it is left.
    lease.grant(sent, 2500)
    assert lease.valid(102.0)
    assert lease.valid(102.49)
    assert not lease.valid(102.5)
    assert math.isclose(lease.lapsed_for(103.0), 0.5)


def test_a_grant_longer_than_the_edge_allows_is_cut_to_its_cap() -> None:
    lease = CommandLease(interval_s=0.2)  # at most 2.5 intervals: 0.5 s
    lease.grant(edgelease.stamp(10.0), 60_000)
    assert lease.valid(10.49)
    assert not lease.valid(10.5)


def test_an_old_grant_arriving_late_does_not_shorten_a_newer_one() -> None:
    lease = CommandLease(interval_s=1.0)
    lease.grant(edgelease.stamp(20.0), 2500)
    lease.grant(edgelease.stamp(19.0), 2500)
    assert lease.valid(22.4)
    assert not lease.valid(22.5)


def test_a_grant_of_nothing_grants_nothing() -> None:
    lease = CommandLease(interval_s=1.0)
    lease.grant(edgelease.stamp(5.0), 0)
    lease.grant(edgelease.stamp(5.0), -100)
    assert not lease.valid(5.0)


def test_the_stamp_never_names_a_later_moment_than_now() -> None:
    for now in (0.0, 0.0004, 1.9999, 12345.6789):
        assert edgelease.stamp(now) <= now * 1000 < edgelease.stamp(now) + 1


def test_the_leader_grants_less_than_its_loss_window_and_never_past_its_own_lease() -> None:
    assert edgelease.LEASE_INTERVALS < edgelease.LOST_AFTER_INTERVALS
    assert edgelease.grant_ms(1.0, 60.0) == 2500
    assert edgelease.grant_ms(0.2, 60.0) == 500
    assert edgelease.grant_ms(1.0, 1.2) == 1200  # its own lease ends first
    assert edgelease.grant_ms(1.0, 0.0) == 0  # not leading: nothing
    assert edgelease.grant_ms(1.0, -3.0) == 0
