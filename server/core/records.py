"""What the server writes to the ordered log: event records and job snapshots. Pure.

Event record, one per change of a job, keyed ``job:<id>``: ``ts``, ``kind`` (job_created,
job_state, output), ``job_id``, ``node``, ``state``, ``prev_state``, ``command``,
``exit_status``, ``duration_ms``, ``server``; ``output`` records add the captured text.
A node's ``duration_ms`` runs from the job's runs (a batch job's node, or one that came
late to a job waiting for offline nodes: from its turn).

A job held for approval (``policy.py``) says so in the ``job_state`` records of its moves
into and out of ``awaiting_approval``: they carry ``approval``, the job's hold and decision
(``rule``, ``expires_ms``; ``decision`` approved, rejected or expired, ``decided_by``,
``decided_ms``, ``reason``). The ``events`` topic is append-only: that is the durable
account of who approved or rejected what, when and why. The decision itself is written
first to ``commands`` (``decision_record``, key ``job:<id>/approval``, its own key so a
later abort does not compact it away), before anything acts on it.

The nodes that went online or offline in a turn are ``node_liveness`` records, keyed
``liveness`` (``liveness_events``): ``ts`` of the first, ``server``, and ``nodes``, a list
of ``[node, state, ts, reason]`` (``LIVENESS_FIELDS``; ``state`` online or offline, the
reason an offline's). The archive turns each entry into the ``node_online`` or
``node_offline`` row it stands for.

A job's node changes of one turn are written together, not one record each: a
``node_states`` record (``ts`` of its first change, ``job_id``, ``command``, ``server``)
whose ``nodes`` lists each change as ``[node, state, prev_state, ts, exit_status,
duration_ms, reason]`` (``NODE_STATE_FIELDS``), in order, up to ``NODE_STATES_BYTES`` a
record. A 10,000-node job changed 30,000 nodes' states, each a record of its own to
encode and append; the archive (``pushjobs.pipeline.events``) turns each entry back into
the ``node_state`` row it stood for. A change of the job itself closes its group, so the
records keep the job's order of events.

Every record here can be encoded, so none has a fallback: a job holds what ``job.start``
or ``schedule.add`` checked (``jobparams.py``: timeouts of at most a year, so that their
milliseconds and deadlines stay far inside 64 bits; the leader's default timeouts are
bounded alike when its config is read), what JSON carried to the server (a request, a
node's reply, a record read back: orjson decoded it, so it encodes again), and what the
server derives from these. A schedule's job kept by an older version, read back from the
log, is checked again at each fire (``jobparams.job_request``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pushjobs.states import JobState
from server.core.coordinator import Change, JobCreated, NodeAmended, OutputReceived
from server.core.effects import JobChanged, NodeChanged
from server.core.job import Job


def event(
    kind: str,
    ts: int,
    server: str,
    *,
    job_id: str | None = None,
    node: str | None = None,
    state: str | None = None,
    prev_state: str | None = None,
    command: str | None = None,
    exit_status: int | None = None,
    duration_ms: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "ts": ts,
        "kind": kind,
        "job_id": job_id,
        "node": node,
        "state": state,
        "prev_state": prev_state,
        "command": command,
        "exit_status": exit_status,
        "duration_ms": duration_ms,
        "server": server,
        **extra,
    }


NODE_STATES = "node_states"
NODE_STATE_FIELDS = ("node", "state", "prev_state", "ts", "exit_status", "duration_ms", "reason")
NODE_STATES_BYTES = 256 * 1024
"""A ``node_states`` record's entries, encoded, stay under this (the log's values under
1 MiB): counted at 6 bytes a character of names and reasons (a control character's
escape), so about 1,600 ten-character names a record."""
_ENTRY_BYTES = 96  # an entry's brackets, quotes, commas, states, times and status


@dataclass(slots=True)
class _Group:
    """A ``node_states`` record being filled, and its entries' counted size."""

    record: dict[str, Any]
    size: int = 0


