"""Hash chains over the records a writer appends to a topic. Pure.

Theory of operation. A *stream* is the records one fenced writer appends to one topic: the
leader's writes (fence group ``<prefix>leader``) to ``commands``, ``assignments``,
``events``, ``keys`` and the schedule definitions; a schedule partition owner's fire
records (fence group ``<prefix>schedulers/<partition>``); a server incarnation's own
checkpoints on ``audit``. A fence group has one writer at a time (a deposed one's writes
are refused by the log), so a stream is written in one order, and a topic written by two
fence groups (a schedules partition) holds two streams, interleaved, each checkable
alone. Whoever takes a fence group over continues its streams from the log
(``head_from_tail``): a new leader after a failover, a new owner after a rebalance.

Each record of a stream gets the next ``seq`` (0, 1, 2...) and a *link*: a SHA-256
hash that commits to it and, through it, to every record of the stream before it:

- a *carrier* (a JSON object value, nearly every record) carries ``"_chain": {"by":
  STREAM, "seq": N, "prev": HEX}`` as the first field of its value, ``prev`` being the
  link of the record before it in its stream (``GENESIS`` for the first). Its link is its
  *content hash*: SHA-256 over its key and stored value bytes, ``_chain`` included.
- a *passenger* (a tombstone, or a value that is not a JSON object, such as a start
  request's target chunks) has no room for the field. Its link folds the link before it
  with its content hash, so the next carrier of the stream covers it.

The field is spliced in front of the encoded value: no re-encoding, one hash of bytes
already in hand, about 5 us a small record and under 2 us a KiB of a large one (about what
encoding the value cost). SHA-256 rather than BLAKE2b: CPUs hash it in hardware, twice as
fast on the machines measured. Every reader of these topics reads JSON objects by field,
so an extra field changes nothing for them.

A link says nothing by itself: anyone can recompute a chain. What makes it evidence is a
checkpoint (``checkpoint.py``) signed with the server's identity key, naming a stream's
head; a record altered, removed or moved before that head no longer matches.

Two writers on one topic. A passenger names no stream, so the rule is positional: a
passenger belongs to the carrier after it, or, with no carrier after it, to the last
carrier before it. On a topic one stream writes, the two are the same stream. On a topic
two streams write (a schedules partition: the leader's definitions and their tombstones,
the owner's fire states and theirs), each writer closes a batch that would end with a
passenger with a *trailer*: a carrier of its own with an empty object as its value (key
``_chain/STREAM``, one per stream, which compaction keeps the last of). A batch is
appended in one piece (a SQLite transaction; on Kafka, the one record batch its producer
sends for a small batch), so its passengers come right before its own trailer, and a writer
that reads its head back (``head_from_tail``) never takes another stream's tombstones
for its own. Readers of those topics skip keys that are not theirs. (A batch cut short
before its trailer, on Kafka, was never sealed: its writer was told it failed.)

A chain that starts over. A new writer finds its stream's head by reading the topic back
from its end, and that read is bounded (``server.shell.audittrail``): on a topic written
for long before the trail existed, or where another stream wrote many records since this
one's last, the writer stops reading and starts a new chain (``fresh``) rather than stall
the leader's first write on a huge topic. Its seqs start at the topic's end offset as the
writer saw it, ``prev`` at ``GENESIS``, and its first carrier says so: ``"start": N``, the
chain's first seq. Every seq a stream ever used is at most its record's offset (each of
its records takes a new offset), so the new chain's seqs come after every earlier record
of the stream, and a checkpoint's seq still names one record. The check accepts such a
start and reports it ("chain starts at offset X, older records unchained"): the records
of the stream before it are not linked to what follows, only to what their own
checkpoints sealed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

FIELD: Final = "_chain"
GENESIS: Final = bytes(32)
_PREFIX: Final = b'{"' + FIELD.encode() + b'":'
# Each hash starts with its purpose, so a record's hash can never pass for a fold's.
_RECORD: Final = b"pushjobs.record\x00"
_FOLD: Final = b"pushjobs.fold\x00"


def content_hash(key: str, value: bytes | None) -> bytes:
    """SHA-256 of a record's key and stored value; a tombstone hashes as one."""
    h = hashlib.sha256(_RECORD)
    raw = key.encode()
    h.update(len(raw).to_bytes(4, "big"))
    h.update(raw)
    if value is None:
        h.update(b"\x00")
    else:
        h.update(b"\x01")
        h.update(value)
    return h.digest()


def fold(prev: bytes, content: bytes) -> bytes:
    """A passenger's link: the link before it and its own content hash."""
    return hashlib.sha256(_FOLD + prev + content).digest()


def carries(value: bytes | None) -> bool:
    """Whether a value can carry the ``_chain`` field: an encoded JSON object."""
    return value is not None and value[:1] == b"{" and value[-1:] == b"}"


@dataclass(frozen=True, slots=True)
class Link:
    """The ``_chain`` field of a carrier; ``start`` only on the first carrier of a chain
    that starts over (``fresh``): the chain's first seq."""

    by: str
    seq: int
    prev: bytes
    start: int | None = None

    def encode(self) -> bytes:
        field: dict[str, object] = {"by": self.by, "seq": self.seq, "prev": self.prev.hex()}
        if self.start is not None:
            field["start"] = self.start
        return orjson.dumps(field)


