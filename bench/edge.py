"""What one node heartbeat costs an edge, all costs in.

    python bench/edge.py [--nodes 100000] [--socket-nodes 100000] [--rounds 4]

An edge (``server.edge``) reads its nodes' heartbeats from a CurveZMQ PULL: it drains a
batch (``transport.sockets.drain``), verifies each message (``Inbox``: frame sizes,
header, HMAC with the node's session key, body decode, the key's owner, replay window
and clock skew), tracks the node's liveness (``NodeTable`` over ``LivenessTracker``) and
decides what the leader must hear (``EdgeIntake``). The issue's goal is 100,000
heartbeats verified per second per edge core: at most 10 µs each, every thread counted.

Two measurements, each comparing in the same run, in alternating rounds (best round
each, so background load hits all paths alike):

- ``old``: the path as it was before this benchmark, kept below verbatim (the inbox,
  framing, decode, resolver, replay window, tracker, node table, intake and drain);
- ``new``: ``EdgeIntake`` and ``drain`` as they are now.

(a) In process, on prebuilt frames of ``--nodes`` distinct nodes (signed by the
simulator's ``SimNode`` with their session keys, as a fleet signs them), fed to the
intake in the edge's batches: CPU per heartbeat (``time.process_time``). The floor
``hmac+json`` is the C work alone: one ``hmac.digest`` of the signed bytes and one
``orjson.loads`` of the body.

(b) Over a real socket: a child process sends one heartbeat of each of
``--socket-nodes`` nodes, sealed as the simulator seals them, to a PULL made by the
server's socket factory (``Transport.socket``) as the edge binds it; this process drains
it as the edge's loop does and hands each batch to the intake. Counted: this process's
CPU over all its threads (``getrusage``: the Python thread and libzmq's I/O thread, which
reads TCP and, under CurveZMQ, decrypts each of a message's three frames), from before
the child is told to send until the last heartbeat is processed, per heartbeat. The
child's sends land in the PULL's queue first (the edge at saturation: full batches),
then are read. ``recv`` is the socket alone (drain, nothing else): the floor of the
transport. Every path runs over CurveZMQ (``curve``) and bare TCP (``plain``); the
difference is what CurveZMQ costs per message. ``recv1`` is the socket alone with each
message's three frames joined into one (not the protocol: agents in the field send three
frames), to show what a one-frame protocol would save. Heartbeats per second per core is
one second over the process's CPU per heartbeat.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import hmac
import multiprocessing
import os
import resource
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import orjson
import zmq
from machine import describe  # bench/ is sys.path[0] when run as a script

from agent.simulator.simfleet import MIN_TURN_S
from agent.simulator.simnode import SimNode, Stamp
from pushjobs import collector
from pushjobs.errors import (
    ClockSkewError,
    FrameError,
    MalformedMessage,
    OversizedFrame,
    ProtocolError,
    ReplayError,
    SignatureError,
    StateError,
    UnknownKey,
)
from pushjobs.protocol import codec
from pushjobs.protocol.framing import DEFAULT_LIMITS, Limits
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import Message, NodeHeartbeat
from pushjobs.protocol.replay import FIRST, RESTARTED, SAME, Accepted
from pushjobs.protocol.signing import HMAC_SHA256, METHODS, SIGNATURE_BYTES
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint, drain
from server.core.edgewire import Report
from server.core.nodetable import NodeEvent, NodeInfo, NodeOnline, NodeRestarted
from server.edge.edgeintake import BATCH, LAG_BUCKETS, TRICKLE_S, EdgeIntake
from server.front.sessions import SessionKey, SessionKeys

ENDPOINT = "tcp://127.0.0.1:45678"
INTERVAL_S = 1.0
MAX_SKEW_S = 30.0
END = b"END"
LOCAL = "tcp://127.0.0.1:*"
ONE_FRAME = "one-frame"
PACED = "paced"
PACED_S = 3.0  # a paced round's length
GATHER_S = 0.01  # "gather": the reader sleeps this long after a batch that was not full

# --- the old path, verbatim from before this benchmark (the baseline) ---------------------
# Only the parts a steady heartbeat runs through; names prefixed ``old``/``Old``.


class OldHmacVerifier:
    __slots__ = ("_keyed", "owner")
    method = HMAC_SHA256

    def __init__(self, key: bytes, owner: str | None = None) -> None:
        self.owner = owner
        self._keyed = hmac.new(key, digestmod=hashlib.sha256)

    def verify(self, data: bytes, signature: bytes) -> None:
        mac = self._keyed.copy()  # inlined _Hmac.tag: this is the heartbeat hot path
        mac.update(data)
        if not hmac.compare_digest(mac.digest(), signature):
            raise SignatureError("HMAC signature does not verify")


class OldSessions:
    """``SessionKeys.resolve`` as it was, over the keys of a settled fleet."""

    def __init__(self) -> None:
        self._verifiers: dict[str, OldHmacVerifier] = {}
        self._used: dict[str, str] = {}
        self._retired: dict[str, str] = {}
        self._stale: set[str] = set()

    def install(self, key: SessionKey) -> None:
        self._verifiers[key.key_id] = OldHmacVerifier(key.secret, owner=key.node)

    def resolve(self, method: str, key_id: str) -> OldHmacVerifier:
        if method != HMAC_SHA256:
            raise UnknownKey(f"node messages must be signed with {HMAC_SHA256}")
        verifier = self._verifiers.get(key_id)
        if verifier is None:
            node = self._retired.get(key_id)
            if node is not None:
                self._stale.add(node)
                raise UnknownKey(f"session key {key_id[:32]!r} of {node} has retired")
            raise UnknownKey(f"unknown session key {key_id[:32]!r}")
        node = verifier.owner
        if node is not None and self._used.get(node) != key_id:
            self._used[node] = key_id  # (``_heard_using``: runs once per key, not per beat)
        return verifier


_OLD_HEADER_CACHE: dict[bytes, tuple[str, str]] = {}
_OLD_HEADER_CACHE_MAX = 65536
_OLD_KEY_ID_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._@:+/=-"
)


def old_parse_header(header: bytes) -> tuple[str, str]:
    cached = _OLD_HEADER_CACHE.get(header)
    if cached is not None:
        return cached
    parsed = _old_parse_header(header)
    if len(_OLD_HEADER_CACHE) >= _OLD_HEADER_CACHE_MAX:
        _OLD_HEADER_CACHE.clear()
    _OLD_HEADER_CACHE[header] = parsed
    return parsed


def _old_parse_header(header: bytes) -> tuple[str, str]:
    try:
        text = header.decode("ascii")
    except UnicodeDecodeError:
        raise FrameError("header is not ASCII") from None
    parts = text.split(" ")
    if len(parts) != 3:
        raise FrameError("header must be 'VERSION METHOD KEYID'")
    version, method, key_id = parts
    if version != "PJ1":
        raise FrameError(f"unsupported protocol version {version[:16]!r}")
    if method not in METHODS:
        raise FrameError(f"unknown signing method {method[:32]!r}")
    if not 0 < len(key_id) <= 128 or not _OLD_KEY_ID_CHARS.issuperset(key_id):
        raise FrameError("invalid key id in header")
    return method, key_id


def old_decode(body: bytes) -> Message:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise MalformedMessage(f"body is not valid JSON: {exc}") from exc
    if type(obj) is not dict:
        raise MalformedMessage("body must be a JSON object")
    tag = obj.pop("type", None)
    spec = codec._SPECS.get(tag) if type(tag) is str else None
    if spec is None:
        raise MalformedMessage(f"unknown message type {tag!r}")
    message: Message = spec.build(obj, tag)
    if not 0 < len(message.sender) <= codec.MAX_ID_CHARS:
        raise MalformedMessage(f"{tag}.sender: must be 1 to {codec.MAX_ID_CHARS} characters")
    if not 0 < len(message.incarnation) <= codec.MAX_ID_CHARS:
        raise MalformedMessage(f"{tag}.incarnation: must be 1 to {codec.MAX_ID_CHARS} characters")
    if message.sequence < 0 or message.timestamp < 0:
        raise MalformedMessage(f"{tag}: sequence and timestamp must not be negative")
    return message


def old_open_frames(
    frames: Sequence[bytes], resolve: Callable[[str, str], Any], limits: Limits = DEFAULT_LIMITS
) -> Message:
    if len(frames) != 3:
        raise FrameError(f"expected 3 frames, got {len(frames)}")
    header, body, signature = frames
    if len(header) > limits.max_header_bytes:
        raise OversizedFrame(f"header of {len(header)} bytes exceeds {limits.max_header_bytes}")
    if len(body) > limits.max_body_bytes:
        raise OversizedFrame(f"body of {len(body)} bytes exceeds {limits.max_body_bytes}")
    method, key_id = old_parse_header(header)
    if len(signature) != SIGNATURE_BYTES[method]:
        raise SignatureError(f"{method} signature must be {SIGNATURE_BYTES[method]} bytes")
    verifier = resolve(method, key_id)
    if verifier.method != method:
        raise SignatureError(f"key {key_id} is not a {method} key")
    verifier.verify(header + b"\n" + body, signature)
    message = old_decode(body)
    if verifier.owner is not None and message.sender != verifier.owner:
        raise SignatureError(f"key {key_id} does not belong to sender {message.sender[:64]!r}")
    return message


class _OldSender:
    __slots__ = ("incarnation", "retired", "sequence")

    def __init__(self, incarnation: str, sequence: int) -> None:
        from collections import deque

        self.incarnation = incarnation
        self.sequence = sequence
        self.retired: Any = deque(maxlen=8)


class OldReplayWindow:
    __slots__ = ("_max_skew_ms", "_senders")

    def __init__(self, max_skew_s: float) -> None:
        self._max_skew_ms = int(max_skew_s * 1000)
        self._senders: dict[str, _OldSender] = {}

    def check(
        self, sender: str, incarnation: str, sequence: int, timestamp_ms: int, now_ms: int
    ) -> Accepted:
        skew = timestamp_ms - now_ms
        if skew > self._max_skew_ms or -skew > self._max_skew_ms:
            raise ClockSkewError(f"timestamp of {sender} is off")
        state = self._senders.get(sender)
        if state is None:
            self._senders[sender] = _OldSender(incarnation, sequence)
            return FIRST
        if incarnation == state.incarnation:
            if sequence <= state.sequence:
                raise ReplayError(
                    f"sequence {sequence} of {sender} is not newer than {state.sequence}"
                )
            state.sequence = sequence
            return SAME
        if incarnation in state.retired:
            raise ReplayError(f"incarnation {incarnation[:64]!r} of {sender} is retired")
        state.retired.append(state.incarnation)
        state.incarnation = incarnation
        state.sequence = sequence
        return RESTARTED


_OLD_REASONS: tuple[tuple[type[ProtocolError], str], ...] = (
    (OversizedFrame, "oversized"),
    (FrameError, "frame"),
    (UnknownKey, "unknown_key"),
    (SignatureError, "signature"),
    (MalformedMessage, "malformed"),
    (ClockSkewError, "clock_skew"),
    (ReplayError, "replay"),
)


@dataclass(frozen=True, slots=True)
class OldReceived:
    message: Message
    restarted: bool


class OldInbox:
    def __init__(self, resolve: Callable[[str, str], Any], max_skew_s: float) -> None:
        self.resolve = resolve
        self.limits = DEFAULT_LIMITS
        self.replay = OldReplayWindow(max_skew_s)
        self.drops: Counter[str] = Counter()
        self.last_error = ""

    def accept(self, frames: Sequence[bytes], now_ms: int) -> OldReceived | None:
        try:
            message = old_open_frames(frames, self.resolve, self.limits)
            accepted = self.replay.check(
                message.sender, message.incarnation, message.sequence, message.timestamp, now_ms
            )
        except ProtocolError as exc:
            self.drops[next((r for c, r in _OLD_REASONS if isinstance(exc, c)), "protocol")] += 1
            self.last_error = str(exc)
            return None
        return OldReceived(message, accepted.restarted)


class _OldPeer:
    __slots__ = ("last_seen", "online", "streak", "transitions")

    def __init__(self, now: float) -> None:
        self.last_seen = now
        self.online = False
        self.streak = 0
        self.transitions = 0


class OldLiveness:
    def __init__(self, interval_s: float, offline_threshold: int, online_threshold: int) -> None:
        self.online_threshold = online_threshold
        self.streak_gap_s = 1.5 * interval_s
        self._peers: dict[str, _OldPeer] = {}
        self._online: OrderedDict[str, _OldPeer] = OrderedDict()
        self._now = float("-inf")

    def _advance(self, now: float) -> None:
        if now < self._now:
            raise StateError(f"time went backwards: {now} < {self._now}")
        self._now = now

    def heartbeat(self, peer: str, now: float) -> object | None:
        self._advance(now)
        state = self._peers.get(peer)
        if state is None:
            state = self._peers[peer] = _OldPeer(now)
        elif state.online:
            state.last_seen = max(now, state.last_seen)
            self._online.move_to_end(peer)
            return None
        elif now - state.last_seen > self.streak_gap_s:
            state.streak = 0
        state.last_seen = now
        state.streak += 1
        if state.streak < self.online_threshold:
            return None
        state.online = True
        state.streak = 0
        state.transitions += 1
        self._online[peer] = state
        return (peer, now)


class OldNodeTable:
    def __init__(self, liveness: OldLiveness) -> None:
        self.liveness = liveness
        self._nodes: dict[str, NodeInfo] = {}

    def heartbeat(
        self,
        name: str,
        incarnation: str,
        command_endpoint: str,
        job_id: str | None,
        job_state: str | None,
        *,
        restarted: bool,
        now: float,
    ) -> list[NodeEvent]:
        info = self._nodes.get(name)
        if info is None:
            info = self._nodes[name] = NodeInfo(name)
        events: list[NodeEvent] = []
        if restarted or (info.incarnation and info.incarnation != incarnation):
            events.append(NodeRestarted(name, incarnation))
        info.incarnation = incarnation
        info.command_endpoint = command_endpoint
        info.job_id = job_id
        info.job_state = job_state
        if self.liveness.heartbeat(name, now) is not None:
            events.append(NodeOnline(name))
        return events


class _OldSeen:
    __slots__ = ("forwarded_at", "job_id", "job_state", "watch_until")

    def __init__(self) -> None:
        self.job_id: str | None = None
        self.job_state: str | None = None
        self.forwarded_at = float("-inf")
        self.watch_until = float("-inf")


class OldIntake:
    def __init__(self, inbox: OldInbox, liveness: OldLiveness) -> None:
        self.inbox = inbox
        self.liveness = liveness
        self.nodes = OldNodeTable(liveness)
        self.seen: dict[str, _OldSeen] = {}
        self.report = Report()
        self.backlog = False
        self.counters: Counter[str] = Counter()
        self.heartbeat_lag_ms = [0] * LAG_BUCKETS

    def receive(self, batch: list[list[bytes]], now: float, now_ms: int) -> None:
        self.backlog = len(batch) >= BATCH
        accept = self.inbox.accept
        for frames in batch:
            received = accept(frames, now_ms)
            if received is None:
                continue
            msg = received.message
            if isinstance(msg, NodeHeartbeat):
                self._heartbeat(msg, received.restarted, now, now_ms)
            else:
                self.counters["replies"] += 1
                self.report.replies.append(frames[1])

    def _heartbeat(self, msg: NodeHeartbeat, restarted: bool, now: float, now_ms: int) -> None:
        self.counters["heartbeats"] += 1
        lag = now_ms - msg.timestamp
        self.heartbeat_lag_ms[lag if 0 <= lag < LAG_BUCKETS else (0 if lag < 0 else -1)] += 1
        node = msg.sender
        for event in self.nodes.heartbeat(
            node,
            msg.incarnation,
            msg.command_endpoint,
            msg.job_id,
            msg.job_state,
            restarted=restarted,
            now=now,
        ):
            if isinstance(event, NodeOnline):
                self.report.online.append((node, msg.incarnation, msg.command_endpoint))
            elif isinstance(event, NodeRestarted):
                self.report.restarted.append((node, event.incarnation))
        seen = self.seen.get(node)
        if seen is None:
            seen = self.seen[node] = _OldSeen()
        changed = msg.job_id != seen.job_id or msg.job_state != seen.job_state
        if changed or (
            (msg.job_id is not None or now < seen.watch_until)
            and now - seen.forwarded_at >= TRICKLE_S
        ):
            seen.forwarded_at = now
            self.report.beats.append((node, msg.job_id, msg.job_state, msg.timestamp))
        seen.job_id, seen.job_state = msg.job_id, msg.job_state

    def expire(self, now: float) -> None:
        pass  # nothing expires in this benchmark: every node beats every round

    def take_report(self) -> Report:
        report, self.report = self.report, Report()
        return report


def old_drain(sock: zmq.Socket[bytes], limit: int) -> list[list[bytes]]:
    batch: list[list[bytes]] = []
    recv = sock.recv
    try:
        while len(batch) < limit:
            frame = recv(zmq.NOBLOCK, copy=False)
            parts = [frame.bytes]
            while frame.more:
                frame = recv(zmq.NOBLOCK, copy=False)
                parts.append(frame.bytes)
            batch.append(parts)
    except zmq.Again:
        pass
    return batch


# --- the fleet --------------------------------------------------------------------------------

Intake = EdgeIntake | OldIntake


def session_key(node: SimNode) -> SessionKey:
    key = hashlib.sha256(node.name.encode()).digest()
    return SessionKey(f"sk-{node.index:06d}-{key[:6].hex()}", node.name, key)


def fleet(count: int) -> list[SimNode]:
    nodes = [SimNode(i, f"sim-{i:06d}") for i in range(count)]
    for node in nodes:
        key = session_key(node)
        node.configure(key.key_id, key.secret, 1e12)
    return nodes


def intakes(nodes: Sequence[SimNode]) -> dict[str, Intake]:
    """A fresh edge intake per path, holding every node's session key."""
    sessions, old = SessionKeys(), OldSessions()
    for node in nodes:
        key = session_key(node)
        sessions.install(key, 0.0)
        old.install(key)
    return {
        "old": OldIntake(OldInbox(old.resolve, MAX_SKEW_S), OldLiveness(INTERVAL_S, 3, 1)),
        "new": EdgeIntake(Inbox(sessions.resolve, MAX_SKEW_S), LivenessTracker(INTERVAL_S, 3, 1)),
    }


