"""Which server an agent asks, and when it leaves one that does not lead:
the schedule's decisions, driven by a fake clock."""

from __future__ import annotations

import pytest

from agent.rediscovery import MAX_REDIRECTS, NOT_LEADING_BEATS, DiscoverySchedule
from pushjobs.clock import FakeClock
from tests.agent.test_rediscovery import config, schedule

SERVERS = ["tcp://a", "tcp://b", "tcp://c"]


def on(clock: FakeClock, endpoint: str) -> DiscoverySchedule:
    """A schedule whose config in force came from ``endpoint``."""
    s = schedule(clock)
    s.configured(config(), clock.monotonic(), endpoint)
    return s


def test_an_ended_lifetime_asks_the_current_server_first() -> None:
    clock = FakeClock()
    s = on(clock, "tcp://b")
    clock.advance(61)  # lifetime 60 s, idle
    s.server_beat("srv-1", config(), clock.monotonic())  # the server is alive
    why = s.review(config(), clock.monotonic(), busy=False, server_online=True)
    assert why == "config expired"
    assert [s.next_server(SERVERS) for _ in range(3)] == ["tcp://b", "tcp://c", "tcp://a"]


def test_a_silent_server_is_left_for_the_next_one() -> None:
    clock = FakeClock()
    s = on(clock, "tcp://c")
    clock.advance(10)  # silence_factor 3 x window 3 s
    assert s.review(config(), clock.monotonic(), busy=True, server_online=False) == "server silent"
    assert [s.next_server(SERVERS) for _ in range(3)] == ["tcp://a", "tcp://b", "tcp://c"]


def test_a_server_that_stops_leading_is_left_after_a_few_heartbeats() -> None:
    clock = FakeClock()
    s = on(clock, "tcp://a")
    now = clock.monotonic()
    for _ in range(NOT_LEADING_BEATS - 1):
        assert not s.leader_beat(False, now)
    assert not s.is_due(now)
    assert s.leader_beat(False, now)
    assert s.is_due(now)
    assert s.next_server(SERVERS) == "tcp://b"
    assert not s.leader_beat(False, now)  # said once; the attempt is already due


def test_a_leading_heartbeat_resets_the_count() -> None:
    clock = FakeClock()
    s = on(clock, "tcp://a")
    now = clock.monotonic()
    for _ in range(3 * NOT_LEADING_BEATS):
        s.leader_beat(False, now)
        s.leader_beat(False, now)
        s.leader_beat(True, now)  # a flicker is not a change of leader
    assert not s.is_due(now)


def test_a_standby_naming_the_leader_has_it_asked_next_at_once() -> None:
    clock = FakeClock()
    s = schedule(clock)
    assert s.next_server(SERVERS) == "tcp://a"
    assert s.redirected("tcp://leader:7700", "tcp://a: not the leader", clock.monotonic())
    assert s.is_due(clock.monotonic())
    assert s.next_server(SERVERS) == "tcp://leader:7700"  # not listed: the reply was signed
    assert s.next_server(SERVERS) == "tcp://b"  # then the turn goes on


def test_a_standby_naming_no_leader_is_a_failure_with_backoff() -> None:
    clock = FakeClock()
    s = schedule(clock)
    s.next_server(SERVERS)
    s.redirected(None, "tcp://a: no leader is known yet", clock.monotonic())
    assert not s.is_due(clock.monotonic())
    assert s.next_server(SERVERS) == "tcp://b"


def test_standbys_naming_each_other_cost_backoff_after_a_few_redirects() -> None:
    clock = FakeClock()
    s = schedule(clock)
    now = clock.monotonic()
    for i in range(MAX_REDIRECTS):
        s.next_server(SERVERS)
        s.redirected(f"tcp://loop{i % 2}", "not the leader", now)
        assert s.is_due(now)
    s.next_server(SERVERS)
    s.redirected("tcp://loop0", "not the leader", now)
    assert not s.is_due(now)  # backing off now
    assert s.next_server(SERVERS) != "tcp://loop0"


@pytest.mark.parametrize("endpoint", [None, "tcp://elsewhere"])
def test_a_config_from_an_unlisted_or_unknown_server_starts_the_turn_at_the_first(
    endpoint: str | None,
) -> None:
    clock = FakeClock()
    s = schedule(clock)
    s.configured(config(), clock.monotonic(), endpoint)
    assert s.next_server(SERVERS) == "tcp://a"


def test_a_new_config_forgets_the_move_and_the_redirect() -> None:
    clock = FakeClock()
    s = on(clock, "tcp://b")
    for _ in range(NOT_LEADING_BEATS):
        s.leader_beat(False, clock.monotonic())
    s.redirected("tcp://c", "not the leader", clock.monotonic())
    s.configured(config(), clock.monotonic(), "tcp://c")
    assert not s.is_due(clock.monotonic())
    assert s.next_server(SERVERS) == "tcp://c"


def test_the_leader_a_standby_named_that_answers_nothing_is_not_asked_again_next() -> None:
    # The leader stops (paused, killed): a standby, not leading yet, names it; it answers
    # nothing. The next attempt goes to the standby again, which may lead by now, not
    # back to the silent server (that cost a test's node its takeover grace).
    clock = FakeClock()
    servers = ["tcp://a", "tcp://b"]
    s = on(clock, "tcp://a")
    clock.advance(10)
    assert s.review(config(), clock.monotonic(), busy=True, server_online=False)
    assert s.next_server(servers) == "tcp://b"
    s.redirected("tcp://a", "tcp://b: not the leader", clock.monotonic())
    assert s.next_server(servers) == "tcp://a"
    s.failed("no answer from tcp://a", clock.monotonic(), unanswered="tcp://a")
    assert s.next_server(servers) == "tcp://b"
    # Skipped once only: a server that answers something else is asked in its turn.
    s.failed("tcp://b: busy", clock.monotonic())
    assert s.next_server(servers) == "tcp://a"
