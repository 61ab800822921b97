"""Watches: ``job.watch`` requests parked until their job changes or their wait runs out.

Theory of operation. A watch names a job and the version its client last saw. At the end
of every turn, after the turn's changes are durable, the watches of the jobs that changed
this turn (``Coordinator.take_touched``) are answered with the job's view if the job moved
past their version, and with an error if the job is gone (forgotten, or a new leader that
does not know it); watches whose deadline passed are answered with the view as it is. So
a turn costs O(changed jobs + answered watches), never O(parked watches): watches are
indexed by job, and deadlines sit in a heap.

Watches hold memory and a reply slot for up to ``MAX_WATCH_S`` each, and any reader may
ask: they are capped per client process and in total, and one over a cap is refused at
once with ``busy`` (the CLI says so) instead of being parked.

A server that stops leading (its lease lost, a successor elected) answers every parked
watch ``not_leader``, naming the leader when it knows it, so each client follows the job
to the server that now holds it. Its own coordinator is a fresh, empty one by then: read
from it, the jobs would look gone (``not_found``) although they run on at the leader.

Killed at any line: parked watches are lost; each client's wait times out and it asks
again (``pushjobs job status --watch`` does).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from pushjobs.api import methods
from pushjobs.errors import ApiError
from pushjobs.protocol.messages import ApiRequest
from server.core.coordinator import Coordinator
from server.front.responder import Responder

MAX_PER_CLIENT: Final = 64  # one CLI process watches one job at a time; scripts a few
MAX_TOTAL: Final = 10_000


@dataclass(slots=True, eq=False)
class Watch:
    identity: bytes
    client: str  # sender/incarnation: one client process
    request_id: str
    job_id: str
    version: int
    deadline: float
    nodes: bool = True
    seq: int = 0
    done: bool = False


class Watches:
    def __init__(self, *, max_per_client: int = MAX_PER_CLIENT, max_total: int = MAX_TOTAL):
        self.max_per_client = max_per_client
        self.max_total = max_total
        self.by_job: dict[str, dict[int, Watch]] = {}
        self.per_client: dict[str, int] = {}
        self.count = 0
        self.refused = 0
        self._deadlines: list[tuple[float, int, Watch]] = []
        self._order = itertools.count()
        self._coordinator: Coordinator | None = None

    def park(self, identity: bytes, req: ApiRequest, now: float) -> None:
        """Park a watch; ApiError ``busy`` when its client or the server holds too many."""
        client = f"{req.sender}/{req.incarnation}"
        mine = self.per_client.get(client, 0)
        if mine >= self.max_per_client or self.count >= self.max_total:
            self.refused += 1
            limit = (
                f"{self.max_per_client} per client"
                if mine >= self.max_per_client
                else f"{self.max_total} on this server"
            )
            raise ApiError(f"too many parked watches ({limit}); retry later", code=methods.BUSY)
        wait_s = min(float(req.params.get("wait_s", 10.0)), methods.MAX_WATCH_S)
        watch = Watch(
            identity,
            client,
            req.request_id,
            str(req.params["job_id"]),
            int(req.params.get("version", -1)),
            now + wait_s,
            req.params.get("nodes", True) is not False,
            next(self._order),
        )
        self.by_job.setdefault(watch.job_id, {})[watch.seq] = watch
        heapq.heappush(self._deadlines, (watch.deadline, watch.seq, watch))
        self.per_client[client] = mine + 1
        self.count += 1

    def answer(
        self,
        coordinator: Coordinator,
        now: float,
        now_ms: int,
        responder: Responder,
        *,
        leading: bool = True,
        leader_api: Callable[[], str | None] = lambda: None,
    ) -> None:
        """Answer the watches whose job moved or is gone, and those whose time is up; all
        of them ``not_leader`` (with ``leader_api()``) on a server that does not lead."""
        if not leading:
            if self.count:
                leader = leader_api()
                for watch in self.parked:
                    self._release(watch)
                    responder.not_leader(watch.identity, watch.request_id, leader, now_ms)
            return
        touched = coordinator.take_touched()
        if coordinator is not self._coordinator:
            # A new coordinator (a takeover, standing by): it may not know any parked job.
            self._coordinator = coordinator
            touched = set(self.by_job)
        for job_id in touched:
            watches = self.by_job.get(job_id)
            if not watches:
                continue
            current = coordinator.versions.get(job_id)
            for watch in list(watches.values()):
                if current is None or current > watch.version:
                    self._reply(watch, coordinator, now_ms, responder)
        while self._deadlines and (self._deadlines[0][2].done or self._deadlines[0][0] <= now):
            _, _, watch = heapq.heappop(self._deadlines)
            if not watch.done:
                self._reply(watch, coordinator, now_ms, responder)

    def _reply(
        self, watch: Watch, coordinator: Coordinator, now_ms: int, responder: Responder
    ) -> None:
        self._release(watch)
        if watch.job_id not in coordinator.versions:
            problem = f"no job {watch.job_id!r}"
            responder.error(watch.identity, watch.request_id, methods.NOT_FOUND, problem, now_ms)
            return
        view = coordinator.view(watch.job_id, nodes=watch.nodes)
        responder.ok(watch.identity, watch.request_id, {"job": view}, now_ms)

    def _release(self, watch: Watch) -> None:
        """Unpark a watch about to be answered (its heap entry is skipped from now on)."""
        watch.done = True
        self.count -= 1
        mine = self.by_job[watch.job_id]
        del mine[watch.seq]
        if not mine:
            del self.by_job[watch.job_id]
        left = self.per_client[watch.client] - 1
        if left:
            self.per_client[watch.client] = left
        else:
            del self.per_client[watch.client]

    @property
    def parked(self) -> list[Watch]:
        return [w for watches in self.by_job.values() for w in watches.values()]

    def next_deadline(self) -> float | None:
        while self._deadlines and self._deadlines[0][2].done:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None
