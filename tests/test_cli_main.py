"""The installed console scripts answer --help and --version without a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pushjobs import __version__


def pushjobs(*args: str, env_home: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("pushjobs", path=os.path.dirname(sys.executable))
    argv = [exe] if exe else [sys.executable, "-m", "pushjobs.cli.main"]
    env = {**os.environ, "PUSHJOBS_HOME": str(env_home)}
    return subprocess.run(
        [*argv, *args], check=False, capture_output=True, text=True, timeout=60, env=env
    )


def test_version(tmp_path):
    result = pushjobs("--version", env_home=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"pushjobs {__version__}"


@pytest.mark.parametrize("group", ["key", "log"])
def test_help_lists_the_commands(tmp_path, group):
    result = pushjobs(group, "--help", env_home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Usage" in result.stdout


def test_unknown_command_is_a_usage_error(tmp_path):
    result = pushjobs("frobnicate", env_home=tmp_path)
    assert result.returncode == 2
    assert "No such command" in result.stderr


def test_key_gen_through_the_console_script(tmp_path):
    result = pushjobs("key", "gen", "n1", "--json", env_home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "keys" / "n1.key").exists()
