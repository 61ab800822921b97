"""What the API handlers act through: the server's components seen as one ``Backend``.

Reads (``server.info``, node rows, job outputs) are answered from the components' own
state; writes (start, abort) go to job effects, which make them durable first. An output
no longer in memory after a restart is read back from the ``events`` topic.

Holds no state of its own: killed at any line, nothing is lost here.
"""

from __future__ import annotations

from typing import Any

import orjson

from keys.registry import KeyRegistry
from pushjobs import collector
from pushjobs.clock import Clock
from pushjobs.log.base import OrderedLog
from pushjobs.log.topics import TopicNames
from server.channels import Channels
from server.coordinator import Coordinator
from server.enrolment import Enrolment
from server.handlers import JobRequest
from server.intake import NodeIntake
from server.jobs import Jobs
from server.leadership import Leadership
from server.nodes import NodeTable
from server.watches import Watches

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
    ) -> None:
        self.name = name
        self.incarnation = incarnation
        self.clock = clock
        self.started_ms = clock.wall_ms()
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

    @property
    def coordinator(self) -> Coordinator:
        return self.jobs.coordinator

    def info(self) -> dict[str, Any]:
        intake, admission = self.intake, self.enrolment.admission
        drops: dict[str, dict[str, int]] = {
            "reply": dict(intake.inbox.drops),
            "api": dict(self.api_drops),
        }
        if self.channels.command_drops:
            drops["command"] = {"queue_full": self.channels.command_drops}
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
            "drops": drops,
            "heartbeats": sum(intake.heartbeat_lag_ms),
            # Sparse histogram {ms: count} of wall time from a heartbeat's timestamp to the
            # tracker: sender's queue, the wire and this server's receive batch together.
            "heartbeat_lag_ms": {str(i): n for i, n in enumerate(intake.heartbeat_lag_ms) if n},
            "transitions": {
                "online": intake.counters["node_online"],
                "offline": intake.counters["node_offline"],
            },
            "command_sockets": self.channels.command_sockets,
            "expiry_deferred": intake.counters["expiry_deferred"],
            "watches": {"parked": self.watches.count, "refused": self.watches.refused},
            "enrolment": {
                "queued": admission.queued,
                "refused": admission.refused,
                "registry_writes": admission.writes,
                "failed_writes": admission.failed_writes,
            },
            "gc": collector.stats(),
        }

    def start_job(self, request: JobRequest, caller: str) -> str:
        return self.jobs.start(request, caller, self.clock.wall_ms())

    def abort_job(self, job_id: str, caller: str) -> None:
        self.jobs.abort(job_id, caller, self.clock.wall_ms())

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
