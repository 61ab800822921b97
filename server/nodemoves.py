"""What ``Job``'s halves share: each moves a job's nodes only through ``Job._node``. Pure."""

from __future__ import annotations

from server.effects import Effect
from server.snapshot import NodeRecord
from server.transitions import NodeEvent


class MovesNodes:
    """A base of ``Job`` that reads its node table and changes it through ``_node``, the
    one place a node's state moves (checked by ``transitions``, its effects in ``out``)."""

    __slots__ = ()

    job_id: str
    nodes: dict[str, NodeRecord]

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
        raise NotImplementedError
