"""The installed console scripts answer --help and --version without a traceback."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from pushjobs import __version__
from pushjobs.cli.app import app
from pushjobs.cli.exitcodes import for_error
from pushjobs.errors import MissingKeyFile


def pushjobs(*args: str, env_home: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("pushjobs", path=os.path.dirname(sys.executable))
    argv = [exe] if exe else [sys.executable, "-m", "pushjobs.cli.app"]
    env = {**os.environ, "PUSHJOBS_HOME": str(env_home)}
    return subprocess.run(
        [*argv, *args], check=False, capture_output=True, text=True, timeout=60, env=env
    )


def test_version(tmp_path):
    result = pushjobs("--version", env_home=tmp_path)
    assert result.returncode == 0
    assert result.stdout.strip() == f"pushjobs {__version__}"


@pytest.mark.parametrize("group", ["key", "log", "simulate", "archive", "report"])
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


def test_report_without_an_archive_says_what_to_do(tmp_path):
    result = pushjobs("report", "--input", str(tmp_path / "nothing"), env_home=tmp_path)
    assert result.returncode == 8
    assert "run 'pushjobs archive' first, or try --demo" in result.stderr


def test_report_bad_window_is_a_usage_error(tmp_path):
    (tmp_path / "archive").mkdir()
    out = tmp_path / "report"
    result = pushjobs(
        "report",
        "--input",
        str(tmp_path / "archive"),
        "--out",
        str(out),
        "--since",
        "last tuesday",
        env_home=tmp_path,
    )
    assert result.returncode == 2
    assert "neither an ISO date/time" in result.stderr
    assert "starting Spark" not in result.stderr and not out.exists()  # refused up front


def test_archive_of_a_missing_log_is_a_clear_error(tmp_path):
    result = pushjobs("archive", "--log", str(tmp_path / "no.db"), env_home=tmp_path)
    assert result.returncode != 0
    assert "no.db" in result.stderr and "Traceback" not in result.stderr


def test_simulate_rejects_impossible_rates(tmp_path):
    (tmp_path / "server.pub").write_text("x")
    result = pushjobs(
        "simulate", "run", "--api", "tcp://127.0.0.1:1", "--server-key", "server.pub",
        "-n", "1", "--fail-rate", "0.8", "--crash-rate", "0.5", env_home=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "fail_rate + crash_rate must not exceed 1" in result.stderr


def test_simulate_refuses_a_missing_server_key_with_the_clis_exit_code(tmp_path):
    result = pushjobs(
        "simulate", "run", "--api", "tcp://127.0.0.1:1", "--server-key",
        str(tmp_path / "missing.pub"), "-n", "1", env_home=tmp_path,
    )  # fmt: skip
    # A missing file named on the command line: a missing input (8), as the table says.
    assert result.returncode == int(for_error(MissingKeyFile("missing")))
    assert "missing.pub" in result.stderr and "Traceback" not in result.stderr


def test_simulate_refuses_an_api_that_names_no_endpoint(tmp_path):
    (tmp_path / "server.pub").write_text("x")
    result = pushjobs(
        "simulate", "run", "--api", " , ", "--server-key", "server.pub", "-n", "1",
        env_home=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    assert "give at least one endpoint" in result.stderr and "Traceback" not in result.stderr


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        found.append((*path, name))
        if hasattr(command, "commands"):  # a group (click's, which typer may vendor)
            found += _commands(command, (*path, name))
    return found


def test_every_bracketed_config_table_in_a_help_text_is_shown():
    # Rich markup takes ``[log]`` for a style and drops it from ``--help`` unless escaped
    # (``\\[log]``): audit verify's ``--prefix`` said "the server's  when" that way.
    root: Any = typer.main.get_command(app)
    for path in _commands(root):
        command = root
        for name in path:
            command = command.commands[name]
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        # Each ``[table]`` with the words around it, as the help should read.
        pattern = r"\S+ \\?\[[a-z_]+\] \S+"
        wanted = {
            " ".join(m.replace("\\[", "[").split()) for t in texts for m in re.findall(pattern, t)
        }
        if not wanted:
            continue
        shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"}).stdout
        flat = " ".join(shown.replace("│", " ").split())
        for words in wanted:
            assert words in flat, f"pushjobs {' '.join(path)} --help drops {words!r}"
