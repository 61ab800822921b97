"""Liveness tracker: online/offline with thresholds, driven by ``now``.

Theory of operation. Peers send a heartbeat every ``interval_s``. Both the server (one
entry per node) and the agent (one entry: the server) run this tracker.

- An online peer goes offline once ``offline_threshold`` intervals pass with no valid
  heartbeat: at ``last_seen + offline_threshold * interval_s``.
- An offline (or never seen) peer comes back online on its ``online_threshold``-th
  consecutive valid heartbeat. Heartbeats are consecutive while each arrives within
  ``streak_gap_s`` (default 1.5 intervals) of the previous one: one missed beat (a gap of
  about two intervals) starts the count again, while ordinary jitter does not.

``heartbeat(peer, now)`` returns a ``WentOnline`` event when it crosses the threshold;
``expire(now)`` returns the ``WentOffline`` events due by ``now``. All online peers share
one threshold, so ordering them by last heartbeat orders them by deadline: a heartbeat
moves its peer to the back of an ordered dict (O(1)) and ``expire`` pops from the front
until the first peer not yet due (O(expired)), so 50,000 peers cost no timers and no scan.
``next_deadline()`` is the poll timeout a daemon should use. ``now`` is monotonic seconds
and must never go backwards.

The owner's own stall is never a peer's silence. ``stall(by_s)`` moves every online
peer's deadline ``by_s`` later (a daemon that was not running for that long, SIGSTOP, a
swap storm, could not have read their heartbeats); ``grant(now, extra_s)`` gives every
online peer a full window from ``now`` and ``extra_s`` more (a server that just took over,
or woke from a stall its peers noticed: they must see it again before they speak). A
later heartbeat never moves a deadline earlier, so the order by deadline, and with it the
O(expired) ``expire``, holds.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from pushjobs.errors import StateError


@dataclass(frozen=True, slots=True)
class WentOnline:
    peer: str
    at: float


@dataclass(frozen=True, slots=True)
class WentOffline:
    peer: str
    at: float
    last_seen: float


@dataclass(frozen=True, slots=True)
class PeerStatus:
    peer: str
    online: bool
    last_seen: float
    streak: int  # consecutive heartbeats counted towards coming online
    transitions: int  # online/offline changes so far: flapping shows here


class _Peer:
    __slots__ = ("last_seen", "online", "streak", "transitions")

    def __init__(self, now: float) -> None:
        self.last_seen = now
        self.online = False
        self.streak = 0
        self.transitions = 0


class LivenessTracker:
    def __init__(
        self,
        interval_s: float,
        offline_threshold: int,
        online_threshold: int,
        streak_gap_s: float | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be greater than 0")
        if offline_threshold < 1 or online_threshold < 1:
            raise ValueError("thresholds must be at least 1")
        self.interval_s = interval_s
        self.offline_threshold = offline_threshold
        self.online_threshold = online_threshold
        self.offline_after_s = interval_s * offline_threshold
        self.streak_gap_s = 1.5 * interval_s if streak_gap_s is None else streak_gap_s
        self._peers: dict[str, _Peer] = {}
        self._online: OrderedDict[str, _Peer] = OrderedDict()
        self._now = float("-inf")

    def _advance(self, now: float) -> None:
        if now < self._now:
            raise StateError(f"time went backwards: {now} < {self._now}")
        self._now = now

    def heartbeat(self, peer: str, now: float) -> WentOnline | None:
        """Record a valid heartbeat from ``peer``; return WentOnline if it just came online."""
        if now < self._now:  # ``_advance`` inlined: every heartbeat of a fleet comes here
            raise StateError(f"time went backwards: {now} < {self._now}")
        self._now = now
        state = self._peers.get(peer)
        if state is None:
            state = self._peers[peer] = _Peer(now)
        elif state.online:
            # A deadline moved by ``stall``/``grant`` stays; ``max`` would cost a call.
            if now > state.last_seen:  # noqa: PLR1730
                state.last_seen = now
            self._online.move_to_end(peer)
            return None
        elif now - state.last_seen > self.streak_gap_s:
            state.streak = 0
        state.last_seen = now
        state.streak += 1
        if state.streak < self.online_threshold:
            return None
        state.online = True
        state.streak = 0
        state.transitions += 1
        self._online[peer] = state
        return WentOnline(peer, now)

    def expire(self, now: float) -> list[WentOffline]:
        """Mark offline every online peer whose deadline has passed by ``now``."""
        self._advance(now)
        due: list[WentOffline] = []
        limit = now - self.offline_after_s
        online = self._online
        while online:
            peer, state = next(iter(online.items()))
            if state.last_seen > limit:
                break
            del online[peer]
            state.online = False
            state.streak = 0
            state.transitions += 1
            due.append(WentOffline(peer, state.last_seen + self.offline_after_s, state.last_seen))
        return due

    def stall(self, by_s: float) -> None:
        """Move every online peer's deadline ``by_s`` later: the owner was not running."""
        if by_s <= 0:
            return
        for state in self._online.values():
            state.last_seen += by_s

    def grant(self, now: float, extra_s: float = 0.0) -> None:
        """Give every online peer a full offline window from ``now`` (``extra_s`` more)."""
        self._advance(now)
        since = now + extra_s
        for state in self._online.values():
            state.last_seen = max(state.last_seen, since)

    def mark_offline(self, peer: str, now: float) -> WentOffline | None:
        """Force ``peer`` offline now (it restarted, or its key was revoked)."""
        self._advance(now)
        state = self._peers.get(peer)
        if state is None or not state.online:
            return None
        del self._online[peer]
        state.online = False
        state.streak = 0
        state.transitions += 1
        return WentOffline(peer, now, state.last_seen)

    def next_deadline(self) -> float | None:
        """When the earliest online peer goes offline if nothing arrives; None if none online."""
        for state in self._online.values():
            return state.last_seen + self.offline_after_s
        return None

    def is_online(self, peer: str) -> bool:
        state = self._peers.get(peer)
        return state is not None and state.online

    def status(self, peer: str) -> PeerStatus | None:
        state = self._peers.get(peer)
        if state is None:
            return None
        return PeerStatus(peer, state.online, state.last_seen, state.streak, state.transitions)

    def forget(self, peer: str) -> None:
        self._peers.pop(peer, None)
        self._online.pop(peer, None)

    def online_peers(self) -> Iterator[str]:
        return iter(self._online)

    def __len__(self) -> int:
        return len(self._peers)

    @property
    def online_count(self) -> int:
        return len(self._online)
