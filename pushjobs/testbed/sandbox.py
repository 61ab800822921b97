"""A whole pushjobs installation in one directory, on loopback: keys, registry, configs,
and the server and agents as real processes. ``pushjobs quickstart``, the end-to-end
tests and the benchmarks all stand on it, so what they exercise is what users run.

Layout under ``root``::

    keys/        server, admin user and node key files
    registry.json   the key registry, kept in this file (``key_store = "file"``): tools edit it
    log.db       the server's ordered log
    server.toml  client.toml  whitelist.toml
    agents/NAME.toml   state/NAME/   logs/NAME.log (stderr of each process)

Every process is started with its own stdout pipe (for its one ``ready`` line) and its
stderr in ``logs/``; ``stop()`` ends each by PID (SIGTERM, then SIGKILL) and waits.

Ports. No number is chosen here for a daemon to bind later (another socket could take it
in between): the server's first start binds ``tcp://127.0.0.1:*`` and its ready line
names what it bound, which is then pinned in ``server.toml`` (a restart comes back there)
and written into ``client.toml`` and the agents' configs. A start on a pinned or fixed
port retries while the port is held (``Address already in use``) until its deadline.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keys import files
from keys.identity import PrivateIdentity, generate
from keys.keystates import KeyState
from keys.registry import KeyRegistry
from pushjobs.errors import SandboxError
from pushjobs.testbed.childproc import Proc, await_ready, spawn, stop_all
from pushjobs.testbed.simkeys import SimKeys
from pushjobs.testbed.tomlwrite import toml_text

__all__ = ["DEFAULT_WHITELIST", "Proc", "Sandbox", "free_port", "toml_text"]

DEFAULT_WHITELIST = {
    "hello": "sh -c 'echo hello from $PUSHJOBS_NODE, job $PUSHJOBS_JOB_ID'",
    "uptime": "uptime",
    "true": "true",
    "false": "false",
    "sleep-(?P<seconds>[0-9]+)": "sleep {seconds}",
}


ANY_PORT = "tcp://127.0.0.1:*"  # the server's binds, and the configs' endpoint, till bound
IN_USE = "Address already in use"
RETRY_PAUSE_S = 0.1


def free_port() -> int:
    """A port nothing listens on now: to connect to, never to bind later (bind '*')."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ready_fields(line: str) -> dict[str, str]:
    """The ``key=value`` words of a ready line (``... ready api=tcp://... reply=...``)."""
    return dict(word.split("=", 1) for word in line.split() if "=" in word)


def with_port(endpoint: str, port: str) -> str:
    """``endpoint`` (``tcp://host:port`` or ``tcp://host:*``) with its port replaced."""
    host, _, _ = endpoint.rpartition(":")
    return f"{host}:{port}"


