"""What the API handlers act through: the server's components seen as one ``Backend``.

Reads (``server.info``, node rows, job outputs) are answered from the components' own
state; writes (start, abort) go to job effects, which make them durable first. An output
no longer in memory after a restart is read back from the ``events`` topic.

Holds no state of its own: killed at any line, nothing is lost here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from itertools import accumulate, compress, count
from typing import Any

import orjson

from keys.entry import Entry
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs import collector
from pushjobs.api import methods
from pushjobs.clock import Clock
from pushjobs.errors import ApiError
from pushjobs.log.base import OrderedLog
from pushjobs.log.retry import Outage
from pushjobs.log.timed import TimedLog
from pushjobs.log.topics import TopicNames
from pushjobs.states import JobState
from server.core.coordinator import Coordinator
from server.core.jobparams import JobRequest
from server.core.nodetable import NodeTable
from server.front.enrolment import Enrolment
from server.front.watches import Watches
from server.shell.channels import Channels
from server.shell.edges import EdgePool
from server.shell.leaderjobs import Jobs
from server.shell.leadership import Leadership
from server.shell.membership import Membership
from server.shell.nodeintake import NodeIntake
from server.shell.scheduler import Scheduler

OUTPUT_FIELDS = (
    "job_id",
    "node",
    "exit_status",
    "stdout",
    "stderr",
    "stdout_truncated",
    "stderr_truncated",
)


class ServerBackend:
    def __init__(
        self,
        *,
        name: str,
        incarnation: str,
        clock: Clock,
        registry: KeyRegistry,
        jobs: Jobs,
        intake: NodeIntake,
        channels: Channels,
        enrolment: Enrolment,
        api_drops: dict[str, int],
        watches: Watches | None = None,
        outage: Outage | None = None,
        membership: Membership | None = None,
    ) -> None:
        self.name = name
        self.incarnation = incarnation
        self.clock = clock
        self.started_ms = clock.wall_ms()
        self.started = clock.monotonic()
        # Registry counts, recounted only when the registry's entries change.
        self._entries: tuple[Entry, ...] | None = None
        self._table_size = 0
        self._known = self._pending = 0
        self.registry = registry
        self.leadership: Leadership = jobs.leadership
        self.log: OrderedLog = jobs.leadership.log
        self.topics: TopicNames = jobs.topics
        self.jobs = jobs
        self.intake = intake
        self.nodes: NodeTable = intake.nodes
        self.channels = channels
        self.enrolment = enrolment
        self.api_drops = api_drops
        self.watches = watches if watches is not None else Watches()
        self.outage = outage if outage is not None else Outage()
        self.scheduler: Scheduler | None = None  # set by the daemon (``schedule.*``)
        self.edges: EdgePool | None = None  # set by the daemon when it has edges
        self.membership = membership

    @property
    def coordinator(self) -> Coordinator:
        return self.jobs.coordinator

    def info(self) -> dict[str, Any]:
        intake, admission = self.intake, self.enrolment.admission
        drops: dict[str, dict[str, int]] = {
            "reply": dict(intake.inbox.drops),
            "api": dict(self.api_drops),
        }
        # Commands not sent: the socket's queue full, or no message could be made of them
        # (no endpoint known, secrets that do not open, too large, unencodable).
        lag = list(intake.heartbeat_lag_ms)
        edges = self.edges.status() if self.edges is not None else []
        for edge in edges:
            # The fleet's heartbeats are read by the edges: theirs are the figures.
            drops[f"edge:{edge['edge']}"] = dict(edge["drops"])
            for ms, n in edge["heartbeat_lag_ms"].items():
                lag[min(int(ms), len(lag) - 1)] += int(n)
        command = {"queue_full": self.channels.command_drops, **self.jobs.sender.counters}
        if any(command.values()):
            drops["command"] = {reason: n for reason, n in command.items() if n}
        return {
            "server_id": self.name,
            "incarnation": self.incarnation,
            "leader": self.leadership.leader,
            "epoch": self.leadership.epoch,
            "started_ms": self.started_ms,
            "nodes_known": len(self.nodes),
            "nodes_online": intake.liveness.online_count,
            "jobs_active": sum(1 for _ in self.coordinator.active()),
            "late_replies": dict(self.coordinator.late),
            "stale_busy_nacks": self.coordinator.stale_busy_nacks,
            "drops": drops,
            "heartbeats": sum(lag),
            # Sparse histogram {ms: count} of wall time from a heartbeat's timestamp to the
            # tracker: sender's queue, the wire and this server's receive batch together.
            # Its 2,001 buckets are walked in C (compress): this runs every second.
            "heartbeat_lag_ms": {str(i): lag[i] for i in compress(count(), lag)},
            "transitions": {
                "online": intake.counters["node_online"],
                "offline": intake.counters["node_offline"],
            },
            "command_sockets": self.channels.command_sockets,
            "expiry_deferred": intake.counters["expiry_deferred"],
            # Overload, as the one-process server meets it (edges say theirs per edge):
            # a read that filled its batch left messages queued, and offline checks wait.
            "backlog": intake.backlog,
            "stalls": intake.counters["stalls"],
            "watches": {"parked": self.watches.count, "refused": self.watches.refused},
            "enrolment": {
                "queued": admission.queued,
                "refused": admission.refused,
                "registry_writes": admission.writes,
                "failed_writes": admission.failed_writes,
            },
            "gc": collector.stats(),
            "uptime_s": round(self.clock.monotonic() - self.started, 3),
            "nodes": self._node_counts(),
            "jobs": self._job_counts(),
            "heartbeat_lag": lag_summary(lag),
            "log_append": self._append_latency(),
            # None while the log takes writes; else since when it has not, and why.
            "log_outage": self.outage.status(self.clock.monotonic()),
            # Per edge: live, its nodes, its load, lag and drops ([] without edges).
            "edges": edges,
        }

    def drain_edge(self, edge: str, undo: bool, caller: str) -> dict[str, Any]:
        if not self.leadership.leader:
            raise ApiError("only the leader places nodes", code=methods.NOT_LEADER)
        edges = self.edges
        if edges is None or edge not in edges.edges:
            known = ", ".join(edges.edges) if edges is not None and edges.edges else "none"
            raise ApiError(f"no edge {edge[:64]!r} here (edges: {known})", code=methods.NOT_FOUND)
        return edges.drain(edge, self.clock.monotonic(), undo=undo, by=caller)

    def servers(self) -> list[dict[str, Any]]:
        """Every server the control topic knows, this one marked ``self``."""
        if self.membership is None:
            return []
        rows = self.membership.rows()
        for row in rows:
            row["self"] = row["incarnation"] == self.incarnation
        return rows

    def _node_counts(self) -> dict[str, int]:
        """Online, offline (seen or accepted, not online now), pending (keys awaiting an
        admin)."""
        entries = self.registry.entries()
        if entries is not self._entries or len(self.nodes) != self._table_size:
            # A pass over 50,000 nodes costs ~5 ms: only when the registry or the table
            # changed, not once a second.
            nodes = [e for e in entries if e.kind == "node"]
            accepted = frozenset(e.name for e in nodes if e.state is KeyState.ACCEPTED)
            self._pending = sum(1 for e in nodes if e.state is KeyState.PENDING)
            seen = sum(1 for info in self.nodes if info.name not in accepted)
            self._known = len(accepted) + seen
            self._entries, self._table_size = entries, len(self.nodes)
        online = self.intake.liveness.online_count
        return {
            "online": online,
            "offline": max(0, self._known - online),
            "pending": self._pending,
        }

    def _job_counts(self) -> dict[str, int]:
        """Jobs held in memory (active and the last ``keep_finished``) by state."""
        counts: Counter[str] = Counter(job.state.value for job in self.coordinator.jobs.values())
        return {state.value: counts[state.value] for state in JobState}

    def _append_latency(self) -> dict[str, Any] | None:
        if not isinstance(self.log, TimedLog):
            return None
        return {**self.log.latency.summary(), "failures": self.log.failures}

    def start_job(self, request: JobRequest, caller: str) -> str:
        return self.jobs.start(request, caller, self.clock.wall_ms())

    def abort_job(self, job_id: str, caller: str) -> None:
        self.jobs.abort(job_id, caller, self.clock.wall_ms())

    def decide_job(self, job_id: str, caller: str, *, approve: bool, reason: str) -> None:
        self.jobs.decide(job_id, caller, self.clock.wall_ms(), approve=approve, reason=reason)

    def node_names(self) -> list[str]:
        names = {info.name for info in self.nodes}
        names.update(e.name for e in self.registry.entries() if e.kind == "node")
        return sorted(names)

    def node_row(self, name: str) -> dict[str, Any] | None:
        info = self.nodes.get(name)
        entry = self.registry.find(name)
        if info is None and (entry is None or entry.kind != "node"):
            return None
        status = self.intake.liveness.status(name)
        now = self.clock.monotonic()
        second = self.enrolment.duplicate(name, now)
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
            # A second agent presenting this node's key, refused while this one is online.
            "duplicate": None
            if second is None
            else {
                "endpoint": second.endpoint,
                "incarnation": second.incarnation,
                "refused_ms_ago": round((now - second.at) * 1000),
            },
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
                        found = {k: event.get(k) for k in OUTPUT_FIELDS}
            offset = batch[-1].offset + 1
        return found


def lag_summary(histogram: Sequence[int]) -> dict[str, int | None]:
    """p50, p99 and max of a histogram of 1 ms buckets (``None`` while it is empty).

    A rank's bucket is the first whose running total reaches it (it holds at least one
    heartbeat); the max is the first that reaches the total. Running totals and their
    search are done in C: the metrics publish this every second, over 2,001 buckets, and
    a loop in Python cost an idle server with 10 agents 0.1-0.2 % of a core."""
    running = list(accumulate(histogram))
    total = running[-1] if running else 0
    if not total:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "p50_ms": bisect_left(running, 0.5 * total),
        "p99_ms": bisect_left(running, 0.99 * total),
        "max_ms": bisect_left(running, total),
    }
