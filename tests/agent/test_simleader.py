"""The simulated fleet's choice of server: redirects, the leader flag, silence (pure)."""

from __future__ import annotations

import pytest

from agent.rediscovery import MAX_REDIRECTS, NOT_LEADING_BEATS
from agent.simulator.simleader import SILENCE_WINDOWS, ServerChoice

A, B, C = "tcp://a:1", "tcp://b:1", "tcp://c:1"


def test_a_standby_naming_the_leader_moves_the_fleet_there_at_once() -> None:
    choice = ServerChoice([A, B], 0.0)
    assert choice.not_leader(B) == B
    assert (choice.current, choice.moving) == (B, True)
    choice.accepted(1.0)
    assert not choice.moving and choice.redirects == 0


def test_the_leader_may_be_outside_the_configured_list() -> None:
    choice = ServerChoice([A], 0.0)
    assert choice.not_leader(C) == C
    assert choice.not_leader(None) == A  # C stands by too and knows no leader: back to A


def test_standbys_naming_each_other_bounce_at_most_max_redirects_times() -> None:
    choice = ServerChoice([A, B, C], 0.0)
    hops = [choice.not_leader(B if choice.current != B else A) for _ in range(MAX_REDIRECTS)]
    assert len(hops) == MAX_REDIRECTS and all(hops)
    after = choice.not_leader(A if choice.current == B else B)  # the cap: the next configured
    assert after == choice.current and choice.redirects == 0


def test_a_server_naming_itself_keeps_the_fleet() -> None:
    choice = ServerChoice([A, B], 0.0)
    assert choice.not_leader(A) is None and choice.current == A


def test_heartbeats_that_say_not_leading_move_on_after_a_few_in_a_row() -> None:
    choice = ServerChoice([A, B], 0.0)
    choice.accepted(0.0)
    for n in range(NOT_LEADING_BEATS - 1):
        assert choice.leader_beat(False, float(n)) is None
    assert choice.leader_beat(True, 5.0) is None  # one leading beat starts the count again
    for n in range(NOT_LEADING_BEATS - 1):
        assert choice.leader_beat(False, 6.0 + n) is None
    assert choice.leader_beat(False, 9.0) == B


def test_the_old_server_s_beats_move_nothing_until_the_new_one_answers() -> None:
    choice = ServerChoice([A, B], 0.0)
    choice.not_leader(B)
    for n in range(3 * NOT_LEADING_BEATS):
        assert choice.leader_beat(False, float(n)) is None
    choice.accepted(10.0)
    beats = [choice.leader_beat(False, 11.0 + n) for n in range(NOT_LEADING_BEATS)]
    assert beats[-1] == A


@pytest.mark.parametrize(("unanswered", "moves"), [(True, True), (False, False)])
def test_unanswered_requests_move_to_the_next_server(unanswered: bool, moves: bool) -> None:
    choice = ServerChoice([A, B], 0.0)
    assert (choice.review(1.0, None, unanswered=unanswered) == B) is moves


def test_a_silent_server_is_left_after_a_few_offline_windows() -> None:
    choice = ServerChoice([A, B], 0.0)
    choice.accepted(0.0)
    choice.leader_beat(True, 10.0)
    window_s = 3.0
    assert choice.review(10.0 + SILENCE_WINDOWS * window_s, window_s, unanswered=False) is None
    assert choice.review(10.1 + SILENCE_WINDOWS * window_s, window_s, unanswered=False) == B


def test_with_one_server_silence_changes_nothing() -> None:
    choice = ServerChoice([A], 0.0)
    choice.accepted(0.0)
    assert choice.review(1e6, 3.0, unanswered=True) is None


def test_no_server_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ServerChoice([], 0.0)
