"""The CLI's exit codes against a real server: the same failure, the same code."""

from __future__ import annotations

from typer.testing import CliRunner

from pushjobs.cli.app import app
from pushjobs.cli.exitcodes import Exit
from tests.e2e.conftest import Fleet

runner = CliRunner()


def cli(fleet: Fleet, *args: str) -> tuple[int, str]:
    env = {"PUSHJOBS_CONFIG": str(fleet.sandbox.client_config_path)}
    result = runner.invoke(app, list(args), env=env)
    assert "Traceback" not in result.stderr
    return result.exit_code, result.stderr


def test_nothing_found_is_8_whether_named_globbed_or_a_job(shared_fleet: Fleet) -> None:
    code, err = cli(shared_fleet, "job", "start", "true", "web-*")
    assert (code, "no node matches 'web-*'" in err) == (Exit.NOT_FOUND, True)
    code, _ = cli(shared_fleet, "job", "start", "true", "web-99")
    assert code == Exit.NOT_FOUND
    code, _ = cli(shared_fleet, "job", "status", "no-such-job")
    assert code == Exit.NOT_FOUND


def test_a_malformed_selector_is_a_usage_error(shared_fleet: Fleet) -> None:
    code, err = cli(shared_fleet, "job", "start", "true", "os=")
    assert code == Exit.USAGE and "bad query term" in err


def test_a_server_value_no_socket_accepts_is_a_configuration_error(shared_fleet: Fleet) -> None:
    code, err = cli(shared_fleet, "job", "list", "--server", "not-an-endpoint")
    assert code == Exit.CONFIG and "not-an-endpoint" in err
