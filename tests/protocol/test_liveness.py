from __future__ import annotations

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import StateError
from pushjobs.protocol.liveness import LivenessTracker, WentOffline, WentOnline


@pytest.fixture
def clock():
    return FakeClock(monotonic=100.0)


def tracker(online=2, offline=3, interval=1.0):
    return LivenessTracker(interval_s=interval, offline_threshold=offline, online_threshold=online)


def beat(t, clock, peer="n1"):
    return t.heartbeat(peer, clock.monotonic())


def test_comes_online_on_the_threshold_heartbeat(clock):
    t = tracker(online=3)
    assert beat(t, clock) is None
    clock.advance(1)
    assert beat(t, clock) is None
    assert not t.is_online("n1")
    clock.advance(1)
    assert beat(t, clock) == WentOnline("n1", 102.0)
    assert t.is_online("n1")
    clock.advance(1)
    assert beat(t, clock) is None  # already online: no second event


def test_online_threshold_one_is_immediate(clock):
    t = tracker(online=1)
    assert beat(t, clock) == WentOnline("n1", 100.0)


def test_goes_offline_exactly_after_offline_threshold_intervals(clock):
    t = tracker(online=1, offline=3)
    beat(t, clock)
    clock.advance(2.999)
    assert t.expire(clock.monotonic()) == []
    assert t.next_deadline() == 103.0
    clock.advance(0.001)
    assert t.expire(clock.monotonic()) == [WentOffline("n1", 103.0, 100.0)]
    assert not t.is_online("n1")
    assert t.expire(clock.monotonic()) == []
    assert t.next_deadline() is None


def test_each_heartbeat_pushes_the_deadline(clock):
    t = tracker(online=1, offline=3)
    for _ in range(10):
        beat(t, clock)
        clock.advance(2.5)
        assert t.expire(clock.monotonic()) == []
    assert t.is_online("n1")


def test_a_gap_breaks_the_streak_towards_online(clock):
    t = tracker(online=3, offline=3)
    beat(t, clock)
    clock.advance(1)
    beat(t, clock)  # streak 2
    clock.advance(2)  # one beat missed: the next one starts again
    assert beat(t, clock) is None
    assert t.status("n1").streak == 1
    clock.advance(1)
    assert beat(t, clock) is None
    clock.advance(1)
    assert beat(t, clock) == WentOnline("n1", clock.monotonic())


def test_jitter_within_half_an_interval_keeps_the_streak(clock):
    t = tracker(online=3)
    beat(t, clock)
    clock.advance(1.4)
    beat(t, clock)
    clock.advance(0.6)
    assert beat(t, clock) is not None


def test_flapping_peer_reports_every_transition(clock):
    t = tracker(online=2, offline=2)
    events = []
    for _cycle in range(3):
        for _ in range(2):
            events.append(beat(t, clock))
            clock.advance(1)
        clock.advance(5)  # silence longer than the offline threshold
        events.extend(t.expire(clock.monotonic()))
    kinds = [type(e).__name__ for e in events if e is not None]
    assert kinds == ["WentOnline", "WentOffline"] * 3
    assert t.status("n1").transitions == 6


def test_returning_peer_needs_the_full_online_threshold_again(clock):
    t = tracker(online=2, offline=2)
    beat(t, clock)
    clock.advance(1)
    assert beat(t, clock) is not None
    clock.advance(10)
    assert len(t.expire(clock.monotonic())) == 1
    assert beat(t, clock) is None
    clock.advance(1)
    assert beat(t, clock) is not None


def test_expire_with_many_peers_returns_only_those_due_in_order(clock):
    t = tracker(online=1, offline=3)
    for i in range(100):
        t.heartbeat(f"n{i}", clock.monotonic())
        clock.advance(0.01)
    # n0..n49 beat again later; n50..n99 stay silent
    clock.advance(1)
    for i in range(50):
        t.heartbeat(f"n{i}", clock.monotonic())
    clock.advance(2.0)
    due = t.expire(clock.monotonic())
    assert [e.peer for e in due] == [f"n{i}" for i in range(50, 100)]
    assert t.online_count == 50
    assert set(t.online_peers()) == {f"n{i}" for i in range(50)}


def test_mark_offline(clock):
    t = tracker(online=1)
    assert t.mark_offline("n1", clock.monotonic()) is None
    beat(t, clock)
    assert t.mark_offline("n1", clock.monotonic()) == WentOffline("n1", 100.0, 100.0)
    assert t.online_count == 0


def test_time_must_not_go_backwards():
    t = tracker()
    t.heartbeat("n1", 10.0)
    with pytest.raises(StateError, match="backwards"):
        t.heartbeat("n1", 9.0)
    with pytest.raises(StateError):
        t.expire(9.0)


def test_forget(clock):
    t = tracker(online=1)
    beat(t, clock)
    t.forget("n1")
    assert t.status("n1") is None
    assert len(t) == 0
    assert t.next_deadline() is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"interval_s": 0, "offline_threshold": 3, "online_threshold": 2},
        {"interval_s": 1, "offline_threshold": 0, "online_threshold": 2},
        {"interval_s": 1, "offline_threshold": 3, "online_threshold": 0},
    ],
)
def test_invalid_settings(kwargs):
    with pytest.raises(ValueError):
        LivenessTracker(**kwargs)


def test_a_stall_of_the_owner_moves_every_deadline_by_the_stall() -> None:
    t = LivenessTracker(1.0, 3, 1)
    t.heartbeat("a", 0.0)
    t.heartbeat("b", 1.0)
    assert t.next_deadline() == 3.0
    t.stall(4.0)  # the owner was stopped from 1.0 to 5.0: nobody could be heard
    assert t.expire(5.0) == []
    assert t.next_deadline() == 7.0
    t.heartbeat("b", 5.1)  # heard again: its deadline is not taken back
    assert [w.peer for w in t.expire(7.0)] == ["a"]
    assert t.is_online("b")
    assert [w.peer for w in t.expire(8.1)] == ["b"]


def test_after_a_stall_a_silent_peer_still_goes_offline() -> None:
    t = LivenessTracker(1.0, 3, 1)
    t.heartbeat("a", 0.0)
    t.stall(10.0)
    assert t.expire(12.9) == []
    assert [w.peer for w in t.expire(13.0)] == ["a"]


def test_grant_gives_every_online_peer_a_full_window_from_now() -> None:
    t = LivenessTracker(1.0, 3, 1)
    t.heartbeat("a", 0.0)
    t.heartbeat("b", 2.0)
    t.grant(2.5)
    assert t.expire(5.4) == []
    assert sorted(w.peer for w in t.expire(5.5)) == ["a", "b"]


def test_grant_with_extra_time_for_peers_that_must_see_the_owner_first() -> None:
    t = LivenessTracker(1.0, 3, 1)
    t.heartbeat("a", 0.0)
    t.grant(10.0, extra_s=2.0)
    assert t.expire(14.9) == []
    assert [w.peer for w in t.expire(15.0)] == ["a"]
    t.heartbeat("b", 15.5)  # the tracker's clock was not moved into the future
