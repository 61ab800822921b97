"""Storage that cannot take a write, met by the SQLite log: one clear line, never a
traceback. A full database is made with ``PRAGMA max_page_count`` (SQLite's own
SQLITE_FULL); a full disk and a read-only directory on a real tmpfs (root only)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs.errors import BackendUnavailable
from pushjobs.log.base import TopicPolicy
from pushjobs.log.sqlite.sqlite_file import translate
from pushjobs.log.sqlite.sqlite_log import SqliteLog
from tests.tmpfs import fill, mounted, set_readonly


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    with mounted(tmp_path, "fs", 2 << 20) as mount:
        yield mount


def test_a_full_database_is_backend_unavailable_saying_full(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log.db")
    try:
        log.create_topic("events", TopicPolicy())
        with log.transaction("capping") as db:
            pages = db.execute("PRAGMA page_count").fetchone()[0]
            db.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(BackendUnavailable) as caught:
            log.append_batch("events", [(f"k{i}", b"x" * 4000) for i in range(50)])
        message = str(caught.value)
        assert "appending to events: the disk holding the log is full" in message
        assert "\n" not in message
        assert log.end_offset("events") == 0  # nothing half-written
    finally:
        log.close()


def test_a_full_disk_names_the_free_space(small_fs: Path) -> None:
    log = SqliteLog(small_fs / "log.db")
    try:
        log.create_topic("events", TopicPolicy())
        filler = fill(small_fs)
        with pytest.raises(BackendUnavailable, match=r"the disk holding the log is full \(\d+ KiB"):
            log.append_batch("events", [(f"k{i}", b"x" * 4000) for i in range(200)])
        filler.unlink()
        assert log.append_batch("events", [("k", b"after")]) == [0]  # the handle still works
    finally:
        log.close()


def test_creating_a_log_in_a_read_only_directory_is_one_line_and_leaves_nothing(
    small_fs: Path,
) -> None:
    set_readonly(small_fs, True)
    with pytest.raises(BackendUnavailable) as caught:
        SqliteLog(small_fs / "log.db")
    assert str(caught.value) == (
        f"{small_fs / 'log.db'}: cannot create the log in {small_fs}: read-only file system"
    )
    assert list(small_fs.iterdir()) == []


def test_opening_a_log_on_a_read_only_mount_says_read_only(small_fs: Path) -> None:
    SqliteLog(small_fs / "log.db").close()
    set_readonly(small_fs, True)
    with pytest.raises(BackendUnavailable, match=r"log's directory .* is read-only"):
        SqliteLog(small_fs / "log.db")


def test_sqlite_words_are_kept_when_the_directory_shows_nothing_wrong(tmp_path: Path) -> None:
    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorcode = sqlite3.SQLITE_IOERR
    error = translate(exc, tmp_path / "log.db", "appending to events")
    assert isinstance(error, BackendUnavailable)
    assert str(error) == f"{tmp_path / 'log.db'}: appending to events: disk I/O error"
