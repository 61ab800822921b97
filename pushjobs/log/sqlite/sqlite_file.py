"""The sqlite log's file: schema, atomic creation, checks on open, sqlite3 error translation.

A log file is born complete or not at all: it is built under a temporary name and linked
into place, so an existing file that is empty, not SQLite, or SQLite without our meta
table is never half-created by a racing process; it is refused as ``LogCorrupt``. It is
created mode 0600 (its -wal and -shm files follow): it holds every job's options.

Storage that cannot be written (a full disk, a read-only directory or mount, a failing
disk) is ``BackendUnavailable`` with a message that says which, in one line: SQLite's
own words ("unable to open database file", "disk I/O error") do not, so the directory's
free space and writability are looked at when such an error is met.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

from pushjobs.errors import BackendUnavailable, LogCorrupt, LogError, NoLogFile
from pushjobs.paths import fsync_dir

MAGIC = "pushjobs-log"
SCHEMA_VERSION = 1
# "PJLG" in the header's application id, so file(1) and tools can tell what the file is.
APPLICATION_ID = 0x504A4C47
SQLITE_HEADER = b"SQLite format 3\x00"

# A record's rowid packs (topic id, offset): records are clustered by topic and offset in
# the table's own b-tree, so reads are range scans and appends need no second index.
OFFSET_BITS = 40
MAX_OFFSET = (1 << OFFSET_BITS) - 1

# The members of groups over several topics (``shares``). Added after version 1 without a
# version change: a file without it gets it on first use (``IF NOT EXISTS``).
ROSTER = """CREATE TABLE IF NOT EXISTS roster (
        grp TEXT NOT NULL,
        token TEXT NOT NULL,
        member_id TEXT NOT NULL,
        heartbeat_ms INTEGER NOT NULL,
        session_ms INTEGER NOT NULL,
        PRIMARY KEY (grp, token)
    ) WITHOUT ROWID"""

SCHEMA = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    # end_offset only grows: compaction and retention never hand an offset out twice.
    """CREATE TABLE topics (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        compacted INTEGER NOT NULL,
        retention_ms INTEGER,
        retention_bytes INTEGER,
        end_offset INTEGER NOT NULL DEFAULT 0,
        records INTEGER NOT NULL DEFAULT 0,
        bytes INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE records (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL,
        value BLOB,
        timestamp_ms INTEGER NOT NULL,
        epoch INTEGER NOT NULL
    )""",
    # The latest record id per key (tombstones too): latest() reads one row per key
    # instead of folding the topic, and compaction keeps exactly these records.
    """CREATE TABLE heads (
        topic_id INTEGER NOT NULL,
        key TEXT NOT NULL,
        rid INTEGER NOT NULL,
        PRIMARY KEY (topic_id, key)
    ) WITHOUT ROWID""",
    """CREATE TABLE offsets (
        grp TEXT NOT NULL,
        topic_id INTEGER NOT NULL,
        next_offset INTEGER NOT NULL,
        PRIMARY KEY (grp, topic_id)
    ) WITHOUT ROWID""",
    """CREATE TABLE leases (
        grp TEXT NOT NULL,
        topic_id INTEGER NOT NULL,
        owner TEXT,
        token TEXT,
        epoch INTEGER NOT NULL,
        heartbeat_ms INTEGER NOT NULL,
        session_ms INTEGER NOT NULL,
        PRIMARY KEY (grp, topic_id)
    ) WITHOUT ROWID""",
    ROSTER,
)


def record_id(topic_id: int, offset: int) -> int:
    return (topic_id << OFFSET_BITS) | offset


def topic_range(topic_id: int) -> tuple[int, int]:
    """Rowids of a topic's records: [low, high)."""
    return topic_id << OFFSET_BITS, (topic_id + 1) << OFFSET_BITS


def connect(path: Path, *, create: bool, busy_timeout_s: float) -> sqlite3.Connection:
    """An open, checked connection to the log at ``path`` (created if allowed and absent)."""
    if not path.exists():
        if not create:
            raise NoLogFile(f"{path}: no log file here")
        _create(path)
    check_file(path)
    uri = f"{path.absolute().as_uri()}?mode=rw"
    try:
        db = sqlite3.connect(
            uri, uri=True, isolation_level=None, check_same_thread=False, timeout=busy_timeout_s
        )
    except sqlite3.Error as exc:
        raise translate(exc, path, "opening the log") from exc
    try:
        _check_meta(db, path)
        # Checked before any pragma that writes, so a foreign file is left untouched.
        db.execute("PRAGMA journal_mode=WAL")
        # FULL: the WAL is fsynced at every commit, so an acknowledged append survives
        # power loss, not only a crash of the writer.
        db.execute("PRAGMA synchronous=FULL")
    except sqlite3.Error as exc:
        db.close()
        raise translate(exc, path, "opening the log") from exc
    except LogError:
        db.close()
        raise
    return db


def check_file(path: Path) -> None:
    """Refuse what SQLite would open silently: empty, foreign or torn files."""
    if path.is_dir():
        raise LogError(f"{path}: is a directory, not a log file")
    try:
        with path.open("rb") as fh:
            header = fh.read(100)
        size = path.stat().st_size
    except OSError as exc:
        raise BackendUnavailable(f"{path}: cannot read the log file: {exc}") from exc
    if not header:
        raise LogCorrupt(f"{path}: empty file: a truncated log, or not a pushjobs log")
    if not header.startswith(SQLITE_HEADER):
        raise LogCorrupt(f"{path}: not an SQLite database, so not a pushjobs log")
    if len(header) < 100:
        raise LogCorrupt(f"{path}: truncated: {size} bytes, shorter than an SQLite header")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    # SQLite itself notices missing pages, but reads a torn last page as zeros.
    if page_size < 512 or size % page_size:
        raise LogCorrupt(f"{path}: truncated: {size} bytes is not a whole number of pages")


def _check_meta(db: sqlite3.Connection, path: Path) -> None:
    try:
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            raise LogCorrupt(f"{path}: an SQLite database, but not a pushjobs log") from exc
        raise
    if meta.get("magic") != MAGIC:
        raise LogCorrupt(f"{path}: an SQLite database, but not a pushjobs log (bad magic)")
    version = meta.get("schema_version", "")
    if version != str(SCHEMA_VERSION):
        raise LogError(
            f"{path}: log schema version {version!r}; this pushjobs reads version {SCHEMA_VERSION}"
        )


def _create(path: Path) -> None:
    """Build a complete, empty log beside ``path`` and link it into place."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackendUnavailable(
            f"{path}: cannot create the log's directory: {os_problem(exc)}"
        ) from exc
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        # The log holds every job's options: private from the first byte. SQLite gives its
        # -wal and -shm files the mode of the database file.
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.chmod(tmp, 0o600)  # exactly 0600, whatever the umask made of it
        db = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("BEGIN IMMEDIATE")
            for statement in SCHEMA:
                db.execute(statement)
            db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [("magic", MAGIC), ("schema_version", str(SCHEMA_VERSION))],
            )
            db.execute("COMMIT")
        finally:
            db.close()  # the last connection checkpoints the WAL into the file
        # Another process may have linked its log first: theirs is as good as ours.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
        fsync_dir(path.parent)
    except sqlite3.Error as exc:
        raise translate(exc, path, "creating the log") from exc
    except OSError as exc:
        raise BackendUnavailable(
            f"{path}: cannot create the log in {path.parent}: {os_problem(exc)}"
        ) from exc
    finally:
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            # Absent, or in a directory that refused to create them: nothing to clean.
            with contextlib.suppress(OSError):
                leftover.unlink()


_UNAVAILABLE = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_FULL,
    }
)


FULL_BELOW_BYTES = 1 << 20
"""Free space under which an I/O error is put down to a full disk."""

_OS_PROBLEMS = {
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
}


def os_problem(exc: OSError) -> str:
    """What an OSError means for the log, without the temporary file names."""
    return _OS_PROBLEMS.get(exc.errno or 0, exc.strerror or str(exc))


def storage_problem(path: Path) -> str | None:
    """Why the log's directory cannot take a write, if it cannot: full or read-only."""
    directory = path.parent
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return None
    if free < FULL_BELOW_BYTES:
        return f"the disk holding the log is full ({free // 1024} KiB free in {directory})"
    if not os.access(directory, os.W_OK):
        # access() says EROFS for a read-only mount even to root.
        return f"the log's directory {directory} is read-only (a read-only mount or permissions)"
    return None


# SQLite's errors from storage that cannot take a write, with what to say when the
# directory itself shows nothing wrong ("" for SQLite's own words).
_STORAGE = {
    sqlite3.SQLITE_FULL: "the disk holding the log is full",
    sqlite3.SQLITE_READONLY: "the log file is read-only (its mode or owner)",
    sqlite3.SQLITE_IOERR: "",
    sqlite3.SQLITE_CANTOPEN: "",
    sqlite3.SQLITE_PERM: "",
}


def translate(exc: sqlite3.Error, path: Path, what: str) -> LogError:
    """The pushjobs error for a sqlite3 error met while doing ``what`` on ``path``."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # extended codes keep the primary low
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return LogCorrupt(f"{path}: {what}: the log file is corrupt ({exc})")
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return BackendUnavailable(
            f"{path}: {what}: another process held the log's write lock for longer than "
            f"the busy timeout ({exc})"
        )
    if code in _STORAGE:
        why = storage_problem(path) or _STORAGE[code]
        return BackendUnavailable(
            f"{path}: {what}: {why} ({exc})" if why else f"{path}: {what}: {exc}"
        )
    if code in _UNAVAILABLE:
        return BackendUnavailable(f"{path}: {what}: {exc}")
    return LogError(f"{path}: {what}: {exc}")
