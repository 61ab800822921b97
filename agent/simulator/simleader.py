"""Which server a simulated fleet asks for configs, and when it moves. Pure.

Theory of operation. A simulator plays every node over one DEALER to one server's API,
so it follows the leader as one agent would (``agent.rediscovery``), for the whole fleet:

- a config reply ``not_leader`` naming the leader's API endpoint (signed by the server
  key, so trusted even when the endpoint is not configured) moves the fleet there at
  once; at most ``MAX_REDIRECTS`` in a row, then on to the next configured server, so two
  standbys naming each other cannot bounce it for ever;
- ``NOT_LEADING_BEATS`` server heartbeats in a row with ``leader`` false (the server was
  deposed, or stands by through a log outage) move it to the next configured server;
- so does a server that answers nothing (``review``, once a second): requests in flight
  with no verified answer for an attempt timeout, or no heartbeat for ``SILENCE_WINDOWS``
  offline windows (a dead leader).

A move (``moved``) returns the endpoint to ask; until a config is accepted there
(``accepted``), heartbeats of the old server move nothing more. Every move starts a new
replay window in the caller (one per server: servers of one installation share a name).

Killed at any line, nothing is lost: a restarted simulator starts at the first server.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.rediscovery import MAX_REDIRECTS, NOT_LEADING_BEATS

SILENCE_WINDOWS = 3.0  # offline windows with no heartbeat before a server counts as gone


class ServerChoice:
    def __init__(self, servers: Sequence[str], now: float) -> None:
        if not servers:
            raise ValueError("a simulator needs at least one server API endpoint")
        self.servers = tuple(servers)
        self.current = self.servers[0]
        self.moving = False  # moved, and no config accepted at ``current`` yet
        self.redirects = 0
        self.not_leading = 0
        self.moves = 0
        self.last_heard = now  # the server in use: a heartbeat, or an answer after a move

    def not_leader(self, leader: str | None) -> str | None:
        """A reply from ``current`` said it does not lead, naming ``leader`` (or None): the
        endpoint to move to, or None to stay (it named itself)."""
        if leader is not None and self.redirects < MAX_REDIRECTS:
            if leader == self.current:
                return None
            self.redirects += 1
            return self._move(leader)
        self.redirects = 0
        return self._move(self._next())

    def leader_beat(self, leader: bool, now: float) -> str | None:
        """A verified heartbeat of the server in use: where to move, if it stopped leading."""
        self.last_heard = now
        if leader or self.moving:
            self.not_leading = 0
            return None
        self.not_leading += 1
        if self.not_leading < NOT_LEADING_BEATS:
            return None
        return self._move(self._next())

    def review(self, now: float, window_s: float | None, *, unanswered: bool) -> str | None:
        """Where to move if ``current`` answers nothing: requests ``unanswered`` for an
        attempt timeout, or no heartbeat for ``SILENCE_WINDOWS`` offline windows of
        ``window_s`` (None: no config yet). None to stay, also when it is the only one."""
        quiet = window_s is not None and now - self.last_heard > SILENCE_WINDOWS * window_s
        if not (unanswered or quiet) or (len(self.servers) == 1 and not self.moving):
            return None
        self.last_heard = now
        return self._move(self._next())

    def accepted(self, now: float) -> None:
        """A config was accepted from ``current``: it leads; stay."""
        if self.moving:
            self.last_heard = now
        self.moving = False
        self.redirects = 0
        self.not_leading = 0

    def _next(self) -> str:
        if self.current in self.servers:
            return self.servers[(self.servers.index(self.current) + 1) % len(self.servers)]
        return self.servers[0]  # a redirect target: back to the configured list

    def _move(self, endpoint: str) -> str:
        self.current = endpoint
        self.moving = True
        self.not_leading = 0
        self.moves += 1
        return endpoint
