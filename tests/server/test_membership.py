"""Server membership on the control topic: the fold (who leads), and two servers writing
and reading it through their leaderships (fake clock, memory log)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from pushjobs import __version__
from pushjobs.api import methods
from pushjobs.clock import FakeClock
from pushjobs.errors import ApiError, BackendUnavailable
from pushjobs.log.base import Batch, Fence
from pushjobs.log.memory import MemoryLog, MemoryStore
from pushjobs.log.topics import create_standard_topics
from server.shell.leadership import Leadership
from server.shell.membership import (
    EDGE,
    LEADER,
    STANDBY,
    Member,
    Membership,
    Roster,
    Share,
    advertised_api,
    advertised_channel,
    decode,
)

SESSION_S = 1.5
STALE_MS = 2250  # 1.5 sessions
NOW = 1_700_000_000_000


def member(inc: str, role: str = STANDBY, *, epoch: int | None = None, ts: int = NOW) -> Member:
    return Member(
        name="server",
        incarnation=inc,
        role=role,
        epoch=epoch,
        api=f"tcp://h:{inc}",
        heartbeat=f"tcp://h:{inc}1",
        reply=f"tcp://h:{inc}2",
        ts=ts,
    )


def roster(*members: Member) -> Roster:
    r = Roster(STALE_MS)
    for m in members:
        r.apply(m.key, m.encode())
    return r


# --- the fold ------------------------------------------------------------------------------


def test_the_leader_is_the_fresh_claim_with_the_highest_epoch() -> None:
    old = member("a", LEADER, epoch=1, ts=NOW)  # deposed, not yet noticed: still claims
    new = member("b", LEADER, epoch=2, ts=NOW - 500)
    r = roster(old, new, member("c"))
    found = r.leader(NOW)
    assert found is not None and found.incarnation == "b"


def test_a_stale_claim_is_not_believed() -> None:
    r = roster(member("a", LEADER, epoch=3, ts=NOW - STALE_MS - 1), member("b"))
    assert r.leader(NOW) is None
    assert r.leader(NOW - 1) is not None  # one ms earlier it was still fresh


def test_a_server_never_names_itself() -> None:
    r = roster(member("a", LEADER, epoch=1), member("b"))
    assert r.leader(NOW, besides="a") is None


def test_the_latest_record_per_server_wins_and_a_tombstone_removes_it() -> None:
    r = roster(member("a", LEADER, epoch=1, ts=NOW - 100), member("a", STANDBY, ts=NOW))
    assert r.leader(NOW) is None  # a stood by after its claim
    r.apply(member("a").key, None)
    assert r.members == {}


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[1, 2]",
        b'{"name": "server"}',
        member("a").encode().replace(b'"standby"', b'"king"'),
        member("a").encode().replace(b'"epoch":null', b'"epoch":"7"'),
    ],
)
def test_a_record_that_is_not_a_members_is_counted_and_skipped(value: bytes) -> None:
    r = roster(member("b"))
    r.apply(member("a").key, value)
    assert r.bad == 1 and set(r.members) == {member("b").key}


def test_a_record_under_another_servers_key_is_refused() -> None:
    r = Roster(STALE_MS)
    r.apply(member("b").key, member("a", LEADER, epoch=9).encode())
    assert r.bad == 1 and r.leader(NOW) is None


def test_rows_put_the_leader_first_and_say_who_is_deposed_or_gone() -> None:
    r = roster(
        member("s"),
        member("gone", ts=NOW - STALE_MS - 1),
        member("old", LEADER, epoch=1),
        member("new", LEADER, epoch=2),
    )
    rows = r.rows(NOW + 10)
    assert [(row["incarnation"], row["role"]) for row in rows] == [
        ("new", LEADER),
        ("s", STANDBY),
        ("old", "deposed"),
        ("gone", "gone"),
    ]
    assert rows[0]["epoch"] == 2 and rows[0]["last_pong_ms_ago"] == 10
    assert rows[0]["api"] == "tcp://h:new"


def test_decode_reads_back_what_encode_wrote() -> None:
    m = member("a", LEADER, epoch=4)
    assert decode(m.encode()) == m


@pytest.mark.parametrize(
    ("bound", "host", "expected"),
    [
        ("tcp://127.0.0.1:7700", "", "tcp://127.0.0.1:7700"),
        ("tcp://127.0.0.1:7700", "pj1.example", "tcp://pj1.example:7700"),
        ("tcp://0.0.0.0:7700", "10.0.0.5", "tcp://10.0.0.5:7700"),
    ],
)
def test_the_api_endpoint_named_to_others(bound: str, host: str, expected: str) -> None:
    assert advertised_api(bound, host) == expected


def test_an_api_bound_to_every_interface_is_named_by_this_hosts_name() -> None:
    named = advertised_api("tcp://0.0.0.0:7700", "")
    assert named.startswith("tcp://") and named.endswith(":7700") and "0.0.0.0" not in named


# --- two servers on one log ------------------------------------------------------------------


class Server:
    def __init__(self, store: MemoryStore, clock: FakeClock, inc: str) -> None:
        self.log = MemoryLog(store, clock=clock)
        topics = create_standard_topics(self.log)
        self.topics = topics
        self.leadership = Leadership.join(self.log, topics, "pushjobs.", f"server:{inc}", SESSION_S)
        ends = {"api": f"tcp://h:{inc}", "heartbeat": "tcp://h:1", "reply": "tcp://h:2"}
        self.membership = Membership(self.leadership, "server", inc, ends, clock)

    def renew(self, clock: FakeClock) -> None:
        self.leadership.renew(clock.monotonic())
        self.membership.beat()


def two(clock: FakeClock) -> tuple[Server, Server]:
    store = MemoryStore()
    a, b = Server(store, clock, "a"), Server(store, clock, "b")
    a.renew(clock)
    b.renew(clock)
    a.renew(clock)  # a reads b's first record
    return a, b


def test_a_standby_names_the_leaders_api_and_the_leader_names_nobody() -> None:
    clock = FakeClock()
    a, b = two(clock)
    assert a.leadership.leader and not b.leadership.leader
    assert b.membership.leader_api() == "tcp://h:a"
    assert a.membership.leader_api() is None
    assert [(r["incarnation"], r["role"]) for r in a.membership.rows()] == [
        ("a", LEADER),
        ("b", STANDBY),
    ]


def test_after_a_takeover_the_new_leader_is_named_and_the_old_claim_goes_stale() -> None:
    clock = FakeClock()
    _a, b = two(clock)
    clock.advance(SESSION_S + 1)  # a is silent past its session (killed)
    b.renew(clock)
    assert b.leadership.leader
    rows = b.membership.rows()
    assert [(r["incarnation"], r["role"]) for r in rows] == [("b", LEADER), ("a", "gone")]
    assert rows[0]["epoch"] == b.leadership.epoch


def test_a_server_that_leaves_is_forgotten_by_the_others() -> None:
    clock = FakeClock()
    a, b = two(clock)
    b.membership.leave()
    clock.advance(SESSION_S / 3)
    a.renew(clock)
    assert [r["incarnation"] for r in a.membership.rows()] == ["a"]


def test_the_live_servers_are_the_fresh_records_and_this_one() -> None:
    clock = FakeClock()
    a, b = two(clock)
    assert a.membership.live() == b.membership.live() == ["server:a", "server:b"]
    clock.advance(SESSION_S * 1.5 + 0.1)  # b killed: its record goes stale
    a.renew(clock)
    assert a.membership.live() == ["server:a"]
    b.membership.leave()
    assert a.membership.live() == ["server:a"]


def test_a_reader_knows_this_server_by_its_lease_and_writes_nothing() -> None:
    clock = FakeClock()
    a, b = two(clock)
    before = a.log.end_offset(a.topics.control)
    reader = Membership.reader(b.leadership, clock)
    assert reader is not None and (reader.name, reader.incarnation) == ("server", "b")
    reader.read()
    assert reader.live() == ["server:a", "server:b"]
    assert a.log.end_offset(a.topics.control) == before
    plain = Leadership.join(a.log, a.topics, "pushjobs.", "x", SESSION_S)
    assert Membership.reader(plain, clock) is None  # no incarnation in its lease


def test_a_standby_writes_its_record_but_no_decision() -> None:
    clock = FakeClock()
    _a, b = two(clock)
    control = b.topics.control
    assert b.log.end_offset(control) >= 2
    for topic in (b.topics.commands, b.topics.assignments):
        with pytest.raises(ApiError) as raised:
            b.leadership.append(topic, [("job:x", b"{}")])
        assert raised.value.code == methods.NOT_LEADER
        assert b.log.end_offset(topic) == 0


def test_a_deposed_leaders_late_claim_is_fenced() -> None:
    clock = FakeClock()
    a, b = two(clock)
    clock.advance(SESSION_S + 1)
    b.renew(clock)  # b took over; a has not noticed
    a.membership.beat()  # its claim carries the old epoch: refused, and it stands by
    assert not a.leadership.leader
    latest = a.log.latest(a.topics.control)
    assert latest[a.membership.me(0).key].value is not None
    assert decode(latest["server:server:a"].value or b"").role == LEADER  # the old record
    assert a.membership.failing


class Outage(MemoryLog):
    """A log that refuses every write (a full disk, brokers down)."""

    def append_batch(self, topic: str, records: Batch, *, fence: Fence | None = None) -> list[int]:
        raise BackendUnavailable("disk full")


def test_a_log_outage_is_logged_once_and_the_roster_is_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    _a, b = two(clock)
    b.membership.log = Outage(MemoryStore(), clock=clock)
    b.leadership.log = b.membership.log
    before = dict(b.membership.roster.members)
    for _ in range(3):
        b.membership.beat()
    assert b.membership.failing and b.membership.roster.members == before
    assert caplog.text.count("control topic failed") == 1
    assert b.membership.leader_api() == "tcp://h:a"


def test_a_just_deposed_server_reads_the_topic_before_it_names_no_leader() -> None:
    clock = FakeClock()
    a, b = two(clock)
    clock.advance(SESSION_S + 1)  # a was stopped past its session
    b.renew(clock)  # b took over and said so
    a.leadership.renew(clock.monotonic())  # a wakes: deposed, no beat (no read) yet
    assert not a.leadership.leader
    assert a.membership.leader_api() == "tcp://h:b"


def test_a_server_just_started_is_listed_at_once_and_the_list_reads_at_most_every_tenth() -> None:
    clock = FakeClock()
    a, _b = two(clock)
    c = Server(a.log.store, clock, "c")
    c.renew(clock)  # its first record written; a's next renewal is up to a third away
    assert [(r["incarnation"], r["role"]) for r in a.membership.rows()] == [
        ("a", LEADER),
        ("b", STANDBY),
        ("c", STANDBY),
    ]
    d = Server(a.log.store, clock, "d")
    d.renew(clock)
    assert "d" not in [r["incarnation"] for r in a.membership.rows()]  # asked again at once
    clock.advance(0.1)
    assert "d" in [r["incarnation"] for r in a.membership.rows()]


# --- who fires what (issue 27, item 4) ------------------------------------------------------


def test_each_record_names_the_partitions_its_server_fires_and_a_stale_one_none() -> None:
    clock = FakeClock()
    a, b = two(clock)
    a.membership.partitions = lambda: {"p.schedules.1", "p.schedules"}
    b.membership.partitions = lambda: ["p.schedules.0"]
    a.membership.beat_if_moved()  # moved: written at once, not a renewal later
    b.membership.beat_if_moved()
    before = a.log.end_offset(a.topics.control)
    a.membership.beat_if_moved()  # unchanged: nothing written
    assert a.log.end_offset(a.topics.control) == before
    clock.advance(0.2)  # past ``LIST_READ_EVERY_S``: the list reads b's record
    rows = {r["incarnation"]: r["partitions"] for r in a.membership.rows()}
    assert rows == {"a": ["p.schedules", "p.schedules.1"], "b": ["p.schedules.0"]}
    assert a.membership.owners() == {
        "p.schedules": "server:a",
        "p.schedules.1": "server:a",
        "p.schedules.0": "server:b",
    }
    clock.advance(SESSION_S * 1.5 + 0.1)  # b killed: its partitions are no longer its
    a.renew(clock)
    rows = {r["incarnation"]: (r["role"], r["partitions"]) for r in a.membership.rows()}
    assert rows["b"] == ("gone", [])
    assert "p.schedules.0" not in a.membership.owners()


def test_while_a_partition_moves_the_newest_record_names_its_owner() -> None:
    r = roster(
        Member("s", "a", STANDBY, None, "x", "y", "z", NOW - 100, ("t.1", "t.2")),
        Member("s", "b", STANDBY, None, "x", "y", "z", NOW, ("t.2",)),
    )
    assert r.owners(NOW) == {"t.1": "s:a", "t.2": "s:b"}


def test_a_record_of_a_version_before_partitions_reads_as_none() -> None:
    value = b'{"name":"s","incarnation":"a","role":"standby","epoch":null,"api":"x",'
    value += b'"heartbeat":"y","reply":"z","ts":1}'
    assert decode(value).partitions == ()
    with pytest.raises(ValueError):
        decode(value[:-1] + b',"partitions":[1]}')


# --- where edges of their own join -------------------------------------------------------------

CHANNEL = {
    "endpoint": "tcp://h:7710",
    "interval_s": 1.0,
    "offline_threshold": 3,
    "online_threshold": 2,
    "max_skew_s": 30.0,
    "max_header_bytes": 4096,
    "max_body_bytes": 65536,
}


def test_a_leaders_edge_channel_is_read_back_and_a_bad_one_refused() -> None:
    m = dataclasses.replace(member("a", LEADER, epoch=2), edge=CHANNEL)
    assert decode(m.encode()) == m
    for bad in ("tcp://h:1", {**CHANNEL, "endpoint": 7}, {**CHANNEL, "offline_threshold": 3.5}):
        raw = orjson.loads(m.encode())
        raw["edge"] = bad
        with pytest.raises(ValueError, match="edge"):
            decode(orjson.dumps(raw))
    missing = {k: v for k, v in CHANNEL.items() if k != "max_skew_s"}
    with pytest.raises(ValueError, match=r"edge\.max_skew_s"):
        decode(orjson.dumps({**orjson.loads(m.encode()), "edge": missing}))


def test_only_the_leader_names_its_edge_channel() -> None:
    clock = FakeClock()
    a, b = two(clock)
    for server in (a, b):
        server.membership.edge = CHANNEL
        server.renew(clock)
    assert a.membership.me(NOW).edge == CHANNEL
    assert b.membership.me(NOW).edge is None
    leader = b.membership.roster.leader(clock.wall_ms())
    assert leader is not None and leader.edge == CHANNEL


def edge_member(inc: str = "e1", *, serves: str = "a", ts: int = NOW) -> Member:
    return Member(
        name="far-1",
        incarnation=inc,
        role=EDGE,
        epoch=None,
        api="",
        heartbeat="tcp://h:7720",
        reply="tcp://h:7721",
        ts=ts,
        serves=serves,
        nodes=120,
        online=118,
        capacity=2.0,
        version="0.1.0",
    )


def test_an_edges_record_is_listed_with_whom_it_serves_and_is_no_server() -> None:
    edge = edge_member()
    assert edge.key == "edge:far-1:e1" and decode(edge.encode()) == edge
    r = roster(member("a", LEADER, epoch=3), member("b"), edge)
    assert r.leader(NOW) is not None and r.leader(NOW).incarnation == "a"
    rows = r.rows(NOW)
    assert [row["role"] for row in rows] == [LEADER, STANDBY, EDGE]
    assert rows[2]["last_pong_ms_ago"] == 0
    assert (rows[2]["serves"], rows[2]["nodes"], rows[2]["capacity"]) == ("server:a", 120, 2.0)
    stale = roster(edge_member(ts=NOW - STALE_MS - 1)).rows(NOW)[0]
    assert (stale["role"], stale["nodes"], stale["serves"]) == ("gone", 0, "")


def test_edges_get_no_schedule_partitions() -> None:
    clock = FakeClock()
    a, _ = two(clock)
    a.membership.roster.apply("edge:far-1:e1", edge_member(ts=clock.wall_ms()).encode())
    assert all(not name.startswith("far-1") for name in a.membership.live())


@pytest.mark.parametrize(
    ("bound", "host", "expected"),
    [
        # On loopback (SQLite): named as bound, whatever address the nodes are given.
        ("tcp://127.0.0.1:7730", "10.0.0.5", "tcp://127.0.0.1:7730"),
        ("tcp://0.0.0.0:7730", "10.0.0.5", "tcp://10.0.0.5:7730"),
        ("tcp://10.0.0.7:7730", "", "tcp://10.0.0.7:7730"),
    ],
)
def test_the_edge_channel_named_to_edges(bound: str, host: str, expected: str) -> None:
    assert advertised_channel(bound, host) == expected


SHARE = Share(
    name="server-e0",
    incarnation="f00d",
    heartbeat="tcp://h:7710",
    reply="tcp://h:7711",
    nodes=850,
    online=849,
    capacity=1.0,
    rate=851.5,
    lag_p99_ms=6.0,
)


def test_a_leaders_own_edges_are_listed_from_its_record_and_go_with_it() -> None:
    leader = dataclasses.replace(member("a", LEADER, epoch=3), edges=(SHARE,), version="0.1.0")
    assert decode(leader.encode()) == leader
    rows = roster(leader, edge_member()).rows(NOW + 5)
    assert [(row["name"], row["role"], row.get("own")) for row in rows] == [
        ("server", LEADER, None),
        ("far-1", EDGE, False),
        ("server-e0", EDGE, True),
    ]
    own = rows[2]
    assert (own["serves"], own["nodes"], own["online"]) == ("server:a", 850, 849)
    assert (own["rate"], own["lag_p99_ms"], own["incarnation"]) == (851.5, 6.0, "f00d")
    assert (own["heartbeat"], own["last_pong_ms_ago"]) == ("tcp://h:7710", 5)
    assert rows[1]["rate"] == 0.0  # an edge of a version that stated no rate
    # A deposed or stale leader's own edges are not listed: they serve no leader.
    deposed = roster(leader, member("b", LEADER, epoch=4)).rows(NOW)
    assert [row["name"] for row in deposed if row["role"] == EDGE] == []
    stale = roster(dataclasses.replace(leader, ts=NOW - STALE_MS - 1)).rows(NOW)
    assert [row["role"] for row in stale] == ["gone"]


@pytest.mark.parametrize(
    "edges",
    [
        "server-e0",
        [{**dataclasses.asdict(SHARE), "nodes": "850"}],
        [{**dataclasses.asdict(SHARE), "rate": None}],
        [{k: v for k, v in dataclasses.asdict(SHARE).items() if k != "reply"}],
        [dataclasses.asdict(SHARE)] * 1025,
    ],
)
def test_a_leader_record_with_bad_edge_shares_is_skipped(edges: object) -> None:
    raw = orjson.loads(dataclasses.replace(member("a", LEADER, epoch=3), edges=(SHARE,)).encode())
    raw["edges"] = edges
    r = Roster(STALE_MS)
    r.apply(member("a").key, orjson.dumps(raw))
    assert r.bad == 1 and r.members == {}


def test_the_leader_writes_its_own_edges_shares_and_its_version_a_standby_neither() -> None:
    clock = FakeClock()
    a, b = two(clock)
    for server in (a, b):
        server.membership.shares = lambda: [SHARE]
    me = a.membership.me(NOW)
    assert me.edges == (SHARE,) and me.version == __version__
    assert b.membership.me(NOW).edges == () and b.membership.me(NOW).version == __version__
