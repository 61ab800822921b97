"""The server's configuration: one TOML file (``pushjobs-server --config``), env overrides.

    [server]
    name = "server"                       # must be the name in key_file
    key_file = "/etc/pushjobs/keys/server.key"
    registry = "/var/lib/pushjobs/registry.json"   # imported once into the log's keys topic
    key_store = "log"                       # or "file": the registry file stays the registry
    api_bind = "tcp://127.0.0.1:7700"       # ROUTER, CurveZMQ: CLI and config discovery
    heartbeat_bind = "tcp://127.0.0.1:7701" # PUB: signed server heartbeats
    reply_bind = "tcp://127.0.0.1:7702"     # PULL, CurveZMQ: node heartbeats and replies
    advertise_host = ""                     # host named to nodes (default: the bind host)
    auto_accept = false
    metrics_bind = "127.0.0.1:9464"         # Prometheus endpoint; port 0: any, "": off
    schedule_partitions = 8                 # fixed in the log by the first server
    edges = 0                               # edge processes for the nodes' traffic
    edge_port_base = 0                      # edge i: this + 2i (heartbeat), + 2i + 1 (reply)
    edge_bind = ""                          # where pushjobs-edge processes join ("": none)
    [jobs]      vote_timeout_s, run_timeout_s
    [policy]    max_targets, max_glob_matches, commands, roles, forbid_bare_star,
                approval_expiry_s: which jobs wait for an admin's approval
                (``server/core/policy.py``; none without the table)
    [halt]      checks, prometheus_url, max_running: the health signals rolling jobs may
                halt on (``job start --halt-if``; ``server/shell/healthchecks.py``)
    [liveness]  interval_s, offline_threshold, online_threshold
    [protocol]  max_header_bytes, max_body_bytes, max_skew_s
    [log]       backend, path, bootstrap_servers, topic_prefix, ...

Every key has a default, so a file is optional; ``PUSHJOBS_SERVER__API_BIND=...`` and the
like override it. Without ``--config``, ``/etc/pushjobs/server.toml`` is read when present
(``$PUSHJOBS_CONFIG_DIR`` moves ``/etc/pushjobs``). A bind with port ``*``
(``tcp://127.0.0.1:*``) takes any free port; the ready line names the one bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keys import files
from keys.identity import PrivateIdentity
from pushjobs import paths
from pushjobs.config import LivenessSettings, ProtocolSettings
from pushjobs.errors import ConfigError
from pushjobs.log.factory import LogSettings
from server.core.jobparams import MAX_SECONDS
from server.core.policy import Policy
from server.core.schedshards import DEFAULT_PARTITIONS, MAX_PARTITIONS
from server.shell.prometheus import parse_bind

KEY_STORES = ("log", "file")
CONFIG_FILE = "server.toml"
"""Read from ``pushjobs.paths.config_dir()`` when no ``--config`` names a file."""


@dataclass(frozen=True, slots=True)
class ServerSection:
    name: str = "server"
    key_file: Path | None = None
    """The server's private key; default <home>/keys/<name>.key."""
    registry: Path | None = None
    """The key registry file; default $PUSHJOBS_KEY_REGISTRY, else <home>/registry.json.
    With ``key_store = "log"`` it is imported once into the log and not read again."""
    key_store: str = "log"
    """Where the key registry lives: "log" (the ``keys`` topic, shared by every server of
    the installation) or "file" (``registry``, for tools that edit the file while the
    server runs)."""
    api_bind: str = "tcp://127.0.0.1:7700"
    heartbeat_bind: str = "tcp://127.0.0.1:7701"
    reply_bind: str = "tcp://127.0.0.1:7702"
    advertise_host: str = ""
    auto_accept: bool = False
    max_pending_keys: int = 1000
    """Unknown node keys waiting for an admin, at most; more are refused until some are
    accepted, rejected or deleted (anyone with the server's public key can ask)."""
    max_pending_per_source: int = 100
    """Pending keys one network address may add (a host rarely runs more agents)."""
    max_api_connections_per_source: int = 32
    """Open API connections one network address may hold before keys the server does not
    know are refused from it (accepted keys never are, and count). Each may park ~0.7 MB
    of requests: 32 strangers flooding from one host grew the server by ~35 MB."""
    max_api_connections: int = 40
    """Open API connections in all before keys the server does not know are refused: so
    strangers from many addresses together park under ~50 MB (at most ~1.2 MB each,
    measured). Known keys count but are never refused, so a busy moment (a fleet
    rediscovering after a failover) only makes new keys wait and retry; raise it where
    many unknown nodes enrol at once."""
    config_lifetime_s: float = 3600.0
    """How long a node's config (and its session key) lasts before it asks again."""
    leader_session_s: float = 5.0
    """A leader that stops renewing its claim loses it after this long."""
    registry_check_s: float = 1.0
    """How often the registry is checked for revoked keys."""
    compact_every_s: float = 3600.0
    """Apply compaction and retention to the log this often (0: never; see ``log compact``)."""
    audit_checkpoint_s: float = 60.0
    """Sign a checkpoint of the audit trail this often (0: never; see ``audit verify``)."""
    max_open_files: int = 1_048_576
    """Raise the soft open-file limit towards this (capped by the hard limit)."""
    metrics_bind: str = "127.0.0.1:9464"
    """The Prometheus endpoint, host:port (port 0: any free port; "" turns it off)."""
    schedule_partitions: int = DEFAULT_PARTITIONS
    """Partitions of the schedules (each owned by one server at a time). The first server
    of an installation writes it to the log, and every server uses the log's (a server
    set otherwise says so): a schedule's id hashes to its partition, for good."""

    edges: int = 0
    """Edge processes that read the nodes' heartbeats and replies and send their commands,
    each for a share of the fleet (0: this process does it all, as fits a fleet of up to
    about 10,000 nodes; see docs/architecture.md). Edges bind on the host of
    ``reply_bind``, on ports of their own."""

    edge_port_base: int = 0
    """Edge i binds its heartbeat socket on this port + 2i and its reply socket on the next
    (ports to open to the nodes, as for ``reply_bind``); 0: any free ports."""

    edge_bind: str = ""
    """Where edges of their own (``pushjobs-edge``, on this host or others) join this
    server while it leads, e.g. ``tcp://0.0.0.0:7710`` (CurveZMQ; only the server's own
    key is admitted); named to them on the log's control topic. "": only the edges this
    server starts. On SQLite a loopback address only: the log is a file on this host."""

    def check(self) -> Iterable[tuple[str, str]]:
        if self.edges < 0:
            yield "edges", "must not be negative (0: no edges)"
        if self.edge_port_base and not 1024 <= self.edge_port_base <= 65535 - 2 * self.edges:
            yield "edge_port_base", f"must leave room for {2 * self.edges} ports below 65536"
        if self.edge_bind and "://" not in self.edge_bind:
            yield "edge_bind", f"expected an endpoint like tcp://0.0.0.0:7710: {self.edge_bind!r}"
        for name in ("api_bind", "heartbeat_bind", "reply_bind"):
            value = getattr(self, name)
            if "://" not in value:
                yield name, f"expected an endpoint like tcp://127.0.0.1:7700, got {value!r}"
        if self.config_lifetime_s <= 0:
            yield "config_lifetime_s", "must be greater than 0"
        if self.leader_session_s <= 0:
            yield "leader_session_s", "must be greater than 0"
        if self.compact_every_s < 0:
            yield "compact_every_s", "must not be negative (0 turns it off)"
        if self.audit_checkpoint_s < 0:
            yield "audit_checkpoint_s", "must not be negative (0 turns checkpoints off)"
        if self.key_store not in KEY_STORES:
            yield "key_store", f"must be one of {', '.join(KEY_STORES)}"
        if self.registry_check_s <= 0:
            yield "registry_check_s", "must be greater than 0"
        if not 1 <= self.schedule_partitions <= MAX_PARTITIONS:
            yield "schedule_partitions", f"must be from 1 to {MAX_PARTITIONS}"
        if self.max_pending_keys < 1:
            yield "max_pending_keys", "must be at least 1"
        if self.max_pending_per_source < 1:
            yield "max_pending_per_source", "must be at least 1"
        for cap in ("max_api_connections_per_source", "max_api_connections"):
            if getattr(self, cap) < 1:
                yield cap, "must be at least 1"
        try:
            parse_bind(self.metrics_bind)
        except ConfigError as exc:
            yield "metrics_bind", exc.problem

    def key_path(self) -> Path:
        return self.key_file if self.key_file is not None else paths.keys_dir() / f"{self.name}.key"

    def registry_path(self) -> Path:
        return self.registry if self.registry is not None else paths.registry_path()


