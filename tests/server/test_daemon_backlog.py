"""The server's loop does not call its own lag an outage (in process, real sockets)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from pushjobs.clock import FakeClock
from pushjobs.config import load_config
from pushjobs.sandbox import Sandbox
from server.daemon import Server
from server.settings import ServerConfig


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server(tmp_path, clock: FakeClock) -> Iterator[Server]:
    sandbox = Sandbox(tmp_path, nodes=[], interval_s=1.0, offline_threshold=3).prepare()
    server = Server(
        load_config(ServerConfig, sandbox.server_config_path), clock=clock, out=io.StringIO()
    )
    try:
        yield server
    finally:
        server.close()


def test_offline_expiry_waits_while_the_reply_queue_has_a_backlog(
    server: Server, clock: FakeClock
) -> None:
    for _ in range(2):  # online_threshold heartbeats
        server.nodes.heartbeat(
            "n1", "inc", "tcp://127.0.0.1:9", None, None, restarted=False, now=clock.monotonic()
        )
        clock.advance(0.5)
    assert server.nodes.is_online("n1")
    clock.advance(10.0)  # silent far past 3 intervals, as seen by a server behind
    server.intake.backlog = True
    server.timers()
    assert server.nodes.is_online("n1")
    assert server.intake.counters["expiry_deferred"] == 1
    server.intake.backlog = False  # the queue is read: now silence means something
    server.timers()
    assert not server.nodes.is_online("n1")
    assert server.backend.info()["transitions"]["offline"] == 1


def test_commands_sent_long_ago_are_forgotten_oldest_first(
    server: Server, clock: FakeClock
) -> None:
    now = clock.wall_ms()
    server.jobs.sender.asked[("j1", "a")] = now - 90_000
    server.jobs.sender.asked[("j1", "b")] = now - 61_000
    server.jobs.sender.asked[("j2", "a")] = now - 1_000
    server.jobs.sender.asked[("j2", "b")] = now
    clock.advance(server.config.server.registry_check_s + 0.1)  # the pruning pass is due
    server.timers()
    assert list(server.jobs.sender.asked) == [("j2", "a"), ("j2", "b")]
