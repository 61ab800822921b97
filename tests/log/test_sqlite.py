"""What only the sqlite backend has: a file, crashes, several processes, damaged files."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading

import pytest

from pushjobs.clock import FakeClock
from pushjobs.errors import BackendUnavailable, LogCorrupt, LogError
from pushjobs.log.base import TopicPolicy
from pushjobs.log.sqlite.sqlite_file import APPLICATION_ID
from pushjobs.log.sqlite.sqlite_log import SqliteLog
from tests.log.children import spec_arg


@pytest.fixture
def path(tmp_path):
    return tmp_path / "log.db"


@contextlib.contextmanager
def opened(path, **kwargs):
    log = SqliteLog(path, **kwargs)
    try:
        yield log
    finally:
        log.close()


@contextlib.contextmanager
def raw(path):
    db = sqlite3.connect(path)
    try:
        yield db
    finally:
        db.close()


def _filled(path, records=400, value_bytes=300):
    with opened(path) as log:
        log.create_topic("jobs", TopicPolicy(compacted=True))
        log.append_batch("jobs", [(f"job:{i}", os.urandom(value_bytes)) for i in range(records)])
    assert not os.path.exists(f"{path}-wal")  # the last close checkpointed everything
    return path


def _use(path):
    """Open and read everything, as the server would at start."""
    with opened(path) as log:
        for info in log.topics():
            log.read(info.name, 0, limit=10**6)
            log.latest(info.name)


# The file.


def test_a_new_log_is_wal_with_our_application_id(path):
    with opened(path) as log:
        assert log._db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    with raw(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    assert sorted(p.name for p in path.parent.iterdir()) == ["log.db"]  # no temp leftovers


def test_many_openers_of_a_new_path_agree_on_one_log(path):
    barrier = threading.Barrier(4)
    errors = []

    def opener(i):
        barrier.wait()
        try:
            with opened(path) as log:
                log.create_topic("jobs", TopicPolicy())
                log.append("jobs", f"opener-{i}", b"x")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    with opened(path) as log:
        assert sorted(r.key for r in log.read("jobs")) == [f"opener-{i}" for i in range(4)]
        assert [r.offset for r in log.read("jobs")] == [0, 1, 2, 3]


def test_large_values_round_trip(path):
    big = os.urandom(1024 * 1024)
    with opened(path) as log:
        log.create_topic("jobs", TopicPolicy())
        log.append("jobs", "big", big)
    with opened(path) as log:
        assert log.read("jobs")[0].value == big


# Damaged and foreign files: each a clear error naming the path.


def _corrupt_middle(path):
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.seek(2 * 4096)
        fh.write(os.urandom(size - 3 * 4096))


def _truncate_half(path):
    os.truncate(path, path.stat().st_size // 2 // 4096 * 4096)


def _truncate_mid_page(path):
    os.truncate(path, path.stat().st_size - 100)


def _empty(path):
    os.truncate(path, 0)


@pytest.mark.parametrize(
    "damage",
    [_corrupt_middle, _truncate_half, _truncate_mid_page, _empty],
    ids=lambda f: f.__name__,
)
def test_damaged_log_is_log_corrupt(path, damage):
    damage(_filled(path))
    with pytest.raises(LogCorrupt, match=re.escape(str(path))):
        _use(path)


def test_text_file_is_log_corrupt(path):
    path.write_text("pushjobs: not a database\n" * 100)
    with pytest.raises(LogCorrupt, match=re.escape(f"{path}: not an SQLite database")):
        SqliteLog(path)


def test_foreign_sqlite_file_is_refused_and_left_untouched(path):
    with raw(path) as db:
        db.execute("CREATE TABLE users (name TEXT)")
        db.commit()
    before = path.read_bytes()
    with pytest.raises(
        LogCorrupt, match=re.escape(f"{path}: an SQLite database, but not a pushjobs log")
    ):
        SqliteLog(path)
    assert path.read_bytes() == before
    with raw(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_wrong_magic_is_log_corrupt(path):
    _filled(path, records=1)
    with raw(path) as db:
        db.execute("UPDATE meta SET value = 'something-else' WHERE key = 'magic'")
        db.commit()
    with pytest.raises(LogCorrupt, match="bad magic"):
        SqliteLog(path)


def test_newer_schema_is_refused_but_not_called_corrupt(path):
    _filled(path, records=1)
    with raw(path) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
        db.commit()
    with pytest.raises(LogError, match="schema version '99'") as caught:
        SqliteLog(path)
    assert not isinstance(caught.value, LogCorrupt)


def test_directory_and_missing_files(tmp_path):
    with pytest.raises(LogError, match="is a directory"):
        SqliteLog(tmp_path)
    with pytest.raises(BackendUnavailable, match="no log file here"):
        SqliteLog(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_write_lock_held_past_the_busy_timeout_is_backend_unavailable(path):
    with opened(path, busy_timeout_s=0.05) as log:
        log.create_topic("jobs", TopicPolicy())
        log.append("jobs", "k", b"before")
        with raw(path) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(BackendUnavailable, match="write lock"):
                log.append("jobs", "k", b"blocked")
            assert [r.value for r in log.read("jobs")] == [b"before"]  # WAL: reads go on
            other.rollback()
        assert log.append("jobs", "k", b"after") == 1


# Processes.


def test_acknowledged_appends_survive_sigkill_of_the_writer(path, children):
    with opened(path) as log:
        log.create_topic("jobs", TopicPolicy())
    spec = spec_arg({"backend": "sqlite", "path": str(path)})
    writer = children("-m", "tests.log.writer_proc", spec, "jobs", "w")
    writer.expect("ready")
    for _ in range(200):
        writer.expect("acked")
    writer.kill()
    acked = {}
    while (line := writer.next_line()) is not None:  # what it printed before dying
        if line.startswith("acked"):
            writer.lines.append(line)
    for line in writer.lines:
        if line.startswith("acked"):
            _, offset, n = line.split()
            acked[int(offset)] = f"w-{n}".encode()

    with opened(path) as log:
        records = log.read("jobs", 0, limit=10**6)
        end = log.end_offset("jobs")
    assert [r.offset for r in records] == list(range(end))  # no gap, no hole
    assert len(acked) >= 200
    assert all(records[offset].value == value for offset, value in acked.items())
    assert end - len(acked) <= 1  # at most the append that was in flight

    again = children("-m", "tests.log.writer_proc", spec, "jobs", "v", "20")
    assert again.expect("acked").split()[1] == str(end)
    again.expect("done")
    with opened(path) as log:
        assert [r.offset for r in log.read("jobs", 0, limit=10**6)] == list(range(end + 20))


def test_concurrent_writer_processes_get_gap_free_offsets(path, children):
    with opened(path) as log:
        log.create_topic("jobs", TopicPolicy())
    spec = spec_arg({"backend": "sqlite", "path": str(path)})
    writers = [children("-m", "tests.log.writer_proc", spec, "jobs", w, "150") for w in "abc"]
    for writer in writers:
        writer.expect("done")
    with opened(path) as log:
        records = log.read("jobs", 0, limit=10**6)
    assert [r.offset for r in records] == list(range(450))
    for name, writer in zip("abc", writers, strict=True):
        mine = [r for r in records if r.key == name]
        assert [r.value for r in mine] == [f"{name}-{n}".encode() for n in range(150)]
        acked = [int(line.split()[1]) for line in writer.lines if line.startswith("acked")]
        assert acked == [r.offset for r in mine]


# Leases on the sqlite clock.


def test_lease_time_is_the_clock_of_the_handle(path):
    clock = FakeClock()
    with opened(path, clock=clock) as first, opened(path, clock=clock) as second:
        first.create_topic("commands", TopicPolicy(compacted=True))
        a = first.member("g", "commands", "a", session_timeout_s=5)
        b = second.member("g", "commands", "b", session_timeout_s=1)
        assert a.poll() == 1
        clock.advance(4.9)  # within a's own session timeout, not b's
        assert b.poll() is None
        clock.advance(0.2)
        assert b.poll() == 2
        assert a.poll() is None
        (info,) = first.groups()
        assert (info.group, info.topic, info.owner, info.epoch) == ("g", "commands", "b", 2)


def _commits(log):
    """Each commit the handle makes, with the synchronous level it ran under."""
    level, commits = ["FULL"], []

    def trace(statement):
        if statement.startswith("PRAGMA synchronous="):
            level[0] = statement.split("=", 1)[1]
        elif statement == "COMMIT":
            commits.append(level[0])

    log._db.set_trace_callback(trace)
    return commits


def test_membership_writes_are_not_fsynced_and_appends_are(path):
    with opened(path) as log:
        log.create_topic("jobs", TopicPolicy(compacted=True))
        topics = [f"p{i}" for i in range(8)]
        for topic in topics:
            log.create_topic(topic, TopicPolicy(compacted=True))
        leader = log.member("leaders", "jobs", "a", session_timeout_s=5)
        share = log.group("schedules", topics, "a", session_timeout_s=5)
        commits = _commits(log)
        assert leader.poll() == 1
        assert commits == ["NORMAL"]
        # A share's poll (its roster row and a lease per topic) is one transaction.
        assert len(share.poll()) == 8
        assert commits == ["NORMAL", "NORMAL"]
        log.append_batch("jobs", [("job:1", b"x")])
        assert commits == ["NORMAL", "NORMAL", "FULL"]
        assert log._db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL again
        share.close()
        leader.close()
    with opened(path) as log:  # and all of it is in the file
        (info,) = [g for g in log.groups() if g.group == "leaders"]
        assert info.epoch == 1
        assert log.read("jobs", 0, limit=10)[0].value == b"x"
