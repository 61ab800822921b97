"""The audit check: a log's chains and signed checkpoints, offline. Pure.

Theory of operation. ``verify`` takes the records of the audited topics (each in offset
order, with whether the topic is compacted), the records of the ``audit`` topic and a
verifier of the server's public key, and returns a ``Report``: every problem found, in
log order, the first one being the spot to look at. It reads no file and no clock: the
CLI (``pushjobs audit verify``) reads the log and renders the report.

Each topic is walked once. A record whose value has a ``_chain`` field (``chain.py``) is a
carrier of its stream; the tombstones and non-object values in between are passengers,
which the next carrier of a stream folds in: those among the passengers since its last
record whose fold its ``prev`` matches (the seq says how many; two streams may
interleave their tombstones, as a schedule's deletion and its owner's reply do; there a
writer closes such a batch with a trailer of its own, ``chain``, so a stream's passengers
are the ones right before its next record, which are tried first). A carrier must
follow the last record of its stream: the next ``seq``, and ``prev`` equal to that
record's link. Otherwise:

- ``reordered``: its seq is not after the stream's last one, or the seqs skipped before
  it come later in the topic (records moved, or two swapped);
- ``missing``: seqs skipped and found nowhere, on a topic that is not compacted (the
  cleaner of a compacted topic removes superseded records by design; the links around
  them cannot be checked, and the checkpoints' lists answer for what it keeps);
- ``altered``: the next seq, but ``prev`` is not the link of the record before it. Either
  that record changed (its bytes no longer hash to what its successor recorded) or this
  one's own field did; the carrier after tells which: if it links to this one, the one
  before changed.

Then every checkpoint on ``audit`` is checked: its signature first (``bad signature``
names it: a checkpoint forged or altered, or signed with another key), then what it seals:
the record at each head's seq must have that link, each listed record must be present
with that key and content hash, or be superseded by a later record of its key, or be a
tombstone (``altered``/``missing`` otherwise). A stream that ends before a sealed head
was cut short (``missing``).

What is not a problem but is said: records written before the trail existed (objects
with no ``_chain`` before a topic's first carrier: ``legacy``), the records past a
stream's last sealed head (``unsealed``: chained but not yet signed; the server signs
every ``audit_checkpoint_s``), and compaction gaps (``compacted``). A record with no
``_chain`` after a topic's first carrier is a problem (``unchained``): no server writes
one there.

A chain that starts over (``chain.fresh``: a new writer that did not find its stream's
head within its bounded read back) is said too (``Report.starts``: "chain starts at
offset X, older records unchained"). Its first carrier names its first seq (``start``);
the passengers before it fold from ``GENESIS`` at that seq. It must come after every
earlier record of its stream (``reordered`` otherwise) and its start can be no later than
its own offset (``altered``: a writer takes its seqs from the topic's end offset). The
records of the stream before it are checked by their own links and checkpoints only; a
sealed head gone from the gap before a start is ``missing``, as anywhere else.

Late writes on Kafka (``TopicRecords.late_writes``). Its brokers cannot refuse a deposed
leader's append that was already on its way when its successor took over: the record is
in the log, the deposed writer was told it failed, and readers drop it by its epoch
(``log.fold.fold_fenced``). Such a record is a carrier of its stream with a lower epoch
than one before it in the stream, or than one of a seq not after its own: it is counted
(``deposed``), not checked, and its stream goes on from its successor's records.

Memory: a few small tuples per record of the audited topics, a few hundred bytes each.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import combinations, islice
from typing import Final

from pushjobs.audit import checkpoint
from pushjobs.audit.chain import GENESIS, Head, Link, content_hash, fold, read_link
from pushjobs.errors import AuditError, SignatureError
from pushjobs.log.base import Record
from pushjobs.protocol.signing import Verifier

ALTERED: Final = "altered"
MISSING: Final = "missing"
REORDERED: Final = "reordered"
BAD_SIGNATURE: Final = "bad signature"
UNCHAINED: Final = "unchained"


@dataclass(frozen=True, slots=True)
class Problem:
    topic: str
    offset: int
    what: str
    detail: str


@dataclass(frozen=True, slots=True)
class TopicRecords:
    """One audited topic: its records in offset order, and whether it is compacted."""

    name: str
    compacted: bool
    records: Iterable[Record]
    outside_writers: bool = False
    """Records written outside the servers are expected here (the key registry's local
    admin mode): counted as ``outside``, not ``unchained``."""
    late_writes: bool = False
    """The log may hold a deposed writer's late records (Kafka): counted as ``deposed``."""


