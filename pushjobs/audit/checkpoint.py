"""Checkpoints: a writer's signed statement of where its streams stand. Pure.

Theory of operation. A server that appends chained records (``chain.py``) notes each
durable batch in its ``Ledger``; every ``audit_checkpoint_s`` (and when it stops) it
writes what changed since its last checkpoint to the ``audit`` topic, signed with the
server's Ed25519 identity key, the one ``pushjobs audit verify`` takes:

    {"body": {"kind": "checkpoint", "server": NAME, "ts": MS, "key_id": KEY_ID,
              "chains": [{"topic": T, "by": STREAM, "seq": N, "link": HEX,
                          "live": [[KEY, SEQ, HEX or null], ...]}]},
     "sig": HEX}

The signature covers the body encoded with sorted keys (its values are strings, integers,
nulls and lists: one encoding). ``seq``/``link`` name the stream's head: every record of
the stream up to it is sealed, since altering, removing or moving one changes every link
after it. ``live`` is there for the compacted topics, whose cleaner removes superseded
records and with them the links between the survivors: it lists, for each key the stream
wrote since its last checkpoint, the seq and content hash of its latest record then (null:
a tombstone). What compaction keeps of a topic is the latest record of each key, and that
record was the latest of its key in its own checkpoint interval, so it is listed: the
verifier checks it by its content hash alone, whatever compaction removed around it. A
listed record may be absent only if a later record of its key exists (it was superseded
and compacted away) or it was a tombstone (which compaction removes in time).

A checkpoint is written as one or more records (``MAX_ENTRIES`` listed records each, under
the log's value limit), each signed and complete in itself. The audit topic is itself
chained, one stream per server incarnation, so a checkpoint removed or moved shows too.

Killed at any line: what was noted since the last checkpoint is lost with the process.
Those records are still chained; the next writer of the stream links to them and seals
them with its first checkpoint, by head (a compacted topic's record of that gap that is
superseded later is then only known by the links around it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from pushjobs.audit.chain import Entry, Head, Linked
from pushjobs.errors import AuditError, SignatureError
from pushjobs.protocol.signing import Signer, Verifier

KIND: Final = "checkpoint"
MAX_ENTRIES: Final = 4000  # about 120 bytes each: a record stays far under 1 MiB


@dataclass(frozen=True, slots=True)
class ChainState:
    """One stream's part of a checkpoint."""

    topic: str
    by: str
    head: Head
    live: tuple[Entry, ...] = ()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    server: str
    ts_ms: int
    key_id: str
    chains: tuple[ChainState, ...]


def _body(cp: Checkpoint) -> dict[str, Any]:
    return {
        "kind": KIND,
        "server": cp.server,
        "ts": cp.ts_ms,
        "key_id": cp.key_id,
        "chains": [
            {
                "topic": c.topic,
                "by": c.by,
                "seq": c.head.seq,
                "link": c.head.link.hex(),
                "live": [
                    [e.key, e.seq, None if e.content is None else e.content.hex()] for e in c.live
                ],
            }
            for c in cp.chains
        ],
    }


def _signed_bytes(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def encode(cp: Checkpoint, signer: Signer) -> bytes:
    body = _body(cp)
    return orjson.dumps({"body": body, "sig": signer.sign(_signed_bytes(body)).hex()})


def decode(value: bytes | None, verifier: Verifier) -> Checkpoint:
    """A checkpoint record back, its signature checked first: ``SignatureError`` if it
    does not verify with ``verifier``, ``AuditError`` if it is not a checkpoint."""
    try:
        doc = orjson.loads(value) if value is not None else None
    except orjson.JSONDecodeError:
        raise AuditError("not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("sig"), str):
        raise AuditError("not a signed checkpoint")
    body = doc.get("body")
    try:
        sig = bytes.fromhex(doc["sig"])
    except ValueError:
        raise SignatureError("the signature is not hex") from None
    verifier.verify(_signed_bytes(body), sig)
    try:
        return _parse(body)
    except (KeyError, TypeError, ValueError) as exc:
        raise AuditError(f"a signed checkpoint that does not parse: {exc!r}") from None


def _parse(body: Any) -> Checkpoint:
    if not isinstance(body, dict) or body.get("kind") != KIND:
        raise ValueError("not a checkpoint body")
    chains = tuple(
        ChainState(
            str(c["topic"]),
            str(c["by"]),
            Head(int(c["seq"]), bytes.fromhex(c["link"])),
            tuple(
                Entry(str(key), int(seq), None if h is None else bytes.fromhex(h))
                for key, seq, h in c["live"]
            ),
        )
        for c in body["chains"]
    )
    return Checkpoint(str(body["server"]), int(body["ts"]), str(body["key_id"]), chains)


@dataclass(slots=True)
class _Noted:
    head: Head
    compacted: bool
    live: dict[str, Entry] = field(default_factory=dict)


class Ledger:
    """What a writer appended since its last checkpoint, per stream (topic, by)."""

    def __init__(self) -> None:
        self._noted: dict[tuple[str, str], _Noted] = {}

    def __bool__(self) -> bool:
        return bool(self._noted)

    def note(self, topic: str, by: str, linked: Linked, *, compacted: bool) -> None:
        """A durable batch: its stream's head moves; a compacted topic's keys are listed."""
        noted = self._noted.get((topic, by))
        if noted is None:
            noted = self._noted[topic, by] = _Noted(linked.head, compacted)
        noted.head = linked.head
        if compacted:
            for entry in linked.entries:
                noted.live[entry.key] = entry

    def take(self, server: str, ts_ms: int, key_id: str) -> list[Checkpoint]:
        """The checkpoint records of what was noted (none if nothing was), the ledger
        emptied: ``MAX_ENTRIES`` listed records a record at most; a stream listing more
        is cut in parts, the first ones naming no head (seq -1)."""
        noted, self._noted = self._noted, {}
        parts: list[list[ChainState]] = [[]]
        room = MAX_ENTRIES
        for (topic, by), n in sorted(noted.items()):
            entries: Sequence[Entry] = sorted(n.live.values(), key=lambda e: e.seq)
            while len(entries) > room:
                parts[-1].append(ChainState(topic, by, Head(), tuple(entries[:room])))
                entries = entries[room:]
                parts.append([])
                room = MAX_ENTRIES
            parts[-1].append(ChainState(topic, by, n.head, tuple(entries)))
            room -= len(entries)
        return [Checkpoint(server, ts_ms, key_id, tuple(p)) for p in parts if p]

    def restore(self, parts: Sequence[Checkpoint]) -> None:
        """Checkpoints ``take`` gave that were not written: noted again, under what was
        noted since (the newer head and the newer record of a key win)."""
        for cp in parts:
            for c in cp.chains:
                noted = self._noted.setdefault((c.topic, c.by), _Noted(c.head, bool(c.live)))
                if c.head.seq > noted.head.seq:
                    noted.head = c.head
                for e in c.live:
                    known = noted.live.get(e.key)
                    if known is None or known.seq < e.seq:
                        noted.live[e.key] = e
