"""``pushjobs-server``: the loop, and the wiring of the components that own what it does.

Theory of operation. One thread, one loop. Each turn waits on the reply and API sockets
for at most the time to the next deadline (heartbeat due, a node's offline deadline, a
job's vote or run deadline, the lease, a parked watch), then:

1. node intake reads the reply socket in a batch (``shell/nodeintake.py``): heartbeats
   feed the node table and liveness, job replies feed job effects;
2. the API front reads the API socket (``front/api.py``): config requests go to enrolment
   (``front/enrolment.py``), CLI requests to their handlers (``front/handlers.py``);
3. time: the lease (``shell/leadership.py``; a new leader rebuilds from the log,
   ``shell/takeover.py``) and, with each renewal, this server's membership record
   (``shell/membership.py``), the server heartbeat, offline expiry, revoked keys, job
   deadlines, log compaction;
4. flush: job effects write the changed jobs and the events to the ordered log, and only
   then send the commands that follow (``shell/leaderjobs.py``, ``shell/commands.py``);
   API replies and watches (``front/watches.py``) are answered last.

So a command on the wire always follows its durable cause, and a crash at any point
loses nothing the log did not already have; each component says what a kill does to it.

The server's own stall is never a node's silence. A turn that starts
later than its poll allowed, or follows a turn whose work took long, means the server was
not reading (SIGSTOP, a swap storm, a slow disk): when that exceeds an interval, every
node's offline deadline and every job deadline moves later by the stall (``stalled``).
Before any node is expired, what waits on the reply socket is read. A new leader gives
every node a full offline window from the moment it serves.
"""

from __future__ import annotations

import logging
import secrets
import sys
from collections import Counter
from functools import partial
from typing import Any

import zmq

from keys.fingerprint import key_id
from pushjobs.clock import Clock, SystemClock
from pushjobs.errors import ConfigError
from pushjobs.log.factory import open_log
from pushjobs.log.retry import Outage
from pushjobs.log.timed import TimedLog
from pushjobs.log.topics import create_standard_topics, names
from pushjobs.protocol.framing import Limits
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import ServerHeartbeat
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.signing import Ed25519Signer
from pushjobs.transport.sockets import CurveKeys, Transport, bound_endpoint, drain, drain_from
from server.core import edgelease, edgewire
from server.core.edgeliveness import EdgeLiveness
from server.core.edgewire import Served
from server.core.nodetable import NodeTable
from server.front.api import ApiFront
from server.front.backend import ServerBackend
from server.front.enrolment import (
    Enrolment,
    node_key_accepted,
    node_registered,
    registered_nodes,
    user_role,
)
from server.front.handlers import ApiHandlers
from server.front.responder import Responder
from server.front.sessions import SessionKeys
from server.front.watches import Watches
from server.shell.audittrail import ChainedLog, Checkpoints, audited
from server.shell.channels import Channels, advertised, raise_open_files
from server.shell.commands import CommandSender
from server.shell.compactor import Compaction
from server.shell.edgecommands import EdgeCommandSender
from server.shell.edges import EdgePool
from server.shell.handshakes import Handshakes
from server.shell.keyregistry import open_registries
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership
from server.shell.membership import (
    EDGE_FIELDS,
    LOOPBACK,
    Membership,
    advertised_api,
    advertised_channel,
)
from server.shell.nodeintake import BATCH, NodeIntake
from server.shell.prometheus import PUBLISH_EVERY_S, MetricsEndpoint
from server.shell.scheduler import Scheduler
from server.shell.serverconfig import ServerConfig, load_identity
from server.shell.tenure import Tenure
from server.shell.wakeup import SignalWakeup

log = logging.getLogger("pushjobs.server")

# The longest the loop sleeps with nothing due: every deadline is in ``wait_s``, and a signal
# wakes it at once (``wakeup.py``); this only bounds a deadline somebody forgot. 0.25 s was
# four idle turns a second, a third of an idle server's CPU with 10 agents.
MAX_WAIT_S = 1.0
EDGE_MOVE_SPLAY_S = 3.0  # an agent's discovery splay (1 s by default) and its round trip
EDGES_READY_S = 20.0  # edges that have not said hello by then are started again later
API_MAX_BYTES = 32 * 1024 * 1024  # API replies (job lists, node lists) may be large