@dataclass(slots=True)
class TopicSummary:
    records: int = 0
    chained: int = 0
    legacy: int = 0
    outside: int = 0
    compacted_gaps: int = 0
    sealed: int = 0
    unsealed: int = 0
    streams: int = 0
    deposed: int = 0


@dataclass(frozen=True, slots=True)
class ChainStart:
    """A stream's chain starting over at ``offset`` (its first seq ``seq``): the records
    of the stream before it are not linked to it."""

    topic: str
    offset: int
    stream: str
    seq: int


@dataclass(slots=True)
class Report:
    problems: list[Problem] = field(default_factory=list)
    topics: dict[str, TopicSummary] = field(default_factory=dict)
    checkpoints: int = 0
    starts: list[ChainStart] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first(self) -> Problem | None:
        return self.problems[0] if self.problems else None


@dataclass(frozen=True, slots=True)
class _Item:
    """A record of a stream as the walk saw it."""

    offset: int
    key: str
    seq: int
    link: bytes
    content: bytes | None  # None: a tombstone


@dataclass(slots=True)
class _Stream:
    items: list[_Item] = field(default_factory=list)
    by_seq: dict[int, _Item] = field(default_factory=dict)
    # A link that did not match, judged at the stream's next carrier: (before, this).
    suspect: tuple[_Item, _Item] | None = None
    # Where the chain started over: (seq of the record before, first seq of the new one).
    restarts: list[tuple[int, int]] = field(default_factory=list)
    # The seqs whose bytes a signed checkpoint vouches for (a head, a listed record).
    confirmed: set[int] = field(default_factory=set)

    _last_of_key: dict[str, int] | None = None

    def add(self, item: _Item) -> None:
        self.items.append(item)
        self.by_seq[item.seq] = item

    def last_seq_of(self, key: str) -> int:
        """The seq of the stream's last record of ``key`` in the log, -1 if none."""
        if self._last_of_key is None:
            self._last_of_key = {item.key: item.seq for item in self.items}
        return self._last_of_key.get(key, -1)


