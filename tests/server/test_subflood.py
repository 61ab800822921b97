"""Which keys flooding the heartbeat socket are cut off, and for how long (pure)."""

from __future__ import annotations

from server.shell.subflood import FloodGuard


def test_a_key_reaching_the_threshold_in_one_turn_is_cut_off() -> None:
    guard = FloodGuard(threshold=3, cut_off_s=60.0)
    for _ in range(3):
        guard.off_protocol("flooder")
    guard.off_protocol("slip")
    assert guard.end_turn(10.0) == {"flooder"}
    assert guard.refused("flooder", 10.0) and guard.refused("flooder", 69.9)
    assert not guard.refused("slip", 10.0)
    assert guard.total == 1


def test_counts_start_again_each_turn() -> None:
    guard = FloodGuard(threshold=3)
    for now in (1.0, 2.0):
        guard.off_protocol("k")
        guard.off_protocol("k")
        assert guard.end_turn(now) == set()
    assert not guard.refused("k", 2.0)


def test_the_cut_off_ends_after_its_time() -> None:
    guard = FloodGuard(threshold=1, cut_off_s=5.0)
    guard.off_protocol("k")
    guard.end_turn(0.0)
    assert guard.refused("k", 4.9)
    assert not guard.refused("k", 5.0)
    guard.end_turn(6.0)
    assert guard.until == {}  # forgotten, not kept for ever


def test_a_key_cut_off_already_is_not_cut_again_by_its_queued_flood() -> None:
    # The socket is rebuilt once per cut: what the key queued before it must not repeat it.
    guard = FloodGuard(threshold=1, cut_off_s=60.0)
    guard.off_protocol("k")
    assert guard.end_turn(0.0) == {"k"}
    guard.off_protocol("k")
    assert guard.end_turn(1.0) == set()
    assert guard.total == 1


def test_the_zap_thread_sees_a_new_mapping_never_one_being_changed() -> None:
    guard = FloodGuard(threshold=1)
    seen = guard.until
    guard.off_protocol("k")
    guard.end_turn(0.0)
    assert seen == {} and guard.until is not seen