def beats(nodes: Sequence[SimNode]) -> tuple[list[list[bytes]], int]:
    now_ms = time.time_ns() // 1_000_000
    stamp = Stamp(ENDPOINT, now_ms)
    return [list(node.beat(stamp)) for node in nodes], now_ms


def dropped(intake: Intake) -> int:
    return sum(intake.inbox.drops.values())


# --- measuring ---------------------------------------------------------------------------


class Best:
    """The best (least disturbed) round of each path, µs per heartbeat."""

    def __init__(self) -> None:
        self.thread: dict[str, float] = {}
        self.process: dict[str, float] = {}

    def add(self, name: str, items: int, thread_s: float, process_s: float) -> None:
        for table, took in ((self.thread, thread_s), (self.process, process_s)):
            us = took / items * 1e6
            table[name] = min(table.get(name, us), us)


def in_process(nodes: list[SimNode], rounds: int) -> Best:
    best = Best()
    paths = intakes(nodes)
    keys = [session_key(node).secret for node in nodes]
    clock = [1.0]

    def feed(intake: Intake, frames: list[list[bytes]], now_ms: int) -> None:
        now = clock[0]
        for i in range(0, len(frames), BATCH):
            intake.receive(frames[i : i + BATCH], now, now_ms)
            intake.expire(now)
            intake.take_report()

    def floor(frames: list[list[bytes]]) -> None:
        digest, same, loads = hmac.digest, hmac.compare_digest, orjson.loads
        for key, (header, body, signature) in zip(keys, frames, strict=True):
            same(digest(key, header + b"\n" + body, "sha256"), signature)
            loads(body)

    frames, now_ms = beats(nodes)
    for intake in paths.values():  # first sight of every node: not the steady state
        feed(intake, frames, now_ms)
    for _ in range(rounds):
        clock[0] += INTERVAL_S
        frames, now_ms = beats(nodes)  # built outside the timed region; each path reads them
        for name, intake in paths.items():
            thread, proc = time.thread_time(), time.process_time()
            feed(intake, frames, now_ms)
            best.add(name, len(frames), time.thread_time() - thread, time.process_time() - proc)
        thread, proc = time.thread_time(), time.process_time()
        floor(frames)
        best.add("hmac+json", len(frames), time.thread_time() - thread, time.process_time() - proc)
    for name, intake in paths.items():
        assert dropped(intake) == 0, (name, intake.inbox.drops)
        assert intake.counters["heartbeats"] == (rounds + 1) * len(nodes), name
    return best


