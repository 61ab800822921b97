"""End-to-end fixtures: a real server and real agents as processes on 127.0.0.1.

Each fleet lives in its own temporary directory (``pushjobs.testbed.sandbox``); every process it
starts is stopped by PID when the test ends, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pushjobs.api.client import ApiClient
from pushjobs.errors import ApiError, Unreachable
from pushjobs.states import TERMINAL_JOB_STATES
from pushjobs.testbed.sandbox import DEFAULT_WHITELIST, Sandbox
from pushjobs.testbed.tomlwrite import toml_text
from tests.e2e.doc_recipes import FLEET_WAITS, Walkthrough
from tests.support import wait_until

TERMINAL = {state.value for state in TERMINAL_JOB_STATES}

# Commands the tests need on every node; each names what it proves.
WHITELIST = {
    **DEFAULT_WHITELIST,
    # exits 3 with a message on node-2 only
    "fail-on-2": 'sh -c \'if [ "$PUSHJOBS_NODE" = node-2 ]; then echo boom >&2; exit 3; fi; '
    "echo fine'",
    # records its pid, then sleeps: lets a test check the process is gone
    "sleeper": "sh -c 'echo $$ > \"$PUSHJOBS_HOME/pid-$PUSHJOBS_NODE\"; exec sleep 60'",
    # counts its runs per node, slowly enough to kill the server in between
    "count-slowly": "sh -c 'sleep 1.5; echo x >> \"$PUSHJOBS_HOME/count-$PUSHJOBS_NODE\"'",
    # appends its job id to a file per node: which jobs ran where, and how often
    "stamp": "sh -c 'echo $PUSHJOBS_JOB_ID >> \"$PUSHJOBS_HOME/stamps-$PUSHJOBS_NODE\"'",
}


class Fleet:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self._client: ApiClient | None = None

    @property
    def root(self) -> Path:
        return self.sandbox.root

    @property
    def client(self) -> ApiClient:
        if self._client is None:
            self._client = ApiClient.from_files(
                self.sandbox.api,
                self.root / "keys" / "server.pub",
                self.root / "keys" / f"{self.sandbox.user}.key",
                timeout_s=10.0,
            )
        return self._client

    def reconnect(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.call(method, params or {})

    def call_served(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """The result, or None while no server leads or a restarted one is not serving yet
        (for a ``wait_until`` across a server's death)."""
        try:
            return self.call(method, params)
        except Unreachable:
            self.reconnect()
            return None
        except ApiError as exc:
            if exc.code == "not_leader":
                return None
            raise

    def node(self, name: str) -> dict[str, Any]:
        rows: list[dict[str, Any]] = self.call("node.status", {"nodes": [name]})["nodes"]
        return rows[0]

    def wait_online(self, names: list[str] | None = None, timeout_s: float = 20.0) -> None:
        wanted = names or self.sandbox.nodes
        wait_until(lambda: all(self.node(n)["online"] for n in wanted), timeout_s, 0.05)

    def wait_offline(self, name: str, timeout_s: float = 20.0) -> None:
        wait_until(lambda: not self.node(name)["online"], timeout_s, 0.05)

    def start(self, command: str, nodes: list[str] | None = None, **params: Any) -> dict[str, Any]:
        request = {"command": command, "nodes": nodes or self.sandbox.nodes, **params}
        job: dict[str, Any] = self.call("job.start", request)["job"]
        return job

    def status(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self.call("job.status", {"job_id": job_id})["job"]
        return job

    def status_or_none(self, job_id: str) -> dict[str, Any] | None:
        """The job, or None while a restarted server is not serving yet."""
        found = self.call_served("job.status", {"job_id": job_id})
        return None if found is None else dict(found["job"])

    def wait_job(self, job_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            job = self.status_or_none(job_id)
            return job if job is not None and job["state"] in TERMINAL else None

        return wait_until(finished, timeout_s, 0.05)

    def wait_node_state(self, job_id: str, node: str, state: str, timeout_s: float = 20.0) -> None:
        wait_until(lambda: self.status(job_id)["nodes"][node]["state"] == state, timeout_s, 0.05)

    def close(self) -> None:
        self.reconnect()
        self.sandbox.stop()


def run_cli(config: Path, *args: str) -> tuple[int, str, str]:
    """Run ``pushjobs ARGS`` as its own process, as a user would, with the client config
    ``config``: its exit code, stdout and stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "pushjobs.cli.app", *args],
        env={**os.environ, "PUSHJOBS_CONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walkthrough]:
    """A docs walkthrough (``doc_recipes``) in a directory of its own, its programs
    stopped at the end."""
    walk = Walkthrough(tmp_path, FLEET_WAITS)
    try:
        yield walk
    finally:
        walk.close()


def impatient_client_config(fleet: Fleet, path: Path, timeout_s: float = 1.0) -> Path:
    """A copy of ``fleet``'s client config at ``path`` whose calls give up after
    ``timeout_s``: for tests of what the CLI says once no server answers, not of when."""
    config = tomllib.loads(fleet.sandbox.client_config_path.read_text())
    config["client"]["timeout_s"] = timeout_s
    path.write_text(toml_text(config))
    return path


def make_fleet(tmp_path: Path, **options: Any) -> Fleet:
    options.setdefault("whitelist", WHITELIST)
    sandbox = Sandbox(tmp_path / "fleet", **options).prepare()
    fleet = Fleet(sandbox)
    try:
        sandbox.start_server()
        sandbox.start_agents()
    except BaseException:
        sandbox.stop()
        raise
    return fleet


@contextlib.contextmanager
def online_fleet(tmp_path: Path, **options: Any) -> Iterator[Fleet]:
    """``make_fleet(tmp_path, **options)`` with every node online; stopped on the way out."""
    fleet = make_fleet(tmp_path, **options)
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    """A server and three accepted agents, all online."""
    with online_fleet(tmp_path) as fleet:
        yield fleet


@pytest.fixture(scope="module")
def shared_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One fleet for the tests that leave it as they found it."""
    with online_fleet(tmp_path_factory.mktemp("shared")) as fleet:
        yield fleet
