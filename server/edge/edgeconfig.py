"""An edge of its own's configuration (``pushjobs-edge --config edge.toml``).

    [edge]
    name = "edge-b"                  # unique among the installation's edges
    bind_host = "0.0.0.0"            # where its nodes' heartbeat and reply sockets bind
    advertise_host = "10.0.0.12"     # the host its nodes connect to (default: bind_host)
    port_base = 7720                 # heartbeat on this port, replies on the next; 0: any
    capacity = 1.0                   # its share of the nodes (the leader's own edges: 1.0)
    metrics_bind = "127.0.0.1:9466"  # Prometheus endpoint (a server's: 9464); port 0: any, "": off
    [server]    name, key_file       # the installation's server identity (nodes pin it)
                leader_session_s     # as the servers have it: how stale a leader's record is
    [log]       backend, path, bootstrap_servers, topic_prefix, ...   # as the servers'

The ``[server]`` and ``[log]`` tables are the servers' own (``server.toml`` works as it
is, with an ``[edge]`` table added): an edge holds the server's key, as its nodes expect a
server to, and reads the log's ``control`` topic to find the leader and the settings it
shares with its edges (heartbeat interval, thresholds, message limits).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from pushjobs.errors import ConfigError
from pushjobs.log.factory import LogSettings
from server.core.rendezvous import MAX_CAPACITY, MIN_CAPACITY
from server.shell.prometheus import parse_bind
from server.shell.serverconfig import ServerSection

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
CONFIG_FILE = "edge.toml"


@dataclass(frozen=True, slots=True)
class EdgeSection:
    name: str = ""
    """This edge's name, unique among the installation's edges (not ``<server>-e<i>``,
    the names of a leader's own edges)."""
    bind_host: str = "127.0.0.1"
    """Where the nodes' heartbeat and reply sockets bind."""
    advertise_host: str = ""
    """The host named to the nodes (default: ``bind_host``; required when it binds every
    interface)."""
    port_base: int = 0
    """The heartbeat socket's port, the reply socket on the next; 0: any free ports."""
    capacity: float = 1.0
    """Its share of the nodes against the other edges' (each of the leader's own is 1.0):
    2.0 takes about twice the nodes of an edge of 1.0 (weighted rendezvous hashing)."""
    metrics_bind: str = "127.0.0.1:9466"
    """Its Prometheus endpoint, ``host:port``: beside a server's 9464 on the same host;
    port 0 any free port, ``""`` off (``server.edge.edgemetrics``)."""

    def check(self) -> Iterable[tuple[str, str]]:
        if not NAME.fullmatch(self.name):
            yield "name", "required: letters, digits, '.', '_' or '-', at most 63"
        if self.port_base and not 1024 <= self.port_base <= 65534:
            yield "port_base", "must be from 1024 to 65534 (or 0: any free ports)"
        if not MIN_CAPACITY <= self.capacity <= MAX_CAPACITY:
            yield "capacity", f"must be from {MIN_CAPACITY} to {MAX_CAPACITY:g}"
        if self.bind_host in ("0.0.0.0", "*", "::") and not self.advertise_host:
            yield "advertise_host", "required when bind_host is every interface"
        try:
            parse_bind(self.metrics_bind)
        except ConfigError as exc:
            yield "metrics_bind", exc.problem


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    edge: EdgeSection = field(default_factory=EdgeSection)
    server: ServerSection = field(default_factory=ServerSection)
    log: LogSettings = field(default_factory=LogSettings)
