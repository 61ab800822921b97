"""Node intake and liveness: the reply channel read, verified and turned into node facts.

Theory of operation. The daemon drains the reply socket in batches and hands each batch
here. Every message is verified by the inbox (signature with the node's session key,
replay window, size) before it is decoded; a bad one is a counted drop. A heartbeat feeds
the node table (online at the threshold, restarted on a new incarnation) and asks job
effects to re-send what the node shows it never got; any other message is a job reply,
applied by the leader, kept for the next leader while no server leads.

Liveness is judged here too: a node silent for the offline window goes offline, which
crashes it in its active jobs. Silence is only evidence once the queue is read: a full
batch means heartbeats are waiting that this server has not read (a 50,000-node job start,
a GC pause), so expiry waits for a batch that is not full (counted ``expiry_deferred``).
After a takeover, nodes that owe a result get a grace period to show up before they
count as lost ("not seen since the server restarted"); a job started within that grace
waits for the targets not heard yet in the same way (``awaiting.py``), and one lost here
before it was heard is ``unavailable`` in that job, not ``crashed``.

Killed at any line: nothing here is durable. Nodes start unknown on the next server and
come online with their next heartbeats; results kept for a leader are re-sent by the
agents after their next discovery (they journal every outcome).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable

from pushjobs.errors import ProtocolError
from pushjobs.protocol.codec import decode
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.messages import Message, NodeHeartbeat
from pushjobs.protocol.shedding import stale_heartbeat
from server.core.batch import NODE_RESTARTED
from server.core.edgeliveness import EdgeLiveness
from server.core.edgewire import Report
from server.core.nodetable import NodeOffline, NodeOnline, NodeRestarted, NodeTable
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership

log = logging.getLogger("pushjobs.server")

BATCH = 4096  # messages read from the reply socket per turn
LAG_BUCKETS = 2001  # heartbeat send-to-tracker lag histogram: 1 ms buckets, the last is >= 2 s
STANDBY_REPLIES = 100_000
LOG_EACH = 5  # node transitions in a turn logged one by one; more are summarised


class NodeIntake:
    def __init__(
        self,
        inbox: Inbox,
        nodes: NodeTable,
        *,
        liveness: LivenessTracker,
        jobs: Jobs,
        leadership: Leadership,
        stale_after_s: float = 1.0,
        offline_after_s: float = 3.0,
    ) -> None:
        """``stale_after_s``: while behind, a heartbeat older than this is shed unread
        (``pushjobs.protocol.shedding``): the heartbeat interval. ``offline_after_s``: the
        offline window; nobody is judged until one has passed since the last shed."""
        self.inbox = inbox
        self.stale_after_ms = round(stale_after_s * 1000)
        self.offline_after_s = offline_after_s
        self.shed_until = float("-inf")
        self.nodes = nodes
        self.liveness = liveness
        self.jobs = jobs
        self.leadership = leadership
        self.backlog = False
        self.standby_replies: deque[Message] = deque(maxlen=STANDBY_REPLIES)
        self.heartbeat_lag_ms = [0] * LAG_BUCKETS
        self.counters: Counter[str] = Counter()
        self.awaited: set[str] = set()
        self.awaited_until: float | None = None
        # This turn's transitions, logged at its end (``log_transitions``).
        self.went_online: list[str] = []
        self.went_offline: list[str] = []

    # --- the reply channel --------------------------------------------------------------

    def receive(self, batch: list[list[bytes]], now: float, now_ms: int) -> None:
        # A full batch means more is queued: heartbeats this server has not read yet.
        self.backlog = len(batch) >= BATCH
        stale_before = now_ms - self.stale_after_ms if self.backlog else None
        shed = 0
        for frames in batch:
            if stale_before is not None and stale_heartbeat(frames, stale_before):
                shed += 1  # behind: a newer one follows (``shedding``)
                continue
            received = self.inbox.accept(frames, now_ms)
            if received is None:
                continue
            msg = received.message
            if isinstance(msg, NodeHeartbeat):
                self._heartbeat(msg, received.restarted, now, now_ms)
            elif self.leadership.leader:
                self.jobs.reply(msg, now_ms)
            else:
                # No leader yet (a restart waiting for the old lease): keep results for it.
                self.standby_replies.append(msg)
        if shed:
            self.counters["heartbeats_shed"] += shed
            # Judge nobody on the heartbeats shed: a node alive through them is read
            # again within a window of the last shed.
            self.shed_until = now + self.offline_after_s

    def edge_report(
        self, edge: str, report: Report, owner: Callable[[str], str | None], now: float, now_ms: int
    ) -> list[str]:
        """What ``edge`` read this turn (``server.shell.edges``): liveness changes, the
        heartbeats the leader needs, job replies. Only a node's own edge speaks for it.
        The nodes it says came online that no edge holds for this server (it serves them
        for a leader before this one, and they were not handed over): to be asked to
        rediscover, or they would talk to an edge that speaks for them to nobody."""
        unowned: list[str] = []
        liveness = self.liveness
        assert isinstance(liveness, EdgeLiveness)
        for node, incarnation in report.restarted:
            if owner(node) == edge:
                self.nodes.reported(node, incarnation, None)
                self.jobs.node_lost(node, now_ms, NODE_RESTARTED, restarted=True)
        for node, incarnation, endpoint in report.online:
            if (placed := owner(node)) != edge:
                self.counters["edge_not_owner"] += 1
                if placed is None:
                    unowned.append(node)
                continue
            # Restarted while it moved from another edge: that edge never saw the new one.
            info = self.nodes.get(node)
            if info is not None and info.incarnation and info.incarnation != incarnation:
                self.jobs.node_lost(node, now_ms, NODE_RESTARTED, restarted=True)
            self.nodes.reported(node, incarnation, endpoint)
            moved = liveness.is_held(node) or liveness.edge_of(node) != edge
            if liveness.online(node, edge, now) is not None:
                self._online(node, now_ms)
            elif moved:
                # Held online while it moved from a lost edge (to another, or to the same
                # edge started again): what that edge was to send it may be lost with it.
                # Sent again now, as to a node that reappeared.
                self.counters["edge_moves"] += 1
                self.jobs.node_online(node, now_ms)
        for node, reason in report.offline:
            if owner(node) != edge:
                continue
            went = liveness.mark_offline(node, now)
            if went is not None:
                self.offline(NodeOffline(node, went.last_seen), now_ms, reason, via=edge)
        for node, job_id, job_state, beat_ms in report.beats:
            if owner(node) == edge:
                self.nodes.busy(node, job_id, job_state)
                self.jobs.heartbeat(node, job_id, job_state, beat_ms, now_ms)
        for body in report.replies:
            try:
                msg = decode(body)
            except ProtocolError:
                self.counters["edge_reply_malformed"] += 1
                continue
            if self.leadership.leader:
                self.jobs.reply(msg, now_ms)
            else:
                self.standby_replies.append(msg)
        return unowned

    def idle(self) -> None:
        """The reply socket had nothing this turn: no backlog."""
        self.backlog = False

    def _heartbeat(self, msg: NodeHeartbeat, restarted: bool, now: float, now_ms: int) -> None:
        lag = now_ms - msg.timestamp
        self.heartbeat_lag_ms[lag if 0 <= lag < LAG_BUCKETS else (0 if lag < 0 else -1)] += 1
        events = self.nodes.heartbeat(
            msg.sender,
            msg.incarnation,
            msg.command_endpoint,
            msg.job_id,
            msg.job_state,
            restarted=restarted,
            now=now,
        )
        for event in events:
            if isinstance(event, NodeOnline):
                self._online(event.node, now_ms)
            elif isinstance(event, NodeRestarted):
                self.jobs.node_lost(event.node, now_ms, NODE_RESTARTED, restarted=True)
        self.jobs.heartbeat(msg.sender, msg.job_id, msg.job_state, msg.timestamp, now_ms)

    def _online(self, node: str, now_ms: int) -> None:
        self.counters["node_online"] += 1
        self.went_online.append(f"{node} online")
        self.jobs.node_event(node, "online", now_ms)
        self.jobs.node_online(node, now_ms)

    def offline(self, event: NodeOffline, now_ms: int, reason: str, *, via: str = "") -> None:
        """``event`` acted on; ``via``: the edge that said so (for the log line only)."""
        self.counters["node_offline"] += 1
        said = f", said {via}" if via else ""
        self.went_offline.append(f"{event.node} offline ({reason}{said})")
        self.jobs.node_event(event.node, "offline", now_ms, reason)
        self.jobs.node_lost(event.node, now_ms, reason)

    def cut_off(self, node: str, now: float, now_ms: int, reason: str) -> None:
        """The node may no longer be heard (its key was revoked): offline, lost to its jobs."""
        went = self.nodes.cut_off(node, now)
        if went is not None:
            self.offline(went, now_ms, reason)
        else:
            self.jobs.node_lost(node, now_ms, reason)
        # It cannot come back: the jobs that wait for it offline wait no more.
        self.jobs.gone(node, now_ms, reason)

    def log_transitions(self) -> None:
        """One line per node while few change in a turn; past ``LOG_EACH``, one line for
        the turn (a 100,000-node fleet coming online would be 100,000 lines)."""
        for lines, what in ((self.went_online, "online"), (self.went_offline, "offline")):
            if len(lines) <= LOG_EACH:
                for line in lines:
                    log.info("node %s", line)
            else:
                shown = ", ".join(line.split(" ", 1)[0] for line in lines[:LOG_EACH])
                more = len(lines) - LOG_EACH
                log.info(
                    "%d nodes went %s this turn: %s and %d more", len(lines), what, shown, more
                )
            lines.clear()

    # --- time ---------------------------------------------------------------------------

    def expire(self, now: float, now_ms: int) -> None:
        if self.backlog or now < self.shed_until:
            # Silence is only evidence once the queue is read: a server that fell behind
            # must not call its own lag an outage.
            self.counters["expiry_deferred"] += 1
        else:
            for offline in self.nodes.expire(now):
                self.offline(offline, now_ms, "node went offline")
        if self.awaited_until is not None and now >= self.awaited_until:
            for name in self.awaited:
                if not self.nodes.is_online(name):
                    self.jobs.node_lost(name, now_ms, "not seen since the server restarted")
            self.awaited.clear()
            self.awaited_until = None

    def expiry_due(self, now: float) -> bool:
        """Whether some node's offline deadline has passed by ``now``."""
        deadline = self.liveness.next_deadline()
        return deadline is not None and deadline <= now

    def stalled(self, blind_s: float) -> None:
        """This server could not read for ``blind_s``: no silence of that long counts."""
        self.counters["stalls"] += 1
        self.liveness.stall(blind_s)
        if self.awaited_until is not None:
            self.awaited_until += blind_s

    def await_nodes(self, names: set[str], until: float) -> None:
        """After a takeover: ``names`` owe results; give them until ``until`` to show up."""
        self.awaited = names
        self.awaited_until = until if names else None

    def next_deadline(self) -> float | None:
        due = [d for d in (self.liveness.next_deadline(), self.awaited_until) if d is not None]
        return min(due) if due else None
