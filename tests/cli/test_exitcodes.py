"""One table of exit codes: the code, every command's help and docs/operating.md say the same.

Also the conventions of the ``pushjobs`` command a Salt or knife user expects: ``-h`` on
every command, shell completion, help without a Python type on every flag.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from pushjobs import errors
from pushjobs.cli.app import app
from pushjobs.cli.exitcodes import CODES, Exit, for_error, markdown_table

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operating.md"
runner = CliRunner()


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def pushjobs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("pushjobs", path=os.path.dirname(sys.executable))
    argv = [exe] if exe else [sys.executable, "-m", "pushjobs.cli.app"]
    return subprocess.run(
        [*argv, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
    )


def test_the_codes_are_0_to_12_each_named_and_explained() -> None:
    assert [int(code) for code in CODES] == list(range(13))
    assert list(CODES) == list(Exit)
    assert all(text and "\n" not in text for text in CODES.values())


def test_the_docs_table_is_the_code_table() -> None:
    text = PAGE.read_text()
    section = text.split("## Exit codes", 1)
    assert len(section) == 2, "docs/operating.md has no '## Exit codes' section"
    body = section[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| (.+?) \|$", body, re.MULTILINE)
    assert [(int(c), n, m) for c, n, m in rows] == [
        (int(code), code.name.lower(), meaning) for code, meaning in CODES.items()
    ], f"docs/operating.md's exit-code table should read:\n{markdown_table()}"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "pushjobs")
def test_every_command_answers_dash_h_with_every_exit_code(path: tuple[str, ...]) -> None:
    result = runner.invoke(app, [*path, "-h"], terminal_width=120)
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
    for code in CODES:
        assert re.search(rf"^\W*{int(code)}\s+{code.name.lower()}\s", result.output, re.M), (
            f"{' '.join(path)} -h does not list exit code {int(code)}"
        )
    # A type in angle brackets on every parameter is noise: a flag takes no value.
    assert not re.search(r"<(bool|str|int|float|path|list\[\w+\])>", result.output)


def test_the_real_command_takes_dash_h() -> None:
    result = pushjobs("job", "start", "-h")
    assert result.returncode == 0, result.stderr
    assert "--quorum" in result.stdout and " 10 " in result.stdout


def test_shell_completion_is_offered_and_completes_commands() -> None:
    assert "--install-completion" in pushjobs("--help").stdout
    result = pushjobs(
        env={
            "_PUSHJOBS_COMPLETE": "complete_bash",
            "COMP_WORDS": "pushjobs job st",
            "COMP_CWORD": "2",
        }
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["start", "status"]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.ConfigError("bad"), Exit.CONFIG),
        (errors.KeyFileError("not a key file"), Exit.ERROR),
        (errors.MissingKeyFile("no such key file"), Exit.NOT_FOUND),
        (errors.NoLogFile("no log file here"), Exit.NOT_FOUND),
        (errors.BackendUnavailable("disk full"), Exit.ERROR),
        (errors.UnknownIdentity("no key named x"), Exit.NOT_FOUND),
        (errors.Unreachable("silence"), Exit.UNREACHABLE),
        (errors.TransportError("cannot set up the dealer socket: Invalid argument"), Exit.CONFIG),
        (errors.NotFound("no job"), Exit.NOT_FOUND),
        (errors.ApiError("no node matches 'web-*'", code="not_found"), Exit.NOT_FOUND),
        (errors.ApiError("bad query term", code="bad_request"), Exit.USAGE),
        (errors.ApiError("standing by", code="not_leader"), Exit.UNREACHABLE),
        (errors.ApiError("already ended", code="conflict"), Exit.ERROR),
        (errors.LogCorrupt("torn"), Exit.ERROR),
    ],
)
def test_each_error_has_its_code(error: errors.PushJobsError, code: Exit) -> None:
    assert for_error(error) == code


def test_a_bad_server_endpoint_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "server.pub").write_text("x")
    config = tmp_path / "client.toml"
    config.write_text(
        f'[client]\nserver = "tcp://127.0.0.1:1"\nserver_key = "{tmp_path}/server.pub"\n'
        f'user_key = "{tmp_path}/alice.key"\n'
    )
    result = pushjobs("key", "gen", "alice", "--kind", "user", env={"PUSHJOBS_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    (tmp_path / "alice.key").write_bytes((tmp_path / "keys" / "alice.key").read_bytes())
    (tmp_path / "alice.key").chmod(0o600)
    (tmp_path / "server.pub").write_bytes((tmp_path / "keys" / "alice.pub").read_bytes())
    result = pushjobs("job", "list", "--config", str(config), "--server", "not-an-endpoint")
    assert result.returncode == Exit.CONFIG, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("program", ["server", "agent"])
def test_the_daemons_exit_with_the_clis_configuration_code(program: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", program, "--config", str(tmp_path / "missing.toml")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == Exit.CONFIG
    assert "missing.toml: file not found" in result.stderr
    bad = subprocess.run(
        [sys.executable, "-m", program, "--no-such-option"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == Exit.USAGE


def test_an_env_too_large_for_a_request_is_exit_2_naming_the_sizes(tmp_path: Path) -> None:
    """Refused before it is sent, whatever its size past the limit (only a narrow band of
    sizes reached the server's own exit-2 check; larger ones were exit 10, raw)."""
    for name, kind in (("alice", "user"), ("server", "server")):
        made = pushjobs("key", "gen", name, "--kind", kind, env={"PUSHJOBS_HOME": str(tmp_path)})
        assert made.returncode == 0, made.stderr
    keys = tmp_path / "keys"
    config = tmp_path / "client.toml"
    config.write_text(
        f'[client]\nserver = "tcp://127.0.0.1:1"\nserver_key = "{keys}/server.pub"\n'
        f'user_key = "{keys}/alice.key"\n'
    )
    for size in (70_000, 1_000_000):
        result = CliRunner().invoke(
            app,
            ["job", "start", "hello", "*", "--env", f"A={'x' * size}"],
            env={"PUSHJOBS_CONFIG": str(config)},
        )
        assert result.exit_code == Exit.USAGE, result.stderr
        assert "job.start not sent: its body of" in result.stderr
        assert "exceeds 65536 bytes" in result.stderr
