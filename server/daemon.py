"""``pushjobs-server``: the daemon that executes what the pure parts decide.

Theory of operation. One thread, one loop. Each turn waits on the API and reply sockets
for at most the time to the next deadline (heartbeat due, a node's offline deadline, a
job's vote or run deadline, lease renewal, a parked watch), then:

1. drains the reply socket in a batch: node heartbeats feed the node table, job replies
   feed the coordinator;
2. drains the API socket: config discovery and CLI requests;
3. applies time: offline nodes, job deadlines, revoked keys, the leader lease;
4. flushes: the changed jobs' snapshots and the events go to the ordered log in batched
   durable writes, and only then are the commands that follow sent and the API answered.

So a command on the wire always follows its durable cause, and a crash at any point
loses nothing the log did not already have; a restarted server rebuilds from the log
(``recovery.py``). Leadership is a lease on the ``commands`` topic's consumer group; every
write carries its fencing epoch, so a deposed leader's late writes are refused.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import signal
import sys
from base64 import b64decode
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import zmq

from keys import files
from keys.entry import Entry
from keys.fingerprint import key_id
from keys.identity import b64
from keys.registry import KeyRegistry
from keys.states import KeyState
from pushjobs import collector
from pushjobs.api import methods
from pushjobs.clock import Clock, SystemClock
from pushjobs.config import load_config
from pushjobs.errors import (
    ApiError,
    ConfigError,
    FencedError,
    KeyFileError,
    LogError,
    OversizedFrame,
    ProtocolError,
    PushJobsError,
    UnknownKey,
)
from pushjobs.log.base import Fence, GroupMember, OrderedLog
from pushjobs.log.factory import open_log
from pushjobs.log.topics import create_standard_topics
from pushjobs.protocol.codec import decode
from pushjobs.protocol.framing import Limits, seal
from pushjobs.protocol.inbox import Inbox, reason_for
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import (
    Abort,
    ApiReply,
    ApiRequest,
    Commit,
    ConfigReply,
    ConfigRequest,
    ErrorBody,
    Message,
    NodeConfig,
    NodeHeartbeat,
    Run,
    RunOptions,
    ServerHeartbeat,
)
from pushjobs.protocol.outbox import Outbox
from pushjobs.protocol.replay import ReplayWindow
from pushjobs.protocol.signing import Ed25519Signer
from pushjobs.transport.sockets import CurveKeys, Transport, drain
from server import records
from server.api import WATCH, ApiHandlers, JobRequest
from server.auth import RegistryKeys, open_api_frames
from server.channels import Channels, advertised, raise_open_files
from server.coordinator import Change, Coordinator
from server.job import TERMINAL_NODE_STATES, Job, Send
from server.nodes import NodeOffline, NodeOnline, NodeRestarted, NodeTable
from server.recovery import recover
from server.sessions import SessionKeys
from server.settings import ServerConfig
from server.targeting import select

log = logging.getLogger("pushjobs.server")

BATCH = 4096
ASKED_KEEP_MS = 60_000  # far past RESEND_AFTER_MS: a repeat is judged against this
MAX_WAIT_S = 0.25  # bounds how long a signal waits to be noticed
API_MAX_BYTES = 32 * 1024 * 1024  # API replies (job lists, node lists) may be large
API_WINDOWS = 100_000  # client processes whose replay windows are remembered
RESEND_AFTER_MS = 2000  # a command unanswered this long after it was sent is sent again
LAG_BUCKETS = 2001  # heartbeat send-to-tracker lag histogram: 1 ms buckets, the last is >= 2 s


@dataclass(slots=True)
class Watch:
    identity: bytes
    request_id: str
    job_id: str
    version: int
    deadline: float
    nodes: bool = True


class Server:
    def __init__(
        self, config: ServerConfig, *, clock: Clock | None = None, out: Any = None
    ) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.out = out if out is not None else sys.stdout
        section = config.server
        self.identity = files.load_private(section.key_path())
        if self.identity.public.kind != "server":
            raise ConfigError(
                f"{section.key_path()} is a {self.identity.public.kind} key, not a server key",
                key="server.key_file",
            )
        if self.identity.name != section.name:
            raise ConfigError(
                f"the key file is for {self.identity.name!r}, not {section.name!r}",
                key="server.name",
            )
        self.name = section.name
        self.incarnation = secrets.token_hex(8)
        self.started_ms = self.clock.wall_ms()
        proto = config.protocol
        self.limits = Limits(proto.max_header_bytes, proto.max_body_bytes)
        self.api_limits = Limits(proto.max_header_bytes, max(API_MAX_BYTES, proto.max_body_bytes))
        signer = Ed25519Signer(
            key_id(self.identity.public.ed25519_public), self.identity.signing_key()
        )
        self.outbox = Outbox(self.name, self.incarnation, signer, self.limits)
        self.api_outbox = Outbox(self.name, self.incarnation, signer, self.api_limits)

        self.registry = KeyRegistry(section.registry_path(), clock=self.clock)
        # The ZAP handler runs on its own thread: it gets its own handle (and file cache).
        self.zap_registry = KeyRegistry(section.registry_path(), clock=self.clock)
        self.keys = RegistryKeys(self.registry)
        live = config.liveness
        self.liveness = LivenessTracker(
            live.interval_s, live.offline_threshold, live.online_threshold
        )
        self.nodes = NodeTable(self.liveness)
        self.sessions = SessionKeys(grace_s=2 * live.interval_s + 5.0)
        self.reply_inbox = Inbox(self.sessions.resolve, proto.max_skew_s, self.limits)
        self.api_replay = ReplayWindow(proto.max_skew_s)
        self.api_drops: Counter[str] = Counter()
        self.api_clients: deque[str] = deque()
        self.coordinator = Coordinator(config.jobs.keep_finished, config.jobs.keep_finished_nodes)
        self.handlers = ApiHandlers(self)
        self.node_curve: dict[str, str] = {}

        self.log: OrderedLog = open_log(config.log, clock=self.clock)
        self.topics = create_standard_topics(self.log, config.log.topic_prefix)
        self.group = config.log.topic_prefix + "leader"
        self.member: GroupMember = self.log.member(
            self.group,
            self.topics.commands,
            f"{self.name}:{self.incarnation}",
            session_timeout_s=section.leader_session_s,
        )
        self.fence: Fence | None = None

        soft, hard = raise_open_files(section.max_open_files)
        log.info("open-file limit %d (hard limit %d)", soft, hard)
        self.transport = Transport()
        curve = CurveKeys(self.identity.public.curve_public, self.identity.curve_secret)
        self.channels = Channels(
            self.transport,
            curve,
            api_bind=section.api_bind,
            heartbeat_bind=section.heartbeat_bind,
            reply_bind=section.reply_bind,
            node_allowed=self._node_allowed,
        )
        bound = self.channels.endpoints()
        self.heartbeat_endpoint = advertised(bound["heartbeat"], section.advertise_host)
        self.reply_endpoint = advertised(bound["reply"], section.advertise_host)
        self.api_endpoint = bound["api"]

        self.changes: list[Change] = []
        self.node_records: list[tuple[str, bytes]] = []
        self.sends: list[Send] = []
        self.api_out: list[tuple[bytes, list[bytes]]] = []
        self.watches: list[Watch] = []
        self.stopping = False
        now = self.clock.monotonic()
        self.next_beat = now
        self.next_lease = now
        self.next_registry = now + section.registry_check_s
        self.next_compact = now + section.compact_every_s if section.compact_every_s else None
        self.recovery_deadline: float | None = None
        self.recovering: set[str] = set()
        self.counters: Counter[str] = Counter()
        self.heartbeat_lag_ms = [0] * LAG_BUCKETS
        self.reply_backlog = False
        self.standby_replies: deque[Message] = deque(maxlen=100_000)
        self.asked: dict[tuple[str, str], int] = {}  # (job, node) -> wall ms of last command
        self.checked_entries: tuple[Entry, ...] | None = None

    # --- leadership and recovery ------------------------------------------------------------

    @property
    def leader(self) -> bool:
        return self.fence is not None

    def _renew(self, now: float) -> None:
        epoch = self.member.poll()
        self.next_lease = now + self.config.server.leader_session_s / 3
        if epoch is None:
            if self.fence is not None:
                log.error("lost the leader lease; standing by")
                self._stand_by()
            return
        if self.fence is None or self.fence.epoch != epoch:
            self.fence = Fence(self.group, epoch)
            self._take_over(now)

    def _stand_by(self) -> None:
        self.fence = None
        self.coordinator = Coordinator(
            self.config.jobs.keep_finished, self.config.jobs.keep_finished_nodes
        )
        self.changes.clear()
        self.sends.clear()

    def _take_over(self, now: float) -> None:
        found = recover(self.log, self.topics)
        self.coordinator = Coordinator(
            self.config.jobs.keep_finished, self.config.jobs.keep_finished_nodes
        )
        for problem in found.damaged:
            log.error("cannot restore %s", problem)
        for job, version in found.jobs:
            self.coordinator.restore(job, version)
        now_ms = self.clock.wall_ms()
        for request in found.unstarted:
            self._revive_unstarted(request, now_ms)
        replayed = len(self.standby_replies)
        while self.standby_replies:
            self.changes += self.coordinator.reply(self.standby_replies.popleft(), now_ms)
        if replayed:
            log.info("applied %d job replies received while standing by", replayed)
        active = list(self.coordinator.active())
        # Rewritten whole once: a job restored from an older layout (one record, or
        # chunks of another size) must not get a header that names chunks never written.
        rewrite = [
            record
            for job in active
            for record in records.snapshot_records(
                job, self.coordinator.versions.get(job.job_id, 0)
            )
        ]
        try:
            self._append(self.topics.assignments, rewrite)
        except ApiError:
            return  # deposed at once: _append stood this server by
        self.recovering = {
            name
            for job in active
            for name, rec in job.nodes.items()
            if rec.state not in TERMINAL_NODE_STATES
        }
        live = self.config.liveness
        grace = 3 * live.interval_s * live.offline_threshold + 2.0
        self.recovery_deadline = now + grace if self.recovering else None
        log.info(
            "leader with epoch %d: %d jobs restored (%d active), %d damaged",
            self.fence.epoch if self.fence else -1,
            len(found.jobs),
            len(active),
            len(found.damaged),
        )

    def _revive_unstarted(self, request: dict[str, Any], now_ms: int) -> None:
        """A start request the previous leader accepted but never started: end it, visibly."""
        try:
            job = Job.new(
                str(request["job_id"]),
                str(request["command"]),
                list(request["targets"]),
                int(request.get("created_ms", now_ms)),
                requested_by=str(request.get("requested_by", "")),
            )
        except (KeyError, TypeError, ValueError, PushJobsError) as exc:
            log.error("cannot revive start request %r: %s", request.get("job_id"), exc)
            return
        self.coordinator.restore(job, 0)
        self.changes += self.coordinator.abort(
            job.job_id, now_ms, "server restarted before the job started"
        )

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.channels.replies, zmq.POLLIN)
        poller.register(self.channels.api, zmq.POLLIN)
        self._renew(self.clock.monotonic())
        endpoints = self.channels.endpoints()
        self.out.write(
            f"pushjobs-server {self.name} ready api={endpoints['api']} "
            f"heartbeat={self.heartbeat_endpoint} reply={self.reply_endpoint} "
            f"leader={'yes' if self.leader else 'no'}\n"
        )
        self.out.flush()
        while not self.stopping:
            timeout_s = self._wait_s()
            ready = dict(poller.poll(round(timeout_s * 1000)))
            self.turn(ready)
        self.flush()

    def turn(self, ready: dict[Any, int]) -> None:
        if self.channels.replies in ready:
            batch = drain(self.channels.replies, BATCH)
            # A full batch means more is queued: heartbeats this server has not read yet.
            self.reply_backlog = len(batch) >= BATCH
            self._on_replies(batch)
        else:
            self.reply_backlog = False
        if self.channels.api in ready:
            for frames in drain(self.channels.api, BATCH):
                self._on_api(frames)
        self._timers()
        self.flush()

    def _wait_s(self) -> float:
        now = self.clock.monotonic()
        due = [self.next_beat, self.next_lease, self.next_registry, now + MAX_WAIT_S]
        deadline = self.liveness.next_deadline()
        if deadline is not None:
            due.append(deadline)
        job_deadline = self.coordinator.next_deadline_ms()
        if job_deadline is not None:
            due.append(now + (job_deadline - self.clock.wall_ms()) / 1000)
        due += [w.deadline for w in self.watches]
        if self.recovery_deadline is not None:
            due.append(self.recovery_deadline)
        return max(0.0, min(due) - now)

    def _timers(self) -> None:
        now = self.clock.monotonic()
        now_ms = self.clock.wall_ms()
        if now >= self.next_lease:
            self._renew(now)
        if now >= self.next_beat:
            beat = self.outbox.frames(ServerHeartbeat, now_ms, leader=self.leader)
            self.channels.publish(beat)
            self.next_beat = now + self.config.liveness.interval_s
        if self.reply_backlog:
            # Silence is only evidence once the queue is read: a server that fell behind
            # (a 50,000-node job start, a GC pause) must not call its own lag an outage.
            self.counters["expiry_deferred"] += 1
        else:
            for offline in self.nodes.expire(now):
                self._node_offline(offline, now_ms, "node went offline")
        if now >= self.next_registry:
            self._check_revoked(now, now_ms)
            self.sessions.expire(now)
            self._forget_asked(now_ms - ASKED_KEEP_MS)
            self.next_registry = now + self.config.server.registry_check_s
        if self.recovery_deadline is not None and now >= self.recovery_deadline:
            for name in self.recovering:
                if not self.nodes.is_online(name):
                    self.changes += self.coordinator.node_lost(
                        name, now_ms, "not seen since the server restarted"
                    )
            self.recovering.clear()
            self.recovery_deadline = None
        if self.leader:
            self.changes += self.coordinator.tick(now_ms)
        if self.next_compact is not None and now >= self.next_compact:
            self._compact()
            self.next_compact = now + self.config.server.compact_every_s

    def _compact(self) -> None:
        started = self.clock.monotonic()
        try:
            stats = self.log.compact()
        except LogError as exc:
            log.error("log compaction failed: %s", exc)
            return
        dropped = sum(s.records_before - s.records_after for s in stats)
        took = self.clock.monotonic() - started
        log.info("log compacted: %d records dropped in %.2f s", dropped, took)

    # --- node channel -------------------------------------------------------------------------

    def _on_replies(self, batch: list[list[bytes]]) -> None:
        now = self.clock.monotonic()
        now_ms = self.clock.wall_ms()
        for frames in batch:
            received = self.reply_inbox.accept(frames, now_ms)
            if received is None:
                continue
            msg = received.message
            if isinstance(msg, NodeHeartbeat):
                lag = now_ms - msg.timestamp
                self.heartbeat_lag_ms[
                    lag if 0 <= lag < LAG_BUCKETS else (0 if lag < 0 else -1)
                ] += 1
                events = self.nodes.heartbeat(
                    msg.sender,
                    msg.incarnation,
                    msg.command_endpoint,
                    msg.job_id,
                    msg.job_state,
                    restarted=received.restarted,
                    now=now,
                )
                for event in events:
                    if isinstance(event, NodeOnline):
                        self._node_online(event.node, now_ms)
                    elif isinstance(event, NodeRestarted):
                        self.changes += self.coordinator.node_lost(
                            event.node, now_ms, "node restarted (new incarnation)"
                        )
                if self.leader and self.coordinator.targets_pending(msg.sender):
                    self._ask_unreported(msg.sender, msg.job_id, msg.job_state, msg.timestamp)
            elif self.leader:
                self.changes += self.coordinator.reply(msg, now_ms)
            else:
                # No leader yet (a restart waiting for the old lease): keep results for it.
                self.standby_replies.append(msg)

    def _ask_unreported(
        self, node: str, busy_with: str | None, busy_state: str | None, beat_ms: int
    ) -> None:
        """Send again what a heartbeat shows never arrived.

        Only a heartbeat the node built well after our last command for that job can say
        so: judged by the heartbeat's own timestamp, not by when this server got round to
        reading it, or a server behind on its queue would answer stale heartbeats with a
        flood of repeats and fall further behind.
        """
        for send in self.coordinator.unreported(node, busy_with, busy_state):
            key = (send.job_id, node)
            if beat_ms - self.asked.get(key, -RESEND_AFTER_MS) >= RESEND_AFTER_MS:
                self.sends.append(send)

    def _forget_asked(self, before_ms: int) -> None:
        """Drop what was sent before ``before_ms``: O(dropped), not O(entries) per pass."""
        stale = []
        for key, sent_ms in self.asked.items():
            if sent_ms >= before_ms:
                break
            stale.append(key)
        for key in stale:
            del self.asked[key]

    def _node_online(self, node: str, now_ms: int) -> None:
        self.counters["node_online"] += 1
        log.info("node %s online", node)
        self.node_records.append(records.node_event("node_online", node, now_ms, self.name))
        if self.leader:
            self.sends += self.coordinator.node_online(node)

    def _node_offline(self, event: NodeOffline, now_ms: int, reason: str) -> None:
        self.counters["node_offline"] += 1
        log.info("node %s offline (%s)", event.node, reason)
        self.node_records.append(
            records.node_event("node_offline", event.node, now_ms, self.name, reason=reason)
        )
        if self.leader:
            self.changes += self.coordinator.node_lost(event.node, now_ms, reason)

    def _node_allowed(self, curve_public: str) -> bool:
        """ZAP check of the reply channel: only accepted node keys may connect."""
        entry = self.zap_registry.by_curve_key(curve_public)
        return entry is not None and entry.kind == "node" and entry.state is KeyState.ACCEPTED

    def _check_revoked(self, now: float, now_ms: int) -> None:
        # Sessions are only issued to accepted keys: nothing to revoke until the file
        # changes. With 50,000 nodes a full pass costs tens of milliseconds.
        entries = self.registry.entries()
        if entries is self.checked_entries:
            return
        self.checked_entries = entries
        for node in self.sessions.nodes():
            entry = self.registry.find(node)
            if entry is not None and entry.state is KeyState.ACCEPTED:
                continue
            log.warning("node %s: key no longer accepted; cutting it off", node)
            self.sessions.revoke(node)
            info = self.nodes.get(node)
            curve = self.node_curve.pop(node, None)
            if info is not None and curve is not None:
                self.channels.forget(info.command_endpoint, curve)
            went = self.nodes.cut_off(node, now)
            if went is not None:
                self._node_offline(went, now_ms, "key revoked")
            elif self.leader:
                self.changes += self.coordinator.node_lost(node, now_ms, "key revoked")

    # --- API channel ------------------------------------------------------------------------

    def _on_api(self, frames: list[bytes]) -> None:
        if len(frames) < 2:
            self.api_drops["frame"] += 1
            return
        identity, body = frames[0], frames[1:]
        now_ms = self.clock.wall_ms()
        try:
            message = open_api_frames(body, self.keys, self.limits)
            self._check_api_replay(message, now_ms)
        except UnknownKey as exc:
            self.api_drops[reason_for(exc)] += 1
            self._refuse_unknown(identity, body, now_ms)
            return
        except ProtocolError as exc:
            self.api_drops[reason_for(exc)] += 1
            return
        if isinstance(message, ConfigRequest):
            self._on_config(identity, message, now_ms)
        elif isinstance(message, ApiRequest):
            self._on_request(identity, message)
        else:
            self.api_drops["unexpected"] += 1

    def _check_api_replay(self, message: Message, now_ms: int) -> None:
        """Replay check per client process, not per user.

        One user runs many CLI processes at once (a ``--watch`` here, a ``job list``
        there), each its own incarnation; a window per sender would retire all but the
        newest. Each (sender, incarnation) gets its own window, the oldest forgotten past
        ``API_WINDOWS``; a replay older than that is still refused by the timestamp skew.
        """
        key = f"{message.sender}/{message.incarnation}"
        first = self.api_replay.current(key) is None
        self.api_replay.check(key, message.incarnation, message.sequence, message.timestamp, now_ms)
        if first:
            self.api_clients.append(key)
            if len(self.api_clients) > API_WINDOWS:
                self.api_replay.forget(self.api_clients.popleft())

    def _refuse_unknown(self, identity: bytes, body: list[bytes], now_ms: int) -> None:
        """Tell a user whose key the server does not know, instead of letting them time out.

        Only a well-formed API request gets this answer; it says nothing but that the key
        is unknown, and garbage still gets no answer at all.
        """
        try:
            request = decode(body[1]) if len(body) == 3 else None
        except ProtocolError:
            return
        if not isinstance(request, ApiRequest):
            return
        error = ErrorBody(
            methods.UNAUTHORIZED,
            f"the key of {request.sender[:64]!r} is not registered on this server; an admin "
            "can add it with: pushjobs key add USER.pub --role reader --accept",
        )
        frames = self.api_outbox.frames(
            ApiReply, now_ms, request_id=request.request_id, ok=False, error=error
        )
        self.api_out.append((identity, frames))

    def _on_config(self, identity: bytes, req: ConfigRequest, now_ms: int) -> None:
        status: str
        try:
            entry = self.registry.find(req.sender)
            if entry is not None and entry.kind != "node":
                raise KeyFileError(f"{req.sender} is registered as a {entry.kind}, not a node")
            state = self.registry.present(
                req.sender,
                "node",
                b64decode(req.ed25519_public),
                req.curve_public,
                auto_accept=self.config.server.auto_accept,
            )
            status = state.value
        except (KeyFileError, ValueError) as exc:
            self._config_reply(identity, req.sender, "rejected", f"refused: {exc}", None)
            return
        if state is not KeyState.ACCEPTED:
            message = {
                "pending": f"key of {req.sender} is pending: an admin must accept it "
                f"(pushjobs key accept {req.sender})",
                "rejected": f"key of {req.sender} is rejected or revoked",
                "denied": f"another key is registered for {req.sender}; this one is denied",
            }[status]
            log.info("config request from %s: %s", req.sender, status)
            self._config_reply(identity, req.sender, status, message, None)
            return
        now = self.clock.monotonic()
        session = self.sessions.issue(req.sender, now)
        self.nodes.register(req.sender, req.command_endpoint, req.facts, req.tags)
        old_curve = self.node_curve.get(req.sender)
        info = self.nodes.get(req.sender)
        if old_curve is not None and old_curve != req.curve_public and info is not None:
            self.channels.forget(info.command_endpoint, old_curve)
        self.node_curve[req.sender] = req.curve_public
        live, proto = self.config.liveness, self.config.protocol
        config = NodeConfig(
            server_id=self.name,
            server_incarnation=self.incarnation,
            heartbeat_endpoint=self.heartbeat_endpoint,
            reply_endpoint=self.reply_endpoint,
            server_ed25519_public=b64(self.identity.public.ed25519_public),
            server_curve_public=self.identity.public.curve_public,
            interval_s=live.interval_s,
            offline_threshold=live.offline_threshold,
            online_threshold=live.online_threshold,
            max_skew_s=proto.max_skew_s,
            max_body_bytes=proto.max_body_bytes,
            session_key_id=session.key_id,
            session_key_b64=session.secret_b64,
            lifetime_s=self.config.server.config_lifetime_s,
        )
        log.info("config for node %s (endpoint %s)", req.sender, req.command_endpoint)
        self._config_reply(identity, req.sender, "accepted", "", config)

    def _config_reply(
        self,
        identity: bytes,
        node: str,
        status: str,
        message: str,
        config: NodeConfig | None,
    ) -> None:
        frames = self.api_outbox.frames(
            ConfigReply,
            self.clock.wall_ms(),
            node=node,
            status=status,
            message=message,
            config=config,
        )
        self.api_out.append((identity, frames))

    def _on_request(self, identity: bytes, req: ApiRequest) -> None:
        entry = self.registry.find(req.sender)
        if entry is None or entry.kind != "user" or entry.state is not KeyState.ACCEPTED:
            self._api_error(
                identity, req, methods.UNAUTHORIZED, f"{req.sender} is not an accepted user"
            )
            return
        if not methods.allowed(entry.role, req.method):
            if req.method not in methods.METHODS:
                self._api_error(
                    identity, req, methods.BAD_REQUEST, f"unknown method {req.method!r}"
                )
            else:
                needed = methods.METHODS[req.method]
                self._api_error(
                    identity,
                    req,
                    methods.UNAUTHORIZED,
                    f"{req.method} needs the {needed} role; {req.sender} is {entry.role}",
                )
            return
        if req.method.startswith("job.") and not self.leader:
            self._api_error(identity, req, methods.NOT_LEADER, "this server is not the leader")
            return
        try:
            result = self.handlers.handle(req.method, req.params, req.sender)
        except ApiError as exc:
            self._api_error(identity, req, exc.code, str(exc))
            return
        if result is WATCH:
            wait_s = min(float(req.params.get("wait_s", 10.0)), methods.MAX_WATCH_S)
            self.watches.append(
                Watch(
                    identity,
                    req.request_id,
                    str(req.params["job_id"]),
                    int(req.params.get("version", -1)),
                    self.clock.monotonic() + wait_s,
                    req.params.get("nodes", True) is not False,
                )
            )
            return
        self._api_ok(identity, req.request_id, result)

    def _api_ok(self, identity: bytes, request_id: str, result: Any) -> None:
        now_ms = self.clock.wall_ms()
        try:
            frames = self.api_outbox.frames(
                ApiReply, now_ms, request_id=request_id, ok=True, result=result
            )
        except OversizedFrame:
            error = ErrorBody(methods.BAD_REQUEST, "the result is too large; ask for less (paging)")
            frames = self.api_outbox.frames(
                ApiReply, now_ms, request_id=request_id, ok=False, error=error
            )
        self.api_out.append((identity, frames))

    def _api_error(self, identity: bytes, req: ApiRequest, code: str, message: str) -> None:
        frames = self.api_outbox.frames(
            ApiReply,
            self.clock.wall_ms(),
            request_id=req.request_id,
            ok=False,
            error=ErrorBody(code, message),
        )
        self.api_out.append((identity, frames))

    # --- the Backend the API handlers use ----------------------------------------------------

    def info(self) -> dict[str, Any]:
        drops: dict[str, dict[str, int]] = {
            "reply": dict(self.reply_inbox.drops),
            "api": dict(self.api_drops),
        }
        if self.channels.command_drops:
            drops["command"] = {"queue_full": self.channels.command_drops}
        return {
            "server_id": self.name,
            "incarnation": self.incarnation,
            "leader": self.leader,
            "epoch": self.fence.epoch if self.fence else None,
            "started_ms": self.started_ms,
            "nodes_known": len(self.nodes),
            "nodes_online": self.liveness.online_count,
            "jobs_active": sum(1 for _ in self.coordinator.active()),
            "late_replies": dict(self.coordinator.late),
            "drops": drops,
            "heartbeats": sum(self.heartbeat_lag_ms),
            # Sparse histogram {ms: count} of wall time from a heartbeat's timestamp to the
            # tracker: sender's queue, the wire and this server's receive batch together.
            "heartbeat_lag_ms": {str(i): n for i, n in enumerate(self.heartbeat_lag_ms) if n},
            "transitions": {
                "online": self.counters["node_online"],
                "offline": self.counters["node_offline"],
            },
            "command_sockets": self.channels.command_sockets,
            "expiry_deferred": self.counters["expiry_deferred"],
            "gc": collector.stats(),
        }

    def start_job(self, request: JobRequest, caller: str) -> str:
        if self.stopping:
            raise ApiError("the server is stopping", code=methods.NOT_LEADER)
        targets = select(request.selectors, self.nodes.facts())
        if len(targets) > self.config.jobs.max_nodes:
            raise ApiError(
                f"{len(targets)} nodes selected; the limit is {self.config.jobs.max_nodes}",
                code=methods.BAD_REQUEST,
            )
        now_ms = self.clock.wall_ms()
        job_id = f"{now_ms:x}{secrets.token_hex(4)}"
        jobs = self.config.jobs
        run_timeout_s = request.run_timeout_s or jobs.run_timeout_s
        vote_timeout_s = request.vote_timeout_s or jobs.vote_timeout_s
        command = {
            "type": "start",
            "job_id": job_id,
            "command": request.command,
            "targets": targets,
            "quorum": str(request.quorum),
            "run_timeout_s": run_timeout_s,
            "vote_timeout_s": vote_timeout_s,
            "options": request.options,
            "requested_by": caller,
            "created_ms": now_ms,
        }
        # The request is durable before anything acts on it.
        self._append(self.topics.commands, [records.command_record(job_id, command)])
        self.changes += self.coordinator.submit(
            job_id,
            request.command,
            targets,
            self.liveness.online_peers(),
            now_ms,
            quorum=request.quorum,
            vote_timeout_ms=round(vote_timeout_s * 1000),
            run_timeout_ms=round(run_timeout_s * 1000),
            options=request.options,
            requested_by=caller,
        )
        log.info("job %s: %s on %d nodes, by %s", job_id, request.command, len(targets), caller)
        return job_id

    def abort_job(self, job_id: str, caller: str) -> None:
        record = {"type": "abort", "job_id": job_id, "requested_by": caller}
        self._append(self.topics.commands, [records.command_record(job_id, record)])
        self.changes += self.coordinator.abort(job_id, self.clock.wall_ms(), f"aborted by {caller}")

    def node_names(self) -> list[str]:
        names = {info.name for info in self.nodes}
        names.update(e.name for e in self.registry.entries() if e.kind == "node")
        return sorted(names)

    def node_row(self, name: str) -> dict[str, Any] | None:
        info = self.nodes.get(name)
        entry = self.registry.find(name)
        if info is None and (entry is None or entry.kind != "node"):
            return None
        status = self.liveness.status(name)
        now = self.clock.monotonic()
        return {
            "name": name,
            "key_state": entry.state.value if entry is not None else "unknown",
            "online": status.online if status else False,
            "command_endpoint": info.command_endpoint if info else None,
            "incarnation": info.incarnation if info else None,
            "job_id": info.job_id if info else None,
            "job_state": info.job_state if info else None,
            "last_seen_ms_ago": round((now - status.last_seen) * 1000) if status else None,
            "facts": dict(info.facts) if info else {},
            "tags": list(info.tags) if info else [],
        }

    def find_output(self, job_id: str, node: str) -> dict[str, Any] | None:
        found = self.coordinator.outputs.get((job_id, node))
        if found is not None:
            out = found.output
            return {
                "job_id": job_id,
                "node": node,
                "exit_status": found.exit_status,
                "stdout": out.stdout,
                "stderr": out.stderr,
                "stdout_truncated": out.stdout_truncated,
                "stderr_truncated": out.stderr_truncated,
            }
        return self._output_from_log(job_id, node)

    def _output_from_log(self, job_id: str, node: str) -> dict[str, Any] | None:
        """After a restart, outputs are read back from the events topic."""
        offset, end = 0, self.log.end_offset(self.topics.events)
        key = f"job:{job_id}"
        found: dict[str, Any] | None = None
        while offset < end:
            batch = self.log.read(self.topics.events, offset, 5000)
            if not batch:
                break
            for rec in batch:
                if rec.key == key and rec.value is not None:
                    event = orjson.loads(rec.value)
                    if event.get("kind") == "output" and event.get("node") == node:
                        found = {
                            k: event.get(k)
                            for k in (
                                "job_id",
                                "node",
                                "exit_status",
                                "stdout",
                                "stderr",
                                "stdout_truncated",
                                "stderr_truncated",
                            )
                        }
            offset = batch[-1].offset + 1
        return found

    # --- persistence, then effects ---------------------------------------------------------------

    def _append(self, topic: str, batch: Sequence[tuple[str, bytes | None]]) -> None:
        if not batch:
            return
        if self.fence is None and topic != self.topics.events:
            raise ApiError("this server is not the leader", code=methods.NOT_LEADER)
        try:
            self.log.append_batch(topic, batch, fence=self.fence)
        except FencedError:
            log.error("a newer leader exists (write to %s fenced); standing by", topic)
            self._stand_by()
            raise ApiError("this server is no longer the leader", code=methods.NOT_LEADER) from None

    def flush(self) -> None:
        changes, self.changes = self.changes, []
        node_records, self.node_records = self.node_records, []
        if changes or node_records:
            jobs = self.coordinator.jobs
            versions = self.coordinator.versions
            snapshots = [
                record
                for job_id, chunks in records.touched_chunks(changes, jobs).items()
                for record in records.snapshot_records(
                    jobs[job_id], versions.get(job_id, 0), chunks
                )
            ]
            events = records.job_events(changes, jobs, self.name) + node_records
            try:
                if snapshots:
                    self._append(self.topics.assignments, snapshots)
                if events and self.fence is not None:
                    self._append(self.topics.events, events)
            except ApiError:
                self.sends.clear()  # deposed: the new leader owns these jobs now
        sends = [c for c in changes if isinstance(c, Send)] + self.sends
        self.sends = []
        if self.fence is not None:
            now_ms = self.clock.wall_ms()
            for send in sends:
                self._send(send, now_ms)
        for identity, frames in self.api_out:
            self.channels.reply(identity, frames)
        self.api_out.clear()
        if self.watches:
            self._answer_watches()

    def _send(self, send: Send, now_ms: int) -> None:
        job = self.coordinator.jobs.get(send.job_id)
        info = self.nodes.get(send.node)
        curve = self.node_curve.get(send.node)
        signer = self.sessions.signer(send.node)
        if job is None or info is None or curve is None or signer is None:
            self.counters["unsendable"] += 1
            return
        if not info.command_endpoint:
            self.counters["unsendable"] += 1
            return
        message: Message
        if send.kind != "abort":
            # A heartbeat built before this command arrived does not show it yet: no
            # reason to send it again for a while (see ``Coordinator.unreported``).
            # Re-inserted, not updated: the dict stays oldest-first for _forget_asked.
            key = (job.job_id, send.node)
            self.asked.pop(key, None)
            self.asked[key] = now_ms
        if send.kind == "commit":
            opts = job.options
            options = RunOptions(
                timeout_s=job.run_timeout_ms / 1000,
                env=dict(opts.get("env") or {}),
                cwd=opts.get("cwd"),
                capture=bool(opts.get("capture", False)),
            )
            message = self.outbox.message(
                Commit,
                now_ms,
                node=send.node,
                job_id=job.job_id,
                command=job.command,
                options=options,
            )
        elif send.kind == "run":
            message = self.outbox.message(Run, now_ms, node=send.node, job_id=job.job_id)
        else:
            message = self.outbox.message(Abort, now_ms, node=send.node, job_id=job.job_id)
        # Signed with the node's session key: only this node and the server hold it.
        frames = seal(message, signer, self.limits)
        self.channels.send_command(info.command_endpoint, curve, frames)

    def _answer_watches(self) -> None:
        now = self.clock.monotonic()
        keep: list[Watch] = []
        versions = self.coordinator.versions
        for watch in self.watches:
            current = versions.get(watch.job_id)
            if current is None:
                self._api_error_id(watch, methods.NOT_FOUND, f"no job {watch.job_id!r}")
            elif current > watch.version or now >= watch.deadline:
                view = self.coordinator.view(watch.job_id, nodes=watch.nodes)
                self._api_ok(watch.identity, watch.request_id, {"job": view})
            else:
                keep.append(watch)
                continue
        self.watches = keep
        for identity, frames in self.api_out:
            self.channels.reply(identity, frames)
        self.api_out.clear()

    def _api_error_id(self, watch: Watch, code: str, message: str) -> None:
        frames = self.api_outbox.frames(
            ApiReply,
            self.clock.wall_ms(),
            request_id=watch.request_id,
            ok=False,
            error=ErrorBody(code, message),
        )
        self.api_out.append((watch.identity, frames))

    def close(self) -> None:
        try:
            self.member.close()
        finally:
            self.transport.close()
            self.log.close()


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pushjobs-server",
        description="The pushjobs server: node liveness, job coordination, the API.",
        epilog="Example: pushjobs-server --config /etc/pushjobs/server.toml",
    )
    parser.add_argument("--config", type=Path, help="server TOML file (default: built-in defaults)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s pushjobs-server: %(message)s",
        stream=sys.stderr,
    )
    collector.tune()
    try:
        config = load_config(ServerConfig, args.config)
        server = Server(config)
    except PushJobsError as exc:
        hint = ""
        if isinstance(exc, KeyFileError) and "no such key file" in str(exc):
            hint = " (create it with: pushjobs key gen server --kind server)"
        sys.stderr.write(f"pushjobs-server: error: {exc}{hint}\n")
        raise SystemExit(2 if isinstance(exc, ConfigError) else 1) from None

    def stop(signum: int, frame: object) -> None:
        server.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = 0
    try:
        server.run()
    except LogError as exc:
        log.error("the ordered log failed: %s; stopping (restart recovers from the log)", exc)
        code = 1
    finally:
        server.close()
    log.info("stopped")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
