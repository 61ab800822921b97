"""Watches: ``job.watch`` requests parked until their job changes or their wait runs out.

Theory of operation. A watch names a job and the version its client last saw. At the end
of every turn, after the turn's changes are durable, each watch is answered with the job's
view if the job moved past that version or the watch's deadline passed, and an error if
the job is gone (a new leader that does not know it); the rest stay parked. The daemon
wakes for the earliest deadline.

Killed at any line: parked watches are lost; each client's wait times out and it asks
again (``pushjobs job status --watch`` does).
"""

from __future__ import annotations

from dataclasses import dataclass

from pushjobs.api import methods
from pushjobs.protocol.messages import ApiRequest
from server.coordinator import Coordinator
from server.responder import Responder


@dataclass(slots=True)
class Watch:
    identity: bytes
    request_id: str
    job_id: str
    version: int
    deadline: float
    nodes: bool = True


class Watches:
    def __init__(self) -> None:
        self.parked: list[Watch] = []

    def park(self, identity: bytes, req: ApiRequest, now: float) -> None:
        wait_s = min(float(req.params.get("wait_s", 10.0)), methods.MAX_WATCH_S)
        self.parked.append(
            Watch(
                identity,
                req.request_id,
                str(req.params["job_id"]),
                int(req.params.get("version", -1)),
                now + wait_s,
                req.params.get("nodes", True) is not False,
            )
        )

    def answer(
        self, coordinator: Coordinator, now: float, now_ms: int, responder: Responder
    ) -> None:
        """Answer every watch whose job moved or whose time is up; keep the others."""
        if not self.parked:
            return
        keep: list[Watch] = []
        versions = coordinator.versions
        for watch in self.parked:
            current = versions.get(watch.job_id)
            if current is None:
                problem = f"no job {watch.job_id!r}"
                responder.error(
                    watch.identity, watch.request_id, methods.NOT_FOUND, problem, now_ms
                )
            elif current > watch.version or now >= watch.deadline:
                view = coordinator.view(watch.job_id, nodes=watch.nodes)
                responder.ok(watch.identity, watch.request_id, {"job": view}, now_ms)
            else:
                keep.append(watch)
        self.parked = keep

    def next_deadline(self) -> float | None:
        return min((w.deadline for w in self.parked), default=None)
