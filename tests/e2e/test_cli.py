"""The ``pushjobs`` job and node commands, and the quickstart, against real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pushjobs.cli.app import app
from pushjobs.cli.exitcodes import Exit
from tests.e2e.conftest import Fleet, impatient_client_config

runner = CliRunner()


def cli(fleet: Fleet, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(
        app, list(args), env={"PUSHJOBS_CONFIG": str(fleet.sandbox.client_config_path)}
    )
    return result.exit_code, result.stdout, result.stderr


def test_job_start_waits_and_shows_every_node(shared_fleet: Fleet) -> None:
    code, out, _ = cli(shared_fleet, "job", "start", "hello", "node-*", "--capture")
    assert code == Exit.OK
    for name in shared_fleet.sandbox.nodes:
        assert name in out
    assert "complete: 3 succeeded" in out


def test_failed_node_exits_1_and_its_output_can_be_read(shared_fleet: Fleet) -> None:
    code, out, _ = cli(shared_fleet, "job", "start", "fail-on-2", "node-1", "node-2", "--json")
    assert code == Exit.FAILED
    job = json.loads(out)
    assert job["nodes"]["node-2"]["exit_status"] == 3
    code, out, _ = cli(
        shared_fleet, "job", "output", job["job_id"], "node-2", "--channel", "stderr"
    )
    assert code == Exit.OK and out == "boom\n"


def test_a_node_name_nobody_has_is_refused_before_a_job_exists(shared_fleet: Fleet) -> None:
    before = shared_fleet.call("job.list")["total"]
    code, _, err = cli(shared_fleet, "job", "start", "uptime", "node-1", "web-99", "db-7")
    assert code == Exit.NOT_FOUND
    assert "no node named 'web-99', 'db-7'" in err
    assert shared_fleet.call("job.list")["total"] == before


def test_quorum_failed_exits_3(shared_fleet: Fleet) -> None:
    code, _, _ = cli(shared_fleet, "job", "start", "not-whitelisted", "node-1")
    assert code == Exit.QUORUM_FAILED


def test_timed_out_exits_4(shared_fleet: Fleet) -> None:
    code, out, _ = cli(shared_fleet, "job", "start", "sleep-30", "node-3", "--timeout", "0.5")
    assert code == Exit.TIMED_OUT
    assert "timed_out" in out


def test_nowait_then_status_watch_and_list(shared_fleet: Fleet) -> None:
    code, out, _ = cli(shared_fleet, "job", "start", "true", "node-1", "--nowait")
    assert code == Exit.OK
    job_id = out.strip()
    code, out, _ = cli(shared_fleet, "job", "status", job_id, "--watch", "--json")
    assert code == Exit.OK and json.loads(out)["state"] == "complete"
    code, out, _ = cli(shared_fleet, "job", "list", "--limit", "5")
    assert code == Exit.OK and job_id in out


def test_abort_of_a_finished_job_is_refused(shared_fleet: Fleet) -> None:
    job = shared_fleet.start("true", ["node-1"])
    shared_fleet.wait_job(job["job_id"])
    code, _, err = cli(shared_fleet, "job", "abort", job["job_id"])
    assert code == Exit.ERROR and "already ended" in err  # refused: 10, as the table says


def test_node_list_and_status(shared_fleet: Fleet) -> None:
    code, out, _ = cli(shared_fleet, "node", "list")
    assert code == Exit.OK and "3 of 3 nodes online" in out
    code, out, _ = cli(shared_fleet, "node", "status", "node-2", "--json")
    assert code == Exit.OK and json.loads(out)["nodes"][0]["online"] is True
    code, _, err = cli(shared_fleet, "node", "status", "ghost")
    assert code == Exit.NOT_FOUND and "ghost" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--quorum", "lots"], "quorum"),
        (["--env", "novalue"], "NAME=VALUE"),
        (["--timeout", "0"], "greater than 0"),
    ],
)
def test_bad_arguments_exit_2_before_calling_the_server(
    args: list[str], message: str, tmp_path: Path
) -> None:
    result = runner.invoke(
        app,
        ["job", "start", "true", "n1", *args],
        env={"PUSHJOBS_CONFIG": str(tmp_path / "none.toml")},
    )
    assert result.exit_code == Exit.USAGE
    assert message in result.stderr


def test_missing_client_config_says_what_to_create(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["node", "list"], env={"PUSHJOBS_CONFIG": str(tmp_path / "none.toml")}
    )
    assert result.exit_code == Exit.CONFIG
    assert "the CLI needs client.server" in result.stderr
    assert 'server_key = "' in result.stderr  # a sample to copy
    result = runner.invoke(app, ["node", "list", "--config", str(tmp_path / "nope.toml")])
    assert result.exit_code == Exit.CONFIG
    assert "file not found" in result.stderr


def test_unreachable_server_exits_6(shared_fleet: Fleet, tmp_path: Path) -> None:
    config = impatient_client_config(shared_fleet, tmp_path / "client.toml")
    result = runner.invoke(
        app, ["node", "list", "--server", "tcp://127.0.0.1:1"], env={"PUSHJOBS_CONFIG": str(config)}
    )
    assert result.exit_code == Exit.UNREACHABLE
    assert "no answer" in result.stderr


def test_quickstart_runs_a_real_job_and_leaves_nothing_behind(tmp_path: Path) -> None:
    work = tmp_path / "qs"
    env = {**os.environ, "PUSHJOBS_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "pushjobs.cli.app", "quickstart", "--dir", str(work), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["job"]["summary"] == {"succeeded": 3}
    assert result["output"]["node-2"] == [f"hello from node-2, job {result['job']['job_id']}"]
    # Every process it started is gone: their ports are free and no log grows.
    logs = sorted(p.name for p in (work / "logs").iterdir())
    assert logs == ["node-1.log", "node-2.log", "node-3.log", "server.log"]
    for log in (work / "logs").iterdir():
        assert log.read_text().rstrip().endswith("stopped"), log.read_text()[-500:]
