"""What an edge reads from its nodes, and what of it the leader needs to hear.

Every message on the reply socket is verified here (the inbox: signature with the node's
session key, replay window, size); a bad one is a counted drop. Heartbeats feed this
edge's node table and liveness tracker; job replies are passed on to the leader whole
(the verified body: the leader decodes it, without checking it again).

The leader does no work per heartbeat. It hears a node's liveness *changes* (online,
offline, restarted), and only the heartbeats it can act on: one whose job or job state
differs from the node's previous one (a result that was lost, a commit the node never
got or no longer needs) or is the first this edge reads from it, and, for a node that
holds a job or was sent a command lately, one every ``TRICKLE_S`` (the leader re-sends a
command the node shows it never got, at most that often: ``server.shell.commands``). An
idle fleet sends the leader nothing.

Silence is only evidence once the queue is read (as on the one-process server): expiry
waits for a batch that was not full, and the edge's own stall moves every deadline.

Killed at any line: nothing here is durable. The leader holds the edge's nodes online
while they move to another edge (``server.core.edgeliveness``).
"""

from __future__ import annotations

from collections import Counter

from pushjobs.protocol.codec import Beat
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker
from pushjobs.protocol.shedding import stale_heartbeat
from server.core.edgewire import Report
from server.core.nodetable import NodeOnline, NodeRestarted, NodeTable

BATCH = 4096
TRICKLE_S = 2.0  # as ``commands.RESEND_AFTER_MS``: a repeat is due no sooner
WATCH_S = 10.0  # after a command, the node's heartbeats are the leader's evidence this long
LAG_BUCKETS = 2001


class _Seen:
    __slots__ = ("forwarded_at", "job_id", "job_state", "watch_until")

    def __init__(self) -> None:
        self.job_id: str | None = None
        self.job_state: str | None = None
        self.forwarded_at = float("-inf")
        self.watch_until = float("-inf")


class EdgeIntake:
    def __init__(
        self, inbox: Inbox, liveness: LivenessTracker, *, stale_after_s: float = 1.0
    ) -> None:
        """``stale_after_s``: while behind, a heartbeat older than this is shed unread
        (``pushjobs.protocol.shedding``): the heartbeat interval. Nobody is judged until
        an offline window has passed since the last shed."""
        self.inbox = inbox
        self.stale_after_ms = round(stale_after_s * 1000)
        self.shed_until = float("-inf")
        self.liveness = liveness
        self.nodes = NodeTable(liveness)
        self.seen: dict[str, _Seen] = {}
        self.report = Report()
        self.backlog = False
        self.last_batch = 0  # messages in the last read (``Edge.run`` gathers below some)
        self.counters: Counter[str] = Counter()
        self.heartbeat_lag_ms = [0] * LAG_BUCKETS

    def receive(self, batch: list[list[bytes]], now: float, now_ms: int) -> None:
        self.backlog = len(batch) >= BATCH
        self.last_batch = len(batch)
        accept = self.inbox.accept_beat
        beat = self._heartbeat
        heartbeats = shed = 0  # counted once per batch: a Counter's item costs a dict's
        stale_before = now_ms - self.stale_after_ms if self.backlog else None
        for frames in batch:
            if stale_before is not None and stale_heartbeat(frames, stale_before):
                shed += 1  # behind: a newer one follows (``shedding``)
                continue
            received = accept(frames, now_ms)
            if received is None:
                continue
            if type(received) is tuple:
                beat(received[0], received[1], now, now_ms)
                heartbeats += 1
            else:
                self.counters["replies"] += 1
                self.report.replies.append(frames[1])
        if heartbeats:
            self.counters["heartbeats"] += heartbeats
        if shed:
            self.counters["heartbeats_shed"] += shed
            # Judge nobody on the heartbeats shed: a node alive through them is read
            # again within a window of the last shed.
            self.shed_until = now + self.liveness.offline_after_s

    def _heartbeat(self, beat: Beat, restarted: bool, now: float, now_ms: int) -> None:
        node, incarnation, _, timestamp, endpoint, job_id, job_state = beat
        lag = now_ms - timestamp
        self.heartbeat_lag_ms[lag if 0 <= lag < LAG_BUCKETS else (0 if lag < 0 else -1)] += 1
        events = self.nodes.heartbeat(
            node, incarnation, endpoint, job_id, job_state, restarted=restarted, now=now
        )
        for event in events:
            if isinstance(event, NodeOnline):
                self.report.online.append((node, incarnation, endpoint))
            elif isinstance(event, NodeRestarted):
                self.report.restarted.append((node, event.incarnation))
        seen = self.seen.get(node)
        first = seen is None
        if seen is None:
            seen = self.seen[node] = _Seen()
        # The first heartbeat this edge reads from a node is news to the leader too: the
        # node may come from another edge, whose last word on its job is stale now.
        if (
            first
            or job_id != seen.job_id
            or job_state != seen.job_state
            or (
                (job_id is not None or now < seen.watch_until)
                and now - seen.forwarded_at >= TRICKLE_S
            )
        ):
            seen.forwarded_at = now
            self.report.beats.append((node, job_id, job_state, timestamp))
            seen.job_id, seen.job_state = job_id, job_state

    def commanded(self, node: str, now: float) -> None:
        """A command went to ``node``: its next heartbeats tell whether it arrived."""
        seen = self.seen.get(node)
        if seen is None:
            seen = self.seen[node] = _Seen()
        seen.watch_until = now + WATCH_S
        seen.forwarded_at = now  # a heartbeat built before the command shows nothing yet

    def idle(self) -> None:
        self.backlog = False
        self.last_batch = 0

    def expire(self, now: float) -> None:
        if self.backlog or now < self.shed_until:
            self.counters["expiry_deferred"] += 1
            return
        for went in self.nodes.expire(now):
            self.report.offline.append((went.node, "node went offline"))
            self.seen.pop(went.node, None)

    def forget(self, node: str, now: float) -> None:
        """``node`` belongs to another edge now, or may no longer be heard."""
        self.nodes.cut_off(node, now)
        self.seen.pop(node, None)

    def take_report(self) -> Report:
        report, self.report = self.report, Report()
        return report
