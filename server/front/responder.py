"""API replies of one turn, queued and sent at its end: after the log has what they report.

Killed at any line: replies not yet sent are lost; their clients time out and may retry.
"""

from __future__ import annotations

from typing import Any

from pushjobs.api import methods
from pushjobs.errors import OversizedFrame
from pushjobs.protocol.messages import ApiReply, ErrorBody
from pushjobs.protocol.outbox import Outbox


class Responder:
    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.pending: list[tuple[bytes, list[bytes]]] = []

    def queue(self, identity: bytes, frames: list[bytes]) -> None:
        self.pending.append((identity, frames))

    def ok(self, identity: bytes, request_id: str, result: Any, now_ms: int) -> None:
        try:
            frames = self.outbox.frames(
                ApiReply, now_ms, request_id=request_id, ok=True, result=result
            )
        except OversizedFrame:
            error = ErrorBody(methods.BAD_REQUEST, "the result is too large; ask for less (paging)")
            frames = self.outbox.frames(
                ApiReply, now_ms, request_id=request_id, ok=False, error=error
            )
        self.queue(identity, frames)

    def error(self, identity: bytes, request_id: str, code: str, message: str, now_ms: int) -> None:
        frames = self.outbox.frames(
            ApiReply, now_ms, request_id=request_id, ok=False, error=ErrorBody(code, message)
        )
        self.queue(identity, frames)

    def not_leader(self, identity: bytes, request_id: str, leader: str | None, now_ms: int) -> None:
        """``not_leader``, naming the leader's API endpoint when it is known: the client
        follows it there."""
        where = f"the leader is at {leader}" if leader else "no leader is known yet"
        error = ErrorBody(methods.NOT_LEADER, f"this server is not the leader; {where}", leader)
        frames = self.outbox.frames(ApiReply, now_ms, request_id=request_id, ok=False, error=error)
        self.queue(identity, frames)

    def take(self) -> list[tuple[bytes, list[bytes]]]:
        pending, self.pending = self.pending, []
        return pending