class Server:
    def __init__(
        self, config: ServerConfig, *, clock: Clock | None = None, out: Any = None
    ) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.out = out if out is not None else sys.stdout
        section, live, proto = config.server, config.liveness, config.protocol
        identity = load_identity(section)
        self.name = section.name
        self.incarnation = secrets.token_hex(8)
        limits = Limits(proto.max_header_bytes, proto.max_body_bytes)
        api_limits = Limits(proto.max_header_bytes, max(API_MAX_BYTES, proto.max_body_bytes))
        signer = Ed25519Signer(key_id(identity.public.ed25519_public), identity.signing_key())
        self.outbox = Outbox(self.name, self.incarnation, signer, limits)
        api_outbox = Outbox(self.name, self.incarnation, signer, api_limits)

        self.topics = names(config.log.topic_prefix)
        # Appends timed as the server sees them: chaining included (``audittrail.py``).
        chained = ChainedLog(open_log(config.log, clock=self.clock), audited(self.topics))
        self.log = TimedLog(chained, clock=self.clock)
        self.outage = Outage()
        create_standard_topics(self.log, config.log.topic_prefix)
        self.leadership = Leadership.join(
            self.log,
            self.topics,
            config.log.topic_prefix,
            f"{self.name}:{self.incarnation}",
            section.leader_session_s,
        )
        registry, zap_registry = open_registries(
            section, self.log, self.topics, self.leadership, self.clock
        )
        soft, hard = raise_open_files(section.max_open_files)
        log.info("open-file limit %d (hard limit %d)", soft, hard)
        # A frame larger than the protocol admits gets its sender disconnected by libzmq.
        self.transport = Transport(
            max_message_bytes=max(proto.max_header_bytes, proto.max_body_bytes)
        )
        api_drops: Counter[str] = Counter()
        self.channels = Channels(
            self.transport,
            CurveKeys(identity.public.curve_public, identity.curve_secret),
            api_bind=section.api_bind,
            heartbeat_bind=section.heartbeat_bind,
            reply_bind=section.reply_bind,
            node_allowed=partial(node_key_accepted, zap_registry),
            drops=api_drops,
        )
        bound = self.channels.endpoints()
        caps = self.channels.cap_api(section, zap_registry)  # strangers' API connections
        self.handshakes = Handshakes(self.channels.api, "api", caps)  # and wrong server keys
        heartbeat_endpoint = advertised(bound["heartbeat"], section.advertise_host)
        self.reply_endpoint = advertised(bound["reply"], section.advertise_host)
        api_endpoint = advertised_api(bound["api"], section.advertise_host)
        ends = {"api": api_endpoint, "heartbeat": heartbeat_endpoint, "reply": self.reply_endpoint}
        self.membership = Membership(self.leadership, self.name, self.incarnation, ends, self.clock)

        # The components, each owning one concern; the order is who needs whom.
        with_edges = bool(section.edges or section.edge_bind)
        tracker = EdgeLiveness if with_edges else LivenessTracker
        self.liveness = tracker(live.interval_s, live.offline_threshold, live.online_threshold)
        self.edges: EdgePool | None = None
        if with_edges:
            spec = _edge_spec(config, self.reply_endpoint)
            self.edges = EdgePool(
                self.transport,
                CurveKeys(identity.public.curve_public, identity.curve_secret),
                count=section.edges,
                spec=spec,
                interval_s=live.interval_s,
                now=self.clock.monotonic(),
                bind=_edge_bind(config),
            )
            self.membership.shares = self.edges.shares
            if section.edge_bind:
                # Named on the control topic while this server leads (``pushjobs-edge``).
                channel = bound_endpoint(self.edges.router)
                self.membership.edge = {
                    "endpoint": advertised_channel(channel, section.advertise_host),
                    **{k: spec[k] for k in EDGE_FIELDS if k != "endpoint"},
                }
        self.nodes = NodeTable(self.liveness)
        self.sessions = sessions = SessionKeys(
            grace_s=2 * live.interval_s + 5.0, hold_secrets=not self.edges
        )
        self.enrolment = Enrolment(
            config,
            identity,
            registry=registry,
            sessions=sessions,
            nodes=self.nodes,
            channels=self.channels,
            outbox=api_outbox,
            server_incarnation=self.incarnation,
            heartbeat_endpoint=heartbeat_endpoint,
            reply_endpoint=self.reply_endpoint,
            membership=self.membership,
            edges=self.edges,
        )
        self.sender = sender = (EdgeCommandSender if self.edges else CommandSender)(
            self.outbox,
            limits,
            self.channels,
            self.nodes,
            curve_of=self.enrolment.curve_of,
            signer_of=sessions.signer,
        )
        if self.edges is not None:
            assert isinstance(sender, EdgeCommandSender)
            sender.attach(self.edges)
        self.jobs = Jobs(
            config.jobs,
            self.leadership,
            topics=self.topics,
            sender=sender,
            nodes=self.nodes,
            liveness=self.liveness,
            server_name=self.name,
            registered=partial(node_registered, registry),
            known_nodes=partial(registered_nodes, registry),
            policy=config.policy,
            role_of=partial(user_role, registry),
            halt=config.halt,
        )
        # Every server fires the schedules of its partitions; the leader starts their jobs.
        self.scheduler = Scheduler(
            self.jobs,
            self.topics.schedules,
            clock=self.clock,
            settle_ms=round(2 * live.offline_threshold * live.interval_s * 1000) + 2000,
            partitions=section.schedule_partitions,
            outage=self.outage,
        )
        # Who fires what: each server's record names its partitions, the leader's views
        # of the schedules name their owners.
        self.membership.partitions = self.scheduler.partitions.owned
        self.scheduler.owners = self.membership.owners
        self.leadership.on_stand_by = self.stand_by
        inbox = Inbox(sessions.resolve, proto.max_skew_s, limits)
        self.intake = NodeIntake(
            inbox,
            self.nodes,
            liveness=self.liveness,
            jobs=self.jobs,
            leadership=self.leadership,
            stale_after_s=live.interval_s,
            offline_after_s=live.interval_s * live.offline_threshold,
        )
        self.watches = Watches()
        self.responder = Responder(api_outbox)
        self.backend = ServerBackend(
            name=self.name,
            incarnation=self.incarnation,
            clock=self.clock,
            registry=registry,
            jobs=self.jobs,
            intake=self.intake,
            channels=self.channels,
            enrolment=self.enrolment,
            api_drops=api_drops,
            watches=self.watches,
            outage=self.outage,
            membership=self.membership,
        )
        self.tenure = Tenure(
            self.leadership,
            jobs=self.jobs,
            intake=self.intake,
            liveness=self.liveness,
            settings=live,
            clock=self.clock,
            outage=self.outage,
            scheduler=self.scheduler,
        )
        self.backend.scheduler = self.scheduler
        self.backend.edges = self.edges
        self.api = ApiFront(
            registry,
            limits,
            max_skew_s=proto.max_skew_s,
            responder=self.responder,
            handlers=ApiHandlers(self.backend),
            enrolment=self.enrolment,
            leadership=self.leadership,
            watches=self.watches,
            drops=api_drops,
            membership=self.membership,
        )
        self.metrics = MetricsEndpoint(section.metrics_bind)
        self.stopping = False
        now = self.clock.monotonic()
        self.next_metrics = now
        self.turn_started = self.poll_started = self.poll_until = now
        self.next_beat = now
        self.next_registry = now + section.registry_check_s
        self.compaction = Compaction(self.log, section.compact_every_s, self.clock)
        self.checkpoints = Checkpoints(
            self.log,
            self.topics.audit,
            chained.ledger,
            signer,
            server=self.name,
            incarnation=self.incarnation,
            every_s=section.audit_checkpoint_s,
            clock=self.clock,
        )

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.channels.replies, zmq.POLLIN)
        poller.register(self.channels.api, zmq.POLLIN)
        poller.register(self.channels.heartbeat, zmq.POLLIN)
        poller.register(self.handshakes.socket, zmq.POLLIN)
        poller.register(self.jobs.checks.fd, zmq.POLLIN)
        if self.edges is not None:
            poller.register(self.edges.router, zmq.POLLIN)
            self.await_edges()
            # Waiting for them was no stall: nobody was being served yet.
            self.turn_started = self.poll_started = self.poll_until = self.clock.monotonic()
        self.tenure.renew(self.clock.monotonic())
        self.membership.beat()
        metrics_url = self.metrics.start()
        # Every endpoint as clients and nodes are told it (advertised), not as bound.
        self.out.write(
            f"pushjobs-server {self.name} ready api={self.membership.endpoints['api']} "
            f"heartbeat={self.membership.endpoints['heartbeat']} "
            f"reply={self.membership.endpoints['reply']} "
            f"leader={'yes' if self.leadership.leader else 'no'}"
            + (f" metrics={metrics_url}" if metrics_url else "")
            + "\n"
        )
        self.out.flush()
        with SignalWakeup() as wakeup:
            if wakeup.fd is not None:
                poller.register(wakeup.fd, zmq.POLLIN)
            while not self.stopping:
                wait_s = self.wait_s() if wakeup.fd is not None else min(self.wait_s(), 0.25)
                self.poll_started = self.clock.monotonic()
                self.poll_until = self.poll_started + wait_s
                ready = dict(poller.poll(round(wait_s * 1000)))
                if wakeup.fd in ready:
                    wakeup.drain()
                self.turn(ready)
        self.flush()

    def turn(self, ready: dict[Any, int]) -> None:
        now, now_ms = self.clock.monotonic(), self.clock.wall_ms()
        # Time this process could not read: woken later than its poll allowed, plus the
        # last turn's own work.
        blind_s = max(0.0, now - self.poll_until) + max(0.0, self.poll_started - self.turn_started)
        self.turn_started = now
        if blind_s > self.config.liveness.interval_s:
            self.stalled(blind_s, now, now_ms)
        self.tenure.confirm(now)
        if self.channels.replies in ready:
            self.intake.receive(drain(self.channels.replies, BATCH), now, now_ms)
            for node, contact in self.enrolment.stale_contacts(self.sessions.take_stale(), now):
                self.sender.ping(node, contact.endpoint, contact.curve, now_ms)
        else:
            self.intake.idle()
        if self.channels.api in ready:
            for frames, peer in drain_from(self.channels.api, BATCH):
                self.api.receive(frames, now, now_ms, source=peer)
        if self.channels.heartbeat in ready:
            self.channels.subscriptions()
        if self.handshakes.socket in ready:
            self.handshakes.receive(now)
        if self.jobs.checks.fd in ready:
            self.jobs.health(now_ms)
        if self.edges is not None and self.edges.router in ready:
            for edge, report in self.edges.receive(now, now_ms):
                unowned = self.intake.edge_report(edge, report, self.edges.edge_of, now, now_ms)
                if unowned:
                    self.edges.send(edge, edgewire.encode(edgewire.MOVE, unowned))
        if self.edges is not None:
            for edge, served in self.edges.take_joined():
                self.adopt(edge, served, now, now_ms)
        self.timers()
        self.flush()
        self.intake.log_transitions()

    def await_edges(self) -> None:
        """Serve once every edge said hello (nodes are placed on live edges only), or
        after ``EDGES_READY_S`` with those that did."""
        assert self.edges is not None
        deadline = self.clock.monotonic() + EDGES_READY_S
        while not self.edges.ready() and not self.stopping:
            now = self.clock.monotonic()
            if now >= deadline:
                log.warning(
                    "edges not ready after %.0f s: serving with %s",
                    EDGES_READY_S,
                    self.edges.live(),
                )
                return
            if self.edges.router.poll(round(MAX_WAIT_S * 1000)):
                self.edges.receive(now, self.clock.wall_ms())
            self.edges.tick(now)

    def wait_s(self) -> float:
        now = self.clock.monotonic()
        due = [self.next_beat, self.leadership.next_renewal, self.next_registry, now + MAX_WAIT_S]
        due += [self.next_metrics, self.compaction.next_due or due[0]]
        due.append(self.checkpoints.next_due or due[0])
        flush = self.enrolment.admission.next_flush()
        if flush is not None:
            due.append(flush)
        due += [
            d
            for d in (
                self.intake.next_deadline(),
                self.watches.next_deadline(),
                self.handshakes.next_deadline(),
            )
            if d is not None
        ]
        job_deadline = self.jobs.coordinator.next_deadline_ms()
        if job_deadline is not None:
            due.append(now + (job_deadline - self.clock.wall_ms()) / 1000)
        fire_deadline = self.scheduler.next_deadline_ms()
        if fire_deadline is not None:
            due.append(now + (fire_deadline - self.clock.wall_ms()) / 1000)
        return max(0.0, min(due) - now)

    def timers(self) -> None:
        now, now_ms = self.clock.monotonic(), self.clock.wall_ms()
        if now - self.turn_started > self.config.liveness.interval_s:
            # Stopped in the middle of this turn, after its start was judged.
            self.stalled(now - self.turn_started, now, now_ms)
            self.turn_started = now
        if now >= self.leadership.next_renewal:
            self.tenure.renew(now)
            self.membership.beat()  # this server's record, and who leads, each renewal
        if now >= self.next_beat:
            leader = self.leadership.leader
            beat = self.outbox.frames(ServerHeartbeat, now_ms, leader=leader)
            self.channels.publish(beat)
            if self.edges is not None:
                self.edges.broadcast([edgewire.BEAT, *beat])
            self.next_beat = now + self.config.liveness.interval_s
        if self.edges is not None:
            live = self.config.liveness
            for edge in self.edges.tick(now):
                # Its nodes notice (their offline window), rediscover (a splay) and come
                # online on another edge (their online threshold): held online till then.
                hold_s = (2 * live.offline_threshold + live.online_threshold) * live.interval_s
                assert isinstance(self.liveness, EdgeLiveness)
                held = self.liveness.edge_lost(edge, now, hold_s + EDGE_MOVE_SPLAY_S)
                log.warning("edge %s: %d nodes held online while they move", edge, held)
        if self.intake.expiry_due(now):
            # Silence is judged on what was sent, not on what this server got round to:
            # read what is waiting first.
            self.intake.receive(drain(self.channels.replies, BATCH), now, now_ms)
        self.intake.expire(now, now_ms)
        self.handshakes.tick(now)
        if now >= self.next_registry:
            for node in self.enrolment.revoked():
                self.cut_off(node, now, now_ms)
            self.enrolment.sessions.expire(now)
            self.jobs.forget_sent(now_ms)
            self.next_registry = now + self.config.server.registry_check_s
        self.jobs.tick(now_ms)
        self.scheduler.tick(now_ms)
        self.membership.beat_if_moved()
        self.compaction.tick(now)
        self.checkpoints.tick(now)
        if now >= self.next_metrics:
            self.metrics.publish(self.backend.info())
            self.next_metrics = now + PUBLISH_EVERY_S

    def stalled(self, blind_s: float, now: float, now_ms: int) -> None:
        """Nothing could be heard for ``blind_s``: move every deadline that long later."""
        log.warning("server stalled for %.1f s: node and job deadlines moved by as much", blind_s)
        self.intake.stalled(blind_s)
        if self.edges is not None:
            self.edges.stalled(blind_s)
        # Agents that saw this server fall silent wait for it to be online again (their
        # online threshold) before they send anything: a full window after that.
        live = self.config.liveness
        self.liveness.grant(now, live.online_threshold * live.interval_s)
        later_ms = now_ms + round(blind_s * 1000)
        for job in self.jobs.coordinator.active():
            job.rearm(later_ms)

    def adopt(self, edge: str, served: list[Served], now: float, now_ms: int) -> None:
        """Nodes an edge of its own serves already, brought from the leader before this
        one: taken without asking them to move (``Enrolment.adopt``); those online now
        come online here as the edge reports them, and their jobs hear from them."""
        assert self.edges is not None
        adopted = self.enrolment.adopt(edge, served, now)
        if adopted.elsewhere:
            self.edges.send(edge, edgewire.encode(edgewire.FORGET, adopted.elsewhere))
        if adopted.ask_again:
            # Their keys changed or went while no server led: they ask for a config,
            # and are answered as any node asking.
            self.edges.send(edge, edgewire.encode(edgewire.MOVE, adopted.ask_again))
        if adopted.online:
            report = edgewire.Report(online=adopted.online)
            self.intake.edge_report(edge, report, self.edges.edge_of, now, now_ms)

    def cut_off(self, node: str, now: float, now_ms: int) -> None:
        """A revoked node: its jobs are aborted on it first, so what the job calls crashed
        is not left running, then it is no longer heard."""
        contact = self.enrolment.contacts.get(node)
        if self.edges is not None and (edge := self.edges.edge_of(node)) is not None:
            jobs = list(self.jobs.coordinator.holding(node))
            self.edges.send(edge, edgewire.encode(edgewire.REVOKE, [[node, jobs]]))
        elif contact is not None:
            for job_id in self.jobs.coordinator.holding(node):
                self.sender.abort_now(node, job_id, contact.endpoint, contact.curve, now_ms)
        self.intake.cut_off(node, now, now_ms, "key revoked")

    def flush(self) -> None:
        now, now_ms = self.clock.monotonic(), self.clock.wall_ms()
        self.tenure.flush(now, now_ms)
        # New keys first: a node admitted this turn must pass the reply channel's ZAP
        # check (it reads the registry) once its config reply reaches it.
        self.enrolment.admission.flush(now, force=self.stopping)
        self.watches.answer(
            self.jobs.coordinator,
            now,
            now_ms,
            self.responder,
            leading=self.leadership.leader,
            leader_api=self.membership.leader_api,
        )
        if self.edges is not None:
            self.edges.flush_keys()  # after the registry writes: the edges may admit them
            leading_for_s = (
                self.leadership.valid_until - now if self.leadership.acting(now) else 0.0
            )
            self.edges.grant(edgelease.grant_ms(self.config.liveness.interval_s, leading_for_s))
        for identity, frames in self.responder.take():
            self.channels.reply(identity, frames)

    def stand_by(self) -> None:
        """The lease is lost: the jobs and the schedules now belong to the new leader."""
        self.jobs.stand_by()
        self.scheduler.stand_by()

    def stop(self) -> None:
        """Finish this turn and stop; new jobs are refused from now on."""
        self.stopping = True
        self.jobs.stopping = True

    def close(self) -> None:
        try:
            if self.edges is not None:
                self.edges.close()
            self.metrics.close()
            if self.stopping:
                self.membership.leave()
            self.scheduler.close()  # its partitions' leases handed over at once
            self.leadership.close()
            if self.checkpoints.every_s > 0:
                self.checkpoints.write()  # what this server chained, signed before it goes
        finally:
            self.handshakes.close()  # its monitor socket first: the context waits for it
            self.jobs.checks.close()
            self.transport.close()
            self.log.close()


