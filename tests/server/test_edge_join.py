"""Edges of their own joining a leader's pool: who is taken, who is refused, and where a
leader on SQLite lets them bind. Real sockets on 127.0.0.1; no edge process is started."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import zmq

from pushjobs.errors import ConfigError
from pushjobs.log.factory import LogSettings
from pushjobs.transport.sockets import Transport, bound_endpoint
from server.core import edgewire
from server.serverd import _edge_bind
from server.shell.edges import EdgePool
from server.shell.serverconfig import ServerConfig, ServerSection
from tests.support import curve_keys, wait_until

SPEC = {"server_name": "server"}


@pytest.fixture
def transport() -> Iterator[Transport]:
    with Transport() as t:
        yield t


def pool(transport: Transport, curve, *, bind: str) -> EdgePool:
    return EdgePool(transport, curve, count=0, spec=SPEC, interval_s=1.0, now=0.0, bind=bind)


def say_hello(transport: Transport, edges: EdgePool, curve, **hello: object) -> zmq.Socket:
    dealer = transport.socket(
        "dealer",
        connect=bound_endpoint(edges.router),
        curve_client=curve,
        server_public=curve.public,
    )
    payload = {"edge": "far-1", "endpoints": {"heartbeat": "tcp://h:1", "reply": "tcp://h:2"}}
    dealer.send_multipart(edgewire.encode(edgewire.HELLO, {**payload, **hello}))
    return dealer


def received(edges: EdgePool) -> bool:
    if edges.router.poll(50, zmq.POLLIN):
        edges.receive(1.0, 1000)
        return True
    return False


def heard_until(edges: EdgePool, done: Callable[[], bool]) -> None:
    """Read the channel until ``done()``."""

    def step() -> bool:
        received(edges)
        return done()

    wait_until(step, 5, 0.01)


def test_a_stated_capacity_weighs_where_nodes_are_placed(transport: Transport) -> None:
    curve = curve_keys()
    edges = pool(transport, curve, bind="tcp://127.0.0.1:0")
    say_hello(transport, edges, curve, remote=True, edge="big", capacity=3.0)
    say_hello(transport, edges, curve, remote=True, edge="small", capacity=1.0)
    heard_until(edges, lambda: len(edges.live()) == 2)
    placed = [edges.place(f"node-{i}") for i in range(4000)]
    big = sum(1 for p in placed if p is not None and p[0] == "big") / len(placed)
    assert abs(big - 0.75) < 0.03, big


def test_an_edge_of_its_own_joins_a_leader_that_takes_them(transport: Transport) -> None:
    curve = curve_keys()
    edges = pool(transport, curve, bind="tcp://127.0.0.1:0")
    say_hello(transport, edges, curve, remote=True, pid=4242)
    heard_until(edges, lambda: "far-1" in edges.edges)
    assert edges.live() == ["far-1"]
    row = edges.status()[0]
    assert row["remote"] and row["endpoints"] == {"heartbeat": "tcp://h:1", "reply": "tcp://h:2"}
    assert edges.place("node-1") == ("far-1", {"heartbeat": "tcp://h:1", "reply": "tcp://h:2"})
    # Silent past its window it is lost, not restarted: the leader did not start it.
    assert edges.tick(10.0) == ["far-1"]
    assert edges.live() == [] and edges.edges["far-1"].proc is None
    assert edges.ready()  # the edges it started (none) all serve


@pytest.mark.parametrize(
    ("bind", "hello"),
    [
        ("", {"remote": True}),  # this leader takes no edges of their own
        ("tcp://127.0.0.1:0", {}),  # an edge it did not start that does not say so
        ("tcp://127.0.0.1:0", {"remote": True, "edge": "bad name/../x"}),
        ("tcp://127.0.0.1:0", {"remote": True, "capacity": 0}),
        ("tcp://127.0.0.1:0", {"remote": True, "capacity": "lots"}),
        ("tcp://127.0.0.1:0", {"remote": True, "capacity": 1e9}),
    ],
)
def test_an_edge_not_invited_is_refused(transport: Transport, bind: str, hello) -> None:
    curve = curve_keys()
    edges = pool(transport, curve, bind=bind)
    say_hello(transport, edges, curve, **hello)
    heard_until(edges, lambda: edges.refused > 0)
    assert edges.refused == 1 and edges.live() == []
    assert edges.edges == {}  # nothing of it kept: no row, no slot of MAX_EDGES taken


@pytest.mark.parametrize(
    ("bind", "backend", "refused"),
    [
        ("tcp://0.0.0.0:7710", "sqlite", True),
        ("tcp://10.0.0.5:7710", "sqlite", True),
        ("tcp://127.0.0.1:7710", "sqlite", False),
        ("tcp://localhost:7710", "sqlite", False),
        ("tcp://0.0.0.0:7710", "kafka", False),
        ("", "sqlite", False),
    ],
)
def test_on_sqlite_edges_join_on_loopback_only(bind: str, backend: str, refused: bool) -> None:
    config = ServerConfig(server=ServerSection(edge_bind=bind), log=LogSettings(backend=backend))
    if refused:
        with pytest.raises(ConfigError, match="edges on other hosts need the Kafka backend"):
            _edge_bind(config)
    else:
        assert _edge_bind(config) == bind


def test_a_drained_edge_takes_no_node_and_is_told_which_to_move(transport: Transport) -> None:
    curve = curve_keys()
    edges = pool(transport, curve, bind="tcp://127.0.0.1:0")
    a = say_hello(transport, edges, curve, remote=True, edge="a")
    say_hello(transport, edges, curve, remote=True, edge="b")
    heard_until(edges, lambda: len(edges.live()) == 2)
    placed = {f"node-{i}": edges.place(f"node-{i}") for i in range(200)}
    on_a = sorted(n for n, p in placed.items() if p is not None and p[0] == "a")
    assert on_a
    edges.drain("a", 1.0, by="admin")
    edges.tick(1.0)
    kind, payload, _ = edgewire.decode(a.recv_multipart(), edgewire.TO_EDGE)
    assert kind == edgewire.MOVE and sorted(payload) == on_a
    # Rediscovering, they land on b; a is told to forget each.
    assert all(edges.place(n) is not None and edges.edge_of(n) == "b" for n in on_a)
    assert {r["edge"]: r["draining"] for r in edges.status()} == {"a": True, "b": False}
    # Asked again only after a while, for the nodes still on it (none now).
    edges.tick(2.0)
    forgets = 0
    while a.poll(100):
        kind, _, _ = edgewire.decode(a.recv_multipart(), edgewire.TO_EDGE)
        assert kind == edgewire.FORGET
        forgets += 1
    assert forgets == len(on_a)
    # Every edge draining: a fleet that cannot discover is worse; placed on them anyway.
    edges.drain("b", 3.0)
    assert edges.place("node-new") is not None
    edges.drain("a", 3.0, undo=True)
    assert all(edges.place(f"x-{i}")[0] == "a" for i in range(20))  # type: ignore[index]


def grants(dealer: zmq.Socket) -> list[tuple[int, int]]:
    out = []
    while dealer.poll(200, zmq.POLLIN):
        kind, payload, _ = edgewire.decode(dealer.recv_multipart(), edgewire.TO_EDGE)
        if kind == edgewire.GRANT:
            out.append(edgewire.decode_grant(payload))
    return out


def report(dealer: zmq.Socket, sent: int) -> None:
    dealer.send_multipart(edgewire.encode_report(edgewire.Report(sent=sent)))


def test_the_leader_grants_each_edge_from_the_latest_stamp_it_read(transport: Transport) -> None:
    curve = curve_keys()
    edges = pool(transport, curve, bind="tcp://127.0.0.1:0")
    dealer = say_hello(transport, edges, curve, remote=True, sent=1000)
    heard_until(edges, lambda: edges.live() == ["far-1"])
    edges.grant(2500)
    assert grants(dealer) == [(1000, 2500)]  # its first lease, at once
    for sent in (1100, 1300, 1200):  # out of order on the way: the latest counts
        report(dealer, sent)
    heard_until(edges, lambda: edges.edges["far-1"].to_grant == 1300)
    edges.grant(2000)
    assert grants(dealer) == [(1300, 2000)]
    edges.grant(2000)  # nothing read since: nothing to answer
    assert grants(dealer) == []


def test_a_server_that_does_not_lead_or_an_edge_lost_is_granted_nothing(
    transport: Transport,
) -> None:
    curve = curve_keys()
    edges = pool(transport, curve, bind="tcp://127.0.0.1:0")
    dealer = say_hello(transport, edges, curve, remote=True, sent=1000)
    heard_until(edges, lambda: edges.live() == ["far-1"])
    edges.grant(0)
    assert grants(dealer) == []
    assert edges.tick(100.0) == ["far-1"]  # silent past its window: lost
    report(dealer, 5000)

    def read_at_200() -> bool:
        edges.receive(200.0, 200_000)
        return edges.edges["far-1"].heard == 200.0

    wait_until(read_at_200, 5, 0.01)  # its report read, after the loss
    edges.grant(2500)
    assert grants(dealer) == []


def served(node: str, **changes: object) -> list[object]:
    entry: dict[str, object] = {
        "node": node,
        "key_ids": ["s1", "s2"],
        "curve": "c" * 40,
        "endpoint": "tcp://10.0.0.9:5000",
        "incarnation": "i1",
        "online": True,
        "facts": {"os": "linux"},
        "tags": ["web"],
    }
    entry.update(changes)
    return list(entry.values())


def test_an_edge_that_served_another_leader_brings_its_nodes_after_its_hello(
    transport: Transport,
) -> None:
    curve = curve_keys()
    edges = pool(transport, curve, bind="tcp://127.0.0.1:0")
    nodes = [
        served("node-1"),
        served("node-2", online=False),
        served("node-3", facts="not a table"),  # left out, counted
        ["too", "short"],
    ]
    dealer = say_hello(transport, edges, curve, remote=True)
    dealer.send_multipart(edgewire.encode(edgewire.SERVING, {"nodes": nodes}))
    heard_until(edges, lambda: bool(edges.joined))
    ((edge, brought),) = edges.take_joined()
    assert edge == "far-1" and [s.node for s in brought] == ["node-1", "node-2"]
    endpoint = "tcp://10.0.0.9:5000"
    assert brought[0] == edgewire.Served(
        "node-1", ("s1", "s2"), "c" * 40, endpoint, "i1", True, {"os": "linux"}, ("web",)
    )
    assert not brought[1].online
    assert edges.refused == 2
    assert edges.take_joined() == []  # taken once


def test_a_node_placed_elsewhere_since_is_not_taken_from_an_edge_that_brings_it(
    transport: Transport,
) -> None:
    curve = curve_keys()
    edges = pool(transport, curve, bind="tcp://127.0.0.1:0")
    say_hello(transport, edges, curve, remote=True, edge="a")
    say_hello(transport, edges, curve, remote=True, edge="b")
    heard_until(edges, lambda: len(edges.live()) == 2)
    assert edges.adopt("node-1", "a")
    assert edges.edge_of("node-1") == "a"
    assert not edges.adopt("node-1", "b")  # on a now: it stays there
    assert edges.edge_of("node-1") == "a"
