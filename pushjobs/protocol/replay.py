"""Replay window: refuse a message that is not newer than what a sender already said.

Theory of operation. Each sender runs as an incarnation (a random id per process start)
and numbers its messages with a strictly increasing ``sequence``. For each sender the
window remembers the current incarnation and the last accepted sequence, plus a bounded
list of retired incarnations. A message is accepted when:

- its ``timestamp`` (wall ms) is within +/- ``max_skew_s`` of the receiver's wall clock,
  in both directions: this bounds how old a replay can be, whatever else is forgotten;
- and it is from the current incarnation with a higher sequence, or from an incarnation
  never seen before (the sender restarted: the old one is retired), never from a retired
  one.

``check`` records what it accepts, so call it only after the signature verified. A new
incarnation is reported to the caller (``Accepted.restarted``): liveness treats
it as a restart of the peer.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pushjobs.errors import ClockSkewError, ReplayError

DEFAULT_RETIRED_PER_SENDER = 8


class _Sender:
    __slots__ = ("incarnation", "retired", "sequence")

    def __init__(self, incarnation: str, sequence: int) -> None:
        self.incarnation = incarnation
        self.sequence = sequence
        self.retired: deque[str] = deque(maxlen=DEFAULT_RETIRED_PER_SENDER)


@dataclass(frozen=True, slots=True)
class Accepted:
    first: bool  # the first message ever seen from this sender
    restarted: bool  # a new incarnation replaced a known one


FIRST = Accepted(first=True, restarted=False)
RESTARTED = Accepted(first=False, restarted=True)
SAME = Accepted(first=False, restarted=False)


class ReplayWindow:
    __slots__ = ("_max_skew_ms", "_senders")

    def __init__(self, max_skew_s: float) -> None:
        if max_skew_s <= 0:
            raise ValueError("max_skew_s must be greater than 0")
        self._max_skew_ms = int(max_skew_s * 1000)
        self._senders: dict[str, _Sender] = {}

    def check(
        self, sender: str, incarnation: str, sequence: int, timestamp_ms: int, now_ms: int
    ) -> Accepted:
        """Accept and record the message, or raise ReplayError / ClockSkewError."""
        skew = timestamp_ms - now_ms
        if skew > self._max_skew_ms or -skew > self._max_skew_ms:
            direction = "ahead of" if skew > 0 else "behind"
            raise ClockSkewError(
                f"timestamp of {sender} is {abs(skew) / 1000:.3f} s {direction} this clock "
                f"(max skew {self._max_skew_ms / 1000:g} s)"
            )
        state = self._senders.get(sender)
        if state is None:
            self._senders[sender] = _Sender(incarnation, sequence)
            return FIRST
        if incarnation == state.incarnation:
            if sequence <= state.sequence:
                raise ReplayError(
                    f"sequence {sequence} of {sender} is not newer than {state.sequence}"
                )
            state.sequence = sequence
            return SAME
        if incarnation in state.retired:
            raise ReplayError(f"incarnation {incarnation[:64]!r} of {sender} is retired")
        state.retired.append(state.incarnation)
        state.incarnation = incarnation
        state.sequence = sequence
        return RESTARTED

    def current(self, sender: str) -> tuple[str, int] | None:
        """(incarnation, last sequence) accepted from ``sender``, if any."""
        state = self._senders.get(sender)
        return None if state is None else (state.incarnation, state.sequence)

    def forget(self, sender: str) -> None:
        self._senders.pop(sender, None)

    def __len__(self) -> int:
        return len(self._senders)
