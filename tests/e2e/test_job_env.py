"""A job's env, its command's captures and its secrets, end to end (issue 15, cases 5, 6
and 8): the ``pushjobs`` CLI as a process, against a real server and real agents.

The fleet's whitelist has commands that show what reached them (a file in
``$PUSHJOBS_HOME``), entries that opt in to what the defaults refuse, and a ``true``
that a job's ``PATH`` could swap for ``evil/true`` (which leaves a mark). node-3's
``agent.toml`` narrows its env allow list to ``APP_*``.
"""

from __future__ import annotations

import json
import secrets
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pushjobs.cli.exitcodes import Exit
from pushjobs.errors import ApiError
from pushjobs.testbed.sandbox import DEFAULT_WHITELIST, Sandbox, toml_text
from tests.e2e.conftest import Fleet, run_cli

WHITELIST = {
    **DEFAULT_WHITELIST,
    "show-env": 'sh -c \'printf %s "$GREETING" > "$PUSHJOBS_HOME/greeting-$PUSHJOBS_NODE"\'',
    "keep-secret": ('sh -c \'printf %s "$DB_PASSWORD" > "$PUSHJOBS_HOME/secret-$PUSHJOBS_NODE"\''),
    "cat-(?P<f>.+)": "cat {root}/files/{f}",
    "restart-(?P<svc>.+)": "echo restart {svc}",
}
# Entries written as tables: each opts in to one thing the defaults refuse.
ENTRIES: dict[str, dict[str, object]] = {
    "with-path": {"command": "true", "env": ["PATH"]},
    "tree-(?P<p>.+)": {"command": "ls {root}/files/{p}", "allow_dotdot": True},
}
EVIL = '#!/bin/sh\necho pwned > "$PUSHJOBS_HOME/pwned-$PUSHJOBS_NODE"\n'


def whitelist_text(root: Path) -> str:
    commands = {name: line.replace("{root}", str(root)) for name, line in WHITELIST.items()}
    lines = [toml_text({"commands": commands})]
    for name, entry in ENTRIES.items():
        table = {
            k: v.replace("{root}", str(root)) if isinstance(v, str) else v for k, v in entry.items()
        }
        lines.append(toml_text({f'commands."{name}"': table}))
    return "\n".join(lines)


@pytest.fixture(scope="module")
def env_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    sandbox = Sandbox(tmp_path_factory.mktemp("env") / "fleet").prepare()
    root = sandbox.root
    sandbox.whitelist_path.write_text(whitelist_text(root))
    agent_toml = root / "agents" / "node-3.toml"
    tables = tomllib.loads(agent_toml.read_text())
    tables["env"] = {"allow": ["APP_*"]}
    agent_toml.write_text(toml_text(tables))
    (root / "files").mkdir()
    (root / "files" / "notes.txt").write_text("just notes\n")
    (root / "secret").write_text("TOPSECRET\n")
    (root / "evil").mkdir()
    (root / "evil" / "true").write_text(EVIL)
    (root / "evil" / "true").chmod(0o755)
    fleet = Fleet(sandbox)
    try:
        sandbox.start_server()
        sandbox.start_agents()
        fleet.wait_online()
        yield fleet
    finally:
        fleet.close()


def cli(fleet: Fleet, *args: str) -> tuple[int, str, str]:
    return run_cli(fleet.sandbox.client_config_path, *args)


def start_json(fleet: Fleet, *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = cli(fleet, "job", "start", *args, "--json")
    assert out, err
    job: dict[str, Any] = json.loads(out)
    return code, job


# --- case 5: env that changes what runs ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LD_PRELOAD", "/tmp/x.so"),
        ("LD_AUDIT", "/tmp/x.so"),
        ("PATH", "{root}/evil"),
        ("PYTHONPATH", "/tmp"),
        ("BASH_ENV", "/tmp/x.sh"),
        ("IFS", "/"),
    ],
)
def test_env_that_would_change_what_runs_is_nacked_by_name(
    env_fleet: Fleet, name: str, value: str
) -> None:
    root = env_fleet.root
    value = value.replace("{root}", str(root))
    code, out, _ = cli(env_fleet, "job", "start", "true", "node-2", "--env", f"{name}={value}")
    assert code == Exit.QUORUM_FAILED
    assert "nacked" in out and f"env {name} is refused" in out  # the operator sees why
    job_id = out.strip().splitlines()[-1].split()[1]
    _, status, _ = cli(env_fleet, "job", "status", job_id, "--json")
    node = json.loads(status)["nodes"]["node-2"]
    assert node["state"] == "nacked" and name in node["reason"]
    assert not (root / "pwned-node-2").exists()


def test_an_invalid_name_is_refused_by_the_cli_and_by_the_server(env_fleet: Fleet) -> None:
    before = env_fleet.call("job.list")["total"]
    code, _, err = cli(env_fleet, "job", "start", "true", "node-2", "--env", "=x")
    assert code == Exit.USAGE and "--env expects NAME=VALUE" in err
    with pytest.raises(ApiError, match="'' is not a variable name") as info:
        env_fleet.start("true", ["node-2"], env={"": "x"})
    assert info.value.code == "bad_request"
    assert env_fleet.call("job.list")["total"] == before


