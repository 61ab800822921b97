"""A whole pushjobs installation in one directory, on loopback: keys, registry, configs,
and the server and agents as real processes. ``pushjobs quickstart``, the end-to-end
tests and the benchmarks all stand on it, so what they exercise is what users run.

Layout under ``root``::

    keys/        server, admin user and node key files
    registry.json
    log.db       the server's ordered log
    server.toml  client.toml  whitelist.toml
    agents/NAME.toml   state/NAME/   logs/NAME.log (stderr of each process)

Every process is started with its own stdout pipe (for its one ``ready`` line) and its
stderr in ``logs/``; ``stop()`` ends each by PID (SIGTERM, then SIGKILL) and waits.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from keys import files
from keys.identity import PrivateIdentity, generate
from keys.registry import KeyRegistry
from keys.states import KeyState
from pushjobs.childproc import Proc, SandboxError, await_ready, spawn, stop_all
from pushjobs.simkeys import SimKeys
from pushjobs.tomlwrite import toml_text

__all__ = ["DEFAULT_WHITELIST", "Proc", "Sandbox", "SandboxError", "free_port", "toml_text"]

DEFAULT_WHITELIST = {
    "hello": "sh -c 'echo hello from $PUSHJOBS_NODE, job $PUSHJOBS_JOB_ID'",
    "uptime": "uptime",
    "true": "true",
    "false": "false",
    "sleep-(?P<seconds>[0-9]+)": "sleep {seconds}",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
        self.api = f"tcp://127.0.0.1:{free_port()}"
        self.heartbeat = f"tcp://127.0.0.1:{free_port()}"
        self.reply = f"tcp://127.0.0.1:{free_port()}"
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
                "api_bind": self.api,
                "heartbeat_bind": self.heartbeat,
                "reply_bind": self.reply,
                "auto_accept": self.auto_accept,
                "leader_session_s": 1.5,
                "registry_check_s": 0.2,
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

    def start_server(self, *, timeout_s: float = 20.0) -> Proc:
        argv = [sys.executable, "-m", "server.main", "--config", str(self.server_config_path)]
        return self._start("server", argv, "pushjobs-server", timeout_s)

    def start_agent(
        self, name: str, *, timeout_s: float = 20.0, process: str | None = None
    ) -> Proc:
        """Node ``name``'s agent; ``process`` names a second one with the same key and config
        (a duplicate, as an operator might start by mistake)."""
        return self._start(process or name, self._agent_argv(name), "pushjobs-agent", timeout_s)

    def start_agents(self, names: Iterable[str] | None = None, *, timeout_s: float = 20.0) -> None:
        names = list(self.nodes if names is None else names)
        started = [(n, self._spawn(n, self._agent_argv(n))) for n in names]
        for name, proc in started:
            await_ready(proc, "pushjobs-agent", timeout_s)
            self.procs[name] = proc

    def start_simulator(
        self,
        name: str,
        nodes: int,
        *,
        first: int = 0,
        args: Sequence[str] = (),
        enroll: bool = True,
        timeout_s: float = 60.0,
    ) -> Proc:
        """A ``pushjobs simulate run`` process playing ``nodes`` nodes (enrolled first).

        Its stdin is a pipe: ``Proc.send_line`` controls it, ``Proc.read_line`` reads its
        answers.
        """
        if enroll:
            KeyRegistry(self.registry_path).add_many(
                SimKeys().publics(first, nodes), state=KeyState.ACCEPTED
            )
        argv = [
            sys.executable,
            "-m",
            "pushjobs.cli.main",
            "simulate",
            "run",
            "--api",
            self.api,
            "--server-key",
            str(self.keys_dir / "server.pub"),
            "--nodes",
            str(nodes),
            "--first",
            str(first),
            *args,
        ]
        proc = self._spawn(name, argv, stdin=True)
        self.procs[name] = proc
        await_ready(proc, "pushjobs-simulate", timeout_s)
        return proc

    def _agent_argv(self, name: str) -> list[str]:
        config = str(self.root / "agents" / f"{name}.toml")
        return [sys.executable, "-m", "agent.main", "--config", config]

    def _start(self, name: str, argv: list[str], marker: str, timeout_s: float) -> Proc:
        proc = self._spawn(name, argv)
        self.procs[name] = proc
        await_ready(proc, marker, timeout_s)
        return proc

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