class _Walk:
    """One topic's records, stream by stream (see the module docstring)."""

    def __init__(
        self, topic: TopicRecords, problems: list[Problem], starts: list[ChainStart]
    ) -> None:
        self.topic = topic
        self.problems = problems
        self.starts = starts
        self.summary = TopicSummary()
        self.streams: dict[str, _Stream] = {}
        # Every passenger, in offset order: each stream picks its own among those after
        # its last record (two streams may interleave their tombstones).
        self.passengers: list[Record] = []
        self.passenger_offsets: list[int] = []
        # Where each (stream, seq) appears: a skipped seq found later is a move, not a loss.
        self.later: dict[tuple[str, int], int] = {}

    def problem(self, offset: int, what: str, detail: str) -> None:
        self.problems.append(Problem(self.topic.name, offset, what, detail))

    def run(self) -> None:
        records = list(self.topic.records)
        self.summary.records = len(records)
        deposed = _deposed(records) if self.topic.late_writes else set()
        for rec in records:
            link = read_link(rec.value)
            if link is not None and rec.offset not in deposed:
                self.later.setdefault((link.by, link.seq), rec.offset)
        seen_carrier = False
        for rec in records:
            if rec.offset in deposed:
                self.summary.deposed += 1
                continue
            link = read_link(rec.value)
            if link is None:
                if rec.value is None or not rec.value.startswith(b"{"):
                    self.passengers.append(rec)
                    self.passenger_offsets.append(rec.offset)
                elif seen_carrier and self.topic.outside_writers:
                    self.summary.outside += 1
                elif seen_carrier:
                    self.problem(rec.offset, UNCHAINED, "an object with no _chain field")
                else:
                    self.summary.legacy += 1
                continue
            seen_carrier = True
            self.summary.chained += 1
            stream = self.streams.setdefault(link.by, _Stream())
            content = content_hash(rec.key, rec.value)
            item = _Item(rec.offset, rec.key, link.seq, content, content)
            for p in self._follow(stream, rec, link):
                stream.add(p)
            stream.add(item)
        self.summary.streams = len(self.streams)

    def judge_left(self) -> None:
        """The broken links no later carrier judged, once the checkpoints are read."""
        for stream in self.streams.values():
            self._unjudged(stream)

    def _unjudged(self, stream: _Stream) -> None:
        """A broken link no later carrier of its chain can judge: if a signed checkpoint
        vouches for the record after it, the one before changed; else both are named."""
        if stream.suspect is None:
            return
        before, this = stream.suspect
        stream.suspect = None
        if this.seq in stream.confirmed:
            self.problem(
                before.offset,
                ALTERED,
                f"it no longer hashes to what the next record of its stream recorded "
                f"(offset {this.offset}, sealed by a signed checkpoint)",
            )
            return
        self.problem(
            this.offset,
            ALTERED,
            f"its link does not match the record before it in its stream "
            f"(offset {before.offset}): one of the two was altered",
        )

    def _candidates(self, stream: _Stream) -> list[Record]:
        """The passengers after the stream's last record: some of them may be its own."""
        after = stream.items[-1].offset if stream.items else -1
        return self.passengers[bisect_right(self.passenger_offsets, after) :]

    def _fold_to(
        self,
        stream: _Stream,
        seq: int,
        link: bytes,
        candidates: Sequence[Record],
        base: tuple[int, bytes] | None = None,
    ) -> list[_Item] | None:
        """The passengers among ``candidates`` that, folded after ``base`` (by default the
        stream's last record), reach (``seq``, ``link``) with the record that follows them;
        None if none do."""
        last = stream.items[-1] if stream.items else None
        if base is None:
            base = (last.seq, last.link) if last is not None else (-1, GENESIS)
        base_seq, base_link = base
        wanted = seq - base_seq - 1
        if not 0 <= wanted <= len(candidates):
            return None
        for chosen in _choices(candidates, wanted):
            items = _folded(base_seq, base_link, chosen)
            if (items[-1].link if items else base_link) == link:
                return items
        return None

    def _follow(self, stream: _Stream, rec: Record, link: Link) -> list[_Item]:
        """Check a carrier against its stream's last record; the passengers it folds in."""
        if link.start is not None:
            return self._start(stream, rec, link, link.start)
        by, seq, later = link.by, link.seq, self.later
        last = stream.items[-1] if stream.items else None
        candidates = self._candidates(stream)
        items = self._fold_to(stream, seq, link.prev, candidates)
        if items is not None:
            self._judge(stream, ok=True)
            return items
        if last is None:
            return []  # the first record of the stream left: what came before is gone
        self._judge(stream, ok=False)
        if seq <= last.seq:
            self.problem(
                rec.offset,
                REORDERED,
                f"seq {seq} of stream {by} comes after seq {last.seq} (offset {last.offset})",
            )
            return []
        skipped = [s for s in range(last.seq + 1, seq) if (by, s) in later]
        if len(candidates) < seq - last.seq - 1:
            if skipped:
                self.problem(
                    rec.offset,
                    REORDERED,
                    f"seq {seq} of stream {by} comes before seq {skipped[0]} "
                    f"(offset {later[by, skipped[0]]})",
                )
            elif self.topic.compacted:
                self.summary.compacted_gaps += 1
            else:
                self.problem(
                    rec.offset,
                    MISSING,
                    f"seqs {last.seq + 1}..{seq - 1} of stream {by} are missing before it "
                    f"(after offset {last.offset})",
                )
            return []
        stream.suspect = (last, _Item(rec.offset, rec.key, seq, b"", None))
        return []

    def _start(self, stream: _Stream, rec: Record, link: Link, first: int) -> list[_Item]:
        """The first carrier of a chain that starts over at seq ``first``: after every
        earlier record of its stream, its passengers folded from ``GENESIS``."""
        by, last = link.by, stream.items[-1] if stream.items else None
        self._unjudged(stream)  # the chain before ends: nothing after it links to it
        if last is not None and first <= last.seq:
            self.problem(
                rec.offset,
                REORDERED,
                f"a new chain of stream {by} starting at seq {first} comes after seq "
                f"{last.seq} (offset {last.offset})",
            )
            return []
        if not first <= link.seq <= rec.offset:
            self.problem(
                rec.offset,
                ALTERED,
                f"seq {link.seq} of a chain of stream {by} said to start at seq {first}, "
                f"at offset {rec.offset}: no writer numbers a chain so",
            )
            return []
        base = (first - 1, GENESIS)
        items = self._fold_to(stream, link.seq, link.prev, self._candidates(stream), base)
        if items is None:
            self.problem(
                rec.offset,
                ALTERED,
                f"its link does not match the start of its chain (stream {by}, seq {first})",
            )
            return []
        stream.restarts.append((last.seq if last is not None else -1, first))
        at = items[0].offset if items else rec.offset  # its passengers come first
        self.starts.append(ChainStart(self.topic.name, at, by, first))
        return items

    def claim_trailing(self, stream: _Stream, head: Head) -> bool:
        """A sealed head past the stream's last carrier: passengers after it (a tombstone
        written last), if folding some of them in reaches it."""
        if not stream.items or head.seq <= stream.items[-1].seq:
            return False
        items = self._fold_passengers_to(stream, head)
        if items is None:
            return False
        for item in items:
            stream.add(item)
        return True

    def _fold_passengers_to(self, stream: _Stream, head: Head) -> list[_Item] | None:
        # A head is the last passenger's own link: as if a record with it followed.
        last = stream.items[-1]
        wanted = head.seq - last.seq
        candidates = self._candidates(stream)
        if not 0 < wanted <= len(candidates):
            return None
        for chosen in _choices(candidates, wanted):
            items = _folded(last.seq, last.link, chosen)
            if items[-1].link == head.link:
                return items
        return None

    def _judge(self, stream: _Stream, *, ok: bool) -> None:
        """The carrier after a broken link: linked to the suspect, the one before changed."""
        if stream.suspect is None:
            return
        before, this = stream.suspect
        stream.suspect = None
        if ok:
            self.problem(
                before.offset,
                ALTERED,
                f"it no longer hashes to what the next record of its stream recorded "
                f"(offset {this.offset})",
            )
        else:
            self.problem(
                this.offset,
                ALTERED,
                f"its link does not match the record before it (offset {before.offset})",
            )


