"""The key registry in the ordered log: the compacted ``keys`` topic.

Theory of operation. Each name is one record, key ``key:<name>``, whose value holds every
entry of that name: its main entry and the denied one folded under it (``keys.registry``
keeps at most one of each). Removing a name's entries writes a tombstone. So the latest
record per key is the registry, and compaction keeps exactly that.

A store folds the topic once when it opens, then follows it from the offset after the
last record it read: a read catches up at most once per ``follow_s`` (on Kafka each catch
up asks the brokers for the end offset), an ``edit`` always catches up first and again
after writing, so a writer sees its own change and anything written meanwhile.

``edit`` yields the entries, compares them by name when the block ends and writes one
record per changed name, all in one ``append_batch`` (durable, all or nothing). There is
no lock across writers, unlike the file's: the server's writes come from the leader only
(the caller decides, through ``write`` and ``writable``, see ``server/shell/keyregistry.py``), and
an admin's local write (``pushjobs key --server-config``) to a name the leader changes at the same
instant is the one case where the last write of a name wins.

Deposed writers: a record whose fencing epoch is lower than one already folded was written
by a leader after its successor had written (Kafka's brokers cannot refuse it; SQLite
refuses it at write time): it is skipped, as ``pushjobs.log.fold.fold_fenced`` does.

Bad records (not JSON, not a ``pushjobs-key/1`` value, an entry that does not check, an
entry of another name) are counted in ``dropped`` and logged, never raised, and they
remove the name's entries: a record nobody can read must not leave an older grant in
force.

Threads: ``snapshot()`` gives a read-only store over the tuple this store last folded.
The ZAP handler's thread reads it (one attribute read) and never touches the log; it
sees what the loop has read or written, which is where every key the loop admits comes
from.

Killed at any line: a write is one durable ``append_batch`` or nothing; a restarted
reader folds the topic again.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

import orjson

from keys.entry import Entry
from pushjobs.clock import Clock, SystemClock
from pushjobs.errors import KeyFileError, LogError
from pushjobs.log.base import Batch, OrderedLog, Record

log = logging.getLogger("pushjobs.keys")

FORMAT: Final = "pushjobs-key/1"
KEY_PREFIX: Final = "key:"
FOLLOW_S: Final = 0.2  # how stale a read may be: another server's change shows within it
FOLLOW_MAX_S: Final = 5.0  # between tries while the log cannot be read
READ_BATCH: Final = 1000

Write = Callable[[Batch], None]


def record_key(name: str) -> str:
    return KEY_PREFIX + name


def encode(entries: Sequence[Entry]) -> bytes:
    """A name's entries as one record value."""
    return orjson.dumps({"format": FORMAT, "entries": [e.to_json() for e in entries]})


def decode(name: str, value: bytes) -> tuple[Entry, ...]:
    """A record value back to the name's entries; KeyFileError if it is not one."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise KeyFileError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise KeyFileError(f"not a {FORMAT} value")
    items = doc.get("entries")
    if not isinstance(items, list) or not items:
        raise KeyFileError("'entries' is not a non-empty list")
    entries = tuple(Entry.from_json(item) for item in items)
    if any(e.name != name for e in entries):
        raise KeyFileError(f"an entry is not named {name!r}")
    return entries


def by_name(entries: Sequence[Entry]) -> dict[str, tuple[Entry, ...]]:
    """Entries grouped by name, in order of first appearance."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.name, []).append(entry)
    return {name: tuple(group) for name, group in groups.items()}


def changes(before: Sequence[Entry], after: Sequence[Entry]) -> list[tuple[str, bytes | None]]:
    """The records that turn ``before`` into ``after``: one per changed name (pure).

    An edit keeps the entries it does not touch as the same objects, so the changed names
    are found by identity first (a registry of 50,000 nodes changes one name per write, and
    comparing every entry's fields each time cost half a second), then confirmed by value.
    """
    before_ids = {id(e) for e in before}
    after_ids = {id(e) for e in after}
    touched = {e.name for e in after if id(e) not in before_ids}
    touched.update(e.name for e in before if id(e) not in after_ids)
    if not touched:
        return []
    old = by_name([e for e in before if e.name in touched])
    new = by_name([e for e in after if e.name in touched])
    batch: list[tuple[str, bytes | None]] = []
    for name, group in new.items():
        if old.get(name) != group:
            batch.append((record_key(name), encode(group)))
    batch += [(record_key(name), None) for name in old if name not in new]
    return batch


