"""A job's node table as the log holds it: each target's row, and the rows in chunks. Pure.

A job's ``assignments`` snapshot is a header (the job's own fields, ``Job.header``, plus
the number and size of its chunks) and the node table in chunks of ``chunk_nodes`` nodes,
each its own compacted key. A change rewrites the header and only the chunks it touched,
so a reply to a 50,000-node job costs O(chunk), not O(targets), and no record outgrows the
log's value limit. This module is the rows and the chunks: ``NodeRecord`` (one target's
row), its JSON form both ways, and a chunk encoded from the job's data, given explicitly.
``Job`` (``job.py``) owns the node table, which nodes make up each chunk, and the cache of
encoded rows, from which its state machine drops a node's row whenever the node changes.
Pure: the bytes are written by the daemon (``records.py`` builds the records,
``recovery.py`` puts them back together).

Killed at any line: nothing here is durable; the row cache is rebuilt from the node table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pushjobs.states import NodeState

# Nodes per snapshot chunk. A change rewrites its whole chunk, and the replies to a big
# job land on every chunk between two flushes, so the bytes written per reply grow with
# this. One phase of a 40,000-node job flushed 100 replies at a time wrote 1.35 GB with
# chunks of 500, 116 MB with 25 (bench/snapshots.py).
CHUNK_NODES = 25
LEGACY_CHUNK_NODES = 500  # snapshots written before headers said their chunk size


@dataclass(slots=True)
class NodeRecord:
    """One target's row in its job."""

    state: NodeState = NodeState.NEW
    exit_status: int | None = None
    reason: str = ""
    changed_ms: int = 0
    voted_ms: int | None = None  # commit ack/nack: dispatch-to-ack latency
    finished_ms: int | None = None
    # When the node was told to run: a batch job's nodes, and a node that came late to a
    # job that ran already (``offlinewait.py``); else the job's ``run_started_ms``.
    turn_ms: int | None = None
    left_running: tuple[str, ...] = ()  # processes of the job its agent could not kill


def node_json(r: NodeRecord) -> dict[str, Any]:
    row: dict[str, Any] = {
        "state": r.state.value,
        "exit_status": r.exit_status,
        "reason": r.reason,
        "changed_ms": r.changed_ms,
        "voted_ms": r.voted_ms,
        "finished_ms": r.finished_ms,
    }
    if r.turn_ms is not None:  # batch jobs and late nodes only: other rows stay as they were
        row["turn_ms"] = r.turn_ms
    if r.left_running:  # only when an agent reported some: other rows stay as they were
        row["left_running"] = list(r.left_running)
    return row


def node_from_json(n: Mapping[str, Any]) -> NodeRecord:
    """A row from ``node_json``; KeyError/ValueError on a damaged one."""
    return NodeRecord(
        state=NodeState(n["state"]),
        exit_status=n["exit_status"],
        reason=n["reason"],
        changed_ms=n["changed_ms"],
        voted_ms=n["voted_ms"],
        finished_ms=n["finished_ms"],
        turn_ms=n.get("turn_ms"),
        left_running=tuple(str(x) for x in n.get("left_running", ())),
    )


def chunk_json(
    job_id: str, index: int, names: Iterable[str], nodes: Mapping[str, NodeRecord]
) -> dict[str, Any]:
    """Chunk ``index`` of job ``job_id``: the rows of ``names``, the nodes it holds."""
    return {
        "job_id": job_id,
        "chunk": index,
        "nodes": {name: node_json(nodes[name]) for name in names},
    }


def chunk_bytes(
    job_id: str,
    index: int,
    names: Iterable[str],
    nodes: Mapping[str, NodeRecord],
    rows: dict[str, bytes],
    *,
    keep: bool,
) -> bytes:
    """``orjson.dumps(chunk_json(...))``, built from the encoded rows in ``rows``; a row
    not there is encoded, and kept there if ``keep`` (a finished job keeps none)."""
    parts = []
    for name in names:
        row = rows.get(name)
        if row is None:
            row = orjson.dumps(name) + b":" + orjson.dumps(node_json(nodes[name]))
            if keep:
                rows[name] = row
        parts.append(row)
    head = b'{"job_id":' + orjson.dumps(job_id) + b',"chunk":%d,"nodes":{' % index
    return head + b",".join(parts) + b"}}"
