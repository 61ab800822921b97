"""The one place a job's node changes state: ``MovesNodes._node``, a base of ``Job``. Pure.

``Job`` (``job.py``) and its halves (``awaiting.py``, ``rolling.py``) move nodes only
through ``_node``: it checks the move against ``NODE_TRANSITIONS``, updates the node's
record and the job's counts, and appends the ``NodeChanged`` to persist. A move that is not
allowed raises ``StateError`` and changes nothing.
"""

from __future__ import annotations

from collections import Counter

from pushjobs.errors import StateError
from pushjobs.states import TERMINAL_NODE_STATES, NodeState
from server.core.effects import Effect, NodeChanged
from server.core.snapshot import NodeRecord
from server.core.transitions import NODE_TRANSITIONS, NodeEvent

MAX_REASON_CHARS = 500


class MovesNodes:
    """The node table's moves; ``Job`` holds the table, its counts and its row cache."""

    __slots__ = ()

    job_id: str
    nodes: dict[str, NodeRecord]
    _counts: Counter[NodeState]
    _rows: dict[str, bytes]

    def _node(
        self,
        node: str,
        event: NodeEvent,
        now_ms: int,
        out: list[Effect],
        *,
        exit_status: int | None = None,
        reason: str = "",
    ) -> None:
        record = self.nodes.get(node)
        if record is None:
            raise StateError(f"job {self.job_id}: {node} is not a target")
        new = NODE_TRANSITIONS.get((record.state, event))
        if new is None:
            raise StateError(f"job {self.job_id}: {node} cannot {event} while {record.state}")
        out.append(NodeChanged(self.job_id, node, record.state, new, now_ms, exit_status, reason))
        self._rows.pop(node, None)
        self._counts[record.state] -= 1
        self._counts[new] += 1
        record.state = new
        record.changed_ms = now_ms
        if exit_status is not None:
            record.exit_status = exit_status
        if reason:
            # Reasons are for people; a bound keeps every snapshot chunk under the log's
            # value limit whatever a node or a command line says.
            record.reason = reason if len(reason) <= MAX_REASON_CHARS else reason[:MAX_REASON_CHARS]
        if event in (NodeEvent.ACK_COMMIT, NodeEvent.NACK_COMMIT):
            record.voted_ms = now_ms
        if new in TERMINAL_NODE_STATES:
            record.finished_ms = now_ms
