"""What the CLI shows of text other people wrote, and of config values it cannot use.

A command name, a node's facts or a failure reason come from whoever started the job or
configured the agent: a control character in them is written out, so it cannot forge a
row in someone else's table. A reply of an unexpected shape is one line, exit 10. A client
timeout that is not a finite number of seconds is a config error (exit 9), and one typed
on the command line a usage error (exit 2).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import typer

from keys import files
from keys.identity import generate
from pushjobs.cli import jobview, render, userconfig
from pushjobs.cli.exitcodes import Exit
from pushjobs.cli.job_commands import batch_params, job_params, show_jobs
from pushjobs.cli.node_commands import _show as show_nodes
from pushjobs.cli.render import printable, reading_reply, table
from pushjobs.errors import ApiError, ConfigError, NotFound

# --- control characters are written out --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("true\nFORGED-ROW", "true\\nFORGED-ROW"),
        ("a\rb\tc", "a\\rb\\tc"),
        ("\x1b[2J\x07", "\\x1b[2J\\x07"),  # clear the screen, ring the bell
        ("\x00\x7f", "\\x00\\x7f"),
        ("\x9b31m", "\\x9b31m"),  # C1: CSI in one character
        ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),  # line and paragraph separators
        ("abc\u202edef", "abc\\u202edef"),  # right-to-left override
        ("x\ud800y", "x\\ud800y"),  # a lone surrogate
    ],
)
def test_control_characters_are_written_out(text: str, shown: str) -> None:
    assert printable(text) == shown


@pytest.mark.parametrize("text", ["web-01", "café 日本 🚀", r"C:\temp\n", "a b", ""])
def test_ordinary_text_is_shown_as_it_is(text: str) -> None:
    assert printable(text) == text


def test_a_cell_with_a_newline_stays_in_its_row() -> None:
    rows = [{"id": "j1", "command": "true\nFORGED-ROW  deploy  complete"}, {"id": "j2"}]
    lines = table(rows, ("id", "command")).splitlines()
    assert len(lines) == 3
    assert lines[1] == "j1  true\\nFORGED-ROW  deploy  complete"
    assert not any(line.startswith("FORGED-ROW") for line in lines)


def test_a_node_table_writes_out_names_and_reasons() -> None:
    job = {
        "job_id": "j1",
        "state": "complete",
        "nodes": {
            "web\nFORGED": {"state": "nacked", "exit_status": None, "reason": "no\nFORGED"},
        },
        "summary": {"nacked": 1},
    }
    lines = jobview.node_table(job).splitlines()
    assert len(lines) == 2 and lines[1].startswith("web\\nFORGED  nacked")
    assert lines[1].endswith("no\\nFORGED")


def test_the_lines_of_a_job_write_out_what_the_server_sent() -> None:
    job = {
        "job_id": "j1\x1b[2K",
        "state": "running\n",
        "summary": {"running\nFORGED": 1},
        "batch": {"window": "3\n", "wait_s": 0, "max_failures": None, "failures": 0},
    }
    assert jobview.headline(job) == "job j1\\x1b[2K running\\n: 1 running\\nFORGED"
    line = jobview.progress_line(job, 1.0)
    assert "\n" not in line and "\x1b" not in line
    assert line.endswith("; batch of 3\\n")


def test_a_nodes_facts_and_tags_cannot_forge_rows(capsys: pytest.CaptureFixture[str]) -> None:
    node = {
        "name": "node-1",
        "online": True,
        "key_state": "accepted",
        "job_id": None,
        "job_state": None,
        "command_endpoint": "tcp://127.0.0.1:1",
        "last_seen_ms_ago": 10,
        "tags": ["web\nFORGED-ROW"],
        "facts": {"role": "web\nFORGED-ROW  online  accepted"},
    }
    show_nodes({"nodes": [node]}, as_json=False)
    out = capsys.readouterr().out
    assert not any(line.startswith("FORGED-ROW") for line in out.splitlines()), out
    assert "role=web\\nFORGED-ROW" in out


def test_json_output_stays_exact(capsys: pytest.CaptureFixture[str]) -> None:
    show_jobs({"jobs": [{"command": "true\nx"}], "total": 1}, as_json=True)
    assert '"command": "true\\nx"' in capsys.readouterr().out


# --- a reply of an unexpected shape -------------------------------------------------------

LISTED = {
    "job_id": "j1",
    "command": "true",
    "state": "complete",
    "targets": 1,
    "summary": {"succeeded": 1},
    "created_ms": 0,
}


def test_a_job_listed_as_expected_is_shown(capsys: pytest.CaptureFixture[str]) -> None:
    with reading_reply():
        show_jobs({"jobs": [LISTED], "total": 1}, as_json=False)
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("j1  true     complete  1      1 succeeded")
    assert out[2] == "1 of 1 jobs"


@pytest.mark.parametrize(
    "result",
    [
        "a string",
        {"jobs": [{"job_id": "x"}], "total": 1},
        {"jobs": None, "total": 0},
        {"jobs": [{**LISTED, "created_ms": "yesterday"}], "total": 1},
        {"jobs": [{**LISTED, "summary": ["done"]}], "total": 1},
    ],
)
def test_a_reply_of_another_shape_is_one_line_and_exit_10(
    capsys: pytest.CaptureFixture[str], result: Any
) -> None:
    with pytest.raises(typer.Exit) as exited, reading_reply():
        show_jobs(result, as_json=False)
    assert exited.value.exit_code == Exit.ERROR
    err = capsys.readouterr().err
    assert err.startswith("error: unexpected reply from the server (another version?): ")
    assert err.count("\n") == 1, err


def test_the_detail_of_an_unexpected_reply_is_written_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(typer.Exit), reading_reply():
        raise KeyError("job\nFORGED" + "x" * 1000)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "job\\nFORGED" in err
    assert len(err) < 300


@pytest.mark.parametrize("exc", [RuntimeError("a bug"), NotFound("no such job")])
def test_other_errors_pass_through_reading_a_reply(exc: Exception) -> None:
    with pytest.raises(type(exc)), reading_reply():
        raise exc


# --- a client timeout that is not a number of seconds ------------------------------------


@pytest.mark.parametrize("timeout_s", [math.inf, -math.inf, math.nan, 0.0, -1.0, 86400.5, 1e17])
def test_a_client_timeout_out_of_range_is_refused(timeout_s: float) -> None:
    problems = list(userconfig.ClientSection(timeout_s=timeout_s).check())
    assert [name for name, _ in problems] == ["timeout_s"]
    assert "greater than 0 and at most 86400" in problems[0][1]


@pytest.mark.parametrize("timeout_s", [0.001, 10.0, 86400.0])
def test_a_client_timeout_in_range_is_taken(timeout_s: float) -> None:
    assert list(userconfig.ClientSection(timeout_s=timeout_s).check()) == []


def _config(tmp_path: Path, timeout: str) -> Path:
    files.save(generate("server", "server"), tmp_path, force=True)
    files.save(generate("alice", "user"), tmp_path, force=True)
    path = tmp_path / "client.toml"
    path.write_text(
        "[client]\n"
        'server = "tcp://127.0.0.1:9"\n'
        f'server_key = "{tmp_path / "server.pub"}"\n'
        f'user_key = "{tmp_path / "alice.key"}"\n'
        f"timeout_s = {timeout}\n"
    )
    return path


@pytest.mark.parametrize("timeout", ["inf", "nan", "-inf", "1e17"])
def test_a_config_file_with_an_unusable_timeout_is_a_config_error(
    tmp_path: Path, timeout: str
) -> None:
    with pytest.raises(ConfigError, match=r"client\.timeout_s"):
        userconfig.load(_config(tmp_path, timeout))


def test_an_unusable_timeout_from_the_environment_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PUSHJOBS_CLIENT__TIMEOUT_S", "inf")
    with pytest.raises(ConfigError, match="timeout_s"):
        userconfig.load(_config(tmp_path, "2.0"))


def test_a_usable_timeout_is_kept(tmp_path: Path) -> None:
    assert userconfig.load(_config(tmp_path, "2.5")).timeout_s == 2.5


# --- --timeout, --vote-timeout and --batch-wait typed at the command line ----------------


def _job(**options: Any) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "quorum": "100%",
        "timeout": None,
        "vote_timeout": None,
        "capture": False,
        "cwd": None,
        "env": None,
        "secret_env": None,
        "env_file": None,
        "batch": None,
        "batch_wait": None,
        "max_failures": None,
    }
    return job_params("true", ["node-1"], **{**defaults, **options})


@pytest.mark.parametrize("option", ["timeout", "vote_timeout"])
@pytest.mark.parametrize("value", [math.inf, math.nan, -math.inf, 0.0])
def test_a_timeout_option_that_is_not_a_finite_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], option: str, value: float
) -> None:
    with pytest.raises(typer.Exit) as exited:
        _job(**{option: value})
    assert exited.value.exit_code == Exit.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"error: --{option.replace('_', '-')} must be a finite number")
    assert str(value) in err


@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0])
def test_a_batch_wait_that_is_not_a_finite_number_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], value: float
) -> None:
    with pytest.raises(typer.Exit) as exited:
        batch_params("2", value, None)
    assert exited.value.exit_code == Exit.USAGE
    assert "--batch-wait must be a finite number" in capsys.readouterr().err


def test_finite_job_timings_are_sent() -> None:
    params = _job(timeout=60.0, vote_timeout=5.0, batch="2", batch_wait=0.0)
    assert (params["timeout_s"], params["vote_timeout_s"], params["batch_wait_s"]) == (
        60.0,
        5.0,
        0.0,
    )


def test_a_servers_refusal_is_one_line_whatever_it_echoes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    @render.handle_errors
    def refused() -> None:
        raise ApiError("no job 'x\nFORGED-ROW'", code="not_found")

    with pytest.raises(typer.Exit):
        refused()
    assert capsys.readouterr().err == "error: no job 'x\\nFORGED-ROW'\n"
