"""When discovery falls due: the schedule's decisions, driven by a fake clock."""

from __future__ import annotations

import random
from dataclasses import replace

from agent.agentconfig import DiscoverySection
from agent.rediscovery import DiscoverySchedule
from pushjobs.clock import FakeClock
from pushjobs.protocol import messages as m
from tests.protocol.samples import CONFIG

SETTINGS = DiscoverySection(backoff_min_s=0.2, backoff_max_s=30.0, splay_s=1.0, silence_factor=3.0)


def config(incarnation: str = "srv-1", lifetime_s: float = 60.0) -> m.NodeConfig:
    # Interval 1 s, offline after 3 missed heartbeats.
    return replace(CONFIG, server_incarnation=incarnation, lifetime_s=lifetime_s)


def schedule(clock: FakeClock) -> DiscoverySchedule:
    return DiscoverySchedule(
        SETTINGS, clock.monotonic(), rng=random.Random(7), backoff=lambda n, lo, hi: 2.0 * n
    )


def configured(clock: FakeClock, cfg: m.NodeConfig | None = None) -> DiscoverySchedule:
    s = schedule(clock)
    s.configured(cfg or config(), clock.monotonic())
    return s


def test_due_at_once_without_a_config_and_after_a_restart() -> None:
    clock = FakeClock()
    assert schedule(clock).is_due(clock.monotonic())
    # Killed and restarted: a new schedule knows no config, so it asks at once again.
    configured(clock)
    assert schedule(clock).is_due(clock.monotonic())


def test_an_accepted_config_rests_the_schedule() -> None:
    clock = FakeClock()
    s = configured(clock)
    assert s.due is None and s.attempts == 0
    clock.advance(30.0)
    assert s.review(config(), clock.monotonic(), busy=False, server_online=True) == "server silent"


def test_lifetime_end_makes_it_due_when_idle() -> None:
    clock = FakeClock()
    cfg = config(lifetime_s=2.0)
    s = configured(clock, cfg)
    clock.advance(1.9)
    s.server_beat("srv-1", cfg, clock.monotonic())
    assert s.review(cfg, clock.monotonic(), busy=False, server_online=True) == ""
    clock.advance(0.1)
    assert s.review(cfg, clock.monotonic(), busy=False, server_online=True) == "config expired"
    assert s.is_due(clock.monotonic())


def test_lifetime_end_waits_for_a_running_job_unless_the_server_is_offline() -> None:
    clock = FakeClock()
    cfg = config(lifetime_s=1.0)
    s = configured(clock, cfg)
    clock.advance(1.5)
    s.server_beat("srv-1", cfg, clock.monotonic())
    assert s.review(cfg, clock.monotonic(), busy=True, server_online=True) == ""
    assert s.due is None
    assert s.review(cfg, clock.monotonic(), busy=True, server_online=False) == "config expired"


def test_a_long_silence_makes_it_due() -> None:
    clock = FakeClock()
    cfg = config()
    s = configured(clock, cfg)
    clock.advance(9.0)  # silence_factor 3 x offline window 3 s: not yet beyond
    assert s.review(cfg, clock.monotonic(), busy=True, server_online=False) == ""
    clock.advance(0.1)
    assert s.review(cfg, clock.monotonic(), busy=True, server_online=False) == "server silent"
    assert s.due == clock.monotonic()


def test_a_new_server_incarnation_plans_discovery_within_the_splay() -> None:
    clock = FakeClock()
    cfg = config("srv-1")
    s = configured(clock, cfg)
    assert not s.server_beat("srv-1", cfg, clock.monotonic())
    assert s.due is None
    now = clock.monotonic()
    assert s.server_beat("srv-2", cfg, now)
    assert s.due is not None and now <= s.due <= now + SETTINGS.splay_s
    planned = s.due
    assert not s.server_beat("srv-2", cfg, now)  # planned once, not pushed back
    assert s.due == planned


def test_failed_attempts_back_off_and_report_only_news() -> None:
    clock = FakeClock()
    s = schedule(clock)
    s.next_server(["tcp://a", "tcp://b"])
    assert s.failed("no answer from tcp://a", clock.monotonic())
    assert s.due == clock.monotonic() + 2.0
    assert not s.is_due(clock.monotonic())
    clock.advance(2.0)
    assert s.is_due(clock.monotonic())
    s.next_server(["tcp://a", "tcp://b"])
    assert not s.failed("no answer from tcp://a", clock.monotonic())  # same status: quiet
    assert s.due == clock.monotonic() + 4.0


def test_servers_are_asked_in_turn_and_a_config_starts_over() -> None:
    clock = FakeClock()
    s = schedule(clock)
    servers = ["tcp://a", "tcp://b"]
    assert [s.next_server(servers) for _ in range(3)] == ["tcp://a", "tcp://b", "tcp://a"]
    s.configured(config(), clock.monotonic())
    assert s.next_server(servers) == "tcp://a"


def test_a_request_makes_it_due_at_once_unless_an_attempt_is_already_due() -> None:
    clock = FakeClock()
    s = configured(clock)
    assert s.request(clock.monotonic())
    assert s.is_due(clock.monotonic())
    s.failed("x: rejected: key of n1 is rejected or revoked", clock.monotonic())
    due = s.due
    assert not s.request(clock.monotonic())  # the backoff stands: no storm of attempts
    assert s.due == due