def job_events(
    changes: Iterable[Change], jobs: Mapping[str, Job], server: str
) -> list[tuple[str, bytes]]:
    """(key, value) event records for ``changes``, in order; a job's node changes
    grouped in ``node_states`` records (see the module docstring)."""
    out: list[tuple[str, dict[str, Any]]] = []
    groups: dict[str, _Group] = {}  # the job's open record
    for change in changes:
        job = jobs.get(change.job_id)
        if job is None:
            continue
        key = f"job:{job.job_id}"
        if isinstance(change, NodeChanged):
            node, at = change.node, change.at_ms
            # A batch job's node runs from its turn, not from the job's first runs; so does
            # a node that came late to a job waiting for offline nodes.
            turn = job.nodes[node].turn_ms
            started = job.run_started_ms if turn is None else turn
            reason = change.reason or None
            cost = _ENTRY_BYTES + 6 * (len(node) + len(change.reason))
            group = groups.get(job.job_id)
            if group is None or group.size + cost > NODE_STATES_BYTES:
                record: dict[str, Any] = {
                    "ts": at,
                    "kind": NODE_STATES,
                    "job_id": job.job_id,
                    "command": job.command,
                    "server": server,
                    "nodes": [],
                }
                group = groups[job.job_id] = _Group(record)
                out.append((key, record))
            group.record["nodes"].append(
                [
                    node,
                    change.state.value,
                    change.prev.value,
                    at,
                    change.exit_status,
                    None if started is None else max(0, at - started),
                    reason,
                ]
            )
            group.size += cost
            continue
        if not isinstance(change, OutputReceived):
            # Node changes that follow a change of the job itself come after it. (A node's
            # output, a record of its own, is read by node, in no order with the states.)
            groups.pop(job.job_id, None)
        match change:
            case JobCreated(at_ms=at):
                rec = event(
                    "job_created",
                    at,
                    server,
                    job_id=job.job_id,
                    command=job.command,
                    state="new",
                    targets=len(job.nodes),
                    requested_by=job.requested_by,
                )
            case JobChanged(prev=prev, state=state, at_ms=at):
                duration = None if job.finished_ms is None else job.finished_ms - job.created_ms
                held = JobState.AWAITING_APPROVAL in (prev, state)
                rec = event(
                    "job_state",
                    at,
                    server,
                    job_id=job.job_id,
                    command=job.command,
                    state=state.value,
                    prev_state=prev.value,
                    duration_ms=duration if state == job.state and job.finished else None,
                    summary=job.summary() if job.finished else None,
                )
                if held:
                    rec["approval"] = job.approval
                if state is JobState.HALTED:
                    rec["halt_reason"] = job.halt_reason  # the budget, or the signal fired
            case OutputReceived(node=node, output=output, exit_status=status):
                rec = event(
                    "output",
                    job.nodes[node].changed_ms,
                    server,
                    job_id=job.job_id,
                    node=node,
                    command=job.command,
                    exit_status=status,
                    stdout=output.stdout,
                    stderr=output.stderr,
                    stdout_truncated=output.stdout_truncated,
                    stderr_truncated=output.stderr_truncated,
                )
            case _:
                continue
        out.append((key, rec))
    return [(key, orjson.dumps(rec)) for key, rec in out]


NODE_LIVENESS = "node_liveness"
LIVENESS_KEY = "liveness"
LIVENESS_FIELDS = ("node", "state", "ts", "reason")


@dataclass(frozen=True, slots=True)
class LivenessChange:
    """A node gone ``online`` or ``offline`` (with why) at ``ts``."""

    node: str
    state: str
    ts: int
    reason: str | None = None


