"""When an agent asks for its config (again): the decisions, without the asking. Pure.

Theory of operation. Discovery is due

- at start, when there is no config yet;
- when the config's lifetime has ended, but not while a job runs on an online server
  (the job would lose the server that follows it);
- after a random splay in ``[0, splay_s]`` when a verified heartbeat shows a new server
  incarnation: the restarted server has forgotten this node's session key, and the
  splay keeps a fleet from asking all at once;
- after a long silence: ``silence_factor`` offline windows with no heartbeat;
- at once when the server says this node's session is over (``request``);
- when the server's heartbeats say it does not lead, ``NOT_LEADING_BEATS`` in a row
  (``leader_beat``): it was deposed, or stands by through a log outage.

Which server to ask. Each attempt asks the next configured server in turn, starting at
the one that gave the current config (its config lifetime ended, it restarted: it is
most likely still the leader), or at the one after it when the agent is moving away
from it (silence, not leading). A server that answers ``not_leader`` naming the leader's
API endpoint (the reply is signed by the server key, so the name is trusted even when it
is not in the configured list) is asked next, at once (``redirected``); at most
``MAX_REDIRECTS`` in a row, so two standbys naming each other only cost backoff. A server
that answered nothing is skipped once by the turn that would ask it next: a standby names
the leader it knew, which may be the very server that stopped (paused, killed) while the
standby takes over, and asking it again would cost a whole backoff more.

A failed attempt makes the next one due after tenacity's random exponential backoff
(``agent.discovery.backoff_s``). An accepted config stops the schedule until one of the
above happens again.

Everything takes ``now`` (monotonic seconds); randomness and backoff are injectable, so
a test drives it with a fake clock. Killed at any line, nothing is lost: a restarted agent
starts with no config, so discovery is due at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from agent.agentconfig import DiscoverySection
from agent.discovery import backoff_s
from pushjobs.protocol.messages import NodeConfig

Backoff = Callable[[int, float, float], float]

NOT_LEADING_BEATS = 3  # heartbeats in a row saying "not the leader" before moving away
MAX_REDIRECTS = 3  # "the leader is there" followed at once, in a row, before backing off


class DiscoverySchedule:
    def __init__(
        self,
        settings: DiscoverySection,
        now: float,
        *,
        rng: random.Random | None = None,
        backoff: Backoff = backoff_s,
    ) -> None:
        self.settings = settings
        self.rng = rng if rng is not None else random.Random()
        self.backoff = backoff
        self.due: float | None = now
        self.attempts = 0
        self.last_status = ""
        self.lifetime_end: float | None = None
        self.last_beat = now
        self.current: str | None = None  # the endpoint that gave the config in force
        self.moving_on = False  # start at the server after ``current``
        self.redirect: str | None = None  # the leader a standby named: asked next
        self.unanswered: str | None = None  # the endpoint of the last attempt, if silent
        self.redirects = 0
        self.not_leading = 0

    def is_due(self, now: float) -> bool:
        return self.due is not None and now >= self.due

    def next_server(self, servers: Sequence[str]) -> str:
        """The endpoint to ask now: the leader a standby named, else every configured
        server in turn from the current one (or the one after it when moving on)."""
        if self.redirect is not None:
            endpoint, self.redirect = self.redirect, None
            return endpoint
        start = 0
        if self.current in servers:
            start = servers.index(self.current) + (1 if self.moving_on else 0)
        endpoint = servers[(start + self.attempts) % len(servers)]
        self.attempts += 1
        if endpoint == self.unanswered and len(servers) > 1:
            # It just answered nothing (most often: the leader a standby named, stopped or
            # paused). The others first: one of them may lead by now.
            endpoint = servers[(start + self.attempts) % len(servers)]
            self.attempts += 1
        self.unanswered = None
        return endpoint

    def redirected(self, leader: str | None, status: str, now: float) -> bool:
        """A standby answered ``not_leader``, naming ``leader`` (or None): ask the leader
        next, at once, unless that happened ``MAX_REDIRECTS`` times in a row (then back
        off, as after any failure). True if the status is news."""
        if leader is None or self.redirects >= MAX_REDIRECTS:
            return self.failed(status, now)
        self.redirects += 1
        self.redirect = leader
        news = status != self.last_status
        self.last_status = status
        self.due = now
        return news

    def failed(self, status: str, now: float, *, unanswered: str | None = None) -> bool:
        """An attempt failed with ``status`` (``unanswered``: the endpoint that said
        nothing at all): back off. True if the status is news."""
        self.unanswered = unanswered
        news = status != self.last_status
        self.last_status = status
        self.redirects = 0
        s = self.settings
        self.due = now + self.backoff(self.attempts, s.backoff_min_s, s.backoff_max_s)
        return news

    def configured(self, cfg: NodeConfig, now: float, endpoint: str | None = None) -> None:
        """An accepted config (from ``endpoint``): nothing is due until its lifetime ends or
        the server changes."""
        self.due = None
        self.attempts = 0
        self.last_status = ""
        self.lifetime_end = now + cfg.lifetime_s
        self.last_beat = now
        self.current = endpoint
        self.moving_on = False
        self.redirect = None
        self.redirects = 0
        self.not_leading = 0

    def leader_beat(self, leader: bool, now: float) -> bool:
        """A verified heartbeat's ``leader`` flag; True when the server has not led for
        ``NOT_LEADING_BEATS`` heartbeats in a row: discovery is due, at the next server."""
        if leader:
            self.not_leading = 0
            return False
        self.not_leading += 1
        if self.not_leading < NOT_LEADING_BEATS or self.due is not None:
            return False
        self.due = now
        self.moving_on = True
        return True

    def server_beat(self, incarnation: str, cfg: NodeConfig, now: float) -> bool:
        """A verified heartbeat; True if it shows a restarted server (rediscovery planned)."""
        self.last_beat = now
        if incarnation == cfg.server_incarnation or self.due is not None:
            return False
        self.due = now + self.rng.uniform(0, self.settings.splay_s)
        return True

    def request(self, now: float) -> bool:
        """Discovery due now; False if an attempt was already due (its backoff stands)."""
        if self.due is not None:
            return False
        self.due = now
        return True

    def review(self, cfg: NodeConfig, now: float, *, busy: bool, server_online: bool) -> str:
        """Make discovery due for a long silence or an ended lifetime; say why ("" if not)."""
        if self.due is not None:
            return ""
        window = cfg.interval_s * cfg.offline_threshold
        if now - self.last_beat > self.settings.silence_factor * window:
            reason = "server silent"
            self.moving_on = True
        elif (
            self.lifetime_end is not None
            and now >= self.lifetime_end
            and (not busy or not server_online)
        ):
            reason = "config expired"
        else:
            return ""
        self.due = now
        return reason
