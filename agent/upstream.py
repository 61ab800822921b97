"""The agent's server: its config, the sockets to it, its liveness, when to ask it again.

Theory of operation. Until a config arrives the agent knows only the server's public key
and the endpoints to ask. ``tick`` runs every turn: the server goes offline when its
heartbeats stop (``ServerWatch``); discovery falls due as ``DiscoverySchedule`` says (no
config, lifetime ended while idle, a restarted server after a random splay, a long
silence, a server whose heartbeats say it no longer leads) and is then attempted once,
bounded (``Discovery``), against the server the schedule picks. A standby answers
``not_leader`` and names the leader, asked next. An accepted config is handed back to
the daemon, which applies it to every component, this one included (``follow``: the
sockets move only if their endpoints changed, the server counts as online at once, the
schedule rests). A refusal or silence backs off with jitter.

Killed at any line: nothing here is stored. A restarted agent has no config, a new
incarnation and no session key, so it discovers at once; the server learns of the new
incarnation from its config request.
"""

from __future__ import annotations

import logging
import platform
import socket

import zmq

from agent import ed25519
from agent.agentconfig import AgentConfig
from agent.discovery import Discovery
from agent.link import ServerLink
from agent.rediscovery import DiscoverySchedule
from agent.serverwatch import ServerWatch
from agent.trust import trust_server
from keys import fingerprint
from keys.identity import PrivateIdentity, PublicIdentity
from pushjobs.clock import Clock
from pushjobs.protocol import messages as m
from pushjobs.protocol.outbox import Outbox
from pushjobs.transport.handshake import Refusal
from pushjobs.transport.sockets import CurveKeys, Transport

log = logging.getLogger("pushjobs.agent")

REPLY_HWM = 16


class Upstream:
    def __init__(
        self,
        config: AgentConfig,
        transport: Transport,
        identity: PrivateIdentity,
        server: PublicIdentity,
        *,
        incarnation: str,
        command_endpoint: str,
        clock: Clock,
    ) -> None:
        self.config = config
        self.clock = clock
        self.command_endpoint = command_endpoint
        self.facts = {"os": platform.system().lower(), "hostname": socket.gethostname()}
        self.facts.update(config.facts)
        self.tags = tuple(config.agent.tags)
        curve = CurveKeys(identity.public.curve_public, identity.curve_secret)
        # Config requests are signed with the node's own identity key: it has no other yet.
        # The header carries the public key, so the server verifies before it decodes.
        signer = ed25519.signer(fingerprint.self_key_id(identity.public.ed25519_public), identity)
        outbox = Outbox(identity.name, incarnation, signer)
        self.discovery = Discovery(transport, identity, server, outbox)
        self.link = ServerLink(transport, curve, server.curve_public, REPLY_HWM)
        self.schedule = DiscoverySchedule(config.discovery, clock.monotonic())
        # One inbox per channel: the server's sequence is shared by all its sockets, so
        # heartbeats and commands may interleave out of order across channels.
        self.watch = ServerWatch(trust_server(server), log)
        self.node_config: m.NodeConfig | None = None

    @property
    def online(self) -> bool:
        return self.watch.online

    @property
    def push(self) -> zmq.Socket[bytes] | None:
        """The socket to the server while it is online; None while nothing may be sent."""
        return self.link.push if self.watch.online else None

    def next_deadline(self) -> float | None:
        due = [d for d in (self.schedule.due, self.watch.next_deadline()) if d is not None]
        return min(due, default=None)

    def on_beats(self, batch: list[list[bytes]]) -> None:
        now = self.clock.monotonic()
        for beat in self.watch.beats(batch, now, self.clock.wall_ms()):
            if self.node_config is None:
                continue
            if self.schedule.server_beat(beat.incarnation, self.node_config, now):
                log.info("server restarted (incarnation %s): rediscovering", beat.incarnation)
            if self.schedule.leader_beat(beat.leader, now):
                log.warning("the server no longer leads: looking for the leader")

    def tick(self, now: float, *, busy: bool) -> tuple[m.NodeConfig, str] | None:
        """Time passes: the server may go offline; discovery may fall due, and its accepted
        config comes back (with the endpoint that gave it) for the daemon to apply."""
        self.watch.expire(now)
        cfg = self.node_config
        if cfg is not None and (
            why := self.schedule.review(cfg, now, busy=busy, server_online=self.online)
        ):
            log.info("rediscovering: %s", why)
        if self.schedule.is_due(now):
            return self._discover()
        return None

    def rediscover(self, why: str) -> None:
        """Ask for a config at once (unless an attempt is already due), saying why."""
        if self.schedule.request(self.clock.monotonic()):
            log.warning("rediscovering: %s", why)

    def follow(self, cfg: m.NodeConfig, endpoint: str) -> None:
        """Take ``cfg``: its sockets, its liveness settings, the server online from now."""
        now = self.clock.monotonic()
        old, self.node_config = self.node_config, cfg
        self.schedule.configured(cfg, now, endpoint)
        self.watch.trust(cfg, now)
        self.link.follow(old, cfg)
        log.info(
            "config from %s (server incarnation %s, interval %g s)",
            endpoint,
            cfg.server_incarnation,
            cfg.interval_s,
        )

    def _discover(self) -> tuple[m.NodeConfig, str] | None:
        endpoint = self.schedule.next_server(self.config.agent.servers)
        disc = self.config.discovery
        log.debug("config discovery: asking %s", endpoint)
        reply = self.discovery.attempt(
            endpoint, self.command_endpoint, self.facts, self.tags, disc.attempt_timeout_s
        )
        if reply is None:
            status = f"no answer from {endpoint}"
        elif isinstance(reply, Refusal):
            status = (
                f"{endpoint}: the server refused the CurveZMQ handshake: is agent.server_key "
                f"the server's key ({self.config.agent.server_key})? {reply.cause()}"
            )
        elif reply.status == "not_leader":
            status = f"{endpoint}: {reply.message}"
            if self.schedule.redirected(reply.leader, status, self.clock.monotonic()):
                log.info("config discovery: %s", status)
            return None
        elif reply.status != "accepted" or reply.config is None:
            status = f"{endpoint}: {reply.status}: {reply.message}"
        else:
            return reply.config, endpoint
        silent = endpoint if reply is None else None
        if self.schedule.failed(status, self.clock.monotonic(), unanswered=silent):
            log.warning("config discovery: %s; retrying with backoff", status)
        return None
