"""The pure parts of the leader and its edges: placement, the channel's messages, the
leader's liveness with edges, and what an edge passes on of its nodes' heartbeats."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pushjobs.config import load_config
from pushjobs.errors import ConfigError, MalformedMessage
from pushjobs.protocol.framing import seal
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import AckCommit, NodeHeartbeat
from pushjobs.protocol.signing import HmacSigner
from server.core import edgeliveness, edgewire, rendezvous
from server.core.edgeliveness import EdgeLiveness
from server.edge.edged import EdgeSpec
from server.edge.edgeintake import BATCH as EDGE_BATCH
from server.edge.edgeintake import TRICKLE_S, EdgeIntake
from server.front.sessions import SessionKeys
from server.shell.serverconfig import ServerConfig

NODES = [f"node-{i:05d}" for i in range(20_000)]


def test_nodes_spread_evenly_over_the_edges() -> None:
    edges = ["e0", "e1", "e2", "e3"]
    counts = {e: 0 for e in edges}
    for node in NODES:
        edge = rendezvous.pick(node, edges)
        assert edge is not None
        counts[edge] += 1
    for count in counts.values():
        assert abs(count - len(NODES) / 4) < 0.05 * len(NODES) / 4


def test_adding_an_edge_moves_only_its_share_and_losing_one_only_its_nodes() -> None:
    before = {n: rendezvous.pick(n, ["e0", "e1", "e2"]) for n in NODES}
    after = {n: rendezvous.pick(n, ["e0", "e1", "e2", "e3"]) for n in NODES}
    moved = [n for n in NODES if before[n] != after[n]]
    assert all(after[n] == "e3" for n in moved)  # only onto the new edge
    assert abs(len(moved) / len(NODES) - 1 / 4) < 0.02
    lost = {n: rendezvous.pick(n, ["e0", "e2"]) for n in NODES}
    assert all(lost[n] == before[n] for n in NODES if before[n] != "e1")


def test_weights_give_shares_in_proportion_and_adding_an_edge_moves_only_onto_it() -> None:
    weights = {"e0": 2.0, "e1": 1.0, "e2": 1.0}
    edges = list(weights)
    before = {n: rendezvous.pick(n, edges, weights) for n in NODES}
    for edge, weight in weights.items():
        share = sum(1 for n in NODES if before[n] == edge) / len(NODES)
        assert abs(share - weight / 4) < 0.02, (edge, share)
    grown = {**weights, "e3": 4.0}  # as much as the others together
    after = {n: rendezvous.pick(n, list(grown), grown) for n in NODES}
    moved = [n for n in NODES if before[n] != after[n]]
    assert all(after[n] == "e3" for n in moved)
    assert abs(len(moved) / len(NODES) - 4 / 8) < 0.02


def test_equal_weights_pick_as_no_weights_do() -> None:
    edges = ["e0", "e1", "e2"]
    same = {e: 3.0 for e in edges}
    assert all(rendezvous.pick(n, edges, same) == rendezvous.pick(n, edges) for n in NODES)


def test_no_live_edge_places_nobody() -> None:
    assert rendezvous.pick("node-1", []) is None


def test_a_report_goes_through_the_channel_unchanged() -> None:
    report = edgewire.Report(
        online=[("n1", "inc", "tcp://h:1")],
        offline=[("n2", "node went offline")],
        restarted=[("n3", "inc2")],
        beats=[("n1", "job", "running", 123), ("n4", None, None, 5)],
        replies=[b"{}", b"[]"],
        load={"nodes": 3},
        keys_applied=7,
    )
    kind, payload, rest = edgewire.decode(edgewire.encode_report(report), edgewire.TO_LEADER)
    assert kind == edgewire.REPORT
    assert edgewire.decode_report(payload, rest) == report


@pytest.mark.parametrize(
    "frames",
    [
        [b"report"],
        [b"nonsense", b"{}"],
        [b"keys", b"{}"],  # a leader's instruction sent to the leader
        [b"report", b"not json"],
    ],
)
def test_what_does_not_parse_is_refused(frames: list[bytes]) -> None:
    with pytest.raises(MalformedMessage):
        edgewire.decode(frames, edgewire.TO_LEADER)


@pytest.mark.parametrize(
    "payload", [{}, {"online": [["n1"]], "offline": [], "restarted": [], "beats": []}]
)
def test_a_report_of_the_wrong_shape_is_refused(payload: object) -> None:
    with pytest.raises(MalformedMessage):
        edgewire.decode_report(payload, [])


def _liveness() -> EdgeLiveness:
    return EdgeLiveness(1.0, 3, 2)


def test_a_reported_node_is_online_at_once_and_never_expires_on_its_own() -> None:
    live = _liveness()
    assert live.online("n1", "e0", 0.0) is not None
    assert live.online("n1", "e0", 0.5) is None  # already online
    assert live.expire(1000.0) == []
    assert live.is_online("n1")
    assert live.next_deadline() is None


def test_a_lost_edges_nodes_are_held_then_offline_unless_another_edge_reports_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(edgeliveness, "MOVE_RATE", math.inf)  # the hold as given
    live = _liveness()
    for node, edge in (("a", "e0"), ("b", "e0"), ("c", "e1")):
        live.online(node, edge, 0.0)
    assert live.edge_lost("e0", 10.0, hold_s=8.0) == 2
    assert live.next_deadline() == 18.0
    live.online("a", "e1", 12.0)  # moved: released
    assert live.expire(17.9) == []
    gone = live.expire(18.0)
    assert [g.peer for g in gone] == ["b"]
    assert live.is_online("a") and live.is_online("c") and not live.is_online("b")


def test_the_leaders_stall_moves_the_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edgeliveness, "MOVE_RATE", math.inf)  # the hold as given
    live = _liveness()
    live.online("a", "e0", 0.0)
    live.edge_lost("e0", 1.0, hold_s=5.0)
    live.stall(10.0)
    assert live.expire(15.0) == []
    assert [g.peer for g in live.expire(16.0)] == ["a"]


def _edge() -> tuple[EdgeIntake, HmacSigner, SessionKeys]:
    sessions = SessionKeys()
    key = sessions.issue("n1", 0.0)
    intake = EdgeIntake(Inbox(sessions.resolve, 30.0), LivenessTracker(1.0, 3, 2))
    return intake, HmacSigner(key.key_id, key.secret), sessions


class _Beats:
    def __init__(self, signer: HmacSigner) -> None:
        self.signer = signer
        self.seq = 0

    def frames(
        self, now_ms: int, job_id: str | None = None, state: str | None = None
    ) -> list[bytes]:
        self.seq += 1
        beat = NodeHeartbeat(
            sender="n1",
            incarnation="i1",
            sequence=self.seq,
            timestamp=now_ms,
            command_endpoint="tcp://127.0.0.1:1",
            job_id=job_id,
            job_state=state,
        )
        return seal(beat, self.signer)


WALL = 1_800_000_000_000


def test_an_idle_node_tells_the_leader_only_that_it_came_online() -> None:
    intake, signer, _ = _edge()
    beats = _Beats(signer)
    for i in range(10):
        intake.receive([beats.frames(WALL + i * 1000)], float(i), WALL + i * 1000)
    report = intake.take_report()
    assert report.online == [("n1", "i1", "tcp://127.0.0.1:1")]
    # Its first heartbeat here only: the leader's view of its job may come from the
    # edge it left (it finished a job there, unseen).
    assert report.beats == [("n1", None, None, WALL)]


def test_a_job_state_change_is_passed_on_at_once_and_a_busy_node_trickles() -> None:
    intake, signer, _ = _edge()
    beats = _Beats(signer)
    intake.receive([beats.frames(WALL)], 0.0, WALL)
    intake.take_report()
    intake.receive([beats.frames(WALL + 100, "j1", "running")], 0.1, WALL + 100)
    assert [b[1:3] for b in intake.take_report().beats] == [("j1", "running")]
    # The same state again: not before the trickle interval.
    intake.receive([beats.frames(WALL + 200, "j1", "running")], 0.2, WALL + 200)
    assert intake.take_report().beats == []
    later = 0.1 + TRICKLE_S
    intake.receive([beats.frames(WALL + 2200, "j1", "running")], later, WALL + 2200)
    assert len(intake.take_report().beats) == 1
    intake.receive([beats.frames(WALL + 2300)], later + 0.1, WALL + 2300)
    assert [b[1:3] for b in intake.take_report().beats] == [(None, None)]


def test_a_commanded_node_heartbeats_reach_the_leader_while_it_is_watched() -> None:
    intake, signer, _ = _edge()
    beats = _Beats(signer)
    intake.receive([beats.frames(WALL)], 0.0, WALL)
    intake.take_report()
    intake.commanded("n1", 1.0)
    intake.receive([beats.frames(WALL + 1500)], 1.5, WALL + 1500)
    assert intake.take_report().beats == []  # built before the command could show
    intake.receive([beats.frames(WALL + 3100)], 3.1, WALL + 3100)
    assert len(intake.take_report().beats) == 1  # still shows nothing: a lost command


def test_a_reply_is_passed_on_verified_and_a_forged_one_is_dropped() -> None:
    intake, signer, _ = _edge()
    ack = AckCommit(sender="n1", incarnation="i1", sequence=1, timestamp=WALL, job_id="j1")
    frames = seal(ack, signer)
    forged = seal(ack, HmacSigner(signer.key_id, b"x" * 32))
    intake.receive([forged, frames], 0.0, WALL)
    assert intake.take_report().replies == [frames[1]]
    assert intake.inbox.drops["signature"] == 1


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"PUSHJOBS_SERVER__EDGES": "-1"}, "edges"),
        (
            {"PUSHJOBS_SERVER__EDGES": "4", "PUSHJOBS_SERVER__EDGE_PORT_BASE": "65530"},
            "edge_port_base",
        ),
        ({"PUSHJOBS_SERVER__EDGE_PORT_BASE": "80"}, "edge_port_base"),
    ],
)
def test_edge_settings_out_of_range_are_refused_naming_the_key(
    env: dict[str, str], key: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(ServerConfig, env=env)
    assert key in str(caught.value)


def test_edge_i_gets_its_two_ports_from_the_base() -> None:
    spec: dict[str, Any] = dict(
        name="s-e1",
        server_name="s",
        key_file="k",
        leader_endpoint="tcp://127.0.0.1:1",
        bind_host="127.0.0.1",
        advertise_host="",
        interval_s=1.0,
        offline_threshold=3,
        online_threshold=2,
        max_skew_s=30.0,
        max_header_bytes=1024,
        max_body_bytes=65536,
        parent_pid=1,
        index=1,
    )
    assert (EdgeSpec(**spec).port(0), EdgeSpec(**spec).port(1)) == (0, 0)
    based = EdgeSpec(**{**spec, "port_base": 7720})
    assert (based.port(0), based.port(1)) == (7722, 7723)


def test_an_online_node_counts_as_heard_now_unless_held() -> None:
    # One agent per node: a second agent with a live node's key is refused while the first
    # was heard within 1.5 intervals; with edges, online (not held) means heard.
    live = _liveness()
    live.online("a", "e0", 0.0)
    live.expire(100.0)
    status = live.status("a")
    assert status is not None and status.last_seen == 100.0
    live.edge_lost("e0", 100.0, hold_s=10.0)
    live.expire(105.0)
    held = live.status("a")
    assert held is not None and held.online and held.last_seen == 0.0


def test_an_edge_behind_sheds_stale_heartbeats_and_judges_nobody_a_window_after() -> None:
    intake, signer, _ = _edge()
    beats = _Beats(signer)
    intake.receive([beats.frames(WALL), beats.frames(WALL + 1000)], 1.0, WALL + 1000)
    assert intake.liveness.is_online("n1")
    now_ms = WALL + 20_000
    full = [beats.frames(WALL + 2000 + i) for i in range(EDGE_BATCH)]
    intake.receive(full, 20.0, now_ms)
    assert intake.backlog and intake.counters["heartbeats_shed"] == EDGE_BATCH
    assert sum(intake.inbox.drops.values()) == 0
    intake.idle()
    intake.expire(22.9)
    assert intake.liveness.is_online("n1")  # its heartbeats were shed, not missing
    intake.expire(23.0)
    assert not intake.liveness.is_online("n1")


def test_holds_wait_while_a_big_edges_nodes_keep_landing_then_run_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(edgeliveness, "MOVE_RATE", math.inf)  # the hold as given
    # 13,000 nodes of a cut-off edge took 30 s to land (the leader answers a few hundred
    # configs a second); the hold was 11 s and they were crashed. Arrivals stretch it.
    live = _liveness()  # offline window 3 s
    nodes = [f"n{i}" for i in range(40)]
    for node in nodes:
        live.online(node, "e0", 0.0)
    assert live.edge_lost("e0", 10.0, hold_s=8.0) == 40
    for i, node in enumerate(nodes[:30]):  # one lands every second, past the 8 s hold
        now = 11.0 + i
        live.online(node, "e1", now)
        assert live.expire(now) == [], now
    # The last landed at 40 s: quiet for two windows (6 s) and the rest are given up.
    assert live.next_deadline() == 46.0
    assert live.expire(45.9) == []
    assert sorted(w.peer for w in live.expire(46.0)) == sorted(nodes[30:])


def test_arrivals_stretch_holds_no_further_than_their_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edgeliveness, "MOVE_RATE", math.inf)  # the hold as given
    live = _liveness()
    for node in ("a", "b"):
        live.online(node, "e0", 0.0)
    live.edge_lost("e0", 0.0, hold_s=2.0)  # capped at 10 holds: 20 s
    live.online("x", "e1", 0.0)
    for t in range(1, 40):  # a trickle that never stops: other nodes keep landing
        live.online(f"x{t}", "e0", 0.0)  # not held: no effect on the move
    live.online("a", "e1", 19.0)  # a held node landed late: the move goes on...
    assert live.expire(19.5) == []
    assert [w.peer for w in live.expire(20.0)] == ["b"]  # ...but not past the cap


def test_the_more_nodes_a_lost_edge_held_the_longer_their_hold() -> None:
    # 6,591 nodes of a cut-off edge landed only 12 s after the loss (they all asked the
    # leader at once): the 11 s hold gave every one of them up.
    live = _liveness()
    nodes = [f"n{i}" for i in range(2500)]
    for node in nodes:
        live.online(node, "e0", 0.0)
    live.edge_lost("e0", 0.0, hold_s=11.0)
    assert live.next_deadline() == 11.0 + len(nodes) / edgeliveness.MOVE_RATE
    assert live.expire(15.0) == []