def test_ordinary_env_reaches_the_command(env_fleet: Fleet) -> None:
    code, _, err = cli(env_fleet, "job", "start", "show-env", "node-1", "--env", "GREETING=hi")
    assert code == Exit.OK, err
    assert (env_fleet.root / "greeting-node-1").read_text() == "hi"


def test_the_agents_own_allow_list_decides_on_its_node(env_fleet: Fleet) -> None:
    code, job = start_json(env_fleet, "show-env", "node-1", "node-3", "--env", "GREETING=hi")
    assert code == Exit.QUORUM_FAILED
    assert job["nodes"]["node-1"]["state"] == "was_ready"
    node3 = job["nodes"]["node-3"]
    assert node3["state"] == "nacked"
    assert node3["reason"] == "env GREETING is not in this node's env allow list"


def test_a_whitelist_entry_may_let_path_through_on_purpose(env_fleet: Fleet) -> None:
    root = env_fleet.root
    code, _, err = cli(
        env_fleet, "job", "start", "with-path", "node-1", "--env", f"PATH={root}/evil"
    )
    assert code == Exit.OK, err
    assert (root / "pwned-node-1").read_text() == "pwned\n"  # the opt-in is honoured


# --- case 6: captures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("cat-../secret", "contains a '..' path segment"),
        ("cat-a/../../secret", "contains a '..' path segment"),
        ("restart---help", "starts with '-'"),
    ],
)
def test_captures_that_climb_out_or_become_options_are_nacked(
    env_fleet: Fleet, command: str, problem: str
) -> None:
    code, job = start_json(env_fleet, command, "node-1", "--capture")
    assert code == Exit.QUORUM_FAILED
    node = job["nodes"]["node-1"]
    assert node["state"] == "nacked" and problem in node["reason"]
    assert command in node["reason"]


def test_safe_captures_and_an_opted_in_entry_run(env_fleet: Fleet) -> None:
    code, _, _ = cli(env_fleet, "job", "start", "cat-notes.txt", "node-1", "--capture")
    assert code == Exit.OK
    code, out, _ = cli(env_fleet, "job", "start", "tree-..", "node-1", "--capture", "--json")
    assert code == Exit.OK
    _, listing, _ = cli(env_fleet, "job", "output", json.loads(out)["job_id"], "node-1")
    assert "secret" in listing.split()  # the entry allowed '..': it listed the parent


# --- case 8: secrets ----------------------------------------------------------------------


def assert_nowhere(fleet: Fleet, value: str) -> None:
    """``value`` is in no byte of the log (the database and its WAL) nor any process log."""
    root = fleet.root
    for path in [root / "log.db", root / "log.db-wal", *sorted((root / "logs").glob("*"))]:
        if path.exists():
            assert value.encode() not in path.read_bytes(), path


def test_a_secret_reaches_the_node_and_nothing_else(env_fleet: Fleet) -> None:
    value = "pw-" + secrets.token_hex(12)
    code, job = start_json(
        env_fleet, "keep-secret", "node-1", "--secret-env", f"DB_PASSWORD={value}"
    )
    assert code == Exit.OK
    assert (env_fleet.root / "secret-node-1").read_text() == value
    assert job["options"]["secret_env"] == {"DB_PASSWORD": "<secret>"}
    for args in (
        ("job", "status", job["job_id"], "--json"),
        ("job", "status", job["job_id"]),
        ("job", "list", "--json"),
    ):
        code, out, err = cli(env_fleet, *args)
        assert code == Exit.OK and value not in out + err
    assert_nowhere(env_fleet, value)


def test_an_env_file_is_sent_as_secrets(env_fleet: Fleet, tmp_path: Path) -> None:
    value = "pw-" + secrets.token_hex(12)
    env_file = tmp_path / "db.env"
    env_file.write_text(f"# the database\nDB_PASSWORD={value}\n")
    code, job = start_json(env_fleet, "keep-secret", "node-2", "--env-file", str(env_file))
    assert code == Exit.OK and value not in json.dumps(job)
    assert (env_fleet.root / "secret-node-2").read_text() == value
    assert_nowhere(env_fleet, value)


def test_a_refused_secret_is_named_not_shown(env_fleet: Fleet) -> None:
    value = "pw-" + secrets.token_hex(12)
    code, job = start_json(env_fleet, "true", "node-2", "--secret-env", f"LD_PRELOAD={value}")
    assert code == Exit.QUORUM_FAILED
    assert "LD_PRELOAD" in job["nodes"]["node-2"]["reason"]
    assert value not in json.dumps(job)


def test_the_log_and_the_key_registry_are_private(env_fleet: Fleet) -> None:
    sandbox = env_fleet.sandbox
    for path in (sandbox.root / "log.db", sandbox.root / "log.db-wal", sandbox.registry_path):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
