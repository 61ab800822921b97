"""``python -m server.edge``: an edge, started and supervised by its leader.

Theory of operation. One thread, one loop, like the leader's. The edge binds the two
sockets its nodes talk to (the heartbeat XPUB and the reply PULL, CurveZMQ under the
server's own key, ZAP admitting only the node keys the leader handed it), holds the
session keys the leader issued to its nodes, and connects to the leader's edge channel
(a DEALER, ``server.core.edgewire``). Each turn:

1. read the reply socket in a batch (``edgeintake``): verify, track liveness, keep what
   the leader must hear;
2. carry out the leader's instructions: publish a heartbeat of its own for each of the
   leader's, take new session keys, seal and send commands (one instruction per job and
   kind, fanned out here, each command signed with its node's session key), forget
   nodes, abort a revoked node's jobs;
   job commands only while the leader's grant holds (``server.core.edgelease``): an edge
   cut off from its leader but not from its nodes stops sending them before the leader
   counts it lost and has its nodes served elsewhere, and its commands wait meanwhile;
3. time: expire silent nodes (never on an unread queue, never across the edge's own
   stall), retire superseded keys, tell nodes heard under a retired key to rediscover;
4. report to the leader: liveness changes, the heartbeats it needs, the job replies, and
   at least once an interval the edge's load, which is also how the leader knows the
   edge is alive.

The edge keeps nothing durable and acts only for the process that started it: it exits
when its parent does. While the leader publishes no heartbeat (stopped, stalled), its
nodes stop talking (they count the server offline): the edge judges nobody then, and
gives everyone a full window once the leader's heartbeats come back.

Killed at any line: its nodes hear no server heartbeat, rediscover, and land on the other
edges; the leader holds them online meanwhile and starts this edge again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import sys
import time
from base64 import b64decode
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import zmq

from keys import files
from keys.fingerprint import key_id
from pushjobs.errors import PushJobsError
from pushjobs.protocol import codec
from pushjobs.protocol.framing import Limits, seal_body
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import Abort, Commit, Message, Ping, Run, ServerHeartbeat
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer
from pushjobs.protocol.template import BodyTemplate
from pushjobs.transport.sockets import CurveKeys, Transport, drain
from server.core import edgelease, edgewire
from server.edge.edgeintake import BATCH, EdgeIntake
from server.front.sessions import SessionKey, SessionKeys
from server.shell.channels import Channels, advertised

log = logging.getLogger("pushjobs.edge")

MAX_WAIT_S = 0.25
LEADER_HWM = 100_000  # reports queued for a leader that is slow to read
STALE_PING_S = 2.0
FANOUT_PER_TURN = 2_000  # commands sealed and sent per turn: ~50 ms
MOVE_PER_TURN = 100  # rediscover pings a turn while draining, a turn each MOVE_PACE_S
MOVE_PACE_S = 0.05
GATHER_BELOW = 256  # messages in a turn's read: fewer, and the next read waits to gather
GATHER_S = 0.005
QUIET_AFTER = 1.5  # intervals without the leader's heartbeat: the nodes' silence is its own
LEADER_GONE_AFTER = 3.0  # intervals of it: an edge of its own looks for the leader again
RATE_WINDOW_S = 5.0  # the heartbeat rate an edge states is over this many seconds


@dataclass(frozen=True, slots=True)
class EdgeSpec:
    """What the leader tells an edge it starts (one JSON object on the edge's stdin)."""

    name: str
    server_name: str
    key_file: str
    leader_endpoint: str
    bind_host: str
    advertise_host: str
    interval_s: float
    offline_threshold: int
    online_threshold: int
    max_skew_s: float
    max_header_bytes: int
    max_body_bytes: int
    parent_pid: int
    """The leader that started it; 0 for an edge of its own (``pushjobs-edge``)."""
    index: int = 0
    port_base: int = 0  # heartbeat on port_base + 2 * index, reply on the next; 0: any
    remote: bool = False
    """Started by ``pushjobs-edge``, not by its leader: it says so in its hello, and stops
    (to look for the leader again) when the leader falls silent."""
    capacity: float = 1.0
    """Its share of the nodes against the other edges' (``[edge] capacity``)."""

    def port(self, which: int) -> int:
        """The port of its heartbeat (0) or reply (1) socket; 0 for any free one."""
        return self.port_base + 2 * self.index + which if self.port_base else 0

    @classmethod
    def parse(cls, raw: bytes) -> EdgeSpec:
        data = orjson.loads(raw)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(slots=True)
class _FanOut:
    """One instruction's commands, sent a turn's worth at a time (``Edge._send_some``)."""

    kind: str
    job_id: str
    template: Commit | None
    nodes: list[str]
    next: int = 0
    stamp: BodyTemplate | None = None
    """Every node's body from one encoding (set at the first send; None: each encoded)."""
    stamped: bool = False


@dataclass(frozen=True, slots=True)
class Contact:
    endpoint: str
    curve: str


class Edge:
    def __init__(self, spec: EdgeSpec, *, out: Any = None) -> None:
        self.spec = spec
        self.out = out if out is not None else sys.stdout
        identity = files.load_private(Path(spec.key_file))
        self.incarnation = secrets.token_hex(8)
        self.limits = Limits(spec.max_header_bytes, spec.max_body_bytes)
        signer = Ed25519Signer(key_id(identity.public.ed25519_public), identity.signing_key())
        # Commands leave under the server's name and this edge's own incarnation and
        # sequence: a node hears commands from its one edge only.
        self.outbox = Outbox(spec.server_name, self.incarnation, signer, self.limits)
        self.transport = Transport(
            max_message_bytes=max(spec.max_header_bytes, spec.max_body_bytes)
        )
        curve = CurveKeys(identity.public.curve_public, identity.curve_secret)
        self.accepted: set[str] = set()  # node curve keys the leader admitted (read by ZAP)
        self.channels = Channels(
            self.transport,
            curve,
            api_bind=None,
            heartbeat_bind=f"tcp://{spec.bind_host}:{spec.port(0)}",
            reply_bind=f"tcp://{spec.bind_host}:{spec.port(1)}",
            node_allowed=self.accepted.__contains__,
        )
        self.curve = curve
        self.leader = self._channel(spec.leader_endpoint)
        self.sessions = SessionKeys(grace_s=2 * spec.interval_s + 5.0)
        self.liveness = LivenessTracker(
            spec.interval_s, spec.offline_threshold, spec.online_threshold
        )
        self.intake = EdgeIntake(
            Inbox(self.sessions.resolve, spec.max_skew_s, self.limits),
            self.liveness,
            stale_after_s=spec.interval_s,
        )
        self.contacts: dict[str, Contact] = {}
        # What each node told the leader at discovery (facts, tags), as its key came:
        # handed to the next leader with its session, so the node need not ask again.
        self.registered: dict[str, tuple[dict[str, str], list[str]]] = {}
        self.keys_applied = 0
        self.acknowledge = False
        self.fanouts: deque[_FanOut] = deque()
        self.lease = edgelease.CommandLease(spec.interval_s)
        self.fenced_at: float | None = None  # when commands began waiting for a grant
        self.moving: deque[str] = deque()  # nodes to ask to rediscover (``MOVE``)
        self.pinged: dict[str, float] = {}
        self.counters: Counter[str] = Counter()
        bound = self.channels.endpoints()
        self.endpoints = {
            name: advertised(bound[name], spec.advertise_host) for name in ("heartbeat", "reply")
        }
        now = time.monotonic()
        self.turn_started = self.poll_started = self.poll_until = now
        self.last_beat = now
        self.joined = now  # when it joined the leader it serves (``rejoin``)
        self.next_load = now
        self.next_keys = now + 1.0
        self.stopping = False
        self.leader_gone = False  # stopped because the leader fell silent
        self.last_load: dict[str, Any] = {}  # as last reported (read by pushjobs-edge's pong)
        self.started = now
        # Heartbeats read per second, over RATE_WINDOW_S: (since, count then, the last rate).
        self.rate_mark: tuple[float, int, float] = (now, 0, 0.0)

    def _channel(self, endpoint: str) -> zmq.Socket[bytes]:
        """The DEALER to a leader's edge channel (CurveZMQ: the server's key both ends)."""
        return self.transport.socket(
            "dealer",
            connect=endpoint,
            hwm=LEADER_HWM,
            curve_client=self.curve,
            server_public=self.curve.public,
            max_message_bytes=64 * 1024 * 1024,
        )

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.channels.replies, zmq.POLLIN)
        poller.register(self.channels.heartbeat, zmq.POLLIN)
        poller.register(self.leader, zmq.POLLIN)
        # Stamped like a report: the leader grants this edge its first lease at once.
        hello = {**self._hello(), "sent": edgelease.stamp(time.monotonic())}
        self._send(edgewire.encode(edgewire.HELLO, hello))
        # The nodes it serves already (it served another leader): the new one takes them
        # as they are, sessions and all, and they need not ask again.
        serving = self._serving()
        for start in range(0, len(serving), edgewire.SERVING_CHUNK):
            chunk = serving[start : start + edgewire.SERVING_CHUNK]
            self._send(edgewire.encode(edgewire.SERVING, {"nodes": chunk}))
        self.out.write(
            f"pushjobs-edge {self.spec.name} ready heartbeat={self.endpoints['heartbeat']} "
            f"reply={self.endpoints['reply']}\n"
        )
        self.out.flush()
        while not self.stopping:
            now = time.monotonic()
            wait_s = max(0.0, min(MAX_WAIT_S, self._next_deadline(now) - now))
            self.poll_started = now
            self.poll_until = now + wait_s
            ready = dict(poller.poll(round(wait_s * 1000)))
            self.turn(ready)
            if self.intake.last_batch < GATHER_BELOW and not self.fanouts:
                # A fleet's heartbeats arrive spread over the interval: reading each few
                # as they come costs a wakeup each (poll, an empty read, cold caches), more
                # than the heartbeats themselves (bench/edge.py, paced). Let them gather.
                # Bounded: a heartbeat waits GATHER_S more at most; a stall counts from
                # the poll's own deadline, which this wait precedes.
                time.sleep(GATHER_S)

    def _next_deadline(self, now: float) -> float:
        if self.fanouts and self.lease.valid(now):
            return now  # commands to send: no waiting (fenced, they wait for a grant)
        due = [self.next_load, now + (MOVE_PACE_S if self.moving else MAX_WAIT_S)]
        deadline = self.liveness.next_deadline()
        if deadline is not None:
            due.append(deadline)
        return min(due)

    def turn(self, ready: dict[Any, int]) -> None:
        now, now_ms = time.monotonic(), _now_ms()
        blind_s = max(0.0, now - self.poll_until) + max(0.0, self.poll_started - self.turn_started)
        self.turn_started = now
        if blind_s > self.spec.interval_s:
            log.warning("edge %s stalled for %.1f s: node deadlines moved", self.spec.name, blind_s)
            self.counters["stalls"] += 1
            self.liveness.stall(blind_s)
        if self.leader in ready:
            for frames in drain(self.leader, BATCH):
                self.instruction(frames, now, now_ms)
        if self.channels.replies in ready:
            self.intake.receive(drain(self.channels.replies, BATCH), now, now_ms)
        else:
            self.intake.idle()
        if self.channels.heartbeat in ready:
            self.channels.subscriptions()
        self._send_some(now, now_ms)
        if self.moving:
            self._move_some(now, now_ms)
        self.timers(now, now_ms)
        self.report(now)

    def timers(self, now: float, now_ms: int) -> None:
        deadline = self.liveness.next_deadline()
        if deadline is not None and deadline <= now:
            # Silence is judged on what was sent: read what waits first.
            self.intake.receive(drain(self.channels.replies, BATCH), now, now_ms)
        if now - self.last_beat > QUIET_AFTER * self.spec.interval_s:
            # The leader publishes nothing (stopped, stalled): its nodes stop talking
            # when they stop hearing it. Nobody is judged on that.
            self.intake.counters["expiry_deferred_leader_quiet"] += 1
        else:
            self.intake.expire(now)
        if now >= self.next_keys:
            self.sessions.expire(now)
            self._ping_stale(now, now_ms)
            self.next_keys = now + 1.0
            if self.spec.parent_pid and os.getppid() != self.spec.parent_pid:
                log.warning("edge %s: its leader process is gone; stopping", self.spec.name)
                self.stopping = True
            # Silent since its last heartbeat, or since this edge joined it (a new leader
            # has not beaten yet: the last one's heartbeat is not its).
            silent_s = now - max(self.last_beat, self.joined)
            if self.spec.remote and silent_s > LEADER_GONE_AFTER * self.spec.interval_s:
                log.warning(
                    "edge %s: no heartbeat from the leader for %.1f s; looking for the leader",
                    self.spec.name,
                    silent_s,
                )
                self.leader_gone = self.stopping = True

    def report(self, now: float) -> None:
        report = self.intake.take_report()
        report.keys_applied = self.keys_applied
        report.sent = edgelease.stamp(time.monotonic())
        if now >= self.next_load:
            report.load = self.last_load = self._load(now)
            self.next_load = now + self.spec.interval_s / 2
        elif not report and not self.acknowledge:
            return
        self.acknowledge = False
        self._send(edgewire.encode_report(report))

    def _send(self, frames: list[bytes]) -> None:
        try:
            self.leader.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            self.counters["reports_dropped"] += 1

    # --- the leader's instructions ------------------------------------------------------------

    def instruction(self, frames: list[bytes], now: float, now_ms: int) -> None:
        try:
            kind, payload, rest = edgewire.decode(frames, edgewire.TO_EDGE)
            if kind == edgewire.BEAT:
                self._beat(rest, now)
            elif kind == edgewire.KEYS:
                self._keys(payload, now)
            elif kind == edgewire.SEND:
                self._fan_out(payload, rest)
            elif kind == edgewire.FORGET:
                for node in payload:
                    self._forget(str(node), now)
            elif kind == edgewire.REVOKE:
                self._revoke(payload, now, now_ms)
            elif kind == edgewire.GRANT:
                self.lease.grant(*edgewire.decode_grant(payload))
            elif kind == edgewire.MOVE:
                # Draining: these nodes are asked to rediscover, a few per turn (their
                # config requests must not arrive at the leader all at once).
                self.moving.extend(str(node) for node in payload)
        except (PushJobsError, KeyError, TypeError, ValueError) as exc:
            self.counters["instructions_refused"] += 1
            log.error("edge %s: instruction refused: %s", self.spec.name, exc)

    def _beat(self, frames: list[bytes], now: float) -> None:
        """The leader's heartbeat: publish one of this edge's own for it. The edge signs
        it (the server's key, the edge's incarnation and sequence), so its nodes hear a
        restart of the edge that holds their session keys as a new incarnation, and not
        a change of leader. It says what the leader's says (leading or not), once per
        beat of the leader's: the nodes still hear the leader's silence.

        After a gap, the nodes fell silent because they heard no server: they speak
        again once they count it online (their online threshold), and get a full window
        from then before their silence counts."""
        if len(frames) < 2:
            raise ValueError("a beat instruction carries the leader's heartbeat")
        leaders = codec.decode(frames[1])
        if not isinstance(leaders, ServerHeartbeat):
            raise ValueError("a beat instruction must carry a server heartbeat")
        if now - self.last_beat > QUIET_AFTER * self.spec.interval_s:
            spec = self.spec
            self.liveness.grant(now, spec.online_threshold * spec.interval_s)
            self.counters["leader_quiet"] += 1
        self.last_beat = now
        self.channels.publish(self.outbox.frames(ServerHeartbeat, _now_ms(), leader=leaders.leader))

    def _keys(self, payload: Any, now: float) -> None:
        for entry in payload["keys"]:
            node, kid, secret_b64, restarted, curve, endpoint = entry[:6]
            if len(entry) >= 8:
                self.registered[str(node)] = (
                    {str(k): str(v) for k, v in dict(entry[6]).items()},
                    [str(tag) for tag in entry[7]],
                )
            self.sessions.install(
                SessionKey(str(kid), str(node), b64decode(secret_b64)),
                now,
                restarted=bool(restarted),
            )
            old = self.contacts.get(node)
            if old is not None and old.curve != curve:
                self.accepted.discard(old.curve)
                self.channels.forget(old.endpoint, old.curve)
            self.contacts[node] = Contact(str(endpoint), str(curve))
            self.accepted.add(str(curve))
        self.keys_applied = int(payload["batch"])
        self.acknowledge = True  # the leader holds these nodes' config replies till then

    def _forget(self, node: str, now: float) -> None:
        self.intake.forget(node, now)
        self.sessions.revoke(node)
        self.registered.pop(node, None)
        contact = self.contacts.pop(node, None)
        if contact is not None:
            self.accepted.discard(contact.curve)

    def _revoke(self, payload: Any, now: float, now_ms: int) -> None:
        for node, job_ids in payload:
            contact = self.contacts.get(node)
            if contact is not None:
                for job_id in job_ids:
                    frames = self.outbox.frames(Abort, now_ms, node=node, job_id=str(job_id))
                    self.channels.send_command(contact.endpoint, contact.curve, frames)
            self.sessions.revoke(node)
            self.intake.forget(node, now)
            if contact is not None:
                self.accepted.discard(contact.curve)  # kept in contacts: to tell it later

    def _fan_out(self, payload: Any, rest: list[bytes]) -> None:
        """Queue one instruction's commands; ``_send_some`` sends them, a turn's worth at a
        time, in the order the leader gave them (a run never before its commit)."""
        kind, job_id, nodes = str(payload["kind"]), str(payload["job"]), payload["nodes"]
        template: Commit | None = None
        if kind == "commit":
            decoded = codec.decode(rest[0])
            if not isinstance(decoded, Commit):
                raise ValueError("a commit instruction must carry a commit")
            template = decoded
        if kind not in ("commit", "run", "abort") or not isinstance(nodes, list):
            raise ValueError(f"not a command instruction: {kind!r}")
        self.fanouts.append(_FanOut(kind, job_id, template, [str(n) for n in nodes]))

    def _send_some(self, now: float, now_ms: int) -> None:
        """Send up to ``FANOUT_PER_TURN`` queued commands: a 100,000-node fan-out takes
        seconds, and the loop must go on reading (and reporting: a silent edge is lost)."""
        if not self.fanouts or not self._leased(now):
            return
        budget = FANOUT_PER_TURN
        while self.fanouts and budget > 0:
            fan = self.fanouts[0]
            chunk = fan.nodes[fan.next : fan.next + budget]
            fan.next += len(chunk)
            budget -= len(chunk)
            self._send_commands(fan, chunk, now, now_ms)
            if fan.next >= len(fan.nodes):
                self.fanouts.popleft()

    def _leased(self, now: float) -> bool:
        """Whether the leader's grant holds, said in the log when that changes."""
        if self.lease.valid(now):
            if self.fenced_at is not None:
                log.info(
                    "edge %s: granted again after %.1f s; sending its commands",
                    self.spec.name,
                    now - self.fenced_at,
                )
                self.fenced_at = None
            return True
        if self.fenced_at is None:
            self.fenced_at = now
            self.counters["fenced"] += 1
            log.warning(
                "edge %s: fenced: no grant from the leader for %.1f s; %d commands wait",
                self.spec.name,
                self.lease.lapsed_for(now),
                sum(len(f.nodes) - f.next for f in self.fanouts),
            )
        return False

    def _message(self, fan: _FanOut, sequence: int, now_ms: int, node: str) -> Message:
        """The command ``fan`` sends ``node``, as a message."""
        outbox = self.outbox
        if fan.template is not None:
            return dataclasses.replace(
                fan.template,
                sender=outbox.sender,
                incarnation=outbox.incarnation,
                sequence=sequence,
                timestamp=now_ms,
                node=node,
            )
        cls = Run if fan.kind == "run" else Abort
        return cls(
            sender=outbox.sender,
            incarnation=outbox.incarnation,
            sequence=sequence,
            timestamp=now_ms,
            node=node,
            job_id=fan.job_id,
        )

    def _send_commands(self, fan: _FanOut, nodes: list[str], now: float, now_ms: int) -> None:
        if not fan.stamped:
            fan.stamped = True
            fan.stamp = BodyTemplate.of(self._message(fan, 0, now_ms, ""))
        kind, stamp = fan.kind, fan.stamp
        sent = 0
        outbox, send_command = self.outbox, self.channels.send_command
        for node in nodes:
            contact = self.contacts.get(node)
            signer = self.sessions.signer(node)
            info = self.intake.nodes.get(node)
            endpoint = info.command_endpoint if info is not None and info.command_endpoint else None
            if contact is None or signer is None:
                self.counters["unsendable"] += 1
                continue
            endpoint = endpoint or contact.endpoint
            outbox.sequence += 1
            try:
                if stamp is not None:
                    body = stamp.body(outbox.sequence, now_ms, node)
                else:
                    body = codec.encode(self._message(fan, outbox.sequence, now_ms, node))
                frames = seal_body(body, signer, self.limits)
            except PushJobsError:
                self.counters["unsealable"] += 1
                continue
            if send_command(endpoint, contact.curve, frames):
                sent += 1
            self.intake.commanded(node, now)
        self.counters[f"{kind}_sent"] += sent

    def _move_some(self, now: float, now_ms: int) -> None:
        for _ in range(min(MOVE_PER_TURN, len(self.moving))):
            node = self.moving.popleft()
            contact = self.contacts.get(node)
            if contact is None or now - self.pinged.get(node, -STALE_PING_S) < STALE_PING_S:
                continue  # gone already, or just asked
            self.pinged[node] = now
            frames = self.outbox.frames(Ping, now_ms, node=node, rediscover=True)
            self.channels.send_command(contact.endpoint, contact.curve, frames)
            self.counters["moved_away"] += 1

    def _ping_stale(self, now: float, now_ms: int) -> None:
        for node in self.sessions.take_stale():
            contact = self.contacts.get(node)
            if contact is None or now - self.pinged.get(node, -STALE_PING_S) < STALE_PING_S:
                continue
            self.pinged[node] = now
            frames = self.outbox.frames(Ping, now_ms, node=node, rediscover=True)
            self.channels.send_command(contact.endpoint, contact.curve, frames)

    # --- what it tells the leader -------------------------------------------------------------

    def _hello(self) -> dict[str, Any]:
        return {
            "edge": self.spec.name,
            "incarnation": self.incarnation,
            "endpoints": self.endpoints,
            "pid": os.getpid(),
            "remote": self.spec.remote,
            "capacity": self.spec.capacity,
        }

    def _serving(self) -> list[list[Any]]:
        """Each node it holds a session of: [node, its key ids, curve key, command
        endpoint, incarnation, online, facts, tags]."""
        out: list[list[Any]] = []
        for node, contact in self.contacts.items():
            key_ids = self.sessions.key_ids(node)
            if not key_ids:
                continue  # revoked: kept only to tell it so
            info = self.intake.nodes.get(node)
            facts, tags = self.registered.get(node, ({}, []))
            out.append(
                [
                    node,
                    key_ids,
                    contact.curve,
                    contact.endpoint,
                    info.incarnation if info is not None else "",
                    self.liveness.is_online(node),
                    facts,
                    tags,
                ]
            )
        return out

    def rejoin(self, leader_endpoint: str) -> None:
        """Serve another leader, keeping its nodes: the channel to ``leader_endpoint``,
        a new lease, nothing the last leader asked for (its commands, its moves: the new
        one sends again what its jobs still need), then ``run`` again, which hands the
        new leader these nodes after its hello."""
        self.transport.close_socket(self.leader)
        self.leader = self._channel(leader_endpoint)
        self.spec = dataclasses.replace(self.spec, leader_endpoint=leader_endpoint)
        self.lease = edgelease.CommandLease(self.spec.interval_s)
        dropped = sum(len(f.nodes) - f.next for f in self.fanouts)
        if dropped:
            log.info("edge %s: %d commands of the last leader not sent", self.spec.name, dropped)
        self.fanouts.clear()
        self.moving.clear()
        # Each node's next heartbeat is news to the new leader (its job state above all:
        # a reply the last leader never read is asked for again from it).
        self.intake.seen.clear()
        self.keys_applied = 0  # the new leader numbers its batches afresh
        self.fenced_at = None
        self.stopping = self.leader_gone = False
        self.next_load = self.joined = time.monotonic()

    def _load(self, now: float) -> dict[str, Any]:
        lag = self.intake.heartbeat_lag_ms
        return {
            **self._hello(),
            "nodes": len(self.liveness),
            "online": self.liveness.online_count,
            "counters": dict(self.intake.counters + self.counters),
            "drops": dict(self.intake.inbox.drops),
            "backlog": self.intake.backlog,
            "lag_p99_ms": _percentile(lag, 0.99),
            "heartbeats": self.intake.counters["heartbeats"],
            "rate": self._rate(now),
            "heartbeat_lag_ms": {str(ms): n for ms, n in enumerate(lag) if n},
            "command_sockets": self.channels.command_sockets,
            "command_drops": self.channels.command_drops,
            "fenced": not self.lease.valid(now),  # no grant holds: commands would wait
        }

    def _rate(self, now: float) -> float:
        """Heartbeats read per second over the last RATE_WINDOW_S (or since it started)."""
        since, then, rate = self.rate_mark
        count = self.intake.counters["heartbeats"]
        if now - since >= RATE_WINDOW_S:
            rate = round((count - then) / (now - since), 1)
            self.rate_mark = (now, count, rate)
        elif rate == 0.0 and now > since:
            rate = round((count - then) / (now - since), 1)  # the first window: as far as read
        return rate

    def close(self) -> None:
        waiting = sum(len(f.nodes) - f.next for f in self.fanouts)
        if waiting:
            # Held back by the fence, or cut short: the leader sends them again through
            # whichever edge serves these nodes next.
            log.warning("edge %s: %d commands not sent", self.spec.name, waiting)
        self.transport.close()


def _percentile(buckets: list[int], q: float) -> int:
    total = sum(buckets)
    if not total:
        return 0
    rank, acc = q * total, 0
    for ms, count in enumerate(buckets):
        acc += count
        if acc >= rank:
            return ms
    return len(buckets) - 1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
