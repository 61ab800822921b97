"""The server's key registry over the log: imported once, written by the leader only, fenced.

Two servers on one real SQLite log file (a fake clock for the lease), each with its own
registry path: nothing but the log is shared.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from keys.identity import generate
from keys.importer import imported_path
from keys.registry import KeyRegistry, KeyState
from pushjobs.clock import FakeClock
from pushjobs.errors import KeyFileError
from pushjobs.log.sqlite.sqlite_log import SqliteLog
from pushjobs.log.topics import create_standard_topics
from server.shell.keyregistry import open_registries
from server.shell.leadership import Leadership, Lease
from server.shell.serverconfig import ServerSection

SESSION_S = 5.0


class Server:
    def __init__(self, path: Path, registry: Path, clock: FakeClock, name: str) -> None:
        self.log = SqliteLog(path, clock=clock)
        self.topics = create_standard_topics(self.log)
        self.leadership = Leadership.join(self.log, self.topics, "pushjobs.", name, SESSION_S)
        section = ServerSection(registry=registry, key_store="log")
        self.registry, self.zap = open_registries(
            section, self.log, self.topics, self.leadership, clock
        )

    def close(self) -> None:
        self.leadership.close()
        self.log.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def servers(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Server, Server, Path]]:
    first = tmp_path / "a" / "registry.json"
    admin = generate("alice", "user").public
    KeyRegistry(first).add(admin, state=KeyState.ACCEPTED, role="admin")
    a = Server(tmp_path / "log.db", first, clock, "a")
    b = Server(tmp_path / "log.db", tmp_path / "b" / "registry.json", clock, "b")
    try:
        yield a, b, first
    finally:
        b.close()
        a.close()


def test_the_first_server_imports_and_the_second_reads_the_log(
    servers: tuple[Server, Server, Path],
) -> None:
    a, b, first = servers
    assert not first.exists() and imported_path(first).exists()
    assert a.registry.get("alice").role == "admin"
    assert b.registry.get("alice").state is KeyState.ACCEPTED  # no file of its own


def test_only_the_leader_writes_fenced_and_the_zap_view_follows_the_loop(
    servers: tuple[Server, Server, Path], clock: FakeClock
) -> None:
    a, b, _ = servers
    assert a.leadership.renew(clock.monotonic()) is Lease.TOOK_OVER
    assert b.leadership.renew(clock.monotonic()) is Lease.STANDING_BY
    assert a.registry.writable() and not b.registry.writable()
    node = generate("web-01", "node").public
    a.registry.add(node, state=KeyState.ACCEPTED)
    last = a.log.read(a.topics.keys, a.log.end_offset(a.topics.keys) - 1)[0]
    assert last.key == "key:web-01" and last.epoch == a.leadership.epoch
    zap = a.zap.by_curve_key(node.curve_public)
    assert zap is not None and zap.state is KeyState.ACCEPTED
    with pytest.raises(KeyFileError, match="not the leader"):
        b.registry.reject(["web-01"])
    clock.advance(1.0)
    assert b.registry.get("web-01").state is KeyState.ACCEPTED


def test_a_deposed_leaders_late_write_is_refused(
    servers: tuple[Server, Server, Path], clock: FakeClock
) -> None:
    a, b, _ = servers
    a.leadership.renew(clock.monotonic())
    a.registry.add(generate("web-01", "node").public, state=KeyState.ACCEPTED)
    clock.advance(SESSION_S + 1)  # a stopped past its session; b takes over
    assert b.leadership.renew(clock.monotonic()) is Lease.TOOK_OVER
    b.registry.reject(["web-01"])
    assert a.leadership.leader  # a has not noticed yet
    with pytest.raises(KeyFileError, match="no longer the leader"):
        a.registry.accept(["web-01"])
    assert not a.leadership.leader
    clock.advance(1.0)
    assert b.registry.get("web-01").state is KeyState.REJECTED
    assert a.registry.get("web-01").state is KeyState.REJECTED


def test_the_file_store_is_still_there(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "registry.json"
    log = SqliteLog(tmp_path / "log.db", clock=clock)
    try:
        topics = create_standard_topics(log)
        leadership = Leadership.join(log, topics, "pushjobs.", "a", SESSION_S)
        section = ServerSection(registry=path, key_store="file")
        registry, zap = open_registries(section, log, topics, leadership, clock)
        registry.add(generate("web-01", "node").public)
        assert registry.path == path and zap.find("web-01") is not None
        assert log.end_offset(topics.keys) == 0
        leadership.close()
    finally:
        log.close()
