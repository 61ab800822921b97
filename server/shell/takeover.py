"""What a new leader rebuilds from the log before it acts: the coordinator and its first writes.

Theory of operation. ``recovery.recover`` reads every job's latest snapshot and the start
requests no snapshot followed. ``take_over`` turns that into a fresh coordinator:

- every restored job is put back with its version;
- a start request the previous leader accepted but never started is ended ``aborted``,
  visibly, rather than started late or forgotten;
- job replies that arrived while no server led (kept by node intake) are applied;
- no active job's vote or run deadline falls within ``grace_ms`` of the takeover: its nodes
  need that long to find the new leader and answer, and a restart alone must not fail a
  job (a deadline that passed while no server led is moved, not applied at once); a
  batch job's per-node run deadlines, next start and repeat of its held commits too
  (``Job.rearm``), while its window goes on from the node table: ``waiting`` nodes wait,
  ``ready`` ones (told to run already) are the only ones ever told again;
- every active job is rewritten whole once: a job restored from an older layout (one
  record, or chunks of another size) must not get a header naming chunks never written;
- a job awaiting approval keeps its expiry (nothing of it waits for a node) and the
  leader acts on a decision written for it (``leaderjobs.py``);
- the nodes of active jobs still owing a result are listed, for node intake to give them
  a grace period to show up before they count as lost.

Pure but for reading the log: it returns records and changes for the caller to write.
Killed at any line: nothing was written; the next leader starts from the same log.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pushjobs.errors import PushJobsError
from pushjobs.protocol.messages import Message
from pushjobs.states import TERMINAL_NODE_STATES, NodeState
from server.core import records
from server.core.coordinator import Change, Coordinator
from server.core.job import Job
from server.shell.recovery import Recovered

log = logging.getLogger("pushjobs.server")


@dataclass(slots=True)
class Takeover:
    changes: list[Change] = field(default_factory=list)
    rewrite: list[tuple[str, bytes | None]] = field(default_factory=list)
    unfinished_nodes: set[str] = field(default_factory=set)
    replayed: int = 0
    active: int = 0


def take_over(
    coordinator: Coordinator,
    found: Recovered,
    standby_replies: deque[Message],
    now_ms: int,
    grace_ms: int,
) -> Takeover:
    """Fill the (empty) ``coordinator`` from ``found``; what to write and who to wait for."""
    out = Takeover()
    for problem in found.damaged:
        log.error("cannot restore %s", problem)
    for job, version in found.jobs:
        coordinator.restore(job, version)
    for request in found.unstarted:
        out.changes += _revive_unstarted(coordinator, request, now_ms)
    while standby_replies:
        out.changes += coordinator.reply(standby_replies.popleft(), now_ms)
        out.replayed += 1
    if out.replayed:
        log.info("applied %d job replies received while standing by", out.replayed)
    active = list(coordinator.active())
    out.active = len(active)
    for job in active:
        job.rearm(now_ms + grace_ms)
    out.rewrite = [
        record
        for job in active
        for record in records.snapshot_records(job, coordinator.versions.get(job.job_id, 0))
    ]
    out.unfinished_nodes = set(_unfinished(active))
    return out


def _unfinished(jobs: Iterable[Job]) -> Iterable[str]:
    for job in jobs:
        if job.awaiting_approval:
            continue  # no node was asked anything: none owes a result
        for name, rec in job.nodes.items():
            # One waited for ``offline`` (``offlinewait.py``) was never asked: it owes none.
            if rec.state not in TERMINAL_NODE_STATES and rec.state is not NodeState.OFFLINE:
                yield name


def _revive_unstarted(
    coordinator: Coordinator, request: dict[str, Any], now_ms: int
) -> list[Change]:
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
        return []
    coordinator.restore(job, 0)
    return coordinator.abort(job.job_id, now_ms, "server restarted before the job started")
