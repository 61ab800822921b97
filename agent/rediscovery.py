"""When an agent asks for its config (again): the decisions, without the asking. Pure.

Theory of operation. Discovery is due

- at start, when there is no config yet;
- when the config's lifetime has ended, but not while a job runs on an online server
  (the job would lose the server that follows it);
- after a random splay in ``[0, splay_s]`` when a verified heartbeat shows a new server
  incarnation: the restarted server has forgotten this node's session key, and the
  splay keeps a fleet from asking all at once;
- after a long silence: ``silence_factor`` offline windows with no heartbeat;
- at once when the server says this node's session is over (``request``).

A failed attempt makes the next one due after tenacity's random exponential backoff
(``agent.discovery.backoff_s``), and each attempt asks the next configured server in
turn. An accepted config stops the schedule until one of the above happens again.

Everything takes ``now`` (monotonic seconds); randomness and backoff are injectable, so
a test drives it with a fake clock. Killed at any line, nothing is lost: a restarted agent
starts with no config, so discovery is due at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from agent.config import DiscoverySection
from agent.discovery import backoff_s
from pushjobs.protocol.messages import NodeConfig

Backoff = Callable[[int, float, float], float]


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

    def is_due(self, now: float) -> bool:
        return self.due is not None and now >= self.due

    def next_server(self, servers: Sequence[str]) -> str:
        """The endpoint to ask now: every configured server in turn."""
        endpoint = servers[self.attempts % len(servers)]
        self.attempts += 1
        return endpoint

    def failed(self, status: str, now: float) -> bool:
        """An attempt failed with ``status``: back off. True if the status is news."""
        news = status != self.last_status
        self.last_status = status
        s = self.settings
        self.due = now + self.backoff(self.attempts, s.backoff_min_s, s.backoff_max_s)
        return news

    def configured(self, cfg: NodeConfig, now: float) -> None:
        """An accepted config: nothing is due until its lifetime ends or the server changes."""
        self.due = None
        self.attempts = 0
        self.last_status = ""
        self.lifetime_end = now + cfg.lifetime_s
        self.last_beat = now

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
