"""The node side's two links to a server, opened from its config and reopened on change.

An agent and the fleet simulator hold the same pair: a SUB to the server's heartbeats and
a PUSH (a CurveZMQ client) for heartbeats and replies. A new config moves a link only if
its endpoint changed, so a rediscovery does not drop what is queued. Killed at any line,
the sockets close with the process; a restarted node opens them from its next config.
"""

from __future__ import annotations

import zmq

from pushjobs.protocol.messages import NodeConfig
from pushjobs.transport.sockets import CurveKeys, Transport


class ServerLink:
    def __init__(self, transport: Transport, curve: CurveKeys, server_curve: str, hwm: int):
        self.transport = transport
        self.curve = curve
        self.server_curve = server_curve
        self.hwm = hwm
        self.sub: zmq.Socket[bytes] | None = None
        self.push: zmq.Socket[bytes] | None = None

    def follow(self, old: NodeConfig | None, cfg: NodeConfig) -> None:
        if old is None or old.heartbeat_endpoint != cfg.heartbeat_endpoint:
            if self.sub is not None:
                self.transport.close_socket(self.sub)
            # The server admits only accepted node keys to its heartbeats, as to replies.
            self.sub = self.transport.socket(
                "sub",
                connect=cfg.heartbeat_endpoint,
                hwm=100,
                curve_client=self.curve,
                server_public=self.server_curve,
            )
        if old is None or old.reply_endpoint != cfg.reply_endpoint:
            if self.push is not None:
                self.transport.close_socket(self.push)
            self.push = self.transport.socket(
                "push",
                connect=cfg.reply_endpoint,
                hwm=self.hwm,
                curve_client=self.curve,
                server_public=self.server_curve,
            )
