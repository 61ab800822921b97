"""Outbox: stamps the envelope on outgoing messages and seals them. Pure.

One outbox per sender process: it owns the incarnation (random per process start, chosen
by the caller) and the strictly increasing sequence, so no two messages from one
incarnation can share a sequence, whichever socket they leave by.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pushjobs.protocol.framing import DEFAULT_LIMITS, Limits, seal
from pushjobs.protocol.messages import Message
from pushjobs.protocol.signing import Signer

M = TypeVar("M", bound=Message)


class Outbox:
    __slots__ = ("incarnation", "limits", "sender", "sequence", "signer")

    def __init__(
        self, sender: str, incarnation: str, signer: Signer, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.sender = sender
        self.incarnation = incarnation
        self.signer = signer
        self.limits = limits
        self.sequence = 0

    def message(self, cls: type[M], now_ms: int, **fields: Any) -> M:
        """A new message of ``cls`` with the next sequence number."""
        self.sequence += 1
        return cls(
            sender=self.sender,
            incarnation=self.incarnation,
            sequence=self.sequence,
            timestamp=now_ms,
            **fields,
        )

    def frames(self, cls: type[Message], now_ms: int, **fields: Any) -> list[bytes]:
        """Build, stamp and seal a message in one step."""
        return seal(self.message(cls, now_ms, **fields), self.signer, self.limits)

    def reseal(self, signer: Signer) -> None:
        """Sign from now on with ``signer`` (a rotated session key)."""
        self.signer = signer
