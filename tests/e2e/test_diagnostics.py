"""Mistakes an operator makes, told apart from a server that is down, through the real CLI
and daemons on 127.0.0.1: a wrong server key (CLI and agent), an agent whose whitelist is
broken or missing, an agent with no configuration at all."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from keys import files
from keys.identity import generate
from pushjobs.cli.exitcodes import Exit
from pushjobs.testbed.sandbox import free_port
from tests.e2e.conftest import Fleet, make_fleet
from tests.support import wait_until

REFUSED = "the server refused the CurveZMQ handshake"


@pytest.fixture(scope="module")
def one_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = make_fleet(tmp_path_factory.mktemp("diagnostics"), nodes=["node-1"])
    try:
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def other_server_key(root: Path) -> Path:
    """The public key of some other server: what a copy from the wrong host holds."""
    other = generate("server", "server")
    files.save(other, root / "other", force=True)
    return root / "other" / "server.pub"


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # An agent that (wrongly) starts never exits: the timeout ends the test.
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=30, env=env, check=False
    )


def test_the_cli_says_the_server_refused_its_key_at_once(one_node: Fleet, tmp_path: Path) -> None:
    sandbox = one_node.sandbox
    wrong = other_server_key(tmp_path)
    good = str(sandbox.keys_dir / "server.pub")
    config = tmp_path / "client.toml"
    config.write_text(sandbox.client_config_path.read_text().replace(good, str(wrong)))
    started = time.monotonic()
    result = run("-m", "pushjobs.cli.app", "node", "list", "--config", str(config))
    took_s = time.monotonic() - started
    assert result.returncode == Exit.CONFIG, result.stderr
    assert f"{REFUSED}: is client.server_key the server's key ({wrong})?" in result.stderr
    assert "is pushjobs-server running" not in result.stderr
    assert took_s < 5.0  # the client's timeout is 10 s: it did not wait for it


def test_a_server_that_is_down_is_still_no_answer(tmp_path: Path, one_node: Fleet) -> None:
    sandbox = one_node.sandbox
    config = tmp_path / "client.toml"
    dead = f"tcp://127.0.0.1:{free_port()}"
    text = sandbox.client_config_path.read_text().replace(sandbox.api, dead)
    config.write_text(text.replace("timeout_s = 10.0", "timeout_s = 1.0"))
    result = run("-m", "pushjobs.cli.app", "node", "list", "--config", str(config))
    assert result.returncode == Exit.UNREACHABLE, result.stderr
    assert "no answer" in result.stderr and REFUSED not in result.stderr


def test_an_agent_with_the_wrong_server_key_says_so_once(one_node: Fleet, tmp_path: Path) -> None:
    sandbox = one_node.sandbox
    wrong = other_server_key(tmp_path)
    path = sandbox.write_agent_config("node-1", server_key=str(wrong))
    try:
        sandbox.start_agent("node-1", process="wrong-key", args=["--log-level", "debug"])
        log = sandbox.root / "logs" / "wrong-key.log"
        expected = f"{REFUSED}: is agent.server_key the server's key ({wrong})?"
        wait_until(lambda: expected in log.read_text(), 20.0, 0.05)
        # It keeps asking (the server's key may yet change back) without saying it again.
        wait_until(lambda: log.read_text().count("config discovery: asking") >= 3, 20.0, 0.05)
        sandbox.kill("wrong-key")
        text = log.read_text()
        assert text.count(REFUSED) == 1
        assert "no answer" not in text
    finally:
        sandbox.write_agent_config("node-1")
        del path


def agent(config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run("-m", "agent", "--config", str(config), env=env)


BAD_REGEX = '[commands]\nuptime = "uptime"\n"restart-(?P<svc>[a-z-]+" = "systemctl restart {svc}"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BAD_REGEX, ":3: commands.restart-(?P<svc>[a-z-]+: invalid regular expression"),
        ('[commands]\nuptime = "uptime\n', ":2: invalid TOML"),
        (None, ": file not found: an agent needs its whitelist to start"),
    ],
    ids=["bad-regex", "bad-toml", "missing"],
)
def test_an_agent_without_a_usable_whitelist_refuses_to_start(
    one_node: Fleet, tmp_path: Path, text: str | None, expected: str
) -> None:
    whitelist = tmp_path / "whitelist.toml"
    if text is not None:
        whitelist.write_text(text)
    sandbox = one_node.sandbox
    config = sandbox.write_agent_config("node-1", whitelist=str(whitelist))
    try:
        result = agent(config)
    finally:
        sandbox.write_agent_config("node-1")
    assert result.returncode == Exit.CONFIG, result.stderr
    assert f"pushjobs-agent: error: {whitelist}{expected}" in result.stderr
    assert "ready" not in result.stdout and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_agent_with_no_configuration_says_so(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHJOBS_")}
    env["PUSHJOBS_CONFIG_DIR"] = str(tmp_path)
    env["PUSHJOBS_HOME"] = str(tmp_path / "home")
    result = run("-m", "agent", env=env)
    assert result.returncode == Exit.CONFIG, result.stderr
    assert "no agent configuration" in result.stderr
    assert str(tmp_path / "agent.toml") in result.stderr
    assert ".key" not in result.stderr and "Traceback" not in result.stderr


def test_an_agent_without_its_key_file_says_how_to_make_it(one_node: Fleet, tmp_path: Path) -> None:
    sandbox = one_node.sandbox
    config = sandbox.write_agent_config("node-1", key_file=str(tmp_path / "keys" / "node-1.key"))
    try:
        result = agent(config)
    finally:
        sandbox.write_agent_config("node-1")
    assert result.returncode == Exit.FAILED, result.stderr
    assert f"make it with: pushjobs key gen node-1 --dir {tmp_path / 'keys'}" in result.stderr


def test_the_server_logs_refused_handshakes_at_a_bounded_rate(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path / "fresh", nodes=["node-1"])
    try:
        sandbox = fleet.sandbox
        wrong = other_server_key(tmp_path)
        good = str(sandbox.keys_dir / "server.pub")
        config = tmp_path / "client.toml"
        config.write_text(sandbox.client_config_path.read_text().replace(good, str(wrong)))
        for _ in range(3):
            run("-m", "pushjobs.cli.app", "node", "list", "--config", str(config))
        lines = [
            line
            for line in (sandbox.root / "logs" / "server.log").read_text().splitlines()
            if "CurveZMQ" in line
        ]
    finally:
        fleet.close()
    # Three clients refused, each at least twice, within one 10 s window: one line so far.
    assert len(lines) == 1, lines
    assert f"api socket {sandbox.api}: refused a CurveZMQ handshake (1 since start)" in lines[0]
    assert "wrong server key" in lines[0]
