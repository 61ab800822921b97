"""A job's persisted form: its snapshot, and that snapshot cut into chunks for the log.

A job's ``assignments`` snapshot is a header (``snapshot(nodes=False)`` plus the number
and size of its chunks) and the node table in chunks of ``chunk_nodes`` nodes, each its
own compacted key. A change rewrites the header and only the chunks it touched, so a reply
to a 50,000-node job costs O(chunk), not O(targets), and no record outgrows the log's
value limit. ``Job`` (``job.py``) takes this as a base; its state machine drops a node's
cached row whenever the node changes. Pure: the bytes are written by the daemon
(``records.py`` builds the records, ``recovery.py`` puts them back together).

Secrets. ``options`` hold a job's ``secret_env`` sealed (``sealing.py``). The header,
the log's copy, keeps them sealed so a successor can still send the commit; the snapshot
shown to API callers (``snapshot``) names each secret with a marker instead.

Killed at any line: nothing here is durable; the cache is rebuilt from the node table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pushjobs.quorum import Quorum
from pushjobs.states import JobState, NodeState
from server.core.batch import FAILURE_STATES, Window
from server.core.sealing import redacted

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
    turn_ms: int | None = None  # batch jobs: when the node was told to run


def node_json(r: NodeRecord) -> dict[str, Any]:
    row: dict[str, Any] = {
        "state": r.state.value,
        "exit_status": r.exit_status,
        "reason": r.reason,
        "changed_ms": r.changed_ms,
        "voted_ms": r.voted_ms,
        "finished_ms": r.finished_ms,
    }
    if r.turn_ms is not None:  # only batch jobs: other rows stay as they were
        row["turn_ms"] = r.turn_ms
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
    )


class JobSnapshot:
    """The snapshot half of ``Job``: reads the job's fields, owns nothing but the row cache."""

    __slots__ = ()

    job_id: str
    command: str
    nodes: dict[str, NodeRecord]
    quorum: Quorum
    vote_timeout_ms: int
    run_timeout_ms: int
    options: dict[str, Any]
    requested_by: str
    state: JobState
    created_ms: int
    started_ms: int | None
    vote_deadline_ms: int | None
    run_started_ms: int | None
    run_deadline_ms: int | None
    finished_ms: int | None
    chunk_nodes: int
    _counts: Counter[NodeState]
    _positions: dict[str, int]
    _order: list[str]
    _rows: dict[str, bytes]
    _window: Window | None

    @property
    def finished(self) -> bool:
        raise NotImplementedError

    def summary(self) -> dict[str, int]:
        return {state.value: n for state, n in sorted(self._counts.items()) if n > 0}

    def snapshot(self, *, nodes: bool = True) -> dict[str, Any]:
        """The job as a JSON-ready dict, as API callers see it (secrets redacted).

        ``nodes=False`` leaves out the per-node table: a summary that costs O(1), for
        watching a 50,000-node job without shipping megabytes per change.
        """
        snap = self._fields()
        snap["options"] = redacted(self.options)
        if not nodes:
            return snap
        snap["nodes"] = {name: node_json(r) for name, r in self.nodes.items()}
        return snap

    def _fields(self) -> dict[str, Any]:
        """Every field of the job but its node table, ``options`` as they are kept."""
        return {
            "job_id": self.job_id,
            "command": self.command,
            "state": self.state.value,
            "quorum": str(self.quorum),
            "vote_timeout_ms": self.vote_timeout_ms,
            "run_timeout_ms": self.run_timeout_ms,
            "options": self.options,
            "requested_by": self.requested_by,
            "created_ms": self.created_ms,
            "started_ms": self.started_ms,
            "vote_deadline_ms": self.vote_deadline_ms,
            "run_started_ms": self.run_started_ms,
            "run_deadline_ms": self.run_deadline_ms,
            "finished_ms": self.finished_ms,
            "summary": self.summary(),
            "targets": len(self.nodes),
            **self._batch_fields(),
        }

    def _batch_fields(self) -> dict[str, Any]:
        """A batch job's window as the CLI shows it: its size, budget and failures so far."""
        if self._window is None:
            return {}
        spec, targets = self._window.spec, len(self.nodes)
        return {
            "batch": {
                "window": spec.window(targets),
                "wait_s": spec.wait_ms / 1000,
                "max_failures": spec.budget(targets),
                "failures": sum(self._counts[s] for s in FAILURE_STATES),
                # Lost in flight, maybe still running: their slots stay taken (batch.py).
                "held": sorted(self._window.lost),
            }
        }

    # --- the chunks ----------------------------------------------------------------------

    @property
    def chunks(self) -> int:
        return -(-len(self.nodes) // self.chunk_nodes)

    def chunk_of(self, node: str) -> int:
        if not self._positions:  # targets never change after creation: index them once
            self._positions.update((name, i) for i, name in enumerate(self.nodes))
        return self._positions[node] // self.chunk_nodes

    def header(self) -> dict[str, Any]:
        """The value of the job's ``assignments`` record: secrets stay sealed."""
        return {
            **self._fields(),
            "chunks": self.chunks,
            "chunk_nodes": self.chunk_nodes,
        }

    def chunk(self, index: int) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "chunk": index,
            "nodes": {name: node_json(self.nodes[name]) for name in self._chunk_names(index)},
        }

    def chunk_bytes(self, index: int) -> bytes:
        """``orjson.dumps(self.chunk(index))``, built from cached rows."""
        rows = self._rows
        parts = []
        for name in self._chunk_names(index):
            row = rows.get(name)
            if row is None:
                row = orjson.dumps(name) + b":" + orjson.dumps(node_json(self.nodes[name]))
                if not self.finished:
                    rows[name] = row
            parts.append(row)
        head = b'{"job_id":' + orjson.dumps(self.job_id) + b',"chunk":%d,"nodes":{' % index
        return head + b",".join(parts) + b"}}"

    def _chunk_names(self, index: int) -> list[str]:
        if not self._order:
            self._order.extend(self.nodes)
        size = self.chunk_nodes
        return self._order[index * size : (index + 1) * size]