MAX_CHOICES: Final = 4096  # subsets of passengers tried for one link, latest ones first


def _choices(candidates: Sequence[Record], size: int) -> Iterator[Sequence[Record]]:
    """Subsets of ``candidates`` of ``size``, in offset order, the latest ones first: a
    stream's own passengers are nearly always the ones just before its next record."""
    if size == 0:
        yield ()
        return
    newest_first = list(reversed(candidates))
    for combo in islice(combinations(newest_first, size), MAX_CHOICES):
        yield combo[::-1]


def _deposed(records: Sequence[Record]) -> set[int]:
    """The offsets of the carriers written by a deposed writer after its successor had
    taken its stream over (see the module docstring): a lower epoch than a carrier of the
    stream before it, or than a carrier of the stream of a seq not after its own."""
    fenced: dict[str, list[tuple[int, int, int]]] = {}  # stream: (epoch, seq, offset)
    for rec in records:
        link = read_link(rec.value)
        if link is not None and rec.epoch > 0:
            fenced.setdefault(link.by, []).append((rec.epoch, link.seq, rec.offset))
    deposed: set[int] = set()
    for carriers in fenced.values():
        highest = 0
        for epoch, _seq, offset in carriers:  # offset order: a successor's epoch seen before
            if epoch < highest:
                deposed.add(offset)
            highest = max(highest, epoch)
        lowest_seq: dict[int, int] = {}
        for epoch, seq, _offset in carriers:
            lowest_seq[epoch] = min(seq, lowest_seq.get(epoch, seq))
        # For each epoch, the lowest seq a higher epoch wrote: from the highest epoch down.
        successors: dict[int, int | None] = {}
        above: int | None = None
        for epoch in sorted(lowest_seq, reverse=True):
            successors[epoch] = above
            above = lowest_seq[epoch] if above is None else min(above, lowest_seq[epoch])
        for epoch, seq, offset in carriers:
            after = successors[epoch]
            if after is not None and after <= seq:
                deposed.add(offset)
    return deposed


def _folded(seq: int, link: bytes, passengers: Sequence[Record]) -> list[_Item]:
    """Passengers following the record (``seq``, ``link``) of a stream, folded in turn."""
    items = []
    for p in passengers:
        content = content_hash(p.key, p.value)
        seq, link = seq + 1, fold(link, content)
        items.append(_Item(p.offset, p.key, seq, link, None if p.value is None else content))
    return items


