"""``pushjobs server list``'s table: one row per server, leader first as the server sorted
them, the one that answered marked, and a word when no server has written yet."""

from __future__ import annotations

from typing import Any

from pushjobs.cli.server_commands import render_list

ROWS: list[dict[str, Any]] = [
    {
        "name": "server",
        "incarnation": "aa11",
        "role": "leader",
        "epoch": 4,
        "last_pong_ms_ago": 420,
        "api": "tcp://10.0.0.5:7700",
        "heartbeat": "tcp://10.0.0.5:7701",
        "reply": "tcp://10.0.0.5:7702",
        "partitions": ["pushjobs.schedules.10", "pushjobs.schedules", "pushjobs.schedules.2"],
        "self": False,
    },
    {
        "name": "server",
        "incarnation": "bb22",
        "role": "standby",
        "epoch": None,
        "last_pong_ms_ago": 1260,
        "api": "tcp://10.0.0.6:7700",
        "heartbeat": "tcp://10.0.0.6:7701",
        "reply": "tcp://10.0.0.6:7702",
        "self": True,
    },
]


def test_one_row_per_server_with_role_epoch_last_pong_partitions_and_endpoints() -> None:
    # The schedule partitions each server fires: how many, then which (``old``: the topic
    # of schedules written before partitions); ``-`` for none, or a server that does not say.
    assert render_list(ROWS).splitlines() == [
        "server         role     epoch  last pong  partitions   api                  heartbeat"
        "            reply",
        "server:aa11    leader   4      0.4 s ago  3: old 2 10  tcp://10.0.0.5:7700"
        "  tcp://10.0.0.5:7701  tcp://10.0.0.5:7702",
        "server:bb22 *  standby  -      1.3 s ago  -            tcp://10.0.0.6:7700"
        "  tcp://10.0.0.6:7701  tcp://10.0.0.6:7702",
    ]


def test_no_server_yet_is_said_plainly() -> None:
    assert render_list([]) == "no server has written to the control topic yet"


def test_an_edge_of_its_own_shows_whom_it_serves_and_its_nodes() -> None:
    edge = {
        "name": "far-1",
        "incarnation": "cc33",
        "role": "edge",
        "epoch": None,
        "last_pong_ms_ago": 300,
        "api": "",
        "heartbeat": "tcp://10.0.0.9:7720",
        "reply": "tcp://10.0.0.9:7721",
        "partitions": [],
        "serves": "server:aa11",
        "nodes": 12345,
        "online": 12000,
        "capacity": 1.0,
        "rate": 12100.0,
        "lag_p99_ms": 6.2,
        "version": "0.1.0",
    }
    row = render_list([ROWS[0], edge]).splitlines()[2]
    assert row.split() == [
        "far-1:cc33",
        "edge",
        "serves",
        "server:aa11",
        "0.3",
        "s",
        "ago",
        "12,345",
        "nodes,",
        "12.1k/s,",
        "p99",
        "6.2",
        "ms",
        "-",
        "tcp://10.0.0.9:7720",
        "tcp://10.0.0.9:7721",
    ]
    looking = render_list([{**edge, "serves": ""}]).splitlines()[1]
    assert "serves nobody yet" in looking


def test_a_servers_own_edge_is_marked_and_an_empty_edge_states_no_load() -> None:
    own = {
        "name": "server-e0",
        "incarnation": "dd44",
        "role": "edge",
        "epoch": None,
        "last_pong_ms_ago": 420,
        "api": "",
        "heartbeat": "tcp://10.0.0.5:7710",
        "reply": "tcp://10.0.0.5:7711",
        "partitions": [],
        "serves": "server:aa11",
        "nodes": 850,
        "online": 850,
        "capacity": 1.0,
        "rate": 849.6,
        "lag_p99_ms": 12.0,
        "own": True,
    }
    lines = render_list([ROWS[0], own, {**own, "name": "server-e1", "nodes": 0}]).splitlines()
    assert "850 nodes, 850/s, p99 12 ms (own)" in lines[2]
    assert "0 nodes (own)" in lines[3] and "/s" not in lines[3]