class KeyFold:
    """The registry folded from the topic's records, one at a time, in order (pure)."""

    def __init__(self) -> None:
        self.groups: dict[str, tuple[Entry, ...]] = {}
        self.epoch = 0  # the highest fencing epoch seen
        self.dropped = 0

    def entries(self) -> tuple[Entry, ...]:
        return tuple(itertools.chain.from_iterable(self.groups.values()))

    def apply(self, rec: Record) -> bool:
        """Fold one record in; whether the registry changed."""
        if not rec.key.startswith(KEY_PREFIX):
            return False  # not a registry entry: room for other record kinds
        if rec.epoch:
            if rec.epoch < self.epoch:
                return False  # a deposed leader's late write
            self.epoch = rec.epoch
        name = rec.key[len(KEY_PREFIX) :]
        if rec.value is None:
            return self.groups.pop(name, None) is not None
        try:
            self.groups[name] = decode(name, rec.value)
        except KeyFileError as exc:
            self.dropped += 1
            log.error(
                "key registry: record %d of %s (%s) dropped, the name's keys removed: %s",
                rec.offset,
                rec.topic,
                rec.key,
                exc,
            )
            self.groups.pop(name, None)
        return True


class LogStore:
    """A ``RegistryStore`` over one compacted topic of an ordered log."""

    def __init__(
        self,
        log_: OrderedLog,
        topic: str,
        *,
        clock: Clock | None = None,
        follow_s: float = FOLLOW_S,
        write: Write | None = None,
        writable: Callable[[], bool] | None = None,
    ) -> None:
        self.log = log_
        self.topic = topic
        self.follow_s = follow_s
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._write = write if write is not None else self._append
        self._writable = writable if writable is not None else (lambda: True)
        self._fold = KeyFold()
        self._entries: tuple[Entry, ...] = ()
        self._next_offset = 0
        self._next_follow = -math.inf
        self._failures = 0  # follows failed in a row
        self._catch_up()  # an unreachable log fails at startup, not at the first node

    @property
    def where(self) -> str:
        return f"log topic {self.topic}"

    @property
    def path(self) -> Path | None:
        return None

    @property
    def current(self) -> tuple[Entry, ...]:
        """The entries as last folded, without asking the log."""
        return self._entries

    @property
    def dropped(self) -> int:
        """Records that could not be read (their names' keys were removed)."""
        return self._fold.dropped

    @property
    def next_follow(self) -> float:
        """When (monotonic) a read next asks the log for new records."""
        return self._next_follow

    @property
    def next_offset(self) -> int:
        """The offset of the first record this store has not read yet."""
        return self._next_offset

    def writable(self) -> bool:
        return self._writable()

    def read(self) -> tuple[Entry, ...]:
        """The entries, caught up with the log at most once per ``follow_s``.

        A log that cannot be read leaves the registry as last read in force, and is tried
        again after a delay that doubles up to ``FOLLOW_MAX_S``: on Kafka each try may wait
        for the brokers, and the loop that reads the registry must keep its pace.
        """
        now = self._clock.monotonic()
        if now < self._next_follow:
            return self._entries
        try:
            self._catch_up()
        except LogError as exc:
            if not self._failures:
                log.warning("key registry: cannot follow %s: %s", self.topic, exc)
            self._failures += 1
            delay = min(FOLLOW_MAX_S, self.follow_s * 2**self._failures)
            self._next_follow = self._clock.monotonic() + delay
            return self._entries
        if self._failures:
            log.info("key registry: following %s again", self.topic)
            self._failures = 0
        self._next_follow = now + self.follow_s
        return self._entries

    def snapshot(self) -> SnapshotStore:
        """A read-only store over what this one last folded, for another thread."""
        return SnapshotStore(self)

    @contextlib.contextmanager
    def edit(self) -> Iterator[list[Entry]]:
        """Yield the entries to change in place; the changed names are written when the
        block ends, in one append. Nothing is written if the block raises."""
        self._caught_up_or_error()
        before = self._entries
        entries = list(before)
        yield entries
        batch = changes(before, entries)
        if not batch:
            return
        try:
            self._write(batch)
        except LogError as exc:
            raise KeyFileError(f"{self.where}: the change was not written: {exc}") from exc
        self._caught_up_or_error()

    def _append(self, batch: Batch) -> None:
        self.log.append_batch(self.topic, batch)

    def _caught_up_or_error(self) -> None:
        try:
            self._catch_up()
        except LogError as exc:
            raise KeyFileError(f"{self.where}: cannot read the key registry: {exc}") from exc

    def _catch_up(self) -> None:
        changed = False
        while True:
            records = self.log.read(self.topic, self._next_offset, READ_BATCH)
            for rec in records:
                changed = self._fold.apply(rec) or changed
                self._next_offset = rec.offset + 1
            if len(records) < READ_BATCH:
                break
        if changed:
            # One new tuple per change: readers cache on its identity.
            self._entries = self._fold.entries()


class SnapshotStore:
    """A read-only view of a ``LogStore``'s last fold: no log access, safe on any thread."""

    def __init__(self, source: LogStore) -> None:
        self._source = source

    @property
    def where(self) -> str:
        return self._source.where

    @property
    def path(self) -> Path | None:
        return None

    def read(self) -> tuple[Entry, ...]:
        # One attribute read: the loop swaps in a whole new tuple, never edits one.
        return self._source.current

    def writable(self) -> bool:
        return False

    def edit(self) -> contextlib.AbstractContextManager[list[Entry]]:
        raise KeyFileError(f"{self.where}: this view of the key registry is read-only")
