"""Membership: every server of an installation, its role and its endpoints (Shiva's ``control``).

Theory of operation. Each server appends one record about itself to the compacted
``control`` topic every lease renewal (a third of a session): key
``server:<name>:<incarnation>``, value ``{name, incarnation, role, epoch, api, heartbeat,
reply, ts, partitions, version, edges}`` with the endpoints it advertises, its wall time,
the schedule partitions it owns (``schedpartitions.py``: who fires what, for ``server
list`` and ``schedule show``; as of that record, written again at once when they change)
and, while it leads, the share of each edge it started itself (``Share``). The
leader's record is the ping, a standby's the pong; nobody answers anybody, so a server
that stops writing is simply forgotten once its record is stale. The same turn reads what
the others wrote since the offset last read and folds it (``Roster``, pure): the latest
record per key, a tombstone removing it. A server stopped cleanly (SIGTERM) writes its
tombstone. ``server.list`` reads the topic too (``rows``), so a server that just started
is listed at once, not at the next renewal.

Edges of their own (``pushjobs-edge``) write a record there too, keyed
``edge:<name>:<incarnation>``, role ``edge``: their endpoints, the leader incarnation they
serve, their nodes (those online too), stated capacity, load (heartbeats read per second,
their lag's p99) and version, at the same pace, and a tombstone when they stop or change
leaders. ``server list`` shows every edge with its share; nothing here counts them as
servers (no lease, no schedule partitions). No record is written per node: a node's edge
follows from its name and the edges' capacities (rendezvous hashing, at discovery), and
a leader that takes over learns each edge's nodes from the edge (``serving``).

Who leads, as far as the control topic knows (``Roster.leader``): of the records younger
than ``stale_ms`` (1.5 lease sessions: a leader writes every third of one, and its lease
is surely gone a session after its last poll) whose role is ``leader``, the one with the
highest epoch, then the newest. A standby names that server's API endpoint to the agents
and clients it refuses; it never names itself, and when it knows of no
leader (just deposed, or woken from a pause) it reads the topic again before it answers,
at most once per renewal period (``leader_api``). This is advice, not authority: the
lease and the epoch fence decide who leads, and a client sent to a server that is no
longer the leader is told so again.

Writes to ``control`` are unfenced (``Leadership.unfenced``): a standby must say it is
there. The leader's own record does carry its fence, so a deposed leader's late claim is
refused like any other of its writes. A write or read that fails (a log outage) is
logged once and retried at the next renewal; the roster keeps what it knew.

Killed at any line: nothing is lost that matters. A killed server leaves no tombstone;
its record goes stale after ``stale_ms`` and the topic's short retention drops it. A
restarted server is a new incarnation (a new key) and reads the topic from the start.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from pushjobs import __version__
from pushjobs.clock import Clock
from pushjobs.errors import ApiError, LogError
from pushjobs.log.base import OrderedLog
from server.shell.leadership import Leadership

log = logging.getLogger("pushjobs.server")

LEADER, STANDBY, EDGE = "leader", "standby", "edge"
STALE_SESSIONS = 1.5  # a record older than this many lease sessions is not believed
READ_BATCH = 1000
MAX_SHARES = 1024  # a leader's own edges in its record (``[server] edges`` is far fewer)
# ``server.list`` reads what was written since the last read, at most this often: a new
# server is listed as soon as it wrote its record, not at the next renewal, and a client
# asking in a loop costs one read (a few µs on SQLite, a round trip on Kafka) per 0.1 s.
LIST_READ_EVERY_S = 0.1


@dataclass(frozen=True, slots=True)
class Share:
    """One of a leader's own edges, as its leader's record states it."""

    name: str
    incarnation: str
    heartbeat: str
    reply: str
    nodes: int
    online: int
    capacity: float
    rate: float
    lag_p99_ms: float


@dataclass(frozen=True, slots=True)
class Member:
    """One server as its own latest record on the control topic describes it."""

    name: str
    incarnation: str
    role: str  # LEADER or STANDBY
    epoch: int | None  # the leader's fencing epoch; None for a standby
    api: str
    heartbeat: str
    reply: str
    ts: int  # wall ms when written
    # The schedule partitions (topics) it owned when it wrote this; empty in a record of
    # a version before ``server list`` showed them.
    partitions: tuple[str, ...] = ()
    # Where edges of their own (``pushjobs-edge``) join this leader, and what they must
    # know of it (``EDGE_FIELDS``); None when it takes none (no ``[server] edge_bind``).
    edge: dict[str, Any] | None = None
    # An edge's own record (role ``edge``, ``pushjobs-edge``): the leader incarnation it
    # serves ("" while it looks for one), its nodes and those online, its stated capacity
    # and its version. Its ``api`` is "" (an edge serves no API).
    serves: str = ""
    nodes: int = 0
    online: int = 0
    capacity: float = 1.0
    version: str = ""  # the pushjobs version that wrote it ("" before they said)
    # An edge's load besides its nodes: heartbeats read per second, their lag's p99.
    rate: float = 0.0
    lag_p99_ms: float = 0.0
    # A leader's own edges (those ``pushjobs-server`` starts), which write no record of
    # their own: each one's share, so that the record set tells every node share.
    edges: tuple[Share, ...] = ()

    @property
    def key(self) -> str:
        return record_key(self.name, self.incarnation, edge=self.role == EDGE)

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))


def advertised_api(bound: str, host: str) -> str:
    """The API endpoint other servers name to clients and agents: ``bound`` with its host
    replaced by ``host`` when set, or by this machine's name when it binds every interface
    (where a node or a CLI reaches it is not known here, its name is the best guess)."""
    host = host or (socket.getfqdn() if re.match(r"tcp://(0\.0\.0\.0|\*|\[::\]):", bound) else "")
    return re.sub(r"^tcp://(\[[^]]*\]|[^:]+):", f"tcp://{host}:", bound) if host else bound


LOOPBACK = re.compile(r"tcp://(127\.[0-9.]+|localhost|\[::1\]):")


def advertised_channel(bound: str, host: str) -> str:
    """The edge channel as named to edges: as ``advertised_api``, except that a channel
    bound on loopback is named as bound (``advertise_host`` is where nodes reach the
    server, which a loopback channel does not listen on)."""
    return bound if LOOPBACK.match(bound) else advertised_api(bound, host)


def record_key(name: str, incarnation: str, *, edge: bool = False) -> str:
    return f"{'edge' if edge else 'server'}:{name}:{incarnation}"


_TEXT = ("name", "incarnation", "role", "api", "heartbeat", "reply")
ROLES = (LEADER, STANDBY, EDGE)
EDGE_FIELDS = {
    "endpoint": str,
    "interval_s": float,
    "offline_threshold": int,
    "online_threshold": int,
    "max_skew_s": float,
    "max_header_bytes": int,
    "max_body_bytes": int,
}
"""A leader's ``edge``: its edge channel, and the settings its edges share with it."""


