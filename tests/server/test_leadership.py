"""Leadership alone: the lease, the fence on every write, standing by (fake clock, memory log)."""

from __future__ import annotations

import pytest

from pushjobs.api import methods
from pushjobs.clock import FakeClock
from pushjobs.errors import ApiError
from pushjobs.log.memory import MemoryLog, MemoryStore
from pushjobs.log.topics import create_standard_topics
from server.shell.leadership import Leadership, Lease

SESSION_S = 5.0


def join(store: MemoryStore, clock: FakeClock, member: str) -> tuple[Leadership, list[str]]:
    log = MemoryLog(store, clock=clock)
    topics = create_standard_topics(log)
    leadership = Leadership.join(log, topics, "pushjobs.", member, SESSION_S)
    stood_by: list[str] = []
    leadership.on_stand_by = lambda: stood_by.append(member)
    return leadership, stood_by


def succeeded_by_b() -> tuple[FakeClock, Leadership, list[str]]:
    """``a`` led, went silent past its session, and ``b`` took over; ``a`` has not noticed."""
    clock, store = FakeClock(), MemoryStore()
    a, a_stood_by = join(store, clock, "a")
    b, _ = join(store, clock, "b")
    a.renew(clock.monotonic())
    clock.advance(SESSION_S + 1)
    assert b.renew(clock.monotonic()) is Lease.TOOK_OVER
    return clock, a, a_stood_by


def test_the_first_member_takes_over_then_holds_and_renews_a_third_of_a_session_later() -> None:
    clock = FakeClock()
    a, _ = join(MemoryStore(), clock, "a")
    assert not a.leader
    assert a.renew(clock.monotonic()) is Lease.TOOK_OVER
    assert a.leader and a.epoch is not None
    assert a.next_renewal == pytest.approx(clock.monotonic() + SESSION_S / 3)
    assert a.renew(clock.monotonic()) is Lease.HELD


def test_a_second_member_stands_by_while_the_lease_is_held_and_takes_over_when_it_lapses() -> None:
    clock, store = FakeClock(), MemoryStore()
    a, _ = join(store, clock, "a")
    b, _ = join(store, clock, "b")
    a.renew(clock.monotonic())
    assert b.renew(clock.monotonic()) is Lease.STANDING_BY
    clock.advance(SESSION_S + 1)  # a is silent past its session
    assert b.renew(clock.monotonic()) is Lease.TOOK_OVER
    assert b.epoch is not None and a.epoch is not None and b.epoch > a.epoch


def test_a_deposed_leaders_write_is_fenced_it_stands_by_and_the_caller_hears_not_leader() -> None:
    _clock, a, a_stood_by = succeeded_by_b()
    topic = "pushjobs.assignments"
    with pytest.raises(ApiError) as raised:
        a.append(topic, [("k", b"late")])
    assert raised.value.code == methods.NOT_LEADER
    assert a_stood_by == ["a"] and not a.leader
    assert a.log.end_offset(topic) == 0  # the log refused it: nothing was written


def test_standing_by_refuses_decisions_but_writes_node_events() -> None:
    clock = FakeClock()
    a, _ = join(MemoryStore(), clock, "a")
    with pytest.raises(ApiError):
        a.append("pushjobs.commands", [("k", b"v")])
    a.append(a.unfenced_topic, [("node:n1", b"online")])
    assert a.log.end_offset(a.unfenced_topic) == 1


def test_losing_the_lease_is_reported_once_and_stands_by() -> None:
    clock, a, a_stood_by = succeeded_by_b()
    assert a.renew(clock.monotonic()) is Lease.DEPOSED
    assert a_stood_by == ["a"]
    assert a.renew(clock.monotonic()) is Lease.STANDING_BY
    assert a_stood_by == ["a"]


def test_a_leader_that_may_have_lapsed_asks_the_log_before_acting() -> None:
    clock, store = FakeClock(), MemoryStore()
    a, stood_by = join(store, clock, "a")
    b, _ = join(store, clock, "b")
    a.renew(clock.monotonic())
    assert a.acting(clock.monotonic())
    clock.advance(SESSION_S * 0.5)
    assert a.acting(clock.monotonic())  # well inside the session
    clock.advance(SESSION_S)  # stopped past its session; b took the lease meanwhile
    assert b.renew(clock.monotonic()) is Lease.TOOK_OVER
    assert a.leader and not a.acting(clock.monotonic())  # not trusted before asking
    assert a.confirm(clock.monotonic()) is Lease.DEPOSED
    assert not a.leader and stood_by == ["a"]


def test_a_leader_confirmed_by_the_log_acts_again() -> None:
    clock = FakeClock()
    a, _ = join(MemoryStore(), clock, "a")
    a.renew(clock.monotonic())
    clock.advance(SESSION_S * 2)  # nobody else: the log gives it back
    assert not a.acting(clock.monotonic())
    assert a.confirm(clock.monotonic()) in (Lease.HELD, Lease.TOOK_OVER)
    assert a.acting(clock.monotonic())


def test_a_lease_confirmed_after_a_pause_is_logged_with_its_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The operator (and the two-leader test on Kafka) can tell from the log alone that a
    server woken past its lease acted again only once the log had confirmed it."""
    clock = FakeClock()
    a, _ = join(MemoryStore(), clock, "a")
    a.renew(clock.monotonic())
    clock.advance(SESSION_S * 0.9)  # past the safe part of the session, inside the lease
    with caplog.at_level("INFO", logger="pushjobs.server"):
        assert a.confirm(clock.monotonic()) is Lease.HELD
    assert f"the leader lease is still held (epoch {a.epoch})" in caplog.text


def test_the_member_id_names_this_process() -> None:
    import os
    import socket

    clock = FakeClock()
    a, _ = join(MemoryStore(), clock, "a")
    assert a.member.member_id == f"a@{socket.gethostname()}/{os.getpid()}"
