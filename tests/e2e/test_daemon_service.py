"""The daemons as system services: --version, log options, SIGHUP, SIGTERM, default config.

Each test runs real ``pushjobs-server`` and ``pushjobs-agent`` processes on loopback.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pushjobs import __version__, paths
from pushjobs.api.client import ApiClient
from pushjobs.testbed.childproc import await_ready, spawn, stop_all
from pushjobs.testbed.sandbox import Sandbox
from tests.support import wait_until

ISO_WITH_OFFSET = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$")


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path / "box", nodes=["node-1"]).prepare()
    try:
        yield box
    finally:
        box.stop()


def _client(sandbox: Sandbox) -> ApiClient:
    keys = sandbox.keys_dir
    return ApiClient.from_files(sandbox.api, keys / "server.pub", keys / "admin.key", timeout_s=10)


def _serving(sandbox: Sandbox) -> bool:
    with _client(sandbox) as client:
        return bool(client.call("server.info")["server_id"] == "server")


@pytest.mark.parametrize("program", ["server", "agent"])
def test_version(program: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", program, "--version"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    name = "pushjobs-server" if program == "server" else "pushjobs-agent"
    assert result.stdout.strip() == f"{name} {__version__}"


def test_server_sighup_reopens_a_rotated_log_file_and_keeps_serving(sandbox: Sandbox) -> None:
    logfile = sandbox.root / "logs" / "server-file.log"
    server = sandbox.start_server(args=["--log-file", str(logfile)])
    wait_until(lambda: "started" in logfile.read_text())
    logfile.rename(logfile.with_suffix(".log.1"))  # what logrotate does
    os.kill(server.pid, signal.SIGHUP)
    wait_until(lambda: logfile.exists() and "reopened" in logfile.read_text())
    assert server.alive() and _serving(sandbox)
    assert "started" in logfile.with_suffix(".log.1").read_text()
    assert "started" not in logfile.read_text()


def test_agent_sighup_reopens_its_log_file_and_reloads_the_whitelist(sandbox: Sandbox) -> None:
    sandbox.start_server()
    logfile = sandbox.root / "logs" / "agent-file.log"
    agent = sandbox.start_agent("node-1", args=["--log-file", str(logfile)])
    wait_until(lambda: "whitelist loaded" in logfile.read_text())
    logfile.rename(logfile.with_suffix(".log.1"))
    sandbox.write_whitelist({"only-this": "true"})
    os.kill(agent.pid, signal.SIGHUP)
    wait_until(lambda: logfile.exists() and "whitelist loaded: only-this" in logfile.read_text())
    assert "reopened" in logfile.read_text() and agent.alive()


def test_json_log_lines_carry_an_iso_time_with_offset(sandbox: Sandbox) -> None:
    logfile = sandbox.root / "logs" / "server.jsonl"
    sandbox.start_server(args=["--log-file", str(logfile), "--log-format", "json"])
    wait_until(lambda: "started" in logfile.read_text())
    entries = [json.loads(line) for line in logfile.read_text().splitlines()]
    assert entries, "no log line"
    for entry in entries:
        assert set(entry) >= {"ts", "level", "logger", "msg"}
        assert ISO_WITH_OFFSET.match(entry["ts"]), entry["ts"]
    assert any(e["logger"] == "pushjobs.server" and "started" in e["msg"] for e in entries)


def test_text_log_lines_carry_the_offset_and_log_level_filters(sandbox: Sandbox) -> None:
    sandbox.start_server(args=["--log-level", "warning"])
    sandbox.stop()
    quiet = (sandbox.root / "logs" / "server.log").read_text()
    assert "started" not in quiet and "stopped" not in quiet
    logfile = sandbox.root / "logs" / "server-text.log"
    sandbox.start_server(args=["--log-file", str(logfile)])
    wait_until(lambda: "started" in logfile.read_text())
    first = logfile.read_text().splitlines()[0]
    stamp, level, program = first.split()[:3]
    assert ISO_WITH_OFFSET.match(stamp) and level == "INFO" and program == "pushjobs-server:"


@pytest.mark.parametrize("which", ["server", "agent"])
def test_sigterm_is_a_clean_stop_with_exit_0(sandbox: Sandbox, which: str) -> None:
    sandbox.start_server()
    if which == "agent":
        sandbox.start_agent("node-1")
    name = "node-1" if which == "agent" else "server"
    proc = sandbox.procs[name]
    proc.signal(signal.SIGTERM)
    assert proc.popen.returncode == 0
    assert "stopped" in proc.log_text()


def test_the_daemons_read_their_config_from_the_config_dir_by_default(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox.start_server()  # learn the endpoints, then stop and start it the other way
    sandbox.stop()
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "server.toml").write_bytes(sandbox.server_config_path.read_bytes())
    (etc / "agent.toml").write_bytes((sandbox.root / "agents" / "node-1.toml").read_bytes())
    env = {**sandbox.env(), "PUSHJOBS_CONFIG_DIR": str(etc)}
    env.pop("PUSHJOBS_AGENT_CONFIG", None)
    procs = []
    try:
        for name, module, marker in (
            ("server", "server", "pushjobs-server"),
            ("node-1", "agent", "pushjobs-agent"),
        ):
            log_path = sandbox.root / "logs" / f"{name}-etc.log"
            proc = spawn(name, [sys.executable, "-m", module], log_path, env=env, cwd=sandbox.root)
            procs.append(proc)
            await_ready(proc, marker, 20)
            assert f"config: {etc}/" in proc.log_text()
        with _client(sandbox) as client:
            wait_until(
                lambda: client.call("node.status", {"nodes": ["node-1"]})["nodes"][0]["online"]
            )
    finally:
        stop_all(procs, 5.0)


def test_a_root_agent_keeps_its_state_under_var_lib(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.agentconfig import AgentSection

    monkeypatch.delenv("PUSHJOBS_HOME", raising=False)
    monkeypatch.setattr(paths.os, "geteuid", lambda: 0)
    assert AgentSection(name="web-01").state_path() == Path("/var/lib/pushjobs/agent/web-01")
    monkeypatch.setattr(paths.os, "geteuid", lambda: 1000)
    assert AgentSection(name="web-01").state_path() == paths.home() / "agent" / "web-01"
    monkeypatch.setenv("PUSHJOBS_HOME", "/srv/pj")
    monkeypatch.setattr(paths.os, "geteuid", lambda: 0)
    assert AgentSection(name="web-01").state_path() == Path("/srv/pj/agent/web-01")
