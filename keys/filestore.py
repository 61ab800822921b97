"""The key registry's file: one JSON document, replaced atomically under an exclusive lock.

Writers take an exclusive ``flock`` on a sidecar lock file (the document is replaced by
rename, so it cannot carry the lock itself), re-read it, change it and write a new one.
Readers take no lock: a rename is atomic, so they see one version or the next.

Readers re-read only when the file's (mtime, size, inode) stamp changed. File system
clocks are coarse and inode numbers are reused, so two versions could share a stamp;
every write therefore sets its mtime strictly later than the one it replaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import orjson

from keys.atomic import write_atomic
from keys.entry import Entry
from pushjobs.errors import KeyFileError

FORMAT = "pushjobs-key-registry/1"
Stamp = tuple[int, int, int]


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class RegistryFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        self._entries: tuple[Entry, ...] = ()
        self._stamp: Stamp | None = None

    @property
    def where(self) -> str:
        return str(self.path)

    def writable(self) -> bool:
        return True

    def read(self) -> tuple[Entry, ...]:
        """The current entries, re-read from disk only if the file changed."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._entries, self._stamp = (), None
            return self._entries
        except OSError as exc:
            raise KeyFileError(
                f"{self.path}: cannot read the key registry: {exc.strerror}"
            ) from exc
        with os.fdopen(fd, "rb") as fh:
            # Stamp and content come from the same open file, so they always agree.
            stamp = _stamp(os.fstat(fd))
            if stamp != self._stamp:
                self._entries = self._parse(fh.read())
                self._stamp = stamp
        return self._entries

    def _parse(self, raw: bytes) -> tuple[Entry, ...]:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise KeyFileError(f"{self.path}: corrupt key registry: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise KeyFileError(f"{self.path}: corrupt key registry: not a {FORMAT} document")
        items = doc.get("entries")
        if not isinstance(items, list):
            raise KeyFileError(f"{self.path}: corrupt key registry: 'entries' is not a list")
        entries = []
        for index, item in enumerate(items):
            try:
                entries.append(Entry.from_json(item))
            except KeyFileError as exc:
                raise KeyFileError(
                    f"{self.path}: corrupt key registry: entry {index}: {exc}"
                ) from None
        return tuple(entries)

    @contextlib.contextmanager
    def edit(self) -> Iterator[list[Entry]]:
        """Yield the entries to change in place; written back, if changed, when the block ends.

        Nothing is written if the block raises, so a failed change leaves the file as it was.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise KeyFileError(
                f"{self.lock_path}: cannot lock the key registry: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            before = self.read()
            previous_mtime_ns = self._stamp[0] if self._stamp else 0
            entries = list(before)
            yield entries
            if tuple(entries) != before:
                self._write(tuple(entries), previous_mtime_ns)
        finally:
            os.close(lock)  # releases the flock

    def _write(self, entries: tuple[Entry, ...], previous_mtime_ns: int) -> None:
        doc = {"format": FORMAT, "entries": [e.to_json() for e in entries]}
        data = orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
        st = write_atomic(self.path, data, 0o600, min_mtime_ns=previous_mtime_ns + 1)
        self._entries, self._stamp = entries, _stamp(st)
