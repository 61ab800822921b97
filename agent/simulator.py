"""The fleet simulator: one process playing many nodes over a handful of shared sockets.

Theory of operation. A real agent has four sockets (SUB, PUSH, its command PULL, a
DEALER for discovery); a simulator of K nodes has the same four, shared: every node's
heartbeats and replies leave by one PUSH, the server's heartbeats arrive once on one SUB,
every node advertises the one command endpoint (each command names its node), and config
discovery for all nodes is pipelined over one DEALER (each reply names its node). So
50,000 nodes need a few simulator processes and a few dozen file descriptors.

On the wire each simulated node is an agent: its own name, Ed25519 identity, incarnation,
sequence numbers and HMAC session key; the same runner rules (``simnode``). One turn of
the loop handles what arrived (config replies, commands, server heartbeats, control
lines on stdin), fires due timers (delayed replies, simulated processes ending, commit
timeouts, discovery retries), sends the heartbeats that fell due since the last turn and
flushes queued replies. Heartbeats are spread evenly over the interval by a cursor over
the node list: node i beats at phase i/K, with no per-node timer.

Like an agent, the simulator tracks the server's liveness from its signed heartbeats:
while the server is offline it sends nothing and discards commands; on a new server
incarnation every node rediscovers after a random splay; each node rediscovers when its
config lifetime ends (not while it runs a job).

Control, one line on stdin each, answered by one JSON line on stdout (indexes are this
process's own, 0-based, end excluded): ``silence A B``, ``resume A B`` (a node that is
silent sends nothing and ignores commands: for flapping and thresholds at scale),
``restart A B`` (new incarnations, as if the agents were restarted), ``stats``.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import random
import sys
import time
from base64 import b64decode
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson
import zmq

from agent.discovery import REPLY_LIMITS, server_resolver
from agent.link import ServerLink
from agent.simkeys import DEFAULT_PREFIX, DEFAULT_SEED, SimKeys, node_name
from agent.simnode import Behaviour, Effect, ExpireAt, FinishAt, Later, Restart, SimNode
from keys import fingerprint
from keys.identity import PublicIdentity, b64
from pushjobs.errors import OversizedFrame, TransportError, UnknownKey
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import Limits, parse_header
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import HMAC_SHA256, Ed25519Signer, HmacVerifier, Verifier
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint, drain

log = logging.getLogger("pushjobs.simulate")

SERVER = "server"
BATCH = 4096
MIN_TURN_S = 0.002  # heartbeats due within this are sent together
MAX_TURN_S = 0.25
PUSH_HWM = 100_000
RETRY_PENDING_S = 5.0


@dataclass(frozen=True, slots=True)
class SimSettings:
    api: str
    server: PublicIdentity
    nodes: int
    first: int = 0
    prefix: str = DEFAULT_PREFIX
    seed: str = DEFAULT_SEED
    bind: str = "tcp://127.0.0.1:*"
    behaviour: Behaviour = field(default_factory=Behaviour)
    window: int = 256
    attempt_timeout_s: float = 10.0
    splay_s: float = 10.0
    duration_s: float | None = None
    facts: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ("simulated",)
    rng_seed: int | None = None


class Simulator:
    def __init__(self, settings: SimSettings, *, out: TextIO | None = None) -> None:
        self.s = settings
        self.out = out if out is not None else sys.stdout
        self.how = settings.behaviour
        self.rng = random.Random(settings.rng_seed)
        self.keys = SimKeys(settings.seed, settings.prefix)
        self.nodes = [
            SimNode(i, node_name(settings.prefix, settings.first + i), self.how.commit_timeout_s)
            for i in range(settings.nodes)
        ]
        self.by_name = {node.name: node for node in self.nodes}
        self.api_outboxes: dict[str, Outbox] = {}
        curve = CurveKeys(self.keys.curve_public, self.keys.curve_secret)
        self.curve = curve
        self.transport = Transport()
        server = settings.server
        self.command = self.transport.socket(
            "pull",
            bind=settings.bind,
            hwm=PUSH_HWM,
            curve_server=curve,
            allowed_clients=lambda key: key == server.curve_public,
        )
        self.endpoint = bound_endpoint(self.command)
        self.dealer = self.transport.socket(
            "dealer",
            connect=settings.api,
            hwm=PUSH_HWM,
            curve_client=curve,
            server_public=server.curve_public,
        )
        server_kid, verifier = server_resolver(server)

        def resolve(method: str, key_id: str) -> Verifier:
            if key_id != server_kid:
                raise UnknownKey(f"not the server's key: {key_id[:32]!r}")
            return verifier

        self._resolve = resolve
        # Commands come signed with the target node's session key (current or previous).
        self.command_keys: dict[str, tuple[HmacVerifier, SimNode]] = {}

        def resolve_command(method: str, key_id: str) -> Verifier:
            if method == HMAC_SHA256:
                found = self.command_keys.get(key_id)
                if found is None:
                    raise UnknownKey(f"not a session key of a simulated node: {key_id[:32]!r}")
                return found[0]
            return resolve(method, key_id)

        self._resolve_command = resolve_command
        self.config_inbox = Inbox(resolve, 300.0, REPLY_LIMITS)
        self.beat_inbox = Inbox(resolve, 30.0)
        self.cmd_inbox = Inbox(resolve_command, 30.0)
        self.link = ServerLink(self.transport, curve, server.curve_public, PUSH_HWM)
        self.sub: zmq.Socket[bytes] | None = None
        self.push: zmq.Socket[bytes] | None = None
        self.cfg: m.NodeConfig | None = None
        self.liveness: LivenessTracker | None = None
        self.server_incarnation = ""

        self.to_discover: deque[SimNode] = deque(self.nodes)
        self.inflight: dict[str, float] = {}
        self.timers: list[tuple[float, int, int, Callable[[], None]]] = []
        self._timer_seq = 0
        self.replies: deque[tuple[SimNode, str, type[m.Message], dict[str, Any]]] = deque()
        self.counters: Counter[str] = Counter()
        self.configured = 0
        self.announced = False
        self.started = time.monotonic()
        self.beat_origin = self.started
        self.beat_cursor = 0
        self.next_scan = self.started + 1.0
        self.stopping = False
        self.stdin_fd: int | None = None
        self._stdin_buf = b""

    # --- the loop -------------------------------------------------------------------------

    def run(self, stdin_fd: int | None = None) -> None:
        self.stdin_fd = stdin_fd
        if stdin_fd is not None:
            os.set_blocking(stdin_fd, False)
        self._say(
            f"pushjobs-simulate ready command={self.endpoint} nodes={len(self.nodes)} "
            f"first={self.s.first}"
        )
        end = None if self.s.duration_s is None else self.started + self.s.duration_s
        while not self.stopping:
            poller = zmq.Poller()
            poller.register(self.dealer, zmq.POLLIN)
            poller.register(self.command, zmq.POLLIN)
            if self.sub is not None:
                poller.register(self.sub, zmq.POLLIN)
            if self.stdin_fd is not None:
                poller.register(self.stdin_fd, zmq.POLLIN)
            ready = dict(poller.poll(round(self._wait_s() * 1000)))
            self.turn(ready)
            if end is not None and time.monotonic() >= end:
                break
        self._say(orjson.dumps({"final": True, **self.stats()}).decode())

    def turn(self, ready: dict[Any, int]) -> None:
        if self.dealer in ready:
            for frames in drain(self.dealer, BATCH):
                self._on_config(frames)
        if self.sub is not None and self.sub in ready:
            self._on_server_beats(drain(self.sub, 256))
        if self.command in ready:
            for frames in drain(self.command, BATCH):
                self._on_command(frames)
        if self.stdin_fd is not None and self.stdin_fd in ready:
            self._on_stdin()
        now = time.monotonic()
        self._fire_timers(now)
        if self.liveness is not None:
            for gone in self.liveness.expire(now):
                log.warning("server offline (no heartbeat for %.1f s)", now - gone.last_seen)
        if now >= self.next_scan:
            self._scan(now)
        self._pump_discovery(now)
        self._heartbeats(now)
        self._flush()

    def _wait_s(self) -> float:
        now = time.monotonic()
        due = [now + MAX_TURN_S, self.next_scan]
        if self.timers:
            due.append(self.timers[0][0])
        if self.cfg is not None and self.nodes:
            step = self.cfg.interval_s / len(self.nodes)
            due.append(max(now + MIN_TURN_S, self.beat_origin + (self.beat_cursor + 1) * step))
        if self.liveness is not None and (deadline := self.liveness.next_deadline()) is not None:
            due.append(deadline)
        return max(0.0, min(due) - now)

    @property
    def server_online(self) -> bool:
        return self.liveness is not None and self.liveness.is_online(SERVER)

    # --- timers ----------------------------------------------------------------------------

    def _at(self, delay_s: float, node: SimNode, action: Callable[[], None]) -> None:
        self._timer_seq += 1
        heapq.heappush(
            self.timers, (time.monotonic() + delay_s, self._timer_seq, node.index, action)
        )

    def _fire_timers(self, now: float) -> None:
        timers = self.timers
        while timers and timers[0][0] <= now:
            _, _, _, action = heapq.heappop(timers)
            action()

    def _scan(self, now: float) -> None:
        """Once a second: discovery attempts that timed out, configs that expire."""
        self.next_scan = now + 1.0
        for name, deadline in list(self.inflight.items()):
            if deadline <= now:
                del self.inflight[name]
                self.counters["config_timeouts"] += 1
                self.to_discover.append(self.by_name[name])
        for node in self.nodes:
            if (
                node.configured
                and node.config_until <= now
                and not node.runner.busy
                and node.name not in self.inflight
            ):
                node.config_until = now + self.s.attempt_timeout_s  # asked once per expiry
                self.to_discover.append(node)

    # --- discovery ---------------------------------------------------------------------------

    def _pump_discovery(self, now: float) -> None:
        while self.to_discover and len(self.inflight) < self.s.window:
            node = self.to_discover.popleft()
            if node.name in self.inflight:
                continue
            frames = self._config_request(node, now)
            try:
                self.dealer.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                self.to_discover.appendleft(node)
                return
            self.inflight[node.name] = now + self.s.attempt_timeout_s
            self.counters["config_requests"] += 1

    def _config_request(self, node: SimNode, now: float) -> list[bytes]:
        identity = self.keys.private(self.s.first + node.index)
        outbox = self.api_outboxes.get(node.name)
        if outbox is None or outbox.incarnation != node.incarnation:
            signer = Ed25519Signer(
                fingerprint.key_id(identity.public.ed25519_public), identity.signing_key()
            )
            outbox = self.api_outboxes[node.name] = Outbox(node.name, node.incarnation, signer)
        return outbox.frames(
            m.ConfigRequest,
            _now_ms(),
            command_endpoint=self.endpoint,
            ed25519_public=b64(identity.public.ed25519_public),
            curve_public=identity.public.curve_public,
            facts={"simulated": "true", **self.s.facts},
            tags=self.s.tags,
        )

    def _on_config(self, frames: list[bytes]) -> None:
        received = self.config_inbox.accept(frames, _now_ms())
        reply = None if received is None else received.message
        if not isinstance(reply, m.ConfigReply):
            self.counters["config_replies_dropped"] += 1
            return
        node = self.by_name.get(reply.node)
        if node is None:
            self.counters["config_replies_dropped"] += 1
            return
        self.inflight.pop(node.name, None)
        self.counters[f"config_{reply.status}"] += 1
        if reply.status != "accepted" or reply.config is None:
            self._at(RETRY_PENDING_S * (0.5 + self.rng.random()), node, self._rediscover(node))
            return
        # Every accepted reply applies, newest last: the server keeps only the newest key
        # of a node valid past a short grace.
        cfg = reply.config
        now = time.monotonic()
        was = node.configured
        secret = b64decode(cfg.session_key_b64)
        self.command_keys[cfg.session_key_id] = (HmacVerifier(secret, owner=cfg.server_id), node)
        node.key_ids.append(cfg.session_key_id)
        while len(node.key_ids) > 2:  # the previous key stays for commands in flight
            self.command_keys.pop(node.key_ids.pop(0), None)
        node.configure(cfg.session_key_id, secret, now + cfg.lifetime_s)
        if not was:
            self.configured += 1
        self._apply_server_config(cfg, now)
        if self.configured == len(self.nodes) and not self.announced:
            self.announced = True
            took = now - self.started
            self._say(f"pushjobs-simulate configured nodes={self.configured} in {took:.2f}s")

    def _rediscover(self, node: SimNode) -> Callable[[], None]:
        def again() -> None:
            if node.name not in self.inflight:
                self.to_discover.append(node)

        return again

    def _apply_server_config(self, cfg: m.NodeConfig, now: float) -> None:
        old = self.cfg
        self.cfg = cfg
        self.link.follow(old, cfg)
        self.sub, self.push = self.link.sub, self.link.push
        if old is None or old.server_incarnation != cfg.server_incarnation:
            self.server_incarnation = cfg.server_incarnation
            limits = Limits(max_body_bytes=cfg.max_body_bytes)
            self.beat_inbox = Inbox(self._resolve, cfg.max_skew_s)
            self.cmd_inbox = Inbox(self._resolve_command, cfg.max_skew_s, limits)
            self.liveness = LivenessTracker(
                cfg.interval_s, cfg.offline_threshold, cfg.online_threshold
            )
            for _ in range(cfg.online_threshold):  # a signed answer proves the server alive
                self.liveness.heartbeat(SERVER, now)

    # --- server heartbeats and commands --------------------------------------------------------

    def _on_server_beats(self, batch: list[list[bytes]]) -> None:
        now = time.monotonic()
        for frames in batch:
            received = self.beat_inbox.accept(frames, _now_ms())
            if received is None or not isinstance(received.message, m.ServerHeartbeat):
                continue
            if self.liveness is not None and self.liveness.heartbeat(SERVER, now) is not None:
                log.info("server online")
            beat = received.message
            if beat.incarnation != self.server_incarnation and self.cfg is not None:
                # The server restarted: its session keys are gone. Everyone asks again,
                # spread over the splay so the new server is not flooded at once.
                log.info("server restarted (incarnation %s): rediscovering", beat.incarnation)
                self.server_incarnation = beat.incarnation
                for node in self.nodes:
                    delay = self.rng.uniform(0, self.s.splay_s)
                    self._at(delay, node, self._rediscover(node))

    def _on_command(self, frames: list[bytes]) -> None:
        received = self.cmd_inbox.accept(frames, _now_ms())
        if received is None:
            return
        cmd = received.message
        node = self.by_name.get(getattr(cmd, "node", ""))
        method, kid = parse_header(frames[0])
        found = self.command_keys.get(kid) if method == HMAC_SHA256 else None
        if node is None or (method == HMAC_SHA256 and (found is None or found[1] is not node)):
            self.cmd_inbox.drops["other_node"] += 1  # not for a node here, or its key
            return
        if node.silent or not self.server_online or not node.configured:
            self.counters["commands_discarded"] += 1
            return
        now = time.monotonic()
        self.counters[f"cmd_{cmd.TYPE}"] += 1
        match cmd:
            case m.Commit():
                effects = node.on_commit(cmd, self.rng, self.how, now)
            case m.Run():
                effects = node.on_run(cmd, self.how, now)
            case m.Abort():
                effects = node.on_abort(cmd, now)
            case _:
                return  # a ping asks for a heartbeat; the next one is never far
        self._apply(node, effects)

    def _apply(self, node: SimNode, effects: list[Effect]) -> None:
        incarnation = node.incarnation
        for effect in effects:
            match effect:
                case Later(delay_s=0.0, cls=cls, fields=fields):
                    self.replies.append((node, incarnation, cls, fields))
                case Later(delay_s=delay, cls=cls, fields=fields):
                    self._at(delay, node, self._reply_later(node, incarnation, cls, fields))
                case FinishAt(delay_s=delay, job_id=job_id):
                    self._at(delay, node, self._finish(node, job_id))
                case ExpireAt(delay_s=delay):
                    self._at(delay, node, lambda: self._apply(node, node.expire(time.monotonic())))
                case Restart(reason=reason):
                    self._restart(node, reason)

    def _reply_later(
        self, node: SimNode, incarnation: str, cls: type[m.Message], fields: dict[str, Any]
    ) -> Callable[[], None]:
        return lambda: self.replies.append((node, incarnation, cls, fields))

    def _finish(self, node: SimNode, job_id: str) -> Callable[[], None]:
        def finish() -> None:
            effects = node.finish(job_id, self.rng, self.how, time.monotonic())
            for effect in effects:
                if isinstance(effect, Later):
                    self.counters[f"jobs_{effect.cls.TYPE}"] += 1
            self._apply(node, effects)

        return finish

    def _restart(self, node: SimNode, reason: str) -> None:
        self.counters["restarts"] += 1
        if node.configured:
            self.configured -= 1
        node.restart()
        self.inflight.pop(node.name, None)
        self.to_discover.append(node)

    # --- sending -------------------------------------------------------------------------------

    def _heartbeats(self, now: float) -> None:
        cfg, push, nodes = self.cfg, self.push, self.nodes
        if cfg is None or push is None or not nodes:
            return
        count = len(nodes)
        due = int((now - self.beat_origin) / cfg.interval_s * count)
        cursor = self.beat_cursor
        if due - cursor > count:  # stalled for over an interval: one beat each, not a burst
            cursor = due - count
        if due <= cursor:
            return
        self.beat_cursor = due
        if not self.server_online:
            return
        endpoint = self.endpoint
        now_ms = _now_ms()
        sent = dropped = 0
        for i in range(cursor, due):
            node = nodes[i % count]
            if node.silent or node.outbox is None:
                continue
            try:
                push.send_multipart(node.heartbeat_frames(endpoint, now_ms), zmq.NOBLOCK)
                sent += 1
            except zmq.Again:  # a queued heartbeat is worthless: drop it, count it
                dropped += 1
        self.counters["heartbeats_sent"] += sent
        if dropped:
            self.counters["heartbeats_dropped"] += dropped

    def _flush(self) -> None:
        push = self.push
        if push is None or not self.server_online or not self.replies:
            return
        for _ in range(len(self.replies)):
            node, incarnation, cls, fields = self.replies.popleft()
            if incarnation != node.incarnation:
                self.counters["replies_lost_in_restart"] += 1
                continue
            if node.silent or node.outbox is None:
                self.replies.append((node, incarnation, cls, fields))  # held, not lost
                continue
            try:
                frames = node.outbox.frames(cls, _now_ms(), **fields)
            except OversizedFrame:
                self.counters["replies_oversized"] += 1
                continue
            try:
                push.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                self.replies.appendleft((node, incarnation, cls, fields))
                return
            self.counters["replies_sent"] += 1

    # --- control --------------------------------------------------------------------------------

    def _on_stdin(self) -> None:
        assert self.stdin_fd is not None
        try:
            chunk = os.read(self.stdin_fd, 65536)
        except BlockingIOError:
            return
        if not chunk:  # no more control input; keep simulating
            self.stdin_fd = None
            return
        self._stdin_buf += chunk
        *lines, self._stdin_buf = self._stdin_buf.split(b"\n")
        for line in lines:
            self._say(orjson.dumps(self.control(line.decode(errors="replace"))).decode())

    def control(self, line: str) -> dict[str, Any]:
        words = line.split()
        if not words:
            return {"ok": False, "error": "empty command"}
        verb, args = words[0], words[1:]
        if verb == "stats":
            return {"ok": True, **self.stats()}
        if verb in ("silence", "resume", "restart"):
            try:
                start, end = (int(a) for a in args)
            except ValueError:
                return {"ok": False, "error": f"usage: {verb} FIRST END (local indexes)"}
            if not 0 <= start < end <= len(self.nodes):
                return {"ok": False, "error": f"range must lie within 0..{len(self.nodes)}"}
            for node in self.nodes[start:end]:
                if verb == "restart":
                    self._restart(node, "restart requested")
                else:
                    node.silent = verb == "silence"
            return {"ok": True, verb: end - start}
        return {"ok": False, "error": f"unknown command {verb!r} (stats, silence, resume, restart)"}

    def stats(self) -> dict[str, Any]:
        drops = {
            "config": dict(self.config_inbox.drops),
            "beats": dict(self.beat_inbox.drops),
            "commands": dict(self.cmd_inbox.drops),
        }
        return {
            "nodes": len(self.nodes),
            "configured": self.configured,
            "silent": sum(1 for n in self.nodes if n.silent),
            "server_online": self.server_online,
            "queued_replies": len(self.replies),
            "counters": dict(self.counters),
            "drops": {k: v for k, v in drops.items() if v},
        }

    def _say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        with contextlib.suppress(TransportError):
            self.transport.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
