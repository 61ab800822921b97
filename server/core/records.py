"""What the server writes to the ordered log: event records and job snapshots. Pure.

Event record, one per state change, keyed ``job:<id>`` or
``node:<name>``: ``ts``, ``kind`` (job_created, job_state, node_state, node_online,
node_offline, output), ``job_id``, ``node``, ``state``, ``prev_state``, ``command``,
``exit_status``, ``duration_ms``, ``server``; ``output`` records add the captured text.
A node's ``duration_ms`` runs from the job's runs (a batch job's node: from its turn).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from pushjobs.api import methods
from pushjobs.errors import ApiError
from server.core.coordinator import Change, JobCreated, OutputReceived
from server.core.effects import JobChanged, NodeChanged
from server.core.job import Job

# What orjson raises for a value it cannot encode (its JSONEncodeError is a TypeError).
UNENCODABLE = (TypeError, ValueError, OverflowError)


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


def job_events(
    changes: Iterable[Change], jobs: Mapping[str, Job], server: str
) -> list[tuple[str, bytes]]:
    """(key, value) event records for ``changes``, in order."""
    out: list[tuple[str, bytes]] = []
    for change in changes:
        job = jobs.get(change.job_id)
        if job is None:
            continue
        key = f"job:{job.job_id}"
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
            case NodeChanged(node=node, prev=prev, state=state, at_ms=at):
                # A batch job's node runs from its turn, not from the job's first runs.
                turn = job.nodes[node].turn_ms
                started = job.run_started_ms if turn is None else turn
                rec = event(
                    "node_state",
                    at,
                    server,
                    job_id=job.job_id,
                    node=node,
                    command=job.command,
                    state=state.value,
                    prev_state=prev.value,
                    exit_status=change.exit_status,
                    duration_ms=None if started is None else max(0, at - started),
                    reason=change.reason or None,
                )
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
        out.append((key, _dumps(rec)))
    return out


def _dumps(record: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(record)
    except UNENCODABLE:  # a bug put it there: the event is written all the same
        return orjson.dumps(recordable(record))


def node_event(kind: str, node: str, ts: int, server: str, **extra: Any) -> tuple[str, bytes]:
    return f"node:{node}", orjson.dumps(event(kind, ts, server, node=node, state=kind[5:], **extra))


CHUNK_KEY = "/nodes/"
INT64_MAX = 2**63 - 1  # the log's JSON (orjson) and its readers carry 64-bit integers


class Unrecordable(ApiError):
    """A job whose records could not be written. Its own values (and the leader's default
    timeouts) make it fail, not the fleet's state: the same job is refused every time."""

    code = methods.BAD_REQUEST


def refuse_unrecordable(
    now_ms: int, vote_timeout_s: float, run_timeout_s: float, options: Mapping[str, Any]
) -> None:
    """Refuse (``Unrecordable``, a ``bad_request``) a job whose records could not be
    written: its start command, and the snapshot derived from it (timeouts and deadlines
    in 64-bit milliseconds).

    Called before anything is written: a job that fails to encode later, in the snapshot
    written after every change, would stop the server, and again when its start command
    is read back after a restart.
    """
    try:
        derived = [now_ms]
        for seconds in (vote_timeout_s, run_timeout_s):
            ms = round(seconds * 1000)  # inf: OverflowError; nan: ValueError
            derived += [ms, now_ms + ms]
        if any(abs(n) > INT64_MAX for n in derived):
            raise OverflowError(f"{max(derived)} ms exceeds 64 bits")
        orjson.dumps({"derived": derived, "options": options})
    except UNENCODABLE as exc:
        raise Unrecordable(f"the job cannot be recorded: {exc}") from None


def snapshot_records(
    job: Job, version: int, chunks: Iterable[int] | None = None, *, as_repr: bool = False
) -> list[tuple[str, bytes]]:
    """A job's snapshot records: its header, and the node chunks named (default: all);
    ``as_repr``: what cannot be encoded in them written as its ``repr`` (``recordable``)."""
    key = f"job:{job.job_id}"
    header = {**job.header(), "version": version}
    out = [(key, orjson.dumps(recordable(header) if as_repr else header))]
    for index in sorted(range(job.chunks) if chunks is None else set(chunks)):
        value = orjson.dumps(recordable(job.chunk(index))) if as_repr else job.chunk_bytes(index)
        out.append((f"{key}{CHUNK_KEY}{index}", value))
    return out


def recordable(value: Any) -> Any:
    """``value`` with what orjson cannot encode (an integer beyond 64 bits, a lone
    surrogate, an object of no JSON type) replaced by its ``repr``, and keys made strings:
    the record of a job whose values a bug made unencodable, written rather than lost."""
    if isinstance(value, Mapping):
        return {recordable(str(k)): recordable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [recordable(v) for v in value]
    try:
        orjson.dumps(value)
    except UNENCODABLE:
        return repr(value)
    return value


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
        elif isinstance(change, NodeChanged):
            dirty = out.setdefault(job.job_id, set())
            if dirty is not None:
                dirty.add(job.chunk_of(change.node))
        elif isinstance(change, JobChanged | OutputReceived):
            out.setdefault(job.job_id, set())
    return out


def command_record(job_id: str, request: Mapping[str, Any]) -> tuple[str, bytes]:
    return f"job:{job_id}", orjson.dumps(request)
