"""Hand-made chained logs for the audit tests: streams appended through ``link_batch``,
checkpoints signed with a throwaway key, and the ways to tamper with them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from pushjobs.audit import checkpoint
from pushjobs.audit.chain import EMPTY, Head, fresh, link_batch
from pushjobs.audit.verifier import Report, TopicRecords, verify
from pushjobs.log.base import Record
from pushjobs.protocol.signing import Ed25519Signer, Ed25519Verifier, ed25519_verifier

AUDIT = "audit"


def keypair() -> tuple[Ed25519Signer, Ed25519Verifier]:
    private = Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return Ed25519Signer("test-key", private), ed25519_verifier(raw)


@dataclass
class Trail:
    """Topics of records, written as a server would: chained per stream, checkpointed."""

    signer: Ed25519Signer
    compacted: set[str] = field(default_factory=set)
    topics: dict[str, list[Record]] = field(default_factory=dict)
    heads: dict[tuple[str, str], Head] = field(default_factory=dict)
    ledger: checkpoint.Ledger = field(default_factory=checkpoint.Ledger)

    def append(
        self,
        topic: str,
        batch: Sequence[tuple[str, bytes | None]],
        by: str = "leader",
        epoch: int = 0,
    ) -> None:
        linked = link_batch(by, self.heads.get((topic, by), EMPTY), batch)
        records = self.topics.setdefault(topic, [])
        for key, value in linked.batch:
            records.append(Record(topic, len(records), key, value, 0, epoch))
        self.heads[topic, by] = linked.head
        self.ledger.note(topic, by, linked, compacted=topic in self.compacted)

    def event(
        self, topic: str, n: int, key: str = "job:1", by: str = "leader", epoch: int = 0
    ) -> None:
        self.append(topic, [(key, orjson.dumps({"n": n}))], by, epoch)

    def start_over(self, topic: str, by: str = "leader") -> None:
        """Stream ``by`` starts a new chain, as a writer that did not find its head does."""
        self.heads[topic, by] = fresh(len(self.topics.get(topic, [])))

    def legacy(self, topic: str, n: int) -> None:
        """``n`` records written before the trail existed: objects with no chain."""
        records = self.topics.setdefault(topic, [])
        for i in range(n):
            records.append(Record(topic, len(records), f"job:old{i}", b'{"old":true}', 0))

    def checkpoint(self, signer: Ed25519Signer | None = None) -> None:
        signer = signer or self.signer
        for cp in self.ledger.take("s1", 1, signer.key_id):
            self.append(AUDIT, [("checkpoint:s1", checkpoint.encode(cp, signer))], "s1/inc")

    def check(self, verifier: Ed25519Verifier) -> Report:
        topics = [
            TopicRecords(name, name in self.compacted, recs)
            for name, recs in self.topics.items()
            if name != AUDIT
        ]
        return verify(topics, TopicRecords(AUDIT, False, self.topics.get(AUDIT, [])), verifier)

    # --- tampering --------------------------------------------------------------------

    def change_byte(self, topic: str, offset: int, old: bytes, new: bytes) -> None:
        recs = self.topics[topic]
        i = next(i for i, r in enumerate(recs) if r.offset == offset)
        assert recs[i].value is not None and old in recs[i].value
        recs[i] = replace(recs[i], value=recs[i].value.replace(old, new, 1))

    def remove(self, topic: str, offset: int) -> None:
        self.topics[topic] = [r for r in self.topics[topic] if r.offset != offset]

    def swap(self, topic: str, offset: int) -> None:
        recs = self.topics[topic]
        i = next(i for i, r in enumerate(recs) if r.offset == offset)
        a, b = recs[i], recs[i + 1]
        recs[i] = replace(b, offset=a.offset)
        recs[i + 1] = replace(a, offset=b.offset)

    def compact(self, topic: str) -> None:
        """What a compacted topic's cleaner keeps: the latest record of each key."""
        latest = {r.key: r.offset for r in self.topics[topic]}
        self.topics[topic] = [r for r in self.topics[topic] if latest[r.key] == r.offset]