MIN_RATE, MAX_RATE = 0.001, 1e9  # per minute: one a fortnight, or no bound in practice


@dataclass(frozen=True, slots=True)
class JobSettings:
    vote_timeout_s: float = 30.0
    """Default time nodes have to ack or nack a commit."""
    run_timeout_s: float = 3600.0
    """Default run timeout when a job names none."""
    max_nodes: int = 100_000
    keep_finished: int = 10_000
    """Finished jobs kept in memory for job list/status (all stay in the log)."""
    keep_finished_nodes: int = 500_000
    """And at most this many node rows across them (~330 bytes each): oldest go first."""
    keep_finished_option_bytes: int = 64_000_000
    """And at most this many bytes of their options (env, secret_env, cwd: up to ~64 KB a
    job, a few hundred bytes usually) across them: oldest go first."""
    keep_finished_output_bytes: int = 100_000_000
    """And at most this many characters of output captured from their nodes (``--capture``:
    up to the agents' capture limit per node and channel) across them: oldest go first."""
    max_active_jobs_per_caller: int = 1000
    """Jobs one user key may have not finished yet (new, voting or running); one more is
    refused ``busy`` until one ends. Each holds its options (up to ~64 KB) in memory. Admin
    keys and schedules' fires are not counted."""
    job_starts_per_minute_per_caller: float = 60.0
    """``job.start``, ``schedule.add``, ``.pause`` and ``.resume`` requests one user key may
    make a minute (from 0.001 to 1e9), after a burst of ``job_start_burst_per_caller``; one
    more is refused ``busy`` with the seconds to wait. A job writes its options to the log
    several times (its start request, its snapshot at each change). Admin keys are not
    limited."""
    job_start_burst_per_caller: int = 300
    """How many of those requests one user key may make at once (a script starting a job
    on each of a few hundred nodes in turn) before the rate above applies."""
    schedule_fires_per_minute_per_caller: float = 60.0
    """How often one user key's recurring schedules may fire, all together, over an hour:
    when it adds one, the most each can fire in any hour is summed (an every-second
    schedule, even one limited to one hour of the day, counts 3,600: 60 a minute); past it
    the add is refused ``busy``. Its schedules start jobs without asking, so this
    bounds them as the rate above bounds ``job.start``. Admin keys are not limited."""

    def check(self) -> Iterable[tuple[str, str]]:
        for timeout in ("vote_timeout_s", "run_timeout_s"):
            # As for a job's own: beyond a year it is a typing error, and every job that
            # names none could not be recorded (its deadline outgrows 64-bit milliseconds).
            if not 0 < getattr(self, timeout) <= MAX_SECONDS:  # NaN too
                yield timeout, "must be greater than 0 and at most a year (31536000)"
        if self.max_nodes < 1:
            yield "max_nodes", "must be at least 1"
        if self.keep_finished < 1:
            yield "keep_finished", "must be at least 1"
        for bound in (
            "keep_finished_nodes",
            "keep_finished_option_bytes",
            "keep_finished_output_bytes",
            "max_active_jobs_per_caller",
            "job_start_burst_per_caller",
        ):
            if getattr(self, bound) < 1:
                yield bound, "must be at least 1"
        for rate in ("job_starts_per_minute_per_caller", "schedule_fires_per_minute_per_caller"):
            # inf or a denormal would divide by zero or overflow in the bucket (NaN fails too).
            if not MIN_RATE <= getattr(self, rate) <= MAX_RATE:
                yield rate, f"must be a number from {MIN_RATE:g} to {MAX_RATE:g}"