# --- over a socket ------------------------------------------------------------------------------


def sender(conn: Connection, nodes: list[SimNode], server_public: bytes, hwm: int) -> None:
    """A child process: one PUSH per link; on ``go <link>`` one heartbeat of every node."""
    ctx = zmq.Context()
    pushes: dict[str, zmq.Socket[bytes]] = {}
    for link, endpoint in conn.recv():
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.SNDHWM, hwm)
        push.setsockopt(zmq.LINGER, 0)
        if link == "curve":
            public, secret = zmq.curve_keypair()
            push.curve_secretkey, push.curve_publickey = secret, public
            push.curve_serverkey = server_public
        push.connect(endpoint)
        pushes[link] = push
    while True:
        order = conn.recv()
        if order == "quit":
            break
        link, shape, count, rate = order
        push = pushes[link]
        stamp = Stamp(ENDPOINT, time.time_ns() // 1_000_000)
        if shape == ONE_FRAME:  # what one frame per message would cost: not the protocol
            send_one = push.send
            for node in nodes[:count]:
                send_one(b"".join(node.beat(stamp)))
        elif shape == PACED:  # as the simulator's loop: what is due every MIN_TURN_S
            send = push.send_multipart
            per_turn = max(1, round(rate * MIN_TURN_S))
            started = time.monotonic()
            for turn, first in enumerate(range(0, count, per_turn)):
                time.sleep(max(0.0, started + turn * MIN_TURN_S - time.monotonic()))
                stamp = Stamp(ENDPOINT, time.time_ns() // 1_000_000)
                for node in nodes[first : min(count, first + per_turn)]:
                    send(node.beat(stamp))
        else:
            send = push.send_multipart
            for node in nodes[:count]:
                send(node.beat(stamp))
        push.send(END)
        conn.send("sent")
    ctx.destroy(linger=0)


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Links:
    def __init__(self, nodes: list[SimNode], hwm: int) -> None:
        public, secret = zmq.curve_keypair()
        fork = multiprocessing.get_context("fork")  # before this process has a zmq context
        self.conn, child = fork.Pipe()
        self.proc = fork.Process(target=sender, args=(child, nodes, public, hwm), daemon=True)
        self.proc.start()
        self.count = len(nodes)
        self.transport = Transport()
        keys = CurveKeys(public.decode("ascii"), secret.decode("ascii"))
        self.pulls = {
            "curve": self.transport.socket("pull", bind=LOCAL, hwm=hwm, curve_server=keys),
            "plain": self.transport.socket("pull", bind=LOCAL, hwm=hwm),
        }
        self.conn.send([(link, bound_endpoint(pull)) for link, pull in self.pulls.items()])

    def round(
        self,
        link: str,
        read: Callable[[zmq.Socket[bytes], int], list[list[bytes]]],
        intake: Intake | None,
        shape: str = "",
        count: int = 0,
        rate: int = 0,
        gather_s: float = 0.0,
    ) -> tuple[int, float, float]:
        """(heartbeats, thread CPU, process CPU) of one round read through ``intake``."""
        pull = self.pulls[link]
        thread, proc = time.thread_time(), cpu_s()
        self.conn.send((link, shape, count or self.count, rate))
        if shape != PACED:
            self.conn.recv()  # the child sent them all; libzmq's threads still carry them
        got, done = 0, False
        while not done:
            pull.poll(1000)
            batch = read(pull, BATCH)
            if batch and batch[-1] == [END]:
                batch.pop()
                done = True
            got += len(batch)
            if intake is not None:
                now = time.monotonic()
                intake.receive(batch, now, time.time_ns() // 1_000_000)
                intake.expire(now)
                intake.take_report()
            if gather_s and len(batch) < BATCH:
                time.sleep(gather_s)  # let the next batch gather: fewer, fuller wakeups
        took = time.thread_time() - thread, cpu_s() - proc
        if shape == PACED:
            self.conn.recv()
        return got, *took

    def close(self) -> None:
        self.conn.send("quit")
        self.proc.join(5)
        self.transport.close()


def over_socket(nodes: list[SimNode], links: Links, rounds: int) -> Best:
    best = Best()
    paths: list[tuple[str, str, Any, Intake | None, str]] = []
    for link in ("curve", "plain"):
        fresh = intakes(nodes)
        paths += [
            (f"old {link}", link, old_drain, fresh["old"], ""),
            (f"new {link}", link, drain, fresh["new"], ""),
            (f"recv {link}", link, drain, None, ""),
            (f"recv1 {link}", link, drain, None, ONE_FRAME),
        ]
    for _, link, read, intake, shape in paths:  # first sight of every node: not steady
        links.round(link, read, intake, shape)
    for _ in range(rounds):
        for name, link, read, intake, shape in paths:
            got, thread_s, proc_s = links.round(link, read, intake, shape)
            assert got == len(nodes), (name, got)
            best.add(name, got, thread_s, proc_s)
    for name, _, _, intake, _ in paths:
        if intake is not None:
            assert dropped(intake) == 0, (name, intake.inbox.drops)
            assert intake.counters["heartbeats"] == (rounds + 1) * len(nodes), name
    return best


def paced(nodes: list[SimNode], links: Links, rounds: int, rate: int) -> Best:
    """The same over CurveZMQ, the heartbeats sent at ``rate`` a second as the simulator
    sends them (what is due every ``MIN_TURN_S``), read as they come: the edge below
    saturation, each wakeup reading a small batch. ``gather``: the reader sleeps
    ``GATHER_S`` after a batch that was not full, as an edge loop could, so its wakeups
    are fewer and fuller (what that costs is lag: at most ``GATHER_S`` more)."""
    best = Best()
    count = min(len(nodes), round(rate * PACED_S))
    fresh = intakes(nodes[:count])
    gathering = intakes(nodes[:count])["new"]
    paths: list[tuple[str, Any, Intake | None, float]] = [
        ("old paced", old_drain, fresh["old"], 0.0),
        ("new paced", drain, fresh["new"], 0.0),
        ("recv paced", drain, None, 0.0),
        ("new gather", drain, gathering, GATHER_S),
        ("recv gather", drain, None, GATHER_S),
    ]
    for _, read, intake, _ in paths:  # first sight of every node, saturated
        links.round("curve", read, intake, count=count)
    for _ in range(rounds):
        for name, read, intake, gather_s in paths:
            got, thread_s, proc_s = links.round("curve", read, intake, PACED, count, rate, gather_s)
            assert got == count, (name, got)
            best.add(name, got, thread_s, proc_s)
    return best


def show(title: str, best: Best, names: Sequence[str], thread: bool = True) -> None:
    print(f"\n{title}")
    head = f"  {'path':<12} {'process µs':>11} {'per core/s':>11}"
    print(head + (f" {'thread µs':>10} {'other threads µs':>17}" if thread else ""))
    for name in names:
        proc = best.process[name]
        line = f"  {name:<12} {proc:>11.2f} {1e6 / proc if proc > 0 else 0:>11,.0f}"
        if thread:
            line += f" {best.thread[name]:>10.2f} {proc - best.thread[name]:>17.2f}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--socket-nodes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds, best kept")
    parser.add_argument("--skip-socket", action="store_true")
    parser.add_argument(
        "--rate",
        type=int,
        default=10_000,
        help="heartbeats a second of the paced round over CurveZMQ (0: none)",
    )
    args = parser.parse_args()
    collector.tune()  # as the edge's process (``server.edge.__main__``)
    print(describe())
    print(
        f"pyzmq {zmq.__version__}, libzmq {zmq.zmq_version()}, orjson {orjson.__version__}; "
        f"{args.nodes:,} nodes in process, {args.socket_nodes:,} over the socket, "
        f"{args.rounds} rounds, pid {os.getpid()}"
    )
    count = max(args.nodes, 0 if args.skip_socket else args.socket_nodes)
    nodes = fleet(count)
    links = None
    if not args.skip_socket:  # forked before any zmq context or large garbage exists here
        links = Links(nodes[: args.socket_nodes], hwm=4 * args.socket_nodes)
    gc.collect()
    try:
        best = in_process(nodes[: args.nodes], args.rounds)
        show(
            "(a) in process, prebuilt frames: verify, decode, replay, liveness, forwarding; "
            "per heartbeat",
            best,
            ("old", "new", "hmac+json"),
            thread=False,
        )
        if links is not None:
            best = over_socket(nodes[: args.socket_nodes], links, args.rounds)
            show(
                "(b) the edge's process over a real PULL, all threads; per heartbeat",
                best,
                (
                    "old curve",
                    "new curve",
                    "recv curve",
                    "recv1 curve",
                    "old plain",
                    "new plain",
                    "recv plain",
                    "recv1 plain",
                ),
            )
            one = best.process["recv curve"] - best.process["recv1 curve"]
            print(
                f"  one frame per message instead of three (recv1: the same bytes joined, "
                f"not the protocol) would save {one:.2f} µs under CurveZMQ"
            )
            curve = best.process["new curve"] - best.process["new plain"]
            print(
                f"  CurveZMQ's share of new: {curve:.2f} µs of {best.process['new curve']:.2f} "
                f"({curve / best.process['new curve']:.0%}); the socket alone (recv curve) "
                f"{best.process['recv curve'] / best.process['new curve']:.0%}"
            )
            if args.rate > 0:
                best = paced(nodes[: args.socket_nodes], links, args.rounds, args.rate)
                show(
                    f"(c) the same over CurveZMQ at {args.rate:,} heartbeats a second, as the "
                    "simulator paces them; per heartbeat",
                    best,
                    ("old paced", "new paced", "recv paced", "new gather", "recv gather"),
                )
    finally:
        if links is not None:
            links.close()


if __name__ == "__main__":
    main()
