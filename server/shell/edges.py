"""The leader's edges: started, supervised, and spoken to over the edge channel.

Theory of operation. ``[server] edges = N`` starts N edge processes (``python -m
server.edge``), each told on its stdin where the leader's channel is and what the server
is. The channel is a ROUTER bound on loopback, CurveZMQ under the server's own key, ZAP
admitting that key only: an edge proves it holds the server's identity. An edge says
``hello`` with its endpoints, then reports at least twice an interval; one silent for
``LOST_AFTER`` intervals, or whose process exited, is lost: its nodes are held online
while they move (``server.core.edgeliveness``) and a dead process is started again after
a pause that doubles while it keeps dying.

Edges of their own (``pushjobs-edge``, ``server.edge.standalone``) join when
``[server] edge_bind`` is set: the channel binds there, the leader names it on the control
topic, and a hello that says ``remote`` under a new name adds that edge to the pool. It is
placed on like the others, lost like them when silent, and never started again here (its
operator, or its unit, does that); its name may not be one of this server's own edges.

Fencing: the leader answers each edge's reports with a grant (``server.core.edgelease``)
that lets it send job commands a little less long than the silence after which the
leader counts it lost, and no longer than the leader's own lease: an edge cut off from
the leader falls silent for commands before its nodes are served by another edge. A
server that does not lead grants nothing.

Assignment: a node is placed at discovery on the live edge that rendezvous hashing
(``server.core.rendezvous``) picks from its name, and that edge gets its session key
before the node gets its config. Reports about a node from any other edge are ignored:
only its edge speaks for it.

Killed at any line: the edges see their parent gone and stop within a second; a new
leader starts its own.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import zmq

from pushjobs.errors import MalformedMessage
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint, drain
from server.core import edgelease, edgewire, rendezvous
from server.core.edgewire import Report, Served
from server.core.rendezvous import MAX_CAPACITY, MIN_CAPACITY
from server.shell.membership import Share

log = logging.getLogger("pushjobs.server")

LOST_AFTER = edgelease.LOST_AFTER_INTERVALS  # of silence: an edge reports twice an interval
START_GRACE_S = 20.0  # to say hello after it was started
RESTART_MIN_S = 0.5
RESTART_MAX_S = 30.0
CHANNEL_HWM = 100_000
CHANNEL_MAX_BYTES = 64 * 1024 * 1024  # a report carries a turn's replies
BATCH = 4096
MOVE_AGAIN_S = 5.0  # a draining edge's nodes that have not moved are asked again
MOVE_BATCH = 10_000  # nodes per MOVE instruction
MAX_EDGES = 1024  # edges of their own known at once (each a row in status)
EDGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


Release = Callable[[int], None]  # sends a held config reply; given the wall ms


@dataclass(slots=True)
class EdgeState:
    name: str
    proc: subprocess.Popen[bytes] | None = None
    route: bytes | None = None  # the ROUTER identity of its connection
    incarnation: str = ""
    endpoints: dict[str, str] = field(default_factory=dict)
    heard: float = float("-inf")
    live: bool = False
    load: dict[str, Any] = field(default_factory=dict)
    restart_at: float | None = None
    backoff_s: float = RESTART_MIN_S
    starts: int = 0
    losses: int = 0
    started_at: float = 0.0
    keys: list[list[Any]] = field(default_factory=list)  # to give it at the turn's end
    keys_sent: int = 0  # batches of keys sent, and acknowledged
    keys_applied: int = 0
    held: deque[tuple[int, Release]] = field(default_factory=deque)  # (batch, reply)
    remote: bool = False  # a ``pushjobs-edge`` that joined: not started, not restarted here
    capacity: float = 1.0  # its weight in the rendezvous (an edge of its own may say)
    draining: bool = False  # placed on no more; its nodes asked to move (``drain``)
    next_move: float = 0.0  # when its remaining nodes are asked again
    to_grant: int | None = None  # the stamp of the latest report read, not yet granted


class EdgePool:
    def __init__(
        self,
        transport: Transport,
        curve: CurveKeys,
        *,
        count: int,
        spec: dict[str, Any],
        interval_s: float,
        now: float,
        bind: str = "",
    ) -> None:
        """``bind``: where edges of their own join (``[server] edge_bind``); "": only the
        ``count`` edges started here, on loopback."""
        self.curve = curve
        self.interval_s = interval_s
        self.takes_remote = bool(bind)
        self.router = transport.socket(
            "router",
            bind=bind or "tcp://127.0.0.1:0",
            hwm=CHANNEL_HWM,
            curve_server=curve,
            allowed_clients=lambda key: key == curve.public,
            max_message_bytes=CHANNEL_MAX_BYTES,
        )
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self.spec = {
            **spec,
            "leader_endpoint": bound_endpoint(self.router),
            "parent_pid": os.getpid(),
        }
        self.edges = {
            f"{spec['server_name']}-e{i}": EdgeState(f"{spec['server_name']}-e{i}")
            for i in range(count)
        }
        self.by_route: dict[bytes, str] = {}
        self.assigned: dict[str, str] = {}  # node -> edge, decided at its last discovery
        self.refused = 0
        self.joined: list[tuple[str, list[Served]]] = []  # ``serving`` nodes: ``take_joined``
        self.unanswered = 0  # config replies dropped with the edge they waited for
        for state in self.edges.values():
            self._start(state, now)

    # --- processes ------------------------------------------------------------------------

    def _start(self, state: EdgeState, now: float) -> None:
        spec = orjson.dumps({**self.spec, "name": state.name, "index": self._index(state.name)})
        # stdout is the edge's ready line, for an operator running one by hand: not ours.
        state.proc = subprocess.Popen(
            [sys.executable, "-m", "server.edge"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=False,
        )
        assert state.proc.stdin is not None
        state.proc.stdin.write(spec)
        state.proc.stdin.close()
        state.starts += 1
        state.restart_at = None
        state.heard = state.started_at = now
        log.info("edge %s started (pid %d)", state.name, state.proc.pid)

    def _index(self, name: str) -> int:
        return list(self.edges).index(name)

    def tick(self, now: float) -> list[str]:
        """Edges lost since the last call (silent, or their process exited); dead ones are
        started again when their pause is over."""
        lost = []
        for state in self.edges.values():
            exited = state.proc is not None and state.proc.poll() is not None
            silent = now - state.heard > LOST_AFTER * self.interval_s
            served = state.live or now - state.started_at > START_GRACE_S
            if state.live and (exited or silent):
                state.live = False
                state.losses += 1
                # Their nodes ask again (a config request unanswered times out) and are
                # placed on the live edges.
                self.unanswered += len(state.held)
                state.held.clear()
                state.keys.clear()
                lost.append(state.name)
                why = f"exited ({state.proc.returncode})" if exited and state.proc else "silent"
                log.warning("edge %s lost: %s; its nodes move to the other edges", state.name, why)
            if exited and state.restart_at is None:
                state.restart_at = now + state.backoff_s
                state.backoff_s = min(RESTART_MAX_S, state.backoff_s * 2)
            elif (
                silent
                and not exited
                and state.proc is not None
                and state.restart_at is None
                and served
            ):
                # Alive but silent: stopped (SIGSTOP) or wedged. Kill it, even if it would
                # resume: its nodes are moving, and a new one serves clean. One that has
                # not said hello yet is given its start (imports take a second or more on
                # a busy host).
                state.proc.kill()
            if state.restart_at is not None and now >= state.restart_at:
                if state.proc is not None:
                    state.proc.wait()
                if state.route is not None:
                    self.by_route.pop(state.route, None)
                    state.route = None
                self._start(state, now)
            if state.live and now - state.heard < self.interval_s:
                state.backoff_s = RESTART_MIN_S  # serving again: a later death starts over
            if state.draining:
                self._move(state, now)
        return lost

    def stalled(self, by_s: float) -> None:
        """The leader could not read for ``by_s``: no edge's silence of that long counts
        (their reports wait, unread, on the channel)."""
        for state in self.edges.values():
            state.heard += by_s

    def ready(self) -> bool:
        """Every edge started here serves (edges of their own come and go)."""
        return all(state.live for state in self.edges.values() if not state.remote)

    def close(self) -> None:
        procs = [
            s.proc for s in self.edges.values() if s.proc is not None and s.proc.poll() is None
        ]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # --- the channel ----------------------------------------------------------------------

    def receive(self, now: float, now_ms: int) -> list[tuple[str, Report]]:
        """What the edges said since the last call: hellos are taken here, reports returned."""
        out = []
        for frames in drain(self.router, BATCH):
            route, body = frames[0], frames[1:]
            try:
                kind, payload, rest = edgewire.decode(body, edgewire.TO_LEADER)
                if kind == edgewire.HELLO:
                    self._hello(route, payload, now)
                    continue
                name = self.by_route.get(route)
                if name is None:
                    self.refused += 1
                    continue
                state = self.edges[name]
                state.heard = now
                if kind == edgewire.SERVING:
                    self._serving(state, payload)
                    continue
                report = edgewire.decode_report(payload, rest)
                if report.load:
                    state.load = report.load
                self._applied(state, report.keys_applied, now_ms)
                if state.live:
                    if report.sent is not None:
                        state.to_grant = max(report.sent, state.to_grant or report.sent)
                    out.append((name, report))
            except MalformedMessage as exc:
                self.refused += 1
                log.error("edge channel: refused a message: %s", exc)
        return out

    def _hello(self, route: bytes, payload: Any, now: float) -> None:
        try:
            name = str(payload["edge"])
            endpoints = {k: str(payload["endpoints"][k]) for k in ("heartbeat", "reply")}
        except (KeyError, TypeError) as exc:
            raise MalformedMessage(f"edge hello: {exc!r}") from exc
        capacity = payload.get("capacity", 1.0)
        if type(capacity) not in (int, float) or not MIN_CAPACITY <= capacity <= MAX_CAPACITY:
            raise MalformedMessage(f"edge hello: capacity {str(capacity)[:20]} out of range")
        remote = payload.get("remote") is True
        state = self.edges.get(name)
        if remote and state is not None and not state.remote:
            raise MalformedMessage(f"an edge of its own took a name of this server's: {name!r}")
        if state is None and remote and self.takes_remote:
            if not EDGE_NAME.fullmatch(name) or len(self.edges) >= MAX_EDGES:
                raise MalformedMessage(f"edge hello: a bad name or too many edges: {name[:64]!r}")
            state = self.edges[name] = EdgeState(name, remote=True)
            log.info("edge %s joined (pid %s, an edge of its own)", name, payload.get("pid"))
        if state is None:
            raise MalformedMessage(f"hello from an edge this server did not start: {name[:64]!r}")
        if state.route is not None:
            self.by_route.pop(state.route, None)
        # A new connection counts key batches afresh: the config replies held for keys
        # sent on the old one may never be released (those keys may be lost with it).
        # Their nodes ask again, as when an edge is lost.
        self.unanswered += len(state.held)
        state.held.clear()
        state.keys.clear()
        state.route, state.endpoints, state.heard = route, endpoints, now
        state.keys_sent = state.keys_applied = 0
        state.incarnation = str(payload.get("incarnation", ""))
        state.capacity = float(capacity)
        state.to_grant = edgewire.stamp_of(payload)
        state.live = True
        self.by_route[route] = name
        log.info(
            "edge %s serving: heartbeat=%s reply=%s",
            name,
            endpoints["heartbeat"],
            endpoints["reply"],
        )

    def _serving(self, state: EdgeState, payload: Any) -> None:
        """Nodes a live edge serves already (it served the leader before this one)."""
        served, bad = edgewire.decode_served(payload)
        self.refused += bad
        if served and state.live:
            self.joined.append((state.name, served))
            log.info("edge %s brings %d nodes it serves already", state.name, len(served))

    def send(self, edge: str, frames: list[bytes]) -> bool:
        state = self.edges.get(edge)
        if state is None or state.route is None:
            return False
        try:
            self.router.send_multipart([state.route, *frames], zmq.NOBLOCK)
        except zmq.ZMQError:
            return False
        return True

    def grant(self, for_ms: int) -> None:
        """Answer the reports read since the last call: each live edge that sent one may
        send commands for ``for_ms`` from its latest one's stamp (0: nothing granted, as
        from a server that does not lead)."""
        for state in self.edges.values():
            if state.to_grant is not None and state.live and for_ms > 0:
                self.send(state.name, edgewire.encode_grant(state.to_grant, for_ms))
            state.to_grant = None

    def broadcast(self, frames: list[bytes]) -> None:
        for state in self.edges.values():
            if state.live:
                self.send(state.name, frames)

    # --- assignment -------------------------------------------------------------------------

    def live(self) -> list[str]:
        return [s.name for s in self.edges.values() if s.live]

    def placeable(self) -> list[str]:
        """The live edges nodes may be placed on: not draining, unless all are."""
        live = [s for s in self.edges.values() if s.live]
        open_ = [s.name for s in live if not s.draining]
        # Every edge draining: better a draining edge than a fleet that cannot discover.
        return open_ or [s.name for s in live]

    def drain(self, name: str, now: float, *, undo: bool = False, by: str = "") -> dict[str, Any]:
        """Place no more nodes on edge ``name`` and move its nodes to the others (``undo``:
        take nodes again); its status row. ``KeyError`` for an edge unknown here."""
        state = self.edges[name]
        state.draining = not undo
        state.next_move = now  # asked at the next tick
        log.info("edge %s: %s (%s)", name, "taking nodes again" if undo else "draining", by)
        return next(row for row in self.status() if row["edge"] == name)

    def _move(self, state: EdgeState, now: float) -> None:
        """Ask a draining edge's nodes to rediscover, again every ``MOVE_AGAIN_S`` for
        those that have not moved (asleep, busy, or a ping lost)."""
        if now < state.next_move or not state.live:
            return
        state.next_move = now + MOVE_AGAIN_S
        staying = [node for node, edge in self.assigned.items() if edge == state.name]
        for start in range(0, len(staying), MOVE_BATCH):
            self.send(
                state.name, edgewire.encode(edgewire.MOVE, staying[start : start + MOVE_BATCH])
            )

    def place(self, node: str) -> tuple[str, dict[str, str]] | None:
        """The edge ``node`` belongs to now and its endpoints; None when no edge serves.
        A node that moves is forgotten by the edge it leaves."""
        live = self.placeable()
        weights = {name: self.edges[name].capacity for name in live}
        # Unweighted while every edge weighs the same: the same picks, a little cheaper.
        edge = rendezvous.pick(node, live, weights if len(set(weights.values())) > 1 else None)
        if edge is None:
            return None
        before = self.assigned.get(node)
        if before is not None and before != edge:
            self.send(before, edgewire.encode(edgewire.FORGET, [node]))
        self.assigned[node] = edge
        return edge, self.edges[edge].endpoints

    def take_joined(self) -> list[tuple[str, list[Served]]]:
        """The nodes edges said they serve already (``serving``) since the last call."""
        joined, self.joined = self.joined, []
        return joined

    def adopt(self, node: str, edge: str) -> bool:
        """Place ``node`` on ``edge``, which serves it already; False if it is placed on
        another edge now (it asked again meanwhile, and its answer stands)."""
        current = self.assigned.get(node)
        if current is not None and current != edge:
            return False
        self.assigned[node] = edge
        return True

    def incarnation_of(self, edge: str) -> str:
        """The incarnation ``edge`` signs its nodes' server heartbeats under."""
        return self.edges[edge].incarnation

    def give_key(self, edge: str, key: list[Any]) -> None:
        """Queue a node's session key for ``edge``: sent at the turn's end, in one batch."""
        self.edges[edge].keys.append(key)

    def after_keys(self, node: str, release: Release) -> None:
        """Call ``release`` once ``node``'s edge has applied the keys queued so far."""
        state = self.edges[self.assigned[node]]
        state.held.append((state.keys_sent + 1, release))

    def flush_keys(self) -> None:
        """Send each edge the keys this turn issued for its nodes."""
        for state in self.edges.values():
            if state.keys:
                state.keys_sent += 1
                head = {"batch": state.keys_sent, "keys": state.keys}
                self.send(state.name, [edgewire.KEYS, orjson.dumps(head)])
                state.keys = []

    def _applied(self, state: EdgeState, batch: int, now_ms: int) -> None:
        state.keys_applied = max(state.keys_applied, batch)
        while state.held and state.held[0][0] <= state.keys_applied:
            state.held.popleft()[1](now_ms)

    def edge_of(self, node: str) -> str | None:
        return self.assigned.get(node)

    def shares(self) -> list[Share]:
        """The share of each live edge this server started (edges of their own write
        theirs), for this server's record on the control topic."""
        return [
            Share(
                name=state.name,
                incarnation=state.incarnation,
                heartbeat=state.endpoints.get("heartbeat", ""),
                reply=state.endpoints.get("reply", ""),
                nodes=int(state.load.get("nodes", 0)),
                online=int(state.load.get("online", 0)),
                capacity=state.capacity,
                rate=float(state.load.get("rate", 0.0)),
                lag_p99_ms=float(state.load.get("lag_p99_ms", 0.0)),
            )
            for state in self.edges.values()
            if state.live and not state.remote
        ]

    def status(self) -> list[dict[str, Any]]:
        out = []
        for state in self.edges.values():
            load = state.load
            out.append(
                {
                    "edge": state.name,
                    "live": state.live,
                    "pid": state.proc.pid if state.proc is not None else load.get("pid"),
                    "remote": state.remote,
                    "capacity": state.capacity,
                    "draining": state.draining,
                    "starts": state.starts,
                    "losses": state.losses,
                    "nodes": load.get("nodes", 0),
                    "online": load.get("online", 0),
                    "backlog": load.get("backlog", False),
                    "lag_p99_ms": load.get("lag_p99_ms", 0),
                    "heartbeats": load.get("heartbeats", 0),
                    "heartbeat_lag_ms": load.get("heartbeat_lag_ms", {}),
                    "counters": load.get("counters", {}),
                    "drops": load.get("drops", {}),
                    "endpoints": state.endpoints,
                }
            )
        return out