@dataclass(frozen=True, slots=True)
class HaltSettings:
    checks: tuple[str, ...] = ()
    """The check commands a rolling job may name (``job start --halt-if CMD``), each
    exactly as written here: the leader runs one with ``/bin/sh -c`` on its host, as the
    server's user, and refuses any other (none listed: ``--halt-if`` is refused)."""
    prometheus_url: str = ""
    """The Prometheus whose alerts ``--halt-if-alert NAME`` reads (e.g.
    ``http://127.0.0.1:9090``); "": ``--halt-if-alert`` is refused."""
    max_running: int = 16
    """Checks running at once at most (each job runs one at a time); more wait."""

    def check(self) -> Iterable[tuple[str, str]]:
        for command in self.checks:
            if not command.strip() or "\0" in command:
                yield "checks", f"{command!r} is not a command"
        url = self.prometheus_url
        if url and not (url.startswith(("http://", "https://")) and len(url) > 8):
            yield "prometheus_url", f"expected an http:// or https:// URL, got {url!r}"
        if self.max_running < 1:
            yield "max_running", "must be at least 1"

    def refusal(self, halt: Mapping[str, Any] | None) -> str | None:
        """Why this server will not watch the health signal a job names; None: it will."""
        if halt is None:
            return None
        check, alert = halt.get("check"), halt.get("alert")
        if check is not None and check not in self.checks:
            listed = (
                "; it lists none"
                if not self.checks
                else (": it runs only those its [halt] checks lists, as written there")
            )
            return f"this server does not run the check {check!r}{listed}"
        if alert is not None and not self.prometheus_url:
            return "this server has no [halt] prometheus_url to read alerts from"
        return None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    server: ServerSection = field(default_factory=ServerSection)
    jobs: JobSettings = field(default_factory=JobSettings)
    liveness: LivenessSettings = field(default_factory=LivenessSettings)
    protocol: ProtocolSettings = field(default_factory=ProtocolSettings)
    log: LogSettings = field(default_factory=LogSettings)
    policy: Policy = field(default_factory=Policy)
    halt: HaltSettings = field(default_factory=HaltSettings)


def load_identity(section: ServerSection) -> PrivateIdentity:
    """The server's own key: it must be a server key, and the one of ``section.name``."""
    identity = files.load_private(section.key_path())
    if identity.public.kind != "server":
        raise ConfigError(
            f"{section.key_path()} is a {identity.public.kind} key, not a server key",
            key="server.key_file",
        )
    if identity.name != section.name:
        raise ConfigError(
            f"the key file is for {identity.name!r}, not {section.name!r}", key="server.name"
        )
    return identity
