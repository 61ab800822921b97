"""The one-time import of registry.json into the log's keys topic, on a real SQLite log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from keys.identity import generate
from keys.importer import import_once, imported_path, refuse_imported
from keys.registry import KeyRegistry, KeyState
from keys.topicstore import LogStore
from pushjobs.clock import FakeClock
from pushjobs.errors import KeyFileError
from pushjobs.log import topics
from pushjobs.log.sqlite.sqlite_log import SqliteLog

TOPIC = topics.names().keys


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SqliteLog]:
    handle = SqliteLog(tmp_path / "log.db")
    handle.create_topic(TOPIC, topics.KEYS.policy)
    try:
        yield handle
    finally:
        handle.close()


def a_registry(path: Path) -> KeyRegistry:
    """A file registry with an entry in every state, a role and folded attempts."""
    clock = FakeClock(wall_ms=1_700_000_000_000)
    registry = KeyRegistry(path, clock=clock)
    registry.add(generate("alice", "user").public, state=KeyState.ACCEPTED, role="admin")
    registry.add(generate("bob", "user").public, role="writer")
    web = generate("web-01", "node").public
    registry.present(web.name, "node", web.ed25519_public, web.curve_public, auto_accept=True)
    for _ in range(3):
        other = generate("web-01", "node").public
        clock.advance(1)
        registry.present(
            other.name, "node", other.ed25519_public, other.curve_public, auto_accept=False
        )
    db = generate("db-01", "node").public
    registry.present(db.name, "node", db.ed25519_public, db.curve_public, auto_accept=False)
    registry.reject(["db-01"])
    registry.add(generate("old-server", "server").public)
    return registry


def test_an_empty_topic_imports_every_entry_as_it_was(
    log: SqliteLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "registry.json"
    before = a_registry(path).list()
    caplog.set_level(logging.INFO, "pushjobs.keys")
    done = import_once(log, TOPIC, path)
    assert done is not None and (done.entries, done.names) == (6, 5)
    assert KeyRegistry(LogStore(log, TOPIC)).list() == before
    assert not path.exists() and imported_path(path).exists()
    assert not path.with_name("registry.json.lock").exists()  # the writers' lock goes too
    assert done.renamed_to == imported_path(path)
    assert "never this file again" in caplog.text and str(path) in caplog.text
    denied = [e for e in before if e.state is KeyState.DENIED]
    assert [e.attempts for e in denied] == [3]


def test_a_topic_that_ever_held_a_record_imports_nothing(log: SqliteLog, tmp_path: Path) -> None:
    registry = KeyRegistry(LogStore(log, TOPIC))
    registry.add(generate("web-09", "node").public)
    registry.delete(["web-09"])  # nothing live, but the log has the registry
    path = tmp_path / "registry.json"
    a_registry(path)
    assert import_once(log, TOPIC, path) is None
    assert KeyRegistry(LogStore(log, TOPIC)).list() == []
    # Not read, and moved out of the way so nobody edits it thinking it counts.
    assert not path.exists() and imported_path(path).exists()


def test_a_second_start_finds_nothing_to_import(log: SqliteLog, tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    a_registry(path)
    assert import_once(log, TOPIC, path) is not None
    end = log.end_offset(TOPIC)
    assert import_once(log, TOPIC, path) is None
    assert log.end_offset(TOPIC) == end


def test_no_file_no_import(log: SqliteLog, tmp_path: Path) -> None:
    assert import_once(log, TOPIC, tmp_path / "registry.json") is None
    assert log.end_offset(TOPIC) == 0


def test_a_corrupt_file_is_an_error_and_nothing_is_written(log: SqliteLog, tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    path.write_text("{ not json")
    with pytest.raises(KeyFileError, match="corrupt key registry"):
        import_once(log, TOPIC, path)
    assert log.end_offset(TOPIC) == 0 and path.exists()


def test_a_file_that_cannot_be_renamed_is_imported_and_said_so(
    log: SqliteLog, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "registry.json"
    a_registry(path)
    blocker = imported_path(path)  # a non-empty directory: no rename lands there, even as root
    blocker.mkdir()
    (blocker / "x").write_text("x")
    done = import_once(log, TOPIC, path)
    assert done is not None and done.renamed_to is None and done.entries == 6
    assert "could not be renamed" in caplog.text
    assert import_once(log, TOPIC, path) is None  # the topic decides, not the file


def test_the_cli_refuses_a_file_a_server_imported(log: SqliteLog, tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    a_registry(path)
    refuse_imported(path)  # not imported yet: fine
    import_once(log, TOPIC, path)
    with pytest.raises(KeyFileError, match="imported into the ordered log"):
        refuse_imported(path)
