"""The server as a node sees it: its signed heartbeats, and whether it is online.

An agent and the fleet simulator both watch their server with the tracker the server uses
for nodes (``LivenessTracker``, one peer). Until the first config nothing is watched:
heartbeats are verified and dropped. ``trust(cfg, now)`` starts afresh with the config's
skew and thresholds, and counts the server online at once: the signed config answer is
proof that it is alive. While the server is offline a node sends nothing and discards
commands (its daemon asks ``online``).

Pure: frames and ``now`` in, verified heartbeats out. Killed at any line, nothing is lost
that matters: a restarted node has a new incarnation, watches nothing until discovery
answers again, and the server's next heartbeats rebuild the rest.
"""

from __future__ import annotations

import logging

from pushjobs.protocol import messages as m
from pushjobs.protocol.framing import KeyResolver
from pushjobs.protocol.inbox import Inbox
from pushjobs.protocol.liveness import LivenessTracker

SERVER = "server"


class ServerWatch:
    def __init__(self, resolve: KeyResolver, log: logging.Logger) -> None:
        self.resolve = resolve
        self.log = log
        self.inbox = Inbox(resolve, 30.0)
        self.liveness: LivenessTracker | None = None

    def trust(self, cfg: m.NodeConfig, now: float) -> None:
        """Watch afresh, as ``cfg`` says; the server is online from ``now``."""
        self.inbox = Inbox(self.resolve, cfg.max_skew_s)
        self.liveness = LivenessTracker(cfg.interval_s, cfg.offline_threshold, cfg.online_threshold)
        for _ in range(cfg.online_threshold):
            self.liveness.heartbeat(SERVER, now)

    def beats(self, batch: list[list[bytes]], now: float, now_ms: int) -> list[m.ServerHeartbeat]:
        """The heartbeats of ``batch`` that verify, each counted towards liveness."""
        out = []
        for frames in batch:
            received = self.inbox.accept(frames, now_ms)
            if received is None or not isinstance(received.message, m.ServerHeartbeat):
                continue
            if self.liveness is None:
                continue
            if self.liveness.heartbeat(SERVER, now) is not None:
                self.log.info("server online")
            out.append(received.message)
        return out

    def expire(self, now: float) -> None:
        if self.liveness is None:
            return
        for gone in self.liveness.expire(now):
            self.log.warning("server offline (no heartbeat for %.1f s)", now - gone.last_seen)

    def next_deadline(self) -> float | None:
        return None if self.liveness is None else self.liveness.next_deadline()

    @property
    def online(self) -> bool:
        return self.liveness is not None and self.liveness.is_online(SERVER)