def liveness_events(changes: Iterable[LivenessChange], server: str) -> list[tuple[str, bytes]]:
    """``node_liveness`` records for the nodes that went online or offline in a turn, in
    order: a fleet coming online is a few records, not one per node. A node appears at
    most once in a record (its next change opens the next one), so a node's events keep
    their order on ``(ts, offset)`` wherever the archive reads them; at most
    ``NODE_STATES_BYTES`` counted a record, as ``node_states``."""
    out: list[dict[str, Any]] = []
    members: set[str] = set()
    size = 0
    record: dict[str, Any] | None = None
    for change in changes:
        cost = _ENTRY_BYTES + 6 * (len(change.node) + len(change.reason or ""))
        if record is None or change.node in members or size + cost > NODE_STATES_BYTES:
            record = {"ts": change.ts, "kind": NODE_LIVENESS, "server": server, "nodes": []}
            out.append(record)
            members.clear()
            size = 0
        record["nodes"].append([change.node, change.state, change.ts, change.reason])
        members.add(change.node)
        size += cost
    return [(LIVENESS_KEY, orjson.dumps(rec)) for rec in out]


CHUNK_KEY = "/nodes/"


def snapshot_records(
    job: Job, version: int, chunks: Iterable[int] | None = None
) -> list[tuple[str, bytes]]:
    """A job's snapshot records: its header, and the node chunks named (default: all)."""
    key = f"job:{job.job_id}"
    out = [(key, orjson.dumps({**job.header(), "version": version}))]
    for index in sorted(range(job.chunks) if chunks is None else set(chunks)):
        out.append((f"{key}{CHUNK_KEY}{index}", job.chunk_bytes(index)))
    return out


def touched_chunks(
    changes: Iterable[Change], jobs: Mapping[str, Job]
) -> dict[str, set[int] | None]:
    """Per changed job, the node chunks to rewrite (None: all of them, a new job)."""
    out: dict[str, set[int] | None] = {}
    for change in changes:
        job = jobs.get(change.job_id)
        if job is None:
            continue
        if isinstance(change, JobCreated):
            out[job.job_id] = None
        elif isinstance(change, NodeChanged | NodeAmended):
            dirty = out.setdefault(job.job_id, set())
            if dirty is not None:
                dirty.add(job.chunk_of(change.node))
        elif isinstance(change, JobChanged | OutputReceived):
            out.setdefault(job.job_id, set())
    return out


def command_record(job_id: str, request: Mapping[str, Any]) -> tuple[str, bytes]:
    return f"job:{job_id}", orjson.dumps(request)


DECISION_KEY = "/approval"


def decision_record(job_id: str, decision: Mapping[str, Any]) -> tuple[str, bytes]:
    """An approval or rejection of a held job, for ``commands`` (see the docstring)."""
    return f"job:{job_id}{DECISION_KEY}", orjson.dumps(decision)


TARGETS_KEY = "/targets/"
TARGETS_CHUNK_BYTES = 256 * 1024
"""A start request's targets go in records of their own past this (encoded): 100,000 node
names made a request of 1.2 MB, over the log's value limit, and no such job could start."""


def start_records(job_id: str, request: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """A start request's records: one, or, when its targets are many, chunks of them
    (``job:<id>/targets/<i>``, a list of names each) and then the request itself naming
    how many (``target_chunks``), last: appended in one batch, in order, so a request that
    was written has every chunk before it (``recovery`` reads them back)."""
    targets = list(request.get("targets") or ())
    whole = orjson.dumps(request)
    if len(whole) <= TARGETS_CHUNK_BYTES:
        return [(f"job:{job_id}", whole)]
    chunks: list[list[str]] = [[]]
    size = 0
    for name in targets:
        cost = len(name) + 4  # its quotes, a comma, and a character's escape at most
        if size + cost > TARGETS_CHUNK_BYTES and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(name)
        size += cost
    head = {k: v for k, v in request.items() if k != "targets"}
    head["target_chunks"] = len(chunks)
    out = [(f"job:{job_id}{TARGETS_KEY}{i}", orjson.dumps(chunk)) for i, chunk in enumerate(chunks)]
    out.append((f"job:{job_id}", orjson.dumps(head)))
    return out
