from __future__ import annotations

import pytest

from pushjobs.errors import ClockSkewError, ReplayError
from pushjobs.protocol.replay import ReplayWindow

NOW = 1_700_000_000_000


@pytest.fixture
def window():
    return ReplayWindow(max_skew_s=30)


def test_increasing_sequences_are_accepted(window):
    first = window.check("n1", "inc-a", 1, NOW, NOW)
    assert first.first and not first.restarted
    nxt = window.check("n1", "inc-a", 2, NOW, NOW)
    assert not nxt.first and not nxt.restarted
    window.check("n1", "inc-a", 10, NOW, NOW)  # gaps are fine: only order matters
    assert window.current("n1") == ("inc-a", 10)


@pytest.mark.parametrize("sequence", [5, 4, 0])
def test_replayed_or_old_sequence_is_refused_and_changes_nothing(window, sequence):
    window.check("n1", "inc-a", 5, NOW, NOW)
    with pytest.raises(ReplayError, match=f"sequence {sequence} of n1 is not newer than 5"):
        window.check("n1", "inc-a", sequence, NOW, NOW)
    assert window.current("n1") == ("inc-a", 5)


def test_senders_are_independent(window):
    window.check("n1", "inc-a", 5, NOW, NOW)
    assert window.check("n2", "inc-a", 1, NOW, NOW).first


def test_new_incarnation_is_a_restart_and_may_restart_its_sequence(window):
    window.check("n1", "inc-a", 50, NOW, NOW)
    accepted = window.check("n1", "inc-b", 1, NOW, NOW)
    assert accepted.restarted and not accepted.first
    assert window.current("n1") == ("inc-b", 1)


def test_retired_incarnation_is_refused(window):
    window.check("n1", "inc-a", 50, NOW, NOW)
    window.check("n1", "inc-b", 1, NOW, NOW)
    with pytest.raises(ReplayError, match="retired"):
        window.check("n1", "inc-a", 51, NOW, NOW)
    assert window.current("n1") == ("inc-b", 1)


@pytest.mark.parametrize(
    ("offset_ms", "direction"), [(-30_001, "behind"), (30_001, "ahead of"), (-(10**9), "behind")]
)
def test_stale_and_future_timestamps_are_refused(window, offset_ms, direction):
    with pytest.raises(ClockSkewError, match=direction):
        window.check("n1", "inc-a", 1, NOW + offset_ms, NOW)
    assert window.current("n1") is None


@pytest.mark.parametrize("offset_ms", [-30_000, 30_000, 0])
def test_timestamps_at_the_skew_bound_are_accepted(window, offset_ms):
    window.check("n1", "inc-a", 1, NOW + offset_ms, NOW)


def test_clock_skew_is_a_replay_error(window):
    with pytest.raises(ReplayError):
        window.check("n1", "inc-a", 1, 0, NOW)


def test_forget(window):
    window.check("n1", "inc-a", 5, NOW, NOW)
    window.forget("n1")
    assert len(window) == 0
    assert window.check("n1", "inc-a", 1, NOW, NOW).first


def test_max_skew_must_be_positive():
    with pytest.raises(ValueError):
        ReplayWindow(0)
