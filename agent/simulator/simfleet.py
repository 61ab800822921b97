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

Like an agent, it watches the server (``serverwatch``): while the server is offline it
sends nothing and discards commands; on a new incarnation of the heartbeats' sender (the
server, or the edge a node is placed on: each signs its own) the nodes that hear it
rediscover after a random splay; each node rediscovers when its config lifetime ends (not while it
runs a job), and when a ping asks it to (its edge draining). It follows the leader as an
agent does (``simleader``: a standby's redirect, the heartbeats' ``leader`` flag, a
server that answers nothing). ``simdiscovery``
pipelines discovery, ``simfanout`` sends, ``simcontrol`` reads control lines from stdin.
Killed at any line, a simulator loses all it holds, as killed agents would; restarted,
it plays new incarnations that discover again.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import random
import sys
import time
from base64 import b64decode
from collections import Counter, deque
from collections.abc import Callable
from functools import partial
from typing import Any, TextIO

import orjson
import zmq

from agent.link import ServerLink
from agent.serverwatch import ServerWatch
from agent.simulator import simcontrol
from agent.simulator.simdiscovery import DiscoveryPipeline
from agent.simulator.simfanout import FanOut
from agent.simulator.simleader import ServerChoice
from agent.simulator.simnode import Effect, ExpireAt, FinishAt, Later, Restart, SimNode
from agent.simulator.simsettings import SimSettings
from agent.trust import trust_server, trust_sessions
from pushjobs.errors import TransportError
from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import MAX_BODY_CEILING, KeyResolver, Limits, parse_header
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.replay import Accepted, ReplayWindow
from pushjobs.protocol.signing import HMAC_SHA256, HmacVerifier, Verifier
from pushjobs.testbed.simkeys import SimKeys, node_name
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint, drain

log = logging.getLogger("pushjobs.simulate")

BATCH = 4096
MIN_TURN_S = 0.002  # heartbeats due within this are sent together
MAX_TURN_S = 0.25
PUSH_HWM = 100_000
RETRY_PENDING_S = 5.0
BEATS_REMEMBERED = 64  # server heartbeats recognised when another socket brings them again


