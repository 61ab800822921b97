"""The server's loop does not call its own lag an outage (in process, real sockets)."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from pushjobs.clock import FakeClock
from pushjobs.config import load_config
from pushjobs.testbed.sandbox import Sandbox
from server.serverd import Server
from server.shell.serverconfig import ServerConfig


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def server(tmp_path, clock: FakeClock) -> Iterator[Server]:
    # A long lease: the fake clock jumps further than the default one lasts, and a server
    # that takes its lease again gives every node a fresh window (not what is tested here).
    sandbox = Sandbox(
        tmp_path,
        nodes=[],
        interval_s=1.0,
        offline_threshold=3,
        server_extra={"server": {"leader_session_s": 60.0}},
    ).prepare()
    server = Server(
        load_config(ServerConfig, sandbox.server_config_path), clock=clock, out=io.StringIO()
    )
    server.tenure.renew(clock.monotonic())  # leader from the start, as ``run`` makes it
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
    server.turn_started = clock.monotonic()  # busy turns all along: no stall of its own
    server.intake.backlog = True  # the last batch read was full
    server.intake.expire(clock.monotonic(), clock.wall_ms())
    assert server.nodes.is_online("n1")
    assert server.intake.counters["expiry_deferred"] == 1
    # The loop reads the reply socket before it expires anyone: it is empty, so there is
    # no backlog, and now silence means something.
    server.timers()
    assert not server.intake.backlog
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


def test_a_stall_of_the_server_moves_node_deadlines_instead_of_expiring(
    server: Server, clock: FakeClock
) -> None:
    for _ in range(2):
        server.nodes.heartbeat(
            "n1", "inc", "tcp://127.0.0.1:9", None, None, restarted=False, now=clock.monotonic()
        )
        clock.advance(0.5)
    server.turn_started = clock.monotonic()  # a turn begins...
    clock.advance(10.0)  # ...and the whole process is stopped (SIGSTOP) in its middle
    server.timers()
    assert server.nodes.is_online("n1")
    assert server.intake.counters["stalls"] == 1
    # Still online a full window after the agents could see it again (2 beats)...
    clock.advance(4.9)
    server.turn_started = clock.monotonic()
    server.timers()
    assert server.nodes.is_online("n1")
    clock.advance(0.2)  # ...and silent past it: now the silence counts
    server.turn_started = clock.monotonic()
    server.timers()
    assert not server.nodes.is_online("n1")


def test_commands_that_could_not_be_sent_are_counted_as_drops(server: Server) -> None:
    # Counted where an operator looks (server status, pushjobs_drops): a command the
    # server could make no message of never reached its node.
    assert "command" not in server.backend.info()["drops"]
    server.jobs.sender.counters["oversized"] += 2
    server.jobs.sender.counters["unsealable"] += 1
    assert server.backend.info()["drops"]["command"] == {"oversized": 2, "unsealable": 1}


def test_the_ready_line_names_every_endpoint_as_advertised(tmp_path) -> None:
    """Bound on 127.0.0.1, advertised as ``localhost``: the ready line gives the API as it
    gives the other endpoints, as nodes and clients are told them (it gave the API as
    bound, ``0.0.0.0`` on a server that binds every interface)."""
    sandbox = Sandbox(
        tmp_path, nodes=[], server_extra={"server": {"advertise_host": "localhost"}}
    ).prepare()
    out = io.StringIO()
    server = Server(load_config(ServerConfig, sandbox.server_config_path), out=out)
    try:
        server.stopping = True  # the ready line, then no turn
        server.run()
    finally:
        server.close()
    fields = dict(part.split("=", 1) for part in out.getvalue().split() if "=" in part)
    for name in ("api", "heartbeat", "reply"):
        assert fields[name].startswith("tcp://localhost:"), fields