def splice(value: bytes, link: Link) -> bytes:
    """``value`` (an encoded JSON object) with ``_chain`` as its first field."""
    rest = value[1:]
    sep = b"" if rest.lstrip() == b"}" else b","
    return _PREFIX + link.encode() + sep + rest


def read_link(value: bytes | None) -> Link | None:
    """A record value's ``_chain`` field, or None (no field, or not a carrier, or not one
    that parses: a damaged field is a link that matches nothing). Only the field in front
    counts: a value read back and written again may hold an older one further on."""
    if value is None or not value.startswith(_PREFIX):
        return None
    start = len(_PREFIX)
    end = value.find(b"}", start)
    while end != -1:
        try:
            raw: Any = orjson.loads(value[start : end + 1])
            break
        except orjson.JSONDecodeError:
            end = value.find(b"}", end + 1)
    else:
        return None
    if not isinstance(raw, dict):
        return None
    by, seq, prev, first = raw.get("by"), raw.get("seq"), raw.get("prev"), raw.get("start")
    if not isinstance(by, str) or type(seq) is not int or not isinstance(prev, str):
        return None
    if first is not None and type(first) is not int:
        return None
    try:
        prev_raw = bytes.fromhex(prev)
    except ValueError:
        return None
    return Link(by, seq, prev_raw, first) if len(prev_raw) == 32 else None


@dataclass(frozen=True, slots=True)
class Head:
    """Where a stream stands: the seq and link of its last record (-1, GENESIS: none).
    ``start``: the stream starts over at that seq (``fresh``) and no carrier has said so
    yet; the next one will."""

    seq: int = -1
    link: bytes = GENESIS
    start: int | None = None


EMPTY: Final = Head()


def fresh(end_offset: int) -> Head:
    """The head of a chain that starts over on a topic whose end offset is ``end_offset``:
    its first record gets seq ``end_offset``, past every seq the stream used before."""
    return Head(end_offset - 1, GENESIS, end_offset)


@dataclass(frozen=True, slots=True)
class Entry:
    """One record as a checkpoint lists it: key, seq, content hash (None: tombstone)."""

    key: str
    seq: int
    content: bytes | None


@dataclass(frozen=True, slots=True)
class Linked:
    """A batch with its links: what to append, the head after it, and its entries."""

    batch: list[tuple[str, bytes | None]]
    head: Head
    entries: list[Entry]


def trailer_key(by: str) -> str:
    """The key of stream ``by``'s trailers: one per stream, so compaction keeps the last."""
    return f"{FIELD}/{by}"


def link_batch(
    by: str, head: Head, batch: Sequence[tuple[str, bytes | None]], *, shared: bool = False
) -> Linked:
    """Chain ``batch`` onto ``head`` of stream ``by``; on a ``shared`` topic, closed by a
    trailer if it ends with a passenger. Nothing changes until the caller, once the batch
    is durable, keeps ``Linked.head``."""
    if shared and batch and not carries(batch[-1][1]):
        batch = [*batch, (trailer_key(by), b"{}")]
    out: list[tuple[str, bytes | None]] = []
    entries: list[Entry] = []
    seq, link, start = head.seq, head.link, head.start
    for key, value in batch:
        seq += 1
        if value is not None and carries(value):
            carried = splice(value, Link(by, seq, link, start))
            start = None  # said once, by the chain's first carrier
            link = content_hash(key, carried)
            entries.append(Entry(key, seq, link))
            out.append((key, carried))
        else:
            content = content_hash(key, value)
            link = fold(link, content)
            entries.append(Entry(key, seq, None if value is None else content))
            out.append((key, value))
    return Linked(out, Head(seq, link, start), entries)


@dataclass(frozen=True, slots=True)
class TailRecord:
    """What ``head_from_tail`` needs of a record: key, value and offset, in offset order."""

    key: str
    value: bytes | None
    offset: int | None = None


def head_from_tail(by: str, tail: Sequence[TailRecord], end: int | None = None) -> Head | None:
    """The head of stream ``by`` from the last records of its topic (oldest first, up to
    ``end``, the topic's end offset): its last carrier, and the passengers after it if no
    carrier follows them (a passenger belongs to the carrier after it: see "Two writers on
    one topic" above); objects with no ``_chain`` (written outside any chain) are in no
    stream. None: no carrier of the stream in ``tail`` (the caller reads further back).

    A record missing after that carrier (a gap in the offsets: a compacted topic's cleaner
    removed a record superseded by a later tombstone, or a tombstone past its retention)
    may have been the stream's, and its link cannot be recomputed: the stream starts a new
    chain (``fresh(end)``) rather than link to a head the check would find altered."""
    for i in range(len(tail) - 1, -1, -1):
        link = read_link(tail[i].value)
        if link is None or link.by != by:
            continue
        at = tail[i].offset
        if end is not None and at is not None and end - at != len(tail) - i:
            return fresh(end)
        seq, head = link.seq, content_hash(tail[i].key, tail[i].value)
        after = tail[i + 1 :]
        if any(read_link(rec.value) is not None for rec in after):
            return Head(seq, head)  # the passengers after it are the later carrier's
        for rec in after:
            if carries(rec.value):
                continue  # written outside any chain: in none (``verifier`` skips it too)
            seq += 1
            head = fold(head, content_hash(rec.key, rec.value))
        return Head(seq, head)
    return None