class Simulator:
    def __init__(self, settings: SimSettings, *, out: TextIO | None = None) -> None:
        self.s = settings
        self.out = out if out is not None else sys.stdout
        self.how = settings.behaviour
        self.rng = random.Random(settings.rng_seed)
        keys = SimKeys(settings.seed, settings.prefix)
        self.nodes = [
            SimNode(i, node_name(settings.prefix, settings.first + i), self.how.commit_timeout_s)
            for i in range(settings.nodes)
        ]
        self.by_name = {node.name: node for node in self.nodes}
        curve = CurveKeys(keys.curve_public, keys.curve_secret)
        self.transport = Transport(max_message_bytes=MAX_BODY_CEILING + 4096)
        server = settings.server
        self.command = self.transport.socket(
            "pull",
            bind=settings.bind,
            hwm=PUSH_HWM,
            curve_server=curve,
            allowed_clients=lambda key: key == server.curve_public,
        )
        self.endpoint = bound_endpoint(self.command)
        servers = [settings.api, *(e for e in settings.servers if e != settings.api)]
        self.choice = ServerChoice(servers, time.monotonic())
        # Commands come signed with the target node's session key (current or previous).
        self.command_keys: dict[str, tuple[HmacVerifier, SimNode]] = {}
        self._resolve_command = trust_sessions(
            self._session_key, trust_server(server), "not a session key of a simulated node: {!r}"
        )
        self.watch = ServerWatch(trust_server(server), log)
        self.cmd_inbox = _command_inbox(self._resolve_command, 30.0)
        self.curve = curve
        self.edge_links: dict[str, zmq.Socket[bytes]] = {}
        # Each edge's heartbeats, watched apart (``_review_edges``): an agent watches the
        # server through its own edge, and leaves it when that edge falls silent.
        self.edge_subs: dict[str, zmq.Socket[bytes]] = {}
        self.edge_heard: dict[str, float] = {}
        self.beats_seen: set[bytes] = set()  # the last beats' signatures (``_once``)
        self.beats_order: deque[bytes] = deque(maxlen=BEATS_REMEMBERED)
        self.link = ServerLink(self.transport, curve, server.curve_public, PUSH_HWM)
        self.cfg: m.NodeConfig | None = None
        # The incarnation each heartbeat endpoint's configs named: the server's, or with
        # edges each edge's own (it signs the heartbeats its nodes hear).
        self.incarnations: dict[str, str] = {}
        self.sub_endpoint = ""  # what ``link.sub`` listens to

        self.counters: Counter[str] = Counter()
        self.discovery = DiscoveryPipeline(
            self.transport,
            curve,
            self.choice.current,
            keys,
            first=settings.first,
            server=server,
            window=settings.window,
            attempt_timeout_s=settings.attempt_timeout_s,
            counters=self.counters,
        )
        for node in self.nodes:
            self.discovery.ask(node)
        self.timers: list[tuple[float, int, int, Callable[[], None]]] = []
        self._timer_seq = 0
        self.configured = 0
        self.announced = False
        self.started = time.monotonic()
        self.fanout = FanOut(self.nodes, self.endpoint, self.started, self.counters)
        self.next_scan = self.started + 1.0
        self.stopping = False
        self.control_in: simcontrol.LineReader | None = None

    def _session_key(self, key_id: str) -> Verifier | None:
        found = self.command_keys.get(key_id)
        return None if found is None else found[0]

    # --- the loop -------------------------------------------------------------------------

    def run(self, stdin_fd: int | None = None) -> None:
        if stdin_fd is not None:
            self.control_in = simcontrol.LineReader(stdin_fd)
        self._say(
            f"pushjobs-simulate ready command={self.endpoint} nodes={len(self.nodes)} "
            f"first={self.s.first}"
        )
        end = None if self.s.duration_s is None else self.started + self.s.duration_s
        while not self.stopping:
            poller = zmq.Poller()
            poller.register(self.discovery.dealer, zmq.POLLIN)
            poller.register(self.command, zmq.POLLIN)
            if self.link.sub is not None:
                poller.register(self.link.sub, zmq.POLLIN)
            for sub in self.edge_subs.values():
                poller.register(sub, zmq.POLLIN)
            if self.control_in is not None:
                poller.register(self.control_in.fd, zmq.POLLIN)
            ready = dict(poller.poll(round(self._wait_s() * 1000)))
            self.turn(ready)
            if end is not None and time.monotonic() >= end:
                break
        self._say(orjson.dumps({"final": True, **self.stats()}).decode())

    def turn(self, ready: dict[Any, int]) -> None:
        if self.discovery.dealer in ready:
            for frames in drain(self.discovery.dealer, BATCH):
                self._on_config(frames)
        if self.link.sub is not None and self.link.sub in ready:
            self._on_server_beats(self.sub_endpoint, self._once(drain(self.link.sub, 256)))
        for endpoint, sub in list(self.edge_subs.items()):
            if sub in ready:
                self.edge_heard[endpoint] = time.monotonic()
                # The server is alive through any edge.
                self._on_server_beats(endpoint, self._once(drain(sub, 256)))
        if self.command in ready:
            for frames in drain(self.command, BATCH):
                self._on_command(frames)
        if self.control_in is not None and self.control_in.fd in ready:
            self._on_control()
        now = time.monotonic()
        self._fire_timers(now)
        self.watch.expire(now)
        if now >= self.next_scan:  # once a second: discovery timeouts, configs that expire
            self.next_scan = now + 1.0
            self._review_server(now)
            self._review_edges(now)
            self.discovery.review(now, self.nodes, self.by_name)
        self.discovery.pump(now, _now_ms(), self.endpoint, self.s.facts, self.s.tags)
        push = self.link.push
        if self.cfg is not None and push is not None:
            # Replies first: a full socket drops the heartbeats, which the next interval
            # replaces, and never keeps a reply waiting behind other nodes' heartbeats. A
            # real node queues only its own; here one socket carries thousands of nodes,
            # and a server reading less than they send starved every reply (bench/overload).
            if self.watch.online and self.fanout.replies:
                self.fanout.flush(push, _now_ms())
            self.fanout.heartbeats(
                push, now, _now_ms(), self.cfg.interval_s, server_online=self.watch.online
            )

    def _wait_s(self) -> float:
        now = time.monotonic()
        due = [now + MAX_TURN_S, self.next_scan]
        if self.timers:
            due.append(self.timers[0][0])
        if self.cfg is not None and self.nodes:
            due.append(max(now + MIN_TURN_S, self.fanout.next_beat(self.cfg.interval_s)))
        if (deadline := self.watch.next_deadline()) is not None:
            due.append(deadline)
        return max(0.0, min(due) - now)

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

    # --- config from the server ----------------------------------------------------------------

    def _on_config(self, frames: list[bytes]) -> None:
        found = self.discovery.accept(frames, time.monotonic(), _now_ms(), self.by_name)
        if found is None:
            return
        node, reply = found
        if reply.status == "not_leader":
            endpoint = self.choice.not_leader(reply.leader)
            if endpoint is not None:
                log.info("%s does not lead: asking %s", self.discovery.endpoint, endpoint)
                self.discovery.move(endpoint, time.monotonic(), self.by_name)
                self.discovery.ask(node)
                return
        if reply.status != "accepted" or reply.config is None:
            delay = RETRY_PENDING_S * (0.5 + self.rng.random())
            self._at(delay, node, partial(self.discovery.ask, node))
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
        node.link = self._reply_link(cfg)
        node.edge = cfg.heartbeat_endpoint
        self._edge_sub(cfg.heartbeat_endpoint, now)
        self.choice.accepted(now)
        if not was:
            self.configured += 1
        self._apply_server_config(cfg, now)
        if self.configured == len(self.nodes) and not self.announced:
            self.announced = True
            took = now - self.started
            self._say(f"pushjobs-simulate configured nodes={self.configured} in {took:.2f}s")

    def _reply_link(self, cfg: m.NodeConfig) -> zmq.Socket[bytes] | None:
        """The socket a node's heartbeats and replies leave by: one per reply endpoint
        (a server with edges names each node its edge's)."""
        sock = self.edge_links.get(cfg.reply_endpoint)
        if sock is None:
            sock = self.edge_links[cfg.reply_endpoint] = self.transport.socket(
                "push",
                connect=cfg.reply_endpoint,
                hwm=PUSH_HWM,
                curve_client=self.curve,
                server_public=self.s.server.curve_public,
            )
        return sock

    def _once(self, batch: list[list[bytes]]) -> list[list[bytes]]:
        """The server heartbeats of ``batch`` not heard yet: one heartbeat endpoint may be
        heard on two sockets here (``link.sub`` and the edge's own), and the same beat
        twice is one beat, not a replay."""
        fresh = []
        for frames in batch:
            mark = frames[-1]
            if mark in self.beats_seen:
                continue
            if len(self.beats_order) == self.beats_order.maxlen:
                self.beats_seen.discard(self.beats_order[0])
            self.beats_order.append(mark)
            self.beats_seen.add(mark)
            fresh.append(frames)
        return fresh

    def _edge_sub(self, endpoint: str, now: float) -> None:
        if endpoint in self.edge_subs:
            return
        self.edge_subs[endpoint] = self.transport.socket(
            "sub",
            connect=endpoint,
            hwm=100,
            curve_client=self.curve,
            server_public=self.s.server.curve_public,
            subscribe=b"",
        )
        self.edge_heard[endpoint] = now  # a window to hear it in

    def _review_edges(self, now: float) -> None:
        """An edge silent for the offline window while the server is heard through the
        others is lost: its nodes ask again, each after a splay, as agents whose edge
        went quiet do (a silent server is ``_review_server``'s)."""
        cfg = self.cfg
        if cfg is None or len(self.edge_subs) < 2 or not self.watch.online:
            return
        window = cfg.interval_s * cfg.offline_threshold
        lost = {ep for ep, heard in self.edge_heard.items() if now - heard > window}
        if not lost or len(lost) == len(self.edge_subs):
            return
        moving = [node for node in self.nodes if node.edge in lost]
        log.warning(
            "edge %s silent for %.1f s: %d nodes ask again",
            ", ".join(sorted(lost)),
            window,
            len(moving),
        )
        for node in moving:
            node.edge = ""
            self._at(self.rng.uniform(0, self.s.splay_s), node, partial(self.discovery.ask, node))
        self.counters["edge_lost_moves"] += len(moving)
        for endpoint in lost:
            self.transport.close_socket(self.edge_subs.pop(endpoint))
            del self.edge_heard[endpoint]

    def _apply_server_config(self, cfg: m.NodeConfig, now: float) -> None:
        old = self.cfg
        self.cfg = cfg
        fresh = cfg.server_incarnation not in self.incarnations.values()
        self.incarnations[cfg.heartbeat_endpoint] = cfg.server_incarnation
        if fresh:
            # Per server (or edge) incarnation, not per node: with edges, nodes' configs
            # name different endpoints, and the fleet watches the server through all.
            self.link.follow(old, cfg)
            self.sub_endpoint = cfg.heartbeat_endpoint
            limits = Limits(max_body_bytes=cfg.max_body_bytes)
            self.watch.trust(cfg, now)
            # Edges sign their own heartbeats, each under its incarnation, all heard here.
            self.watch.inbox.replay = _PerIncarnation(cfg.max_skew_s)
            self.cmd_inbox = _command_inbox(self._resolve_command, cfg.max_skew_s, limits)

    # --- server heartbeats and commands --------------------------------------------------------

    def _review_server(self, now: float) -> None:
        cfg = self.cfg
        window = None if cfg is None else cfg.interval_s * cfg.offline_threshold
        endpoint = self.choice.review(now, window, unanswered=self.discovery.silent(now))
        if endpoint is not None:
            log.warning("%s answers nothing: asking %s", self.discovery.endpoint, endpoint)
            self.discovery.move(endpoint, now, self.by_name, everyone=self.nodes)

    def _on_server_beats(self, source: str, batch: list[list[bytes]]) -> None:
        """Heartbeats heard on ``source`` (a heartbeat endpoint): signed by the server,
        or by the edge there, each under its own incarnation."""
        now = time.monotonic()
        for beat in self.watch.beats(batch, now, _now_ms()):
            known = self.incarnations.get(source)
            if beat.incarnation == known:
                endpoint = self.choice.leader_beat(beat.leader, now)
                if endpoint is not None:  # every node's session is with a deposed server
                    log.warning("the server no longer leads: asking %s", endpoint)
                    self.discovery.move(endpoint, now, self.by_name, everyone=self.nodes)
                    return
            elif known is not None:
                # The sender restarted (the server, or this edge): its session keys are
                # gone. Its nodes ask again, spread over the splay so the server is not
                # flooded at once.
                log.info("%s restarted (incarnation %s): rediscovering", source, beat.incarnation)
                self.incarnations[source] = beat.incarnation
                for node in self.nodes:
                    if node.edge == source:
                        delay = self.rng.uniform(0, self.s.splay_s)
                        self._at(delay, node, partial(self.discovery.ask, node))

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
        if node.silent or not self.watch.online or not node.configured:
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
            case m.Ping(rediscover=True):
                # Its edge is draining, or its session key retired: it asks again for its
                # config, as an agent does (after a short splay: a drain pings many).
                delay = self.rng.uniform(0, min(1.0, self.s.splay_s))
                self._at(delay, node, partial(self.discovery.ask, node))
                return
            case _:
                return  # a ping asks for a heartbeat; the next one is never far
        self._apply(node, effects)

    def _apply(self, node: SimNode, effects: list[Effect]) -> None:
        incarnation = node.incarnation
        for effect in effects:
            match effect:
                case Later(delay_s=0.0, cls=cls, fields=fields):
                    self.fanout.reply(node, incarnation, cls, fields)
                case Later(delay_s=delay, cls=cls, fields=fields):
                    self._at(
                        delay, node, partial(self.fanout.reply, node, incarnation, cls, fields)
                    )
                case FinishAt(delay_s=delay, job_id=job_id):
                    self._at(delay, node, partial(self._finish, node, job_id))
                case ExpireAt(delay_s=delay):
                    self._at(delay, node, lambda: self._apply(node, node.expire(time.monotonic())))
                case Restart(reason=reason):
                    self._restart(node, reason)

    def _finish(self, node: SimNode, job_id: str) -> None:
        effects = node.finish(job_id, self.rng, self.how, time.monotonic())
        for effect in effects:
            if isinstance(effect, Later):
                self.counters[f"jobs_{effect.cls.TYPE}"] += 1
        self._apply(node, effects)

    def _restart(self, node: SimNode, reason: str) -> None:
        self.counters["restarts"] += 1
        if node.configured:
            self.configured -= 1
        node.restart()
        self.discovery.forget(node)
        self.discovery.ask(node)

    # --- control --------------------------------------------------------------------------------

    def _on_control(self) -> None:
        assert self.control_in is not None
        lines = self.control_in.lines()
        if lines is None:  # no more control input; keep simulating
            self.control_in = None
            return
        for line in lines:
            self._say(orjson.dumps(self.control(line)).decode())

    def control(self, line: str) -> dict[str, Any]:
        request = simcontrol.parse(line, len(self.nodes))
        if not isinstance(request, simcontrol.Control):
            return request
        if request.verb == "stats":
            return {"ok": True, **self.stats()}
        for node in self.nodes[request.start : request.end]:
            if request.verb == "restart":
                self._restart(node, "restart requested")
            else:
                node.silent = request.verb == "silence"
        return {"ok": True, request.verb: request.end - request.start}

    def stats(self) -> dict[str, Any]:
        drops = {
            "config": dict(self.discovery.drops + self.discovery.inbox.drops),
            "beats": dict(self.watch.inbox.drops),
            "commands": dict(self.cmd_inbox.drops),
        }
        return {
            "nodes": len(self.nodes),
            "configured": self.configured,
            "silent": sum(1 for n in self.nodes if n.silent),
            "server_online": self.watch.online,
            "server": self.discovery.endpoint,
            "queued_replies": len(self.fanout.replies),
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


class _PerIncarnation(ReplayWindow):
    """A replay window per (sender, incarnation). A real agent hears commands from its
    one edge; the nodes of a simulator hear several edges of one server at once, each
    with its own incarnation and sequence, on one socket. Replays within an incarnation
    are still refused."""

    __slots__ = ()

    def check(
        self, sender: str, incarnation: str, sequence: int, timestamp_ms: int, now_ms: int
    ) -> Accepted:
        return super().check(f"{sender}/{incarnation}", incarnation, sequence, timestamp_ms, now_ms)


def _command_inbox(resolve: KeyResolver, max_skew_s: float, limits: Limits | None = None) -> Inbox:
    inbox = Inbox(resolve, max_skew_s) if limits is None else Inbox(resolve, max_skew_s, limits)
    inbox.replay = _PerIncarnation(max_skew_s)
    return inbox
