"""``pushjobs log``: topics, tail, compact, stats, on a real sqlite log file."""

from __future__ import annotations

import json
import os
import signal

import orjson
import pytest
from typer.testing import CliRunner

from pushjobs.cli.log_commands import app
from pushjobs.log import topics
from pushjobs.log.sqlite.sqlite_log import SqliteLog

runner = CliRunner()


@pytest.fixture
def path(tmp_path, monkeypatch):
    monkeypatch.delenv("PUSHJOBS_LOG", raising=False)
    monkeypatch.setenv("PUSHJOBS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PUSHJOBS_CONFIG_DIR", str(tmp_path / "no-etc"))  # no server here
    path = tmp_path / "log.db"
    log = SqliteLog(path)
    try:
        names = topics.create_standard_topics(log)
        log.append_batch(
            names.events,
            [
                ("job:1", orjson.dumps({"kind": "job_created", "job_id": "1"})),
                ("node:web-01", b"\x00\xffnot json"),
                ("job:1", orjson.dumps({"kind": "job_state", "state": "running"})),
            ],
        )
        log.append_batch(names.assignments, [("job:1", b'{"state": "new"}'), ("job:1", None)])
        log.commit("archiver", names.events, 1)
    finally:
        log.close()
    return path


def invoke(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


def test_topics(path):
    result = invoke("topics", "--log", path, "--json")
    assert result.exit_code == 0, result.output
    rows = {row["topic"]: row for row in json.loads(result.stdout)}
    assert sorted(rows) == sorted(topics.names().all())
    events = rows["pushjobs.events"]
    assert (events["records"], events["start"], events["end"], events["compacted"]) == (
        3,
        0,
        3,
        False,
    )
    human = invoke("topics", "--log", path).stdout
    assert human.splitlines()[0].split() == ["TOPIC", "POLICY", "RECORDS", "BYTES", "START", "END"]
    assert "compacted, retention 900s" in human


def test_tail_renders_json_repr_and_tombstones(path):
    result = invoke("tail", "events", "--log", path)  # the short name of a standard topic
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("0  2") and lines[0].endswith(
        'job:1  {"kind":"job_created","job_id":"1"}'
    )
    assert lines[1].endswith("node:web-01  b'\\x00\\xffnot json'")
    tomb = invoke("tail", "assignments", "--log", path).stdout.splitlines()
    assert tomb[1].endswith("job:1  <tombstone>")


def test_tail_json_lines_from_an_offset_with_a_limit(path):
    result = invoke("tail", "pushjobs.events", "--from", 1, "--limit", 2, "--json", "--log", path)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["offset"] for r in rows] == [1, 2]
    assert rows[0]["value_repr"] == repr(b"\x00\xffnot json") and "value" not in rows[0]
    assert rows[1]["value"] == {"kind": "job_state", "state": "running"}
    assert rows[1]["key"] == "job:1" and rows[1]["epoch"] == 0
    last = invoke("tail", "events", "--limit", 1, "--json", "--log", path).stdout.splitlines()
    assert [json.loads(line)["offset"] for line in last] == [2]
    tomb = invoke("tail", "assignments", "--from", 1, "--json", "--log", path).stdout
    assert json.loads(tomb) | {"timestamp_ms": 0} == {
        "offset": 1,
        "timestamp_ms": 0,
        "key": "job:1",
        "epoch": 0,
        "value": None,
        "tombstone": True,
    }


def test_tail_errors(path):
    result = invoke("tail", "nope", "--log", path)
    assert result.exit_code == 8 and "unknown topic 'nope'" in result.stderr
    result = invoke("tail", "events", "--from", 99, "--log", path)
    assert result.exit_code == 10 and "past the end" in result.stderr


def test_compact(path):
    result = invoke("compact", "assignments", "--log", path, "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    # The tombstone stays until its delete retention ends; the value it deleted goes.
    assert (row["topic"], row["before"], row["after"], row["removed"]) == (
        "pushjobs.assignments",
        2,
        1,
        1,
    )
    everything = json.loads(invoke("compact", "--log", path, "--json").stdout)
    assert sorted(r["topic"] for r in everything) == sorted(topics.names().all())
    assert "REMOVED" in invoke("compact", "--log", path).stdout


def test_stats_reports_lag_per_group(path):
    result = invoke("stats", "--log", path, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {t["topic"]: t["records"] for t in data["topics"]}["pushjobs.events"] == 3
    (group,) = data["groups"]
    assert group | {"owner": None} == {
        "group": "archiver",
        "topic": "pushjobs.events",
        "committed": 1,
        "end": 3,
        "lag": 2,
        "owner": None,
        "epoch": 0,
    }
    human = invoke("stats", "--log", path).stdout
    assert "archiver  pushjobs.events  1          3    2" in human
    only = json.loads(invoke("stats", "--log", path, "--json", "--group", "other").stdout)
    assert only["groups"] == []


def test_log_location_from_the_environment_and_missing_logs(path, tmp_path):
    result = invoke("topics", "--json", env={"PUSHJOBS_LOG": str(path)})
    assert result.exit_code == 0 and len(json.loads(result.stdout)) == len(topics.names().all())
    missing = tmp_path / "missing.db"
    result = invoke("stats", "--log", missing)
    assert result.exit_code == 8 and "no log file here" in result.stderr  # a missing input
    assert not missing.exists()
    result = invoke("topics", "--log", path, "--backend", "postgres")
    assert result.exit_code == 9 and "must be one of" in result.stderr


def test_help_has_examples():
    for command in ("topics", "tail", "compact", "stats"):
        result = invoke(command, "--help")
        assert result.exit_code == 0 and "pushjobs log " + command in result.stdout


def test_tail_follow_prints_new_records_until_interrupted(path, children):
    tail = children(
        "-c",
        "from pushjobs.cli.app import main; main()",
        "log",
        "tail",
        "events",
        "--follow",
        "--json",
        "--interval",
        "0.02",
        "--log",
        str(path),
    )
    assert [json.loads(tail.next_line())["offset"] for _ in range(3)] == [0, 1, 2]
    log = SqliteLog(path)
    try:
        log.append("pushjobs.events", "node:web-02", b'{"kind": "node_online"}')
    finally:
        log.close()
    assert json.loads(tail.next_line())["value"] == {"kind": "node_online"}
    os.kill(tail.pid, signal.SIGINT)
    assert tail.proc.wait(timeout=10) == 0


def test_on_the_servers_host_the_default_is_the_servers_log(path, tmp_path, monkeypatch):
    # docs/fleet.md's layout: the log named in the server's config, not under $PUSHJOBS_HOME.
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "server.toml").write_text(
        f'[server]\nname = "server"\n[log]\nbackend = "sqlite"\npath = "{path}"\n'
    )
    monkeypatch.setenv("PUSHJOBS_CONFIG_DIR", str(etc))
    result = invoke("topics", "--json")
    assert result.exit_code == 0, result.output
    assert "pushjobs.events" in {row["topic"] for row in json.loads(result.stdout)}
    # An explicit --log still wins, and without the server's config the default is home's.
    assert invoke("topics", "--log", tmp_path / "nope.db").exit_code != 0
    monkeypatch.setenv("PUSHJOBS_CONFIG_DIR", str(tmp_path / "empty"))
    assert invoke("topics").exit_code != 0  # $PUSHJOBS_HOME/log.db does not exist
