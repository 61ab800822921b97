"""The sandbox never races for ports: no number is chosen and then bound later by a daemon.

Quickstart, the end-to-end tests and the benchmarks all start their server through it,
and parallel workers share the machine's ports: a port picked by binding port 0, closing,
and handing the number on can be taken by any other socket before the daemon binds it.
"""

from __future__ import annotations

import signal
import socket
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs.api.client import ApiClient
from pushjobs.errors import SandboxError
from pushjobs.testbed.sandbox import Sandbox
from tests.support import wait_until


def _listen(port: int) -> socket.socket:
    """Another program's socket holding ``port`` on 127.0.0.1."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def _port(endpoint: str) -> str:
    return endpoint.rpartition(":")[2]


def _client(sandbox: Sandbox) -> ApiClient:
    keys = sandbox.keys_dir
    return ApiClient.from_files(sandbox.api, keys / "server.pub", keys / "admin.key", timeout_s=10)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path / "box", nodes=["node-1"]).prepare()
    try:
        yield box
    finally:
        box.stop()


def test_no_port_named_before_the_server_starts_can_be_taken_from_it(sandbox: Sandbox) -> None:
    server = tomllib.loads(sandbox.server_config_path.read_text())["server"]
    binds = [server[k] for k in ("api_bind", "heartbeat_bind", "reply_bind")]
    # Whatever number the sandbox wrote down before the server started, take it first.
    held = [_listen(int(_port(b))) for b in binds if _port(b).isdigit()]
    try:
        sandbox.start_server()
        sandbox.start_agents()
    finally:
        for sock in held:
            sock.close()
    assert all(_port(e).isdigit() for e in (sandbox.api, sandbox.heartbeat, sandbox.reply))
    client = tomllib.loads(sandbox.client_config_path.read_text())["client"]
    assert client["server"] == sandbox.api
    agent = tomllib.loads((sandbox.root / "agents" / "node-1.toml").read_text())["agent"]
    assert agent["servers"] == [sandbox.api]
    with _client(sandbox) as api:
        wait_until(lambda: api.call("node.status", {"nodes": ["node-1"]})["nodes"][0]["online"])


def test_a_restarted_server_waits_out_a_port_held_for_a_moment(sandbox: Sandbox) -> None:
    sandbox.start_server()
    api = sandbox.api
    sandbox.kill("server", signal.SIGKILL)
    holder = _listen(int(_port(api)))  # e.g. an outgoing connection's ephemeral port
    log = sandbox.root / "logs" / "server.log"

    def release_once_refused() -> None:
        try:
            wait_until(lambda: "Address already in use" in log.read_text(), timeout_s=15)
        finally:
            holder.close()

    release = threading.Thread(target=release_once_refused)
    release.start()
    try:
        sandbox.start_server()
    finally:
        release.join()
    assert sandbox.api == api  # where the agents and the CLI look for it
    assert "Address already in use" in (sandbox.root / "logs" / "server.log").read_text()
    with _client(sandbox) as client:
        assert client.call("server.info")["server_id"] == "server"


def test_a_port_held_for_good_fails_the_restart_with_the_servers_words(sandbox: Sandbox) -> None:
    sandbox.start_server()
    sandbox.kill("server", signal.SIGKILL)
    holder = _listen(int(_port(sandbox.api)))
    try:
        with pytest.raises(SandboxError, match="Address already in use"):
            sandbox.start_server(timeout_s=5.0)
    finally:
        holder.close()


def test_agents_before_the_server_is_a_clear_error(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxError, match="start the server first"):
        sandbox.start_agents()


def test_an_agent_pinned_to_its_port_comes_back_on_it(sandbox: Sandbox) -> None:
    sandbox.start_server()
    sandbox.start_agents()
    endpoint = sandbox.pin_agent_port("node-1")
    assert _port(endpoint).isdigit()
    sandbox.kill("node-1", signal.SIGKILL)
    sandbox.start_agent("node-1")
    with _client(sandbox) as client:

        def back() -> bool:
            row = client.call("node.status", {"nodes": ["node-1"]})["nodes"][0]
            return bool(row["online"] and row["command_endpoint"] == endpoint)

        wait_until(back, timeout_s=20)