def verify(topics: Sequence[TopicRecords], audit: TopicRecords, verifier: Verifier) -> Report:
    """Check ``topics`` and the checkpoints on ``audit`` (see the module docstring)."""
    report = Report()
    audit = TopicRecords(audit.name, audit.compacted, list(audit.records))
    values = {rec.offset: rec.value for rec in audit.records}
    walks: dict[str, _Walk] = {}
    for topic in (*topics, audit):
        walk = _Walk(topic, report.problems, report.starts)
        walk.run()
        walks[topic.name] = walk
        report.topics[topic.name] = walk.summary
    audit_walk = walks[audit.name]
    sealed: dict[tuple[str, str], int] = {}
    for stream in audit_walk.streams.values():
        for item in stream.items:
            if item.content is None:
                continue
            try:
                cp = checkpoint.decode(values.get(item.offset), verifier)
            except SignatureError as exc:
                audit_walk.problem(item.offset, BAD_SIGNATURE, f"checkpoint: {exc}")
                continue
            except AuditError as exc:
                audit_walk.problem(item.offset, ALTERED, f"not a checkpoint: {exc}")
                continue
            report.checkpoints += 1
            for chain in cp.chains:
                sealed_walk = walks.get(chain.topic)
                if sealed_walk is not None:
                    _check_sealed(sealed_walk, chain, item.offset, sealed)
    for walk in walks.values():
        walk.judge_left()
    for name, walk in walks.items():
        for by, stream in walk.streams.items():
            head = sealed.get((name, by), -1)
            for item in stream.items:
                if item.seq <= head:
                    walk.summary.sealed += 1
                else:
                    walk.summary.unsealed += 1
    order = {t.name: i for i, t in enumerate((*topics, audit))}
    report.problems.sort(key=lambda p: (order.get(p.topic, len(order)), p.offset))
    report.starts.sort(key=lambda s: (order.get(s.topic, len(order)), s.offset))
    return report


def _check_sealed(
    walk: _Walk, chain: checkpoint.ChainState, at: int, sealed: dict[tuple[str, str], int]
) -> None:
    stream = walk.streams.get(chain.by)
    where = f"sealed by the checkpoint at {_audit_name(at)}"
    if chain.head.seq >= 0:
        key = (walk.topic.name, chain.by)
        sealed[key] = max(sealed.get(key, -1), chain.head.seq)
        item = stream.by_seq.get(chain.head.seq) if stream is not None else None
        if item is not None and item.link != chain.head.link:
            walk.problem(item.offset, ALTERED, f"not the head {where}")
        elif item is not None and stream is not None:
            stream.confirmed.add(item.seq)
        elif item is None and stream is not None and walk.claim_trailing(stream, chain.head):
            pass
        elif item is None:
            last = stream.items[-1] if stream is not None and stream.items else None
            if last is None or last.seq < chain.head.seq:
                walk.problem(
                    last.offset if last is not None else 0,
                    MISSING,
                    f"stream {chain.by} ends at seq {last.seq if last else -1}, but seq "
                    f"{chain.head.seq} was {where}",
                )
            elif stream is not None and not walk.topic.compacted:
                # No link crosses a chain's start: a cut just before one shows only here.
                for before, first in stream.restarts:
                    if before < chain.head.seq < first:
                        walk.problem(
                            _offset_after(stream, chain.head.seq),
                            MISSING,
                            f"seq {chain.head.seq} of stream {chain.by} is gone; it was {where}",
                        )
    for entry in chain.live:
        item = stream.by_seq.get(entry.seq) if stream is not None else None
        if item is not None:
            if item.key != entry.key or (
                entry.content is not None and item.content != entry.content
            ):
                walk.problem(item.offset, ALTERED, f"not the record of {entry.key!r} {where}")
            elif entry.content is not None and stream is not None:
                stream.confirmed.add(item.seq)
            continue
        if entry.content is None or stream is None:
            continue
        if stream.last_seq_of(entry.key) <= entry.seq:
            first = stream.items[0].seq if stream.items else 0
            if entry.seq >= first:
                walk.problem(
                    _offset_after(stream, entry.seq),
                    MISSING,
                    f"record {entry.key!r} (seq {entry.seq} of stream {chain.by}) is gone; it "
                    f"was {where} and nothing later replaced it",
                )


def _offset_after(stream: _Stream, seq: int) -> int:
    for item in stream.items:
        if item.seq > seq:
            return item.offset
    return stream.items[-1].offset if stream.items else 0


def _audit_name(offset: int) -> str:
    return f"audit offset {offset}"
