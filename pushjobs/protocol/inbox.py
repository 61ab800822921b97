"""Inbox: the receiving half of the protocol, frames in, a trusted message or a counted drop.

``accept`` runs the security checks in order (framing, sizes, signature, body,
sender's key ownership, replay window and clock skew) and never raises for bad input: a
message that fails is dropped and counted under a reason, so a daemon keeps serving and
can report what it refused. Pure: the caller passes ``now_ms`` (wall time, as on the wire).
``accept_beat`` runs the same checks and hands a node heartbeat back as its fields, not a
message object: the edge's hot path (``codec.decode_beat``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pushjobs.errors import (
    ClockSkewError,
    FrameError,
    MalformedMessage,
    OversizedFrame,
    ProtocolError,
    ReplayError,
    SignatureError,
    UnknownKey,
)
from pushjobs.protocol.codec import Beat
from pushjobs.protocol.framing import DEFAULT_LIMITS, KeyResolver, Limits, open_beat, open_frames
from pushjobs.protocol.messages import Message
from pushjobs.protocol.replay import ReplayWindow

# Most specific first: the first matching class names the drop reason.
_REASONS: tuple[tuple[type[ProtocolError], str], ...] = (
    (OversizedFrame, "oversized"),
    (FrameError, "frame"),
    (UnknownKey, "unknown_key"),
    (SignatureError, "signature"),
    (MalformedMessage, "malformed"),
    (ClockSkewError, "clock_skew"),
    (ReplayError, "replay"),
)


@dataclass(frozen=True, slots=True)
class Received:
    message: Message
    restarted: bool  # the sender's incarnation changed: it restarted


class Inbox:
    __slots__ = ("drops", "last_error", "limits", "replay", "resolve")

    def __init__(
        self, resolve: KeyResolver, max_skew_s: float, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.resolve = resolve
        self.limits = limits
        self.replay = ReplayWindow(max_skew_s)
        self.drops: Counter[str] = Counter()
        self.last_error: str = ""

    def accept(self, frames: Sequence[bytes], now_ms: int) -> Received | None:
        """The message if it passes every check; None (counted in ``drops``) if not."""
        try:
            message = open_frames(frames, self.resolve, self.limits)
            accepted = self.replay.check(
                message.sender, message.incarnation, message.sequence, message.timestamp, now_ms
            )
        except ProtocolError as exc:
            self.drops[reason_for(exc)] += 1
            self.last_error = str(exc)
            return None
        return Received(message, accepted.restarted)

    def accept_beat(
        self, frames: Sequence[bytes], now_ms: int
    ) -> tuple[Beat, bool] | Received | None:
        """``accept``, with a node heartbeat as ``(its fields, restarted)`` (``open_beat``):
        the same checks, for an edge that reads heartbeats by the ten thousand."""
        try:
            opened = open_beat(frames, self.resolve, self.limits)
            if isinstance(opened, tuple):
                accepted = self.replay.check(opened[0], opened[1], opened[2], opened[3], now_ms)
                return opened, accepted.restarted
            accepted = self.replay.check(
                opened.sender, opened.incarnation, opened.sequence, opened.timestamp, now_ms
            )
        except ProtocolError as exc:
            self.drops[reason_for(exc)] += 1
            self.last_error = str(exc)
            return None
        return Received(opened, accepted.restarted)

    @property
    def dropped(self) -> int:
        return sum(self.drops.values())


def reason_for(exc: ProtocolError) -> str:
    for cls, reason in _REASONS:
        if isinstance(exc, cls):
            return reason
    return "protocol"
