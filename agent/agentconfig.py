"""The agent's configuration: one TOML file (``pushjobs-agent --config``), env overrides.

    [agent]
    name = "web-01"                           # the name in key_file
    servers = ["tcp://10.0.0.5:7700"]          # server API endpoints, tried in turn
    server_key = "/etc/pushjobs/server.pub"    # the server's public key file
    key_file = "/etc/pushjobs/keys/web-01.key" # this node's private key (mode 0600)
    whitelist = "/etc/pushjobs/whitelist.toml"
    command_bind = "tcp://0.0.0.0:7800"        # its own command socket ('*' port: any)
    command_endpoint = "tcp://10.0.0.21:7800"  # what it advertises ("" = what it bound)
    state_dir = "/var/lib/pushjobs/agent/web-01"  # the journal (default: under
                                               # $PUSHJOBS_HOME, /var/lib/pushjobs as root)
    capture_bytes = 16384                      # output kept per channel (the tail)
    tags = ["web", "eu"]
    job_containment = "ancestry"               # how a job's processes are found and killed
                                               # ("auto": a cgroup of its own where possible,
                                               # "cgroup": required; docs/security.md)
    [facts]                                    # reported for targeting (os=linux,tag=web)
    rack = "r12"
    [discovery]  attempt_timeout_s, backoff_min_s, backoff_max_s, splay_s, silence_factor
    [env]                                      # what a job may set (agent/envpolicy.py)
    allow = ["*"]                              # names or globs; a name written in full
                                               # here passes even a deny pattern
    deny = ["AWS_*"]                           # refused on top of the built-in list

Found at ``--config``, else ``$PUSHJOBS_AGENT_CONFIG``, else ``/etc/pushjobs/agent.toml``
when present (``$PUSHJOBS_CONFIG_DIR`` moves ``/etc/pushjobs``).
Overrides: ``PUSHJOBS_AGENT_AGENT__NAME=web-02`` and the like.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from agent.envpolicy import EnvPolicy, check_patterns
from pushjobs import paths


@dataclass(frozen=True, slots=True)
class AgentSection:
    name: str = ""
    servers: list[str] = field(default_factory=list)
    server_key: Path | None = None
    key_file: Path | None = None
    whitelist: Path | None = None
    command_bind: str = "tcp://127.0.0.1:*"
    command_endpoint: str = ""
    state_dir: Path | None = None
    capture_bytes: int = 16384
    tags: list[str] = field(default_factory=list)
    commit_timeout_s: float = 60.0
    """Forget a commit the server never followed with a run after this long."""
    job_containment: str = "ancestry"
    """``ancestry``: a job's processes found by ancestry, adoption and marks (agent.procscan);
    ``auto``: each job in a cgroup of its own where the agent can make one (about 2 ms more
    per job), else as ``ancestry``; ``cgroup``: refuse to start without cgroups."""

    def check(self) -> Iterable[tuple[str, str]]:
        if not self.name:
            yield "name", "is required (the node's name, as in its key file)"
        if not self.servers:
            yield "servers", "name at least one server API endpoint, like tcp://10.0.0.5:7700"
        for endpoint in self.servers:
            if "://" not in endpoint:
                yield "servers", f"{endpoint!r} is not an endpoint like tcp://10.0.0.5:7700"
        if self.server_key is None:
            yield "server_key", "is required (the server's public key file, server.pub)"
        if "://" not in self.command_bind:
            yield "command_bind", f"{self.command_bind!r} is not an endpoint"
        if not 256 <= self.capture_bytes <= 16 * 1024 * 1024:
            yield "capture_bytes", "must be between 256 and 16777216"
        if self.commit_timeout_s <= 0:
            yield "commit_timeout_s", "must be greater than 0"
        if self.job_containment not in ("auto", "cgroup", "ancestry"):
            yield "job_containment", "must be auto, cgroup or ancestry"

    def key_path(self) -> Path:
        return self.key_file if self.key_file is not None else paths.keys_dir() / f"{self.name}.key"

    def state_path(self) -> Path:
        if self.state_dir is not None:
            return self.state_dir
        return paths.state_home() / "agent" / self.name

    def whitelist_path(self) -> Path:
        return (
            self.whitelist if self.whitelist is not None else self.state_path() / "whitelist.toml"
        )


@dataclass(frozen=True, slots=True)
class DiscoverySection:
    attempt_timeout_s: float = 2.0
    """How long one config request waits for its answer."""
    backoff_min_s: float = 0.2
    backoff_max_s: float = 30.0
    splay_s: float = 1.0
    """After a server restart, wait a random 0..splay_s so nodes do not all ask at once."""
    silence_factor: float = 3.0
    """Rediscover after the server is silent this many offline windows."""

    def check(self) -> Iterable[tuple[str, str]]:
        for name in ("attempt_timeout_s", "backoff_min_s", "backoff_max_s", "silence_factor"):
            if getattr(self, name) <= 0:
                yield name, "must be greater than 0"
        if self.splay_s < 0:
            yield "splay_s", "must not be negative"
        if self.backoff_max_s < self.backoff_min_s:
            yield "backoff_max_s", "must not be less than backoff_min_s"


@dataclass(frozen=True, slots=True)
class EnvSection:
    allow: list[str] = field(default_factory=lambda: ["*"])
    """Variables a job may set: names or globs."""
    deny: list[str] = field(default_factory=list)
    """Refused on top of the built-in deny list (LD_*, PATH, *PATH, PYTHON*, ...)."""

    def check(self) -> Iterable[tuple[str, str]]:
        for name in ("allow", "deny"):
            problem = check_patterns(getattr(self, name))
            if problem is not None:
                yield name, problem

    def policy(self) -> EnvPolicy:
        return EnvPolicy(tuple(self.allow), tuple(self.deny))


CONFIG_FILE = "agent.toml"
"""Read from ``pushjobs.paths.config_dir()`` when no ``--config`` names a file."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    agent: AgentSection = field(default_factory=AgentSection)
    discovery: DiscoverySection = field(default_factory=DiscoverySection)
    env: EnvSection = field(default_factory=EnvSection)
    facts: dict[str, str] = field(default_factory=dict)