@dataclass
class Sandbox:
    root: Path
    nodes: list[str] = field(default_factory=lambda: ["node-1", "node-2", "node-3"])
    interval_s: float = 0.2
    offline_threshold: int = 3
    online_threshold: int = 2
    whitelist: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_WHITELIST))
    accept_nodes: bool = True
    auto_accept: bool = False
    server_extra: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    user: str = "admin"
    procs: dict[str, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.keys_dir = self.root / "keys"
        self.registry_path = self.root / "registry.json"
        # Real endpoints once the server has bound them (start_server); ANY_PORT till then.
        self.api = self.heartbeat = self.reply = ANY_PORT
        self.identities: dict[str, PrivateIdentity] = {}

    # --- files ---------------------------------------------------------------------------
    def prepare(self) -> Sandbox:
        """Write keys, registry and every config file."""
        for sub in ("agents", "state", "logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        registry = KeyRegistry(self.registry_path)
        server = self._identity("server", "server")
        user = self._identity(self.user, "user")
        registry.add(user.public, state=KeyState.ACCEPTED, role="admin")
        for name in self.nodes:
            node = self._identity(name, "node")
            if self.accept_nodes:
                registry.add(node.public, state=KeyState.ACCEPTED)
        del server
        self.write_whitelist(self.whitelist)
        self.server_config_path.write_text(toml_text(self._server_tables()))
        self.client_config_path.write_text(
            toml_text(
                {
                    "client": {
                        "server": self.api,
                        "server_key": str(self.keys_dir / "server.pub"),
                        "user_key": str(self.keys_dir / f"{self.user}.key"),
                        "timeout_s": 10.0,
                    }
                }
            )
        )
        for name in self.nodes:
            self.write_agent_config(name)
        return self

    def _identity(self, name: str, kind: str) -> PrivateIdentity:
        identity = generate(name, kind)
        files.save(identity, self.keys_dir, force=True)
        self.identities[name] = identity
        return identity

    def _server_tables(self) -> dict[str, Mapping[str, object]]:
        tables: dict[str, dict[str, object]] = {
            "server": {
                "name": "server",
                "key_file": str(self.keys_dir / "server.key"),
                "registry": str(self.registry_path),
                "key_store": "file",
                "api_bind": self.api,
                "heartbeat_bind": self.heartbeat,
                "reply_bind": self.reply,
                "auto_accept": self.auto_accept,
                "leader_session_s": 1.5,
                "registry_check_s": 0.2,
                "metrics_bind": "127.0.0.1:0",  # sandboxes run side by side: any port
            },
            "liveness": {
                "interval_s": self.interval_s,
                "offline_threshold": self.offline_threshold,
                "online_threshold": self.online_threshold,
            },
            "jobs": {"vote_timeout_s": 5.0},
            "log": {"backend": "sqlite", "path": str(self.root / "log.db")},
        }
        for name, extra in self.server_extra.items():
            tables.setdefault(name, {}).update(extra)
        return dict(tables)

    def write_whitelist(self, commands: Mapping[str, str]) -> None:
        self.whitelist_path.write_text(toml_text({"commands": dict(commands)}))

    def write_agent_config(self, name: str, **overrides: object) -> Path:
        agent: dict[str, object] = {
            "name": name,
            "servers": [self.api],
            "server_key": str(self.keys_dir / "server.pub"),
            "key_file": str(self.keys_dir / f"{name}.key"),
            "whitelist": str(self.whitelist_path),
            "command_bind": "tcp://127.0.0.1:*",
            "state_dir": str(self.root / "state" / name),
            "tags": ["sandbox"],
        }
        agent.update(overrides)
        path = self.root / "agents" / f"{name}.toml"
        path.write_text(
            toml_text({"agent": agent, "discovery": {"splay_s": 0.3, "backoff_max_s": 2.0}})
        )
        return path

    @property
    def server_config_path(self) -> Path:
        return self.root / "server.toml"

    @property
    def client_config_path(self) -> Path:
        return self.root / "client.toml"

    @property
    def whitelist_path(self) -> Path:
        return self.root / "whitelist.toml"

    # --- processes -------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PUSHJOBS_HOME"] = str(self.root)
        env["PUSHJOBS_CONFIG"] = str(self.client_config_path)
        env["PUSHJOBS_KEY_REGISTRY"] = str(self.registry_path)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    @property
    def bound(self) -> bool:
        """Whether the server has bound its endpoints (and they are in every config)."""
        return self.api != ANY_PORT

    def start_server(self, *, timeout_s: float = 20.0, args: Sequence[str] = ()) -> Proc:
        """Start the server (``args`` added to its command line); the first start learns
        its endpoints and pins them."""
        argv = [sys.executable, "-m", "server", "--config", str(self.server_config_path)]
        argv += args
        proc = self._start("server", argv, "pushjobs-server", timeout_s)
        if not self.bound:
            self._pin(ready_fields(proc.ready_line))
        return proc

    def _pin(self, ready: Mapping[str, str]) -> None:
        """Write the endpoints the server bound into server.toml, client.toml, agents/*.toml."""
        try:
            self.api, self.heartbeat, self.reply = (ready[k] for k in ("api", "heartbeat", "reply"))
        except KeyError as exc:
            raise SandboxError(f"the server's ready line names no {exc.args[0]} endpoint") from None
        server = _read(self.server_config_path)["server"]
        binds = {"api_bind": self.api, "heartbeat_bind": self.heartbeat, "reply_bind": self.reply}
        pinned = {k: with_port(server[k], v.rpartition(":")[2]) for k, v in binds.items()}
        _patch(self.server_config_path, "server", pinned)
        _patch(self.client_config_path, "client", {"server": self.api})
        for path in sorted((self.root / "agents").glob("*.toml")):
            if _read(path)["agent"].get("servers") == [ANY_PORT]:  # else chosen: left alone
                _patch(path, "agent", {"servers": [self.api]})

    def pin_agent_port(self, name: str) -> str:
        """Keep node ``name``'s command socket on the port its running agent bound, so a
        restart comes back there (one that finds it taken retries); that endpoint."""
        endpoint = ready_fields(self.procs[name].ready_line)["command"]
        _patch(self.root / "agents" / f"{name}.toml", "agent", {"command_bind": endpoint})
        return endpoint

    def start_agent(
        self,
        name: str,
        *,
        timeout_s: float = 20.0,
        process: str | None = None,
        args: Sequence[str] = (),
    ) -> Proc:
        """Node ``name``'s agent; ``process`` names a second one with the same key and config
        (a duplicate, as an operator might start by mistake); ``args`` go on its command line."""
        self._need_server()
        argv = [*self._agent_argv(name), *args]
        return self._start(process or name, argv, "pushjobs-agent", timeout_s)

    def start_agents(self, names: Iterable[str] | None = None, *, timeout_s: float = 20.0) -> None:
        self._need_server()
        names = list(self.nodes if names is None else names)
        deadline = time.monotonic() + timeout_s
        started = [(n, self._log_size(n), self._spawn(n, self._agent_argv(n))) for n in names]
        for name, logged, proc in started:
            self.procs[name] = proc
            self._await(
                name,
                proc,
                logged,
                self._agent_argv(name),
                marker="pushjobs-agent",
                deadline=deadline,
            )

    def _need_server(self) -> None:
        if not self.bound:
            raise SandboxError(
                "start the server first: the agents' configs name its API endpoint, "
                "which is known once it has bound"
            )

    def start_simulator(
        self,
        name: str,
        nodes: int,
        *,
        first: int = 0,
        args: Sequence[str] = (),
        enroll: bool = True,
        timeout_s: float = 60.0,
        apis: Sequence[str] = (),
    ) -> Proc:
        """A ``pushjobs simulate run`` process playing ``nodes`` nodes (enrolled first),
        against ``apis`` in that order (default: this sandbox's server).

        Its stdin is a pipe: ``Proc.send_line`` controls it, ``Proc.read_line`` reads its
        answers.
        """
        if enroll:
            KeyRegistry(self.registry_path).add_many(
                SimKeys().publics(first, nodes), state=KeyState.ACCEPTED
            )
        argv = [sys.executable, "-m", "pushjobs.cli.app", "simulate", "run"]
        argv += [f"--api={api}" for api in apis or [self.api]]
        argv += ["--server-key", str(self.keys_dir / "server.pub"), "--nodes", str(nodes)]
        argv += ["--first", str(first), *args]
        proc = self._spawn(name, argv, stdin=True)
        self.procs[name] = proc
        await_ready(proc, "pushjobs-simulate", timeout_s)
        return proc

    def start_edge(
        self, name: str, *, timeout_s: float = 30.0, prefix: Sequence[str] = (), **edge: object
    ) -> Proc:
        """A ``pushjobs-edge`` named ``name`` (``edge``: more of its ``[edge]`` table), with
        this sandbox's server identity and log; ready once it joined a leader that takes
        edges (``[server] edge_bind``). ``prefix`` runs it elsewhere (a test host's
        ``ip netns exec NAME``)."""
        tables = self._server_tables()
        server = tables["server"]
        config = {
            # Any free port for its metrics: edges and servers here share one host.
            "edge": {"name": name, "metrics_bind": "127.0.0.1:0", **edge},
            "server": {k: server[k] for k in ("name", "key_file", "leader_session_s")},
            "log": tables["log"],
        }
        path = self.root / "edges" / f"{name}.toml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(toml_text(config))
        argv = [*prefix, sys.executable, "-m", "server.edge.standalone", "--config", str(path)]
        return self._start(name, argv, f"pushjobs-edge {name} ready", timeout_s)

    def _agent_argv(self, name: str) -> list[str]:
        config = str(self.root / "agents" / f"{name}.toml")
        return [sys.executable, "-m", "agent", "--config", config]

    def _start(self, name: str, argv: list[str], marker: str, timeout_s: float) -> Proc:
        deadline = time.monotonic() + timeout_s
        logged = self._log_size(name)
        proc = self._spawn(name, argv)
        self.procs[name] = proc
        return self._await(name, proc, logged, argv, marker=marker, deadline=deadline)

    def _await(
        self, name: str, proc: Proc, logged: int, argv: list[str], *, marker: str, deadline: float
    ) -> Proc:
        """Wait for ``proc``'s ready line; while its port is held by another socket, start it
        again until ``deadline`` (the holder is usually a connection about to close).
        ``logged`` is the size of its log before it started: what follows is its own."""
        while True:
            try:
                await_ready(proc, marker, max(0.0, deadline - time.monotonic()))
                return proc
            except SandboxError as exc:
                if IN_USE not in _text_from(proc.log_path, logged):
                    raise
                if time.monotonic() + RETRY_PAUSE_S >= deadline:
                    raise SandboxError(f"{name}: its port stayed in use: {exc}") from None
            time.sleep(RETRY_PAUSE_S)  # a bounded pause before binding the same port again
            logged = self._log_size(name)
            proc = self._spawn(name, argv)
            self.procs[name] = proc

    def _log_size(self, name: str) -> int:
        path = self.root / "logs" / f"{name}.log"
        return path.stat().st_size if path.exists() else 0

    def _spawn(self, name: str, argv: list[str], *, stdin: bool = False) -> Proc:
        old = self.procs.get(name)
        if old is not None:
            if old.alive():
                raise SandboxError(f"{name} is already running (pid {old.pid})")
            if old.popen.stdout is not None:
                old.popen.stdout.close()
        log_path = self.root / "logs" / f"{name}.log"
        return spawn(name, argv, log_path, env=self.env(), cwd=self.root, stdin=stdin)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one process and wait for it to end."""
        self.procs[name].signal(sig)

    def stop(self, timeout_s: float = 5.0) -> None:
        """End every process this sandbox started: SIGTERM, then SIGKILL; wait for each."""
        stop_all(self.procs.values(), timeout_s)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def _patch(path: Path, table: str, values: Mapping[str, object]) -> None:
    """Set ``values`` in ``[table]`` of the TOML file at ``path``, keeping the rest."""
    config = _read(path)
    config.setdefault(table, {}).update(values)
    path.write_text(toml_text(config))


def _text_from(path: Path, offset: int) -> str:
    """What was appended to ``path`` past ``offset``."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