def _edge_bind(config: ServerConfig) -> str:
    """``[server] edge_bind``, refused off loopback on SQLite: an edge reads the log, and
    a SQLite log is a file on this host."""
    bind = config.server.edge_bind
    if bind and config.log.backend == "sqlite" and not LOOPBACK.match(bind):
        raise ConfigError(
            f"{bind} is not a loopback address: on SQLite edges run on this host (they read "
            "the log file); edges on other hosts need the Kafka backend",
            key="server.edge_bind",
        )
    return bind


def _edge_spec(config: ServerConfig, reply_endpoint: str) -> dict[str, Any]:
    """What every edge is told when it starts (``server.edge.edged.EdgeSpec``)."""
    section, live, proto = config.server, config.liveness, config.protocol
    host = section.reply_bind.split("://", 1)[1].rsplit(":", 1)[0]
    return {
        "server_name": section.name,
        "key_file": str(section.key_path()),
        "bind_host": host,
        "port_base": section.edge_port_base,
        # Nodes connect where they reach this server's own reply socket.
        "advertise_host": section.advertise_host
        or reply_endpoint.split("://", 1)[1].rsplit(":", 1)[0],
        "interval_s": live.interval_s,
        "offline_threshold": live.offline_threshold,
        "online_threshold": live.online_threshold,
        "max_skew_s": proto.max_skew_s,
        "max_header_bytes": proto.max_header_bytes,
        "max_body_bytes": proto.max_body_bytes,
    }
