"""Liveness as the leader sees it when edges read the heartbeats. Pure.

With edges, the leader never sees a node's heartbeat: each edge runs the liveness
tracker for its own nodes and reports the changes (online, offline). This tracker keeps
the leader's view of them with the interface the rest of the leader already reads
(``LivenessTracker``: who is online, since when, how many), and adds what only the
leader can judge: an edge that died or was stopped. Its nodes are not offline for that:
they are *held* online until ``hold_s`` from the loss (the offline window plus the
discovery splay: the time they take to notice and land on another edge). A node that
another edge reports online meanwhile is released; one still unheard at the deadline
goes offline, and its jobs judge it as they judge any silent node.

A big edge's nodes take longer to land than the hold: they all ask the leader for a
config at once, and it answers a few hundred a second (13,000 nodes of a cut-off edge took
30 s; the hold was 11; 6,591 of another landed only after 12 s). So a hold grows by a
second per ``MOVE_RATE`` nodes held, and while they keep arriving the holds wait: none
runs out before ``MOVE_QUIET`` offline windows have passed without a held node landing,
up to ``MOVE_CAP`` holds in all from the loss. A node that is really gone is judged that
much later, never earlier.

The leader's own stall moves the holds later (``stall``), as it moves any deadline: a
leader that was not running could not have read the other edges' reports either.
"""

from __future__ import annotations

from dataclasses import replace

from pushjobs.protocol.liveness import LivenessTracker, PeerStatus, WentOffline, WentOnline

MOVE_RATE = 250.0  # nodes a second the leader is sure to place (it measured 300-600)
MOVE_QUIET = 2.0  # offline windows without a held node landing: the move is over
MOVE_CAP = 10.0  # holds, from the loss, that arrivals may stretch a hold to at most


class EdgeLiveness(LivenessTracker):
    def __init__(self, interval_s: float, offline_threshold: int, online_threshold: int) -> None:
        super().__init__(interval_s, offline_threshold, online_threshold)
        self._edge_of: dict[str, str] = {}
        self._held: dict[str, float] = {}  # node -> when it goes offline, earliest first
        self._landed = float("-inf")  # when a held node last came online again
        self._cap = float("-inf")  # no hold is stretched past this

    def online(self, peer: str, edge: str, now: float) -> WentOnline | None:
        """``edge`` reports ``peer`` online (or took it over from a lost edge)."""
        self._advance(now)
        self._edge_of[peer] = edge
        if self._held.pop(peer, None) is not None:
            self._landed = now  # the move goes on: the others are on their way
        # The base counts heartbeats towards the threshold; the edge already did.
        went = None
        for _ in range(self.online_threshold):
            went = super().heartbeat(peer, now) or went
        return went

    def heartbeat(self, peer: str, now: float) -> WentOnline | None:
        """Not how nodes reach this tracker: kept so that a stray call cannot count."""
        return None

    def edge_of(self, peer: str) -> str | None:
        return self._edge_of.get(peer)

    def edge_lost(self, edge: str, now: float, hold_s: float) -> int:
        """``edge`` is gone: its online nodes stay online until ``hold_s`` from now unless
        another edge reports them first. How many are held."""
        self._advance(now)
        moving = [
            peer
            for peer in self._online
            if self._edge_of.get(peer) == edge and peer not in self._held
        ]
        # They all ask the leader for a config at once: the more, the longer the last waits.
        hold_s += len(moving) / MOVE_RATE
        until = now + hold_s
        self._cap = max(self._cap, now + MOVE_CAP * hold_s)
        for peer in moving:
            self._held[peer] = until
        return len(moving)

    def held(self) -> int:
        return len(self._held)

    def is_held(self, peer: str) -> bool:
        """Whether ``peer`` is online only because its edge was lost (moving)."""
        return peer in self._held

    def expire(self, now: float) -> list[WentOffline]:
        """Held nodes whose hold has run out go offline; nobody else expires here."""
        self._advance(now)
        due: list[WentOffline] = []
        if now < self._moving_until():
            return due  # held nodes are still landing: none is given up yet
        while self._held:
            peer, until = next(iter(self._held.items()))
            if until > now:
                break
            del self._held[peer]
            went = self.mark_offline(peer, now)
            if went is not None:
                due.append(went)
        return due

    def mark_offline(self, peer: str, now: float) -> WentOffline | None:
        self._held.pop(peer, None)
        return super().mark_offline(peer, now)

    def forget(self, peer: str) -> None:
        self._held.pop(peer, None)
        self._edge_of.pop(peer, None)
        super().forget(peer)

    def stall(self, by_s: float) -> None:
        if by_s > 0:
            for peer in self._held:
                self._held[peer] += by_s
            self._landed += by_s
            self._cap += by_s

    def _moving_until(self) -> float:
        """Until when held nodes count as still on their way (arrivals, capped)."""
        return min(self._cap, self._landed + MOVE_QUIET * self.offline_after_s)

    def grant(self, now: float, extra_s: float = 0.0) -> None:
        self._advance(now)
        since = now + self.offline_after_s + extra_s
        for peer, until in self._held.items():
            self._held[peer] = max(until, since)

    def status(self, peer: str) -> PeerStatus | None:
        """As the base's, but an online node that is not held was heard as of the last
        call: its edge would have reported it offline otherwise (one agent per node is
        judged on this: ``enrolment``)."""
        found = super().status(peer)
        if found is None or not found.online or peer in self._held:
            return found
        return replace(found, last_seen=max(found.last_seen, self._now))

    def next_deadline(self) -> float | None:
        for until in self._held.values():
            return max(until, self._moving_until())
        return None
