"""The CLI's exit codes against a real server: the same failure, the same code."""

from __future__ import annotations

from pathlib import Path

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


# Every command with a bad input, against a real server, and the code the table
# (docs/operating.md#exit-codes) gives it. ``{job}`` is a finished job, ``{root}`` the
# fleet's directory (its log is ``{root}/log.db``), ``{missing}`` a path with nothing there.
WALK: list[tuple[str, Exit]] = [
    # job
    ("job start true nosuch-node", Exit.NOT_FOUND),
    ("job start true web-*", Exit.NOT_FOUND),
    ("job start true os=", Exit.USAGE),
    ("job start true node-1 --quorum 200%", Exit.USAGE),
    ("job start true node-1 --timeout 0", Exit.USAGE),
    ("job start true node-1 --timeout 1e12", Exit.USAGE),  # the server's bound: a year
    ("job start true node-1 --busy-wait soon", Exit.USAGE),
    ("job start true node-1 --busy-wait 400d", Exit.USAGE),  # the server's bound
    ("job start true node-1 --env BAD", Exit.USAGE),
    ("job start true node-1 --env-file {missing}", Exit.NOT_FOUND),  # was 2
    ("job start true node-1 --env-file {root}", Exit.USAGE),  # a directory: a bad argument
    ("job start true node-1 --batch-wait 1", Exit.USAGE),
    ("job start true node-1 --batch abc", Exit.USAGE),
    ("job start not-whitelisted node-1", Exit.QUORUM_FAILED),
    ("job start", Exit.USAGE),
    ("job list --state bogus", Exit.USAGE),
    ("job list --limit 0", Exit.USAGE),
    ("job status nosuch", Exit.NOT_FOUND),
    ("job output nosuch node-1", Exit.NOT_FOUND),
    ("job output {job} nosuch-node", Exit.NOT_FOUND),
    ("job output {job} node-1 --channel bogus", Exit.USAGE),
    ("job abort nosuch", Exit.NOT_FOUND),
    ("job abort {job}", Exit.ERROR),  # ended: refused (was 1, "part of it failed")
    ("job nosuch", Exit.USAGE),
    # key
    ("key show nosuch", Exit.NOT_FOUND),
    ("key accept nosuch", Exit.NOT_FOUND),
    ("key accept nosuch-*", Exit.NOT_FOUND),
    ("key reject nosuch", Exit.NOT_FOUND),
    ("key delete nosuch --yes", Exit.NOT_FOUND),
    ("key role nosuch admin", Exit.NOT_FOUND),
    ("key role admin superuser", Exit.USAGE),
    ("key role node-1 admin", Exit.USAGE),  # only users have roles
    ("key add {missing}", Exit.NOT_FOUND),  # was 1
    ("key add {root}/keys/node-1.pub --role admin", Exit.USAGE),  # a node has no role
    ("key list --state bogus", Exit.USAGE),
    # node
    ("node status nosuch", Exit.NOT_FOUND),
    ("node list os=", Exit.USAGE),
    # schedule
    ("schedule show nosuch", Exit.NOT_FOUND),
    ("schedule pause nosuch", Exit.NOT_FOUND),
    ("schedule resume nosuch", Exit.NOT_FOUND),
    ("schedule delete nosuch", Exit.NOT_FOUND),
    ("schedule history nosuch", Exit.NOT_FOUND),
    ("schedule add true node-1", Exit.USAGE),  # no trigger
    ("schedule add true node-1 --cron bogus", Exit.USAGE),
    ("schedule add true node-1 --in soon", Exit.USAGE),
    ("schedule add true node-1 --at 2000-01-01T00:00:00", Exit.USAGE),  # never fires
    ("schedule add true node-1 --at notatime", Exit.USAGE),
    ("schedule add true node-1 --at 2100-01-01T00:00 --tz Nowhere/City", Exit.USAGE),
    ("schedule add true node-1 --in 1h --catch-up bogus", Exit.USAGE),
    ("schedule add true node-1 --in 1h --busy-wait soon", Exit.USAGE),
    # server, config
    ("server status --server not-an-endpoint", Exit.CONFIG),
    ("server list --server not-an-endpoint", Exit.CONFIG),
    ("job list --config {missing}", Exit.CONFIG),
    # the ordered log, read where the server keeps it
    ("log tail nosuch-topic --log {root}/log.db", Exit.NOT_FOUND),
    ("log compact nosuch-topic --log {root}/log.db", Exit.NOT_FOUND),
    ("log tail events --log {missing}", Exit.NOT_FOUND),  # was 10
    ("log topics --log {missing}", Exit.NOT_FOUND),  # was 10
    ("log stats --log {missing}", Exit.NOT_FOUND),  # was 10
    ("archive --log {missing} --out {root}/archive", Exit.NOT_FOUND),  # was 10
    ("nosuch-command", Exit.USAGE),
]


def test_every_command_with_a_bad_input_exits_as_the_table_says(shared_fleet: Fleet) -> None:
    job = shared_fleet.start("true", ["node-1"])["job_id"]
    shared_fleet.wait_job(job)
    missing = shared_fleet.root / "nothing-here"
    wrong = []
    for line, want in WALK:
        args = [
            word.format(job=job, root=shared_fleet.root, missing=missing) for word in line.split()
        ]
        code, err = cli(shared_fleet, *args)
        if code != want:
            wrong.append(f"{line}: exit {code}, the table says {int(want)} ({err.strip()[-200:]})")
    assert not wrong, "\n".join(wrong)


def test_a_client_config_naming_a_missing_key_file_is_a_configuration_error(
    shared_fleet: Fleet, tmp_path: Path
) -> None:
    """A missing file named by a setting is the config's fault (9), not a missing input (8)."""
    config = tmp_path / "client.toml"
    text = shared_fleet.sandbox.client_config_path.read_text()
    user_key = str(shared_fleet.root / "keys" / f"{shared_fleet.sandbox.user}.key")
    assert user_key in text
    config.write_text(text.replace(user_key, str(tmp_path / "gone.key")))
    result = runner.invoke(app, ["job", "list"], env={"PUSHJOBS_CONFIG": str(config)})
    assert result.exit_code == Exit.CONFIG, result.stderr
    assert "client.user_key" in result.stderr and "gone.key" in result.stderr