def _edge(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError("edge is not an object")
    out: dict[str, Any] = {}
    for name, kind in EDGE_FIELDS.items():
        value = raw.get(name)
        ok = (
            type(value) is str
            if kind is str
            else type(value) is int or (kind is float and type(value) is float)
        )
        if not ok:
            raise ValueError(f"edge.{name} is missing or not a {kind.__name__}")
        out[name] = value
    return out


def decode(value: bytes) -> Member:
    """A record's value as a ``Member``; ``ValueError`` if it is not one."""
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    if any(type(raw.get(k)) is not str for k in _TEXT) or raw["role"] not in ROLES:
        raise ValueError("a name, incarnation, role or endpoint is missing or not text")
    epoch, ts = raw.get("epoch"), raw.get("ts")
    if type(ts) is not int or (epoch is not None and type(epoch) is not int):
        raise ValueError("ts or epoch is not an integer")
    partitions = raw.get("partitions", [])
    if not isinstance(partitions, list) or any(type(t) is not str for t in partitions):
        raise ValueError("partitions is not a list of topics")
    serves, version = raw.get("serves", ""), raw.get("version", "")
    if type(serves) is not str or type(version) is not str:
        raise ValueError("serves or version is not text")
    load = _load(raw)
    edges = raw.get("edges", [])
    if not isinstance(edges, list) or len(edges) > MAX_SHARES:
        raise ValueError(f"edges is not a list of at most {MAX_SHARES}")
    return Member(
        **{k: raw[k] for k in _TEXT},
        epoch=epoch,
        ts=ts,
        partitions=tuple(partitions),
        edge=_edge(raw.get("edge")),
        serves=serves,
        version=version,
        edges=tuple(_share(e) for e in edges),
        **load,
    )


def _load(raw: dict[str, Any]) -> dict[str, Any]:
    """An edge's stated load (``nodes``, ``online``, ``capacity``, ``rate``,
    ``lag_p99_ms``), each absent one as a version before it wrote them."""
    nodes, online = raw.get("nodes", 0), raw.get("online", 0)
    if type(nodes) is not int or type(online) is not int:
        raise ValueError("nodes or online is not an integer")
    out: dict[str, Any] = {"nodes": nodes, "online": online}
    for name, default in (("capacity", 1.0), ("rate", 0.0), ("lag_p99_ms", 0.0)):
        value = raw.get(name, default)
        if type(value) not in (int, float):
            raise ValueError(f"{name} is not a number")
        out[name] = float(value)
    return out


def _share(raw: Any) -> Share:
    if not isinstance(raw, dict):
        raise ValueError("an edge's share is not an object")
    text = [raw.get(k) for k in ("name", "incarnation", "heartbeat", "reply")]
    if any(type(t) is not str for t in text):
        raise ValueError("an edge's name, incarnation or endpoint is missing or not text")
    name, incarnation, heartbeat, reply = map(str, text)
    return Share(name, incarnation, heartbeat, reply, **_load(raw))


class Roster:
    """The latest record of every server, folded from the control topic. Pure."""

    def __init__(self, stale_ms: int) -> None:
        self.stale_ms = stale_ms
        self.members: dict[str, Member] = {}
        self.bad = 0  # records that were not a member's: counted and skipped

    def apply(self, key: str, value: bytes | None) -> None:
        if value is None:
            self.members.pop(key, None)
            return
        try:
            member = decode(value)
        except ValueError as exc:
            self.bad += 1
            log.debug("control record %s skipped: %s", key, exc)
            return
        if member.key != key:
            self.bad += 1
            return
        self.members[key] = member

    def fresh(self, member: Member, now_ms: int) -> bool:
        return now_ms - member.ts <= self.stale_ms

    def owners(self, now_ms: int) -> dict[str, str]:
        """Schedule partition -> ``name:incarnation`` of the server whose fresh record says
        it owns it (the newest record, while a move is under way); a partition no fresh
        record names is absent (its owner died and the next has not said so yet)."""
        out: dict[str, tuple[int, str]] = {}
        for m in self.members.values():
            if not self.fresh(m, now_ms):
                continue
            for topic in m.partitions:
                if topic not in out or out[topic][0] < m.ts:
                    out[topic] = (m.ts, f"{m.name}:{m.incarnation}")
        return {topic: owner for topic, (_, owner) in out.items()}

    def leader(self, now_ms: int, *, besides: str | None = None) -> Member | None:
        """The leader as the records tell it (not ``besides``, an incarnation); None if no
        fresh record claims to lead."""
        claims = [
            m
            for m in self.members.values()
            if m.role == LEADER and m.incarnation != besides and self.fresh(m, now_ms)
        ]
        return max(claims, key=lambda m: (m.epoch or 0, m.ts), default=None)

    def rows(self, now_ms: int) -> list[dict[str, Any]]:
        """Every server known, leader first, then by name and incarnation."""
        leader = self.leader(now_ms)
        out: list[dict[str, Any]] = []
        for m in self.members.values():
            role = m.role if self.fresh(m, now_ms) else "gone"
            if m.role == LEADER and (leader is None or m.key != leader.key):
                role = "deposed" if self.fresh(m, now_ms) else "gone"
            out.append(
                {
                    "name": m.name,
                    "incarnation": m.incarnation,
                    "role": role,
                    "epoch": m.epoch,
                    "last_pong_ms_ago": max(0, now_ms - m.ts),
                    "api": m.api,
                    "heartbeat": m.heartbeat,
                    "reply": m.reply,
                    # A stale record's partitions have moved on (or will): none shown.
                    "partitions": sorted(m.partitions) if role in (LEADER, STANDBY) else [],
                    "version": m.version,
                }
            )
            if m.role == EDGE:
                served = self._serving(m)
                out[-1].update(
                    role=EDGE if role == EDGE else "gone",
                    # Its share: the nodes it holds, as of its last record.
                    nodes=m.nodes if role == EDGE else 0,
                    online=m.online if role == EDGE else 0,
                    capacity=m.capacity,
                    rate=m.rate if role == EDGE else 0.0,
                    lag_p99_ms=m.lag_p99_ms if role == EDGE else 0.0,
                    serves=served,
                    own=False,
                )
            elif role == LEADER:
                # Its own edges' shares, as fresh as its record; they go with it.
                out.extend(_own_edge_row(m, share, now_ms) for share in m.edges)
        order = {LEADER: 0, STANDBY: 1, EDGE: 2, "deposed": 3, "gone": 4}
        out.sort(key=lambda r: (order[r["role"]], r["name"], r["incarnation"]))
        return out

    def _serving(self, edge: Member) -> str:
        """``name:incarnation`` of the server ``edge`` serves, "" for none it knows."""
        for m in self.members.values():
            if m.role != EDGE and m.incarnation == edge.serves and edge.serves:
                return f"{m.name}:{m.incarnation}"
        return ""


def _own_edge_row(leader: Member, share: Share, now_ms: int) -> dict[str, Any]:
    """A ``server list`` row for one of ``leader``'s own edges, as ``rows`` shows an edge
    of its own (``own``: started by that server, not by an operator)."""
    return {
        "name": share.name,
        "incarnation": share.incarnation,
        "role": EDGE,
        "epoch": None,
        "last_pong_ms_ago": max(0, now_ms - leader.ts),
        "api": "",
        "heartbeat": share.heartbeat,
        "reply": share.reply,
        "partitions": [],
        "version": leader.version,
        "nodes": share.nodes,
        "online": share.online,
        "capacity": share.capacity,
        "rate": share.rate,
        "lag_p99_ms": share.lag_p99_ms,
        "serves": f"{leader.name}:{leader.incarnation}",
        "own": True,
    }


class Membership:
    """This server's part in the control topic: its record written, everyone's read."""

    def __init__(
        self,
        leadership: Leadership,
        name: str,
        incarnation: str,
        endpoints: dict[str, str],
        clock: Clock,
    ) -> None:
        self.leadership = leadership
        self.log: OrderedLog = leadership.log
        if leadership.control_topic is None:
            raise ValueError("membership needs a leadership that knows the control topic")
        self.topic = leadership.control_topic
        self.name = name
        self.incarnation = incarnation
        self.endpoints = endpoints  # api, heartbeat, reply: as advertised
        self.edge: dict[str, Any] | None = None  # named while it leads (``Member.edge``)
        self.clock = clock
        self.roster = Roster(round(STALE_SESSIONS * leadership.session_s * 1000))
        self.offset = 0
        self.failing = False
        self.next_lookup = 0.0  # monotonic: when ``leader_api`` may read the topic again
        self.next_list_read = 0.0  # monotonic: when ``rows`` may read the topic again
        # The schedule partitions this server owns now (the scheduler's, wired by serverd).
        self.partitions: Callable[[], Iterable[str]] = tuple
        self.written: tuple[str, ...] = ()  # the partitions of the record last written
        # The shares of this server's own edges while it leads (the edge pool's, wired by
        # serverd): the one place a share of theirs is written down.
        self.shares: Callable[[], Iterable[Share]] = tuple

    @classmethod
    def reader(cls, leadership: Leadership, clock: Clock) -> Membership | None:
        """A view of the control topic that writes nothing, this server known by the name
        and incarnation of its lease (``NAME:INCARNATION@HOST/PID``); None if the lease
        does not say them."""
        name, _, incarnation = leadership.member.member_id.rpartition("@")[0].partition(":")
        if leadership.control_topic is None or not name or not incarnation:
            return None
        return cls(leadership, name, incarnation, {}, clock)

    def me(self, now_ms: int) -> Member:
        leader = self.leadership.leader
        return Member(
            name=self.name,
            incarnation=self.incarnation,
            role=LEADER if leader else STANDBY,
            epoch=self.leadership.epoch,
            api=self.endpoints["api"],
            heartbeat=self.endpoints["heartbeat"],
            reply=self.endpoints["reply"],
            ts=now_ms,
            partitions=tuple(sorted(self.partitions())),
            edge=self.edge if leader else None,
            version=__version__,
            edges=tuple(self.shares()) if leader else (),
        )

    def beat(self) -> None:
        """Write this server's record, then read everyone's since last time."""
        now_ms = self.clock.wall_ms()
        me = self.me(now_ms)
        self.written = me.partitions
        try:
            self.leadership.append(self.topic, [(me.key, me.encode())])
            self.read()
        except (LogError, ApiError) as exc:
            if not self.failing:
                log.warning("server membership: the control topic failed: %s; retrying", exc)
            self.failing = True
            return
        if self.failing:
            log.info("server membership: the control topic works again")
        self.failing = False
        self.roster.apply(me.key, me.encode())  # this server as it is now, read or not

    def beat_if_moved(self) -> None:
        """Write this server's record now if its partitions changed since it last did:
        ``server list`` shows a move at once, not a renewal later."""
        if tuple(sorted(self.partitions())) != self.written:
            self.beat()

    def read(self) -> None:
        end = self.log.end_offset(self.topic)
        while self.offset < end:
            batch = self.log.read(self.topic, self.offset, READ_BATCH)
            if not batch:
                break
            for record in batch:
                self.roster.apply(record.key, record.value)
            self.offset = batch[-1].offset + 1

    def leader_api(self) -> str | None:
        """Where the leader's API is, as the control topic tells it; None if this server
        leads or no other server is known to."""
        if self.leadership.leader:
            return None
        found = self.roster.leader(self.clock.wall_ms(), besides=self.incarnation)
        if found is None and self.clock.monotonic() >= self.next_lookup:
            # Just deposed, or woken from a pause: what the others wrote since the last
            # renewal may say; asked at most once per renewal period, whoever is asking.
            self.next_lookup = self.clock.monotonic() + self.leadership.session_s / 3
            try:
                self.read()
            except LogError:
                return None
            found = self.roster.leader(self.clock.wall_ms(), besides=self.incarnation)
        return found.api if found is not None else None

    def live(self) -> list[str]:
        """Every server whose record is fresh (this one too), as ``name:incarnation``: what
        the schedule partitions are assigned over (``shell/schedpartitions.py``)."""
        now_ms = self.clock.wall_ms()
        fresh = {
            f"{m.name}:{m.incarnation}"
            for m in self.roster.members.values()
            if m.role != EDGE and self.roster.fresh(m, now_ms)
        }
        return sorted(fresh | {f"{self.name}:{self.incarnation}"})

    def rows(self) -> list[dict[str, Any]]:
        """Every server known, as the topic says now (``LIST_READ_EVERY_S``)."""
        self._refresh()
        return self.roster.rows(self.clock.wall_ms())

    def owners(self) -> dict[str, str]:
        """Schedule partition -> the server that owns it, as the records say now."""
        self._refresh()
        return self.roster.owners(self.clock.wall_ms())

    def _refresh(self) -> None:
        if self.clock.monotonic() >= self.next_list_read:
            self.next_list_read = self.clock.monotonic() + LIST_READ_EVERY_S
            # A log that fails: the roster as last read (the next renewal logs it).
            with contextlib.suppress(LogError):
                self.read()
        now_ms = self.clock.wall_ms()
        # This server as it is now (its partitions too), written or not.
        self.roster.apply(record_key(self.name, self.incarnation), self.me(now_ms).encode())

    def leave(self) -> None:
        """A clean stop: this server's record removed (a tombstone), best effort."""
        try:
            self.leadership.append(self.topic, [(record_key(self.name, self.incarnation), None)])
        except (LogError, ApiError) as exc:
            log.warning("server membership: could not say goodbye on the control topic: %s", exc)
