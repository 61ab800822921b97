"""``pushjobs systemd install``: units for both daemons, valid for systemd itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = ("pushjobs-server.service", "pushjobs-agent.service", "pushjobs-edge.service")


def pushjobs(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("pushjobs", path=os.path.dirname(sys.executable))
    argv = [exe] if exe else [sys.executable, "-m", "pushjobs.cli.app"]
    return subprocess.run([*argv, *args], check=False, capture_output=True, text=True, timeout=60)


def _install(prefix: Path) -> dict[str, str]:
    result = pushjobs("systemd", "install", "--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    unit_dir = prefix / "etc" / "systemd" / "system"
    return {name: (unit_dir / name).read_text() for name in UNITS}


def _setting(text: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(f"{key}=")]


def test_install_writes_both_units_naming_this_installs_programs(tmp_path: Path) -> None:
    units = _install(tmp_path)
    for name, text in units.items():
        program = name.removesuffix(".service")
        (start,) = _setting(text, "ExecStart")
        binary = Path(start.split()[0])
        assert binary.name == program and os.access(binary, os.X_OK), start
        assert "--config /etc/pushjobs/" in start
        assert _setting(text, "ExecReload") == ["/bin/kill -HUP $MAINPID"]
        assert _setting(text, "RestartPreventExitStatus") == ["2 9"]  # usage, config
    agent = units["pushjobs-agent.service"]
    assert _setting(agent, "KillMode") == ["control-group"]  # no job outlives its agent
    # The jobs run inside the agent's unit: nothing that would fence them in.
    for key in ("ProtectSystem", "NoNewPrivileges", "PrivateTmp", "ProtectHome"):
        assert not _setting(agent, key), key
    for fenced in ("pushjobs-server.service", "pushjobs-edge.service"):
        assert _setting(units[fenced], "ProtectSystem") == ["strict"]


def test_dry_run_prints_the_units_and_writes_nothing(tmp_path: Path) -> None:
    result = pushjobs("systemd", "install", "--prefix", str(tmp_path), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "[Service]" in result.stdout and "pushjobs-agent.service" in result.stdout
    assert not (tmp_path / "etc").exists()


def test_an_unwritable_prefix_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "etc").write_text("a file where a directory should be")
    result = pushjobs("systemd", "install", "--prefix", str(tmp_path))
    assert result.returncode == 9 and "Traceback" not in result.stderr  # the --prefix given
    assert "cannot write the unit" in result.stderr


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze not installed (Debian: apt-get install systemd)",
)
def test_systemd_analyze_verify_finds_nothing_wrong(tmp_path: Path) -> None:
    _install(tmp_path)
    paths = [str(tmp_path / "etc" / "systemd" / "system" / name) for name in UNITS]
    result = subprocess.run(
        ["systemd-analyze", "verify", *paths],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
    )
    # verify exits 0 on settings it ignores: any word about our units is a finding.
    ours = [line for line in (result.stdout + result.stderr).splitlines() if "pushjobs" in line]
    assert result.returncode == 0 and ours == [], result.stdout + result.stderr


def test_install_warns_of_what_would_keep_the_server_unit_from_starting(tmp_path: Path) -> None:
    """Written all the same, but said: programs ProtectHome=yes hides, a unit user that
    does not exist, a server key its user cannot read (it used to say nothing)."""
    from pushjobs.cli.systemd_commands import problems, unit_text

    name = "pushjobs-server.service"
    hidden = Path("/root/.venv/bin")
    warned = problems(name, unit_text(name, hidden), hidden, tmp_path)
    assert any("hidden from the service by its ProtectHome=yes" in w for w in warned), warned
    # The agent's unit has no ProtectHome: a venv under /root serves it.
    agent = "pushjobs-agent.service"
    assert problems(agent, unit_text(agent, hidden), hidden, tmp_path) == []

    opt = Path("/opt/pushjobs/bin")
    text = unit_text(name, opt).replace("User=pushjobs", "User=no-such-user-here")
    assert problems(name, text, opt, tmp_path) == [
        f"{name}: its user 'no-such-user-here' does not exist: useradd --system no-such-user-here"
    ]
    # A server key owned by another user, 0600: named, with the chown that fixes it.
    key = tmp_path / "etc" / "pushjobs" / "keys" / "server.key"
    key.parent.mkdir(parents=True)
    key.write_text("secret")
    key.chmod(0o600)
    owner = key.stat().st_uid
    text = unit_text(name, opt).replace("User=pushjobs", "User=nobody")
    if owner == 65534:
        pytest.skip("this test runs as nobody, the unit's stand-in user")
    (warning,) = problems(name, text, opt, tmp_path)
    assert f"'nobody' cannot read the server key {key}" in warning
    assert warning.endswith(f"chown nobody: {key}")
    key.chmod(0o644)
    assert problems(name, text, opt, tmp_path) == []
